//! Findings and the report: one line per finding for people, JSON for machines.

use std::fmt;

use serde_json::{json, Value};

use super::{ContentModel, Mode, Rule, Side};

/// One difference between two contracts of an event type.
#[derive(Debug, Clone, PartialEq, Eq)]
#[non_exhaustive]
pub struct Finding {
    /// What changed.
    pub rule: Rule,
    /// The event type, e.g. `payment.paid`.
    pub event_type: String,
    /// The version of the new contract.
    pub version: u32,
    /// The version of the old contract it was compared with: `version` itself, or an older one for a new
    /// version and for `--transitive`.
    pub compared_with: u32,
    /// Where, as a JSON pointer into the new schema with every `$ref` resolved (`""` is the root).
    pub pointer: String,
    /// The old side, in a few words.
    pub old: String,
    /// The new side, in a few words.
    pub new: String,
    /// Whether readers on the new schema fail on events written under the old one.
    pub breaks_backward: bool,
    /// Whether readers on the old schema fail on events written under the new one.
    pub breaks_forward: bool,
    /// Whether the finding fails the check under the chosen mode (after `allowed`).
    pub breaking: bool,
    /// Whether an `--allow` entry or `allowed-breaks.txt` accepted it.
    pub allowed: bool,
}

impl Finding {
    /// The finding as one report line: `RULE_ID  event_type vN  /json/pointer  old -> new`.
    #[must_use]
    pub fn line(&self) -> String {
        let pointer = if self.pointer.is_empty() { "/" } else { &self.pointer };
        let mut line =
            format!("{}  {} v{}  {}  {} -> {}", self.rule, self.event_type, self.version, pointer, self.old, self.new);
        if self.compared_with != self.version {
            line.push_str(&format!("  (against v{})", self.compared_with));
        }
        if self.allowed {
            line.push_str("  [allowed]");
        }
        line
    }

    /// The sides this finding breaks.
    #[must_use]
    pub fn sides(&self) -> Vec<Side> {
        let mut sides = Vec::new();
        if self.breaks_backward {
            sides.push(Side::Backward);
        }
        if self.breaks_forward {
            sides.push(Side::Forward);
        }
        sides
    }

    fn to_json(&self) -> Value {
        json!({
            "rule": self.rule.id(),
            "event_type": self.event_type,
            "version": self.version,
            "compared_with": self.compared_with,
            "pointer": self.pointer,
            "old": self.old,
            "new": self.new,
            "breaks": self.sides().into_iter().map(Side::name).collect::<Vec<_>>(),
            "breaking": self.breaking,
            "allowed": self.allowed,
        })
    }
}

/// What [`diff`](super::diff) found: every difference, and whether any of them breaks the chosen mode.
///
/// `Display` prints the human report: the breaking findings, then the accepted and compatible ones, then a
/// summary line.
#[derive(Debug, Clone, PartialEq, Eq)]
#[non_exhaustive]
pub struct Report {
    /// Every difference, breaking or not, sorted by event type, version, pointer and rule.
    pub findings: Vec<Finding>,
    /// The mode the verdicts are for.
    pub mode: Mode,
    /// The content model the verdicts are for.
    pub content_model: ContentModel,
    /// Whether older versions were checked too.
    pub transitive: bool,
}

impl Report {
    /// No finding breaks the mode.
    #[must_use]
    pub fn is_compatible(&self) -> bool {
        !self.findings.iter().any(|f| f.breaking)
    }

    /// The findings that fail the check.
    pub fn breaking(&self) -> impl Iterator<Item = &Finding> {
        self.findings.iter().filter(|f| f.breaking)
    }

    /// The ids of the breaking findings' rules, sorted and deduplicated: handy in tests.
    #[must_use]
    pub fn breaking_rules(&self) -> Vec<Rule> {
        let mut rules: Vec<Rule> = self.breaking().map(|f| f.rule).collect();
        rules.sort();
        rules.dedup();
        rules
    }

    /// The report for machines (`--format json`).
    ///
    /// # Example
    ///
    /// ```
    /// use outbox_core::contracts::{diff_schemas, DiffOptions};
    /// use serde_json::json;
    ///
    /// let old = json!({ "type": "object", "properties": { "id": { "type": "integer" } }, "required": ["id"] });
    /// let new = json!({ "type": "object", "properties": { "id": { "type": "string" } }, "required": ["id"] });
    /// let report = diff_schemas(&old, &new, &DiffOptions::default());
    /// let json = report.to_json();
    /// assert_eq!(json["compatible"], false);
    /// assert_eq!(json["findings"][0]["rule"], "TYPE_CHANGED");
    /// assert_eq!(json["findings"][0]["pointer"], "/properties/id/type");
    /// ```
    pub fn to_json(&self) -> Value {
        json!({
            "compatible": self.is_compatible(),
            "mode": self.mode.name(),
            "content_model": self.content_model.name(),
            "transitive": self.transitive,
            "breaking": self.breaking().count(),
            "findings": self.findings.iter().map(Finding::to_json).collect::<Vec<_>>(),
        })
    }

    pub(crate) fn sort(&mut self) {
        self.findings.sort_by(|a, b| {
            (&a.event_type, a.version, a.compared_with, &a.pointer, a.rule).cmp(&(
                &b.event_type,
                b.version,
                b.compared_with,
                &b.pointer,
                b.rule,
            ))
        });
        self.findings.dedup();
    }
}

impl fmt::Display for Report {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        let breaking: Vec<&Finding> = self.breaking().collect();
        let allowed: Vec<&Finding> = self.findings.iter().filter(|x| x.allowed).collect();
        let compatible: Vec<&Finding> = self.findings.iter().filter(|x| !x.breaking && !x.allowed).collect();
        for finding in &breaking {
            writeln!(f, "{}", finding.line())?;
        }
        if !allowed.is_empty() {
            writeln!(f, "accepted breaks:")?;
            for finding in &allowed {
                writeln!(f, "  {}", finding.line())?;
            }
        }
        if !compatible.is_empty() {
            writeln!(f, "compatible changes:")?;
            for finding in &compatible {
                writeln!(f, "  {}", finding.line())?;
            }
        }
        let models = match self.content_model {
            ContentModel::Tolerant => "tolerant readers",
            ContentModel::Strict => "strict content model",
        };
        let transitive = if self.transitive { ", transitive" } else { "" };
        let verdict = if breaking.is_empty() { "compatible" } else { "BREAKING" };
        write!(
            f,
            "{verdict}: {} breaking, {} accepted, {} compatible (mode {}{transitive}, {models})",
            breaking.len(),
            allowed.len(),
            compatible.len(),
            self.mode
        )
    }
}
