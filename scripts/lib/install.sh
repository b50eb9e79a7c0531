# Sourced by the scripts: installing Debian packages when something is missing.
# Needs `say` defined by the caller.

apt_updated=0

# apt_install PACKAGE...: installs the packages as root, without starting any service they ship (their daemons
# would listen on every interface; the tests start their own servers on 127.0.0.1). As another user, says what to
# install and exits 1.
apt_install() {
  if [ "$(id -u)" -ne 0 ]; then
    say "missing: $* (Debian packages). Install them with: sudo apt-get install -y $*"
    exit 1
  fi
  if [ "$apt_updated" -eq 0 ]; then
    DEBIAN_FRONTEND=noninteractive apt-get update -qq
    apt_updated=1
  fi
  say "installing $*"
  local policy=/usr/sbin/policy-rc.d own_policy=0
  if [ ! -e "$policy" ]; then
    printf '#!/bin/sh\nexit 101\n' >"$policy" && chmod +x "$policy" && own_policy=1
  fi
  local status=0
  DEBIAN_FRONTEND=noninteractive apt-get install -y -qq --no-install-recommends "$@" >/dev/null || status=$?
  if [ "$own_policy" -eq 1 ]; then rm -f "$policy"; fi
  return "$status"
}

# ensure_c_toolchain: a C compiler, make and the C library headers, which the bundled SQLite (libsqlite3-sys),
# ring (rustls) and librdkafka (rdkafka, feature `kafka`, built from source with its configure script and make)
# compile with. Installs Debian's build-essential when one of them is missing.
ensure_c_toolchain() {
  if command -v cc >/dev/null 2>&1 && command -v make >/dev/null 2>&1 && [ -e /usr/include/stdio.h ]; then
    return 0
  fi
  apt_install build-essential
}

# ensure_node: Node.js and npm (the AsyncAPI test runs the official JavaScript parser).
ensure_node() {
  local missing=()
  command -v node >/dev/null 2>&1 || missing+=(nodejs)
  command -v npm >/dev/null 2>&1 || missing+=(npm)
  if [ "${#missing[@]}" -gt 0 ]; then
    apt_install "${missing[@]}"
  fi
}
