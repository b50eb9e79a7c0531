//! Contract files that are not JSON, not JSON Schemas, or not laid out as contracts: `outbox contracts diff` (the
//! real binary) exits 2 with exactly one line on stderr starting with `error:`, prints nothing on stdout and
//! changes no file. Loading arbitrary bytes or arbitrary JSON as a contract never panics and fails, if it fails,
//! with a one-line error. (The differ itself is fuzzed with arbitrary JSON in outbox-core's
//! `contracts_differ_never_panics.rs`.)

use std::path::{Path, PathBuf};

use outbox_core::contracts::Contracts;
use proptest::prelude::*;

const VALID: &str = r#"{"type":"object","properties":{"id":{"type":"integer"}},"required":["id"]}"#;

/// A new empty directory, removed when the returned guard is dropped.
fn temp_dir() -> tempfile::TempDir {
    tempfile::Builder::new().prefix("outbox-bad-contracts-").tempdir().unwrap()
}

fn write(path: &Path, bytes: &[u8]) {
    std::fs::create_dir_all(path.parent().unwrap()).unwrap();
    std::fs::write(path, bytes).unwrap();
}

/// Every file under `dir` with its bytes, sorted.
fn files(dir: &Path) -> Vec<(PathBuf, Vec<u8>)> {
    let mut found = Vec::new();
    let mut stack = vec![dir.to_owned()];
    while let Some(dir) = stack.pop() {
        for entry in std::fs::read_dir(&dir).unwrap() {
            let path = entry.unwrap().path();
            if path.is_dir() {
                stack.push(path);
            } else {
                let bytes = std::fs::read(&path).unwrap();
                found.push((path, bytes));
            }
        }
    }
    found.sort();
    found
}

#[test]
fn files_that_are_not_json_or_not_schemas_exit_2_with_one_line_and_change_nothing() {
    let temp = temp_dir();
    let root = temp.path();
    let old = root.join("old");
    write(&old.join("order.placed/v1.schema.json"), VALID.as_bytes());
    let bad_folder = |name: &str, file: &str, bytes: &[u8]| {
        let dir = root.join(name);
        write(&dir.join("order.placed").join(file), bytes);
        dir
    };
    let cases: Vec<(PathBuf, &str)> = vec![
        (bad_folder("not-json", "v1.schema.json", b"{ nope"), "not JSON"),
        (bad_folder("empty", "v1.schema.json", b""), "not JSON"),
        (bad_folder("binary", "v1.schema.json", &[0xff, 0xfe, 0x00, 0x9c]), "v1.schema.json"),
        (bad_folder("number", "v1.schema.json", b"42"), "not a JSON Schema"),
        (bad_folder("string", "v1.schema.json", br#""a schema""#), "not a JSON Schema"),
        (bad_folder("array", "v1.schema.json", b"[1, 2]"), "not a JSON Schema"),
        (bad_folder("null", "v1.schema.json", b"null"), "not a JSON Schema"),
        (bad_folder("bad-type", "v1.schema.json", br#"{"type":"strange"}"#), "/type"),
        (bad_folder("bad-properties", "v1.schema.json", br#"{"properties":5}"#), "/properties"),
        (bad_folder("empty-any-of", "v1.schema.json", br#"{"anyOf":[]}"#), "/anyOf"),
        (bad_folder("dangling-ref", "v1.schema.json", br##"{"$ref":"#/$defs/Missing"}"##), "#/$defs/Missing"),
        (bad_folder("version-zero", "v0.schema.json", VALID.as_bytes()), "v<version>.schema.json"),
        (bad_folder("no-version", "schema.json", VALID.as_bytes()), "v<version>.schema.json"),
        (
            bad_folder("wrong-version", "v1.schema.json", br#"{"type":"object","x-outbox-version":2}"#),
            "x-outbox-version",
        ),
        (root.join("nowhere"), "nowhere"),
    ];
    let mut single = root.join("single-not-json.json");
    write(&single, b"not json at all");
    let mut all: Vec<(PathBuf, &str)> = cases;
    all.push((single.clone(), "not JSON"));
    single = root.join("single-not-a-schema.json");
    write(&single, b"[true]");
    all.push((single, "not a JSON Schema"));

    let before = files(root);
    for (new, problem) in &all {
        for (a, b) in [(old.as_path(), new.as_path()), (new.as_path(), old.as_path())] {
            let output = outbox_tests::outbox!().run([Path::new("contracts"), Path::new("diff"), a, b]);
            let stderr = String::from_utf8_lossy(&output.stderr);
            assert_eq!(output.status.code(), Some(2), "{}: {stderr}", b.display());
            assert_eq!(stderr.lines().count(), 1, "{}: not one line: {stderr}", b.display());
            assert!(stderr.starts_with("error: "), "{stderr}");
            assert!(stderr.contains(problem), "`{problem}` not in: {stderr}");
            assert!(output.stdout.is_empty(), "{}", String::from_utf8_lossy(&output.stdout));
        }
    }
    assert_eq!(files(root), before, "a file was changed");
}

/// JSON text built from schema keywords and values, valid or not.
fn json_like() -> impl Strategy<Value = String> {
    let token = prop::sample::select(vec![
        "{",
        "}",
        "[",
        "]",
        ":",
        ",",
        "\"type\"",
        "\"object\"",
        "\"properties\"",
        "\"$ref\"",
        "\"#\"",
        "\"#/$defs/A\"",
        "\"$defs\"",
        "\"A\"",
        "\"anyOf\"",
        "\"items\"",
        "\"required\"",
        "\"enum\"",
        "true",
        "false",
        "null",
        "0",
        "-1",
        "1e999",
        "\"x-sensitive\"",
        "\"x-outbox-version\"",
        "\"\\u0000\"",
        " ",
    ]);
    prop::collection::vec(token, 0..40).prop_map(|tokens| tokens.concat())
}

fn load_never_panics(bytes: &[u8]) -> Result<(), TestCaseError> {
    let temp = temp_dir();
    let dir = temp.path();
    write(&dir.join("order.placed/v1.schema.json"), bytes);
    let loaded = std::panic::catch_unwind(|| Contracts::load(dir).map(|_| ()));
    drop(temp);
    match loaded {
        Err(_) => Err(TestCaseError::fail("loading panicked")),
        Ok(Ok(())) => Ok(()),
        Ok(Err(error)) => {
            let message = error.to_string();
            prop_assert!(!message.contains('\n'), "not one line: {}", message);
            Ok(())
        }
    }
}

proptest! {
    #![proptest_config(ProptestConfig::with_cases(500))]

    #[test]
    fn arbitrary_bytes_load_or_fail_with_one_line(bytes in prop::collection::vec(any::<u8>(), 0..200)) {
        load_never_panics(&bytes)?;
    }

    #[test]
    fn arbitrary_json_like_text_loads_or_fails_with_one_line(text in json_like()) {
        load_never_panics(text.as_bytes())?;
    }
}
