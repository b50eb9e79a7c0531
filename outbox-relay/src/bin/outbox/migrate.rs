//! `outbox migrate`.

use crate::{connect, Failure, Outcome};

pub(crate) async fn run(database_url: Option<&str>) -> Outcome {
    let pool = connect::connect(database_url, 2).await?;
    outbox_core::migrate(&pool).await.map_err(Failure::runtime)?;
    println!("outbox tables are up to date");
    Ok(())
}
