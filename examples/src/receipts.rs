//! The consumer: `POST /hooks/payments` receives the relay's signed webhooks and records one receipt per event.

use axum::body::Bytes;
use axum::extract::State;
use axum::http::{HeaderMap, StatusCode};
use serde::Deserialize;

use crate::service::Shared;
use crate::PaymentPaid;

/// The webhook body the relay sends (the fields the consumer reads).
#[derive(Deserialize)]
struct Delivery {
    #[serde(rename = "type")]
    event_type: String,
    data: serde_json::Value,
}

/// Verifies the signature, deduplicates by event id with the inbox, and records the receipt. Answers `204`
/// for a processed or duplicate delivery (so the relay marks it published), `401` for a bad signature, `400` for
/// a body it cannot read, `500` when the database fails (the relay retries).
pub(crate) async fn receive(State(shared): State<Shared>, headers: HeaderMap, body: Bytes) -> StatusCode {
    if shared.verifier.verify(&body, &headers).is_err() {
        return StatusCode::UNAUTHORIZED;
    }
    let names = headers.iter().filter_map(|(name, value)| Some((name.as_str(), value.to_str().ok()?)));
    let Some(event_id) = outbox_core::inbox::event_id_from_headers(names) else {
        return StatusCode::BAD_REQUEST;
    };
    let Ok(delivery) = serde_json::from_slice::<Delivery>(&body) else {
        return StatusCode::BAD_REQUEST;
    };
    if delivery.event_type != "payment.paid" {
        return StatusCode::NO_CONTENT; // not an event this consumer handles
    }
    let Ok(event) = serde_json::from_value::<PaymentPaid>(delivery.data) else {
        return StatusCode::BAD_REQUEST;
    };
    match shared.db.record_receipt(&shared.inbox, event_id, &event).await {
        Ok(_) => StatusCode::NO_CONTENT,
        Err(_) => StatusCode::INTERNAL_SERVER_ERROR,
    }
}
