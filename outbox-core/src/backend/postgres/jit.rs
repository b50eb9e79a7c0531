//! Statements that run without JIT compilation.
//!
//! PostgreSQL compiles a statement with LLVM when the planner's estimate of its cost passes `jit_above_cost`. The
//! relay's statements are short, repeated and planned at every call, so compiling never pays for itself, and on a
//! large table several of them pass the threshold:
//!
//! - the read of pending rows, once the table keeps a long published history: the planner expects to walk many
//!   published entries of each partition's range to find its pending ones. With 10 million published rows kept,
//!   compiling took 4.9 s of its 7.2 s over a 200,000-event drain (`pg_stat_statements`, `jit_*_time`);
//! - the statements that read every pending row ([`pending_rows`](super::pending::pending_rows)): the planner
//!   counts both of their plans, one of which never runs, and on a table of a million rows or more compiling was
//!   most of each call.
//!
//! These run in a transaction that turns JIT off for itself (`SET LOCAL`, sent with its `BEGIN` in one round trip),
//! so a server's or a pool's settings are left as they are.

use sqlx::{PgConnection, PgPool, Postgres, Transaction};

use crate::error::Result;

/// A transaction on `pool` in which statements run without JIT compilation, begun in one round trip. Commit it.
pub(super) async fn without_jit(pool: &PgPool) -> Result<Transaction<'static, Postgres>> {
    Ok(pool.begin_with("BEGIN; SET LOCAL jit = off").await?)
}

/// Turns JIT compilation off for the rest of the transaction on `conn` (see [`without_jit`]); for a transaction
/// whose first statements must be others (`SET TRANSACTION ...`).
pub(super) async fn jit_off(conn: &mut PgConnection) -> Result<()> {
    sqlx::query("SET LOCAL jit = off").execute(conn).await?;
    Ok(())
}
