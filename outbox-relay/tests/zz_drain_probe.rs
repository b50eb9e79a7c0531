mod common;
use std::time::{Duration, Instant};
use common::{count, event, start, wait_until};
use outbox_core::store::Ordering;
use outbox_relay::{Message, Outcome, Publisher};
use outbox_tests::pg::TestDatabase;

struct Null;
impl Publisher for Null {
    async fn publish(&self, batch: &[Message]) -> Vec<Outcome> { vec![Outcome::Published; batch.len()] }
}

#[tokio::test]
#[ignore]
async fn probe() {
    for (ordering, batch) in [(Ordering::None, 100), (Ordering::None, 1000), (Ordering::Aggregate, 100), (Ordering::Aggregate, 1000)] {
        let db = TestDatabase::migrated().await;
        let n = 20_000u32;
        let t = Instant::now();
        for chunk in 0..(n / 100) {
            let events: Vec<_> = (0..100).map(|i| event(format!("agg-{}", (chunk * 100 + i) % 1000), chunk)).collect();
            common::enqueue(&db.pool, &events).await;
        }
        let insert = t.elapsed();
        let t = Instant::now();
        let relay = start(&db, Null, common::config().ordering(ordering).batch_size(batch).build().unwrap());
        wait_until(Duration::from_secs(300), "drained", || async { count(&db.pool, "published").await == n as i64 }).await;
        let drain = t.elapsed();
        relay.stop().await;
        println!("{ordering:?} batch {batch}: insert {:.0}/s drain {:.0}/s ratio {:.2}", n as f64 / insert.as_secs_f64(), n as f64 / drain.as_secs_f64(), insert.as_secs_f64() / drain.as_secs_f64());
    }
}
