//! The payment API: `POST /payments/{id}/confirm`, `GET /payments/{id}`.

use axum::extract::{Path, State};
use axum::http::StatusCode;
use axum::response::{IntoResponse, Response};
use axum::Json;
use serde_json::json;

use crate::service::Shared;
use crate::Confirmation;

pub(crate) async fn confirm(State(shared): State<Shared>, Path(id): Path<i64>) -> Response {
    match shared.db.confirm_payment(&shared.outbox, id).await {
        Ok(Confirmation::Paid(event)) => {
            (StatusCode::OK, Json(json!({ "status": "paid", "event": event }))).into_response()
        }
        Ok(Confirmation::AlreadyPaid) => {
            (StatusCode::CONFLICT, Json(json!({ "error": "payment already paid" }))).into_response()
        }
        Ok(Confirmation::Unknown) => {
            (StatusCode::NOT_FOUND, Json(json!({ "error": "no such payment" }))).into_response()
        }
        Err(error) => (StatusCode::INTERNAL_SERVER_ERROR, Json(json!({ "error": error.to_string() }))).into_response(),
    }
}

pub(crate) async fn show(State(shared): State<Shared>, Path(id): Path<i64>) -> Response {
    match shared.db.payment_status(id).await {
        Ok(Some(status)) => Json(json!({ "id": id, "status": status })).into_response(),
        Ok(None) => (StatusCode::NOT_FOUND, Json(json!({ "error": "no such payment" }))).into_response(),
        Err(error) => (StatusCode::INTERNAL_SERVER_ERROR, Json(json!({ "error": error.to_string() }))).into_response(),
    }
}
