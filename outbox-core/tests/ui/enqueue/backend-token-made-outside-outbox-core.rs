// The token the backend's SQL takes cannot be made outside outbox-core: its module is private.
use outbox_core::{Backend, NewEvent};

async fn write(conn: &mut sqlx::PgConnection, event: NewEvent) -> Result<(), outbox_core::Error> {
    let token = outbox_core::backend::sealed::Internal(());
    <sqlx::Postgres as Backend>::insert_events(token, conn, &[event], None).await
}

fn main() {}
