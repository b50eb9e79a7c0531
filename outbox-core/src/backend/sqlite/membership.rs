//! Relay membership on SQLite: the same steps as on PostgreSQL in one transaction (SQLite has one writer, so no
//! row locks are needed to keep two heartbeats apart), over one partition.

use sqlx::{Row, SqliteConnection, SqlitePool};
use uuid::Uuid;

use super::clock::{self, now};
use super::settle;
use crate::error::Result;
use crate::store::{fair_share, CrashedEvent, Heartbeat, Membership, PartitionLease, SettleOutcome, Settlement};

const RENEW: &str = concat!(
    "INSERT INTO outbox_relays (relay_id, host, expires_at) VALUES (?1, ?2, ",
    now!("?3"),
    ")
     ON CONFLICT (relay_id) DO UPDATE
        SET heartbeat_at = ",
    now!(),
    ", expires_at = excluded.expires_at, host = excluded.host"
);

/// The heartbeat's one moment (`?1`): SQLite reads the clock once per statement, not per transaction, and
/// relays judged dead, live and free at three moments could take a partition from a relay whose crashed batch was
/// not yet counted.
const NOW: &str = concat!("SELECT ", now!());

const REMOVE_DEAD: &str = "DELETE FROM outbox_relays WHERE expires_at < ?1";

const ORPHAN_EVENTS: &str = "\
SELECT e.id, e.attempts FROM outbox_events e
 WHERE e.status = 'pending'
   AND e.id IN (SELECT j.value FROM outbox_batches b, json_each(b.events) j
                 WHERE NOT EXISTS (SELECT 1 FROM outbox_relays r WHERE r.relay_id = b.relay_id))";

const DELETE_ORPHAN_BATCHES: &str = "\
DELETE FROM outbox_batches
 WHERE NOT EXISTS (SELECT 1 FROM outbox_relays r WHERE r.relay_id = outbox_batches.relay_id)";

/// The relay's batches whose settle failed for good (`?2`: a JSON array of batch ids).
const FORGET: &str = "DELETE FROM outbox_batches WHERE relay_id = ?1 AND batch_id IN (SELECT value FROM json_each(?2))";

const RELEASE: &str = concat!(
    "UPDATE outbox_partitions SET owner = NULL, epoch = epoch + 1, changed_at = ",
    now!(),
    " WHERE owner = ?1 AND partition IN (SELECT value FROM json_each(?2))"
);

const LIVE: &str = "SELECT relay_id FROM outbox_relays WHERE expires_at >= ?1 ORDER BY relay_id";

const PARTITIONS: &str = "\
SELECT (SELECT count(*) FROM outbox_partitions) AS partitions,
       COALESCE((SELECT paused FROM outbox_control WHERE id = 1), 0) AS paused";

const OWNED: &str = "SELECT partition, epoch, generation FROM outbox_partitions WHERE owner = ?1 ORDER BY partition";

const TAKE: &str = "\
UPDATE outbox_partitions SET owner = ?1, epoch = epoch + 1, changed_at = ?3
 WHERE partition IN (
       SELECT f.partition FROM outbox_partitions f
        WHERE f.owner IS NULL
           OR NOT EXISTS (SELECT 1 FROM outbox_relays r WHERE r.relay_id = f.owner AND r.expires_at >= ?3)
        ORDER BY f.partition LIMIT ?2)
RETURNING partition, epoch, generation";

pub(super) async fn heartbeat(pool: &SqlitePool, beat: &Heartbeat<'_>) -> Result<Membership> {
    let relay = beat.relay.hyphenated().to_string();
    let mut tx = pool.begin().await?;
    sqlx::query(RENEW).bind(&relay).bind(beat.host).bind(clock::later(beat.lease)).execute(&mut *tx).await?;
    // Read once the renewal holds the write lock.
    let now: String = sqlx::query_scalar(NOW).fetch_one(&mut *tx).await?;
    let removed = sqlx::query(REMOVE_DEAD).bind(&now).execute(&mut *tx).await?.rows_affected();
    let crashed = account_crashes(&mut tx, beat.on_crash).await?;
    if !beat.forget.is_empty() {
        let forget: Vec<String> = beat.forget.iter().map(|batch| batch.hyphenated().to_string()).collect();
        let forget = serde_json::to_string(&forget).unwrap_or_else(|_| String::from("[]"));
        sqlx::query(FORGET).bind(&relay).bind(forget).execute(&mut *tx).await?;
    }
    if !beat.release.is_empty() {
        let release = serde_json::to_string(beat.release).unwrap_or_else(|_| String::from("[]"));
        sqlx::query(RELEASE).bind(&relay).bind(release).execute(&mut *tx).await?;
    }
    let relays = sqlx::query_scalar::<_, String>(LIVE)
        .bind(&now)
        .fetch_all(&mut *tx)
        .await?
        .iter()
        .map(|id| clock::uuid(id))
        .collect::<Result<Vec<Uuid>>>()?;
    let row = sqlx::query(PARTITIONS).fetch_one(&mut *tx).await?;
    let partitions = u16::try_from(row.try_get::<i64, _>("partitions")?).unwrap_or(u16::MAX);
    let paused = row.try_get::<i64, _>("paused")? != 0;
    let rank = relays.iter().position(|r| *r == beat.relay).unwrap_or(relays.len());
    let share = fair_share(partitions, relays.len().max(rank + 1), rank);
    let mut owned = leases(&sqlx::query(OWNED).bind(&relay).fetch_all(&mut *tx).await?)?;
    let missing = usize::from(share).saturating_sub(owned.len());
    if beat.take && missing > 0 {
        let taken = sqlx::query(TAKE).bind(&relay).bind(missing as i64).bind(&now).fetch_all(&mut *tx).await?;
        owned.extend(leases(&taken)?);
        owned.sort();
    }
    tx.commit().await?;
    Ok(Membership { relays, partitions, share, owned, crashed, removed, paused })
}

async fn account_crashes(
    conn: &mut SqliteConnection,
    on_crash: &(dyn Fn(&CrashedEvent) -> SettleOutcome + Send + Sync),
) -> Result<u64> {
    let rows = sqlx::query(ORPHAN_EVENTS).fetch_all(&mut *conn).await?;
    sqlx::query(DELETE_ORPHAN_BATCHES).execute(&mut *conn).await?;
    if rows.is_empty() {
        return Ok(0);
    }
    let mut settlements = Vec::with_capacity(rows.len());
    for row in rows {
        let event = CrashedEvent {
            id: clock::uuid(row.try_get("id")?)?,
            attempts: row.try_get::<i64, _>("attempts")?.unsigned_abs().try_into().unwrap_or(u32::MAX),
        };
        settlements.push(Settlement::new(event.id, on_crash(&event)));
    }
    settle::apply_unfenced(conn, &settlements).await
}

fn leases(rows: &[sqlx::sqlite::SqliteRow]) -> Result<Vec<PartitionLease>> {
    rows.iter()
        .map(|row| {
            Ok(PartitionLease::new(
                u16::try_from(row.try_get::<i64, _>("partition")?).unwrap_or(u16::MAX),
                row.try_get("epoch")?,
                row.try_get("generation")?,
            ))
        })
        .collect()
}

pub(super) async fn leave(pool: &SqlitePool, relay: Uuid) -> Result<()> {
    let relay = relay.hyphenated().to_string();
    let mut tx = pool.begin().await?;
    let release = concat!(
        "UPDATE outbox_partitions SET owner = NULL, epoch = epoch + 1, changed_at = ",
        now!(),
        " WHERE owner = ?1"
    );
    sqlx::query(release).bind(&relay).execute(&mut *tx).await?;
    sqlx::query("DELETE FROM outbox_batches WHERE relay_id = ?1").bind(&relay).execute(&mut *tx).await?;
    sqlx::query("DELETE FROM outbox_relays WHERE relay_id = ?1").bind(&relay).execute(&mut *tx).await?;
    tx.commit().await?;
    Ok(())
}
