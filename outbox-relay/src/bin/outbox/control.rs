//! `outbox pause` and `outbox resume`.

use outbox_core::store::{PgStore, Store};

use crate::{connect, Failure, Outcome};

pub(crate) async fn run(database_url: Option<&str>, paused: bool) -> Outcome {
    let store = PgStore::new(connect::connect(database_url, 2).await?);
    store.set_paused(paused).await.map_err(Failure::runtime)?;
    if paused {
        println!("paused: relays stop claiming; in-flight batches finish (`outbox resume` to resume)");
    } else {
        println!("resumed: relays claim again");
    }
    Ok(())
}
