//! `outbox wal enable | disable | drop-slot`: which source publishes the outbox table, and the WAL relay's slot.

use outbox_core::store::{Source, SourceSwitch};

use crate::args::WalCommand;
use crate::connect::{self, Database};
use crate::{Failure, Outcome};

pub(crate) async fn run(database_url: Option<&str>, command: WalCommand) -> Outcome {
    let Database::Postgres(pool) = connect::open(database_url, 2).await? else {
        return Err(Failure::Usage("the WAL source needs PostgreSQL; this database is SQLite".to_owned()));
    };
    let store = outbox_core::store::PgStore::new(pool);
    let switched = match command {
        WalCommand::Enable => store.switch_source(Source::Wal).await,
        WalCommand::Disable => store.switch_source(Source::Table).await,
        WalCommand::DropSlot => match store.drop_wal_slot().await.map_err(Failure::runtime)? {
            None => {
                outln!("no slot to drop");
                return Ok(());
            }
            Some(switch) => Ok(switch),
        },
    }
    .map_err(Failure::runtime)?;
    match (command, switched) {
        (WalCommand::Enable, SourceSwitch::Switched { .. }) => {
            outln!("the WAL source publishes the table now: start `outbox relay --source wal`");
        }
        (WalCommand::Enable, SourceSwitch::Unchanged) => outln!("the WAL source already publishes the table"),
        (WalCommand::Disable, SourceSwitch::Switched { moved_to_table, slot_lost, slot_dropped }) => {
            let slot = if slot_dropped {
                format!(" (the slot is dropped{}{})", moved(moved_to_table), lost(slot_lost))
            } else {
                String::new()
            };
            outln!("the table source publishes the table now{slot}: start `outbox relay`");
        }
        (WalCommand::Disable, SourceSwitch::Unchanged) => outln!("the table source already publishes the table"),
        (WalCommand::DropSlot, SourceSwitch::Switched { moved_to_table, slot_lost, .. }) => {
            outln!("slot dropped{}{}", moved(moved_to_table), lost(slot_lost));
        }
        (_, SourceSwitch::TableRelaysLive(relays)) => {
            return Err(Failure::Runtime(format!(
                "{} table relay(s) are live; stop them, then run `outbox wal enable` again",
                relays.len()
            )));
        }
        (_, SourceSwitch::SlotActive(slot)) => {
            return Err(Failure::Runtime(format!(
                "the WAL relay is reading slot `{slot}`; stop it, then run this again"
            )));
        }
        (_, _) => {}
    }
    Ok(())
}

/// What an invalidated slot's removal could not do.
fn lost(slot_lost: bool) -> &'static str {
    if slot_lost {
        "; the server had invalidated it (max_slot_wal_keep_size), so message-mode events in the WAL it lost are \
         gone; the table's pending rows are published by the next relay"
    } else {
        ""
    }
}

/// What the slot's removal did with the message-mode events it had not published.
fn moved(events: u64) -> String {
    match events {
        0 => String::new(),
        1 => "; 1 unpublished message-mode event is now a pending row".to_owned(),
        n => format!("; {n} unpublished message-mode events are now pending rows"),
    }
}
