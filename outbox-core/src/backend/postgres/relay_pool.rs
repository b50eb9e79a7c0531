//! The relay's pool: sessions that plan its statements for the table as it will be, not as it was.
//!
//! Two settings, each run once as a connection opens:
//!
//! - `SET jit = off`: see [`jit`](super::jit). Beside a long published history PostgreSQL would compile the read
//!   with LLVM at every call.
//! - `SET enable_seqscan = off`: the relay prepares each of its statements once per connection, and PostgreSQL
//!   keeps the plan it makes after five calls until the table's statistics next change (an `ANALYZE`, a
//!   `VACUUM`). Made while `outbox_events` is empty or a few pages long (a new table, or one that `--retention
//!   0s` keeps short, vacuumed in a quiet hour), that plan reads each partition's range with a sequential scan and
//!   a sort, and joins a settle's batch to a scan of the whole table. It keeps doing so as a backlog arrives, until
//!   autovacuum's next `ANALYZE` of the table. Measured in `psql` with the plan made on the vacuumed empty table
//!   and 100,000 rows inserted since: a read of 1,000 rows over the 256 partitions took 3.6 s (595,456 buffer
//!   accesses) against 4.5 ms (1,700) with sequential scans off. Every statement of the relay that reads
//!   `outbox_events` has an index that bounds it by what it returns, and is written so that no plan walks a whole
//!   index instead (see `located_or_moved` in [`settle`](super::settle)). The setting makes a sequential scan the
//!   last choice, not an impossible one: a count of every pending row when most rows are pending still scans the
//!   table once, as it should.

use sqlx::postgres::PgPoolOptions;
use sqlx::Executor;

use crate::store::PgStore;

/// What each of the relay's sessions runs as it opens (see the module's documentation).
const SESSION_SETTINGS: &str = "SET jit = off; SET enable_seqscan = off";

impl PgStore {
    /// Pool options for a relay's connections, as the `outbox` CLI makes them: each connection turns JIT
    /// compilation and sequential scans off for its session once, when it opens (`SET jit = off; SET
    /// enable_seqscan = off`). Set the pool's size and timeouts on them as for any pool; an `after_connect` of
    /// your own replaces this one, so run both settings in it too. Use a pool of its own for the relay rather than
    /// the application's, whose statements are planned for themselves.
    ///
    /// - Beside a long published history (a small backlog in a table that keeps millions of published rows),
    ///   PostgreSQL would otherwise compile the relay's read with LLVM at every call, which costs more than the
    ///   read: with 10 million rows kept, a drain ran at half the rate of the same drain on an empty table.
    /// - A relay whose statements were first planned while the table was empty or a few pages long would
    ///   otherwise read each partition's range, and settle each batch, with a scan of the whole table until the
    ///   table is next analyzed: a read of 1,000 rows beside 100,000 new ones took 3.6 s instead of 4.5 ms.
    ///
    /// ```no_run
    /// # async fn run() -> Result<(), sqlx::Error> {
    /// use outbox_core::store::PgStore;
    ///
    /// let pool = PgStore::pool_options().max_connections(9).connect("postgres://relay@localhost/app").await?;
    /// let store = PgStore::new(pool);
    /// # let _ = store;
    /// # Ok(())
    /// # }
    /// ```
    #[must_use]
    pub fn pool_options() -> PgPoolOptions {
        PgPoolOptions::new().after_connect(|conn, _meta| {
            Box::pin(async move {
                conn.execute(SESSION_SETTINGS).await?;
                Ok(())
            })
        })
    }
}
