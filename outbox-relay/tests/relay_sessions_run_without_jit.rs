//! The relay's connections run without JIT compilation: beside a long published history PostgreSQL would compile
//! the relay's read with LLVM at every call (see `PgStore::pool_options`).

use outbox_core::store::PgStore;
use outbox_tests::pg::TestDatabase;

#[tokio::test]
async fn every_session_of_the_relays_pool_has_jit_off() {
    let db = TestDatabase::migrated().await;
    // The server's default is on: the pool changes its own sessions only.
    let server_default: String = sqlx::query_scalar("SHOW jit").fetch_one(&db.pool).await.unwrap();
    assert_eq!(server_default, "on");
    let pool = PgStore::pool_options().max_connections(3).connect(&db.url).await.unwrap();
    // Three sessions held at once, so each is a connection of its own.
    let mut sessions = Vec::new();
    for _ in 0..3 {
        sessions.push(pool.acquire().await.unwrap());
    }
    let mut pids = Vec::new();
    for session in &mut sessions {
        let (pid, jit): (i32, String) =
            sqlx::query_as("SELECT pg_backend_pid(), current_setting('jit')").fetch_one(&mut **session).await.unwrap();
        assert_eq!(jit, "off", "session {pid}");
        pids.push(pid);
    }
    pids.sort_unstable();
    pids.dedup();
    assert_eq!(pids.len(), 3);
    drop(sessions);
    pool.close().await;
}
