//! The consumer: `POST /hooks/payments` receives the relay's signed webhooks and records one receipt per event.

use axum::body::Bytes;
use axum::extract::State;
use axum::http::{HeaderMap, StatusCode};
use outbox_core::consume::Received;
use outbox_core::{DecodeError, Error};

use crate::service::Shared;

/// Verifies the signature, then reads the delivery as `(event id, PaymentPaid)` and records the receipt once per
/// event id with the inbox. Answers `204` for a processed or duplicate delivery, or an event this consumer does
/// not handle (so the relay marks it published), `401` for a bad signature, `400` for a body it cannot read,
/// `500` when the database fails (the relay retries).
pub(crate) async fn receive(State(shared): State<Shared>, headers: HeaderMap, body: Bytes) -> StatusCode {
    if shared.verifier.verify(&body, &headers).is_err() {
        return StatusCode::UNAUTHORIZED;
    }
    let names = headers.iter().filter_map(|(name, value)| Some((name.as_str(), value.to_str().ok()?)));
    match shared.db.record_receipt(&shared.inbox, &Received::new(&body).headers(names)).await {
        Ok(_) | Err(Error::Decode(DecodeError::UnknownType { .. })) => StatusCode::NO_CONTENT,
        Err(Error::Decode(_)) => StatusCode::BAD_REQUEST,
        Err(_) => StatusCode::INTERNAL_SERVER_ERROR,
    }
}
