//! What the relay's tasks share: the store, the publisher, the settings and the relay's id.

use std::sync::Arc;

use outbox_core::store::Store;
use uuid::Uuid;

use super::call_size::CallSize;
use super::destination::Destination;
use crate::config::RelayConfig;
use crate::publish::ErasedPublisher;

/// What the relay's tasks share.
pub(crate) struct Shared {
    pub(crate) store: Arc<dyn Store>,
    pub(crate) publisher: Arc<dyn ErasedPublisher>,
    pub(crate) config: RelayConfig,
    pub(crate) relay: Uuid,
    /// Whether the publisher's destination is reachable, as the lanes' calls found it.
    pub(crate) destination: Destination,
    /// How many events one publisher call may carry.
    pub(crate) call_size: CallSize,
}
