//! The relay works with the least-privileged role of `migrations/roles/postgres_relay_role.sql`, and that role
//! can do nothing else: no inserting events, no pausing, no other tables.

use std::time::Duration;

use outbox_core::store::{PgStore, Store};
use outbox_core::{Outbox, OutboxEvent};
use outbox_relay::{CancellationToken, Relay, RelayConfig, Retention, StdoutPublisher};
use outbox_tests::pg::TestDatabase;
use serde::Serialize;
use sqlx::postgres::PgConnectOptions;

#[derive(Serialize)]
struct Shipped {
    parcel: u32,
}

impl OutboxEvent for Shipped {
    const EVENT_TYPE: &'static str = "parcel.shipped";
    const AGGREGATE_TYPE: &'static str = "parcel";
    const VERSION: u32 = 1;

    fn aggregate_id(&self) -> String {
        self.parcel.to_string()
    }
}

#[tokio::test]
async fn relay_publishes_and_retains_with_only_the_relay_role() {
    let db = TestDatabase::migrated().await;
    // Roles belong to the whole server: a name of this test's own.
    let role = format!("outbox_relay_{}", uuid::Uuid::now_v7().simple());
    sqlx::raw_sql(&outbox_tests::pg::relay_role_sql(&role)).execute(&db.pool).await.unwrap();
    sqlx::raw_sql(&format!("ALTER ROLE {role} LOGIN")).execute(&db.pool).await.unwrap();
    sqlx::raw_sql("CREATE TABLE secrets (value TEXT)").execute(&db.pool).await.unwrap();

    let events: Vec<_> = (0..50).map(|parcel| Shipped { parcel }).collect();
    let mut tx = db.pool.begin().await.unwrap();
    Outbox::new().enqueue_all(&mut tx, &events).await.unwrap();
    tx.commit().await.unwrap();

    let options: PgConnectOptions = db.url.parse::<PgConnectOptions>().unwrap().username(&role);
    let relay_pool = sqlx::postgres::PgPoolOptions::new().max_connections(4).connect_with(options).await.unwrap();
    let config = RelayConfig::builder()
        .poll_interval(Duration::from_millis(10))
        .retention(Retention::Immediately)
        .build()
        .unwrap();
    let shutdown = CancellationToken::new();
    let running = tokio::spawn(
        Relay::new(PgStore::new(relay_pool.clone()), StdoutPublisher::new(), config).run(shutdown.clone()),
    );
    let deadline = tokio::time::Instant::now() + Duration::from_secs(30);
    loop {
        let left: i64 = sqlx::query_scalar("SELECT count(*) FROM outbox_events").fetch_one(&db.pool).await.unwrap();
        if left == 0 {
            break;
        }
        assert!(tokio::time::Instant::now() < deadline, "{left} events left after 30 s with the relay role");
        tokio::time::sleep(Duration::from_millis(20)).await;
    }
    shutdown.cancel();
    let summary = running.await.unwrap().unwrap();
    assert_eq!(summary.published, 50);

    // Everything else is refused.
    let mut tx = relay_pool.begin().await.unwrap();
    let insert = Outbox::new().enqueue(&mut tx, &Shipped { parcel: 99 }).await;
    assert!(insert.is_err(), "the relay role must not write events");
    drop(tx);
    assert!(PgStore::new(relay_pool.clone()).set_paused(true).await.is_err(), "the relay role must not pause");
    let read = sqlx::query("SELECT value FROM secrets").fetch_all(&relay_pool).await;
    assert!(read.is_err(), "the relay role must not read other tables");
}
