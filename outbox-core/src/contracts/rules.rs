//! The rules of the compatibility check: stable ids, what each detects, and which side it breaks.

use std::fmt;
use std::str::FromStr;

/// Which readers a change can break.
///
/// *Backward* means readers on the new schema reading events written under the old one; *forward* means readers
/// still on the old schema reading events written under the new one. Whether a given change breaks a side also
/// depends on the [content model](super::ContentModel) and on the schemas around it, so a [`Finding`]
/// carries its own verdict; [`Rule::doc`] describes the usual case.
///
/// [`Finding`]: super::Finding
#[derive(Debug, Clone, Copy, PartialEq, Eq, Hash, PartialOrd, Ord)]
pub enum Side {
    /// New readers, old events.
    Backward,
    /// Old readers, new events.
    Forward,
}

impl Side {
    /// `backward` or `forward`.
    #[must_use]
    pub const fn name(self) -> &'static str {
        match self {
            Self::Backward => "backward",
            Self::Forward => "forward",
        }
    }
}

macro_rules! rules {
    ($( $(#[doc = $doc:literal])* $variant:ident = $id:literal, )*) => {
        /// A kind of change between two contracts, with a stable id (`UPPER_SNAKE`, like buf's rules).
        ///
        /// The ids are part of the public interface: they appear in reports, in `--allow` and in
        /// `allowed-breaks.txt`, and never change meaning. [`Rule::doc`] tells what a rule detects and why it
        /// breaks which side; `docs/contract-rules.md` holds the same text with examples.
        ///
        /// # Example
        ///
        /// ```
        /// use outbox_core::contracts::Rule;
        ///
        /// let rule: Rule = "REQUIRED_PROPERTY_ADDED".parse()?;
        /// assert_eq!(rule, Rule::RequiredPropertyAdded);
        /// assert_eq!(rule.id(), "REQUIRED_PROPERTY_ADDED");
        /// assert!(rule.doc().contains("backward"));
        /// # Ok::<(), outbox_core::contracts::ContractError>(())
        /// ```
        #[derive(Debug, Clone, Copy, PartialEq, Eq, Hash, PartialOrd, Ord)]
        #[non_exhaustive]
        pub enum Rule {
            $( $(#[doc = $doc])* $variant, )*
        }

        impl Rule {
            /// Every rule, in documentation order.
            pub const ALL: &'static [Rule] = &[$(Rule::$variant),*];

            /// The stable id, e.g. `PROPERTY_MADE_REQUIRED`.
            pub const fn id(self) -> &'static str {
                match self { $(Rule::$variant => $id,)* }
            }

            /// What the rule detects and which readers the change breaks, and why.
            pub fn doc(self) -> &'static str {
                match self { $(Rule::$variant => concat!($($doc, "\n"),*).trim_ascii(),)* }
            }
        }
    };
}

rules! {
    /// An optional property was added.
    ///
    /// Tolerant readers: compatible both ways. Old events never carry it, and new readers treat it as absent;
    /// old readers ignore the unknown property. It breaks forward when the old schema is closed
    /// (`additionalProperties: false`, serde's `deny_unknown_fields`): old readers reject the property.
    /// Strict (Confluent) rules: also breaks backward when the old schema is open, because old writers were
    /// allowed to put any value under that name.
    OptionalPropertyAdded = "OPTIONAL_PROPERTY_ADDED",
    /// A required property was added.
    ///
    /// Breaks backward: events written under the old schema lack it, and new readers require it. Forward it is
    /// compatible unless the old schema is closed (old readers reject the unknown property) or the old schema's
    /// `additionalProperties` does not accept its value. For tolerant readers a required property whose schema
    /// names `null` (an `Option<T>` field, which serde writes as `null`) or has a `default` (`#[serde(default)]`)
    /// is not required of old events: serde reads it missing as `None` or as the default. A schema that accepts
    /// any value (`true`, a `serde_json::Value` field) does not count: serde reads a missing `Value` as an error.
    /// An `Option<serde_json::Value>` gets the same schema; with `#[serde(default)]` it has a `default` and counts.
    RequiredPropertyAdded = "REQUIRED_PROPERTY_ADDED",
    /// An optional property was removed.
    ///
    /// Tolerant readers: compatible both ways (new readers ignore it in old events; old readers find it absent,
    /// which it was allowed to be). Breaks backward when the new schema is closed (new readers reject it in old
    /// events). Strict rules: breaks forward when the new schema is open, because new writers may now put any
    /// value under that name, which old readers still type-check.
    OptionalPropertyRemoved = "OPTIONAL_PROPERTY_REMOVED",
    /// A required property was removed.
    ///
    /// Breaks forward: old readers require the property and new events no longer carry it (for tolerant readers,
    /// unless its schema names `null` or has a `default`: a missing `Option` reads as `None`). Backward it is
    /// compatible unless the new schema is closed, so new readers reject the property in old events.
    RequiredPropertyRemoved = "REQUIRED_PROPERTY_REMOVED",
    /// A property that was optional is now required.
    ///
    /// Breaks backward: old events may omit it, and new readers require it (tolerant readers do not require a
    /// property whose schema names `null` or has a `default`). Forward compatible: old readers accept it present.
    PropertyMadeRequired = "PROPERTY_MADE_REQUIRED",
    /// A property that was required is now optional.
    ///
    /// Breaks forward: new events may omit it, and old readers require it (tolerant readers do not require a
    /// property whose schema names `null` or has a `default`). Backward compatible.
    PropertyMadeOptional = "PROPERTY_MADE_OPTIONAL",
    /// The schema accepts fewer undeclared properties than before: `additionalProperties` became `false`, or a
    /// schema where any value was accepted.
    ///
    /// Strict rules: breaks backward (old writers could add undeclared properties that new readers now
    /// reject). Tolerant readers: compatible by itself, since old writers emit only declared properties, unless
    /// the old schema was a map (an explicit `additionalProperties`) whose keys new readers now reject; a
    /// declared property removed at the same time is reported as a removal that breaks backward.
    AdditionalPropertiesClosed = "ADDITIONAL_PROPERTIES_CLOSED",
    /// The schema accepts more undeclared properties than before: `additionalProperties: false` was dropped or
    /// widened.
    ///
    /// Breaks forward when new writers may emit undeclared properties that old readers reject: always under
    /// strict rules, and for tolerant readers when the new schema opens explicitly (`additionalProperties: true`
    /// or a schema, i.e. a map). Backward compatible.
    AdditionalPropertiesOpened = "ADDITIONAL_PROPERTIES_OPENED",
    /// The value may have more JSON types than before: `integer` -> `number`, `T` -> `T | null`, a type added.
    ///
    /// Breaks forward: old readers get values of a type they do not handle (a `u64` field receiving `1.5`, an
    /// `Option`-less field receiving `null`). Backward compatible: every old value is still valid.
    TypeWidened = "TYPE_WIDENED",
    /// The value may have fewer JSON types than before: `number` -> `integer`, `T | null` -> `T`.
    ///
    /// Breaks backward: old events may hold values of the dropped type, which new readers reject. Forward
    /// compatible.
    TypeNarrowed = "TYPE_NARROWED",
    /// The value's JSON types changed in a way that neither contains the other, e.g. `string` -> `integer`.
    ///
    /// Breaks both sides: neither reader can read the other's values.
    TypeChanged = "TYPE_CHANGED",
    /// A branch was added to an `anyOf`/`oneOf` (a new enum variant with data, a new alternative).
    ///
    /// Breaks forward: old readers do not know the new alternative. Backward compatible.
    BranchAdded = "BRANCH_ADDED",
    /// A branch was removed from an `anyOf`/`oneOf`.
    ///
    /// Breaks backward: old events may hold the removed alternative. Forward compatible.
    BranchRemoved = "BRANCH_REMOVED",
    /// A value was added to an `enum`.
    ///
    /// Breaks forward: old readers (a Rust enum without a catch-all variant) reject the new value. Backward
    /// compatible.
    EnumValueAdded = "ENUM_VALUE_ADDED",
    /// A value was removed from an `enum`.
    ///
    /// Breaks backward: old events may hold the removed value. Forward compatible.
    EnumValueRemoved = "ENUM_VALUE_REMOVED",
    /// The value is now restricted to a list (`enum` or `const`) where any value of its type was accepted.
    ///
    /// Breaks backward: old events may hold values outside the list. Forward compatible.
    EnumConstraintAdded = "ENUM_CONSTRAINT_ADDED",
    /// The value is no longer restricted to a list (`enum` or `const` removed).
    ///
    /// Breaks forward: old readers accept only the listed values. Backward compatible.
    EnumConstraintRemoved = "ENUM_CONSTRAINT_REMOVED",
    /// A `const` changed to another value (a renamed tag of an internally tagged enum, for example).
    ///
    /// Breaks both sides: each reader accepts only its own value.
    ConstChanged = "CONST_CHANGED",
    /// A numeric constraint got stricter: `minimum`/`exclusiveMinimum` raised or added, `maximum`/
    /// `exclusiveMaximum` lowered or added, `multipleOf` added or made a multiple of itself, or a narrower integer
    /// `format` (`int64` -> `int32`, as for `i64` -> `i32`).
    ///
    /// Breaks backward: old events may hold values the new reader rejects. Forward compatible.
    NumberConstraintTightened = "NUMBER_CONSTRAINT_TIGHTENED",
    /// A numeric constraint got looser (the reverse of `NUMBER_CONSTRAINT_TIGHTENED`, e.g. `u32` -> `u64`).
    ///
    /// Breaks forward: new events may hold values old readers reject (or cannot store). Backward compatible.
    NumberConstraintLoosened = "NUMBER_CONSTRAINT_LOOSENED",
    /// A numeric constraint changed in a way that is neither stricter nor looser (`multipleOf: 2` -> `3`,
    /// `int32` -> `uint32`).
    ///
    /// Breaks both sides.
    NumberConstraintChanged = "NUMBER_CONSTRAINT_CHANGED",
    /// A string constraint got stricter: `minLength` raised or added, `maxLength` lowered or added, a `pattern`,
    /// `format` or `contentEncoding` added.
    ///
    /// Breaks backward: old events may hold strings the new reader rejects. Forward compatible.
    StringConstraintTightened = "STRING_CONSTRAINT_TIGHTENED",
    /// A string constraint got looser: the reverse of `STRING_CONSTRAINT_TIGHTENED`.
    ///
    /// Breaks forward: new events may hold strings old readers reject. Backward compatible.
    StringConstraintLoosened = "STRING_CONSTRAINT_LOOSENED",
    /// A `pattern`, `format` or `contentEncoding` changed to another value. Whether one regular expression or
    /// format contains the other is not decided, so the change is taken as incompatible.
    ///
    /// Breaks both sides.
    StringConstraintChanged = "STRING_CONSTRAINT_CHANGED",
    /// An array constraint got stricter: `minItems` raised or added, `maxItems` lowered or added,
    /// `uniqueItems` turned on.
    ///
    /// Breaks backward: old events may hold arrays the new reader rejects. Forward compatible.
    ArrayConstraintTightened = "ARRAY_CONSTRAINT_TIGHTENED",
    /// An array constraint got looser: the reverse of `ARRAY_CONSTRAINT_TIGHTENED`.
    ///
    /// Breaks forward: new events may hold arrays old readers reject. Backward compatible.
    ArrayConstraintLoosened = "ARRAY_CONSTRAINT_LOOSENED",
    /// Policy: a property lost its `x-sensitive: true` flag.
    ///
    /// Not a compatibility matter, so it is reported in every mode: the value would start to appear in logs,
    /// traces and CLI output, and a data-protection review should see that in the diff.
    SensitiveFlagRemoved = "SENSITIVE_FLAG_REMOVED",
    /// A property gained the `x-sensitive: true` flag. Never breaks: the value is only redacted in more places.
    SensitiveFlagAdded = "SENSITIVE_FLAG_ADDED",
    /// Policy: a committed contract version (`contracts/<event_type>/v<N>.schema.json`) was deleted.
    ///
    /// Reported in every mode: events of that version may still sit in the outbox or on the broker, and their
    /// consumers lose their contract. Versions are only added; accept a deliberate removal with `--allow`.
    VersionRemoved = "VERSION_REMOVED",
    /// A new version of an event type was added. Never breaks: bumping the version is how a breaking change is
    /// declared, and the differences to the previous version are listed as notes.
    VersionAdded = "VERSION_ADDED",
    /// Policy: a property name that an earlier version (or an earlier state of this version, recorded under
    /// `x-outbox-reserved`) used for another type is used again.
    ///
    /// Reported in every mode: events from the earlier schema still carry the name with its old type, and
    /// readers of the new schema would misread them even though the two schemas in front of the differ agree.
    /// Reusing the name with a compatible type is fine.
    ReservedPropertyReused = "RESERVED_PROPERTY_REUSED",
}

impl Rule {
    /// Whether the rule is a policy rule, reported as breaking in every mode.
    #[must_use]
    pub const fn is_policy(self) -> bool {
        matches!(self, Self::SensitiveFlagRemoved | Self::VersionRemoved | Self::ReservedPropertyReused)
    }
}

impl fmt::Display for Rule {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.write_str(self.id())
    }
}

impl FromStr for Rule {
    type Err = super::ContractError;

    fn from_str(id: &str) -> Result<Self, Self::Err> {
        Self::ALL
            .iter()
            .copied()
            .find(|rule| rule.id() == id)
            .ok_or_else(|| super::ContractError::UnknownRule { id: id.to_owned() })
    }
}

#[cfg(test)]
mod tests {
    use super::Rule;

    #[test]
    fn every_rule_has_a_unique_upper_snake_id_and_a_doc_that_names_a_side() {
        let mut ids = std::collections::BTreeSet::new();
        for rule in Rule::ALL {
            assert!(ids.insert(rule.id()), "duplicate id {}", rule.id());
            assert!(rule.id().bytes().all(|b| b.is_ascii_uppercase() || b == b'_'), "{}", rule.id());
            let doc = rule.doc();
            assert!(
                ["backward", "forward", "both sides", "every mode", "Never breaks"].iter().any(|w| doc.contains(w)),
                "{}: {doc}",
                rule.id()
            );
            assert_eq!(rule.id().parse::<Rule>().ok(), Some(*rule));
        }
    }

    #[test]
    fn an_unknown_id_is_an_error() {
        assert!("NO_SUCH_RULE".parse::<Rule>().is_err());
    }
}
