//! Statements that run without JIT compilation.
//!
//! PostgreSQL compiles a statement with LLVM when the planner's estimate of its cost passes `jit_above_cost`. The
//! relay's statements are short, repeated and planned at every call, so compiling never pays for itself, and on a
//! large table some of them pass the threshold:
//!
//! - the read of pending rows, once the table keeps a long published history: the planner expects to walk many
//!   published entries of each partition's range to find its pending ones. With 10 million published rows kept,
//!   compiling took 4.9 s of its 7.2 s over a 200,000-event drain (`pg_stat_statements`, `jit_*_time`);
//! - the statements that read every pending row ([`pending_rows`](super::pending::pending_rows)): the planner
//!   counts both of their plans, one of which never runs, and on a table of a million rows or more compiling was
//!   most of each call.
//!
//! The relay's pool turns JIT off for its sessions ([`relay_pool`](super::relay_pool)): no statement and no round
//! trip per read, and no transaction left open by a relay that stops between two statements. The statements that
//! read every pending row also turn JIT off for themselves, whatever pool they are given: the backlog gauges, which a
//! relay refreshes every few seconds, in the same message as the statement ([`fetch_all_without_jit`]); `outbox
//! status` and the WAL source's start in a transaction ([`without_jit`], [`jit_off`]).

use sqlx::postgres::PgRow;
use sqlx::{Executor, PgConnection, PgPool, Postgres, Transaction};

use crate::error::Result;

/// A transaction on `pool` in which statements run without JIT compilation, begun in one round trip. Commit it.
pub(super) async fn without_jit(pool: &PgPool) -> Result<Transaction<'static, Postgres>> {
    Ok(pool.begin_with("BEGIN; SET LOCAL jit = off").await?)
}

/// The rows of `statement` (no parameters) run without JIT compilation: `SET LOCAL jit = off` and the statement
/// travel in one simple-protocol message, one implicit transaction that the server opens and ends by itself. For a
/// statement a relay runs again and again: a relay stopped while it waits for the answer (SIGSTOP, a paused VM)
/// holds no transaction open, as it would between the round trips of [`without_jit`].
pub(super) async fn fetch_all_without_jit(conn: &mut PgConnection, statement: &str) -> Result<Vec<PgRow>> {
    let sql = format!("SET LOCAL jit = off;\n{statement}");
    Ok(conn.fetch_all(sql.as_str()).await?)
}

/// Turns JIT compilation off for the rest of the transaction on `conn` (see [`without_jit`]); for a transaction
/// whose first statements must be others (`SET TRANSACTION ...`).
pub(super) async fn jit_off(conn: &mut PgConnection) -> Result<()> {
    sqlx::query("SET LOCAL jit = off").execute(conn).await?;
    Ok(())
}
