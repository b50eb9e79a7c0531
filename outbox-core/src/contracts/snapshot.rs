//! The test helper: compare the program's contracts with the committed folder, like a snapshot test.

use std::fs;
use std::path::{Path, PathBuf};

use serde_json::{Map, Value};

use super::policy::{comparable, property_pointers};
use super::{diff, ContractError, Contracts, DiffOptions, Report, RESERVED};

/// The environment variable that lets [`assert_compatible`] write the contracts: `OUTBOX_CONTRACTS=overwrite`.
pub const OVERWRITE_ENV: &str = "OUTBOX_CONTRACTS";

/// Fails the calling test when the program's contracts differ from the ones committed in `dir` (relative to the
/// package root, which is where `cargo test` runs tests).
///
/// The registered events are exported in memory and compared with `dir` under the default [`DiffOptions`]
/// (full compatibility, tolerant readers) and `dir/allowed-breaks.txt`. A break fails with the report; a
/// compatible change (or a new version) fails too, asking to run the tests again with
/// `OUTBOX_CONTRACTS=overwrite`, which then writes the new contracts. A break is never written: bump the event's
/// version instead. Committed versions the code no longer has are kept. See [`Snapshot`] to change the options.
///
/// The events are found in the registry, so the crate that defines them must be linked into the test binary:
/// in an integration test (`tests/*.rs`) of your application, name it with `extern crate your_app;`.
///
/// # Panics
///
/// When the contracts are incompatible or out of date, or cannot be read or written, with the report.
///
/// # Example
///
/// ```no_run
/// // tests/contracts.rs of your application
/// #[test]
/// fn event_contracts_are_committed_and_compatible() {
///     outbox_core::contracts::assert_compatible("contracts");
/// }
/// ```
#[track_caller]
pub fn assert_compatible(dir: impl AsRef<Path>) {
    Snapshot::new(dir).assert();
}

/// What [`Snapshot::check`] found.
#[derive(Debug, Clone, PartialEq, Eq)]
#[non_exhaustive]
pub enum Outcome {
    /// The committed contracts are those of the code.
    UpToDate(Report),
    /// The contracts changed compatibly (or gained versions) and were written, as overwriting was on.
    Written(Report),
    /// The contracts changed compatibly (or gained versions), but overwriting was off: nothing was written.
    OutOfDate(Report),
    /// A change breaks consumers: nothing was written.
    Breaking(Report),
}

impl Outcome {
    /// The comparison behind the outcome.
    #[must_use]
    pub fn report(&self) -> &Report {
        match self {
            Self::UpToDate(report) | Self::Written(report) | Self::OutOfDate(report) | Self::Breaking(report) => report,
        }
    }

    /// Whether a test should pass: up to date, or written.
    #[must_use]
    pub fn is_ok(&self) -> bool {
        matches!(self, Self::UpToDate(_) | Self::Written(_))
    }
}

/// [`assert_compatible`] with options: the contracts to check (the registry's by default), the [`DiffOptions`],
/// and whether to overwrite (by default when `OUTBOX_CONTRACTS=overwrite`).
///
/// # Example
///
/// ```no_run
/// use outbox_core::contracts::{DiffOptions, Mode, Snapshot};
///
/// let mut options = DiffOptions::default();
/// options.mode = Mode::Backward; // our consumers always deploy first
/// Snapshot::new("contracts").options(options).assert();
/// ```
#[derive(Debug, Clone)]
pub struct Snapshot {
    dir: PathBuf,
    contracts: Option<Contracts>,
    options: DiffOptions,
    overwrite: Option<bool>,
}

impl Snapshot {
    /// A check of the registered events against the contracts committed in `dir`.
    pub fn new(dir: impl AsRef<Path>) -> Self {
        Self { dir: dir.as_ref().to_owned(), contracts: None, options: DiffOptions::default(), overwrite: None }
    }

    /// Checks these contracts instead of the registry's.
    #[must_use]
    pub fn contracts(mut self, contracts: Contracts) -> Self {
        self.contracts = Some(contracts);
        self
    }

    /// Compares under these options.
    #[must_use]
    pub fn options(mut self, options: DiffOptions) -> Self {
        self.options = options;
        self
    }

    /// Overwrites (or not) whatever `OUTBOX_CONTRACTS` says.
    #[must_use]
    pub fn overwrite(mut self, overwrite: bool) -> Self {
        self.overwrite = Some(overwrite);
        self
    }

    /// Compares, and writes the new contracts when allowed and compatible.
    ///
    /// # Errors
    ///
    /// What [`Contracts::from_registry`], [`Contracts::load`] and [`Contracts::write`] return, and
    /// [`ContractError::NoEvents`] when the registry is empty.
    ///
    /// # Example
    ///
    /// ```no_run
    /// use outbox_core::contracts::{Outcome, Snapshot};
    ///
    /// match Snapshot::new("contracts").overwrite(false).check()? {
    ///     Outcome::UpToDate(_) => println!("contracts are up to date"),
    ///     Outcome::Breaking(report) => eprintln!("{report}"),
    ///     other => println!("{}", other.report()),
    /// }
    /// # Ok::<(), outbox_core::contracts::ContractError>(())
    /// ```
    pub fn check(&self) -> Result<Outcome, ContractError> {
        let current = match &self.contracts {
            Some(contracts) => contracts.clone(),
            None => Contracts::from_registry()?,
        };
        if current.is_empty() && self.contracts.is_none() {
            return Err(ContractError::NoEvents);
        }
        let exists = self.dir.is_dir();
        let committed = if exists { Contracts::load(&self.dir)? } else { Contracts::new() };
        let next = successor(&committed, current);
        let report = diff(&committed, &next, &self.options);
        if !report.is_compatible() {
            return Ok(Outcome::Breaking(report));
        }
        let up_to_date = exists
            && next.files().iter().all(|(relative, text)| {
                fs::read_to_string(self.dir.join(relative)).ok().as_deref() == Some(text.as_str())
            });
        if up_to_date {
            return Ok(Outcome::UpToDate(report));
        }
        let overwrite = self.overwrite.unwrap_or_else(|| std::env::var(OVERWRITE_ENV).is_ok_and(|v| v == "overwrite"));
        if overwrite {
            next.write(&self.dir)?;
            Ok(Outcome::Written(report))
        } else {
            Ok(Outcome::OutOfDate(report))
        }
    }

    /// [`check`](Self::check) for a test.
    ///
    /// # Panics
    ///
    /// Unless the outcome [is ok](Outcome::is_ok), with the report and what to do.
    #[track_caller]
    pub fn assert(&self) {
        let dir = self.dir.display();
        match self.check() {
            Err(error) => panic!("event contracts: {error}"),
            Ok(Outcome::UpToDate(_)) => {}
            Ok(Outcome::Written(report)) => eprintln!("event contracts written to `{dir}`:\n{report}"),
            Ok(Outcome::Breaking(report)) => panic!(
                "event contracts in `{dir}` would break consumers:\n{report}\n\nBump the event's version for a \
                 breaking change (the committed version stays), or accept the break in `{dir}/allowed-breaks.txt`."
            ),
            Ok(Outcome::OutOfDate(report)) => panic!(
                "event contracts in `{dir}` are out of date (the changes are compatible):\n{report}\n\nRun the tests \
                 with {OVERWRITE_ENV}=overwrite to write them, and commit the result."
            ),
        }
    }
}

/// What the folder becomes: the code's contracts, committed versions the code dropped, the folder's accepted
/// breaks, and the names each version removed in place kept under [`RESERVED`].
fn successor(committed: &Contracts, current: Contracts) -> Contracts {
    let mut next = current;
    next.set_allowed(committed.allowed().to_vec());
    for (event_type, version, old) in committed.iter() {
        let Some(new) = next.get(event_type, version) else {
            next.insert(event_type, version, old.clone());
            continue;
        };
        let mut reserved: Map<String, Value> =
            old.get(RESERVED).and_then(Value::as_object).cloned().unwrap_or_default();
        let kept = property_pointers(&comparable(new));
        for (pointer, schema) in property_pointers(&comparable(old)) {
            if !kept.contains_key(&pointer) {
                reserved.insert(pointer, schema);
            }
        }
        if !reserved.is_empty() {
            let mut new = new.clone();
            if let Value::Object(map) = &mut new {
                map.insert(RESERVED.to_owned(), Value::Object(reserved));
            }
            next.insert(event_type, version, new);
        }
    }
    next
}
