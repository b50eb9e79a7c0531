//! A webhook consumer on 127.0.0.1 (a real axum server): verifies each request's Standard Webhooks signature,
//! records the deliveries in arrival order, and rejects one event for good (HTTP 422) until told it is fixed.

use std::sync::atomic::{AtomicBool, AtomicUsize, Ordering};
use std::sync::{Arc, Mutex};

use axum::body::Bytes;
use axum::http::{HeaderMap, StatusCode};
use uuid::Uuid;

use crate::deliveries::Delivered;
use crate::events::OrderPlaced;

/// The signing secret shared with the relay (`OUTBOX_WEBHOOK_SECRET`); as secret as a sensitive value.
pub(crate) const SECRET: &str = "whsec_ZmF1bHQtc3VpdGUtd2ViaG9vay1zZWNyZXQtMzJi";

/// What the receiver saw.
#[derive(Default)]
pub(crate) struct Receiver {
    delivered: Mutex<Vec<Delivered>>,
    rejected: Mutex<Vec<Uuid>>,
    poison: Mutex<Option<Uuid>>,
    fixed: AtomicBool,
    bad_signatures: AtomicUsize,
}

impl Receiver {
    /// Answers 422 to `id` until [`fix`](Self::fix).
    pub(crate) fn poison(&self, id: Uuid) {
        *self.poison.lock().unwrap() = Some(id);
    }

    /// Accepts the poison event from now on.
    pub(crate) fn fix(&self) {
        self.fixed.store(true, Ordering::SeqCst);
    }

    /// The accepted deliveries, in arrival order.
    pub(crate) fn delivered(&self) -> Vec<Delivered> {
        self.delivered.lock().unwrap().clone()
    }

    /// The rejected requests' event ids.
    pub(crate) fn rejected(&self) -> Vec<Uuid> {
        self.rejected.lock().unwrap().clone()
    }

    /// Requests whose signature did not verify.
    pub(crate) fn bad_signatures(&self) -> usize {
        self.bad_signatures.load(Ordering::SeqCst)
    }

    fn receive(&self, headers: &HeaderMap, body: &[u8]) -> StatusCode {
        let verified = standardwebhooks::Webhook::new(SECRET).expect("the secret").verify(body, headers);
        if verified.is_err() {
            self.bad_signatures.fetch_add(1, Ordering::SeqCst);
            return StatusCode::UNAUTHORIZED;
        }
        let body: serde_json::Value = serde_json::from_slice(body).expect("a JSON body");
        let id: Uuid = body["id"].as_str().and_then(|id| id.parse().ok()).expect("an event id");
        let payload: OrderPlaced = serde_json::from_value(body["data"].clone()).expect("the payload");
        if *self.poison.lock().unwrap() == Some(id) && !self.fixed.load(Ordering::SeqCst) {
            // 422: the consumer cannot process this event, and retrying will not help.
            self.rejected.lock().unwrap().push(id);
            return StatusCode::UNPROCESSABLE_ENTITY;
        }
        self.delivered.lock().unwrap().push(Delivered::new(id, &payload));
        StatusCode::NO_CONTENT
    }
}

/// Starts the receiver; returns it and the `--sink` URL.
pub(crate) async fn start() -> (Arc<Receiver>, String) {
    let receiver = Arc::new(Receiver::default());
    let state = Arc::clone(&receiver);
    let app = axum::Router::new().route(
        "/hooks/orders",
        axum::routing::post(move |headers: HeaderMap, body: Bytes| {
            let state = Arc::clone(&state);
            async move { state.receive(&headers, &body) }
        }),
    );
    let listener = tokio::net::TcpListener::bind("127.0.0.1:0").await.expect("bind 127.0.0.1");
    let address = listener.local_addr().expect("the address");
    tokio::spawn(async move { axum::serve(listener, app).await.expect("the webhook receiver") });
    (receiver, format!("http://{address}/hooks/orders"))
}
