//! kquota-core: Apache Kafka's client-quota arithmetic, exact to the bit and lock-free.
//!
//! * [`samples`]: sampled windows as Kafka's `SampledStat` keeps them.
//! * [`quota`]: the bound check and the throttle-time formula.
//! * [`rate::SampledRate`]: one thread-safe rate sensor with an optional bound.
//! * [`manager::QuotaManager`]: Kafka's client-quota manager for one quota type
//!   (entities, precedence, shared sensors, dynamic quotas, expiry, delay queue).
//! * [`callback::QuotaCallback`]: custom quota callbacks (KIP-257) a manager can be
//!   built with.
//! * [`request_path::RequestPath`]: Kafka's request handling over the three managers
//!   (which quotas a request is checked against, the applied throttle, the fetch unrecord).
//! * [`replay::ReplayKernel`]: the same request path replayed sequentially over columns
//!   of events, for back-testing (several scenarios in one pass, open or closed loop).
//! * [`token_bucket`]: Kafka's `TokenBucket` stat (KIP-599) and a lock-free bucket.
//! * [`mutation::ControllerMutationQuotaManager`]: the controller-mutation quota
//!   (`controller_mutation_rate`), strict and permissive.
//! * [`connection_rate`] / [`connection_quota::ConnectionQuotas`]: the connection-creation
//!   rate quotas (KIP-612): per IP, per listener and broker-wide.
//! * [`migrate`]: how the manager replaces its hash maps by right-sized ones after
//!   expiry, while other threads use them.
//!
//! Everything is safe to call from many threads at once; no operation takes a lock.
//! The spec is `shared/docs/kafka-quota-semantics.md`.

#[cfg(not(loom))]
pub mod callback;
#[cfg(not(loom))]
pub mod connection_quota;
pub mod connection_rate;
pub mod cow;
#[cfg(not(loom))]
pub mod delay_queue;
#[cfg(not(loom))]
pub mod entity;
pub mod error;
pub mod javamath;
#[cfg(not(loom))]
pub mod manager;
pub mod migrate;
#[cfg(not(loom))]
pub mod mutation;
pub mod quota;
pub mod rate;
pub mod rate_cell;
#[cfg(not(loom))]
pub mod replay;
#[cfg(not(loom))]
pub mod request_path;
pub mod samples;
pub mod token_bucket;

#[cfg(not(loom))]
pub use callback::{BrokerNode, ClusterMetadata, PartitionLeader, QuotaCallback};
#[cfg(not(loom))]
pub use connection_quota::{ConnectionDecision, ConnectionQuotas};
pub use connection_rate::UNLIMITED_CONNECTION_RATE;
#[cfg(not(loom))]
pub use entity::{sanitize_user, EntityName, QuotaEntity, DEFAULT_MARKER};
pub use error::{Error, Result};
#[cfg(not(loom))]
pub use manager::{QuotaManager, QuotaType, SensorSnapshot, DEFAULT_SENSOR_EXPIRY_MS};
#[cfg(not(loom))]
pub use mutation::{ControllerMutationQuotaManager, MutationApi, MutationRequestQuota};
pub use quota::{Check, UNLIMITED};
pub use rate::SampledRate;
#[cfg(not(loom))]
pub use replay::{EntitySummary, Events, Output, ReplayKernel, ReplayOptions};
#[cfg(not(loom))]
pub use request_path::{ApiKind, Outcome, Request, RequestPath};
pub use samples::WindowConfig;
pub use token_bucket::{BucketCell, MutationCheck};

/// A hint to bring the cache line at `p` into cache; never faults, changes nothing.
#[inline(always)]
pub(crate) fn prefetch<T>(p: *const T) {
    #[cfg(target_arch = "x86_64")]
    // SAFETY: a prefetch is a hint: it reads nothing the program sees and cannot fault,
    // whatever the address.
    unsafe {
        std::arch::x86_64::_mm_prefetch::<{ std::arch::x86_64::_MM_HINT_T0 }>(p.cast());
    }
    #[cfg(not(target_arch = "x86_64"))]
    let _ = p;
}

/// [`prefetch`] of every cache line of `*p`.
#[cfg(not(loom))]
#[inline(always)]
pub(crate) fn prefetch_all<T>(p: *const T) {
    let bytes = p.cast::<u8>();
    let mut offset = 0;
    while offset < std::mem::size_of::<T>() {
        prefetch(bytes.wrapping_add(offset));
        offset += 64;
    }
}

/// Milliseconds on a monotonic clock (since the first call in this process); what the
/// callers use when they pass no time.
pub fn monotonic_ms() -> i64 {
    use std::sync::OnceLock;
    use std::time::Instant;
    static ORIGIN: OnceLock<Instant> = OnceLock::new();
    ORIGIN.get_or_init(Instant::now).elapsed().as_millis() as i64
}
