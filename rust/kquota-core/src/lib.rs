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
//! * [`hash_map`]: the concurrent hash map under the managers, reclaimed by the same
//!   epoch as everything else ([`cow`]), so an operation pins once.
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
#[cfg(not(loom))]
pub mod hash_map;
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
pub use replay::{EntitySummary, Events, Output, ReplayKernel, ReplayOptions, SummaryType};
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

/// The clock the callers use when they pass no time: Kafka's clock without its jumps.
///
/// A broker reads `Time.SYSTEM.milliseconds()`, wall-clock milliseconds since the epoch,
/// and one rule depends on that origin: a new token bucket (the controller-mutation quota)
/// starts with no tokens *last updated at time 0*, so on a broker it is full at its first
/// use. This clock starts at the wall-clock time of its first call in the process and then
/// advances by a monotonic clock, so it has Kafka's values and never goes back when the
/// wall clock is set back (a broker's would). A wall clock before the epoch counts as 0.
pub fn monotonic_ms() -> i64 {
    use std::sync::OnceLock;
    use std::time::{Instant, SystemTime, UNIX_EPOCH};
    static ORIGIN: OnceLock<(Instant, i64)> = OnceLock::new();
    let (start, epoch_ms) = ORIGIN.get_or_init(|| {
        let wall = SystemTime::now()
            .duration_since(UNIX_EPOCH)
            .map_or(0, |d| i64::try_from(d.as_millis()).unwrap_or(i64::MAX / 2));
        (Instant::now(), wall)
    });
    epoch_ms.saturating_add(i64::try_from(start.elapsed().as_millis()).unwrap_or(i64::MAX / 2))
}

#[cfg(all(test, not(loom)))]
mod clock_tests {
    use super::monotonic_ms;
    use crate::{ControllerMutationQuotaManager, QuotaEntity};
    use std::time::{SystemTime, UNIX_EPOCH};

    fn wall_ms() -> i64 {
        let since = SystemTime::now().duration_since(UNIX_EPOCH).unwrap();
        i64::try_from(since.as_millis()).unwrap()
    }

    #[test]
    fn the_default_clock_reads_epoch_milliseconds_and_never_goes_back() {
        let first = monotonic_ms();
        // Its origin is the epoch, as a broker's clock, not the process start: the two
        // agree to within the wall clock's own drift since the first call (a minute is
        // far more than a test run takes).
        assert!(
            (first - wall_ms()).abs() < 60_000,
            "{first} vs {}",
            wall_ms()
        );
        let mut last = first;
        for _ in 0..1000 {
            let now = monotonic_ms();
            assert!(now >= last, "{now} after {last}");
            last = now;
        }
    }

    #[test]
    fn a_new_mutation_bucket_is_full_at_first_use_on_the_default_clock() {
        let manager = ControllerMutationQuotaManager::with_defaults();
        let user = QuotaEntity::parse(Some("u"), None).unwrap();
        manager.set_quota(&user, 10.0).unwrap();
        let now = monotonic_ms();
        assert_eq!(manager.record("u", "c", 1.0, now).unwrap(), 0);
        // 11 samples x 1 s x 10 partitions/s, less the one recorded.
        assert_eq!(manager.tokens("u", "c", now), Some(109.0));
    }
}
