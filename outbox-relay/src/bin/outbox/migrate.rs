//! `outbox migrate`.

use crate::{connect, Failure, Outcome};

pub(crate) async fn run(database_url: Option<&str>) -> Outcome {
    connect::open(database_url, 2).await?.migrate().await.map_err(Failure::runtime)?;
    outln!("outbox tables are up to date");
    Ok(())
}
