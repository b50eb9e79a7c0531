//! `outbox events list|show|retry|cancel|purge`.

use std::io::IsTerminal;

use outbox_core::store::{EventDetail, EventFilter, EventSummary, RetryTarget, Store};
use serde_json::{json, Value};
use time::format_description::well_known::Rfc3339;
use uuid::Uuid;

use crate::args::EventsCommand;
use crate::{connect, Failure, Outcome};

/// Rows deleted per purge statement.
const PURGE_BATCH: u32 = 1000;

pub(crate) async fn run(database_url: Option<&str>, command: EventsCommand) -> Outcome {
    let store = connect::open(database_url, 2).await?.store();
    match command {
        EventsCommand::List { status, event_type, aggregate_id, limit, json } => {
            let mut filter = EventFilter::new(status).limit(limit);
            if let Some(event_type) = event_type {
                filter = filter.event_type(event_type);
            }
            if let Some(aggregate_id) = aggregate_id {
                filter = filter.aggregate_id(aggregate_id);
            }
            let events = store.list(&filter).await.map_err(Failure::runtime)?;
            print_list(&events, json);
            Ok(())
        }
        EventsCommand::Show { id, json } => {
            let detail = store.show(id).await.map_err(Failure::runtime)?;
            let Some(detail) = detail else {
                return Err(Failure::Runtime(format!("no event with id {id}")));
            };
            let shown = shown(&detail);
            if json {
                println!("{shown}");
            } else {
                println!("{}", serde_json::to_string_pretty(&shown).unwrap_or_default());
            }
            Ok(())
        }
        EventsCommand::Retry { ids, all_failed, event_type } => {
            let target = if all_failed { RetryTarget::AllFailed { event_type } } else { RetryTarget::Ids(ids.clone()) };
            let retried = store.retry(&target).await.map_err(Failure::runtime)?;
            println!("retried {} event(s)", retried.len());
            unchanged(&ids, &retried, "not failed (or not found)")
        }
        EventsCommand::Cancel { ids } => {
            let cancelled = store.cancel(&ids).await.map_err(Failure::runtime)?;
            println!("cancelled {} event(s)", cancelled.len());
            unchanged(&ids, &cancelled, "not pending or failed (or not found)")
        }
        EventsCommand::Purge { older_than } => purge(store.as_ref(), older_than).await,
    }
}

/// Reports the ids asked for but not changed; exit 1 if there are any.
fn unchanged(asked: &[Uuid], changed: &[Uuid], why: &str) -> Outcome {
    let missed: Vec<String> = asked.iter().filter(|id| !changed.contains(id)).map(Uuid::to_string).collect();
    if missed.is_empty() {
        Ok(())
    } else {
        Err(Failure::Runtime(format!("{} event(s) {why}: {}", missed.len(), missed.join(", "))))
    }
}

async fn purge(store: &dyn Store, older_than: std::time::Duration) -> Outcome {
    let total = store.count_finished(older_than).await.map_err(Failure::runtime)?;
    let bar = if std::io::stderr().is_terminal() {
        let bar = indicatif::ProgressBar::new(total);
        if let Ok(style) = indicatif::ProgressStyle::with_template("purging {bar:40} {pos}/{len} events ({eta})") {
            bar.set_style(style);
        }
        Some(bar)
    } else {
        None
    };
    let mut purged = 0;
    loop {
        let deleted = store.delete_finished(older_than, PURGE_BATCH).await.map_err(Failure::runtime)?;
        purged += deleted;
        if let Some(bar) = &bar {
            bar.set_position(purged.min(total));
        }
        if deleted < u64::from(PURGE_BATCH) {
            break;
        }
    }
    if let Some(bar) = bar {
        bar.finish_and_clear();
    }
    println!("purged {purged} event(s)");
    Ok(())
}

fn timestamp(at: time::OffsetDateTime) -> String {
    at.format(&Rfc3339).unwrap_or_default()
}

fn summary_json(event: &EventSummary) -> Value {
    json!({
        "id": event.id,
        "seq": event.seq,
        "event_type": event.event_type,
        "aggregate_type": event.aggregate_type,
        "aggregate_id": event.aggregate_id,
        "version": event.version,
        "status": event.status.as_str(),
        "attempts": event.attempts,
        "created_at": timestamp(event.created_at),
        "next_attempt_at": timestamp(event.next_attempt_at),
        "published_at": event.published_at.map(timestamp),
        "last_error": event.last_error,
    })
}

fn print_list(events: &[EventSummary], json: bool) {
    if json {
        let list: Vec<Value> = events.iter().map(summary_json).collect();
        println!("{}", Value::Array(list));
        return;
    }
    println!("{:<36}  {:<24}  {:<24}  {:<9}  {:>8}  LAST ERROR", "ID", "TYPE", "AGGREGATE", "STATUS", "ATTEMPTS");
    for event in events {
        let aggregate = format!("{}/{}", event.aggregate_type, event.aggregate_id);
        let error = event.last_error.as_deref().unwrap_or("");
        println!(
            "{:<36}  {:<24}  {:<24}  {:<9}  {:>8}  {error}",
            event.id,
            event.event_type,
            aggregate,
            event.status.as_str(),
            event.attempts
        );
    }
}

/// The event as printed: the payload with every sensitive value replaced by `[REDACTED]`. A row changed by hand
/// says what is wrong with it (`corrupted`); when its sensitive paths cannot be read, none of its payload is shown.
fn shown(detail: &EventDetail) -> Value {
    let payload = match detail.sensitive_paths.valid() {
        Some(paths) => {
            let mut payload = detail.payload.clone();
            outbox_core::redact::redact(&mut payload, paths);
            payload
        }
        None => json!(outbox_core::redact::REDACTED),
    };
    let mut shown = summary_json(&detail.summary);
    if let Value::Object(map) = &mut shown {
        map.insert("headers".into(), json!(detail.headers.valid()));
        map.insert("sensitive_paths".into(), json!(detail.sensitive_paths.valid()));
        map.insert("partition".into(), json!(detail.partition));
        map.insert("publishing_relay".into(), json!(detail.publishing_relay));
        if let Err(problem) = detail.check() {
            map.insert("corrupted".into(), json!(problem.to_string()));
        }
        map.insert("payload".into(), payload);
    }
    shown
}
