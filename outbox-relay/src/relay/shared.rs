//! What the relay's tasks share: the store, the publisher, the settings and the relay's id.

use std::sync::Arc;

use outbox_core::store::Store;
use uuid::Uuid;

use crate::config::RelayConfig;
use crate::publish::ErasedPublisher;

/// What the relay's tasks share.
pub(crate) struct Shared {
    pub(crate) store: Arc<dyn Store>,
    pub(crate) publisher: Arc<dyn ErasedPublisher>,
    pub(crate) config: RelayConfig,
    pub(crate) relay: Uuid,
}
