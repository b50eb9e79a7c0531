//! `outbox events list|show|retry|cancel|purge`.

use std::io::IsTerminal;

use outbox_core::store::{CancelTarget, EventDetail, EventFilter, EventStatus, EventSummary, RetryTarget, Store};
use serde_json::{json, Value};
use time::format_description::well_known::Rfc3339;
use uuid::Uuid;

use crate::args::{ChangeArgs, EventsCommand, FilterArgs};
use crate::{connect, Failure, Outcome};

/// Rows deleted per purge statement.
const PURGE_BATCH: u32 = 1000;

pub(crate) async fn run(database_url: Option<&str>, command: EventsCommand) -> Outcome {
    // Bad input is reported before the database is opened.
    let selection = match &command {
        EventsCommand::Retry { ids, all_failed, filter, change } => {
            let status = filter.status.or(all_failed.then_some(EventStatus::Failed));
            if status.is_some_and(|status| status != EventStatus::Failed) {
                return Err(Failure::Usage("retry takes failed events: --status failed, or leave it out".into()));
            }
            Some(Selection::new(Action::Retry, ids, filter, EventStatus::Failed, change))
        }
        EventsCommand::Cancel { ids, filter, change } => {
            let status = match filter.status {
                Some(status @ (EventStatus::Pending | EventStatus::Failed)) => status,
                Some(_) => {
                    return Err(Failure::Usage(
                        "cancel takes pending or failed events: --status pending or --status failed".into(),
                    ))
                }
                None if ids.is_empty() => {
                    return Err(Failure::Usage("cancel by filter needs --status pending or --status failed".into()));
                }
                None => EventStatus::Pending, // unused: ids select by themselves
            };
            Some(Selection::new(Action::Cancel, ids, filter, status, change))
        }
        _ => None,
    };
    let store = connect::open(database_url, 2).await?.store();
    if let Some(selection) = selection {
        return selection.apply(store.as_ref()).await;
    }
    match command {
        EventsCommand::List { filter, after, limit, json } => {
            let mut listed = event_filter(&filter).limit(limit);
            if let Some(after) = after {
                listed = listed.after(after);
            }
            let events = store.list(&listed).await.map_err(Failure::runtime)?;
            if let (Some(after), true) = (after, events.is_empty()) {
                if store.show(after).await.map_err(Failure::runtime)?.is_none() {
                    return Err(Failure::Runtime(format!("no event with id {after} (--after)")));
                }
            }
            print_list(&events, json)?;
            if let (Some(last), false) = (events.last(), json) {
                if events.len() == usize::try_from(limit).unwrap_or(usize::MAX) {
                    eprintln!("more may follow: --after {}", last.id);
                }
            }
            Ok(())
        }
        EventsCommand::Show { id, json } => {
            let detail = store.show(id).await.map_err(Failure::runtime)?;
            let Some(detail) = detail else {
                return Err(Failure::Runtime(format!("no event with id {id}")));
            };
            let shown = shown(&detail);
            if json {
                outln!("{shown}");
            } else {
                outln!("{}", serde_json::to_string_pretty(&shown).unwrap_or_default());
            }
            Ok(())
        }
        EventsCommand::Purge { older_than } => purge(store.as_ref(), older_than).await,
        EventsCommand::Retry { .. } | EventsCommand::Cancel { .. } => Ok(()), // applied above
    }
}

/// The store's filter for the command line's filters.
fn event_filter(args: &FilterArgs) -> EventFilter {
    let mut filter = EventFilter::default().status(args.status);
    if let Some(event_type) = &args.event_type {
        filter = filter.event_type(event_type.clone());
    }
    if let Some(aggregate_id) = &args.aggregate_id {
        filter = filter.aggregate_id(aggregate_id.clone());
    }
    if let Some(age) = args.older_than {
        filter = filter.older_than(age);
    }
    filter
}

/// `retry` or `cancel`.
#[derive(Debug, Clone, Copy)]
enum Action {
    Retry,
    Cancel,
}

impl Action {
    fn verb(self) -> &'static str {
        match self {
            Self::Retry => "retry",
            Self::Cancel => "cancel",
        }
    }

    fn done(self) -> &'static str {
        match self {
            Self::Retry => "retried",
            Self::Cancel => "cancelled",
        }
    }

    /// Whether an event in `status` is changed by the action.
    fn applies_to(self, status: EventStatus) -> bool {
        match self {
            Self::Retry => status == EventStatus::Failed,
            Self::Cancel => matches!(status, EventStatus::Pending | EventStatus::Failed),
        }
    }

    async fn by_ids(self, store: &dyn Store, ids: Vec<Uuid>) -> Result<Vec<Uuid>, Failure> {
        match self {
            Self::Retry => store.retry(&RetryTarget::Ids(ids)).await,
            Self::Cancel => store.cancel(&CancelTarget::Ids(ids)).await,
        }
        .map_err(Failure::runtime)
    }

    async fn matching(self, store: &dyn Store, filter: EventFilter) -> Result<Vec<Uuid>, Failure> {
        match self {
            Self::Retry => store.retry(&RetryTarget::Matching(filter)).await,
            Self::Cancel => store.cancel(&CancelTarget::Matching(filter)).await,
        }
        .map_err(Failure::runtime)
    }
}

/// The events a `retry` or `cancel` names: ids, or filters (with the one status the action takes).
struct Selection {
    action: Action,
    ids: Vec<Uuid>,
    filter: EventFilter,
    dry_run: bool,
    yes: bool,
}

impl Selection {
    fn new(action: Action, ids: &[Uuid], filter: &FilterArgs, status: EventStatus, change: &ChangeArgs) -> Self {
        let filter = event_filter(filter).status(Some(status)).limit(change.limit.unwrap_or(u32::MAX));
        Self { action, ids: ids.to_vec(), filter, dry_run: change.dry_run, yes: change.yes }
    }

    /// Prints what would change (`--dry-run`), or asks on a terminal before changing more than one event, then
    /// changes it and reports the ids asked for that did not change.
    async fn apply(self, store: &dyn Store) -> Outcome {
        let action = self.action;
        let ask = !self.yes && std::io::stdin().is_terminal();
        if !self.dry_run && !ask {
            // Nothing to show first: one statement.
            let changed = if self.ids.is_empty() {
                action.matching(store, self.filter).await?
            } else {
                action.by_ids(store, self.ids.clone()).await?
            };
            return reported(unchanged(&self.ids, &changed, action), action, changed.len());
        }
        let selected = self.selected(store).await?;
        if self.dry_run {
            outln!("would {} {} event(s):", action.verb(), selected.len());
            print_list(&selected, false)?;
            return unchanged(&self.ids, &selected.iter().map(|event| event.id).collect::<Vec<_>>(), action);
        }
        if selected.len() > 1 && !confirm(&format!("{} {} event(s)?", action.verb(), selected.len()))? {
            return Err(Failure::Runtime("nothing changed: not confirmed".into()));
        }
        // Exactly the events shown and confirmed (by id: what changed meanwhile is left alone, and said so).
        let confirmed: Vec<Uuid> = selected.iter().map(|event| event.id).collect();
        let changed = action.by_ids(store, confirmed.clone()).await?;
        let asked = if self.ids.is_empty() { confirmed } else { self.ids };
        reported(unchanged(&asked, &changed, action), action, changed.len())
    }

    /// The events that would change, oldest first.
    async fn selected(&self, store: &dyn Store) -> Result<Vec<EventSummary>, Failure> {
        if self.ids.is_empty() {
            return store.list(&self.filter).await.map_err(Failure::runtime);
        }
        let mut selected = Vec::new();
        for id in &self.ids {
            if let Some(detail) = store.show(*id).await.map_err(Failure::runtime)? {
                if self.action.applies_to(detail.summary.status) {
                    selected.push(detail.summary);
                }
            }
        }
        selected.sort_by_key(|event| event.seq);
        selected.dedup_by_key(|event| event.id);
        Ok(selected)
    }
}

/// Asks `question` on stderr and reads the answer from the terminal: yes only for `y` or `yes`.
fn confirm(question: &str) -> Result<bool, Failure> {
    eprint!("{question} [y/N] ");
    let mut answer = String::new();
    std::io::stdin()
        .read_line(&mut answer)
        .map_err(|error| Failure::Runtime(format!("reading the answer: {error}")))?;
    Ok(matches!(answer.trim().to_ascii_lowercase().as_str(), "y" | "yes"))
}

/// Prints how many events changed, then `outcome` (the ids asked for that did not change): a failure to print does
/// not hide it.
fn reported(outcome: Outcome, action: Action, changed: usize) -> Outcome {
    match crate::output::line(format_args!("{} {changed} event(s)", action.done())) {
        Ok(()) => outcome,
        Err(printing) => outcome.and(Err(printing)),
    }
}

/// Reports the ids asked for but not changed; exit 1 if there are any.
fn unchanged(asked: &[Uuid], changed: &[Uuid], action: Action) -> Outcome {
    let why = match action {
        Action::Retry => "not failed (or not found)",
        Action::Cancel => "not pending or failed, or being published (or not found)",
    };
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
    outln!("purged {purged} event(s)");
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

fn print_list(events: &[EventSummary], json: bool) -> Outcome {
    if json {
        let list: Vec<Value> = events.iter().map(summary_json).collect();
        outln!("{}", Value::Array(list));
        return Ok(());
    }
    outln!("{:<36}  {:<24}  {:<24}  {:<9}  {:>8}  LAST ERROR", "ID", "TYPE", "AGGREGATE", "STATUS", "ATTEMPTS");
    for event in events {
        let aggregate = format!("{}/{}", event.aggregate_type, event.aggregate_id);
        let error = event.last_error.as_deref().unwrap_or("");
        outln!(
            "{:<36}  {:<24}  {:<24}  {:<9}  {:>8}  {error}",
            event.id,
            event.event_type,
            aggregate,
            event.status.as_str(),
            event.attempts
        );
    }
    Ok(())
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
