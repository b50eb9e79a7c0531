//! Creating and upgrading the outbox tables.

use crate::backend::Backend;
use crate::error::Result;

/// The table that records which outbox migrations were applied.
///
/// It is separate from sqlx's `_sqlx_migrations`, so the outbox migrations and an application's own
/// `sqlx::migrate!()` never see each other's versions.
pub const MIGRATIONS_TABLE: &str = "_outbox_migrations";

/// Creates or upgrades the outbox tables (`outbox_events`, `outbox_inbox`).
///
/// Safe to call at every start and from several processes at once: applied migrations are skipped, and
/// concurrent callers wait for each other. Migrations are recorded in [`MIGRATIONS_TABLE`].
///
/// # Errors
///
/// [`Error::Database`](crate::Error::Database) when a statement fails, and
/// [`Error::Migrate`](crate::Error::Migrate) when an applied migration was changed since.
///
/// # Example
///
/// ```no_run
/// # async fn run() -> Result<(), outbox_core::Error> {
/// let pool = sqlx::PgPool::connect("postgres://localhost/shop").await?;
/// outbox_core::migrate(&pool).await?;
/// # Ok(())
/// # }
/// ```
pub async fn migrate<DB: Backend>(pool: &sqlx::Pool<DB>) -> Result<()> {
    DB::migrate(crate::backend::Internal::TOKEN, pool).await
}
