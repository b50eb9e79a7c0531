//! End to end: change a `#[derive(OutboxEvent)]` struct the ways people do, export the contracts of each
//! version to a folder, and check the verdicts of `outbox contracts diff` (the library function it runs,
//! `diff_paths`, on the exported folders) and of the snapshot test helper.
//!
//! Each module holds one state of the same event, `order.placed` v1 (or v2 for the bump).

use std::path::{Path, PathBuf};
use std::sync::atomic::{AtomicUsize, Ordering};

use outbox_core::contracts::{diff_paths, Contracts, DiffOptions, Mode, Outcome, Rule, Snapshot};
use outbox_core::registry::EventDescriptor;
use outbox_core::schemars::JsonSchema;
use outbox_core::OutboxEvent;

macro_rules! order_placed {
    ($module:ident, version = $version:literal, { $($fields:tt)* }) => {
        mod $module {
            use super::*;

            #[derive(serde::Serialize, JsonSchema, OutboxEvent)]
            #[schemars(crate = "outbox_core::schemars")]
            #[outbox(event_type = "order.placed", aggregate = "order", version = $version)]
            pub struct OrderPlaced {
                #[outbox(aggregate_id)]
                pub order_id: u64,
                $($fields)*
            }

            pub fn contracts() -> Contracts {
                let event = EventDescriptor::of::<OrderPlaced>(concat!(stringify!($module), "::OrderPlaced"));
                Contracts::from_events([&event]).expect("contracts")
            }
        }
    };
}

order_placed!(base, version = 1, {
    #[outbox(sensitive)]
    pub customer_email: String,
    pub quantity: u32,
    pub lines: Vec<Line>,
});

#[derive(serde::Serialize, JsonSchema)]
#[schemars(crate = "outbox_core::schemars")]
pub struct Line {
    sku: String,
    cents: i64,
}

#[derive(serde::Serialize, JsonSchema)]
#[schemars(crate = "outbox_core::schemars")]
pub struct OrderLine {
    sku: String,
    cents: i64,
}

order_placed!(optional_field_added, version = 1, {
    #[outbox(sensitive)]
    pub customer_email: String,
    pub quantity: u32,
    pub lines: Vec<Line>,
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub coupon: Option<String>,
});

order_placed!(required_field_added, version = 1, {
    #[outbox(sensitive)]
    pub customer_email: String,
    pub quantity: u32,
    pub lines: Vec<Line>,
    pub currency: String,
});

order_placed!(renamed_with_serde, version = 1, {
    #[outbox(sensitive)]
    #[serde(rename = "email")]
    pub customer_email: String,
    pub quantity: u32,
    pub lines: Vec<Line>,
});

order_placed!(type_widened, version = 1, {
    #[outbox(sensitive)]
    pub customer_email: String,
    pub quantity: f64,
    pub lines: Vec<Line>,
});

order_placed!(field_removed, version = 1, {
    #[outbox(sensitive)]
    pub customer_email: String,
    pub lines: Vec<Line>,
});

order_placed!(sensitive_unmarked, version = 1, {
    pub customer_email: String,
    pub quantity: u32,
    pub lines: Vec<Line>,
});

order_placed!(more_sensitive, version = 1, {
    #[outbox(sensitive)]
    pub customer_email: String,
    #[outbox(sensitive)]
    pub quantity: u32,
    pub lines: Vec<Line>,
});

order_placed!(nested_type_renamed, version = 1, {
    #[outbox(sensitive)]
    pub customer_email: String,
    pub quantity: u32,
    pub lines: Vec<OrderLine>,
});

order_placed!(bumped_with_required_field, version = 2, {
    #[outbox(sensitive)]
    pub customer_email: String,
    pub quantity: u32,
    pub lines: Vec<Line>,
    pub currency: String,
});

fn temp_dir(name: &str) -> PathBuf {
    static NEXT: AtomicUsize = AtomicUsize::new(0);
    let dir = std::env::temp_dir().join(format!(
        "outbox-contract-changes-{}-{}-{name}",
        std::process::id(),
        NEXT.fetch_add(1, Ordering::Relaxed)
    ));
    let _ = std::fs::remove_dir_all(&dir);
    dir
}

fn exported(name: &str, contracts: &Contracts) -> PathBuf {
    let dir = temp_dir(name);
    contracts.write(&dir).expect("write contracts");
    dir
}

fn options(mode: Mode) -> DiffOptions {
    let mut options = DiffOptions::default();
    options.mode = mode;
    options
}

/// The breaking rules of `outbox contracts diff --mode <mode> base changed`.
fn cli_verdict(changed: &Contracts, mode: Mode) -> Vec<Rule> {
    let old = exported("old", &base::contracts());
    let new = exported("new", changed);
    diff_paths(&old, &new, &options(mode)).expect("diff").breaking_rules()
}

/// What the snapshot helper says about `changed` against committed base contracts (without overwriting).
fn snapshot_verdict(changed: Contracts) -> Outcome {
    let committed = exported("committed", &base::contracts());
    Snapshot::new(&committed).contracts(changed).overwrite(false).check().expect("snapshot")
}

#[test]
fn adding_an_optional_field_is_compatible_but_out_of_date() {
    let changed = optional_field_added::contracts();
    for mode in [Mode::Backward, Mode::Forward, Mode::Full] {
        assert_eq!(cli_verdict(&changed, mode), [], "{mode}");
    }
    let outcome = snapshot_verdict(changed);
    assert!(matches!(outcome, Outcome::OutOfDate(_)), "{outcome:?}");
    assert!(outcome.report().findings.iter().any(|f| f.rule == Rule::OptionalPropertyAdded && f.pointer == "/properties/coupon"));
}

#[test]
fn adding_a_required_field_breaks_new_readers_of_old_events() {
    let changed = required_field_added::contracts();
    assert_eq!(cli_verdict(&changed, Mode::Backward), [Rule::RequiredPropertyAdded]);
    assert_eq!(cli_verdict(&changed, Mode::Forward), []);
    assert_eq!(cli_verdict(&changed, Mode::Full), [Rule::RequiredPropertyAdded]);
    assert!(matches!(snapshot_verdict(changed), Outcome::Breaking(_)));
}

#[test]
fn renaming_a_field_with_serde_breaks_both_sides() {
    let changed = renamed_with_serde::contracts();
    assert_eq!(cli_verdict(&changed, Mode::Backward), [Rule::RequiredPropertyAdded]);
    assert_eq!(cli_verdict(&changed, Mode::Forward), [Rule::RequiredPropertyRemoved]);
    assert!(matches!(snapshot_verdict(changed), Outcome::Breaking(_)));
}

#[test]
fn widening_a_type_breaks_only_old_readers() {
    let changed = type_widened::contracts();
    assert_eq!(cli_verdict(&changed, Mode::Backward), []);
    let forward = cli_verdict(&changed, Mode::Forward);
    assert!(forward.contains(&Rule::TypeWidened), "{forward:?}");
    assert!(matches!(snapshot_verdict(changed), Outcome::Breaking(_)));
}

#[test]
fn removing_a_required_field_breaks_old_readers() {
    let changed = field_removed::contracts();
    assert_eq!(cli_verdict(&changed, Mode::Backward), []);
    assert_eq!(cli_verdict(&changed, Mode::Forward), [Rule::RequiredPropertyRemoved]);
    assert!(matches!(snapshot_verdict(changed), Outcome::Breaking(_)));
}

#[test]
fn unmarking_a_sensitive_field_is_reported_in_every_mode() {
    let changed = sensitive_unmarked::contracts();
    for mode in [Mode::Backward, Mode::Forward, Mode::Full] {
        assert_eq!(cli_verdict(&changed, mode), [Rule::SensitiveFlagRemoved], "{mode}");
    }
    let outcome = snapshot_verdict(changed);
    assert!(matches!(outcome, Outcome::Breaking(_)), "{outcome:?}");
    let finding = outcome.report().breaking().next().unwrap();
    assert_eq!(finding.pointer, "/properties/customer_email/x-sensitive");
}

#[test]
fn marking_a_field_sensitive_is_compatible_and_reported() {
    let changed = more_sensitive::contracts();
    assert_eq!(cli_verdict(&changed, Mode::Full), []);
    let outcome = snapshot_verdict(changed);
    assert!(outcome.report().findings.iter().any(|f| f.rule == Rule::SensitiveFlagAdded), "{outcome:?}");
}

#[test]
fn renaming_a_nested_rust_type_is_no_change() {
    let old = exported("old", &base::contracts());
    let new = exported("new", &nested_type_renamed::contracts());
    let report = diff_paths(&old, &new, &DiffOptions::default()).unwrap();
    assert!(report.findings.is_empty(), "{report}");
}

#[test]
fn a_break_with_a_version_bump_is_written_and_the_old_version_stays() {
    let committed = exported("committed", &base::contracts());
    let v1 = std::fs::read(committed.join("order.placed/v1.schema.json")).unwrap();

    let snapshot = Snapshot::new(&committed).contracts(bumped_with_required_field::contracts());
    let outcome = snapshot.clone().overwrite(false).check().unwrap();
    assert!(matches!(outcome, Outcome::OutOfDate(_)), "{outcome:?}");
    let outcome = snapshot.clone().overwrite(true).check().unwrap();
    assert!(matches!(outcome, Outcome::Written(_)), "{outcome:?}");
    assert!(committed.join("order.placed/v2.schema.json").is_file());
    assert_eq!(std::fs::read(committed.join("order.placed/v1.schema.json")).unwrap(), v1, "v1 is kept as committed");
    assert!(matches!(snapshot.overwrite(false).check().unwrap(), Outcome::UpToDate(_)));
}

#[test]
fn a_breaking_change_is_never_written() {
    let committed = exported("committed", &base::contracts());
    let before = std::fs::read(committed.join("order.placed/v1.schema.json")).unwrap();
    let outcome = Snapshot::new(&committed).contracts(required_field_added::contracts()).overwrite(true).check().unwrap();
    assert!(matches!(outcome, Outcome::Breaking(_)), "{outcome:?}");
    assert_eq!(std::fs::read(committed.join("order.placed/v1.schema.json")).unwrap(), before);
}

#[test]
fn a_compatible_change_is_written_on_overwrite_and_then_up_to_date() {
    let committed = exported("committed", &base::contracts());
    let snapshot = Snapshot::new(&committed).contracts(optional_field_added::contracts());
    assert!(matches!(snapshot.clone().overwrite(true).check().unwrap(), Outcome::Written(_)));
    assert!(matches!(snapshot.overwrite(false).check().unwrap(), Outcome::UpToDate(_)));
}

#[test]
fn a_removed_field_is_reserved_after_overwrite() {
    // `quantity` (an integer) is dropped in place, which tolerant readers accept once it is optional...
    let committed = exported("committed", &optional_field_added::contracts());
    let outcome = Snapshot::new(&committed).contracts(base::contracts()).overwrite(true).check().unwrap();
    assert!(matches!(outcome, Outcome::Written(_)), "{outcome:?}");
    let v1: serde_json::Value =
        serde_json::from_str(&std::fs::read_to_string(committed.join("order.placed/v1.schema.json")).unwrap()).unwrap();
    assert!(v1["x-outbox-reserved"]["/properties/coupon"].is_object(), "{v1:#}");

    // ...and coming back with another type is caught, though the field is absent from the committed schema.
    mod coupon_as_number {
        use super::*;
        order_placed!(inner, version = 1, {
            #[outbox(sensitive)]
            pub customer_email: String,
            pub quantity: u32,
            pub lines: Vec<Line>,
            #[serde(default, skip_serializing_if = "Option::is_none")]
            pub coupon: Option<u64>,
        });
        pub use inner::contracts;
    }
    let outcome = Snapshot::new(&committed).contracts(coupon_as_number::contracts()).overwrite(true).check().unwrap();
    assert_eq!(outcome.report().breaking_rules(), [Rule::ReservedPropertyReused], "{outcome:?}");
}

#[test]
fn re_exporting_unchanged_code_is_byte_identical() {
    let (first, second) = (exported("first", &base::contracts()), exported("second", &base::contracts()));
    for (relative, _) in base::contracts().files() {
        let read = |dir: &Path| std::fs::read(dir.join(&relative)).unwrap();
        assert_eq!(read(&first), read(&second), "{}", relative.display());
        assert!(read(&first).ends_with(b"}\n"), "{} ends with a newline", relative.display());
    }
    let outcome = Snapshot::new(&first).contracts(base::contracts()).overwrite(false).check().unwrap();
    assert!(matches!(outcome, Outcome::UpToDate(_)), "{outcome:?}");
}
