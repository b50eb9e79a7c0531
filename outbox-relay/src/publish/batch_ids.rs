//! The `webhook-id` of webhook batch requests, kept across retries: the publisher remembers, per event, the request
//! it was sent in, and sends those events again as that same request, under the same id, when all of them come back.

use std::collections::HashMap;
use std::sync::{Arc, Mutex};

use hashlink::LruCache;
use uuid::Uuid;

use super::Message;

/// How many events awaiting a retry the publisher remembers the request of (about 100 bytes each); past that, the
/// events sent longest ago are forgotten and their retry is grouped anew.
pub(crate) const REMEMBERED_EVENTS: usize = 100_000;

/// A request as it was sent: its `webhook-id` and its events, in the order of its body.
#[derive(Debug)]
struct Sent {
    id: String,
    events: Vec<Uuid>,
}

/// One request to send for a batch: its `webhook-id` and the places of its events in the batch, in body order.
#[derive(Debug, Clone, PartialEq, Eq)]
pub(crate) struct Request {
    pub(crate) id: String,
    pub(crate) indexes: Vec<usize>,
}

/// The requests events were sent in, for events that may be retried, least recently sent forgotten first.
pub(crate) struct BatchIds {
    sent: Mutex<LruCache<Uuid, Arc<Sent>>>,
}

impl BatchIds {
    /// A memory of at most `capacity` events.
    pub(crate) fn new(capacity: usize) -> Self {
        Self { sent: Mutex::new(LruCache::new(capacity.max(1))) }
    }

    /// The requests that send `batch`, in the order of their first event in it:
    ///
    /// - every earlier request all of whose events are in the batch, again: same `webhook-id`, same events in the
    ///   same order, so the body is the same and a receiver that deduplicates by `webhook-id` may drop it safely;
    /// - one new request of all other events, in batch order (new events, and events whose earlier request came
    ///   back only in part: sending a part under the old id would let such a receiver drop events it never got),
    ///   with the id `batch_` + a UUID v5 of its event ids sorted, remembered for its events.
    ///
    /// With ordering on, a batch holds at most one event per aggregate, so the requests may go out concurrently.
    pub(crate) fn plan(&self, batch: &[Message]) -> Vec<Request> {
        let mut sent = self.sent.lock().unwrap_or_else(std::sync::PoisonError::into_inner);
        let mut earlier: Vec<(Arc<Sent>, Vec<usize>)> = Vec::new();
        let mut fresh: Vec<usize> = Vec::new();
        for (index, message) in batch.iter().enumerate() {
            match sent.get(&message.id) {
                Some(request) => match earlier.iter_mut().find(|(known, _)| Arc::ptr_eq(known, request)) {
                    Some((_, indexes)) => indexes.push(index),
                    None => earlier.push((Arc::clone(request), vec![index])),
                },
                None => fresh.push(index),
            }
        }
        let mut requests = Vec::with_capacity(earlier.len() + 1);
        for (request, mut indexes) in earlier {
            let place: HashMap<Uuid, usize> =
                request.events.iter().enumerate().map(|(place, id)| (*id, place)).collect();
            let mut places: Vec<usize> =
                indexes.iter().filter_map(|&index| place.get(&batch[index].id).copied()).collect();
            places.sort_unstable();
            places.dedup();
            if places.len() == request.events.len() && indexes.len() == places.len() {
                indexes.sort_by_key(|&index| place.get(&batch[index].id).copied());
                requests.push(Request { id: request.id.clone(), indexes });
            } else {
                fresh.extend(indexes);
            }
        }
        if !fresh.is_empty() {
            fresh.sort_unstable();
            let events: Vec<Uuid> = fresh.iter().map(|&index| batch[index].id).collect();
            let request = Arc::new(Sent { id: batch_id(&events), events });
            for id in &request.events {
                sent.insert(*id, Arc::clone(&request));
            }
            requests.push(Request { id: request.id.clone(), indexes: fresh });
        }
        requests.sort_by_key(|request| request.indexes.iter().min().copied());
        requests
    }

    /// Splits `request`, which the receiver refused whole as too large (HTTP 413: it took none of its events), into
    /// two new requests of the first and the second half of its events, in body order, remembered for their
    /// events. `request` has at least two events.
    pub(crate) fn split(&self, batch: &[Message], request: &Request) -> [Request; 2] {
        let (first, second) = request.indexes.split_at(request.indexes.len() / 2);
        let mut sent = self.sent.lock().unwrap_or_else(std::sync::PoisonError::into_inner);
        [first, second].map(|indexes| {
            let events: Vec<Uuid> = indexes.iter().map(|&index| batch[index].id).collect();
            let part = Arc::new(Sent { id: batch_id(&events), events });
            for id in &part.events {
                sent.insert(*id, Arc::clone(&part));
            }
            Request { id: part.id.clone(), indexes: indexes.to_vec() }
        })
    }

    /// Forgets the events of `request`: the receiver took them, or refused them for good; either way the relay
    /// does not retry them.
    pub(crate) fn forget(&self, batch: &[Message], request: &Request) {
        let mut sent = self.sent.lock().unwrap_or_else(std::sync::PoisonError::into_inner);
        for &index in &request.indexes {
            sent.remove(&batch[index].id);
        }
    }
}

/// The `webhook-id` of a new request of `events`: `batch_` and a UUID v5 of their ids sorted, so the same events
/// give the same id in any order (also after a restart, when nothing is remembered) and other events another id.
fn batch_id(events: &[Uuid]) -> String {
    let mut sorted = events.to_vec();
    sorted.sort_unstable();
    sorted.dedup();
    let bytes: Vec<u8> = sorted.iter().flat_map(|id| *id.as_bytes()).collect();
    format!("batch_{}", Uuid::new_v5(&Uuid::NAMESPACE_OID, &bytes).simple())
}

#[cfg(test)]
mod tests {
    use uuid::Uuid;

    use super::{batch_id, BatchIds, Request};
    use crate::publish::Message;

    fn message(n: u128) -> Message {
        Message::new(Uuid::from_u128(n), "order.placed", "order", n.to_string(), "{}")
    }

    fn batch(ns: &[u128]) -> Vec<Message> {
        ns.iter().copied().map(message).collect()
    }

    #[test]
    fn a_new_batch_id_depends_on_its_events_not_on_their_order() {
        let id = |ns: &[u128]| batch_id(&ns.iter().copied().map(Uuid::from_u128).collect::<Vec<_>>());
        assert_eq!(id(&[3, 1, 2]), id(&[1, 2, 3]), "the same events in another order, the same id");
        assert_ne!(id(&[1, 2]), id(&[1, 2, 3]), "other events, another id");
        assert!(id(&[1]).starts_with("batch_"));
    }

    #[test]
    fn a_request_whose_events_all_come_back_is_sent_again_as_it_was_beside_the_new_events() {
        let ids = BatchIds::new(100);
        let first = ids.plan(&batch(&[1, 2, 3]));
        assert_eq!(first.len(), 1);
        // The retry holds the three events in another order, between two new ones.
        let retry = batch(&[4, 3, 1, 2, 5]);
        let requests = ids.plan(&retry);
        assert_eq!(requests.len(), 2, "{requests:?}");
        assert_eq!(requests[0], Request { id: requests[0].id.clone(), indexes: vec![0, 4] }, "the new events");
        assert_eq!(requests[1], Request { id: first[0].id.clone(), indexes: vec![2, 3, 1] }, "the first request");
        assert_ne!(requests[0].id, first[0].id);
        assert_eq!(ids.plan(&retry), requests, "a second retry, the same two requests");
    }

    #[test]
    fn a_request_that_comes_back_in_part_is_never_sent_under_its_old_id() {
        let ids = BatchIds::new(100);
        let first = ids.plan(&batch(&[1, 2, 3])).remove(0);
        let part = ids.plan(&batch(&[2, 3, 9]));
        assert_eq!(part.len(), 1, "the part goes with the new event: {part:?}");
        assert_ne!(part[0].id, first.id);
        assert_eq!(part[0].indexes, vec![0, 1, 2]);
        assert_ne!(ids.plan(&batch(&[1])).remove(0).id, first.id, "the rest alone: a request of its own");
    }

    #[test]
    fn forgotten_events_are_grouped_anew() {
        let retry = batch(&[1, 2, 5]);
        let ids = BatchIds::new(100);
        let first = ids.plan(&retry[..2]).remove(0);
        ids.forget(&retry, &first);
        assert_eq!(ids.plan(&retry).len(), 1, "published events are forgotten: one new request");

        let small = BatchIds::new(2);
        let first = small.plan(&retry[..2]).remove(0);
        small.plan(&batch(&[3, 4]));
        let requests = small.plan(&retry);
        assert_eq!(requests.len(), 1, "the two events sent longest ago were forgotten: {requests:?}");
        assert_ne!(requests[0].id, first.id);
        let restarted = BatchIds::new(100);
        assert_eq!(restarted.plan(&retry[..2]).remove(0).id, first.id, "nothing remembered, the same events: same id");
    }
}
