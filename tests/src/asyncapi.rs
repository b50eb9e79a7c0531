//! The official AsyncAPI parser (`@asyncapi/parser`, run by `tests/asyncapi/validate.mjs`), for the tests that
//! check a document with it.

use std::path::Path;
use std::process::{Command, Output};

/// Runs the parser on the document at `file`: exit 0 and a JSON summary on stdout when it accepts it, non-zero
/// with every diagnostic on stderr when it does not.
///
/// # Panics
///
/// When the parser is not installed (`npm ci --prefix tests/asyncapi`; `scripts/test-all.sh` does it) or `node`
/// cannot run, saying how to install them.
#[must_use]
pub fn parse(file: &Path) -> Output {
    let dir = Path::new(env!("CARGO_MANIFEST_DIR")).join("asyncapi");
    assert!(
        dir.join("node_modules/@asyncapi/parser").is_dir(),
        "@asyncapi/parser is not installed: run `npm ci --prefix tests/asyncapi` (scripts/test-all.sh does it)"
    );
    Command::new("node")
        .arg(dir.join("validate.mjs"))
        .arg(file)
        .output()
        .unwrap_or_else(|e| panic!("cannot run `node` ({e}): install Node.js 18 or later"))
}
