// The backend's SQL is not a way around the transaction: its methods take a token only outbox-core can make.
use outbox_core::{Backend, NewEvent, OutboxEvent};

#[derive(serde::Serialize)]
struct PaymentPaid {
    payment_id: i64,
}

impl OutboxEvent for PaymentPaid {
    const EVENT_TYPE: &'static str = "payment.paid";
    const AGGREGATE_TYPE: &'static str = "payment";
    const VERSION: u32 = 1;

    fn aggregate_id(&self) -> String {
        self.payment_id.to_string()
    }
}

async fn confirm(conn: &mut sqlx::PgConnection) -> Result<(), outbox_core::Error> {
    let event = NewEvent::new(&PaymentPaid { payment_id: 1 })?;
    // A bare connection autocommits each statement.
    <sqlx::Postgres as Backend>::insert_events(conn, &[event], None).await
}

fn main() {}
