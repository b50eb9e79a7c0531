//! The consumer: `POST /hooks/payments` receives the relay's signed webhooks and records one receipt per event.

use axum::body::Bytes;
use axum::extract::State;
use axum::http::{HeaderMap, StatusCode};
use outbox_core::consume::Received;
use outbox_core::DecodeError;

use crate::service::Shared;
use crate::PaymentPaid;

/// Verifies the signature, reads the delivery as `(event id, PaymentPaid)`, deduplicates by event id with the
/// inbox, and records the receipt. Answers `204` for a processed or duplicate delivery, or an event this consumer
/// does not handle (so the relay marks it published), `401` for a bad signature, `400` for a body it cannot read,
/// `500` when the database fails (the relay retries).
pub(crate) async fn receive(State(shared): State<Shared>, headers: HeaderMap, body: Bytes) -> StatusCode {
    if shared.verifier.verify(&body, &headers).is_err() {
        return StatusCode::UNAUTHORIZED;
    }
    let names = headers.iter().filter_map(|(name, value)| Some((name.as_str(), value.to_str().ok()?)));
    let (event_id, event) = match Received::new(&body).headers(names).decode::<PaymentPaid>() {
        Ok(decoded) => decoded,
        Err(DecodeError::UnknownType { .. }) => return StatusCode::NO_CONTENT, // not an event this consumer handles
        Err(_) => return StatusCode::BAD_REQUEST,
    };
    match shared.db.record_receipt(&shared.inbox, event_id, &event).await {
        Ok(_) => StatusCode::NO_CONTENT,
        Err(_) => StatusCode::INTERNAL_SERVER_ERROR,
    }
}
