//! Commit notifications: `LISTEN` on a dedicated connection.

use sqlx::postgres::PgListener;
use sqlx::PgPool;

use crate::error::Result;
use crate::store::{StoreFuture, Wakeups};

struct PgWakeups {
    listener: PgListener,
}

impl Wakeups for PgWakeups {
    fn next(&mut self) -> StoreFuture<'_, ()> {
        Box::pin(async move {
            // A notification, or a connection lost and made again (`None`; it fails when reconnecting fails):
            // notifications sent meanwhile were lost, so a reconnection wakes the relay as one does.
            self.listener.try_recv().await?;
            Ok(())
        })
    }
}

pub(super) async fn listen(pool: &PgPool, channel: &str) -> Result<Box<dyn Wakeups>> {
    crate::enqueue::valid_identifier(channel)?;
    let mut listener = PgListener::connect_with(pool).await?;
    listener.listen(channel).await?;
    Ok(Box::new(PgWakeups { listener }))
}
