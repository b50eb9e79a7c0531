//! `outbox pause` and `outbox resume`.

use crate::{connect, Failure, Outcome};

pub(crate) async fn run(database_url: Option<&str>, paused: bool) -> Outcome {
    let store = connect::open(database_url, 2).await?.store();
    store.set_paused(paused).await.map_err(Failure::runtime)?;
    if paused {
        outln!("paused: relays stop reading new batches; in-flight batches finish (`outbox resume` to resume)");
    } else {
        outln!("resumed: relays publish again");
    }
    Ok(())
}
