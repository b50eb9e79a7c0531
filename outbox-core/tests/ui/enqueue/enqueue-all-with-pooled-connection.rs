use outbox_core::OutboxEvent;

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

async fn confirm(pool: sqlx::PgPool) -> Result<(), outbox_core::Error> {
    let mut conn = pool.acquire().await?;
    outbox_core::Outbox::new().enqueue_all(&mut conn, &[PaymentPaid { payment_id: 1 }]).await?;
    Ok(())
}

fn main() {}
