//! The proxy's quota decisions, kept for its owner (a capture of the traffic for
//! back-tests, and its checks).

use std::net::SocketAddr;
use std::sync::atomic::{AtomicU64, Ordering};
use std::sync::Mutex;

use kquota_core::Outcome;

use crate::lock;

/// One quota decision of the proxy: a request as its quotas were checked, for a capture
/// of the traffic (back-tests) and for its owner's checks.
#[derive(Debug, Clone, PartialEq)]
pub struct Decision {
    /// When it was checked, on the core's clock ([`kquota_core::monotonic_ms`]).
    pub at_ms: i64,
    pub user: String,
    pub client_id: String,
    pub api_key: i16,
    pub api_version: i16,
    pub correlation_id: i32,
    /// A fetch from a replica (held to the request quota only).
    pub follower: bool,
    /// A produce request's size or a consumer fetch response's size; 0 otherwise.
    pub size: f64,
    /// The request time recorded, in nanoseconds: the proxy's own, with the broker's for an
    /// API Kafka answers at once.
    pub thread_ns: f64,
    /// A produce request's `acks` (-1 for other APIs).
    pub acks: i16,
    /// The outcome: the throttles and what applied. For a mutation request, the request
    /// quota's, with the applied throttle (the larger of it and the mutation throttle).
    pub outcome: Outcome,
    /// A mutation request's controller-mutation throttle (`None` for other APIs).
    pub mutation_throttle_ms: Option<i32>,
    /// The client's address.
    pub peer: SocketAddr,
    /// The broker whose quotas applied: its node id in gateway mode (-1 before a
    /// response named the bootstrap's broker), else -1.
    pub broker: i32,
}

/// Decisions kept for the owner to take, at most; more are counted and dropped.
pub const MAX_KEPT_DECISIONS: usize = 1 << 20;

/// The decisions not yet taken, when the owner keeps them.
pub(super) struct Decisions {
    kept: Option<Mutex<Vec<Decision>>>,
    dropped: AtomicU64,
}

impl Decisions {
    pub(super) fn new(keep: bool) -> Self {
        Decisions {
            kept: keep.then(|| Mutex::new(Vec::new())),
            dropped: AtomicU64::new(0),
        }
    }

    /// Whether decisions are kept (none is made otherwise).
    pub(super) fn kept(&self) -> bool {
        self.kept.is_some()
    }

    /// Keeps `decision`, or counts it dropped when [`MAX_KEPT_DECISIONS`] wait.
    pub(super) fn keep(&self, decision: Decision) {
        let Some(kept) = &self.kept else {
            return;
        };
        let mut kept = lock(kept);
        if kept.len() < MAX_KEPT_DECISIONS {
            kept.push(decision);
        } else {
            self.dropped.fetch_add(1, Ordering::Relaxed);
        }
    }

    /// The decisions kept since the last call, in the order they were made.
    pub(super) fn take(&self) -> Vec<Decision> {
        self.kept
            .as_ref()
            .map_or_else(Vec::new, |kept| std::mem::take(&mut *lock(kept)))
    }

    pub(super) fn dropped(&self) -> u64 {
        self.dropped.load(Ordering::Relaxed)
    }
}
