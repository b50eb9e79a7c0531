#!/usr/bin/env bash
# Checks the workspace's one toolchain requirement: `rust-version` in [workspace.package] of Cargo.toml, which
# every crate inherits (none declares its own) and which is at least the `rust-version` every dependency
# declares, with every feature of every crate, on this platform. Run by CI (.ci/run); needs cargo and python3.
set -euo pipefail
cd "$(dirname "$0")/.."

host=$(rustc -vV | sed -n 's/^host: //p')
cargo metadata --locked --format-version 1 --all-features --filter-platform "$host" | python3 -c '
import json, re, sys, tomllib

def version(text):
    return tuple(int(part) for part in text.split("."))

def show(parts):
    return ".".join(str(part) for part in parts)

meta = json.load(sys.stdin)
with open("Cargo.toml", "rb") as manifest:
    required = tomllib.load(manifest).get("workspace", {}).get("package", {}).get("rust-version")
if required is None:
    sys.exit("check-rust-version: FAIL: Cargo.toml has no rust-version in [workspace.package]")
problems = []
packages = {package["id"]: package for package in meta["packages"]}
members = set(meta["workspace_members"])
for member in sorted(members):
    package = packages[member]
    with open(package["manifest_path"], "rb") as manifest:
        declared = tomllib.load(manifest)["package"].get("rust-version")
    if declared != {"workspace": True}:
        name = package["name"]
        problems.append(f"{name} does not inherit it (rust-version = {declared!r}; write rust-version.workspace = true)")

# Every package the workspace can build: normal, build and dev dependencies of the members, all features.
nodes = {node["id"]: node for node in meta["resolve"]["nodes"]}
reached, todo = set(), list(members)
while todo:
    current = todo.pop()
    if current in reached:
        continue
    reached.add(current)
    todo.extend(dep["pkg"] for dep in nodes[current]["deps"])
needs = sorted(
    ((version(packages[p]["rust_version"]), packages[p]["name"], packages[p]["version"])
     for p in reached - members if packages[p].get("rust_version")),
    reverse=True,
)
for need, name, release in needs:
    if need > version(required):
        problems.append(f"{name} {release} needs Rust {show(need)}")
rustc = re.search(r"(\d+\.\d+\.\d+)", sys.argv[1]).group(1)
if version(rustc) < version(required):
    problems.append(f"the installed rustc is {rustc}")
if problems:
    for problem in problems:
        print(f"check-rust-version: FAIL: rust-version {required}: {problem}", file=sys.stderr)
    sys.exit(1)
top = needs[0] if needs else ((0,), "nothing", "")
print(f"check-rust-version: ok: rust-version {required}, inherited by all {len(members)} crates; "
      f"the highest a dependency declares is {show(top[0])} ({top[1]} {top[2]})", file=sys.stderr)
' "$(rustc --version)"
