use outbox_core::{Error, MIGRATIONS_TABLE};
use outbox_tests::pg::TestDatabase;

static APP_MIGRATOR: sqlx::migrate::Migrator = sqlx::migrate!("fixtures/app_migrations");

async fn outbox_tables(pool: &sqlx::PgPool) -> Vec<String> {
    sqlx::query_scalar(
        "SELECT table_name::text FROM information_schema.tables
          WHERE table_schema = 'public' AND table_name LIKE '%outbox%' ORDER BY 1",
    )
    .fetch_all(pool)
    .await
    .unwrap()
}

fn assert_has_outbox_tables(tables: &[String]) {
    for table in ["_outbox_migrations", "outbox_events", "outbox_inbox"] {
        assert!(tables.iter().any(|t| t == table), "{table} missing from {tables:?}");
    }
}

#[tokio::test]
async fn migrating_twice_is_harmless_and_keeps_the_data() {
    let db = TestDatabase::create().await;
    outbox_core::migrate(&db.pool).await.unwrap();
    let tables = outbox_tables(&db.pool).await;
    assert_has_outbox_tables(&tables);
    let mut tx = db.pool.begin().await.unwrap();
    outbox_core::enqueue(&mut tx, &crate::events::payment(1)).await.unwrap();
    tx.commit().await.unwrap();

    outbox_core::migrate(&db.pool).await.unwrap();
    assert_eq!(crate::events::count_events(&db.pool).await, 1);
    assert_eq!(outbox_tables(&db.pool).await, tables);
    let applied: i64 =
        sqlx::query_scalar(&format!("SELECT count(*) FROM {MIGRATIONS_TABLE}")).fetch_one(&db.pool).await.unwrap();
    let known = std::fs::read_dir(concat!(env!("CARGO_MANIFEST_DIR"), "/../migrations/postgres")).unwrap().count();
    assert_eq!(applied, i64::try_from(known).unwrap(), "each migration is recorded once");
}

#[tokio::test]
async fn concurrent_migrations_wait_for_each_other() {
    let db = TestDatabase::create().await;
    let runs: Vec<_> = (0..4)
        .map(|_| {
            let pool = db.pool.clone();
            tokio::spawn(async move { outbox_core::migrate(&pool).await })
        })
        .collect();
    for run in runs {
        run.await.unwrap().unwrap();
    }
    assert_has_outbox_tables(&outbox_tables(&db.pool).await);
}

#[tokio::test]
async fn outbox_and_application_migrations_do_not_see_each_other() {
    let db = TestDatabase::create().await;
    APP_MIGRATOR.run(&db.pool).await.unwrap();
    outbox_core::migrate(&db.pool).await.unwrap();
    // The application's migrator still finds only its own versions: no "previously applied but missing" error.
    APP_MIGRATOR.run(&db.pool).await.unwrap();
    outbox_core::migrate(&db.pool).await.unwrap();

    let app_versions: Vec<i64> =
        sqlx::query_scalar("SELECT version FROM _sqlx_migrations").fetch_all(&db.pool).await.unwrap();
    assert_eq!(app_versions, [20250101000000]);
    let outbox_versions: Vec<i64> =
        sqlx::query_scalar(&format!("SELECT version FROM {MIGRATIONS_TABLE}")).fetch_all(&db.pool).await.unwrap();
    assert!(!outbox_versions.is_empty() && !outbox_versions.contains(&20250101000000));
}

#[tokio::test]
async fn an_applied_migration_that_changed_is_reported() {
    let db = TestDatabase::create().await;
    outbox_core::migrate(&db.pool).await.unwrap();
    sqlx::query(&format!("UPDATE {MIGRATIONS_TABLE} SET checksum = '\\x00'::bytea WHERE version = (SELECT min(version) FROM {MIGRATIONS_TABLE})"))
        .execute(&db.pool)
        .await
        .unwrap();
    let error = outbox_core::migrate(&db.pool).await.unwrap_err();
    assert!(matches!(error, Error::Migrate(sqlx::migrate::MigrateError::VersionMismatch(_))), "{error:?}");
}

#[tokio::test]
async fn a_migration_dropped_while_it_holds_the_lock_leaves_no_pooled_session_holding_it() {
    let db = TestDatabase::migrated().await;
    // Another session holds the bookkeeping table, so a migration waits there with the migration lock taken.
    let mut holder = db.pool.begin().await.unwrap();
    sqlx::query(&format!("LOCK TABLE {MIGRATIONS_TABLE} IN ACCESS EXCLUSIVE MODE"))
        .execute(&mut *holder)
        .await
        .unwrap();
    let pool = sqlx::postgres::PgPoolOptions::new().max_connections(2).connect(&db.url).await.unwrap();
    let dropped = tokio::time::timeout(std::time::Duration::from_millis(500), outbox_core::migrate(&pool)).await;
    assert!(dropped.is_err(), "the migration did not wait for the table");
    holder.rollback().await.unwrap();
    // Another process's migration gets the lock: the dropped one's session did not go back to its pool with it.
    let other = sqlx::postgres::PgPoolOptions::new().max_connections(1).connect(&db.url).await.unwrap();
    let migrated = tokio::time::timeout(std::time::Duration::from_secs(10), outbox_core::migrate(&other)).await;
    assert!(matches!(migrated, Ok(Ok(()))), "the next migration waited for a lock nobody releases: {migrated:?}");
    pool.close().await;
    other.close().await;
}
