//! The fault-injection suite: nothing is lost, nothing phantom appears, order and fencing hold, and no sensitive
//! value is printed, while real processes are killed, stalled and cut off.
//!
//! Every scenario runs real PostgreSQL, the real `outbox relay` binary as child processes (as a least-privileged
//! role, `RUST_LOG=trace`, logs captured), and a real sink (NATS JetStream from the harness, a `file:` sink, or
//! a webhook consumer on 127.0.0.1). Producers commit a known set of events, with some transactions rolled back,
//! while the scenario injects its fault; then the delivered set is checked against the committed set (every
//! committed event delivered at least once, nothing else, duplicates bounded by the fault window, each
//! aggregate in commit order after removing duplicates), the counts are printed (`-- --nocapture`), and
//! everything the toolkit printed (logs, CLI output, stored errors, `/metrics`) is searched for leaks.
//!
//! The binary has its own harness (libtest-mimic: filtering and `--list` work as usual) so that it can re-run
//! itself as a producer process (`OUTBOX_FAULT_CHILD=producer`) that a scenario kills mid-transaction. Scenarios
//! run one at a time unless `--test-threads` says otherwise: each loads the machine on its own. `OUTBOX_SOAK=1`
//! makes the relay-crash scenario a soak (100,000 events, 100 kills).

#[path = "fault_injection/audit.rs"]
mod audit;
#[path = "fault_injection/broker_outage.rs"]
mod broker_outage;
#[path = "fault_injection/database_restart.rs"]
mod database_restart;
#[path = "fault_injection/deliveries.rs"]
mod deliveries;
#[path = "fault_injection/events.rs"]
mod events;
#[path = "fault_injection/nats_stream.rs"]
mod nats_stream;
#[path = "fault_injection/poison_event.rs"]
mod poison_event;
#[path = "fault_injection/producer_crash.rs"]
mod producer_crash;
#[path = "fault_injection/producer_process.rs"]
mod producer_process;
#[path = "fault_injection/producers.rs"]
mod producers;
#[path = "fault_injection/relay_crashes.rs"]
mod relay_crashes;
#[path = "fault_injection/relays.rs"]
mod relays;
#[path = "fault_injection/scene.rs"]
mod scene;
#[path = "fault_injection/stalled_relay.rs"]
mod stalled_relay;
#[path = "fault_injection/webhook_receiver.rs"]
mod webhook_receiver;

use std::future::Future;
use std::process::ExitCode;

use libtest_mimic::{Arguments, Failed, Trial};

/// A trial running `scenario` on a runtime of its own.
fn trial<F, Fut>(name: &str, scenario: F) -> Trial
where
    F: FnOnce() -> Fut + Send + 'static,
    Fut: Future<Output = ()>,
{
    Trial::test(name, move || {
        let runtime = tokio::runtime::Builder::new_multi_thread().enable_all().build().map_err(|e| e.to_string())?;
        runtime.block_on(scenario());
        Ok::<(), Failed>(())
    })
}

fn main() -> ExitCode {
    if let Some(exit) = producer_process::child_main() {
        return exit;
    }
    let mut args = Arguments::from_args();
    args.test_threads = args.test_threads.or(Some(1));
    let trials = vec![
        trial(
            "relays_killed_at_random_lose_no_event_and_keep_aggregate_order",
            relay_crashes::relays_killed_at_random_lose_no_event_and_keep_aggregate_order,
        ),
        trial(
            "stalled_relay_is_fenced_and_duplicates_stay_within_one_batch",
            stalled_relay::stalled_relay_is_fenced_and_duplicates_stay_within_one_batch,
        ),
        trial(
            "broker_outage_backs_off_then_drains_the_backlog_with_no_loss",
            broker_outage::broker_outage_backs_off_then_drains_the_backlog_with_no_loss,
        ),
        trial(
            "database_restart_under_load_relays_reconnect_and_finish",
            database_restart::database_restart_under_load_relays_reconnect_and_finish,
        ),
        trial("killed_producers_leave_no_event_behind", producer_crash::killed_producers_leave_no_event_behind),
        trial(
            "poison_event_fails_at_once_and_is_delivered_after_retry",
            poison_event::poison_event_fails_at_once_and_is_delivered_after_retry,
        ),
    ];
    libtest_mimic::run(&args, trials).exit_code()
}
