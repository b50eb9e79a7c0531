//! How two contracts are compared: the mode, the content model, transitivity and accepted breaks.

use std::fmt;
use std::str::FromStr;

use super::{ContractError, Finding, Rule};

/// Which readers must keep working.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Hash, Default)]
pub enum Mode {
    /// Readers on the new schema read events written under the old one (consumers upgrade first).
    Backward,
    /// Readers on the old schema read events written under the new one (producers upgrade first).
    Forward,
    /// Both: producers and consumers upgrade in any order. The default.
    #[default]
    Full,
}

impl Mode {
    /// The mode's name on the command line: `backward`, `forward` or `full`.
    #[must_use]
    pub const fn name(self) -> &'static str {
        match self {
            Self::Backward => "backward",
            Self::Forward => "forward",
            Self::Full => "full",
        }
    }

    /// Whether a change that breaks the given sides breaks this mode.
    #[must_use]
    pub const fn is_broken_by(self, backward: bool, forward: bool) -> bool {
        match self {
            Self::Backward => backward,
            Self::Forward => forward,
            Self::Full => backward || forward,
        }
    }
}

impl fmt::Display for Mode {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.write_str(self.name())
    }
}

/// How readers and writers treat properties a schema does not declare.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Hash, Default)]
pub enum ContentModel {
    /// Producers emit only declared properties and readers ignore unknown ones: what serde does without
    /// `deny_unknown_fields`. A schema with `additionalProperties: false` still rejects unknown properties, and
    /// one with an explicit `additionalProperties` schema (a map) may emit any key. The default.
    #[default]
    Tolerant,
    /// Confluent Schema Registry's JSON Schema rules: a schema is exactly the set of documents it validates. A
    /// schema without `additionalProperties: false` is *open* (any undeclared property, any value), one with it
    /// is *closed*.
    Strict,
}

impl ContentModel {
    /// The model's name in reports: `tolerant` or `strict`.
    #[must_use]
    pub const fn name(self) -> &'static str {
        match self {
            Self::Tolerant => "tolerant",
            Self::Strict => "strict",
        }
    }
}

/// A break accepted on purpose: a rule, optionally narrowed to an event type, a version and a JSON pointer.
///
/// Written like the start of a report line, so a finding can be pasted into `allowed-breaks.txt`:
/// `RULE_ID [event_type [vN [/json/pointer]]]`.
///
/// # Example
///
/// ```
/// use outbox_core::contracts::Allow;
///
/// let allow: Allow = "OPTIONAL_PROPERTY_REMOVED  payment.paid v1  /properties/note".parse()?;
/// assert_eq!(allow.to_string(), "OPTIONAL_PROPERTY_REMOVED payment.paid v1 /properties/note");
/// let any_event: Allow = "TYPE_WIDENED".parse()?;
/// # Ok::<(), outbox_core::contracts::ContractError>(())
/// ```
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct Allow {
    rule: Rule,
    event_type: Option<String>,
    version: Option<u32>,
    pointer: Option<String>,
}

impl Allow {
    /// Accepts every finding of `rule`.
    #[must_use]
    pub fn rule(rule: Rule) -> Self {
        Self { rule, event_type: None, version: None, pointer: None }
    }

    /// Whether this entry accepts `finding`.
    #[must_use]
    pub fn matches(&self, finding: &Finding) -> bool {
        self.rule == finding.rule
            && self.event_type.as_deref().is_none_or(|e| e == finding.event_type)
            && self.version.is_none_or(|v| v == finding.version)
            && self.pointer.as_deref().is_none_or(|p| p == finding.pointer || (p == "/" && finding.pointer.is_empty()))
    }
}

impl FromStr for Allow {
    type Err = ContractError;

    fn from_str(entry: &str) -> Result<Self, Self::Err> {
        let bad = |reason: &str| ContractError::BadAllow { entry: entry.trim().to_owned(), reason: reason.to_owned() };
        let mut words = entry.split_whitespace();
        let Some(rule) = words.next() else { return Err(bad("empty entry")) };
        let rule: Rule = rule.parse()?;
        let event_type = words.next().map(str::to_owned);
        let version = match words.next() {
            None => None,
            Some(word) => Some(
                word.strip_prefix('v')
                    .and_then(|n| n.parse::<u32>().ok())
                    .ok_or_else(|| bad("the third word must be a version like `v2`"))?,
            ),
        };
        let pointer = words.next().map(str::to_owned);
        if pointer.as_deref().is_some_and(|p| !p.starts_with('/')) {
            return Err(bad("the fourth word must be a JSON pointer like `/properties/name`"));
        }
        // Anything after the pointer (the `old -> new` part of a pasted report line) is ignored.
        Ok(Self { rule, event_type, version, pointer })
    }
}

impl fmt::Display for Allow {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.write_str(self.rule.id())?;
        if let Some(event_type) = &self.event_type {
            write!(f, " {event_type}")?;
        }
        if let Some(version) = self.version {
            write!(f, " v{version}")?;
        }
        if let Some(pointer) = &self.pointer {
            write!(f, " {pointer}")?;
        }
        Ok(())
    }
}

/// Parses an `allowed-breaks.txt`: one [`Allow`] per line, `#` starts a comment, blank lines are skipped.
///
/// # Errors
///
/// [`ContractError::BadAllow`] or [`ContractError::UnknownRule`] for the first bad line.
///
/// # Example
///
/// ```
/// let allowed = outbox_core::contracts::parse_allow_list(
///     "# reviewed in #123\nENUM_VALUE_ADDED  order.placed v2  /properties/status/enum\n\nTYPE_WIDENED\n",
/// )?;
/// assert_eq!(allowed.len(), 2);
/// # Ok::<(), outbox_core::contracts::ContractError>(())
/// ```
pub fn parse_allow_list(text: &str) -> Result<Vec<Allow>, ContractError> {
    text.lines()
        .map(|line| line.split('#').next().unwrap_or_default().trim())
        .filter(|line| !line.is_empty())
        .map(str::parse)
        .collect()
}

/// How [`diff`](super::diff) compares contracts.
///
/// # Example
///
/// ```
/// use outbox_core::contracts::{ContentModel, DiffOptions, Mode};
///
/// let mut options = DiffOptions::default(); // full, tolerant readers, latest version only
/// options.mode = Mode::Backward;
/// options.content_model = ContentModel::Strict;
/// options.transitive = true;
/// ```
#[derive(Debug, Clone, Default)]
#[non_exhaustive]
pub struct DiffOptions {
    /// Which readers must keep working.
    pub mode: Mode,
    /// How undeclared properties are treated.
    pub content_model: ContentModel,
    /// Also check a changed version against every older committed version of its event type, not only against
    /// its own committed state.
    pub transitive: bool,
    /// Breaks accepted on purpose; the contracts folder's own `allowed-breaks.txt` is added to these.
    pub allow: Vec<Allow>,
}
