//! `docs/contract-rules.md` lists every rule with the text of `Rule::doc`. Run with `UPDATE_RULE_DOCS=1` to
//! rewrite the generated section after changing a rule.

use std::path::Path;

use outbox_core::contracts::Rule;

const START: &str = "<!-- rules:start";
const END: &str = "<!-- rules:end -->";

fn generated() -> String {
    let mut text = String::new();
    for rule in Rule::ALL {
        text.push_str(&format!("\n### `{}`\n\n", rule.id()));
        let paragraphs: Vec<String> =
            rule.doc().split("\n\n").map(|p| p.lines().map(str::trim).collect::<Vec<_>>().join(" ")).collect();
        text.push_str(&paragraphs.join("\n\n"));
        text.push('\n');
    }
    text.push('\n');
    text
}

#[test]
fn the_rules_document_lists_every_rule_with_its_doc() {
    let path = Path::new(env!("CARGO_MANIFEST_DIR")).join("../docs/contract-rules.md");
    let document = std::fs::read_to_string(&path).expect("docs/contract-rules.md");
    let start = document.find(START).expect("start marker");
    let start = start + document[start..].find('\n').unwrap() + 1;
    let end = document.find(END).expect("end marker");
    let expected = generated();
    if document[start..end] != expected {
        if std::env::var_os("UPDATE_RULE_DOCS").is_some() {
            std::fs::write(&path, format!("{}{expected}{}", &document[..start], &document[end..])).unwrap();
        } else {
            panic!("docs/contract-rules.md is out of date: run `UPDATE_RULE_DOCS=1 cargo test -p outbox-core --test contracts_rule_docs_are_in_sync`");
        }
    }
}
