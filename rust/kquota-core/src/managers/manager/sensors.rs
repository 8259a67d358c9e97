//! One entry of a [`QuotaManager`](super::QuotaManager)'s sensor map: the quota and
//! throttle-time sensors of one set of tags, and the lock-free cell of the latter.

use std::sync::atomic::{
    fence, AtomicBool, AtomicI64,
    Ordering::{AcqRel, Acquire, Relaxed, Release, SeqCst},
};

use super::{bound_of, QuotaConfig, Tags};
use crate::kafka::quota::Check;
use crate::kafka::rate_cell::{Bound, BoundSource, RateCell};
use crate::kafka::samples::{Samples, WindowConfig};
use crate::kafka::sensor::sensor_expired;
use crate::sync::cow::Guard;

/// The throttle-time sensor's samples, and whether expiry removed it (then the ring is
/// empty; the next request of its client makes it anew).
#[derive(Clone, Default)]
struct ThrottleSamples {
    samples: Samples,
    absent: bool,
}

/// A copy-on-write cell of [`ThrottleSamples`] that allocates nothing while the ring is
/// empty (most clients are never throttled): the pointer is null then, and its tag bit
/// says whether the sensor is absent. A non-empty ring is boxed, replaced by a
/// compare-and-swap, and the replaced box freed by the epoch (as [`CowCell`] does).
///
/// [`CowCell`]: crate::sync::cow::CowCell
struct ThrottleCell {
    ptr: crossbeam_epoch::Atomic<Samples>,
}

impl ThrottleCell {
    fn new() -> Self {
        ThrottleCell {
            ptr: crossbeam_epoch::Atomic::null(),
        }
    }

    fn absent(&self, guard: &Guard) -> bool {
        self.ptr.load(Acquire, guard).tag() == 1
    }

    /// Applies `f` to a copy of the state and publishes the copy atomically. `f` may run
    /// more than once (on a fresher state each time); its last result is returned.
    fn update<R>(&self, guard: &Guard, mut f: impl FnMut(&mut ThrottleSamples) -> R) -> R {
        use crossbeam_epoch::{Owned, Shared};
        loop {
            let current = self.ptr.load(Acquire, guard);
            // SAFETY: a non-null pointer is a live box; the guard keeps it from being freed.
            let samples = unsafe { current.as_ref() }.cloned().unwrap_or_default();
            let mut state = ThrottleSamples {
                samples,
                absent: current.tag() == 1,
            };
            let result = f(&mut state);
            let tag = usize::from(state.absent);
            let new = if state.samples.current().is_none() {
                Shared::null().with_tag(tag)
            } else {
                Owned::new(state.samples).with_tag(tag).into_shared(guard)
            };
            match self
                .ptr
                .compare_exchange(current, new, AcqRel, Acquire, guard)
            {
                Ok(_) => {
                    if !current.is_null() {
                        // SAFETY: unlinked by our swap; pinned readers may still hold it
                        // and the epoch frees it only after they unpin.
                        unsafe { guard.defer_destroy(current) };
                    }
                    return result;
                }
                Err(_) if !new.is_null() => {
                    // SAFETY: never published.
                    drop(unsafe { new.into_owned() });
                }
                Err(_) => {}
            }
        }
    }
}

impl Drop for ThrottleCell {
    fn drop(&mut self) {
        // SAFETY: `&mut self`: no other thread can reach the cell any more.
        unsafe {
            let guard = crossbeam_epoch::unprotected();
            let p = self.ptr.load(Relaxed, guard);
            if !p.is_null() {
                drop(p.into_owned());
            }
        }
    }
}

/// The two sensors of one set of tags in one map entry: the quota sensor
/// (`<Type>-<user>:<client-id>`, one `Rate` with the entity's bound) and the throttle-time
/// sensor (`<Type>ThrottleTime-<user>:<client-id>`, an `Avg` over the broker's default
/// metric windows, 2 x 30 s).
///
/// Kafka's two sensors have their own last-record times and expire separately (the
/// throttle-time sensor records only when a throttle happens): expiry removes a half in
/// place (its state says it is absent and its samples are gone), the next request of a
/// client resolving to these tags makes it anew (empty, at that request's time), and the
/// entry itself is killed and unlinked once both halves are removed.
///
/// The tags are the entry's key and are not stored again here: every use of an entry
/// has them at hand (the request's own tags, the cached resolution's, the map's key).
///
/// In declaration order (`repr(C)`): what a record reads and writes right after the key
/// (the entry's first 43 bytes after the reference counts), then the throttle-time
/// sensor, which only a throttle touches.
#[repr(C)]
pub(super) struct Sensors {
    /// The quota sensor's samples and bound; absent when expiry removed it.
    pub(super) cell: RateCell,
    /// Kafka's `Sensor.lastRecordTime` of each sensor.
    pub(super) quota_last: AtomicI64,
    /// Killed by expiry (both sensors removed): never used again.
    dead: AtomicBool,
    /// Returned by a settle ([`Tables::live`]): the entry is (or will be, by a rebuild's
    /// copy) the one of its tags in the current maps, so a request that finds it in the
    /// maps it loaded may record into it without settling again.
    ///
    /// [`Tables::live`]: crate::sync::table_swap::Tables::live
    settled: AtomicBool,
    /// Set by expiry after it removed one of the two sensors in place (a request that
    /// finds it makes them present again first). Never left false while one is absent:
    /// see [`Sensors::make_present`].
    partial: AtomicBool,
    pub(super) throttle_last: AtomicI64,
    throttle: ThrottleCell,
}

impl Sensors {
    const THROTTLE_WINDOW: WindowConfig = WindowConfig::METRICS_DEFAULT;

    pub(super) fn new(tags: Tags<'_>, config: &QuotaConfig, now: i64) -> Self {
        let bound = Bound {
            value: Some(bound_of(tags, config)),
            generation: config.generation,
        };
        Self::with_bound(bound, now)
    }

    pub(super) fn with_bound(bound: Bound, now: i64) -> Self {
        Sensors {
            cell: RateCell::new(bound),
            quota_last: AtomicI64::new(now),
            throttle_last: AtomicI64::new(now),
            throttle: ThrottleCell::new(),
            dead: AtomicBool::new(false),
            settled: AtomicBool::new(false),
            partial: AtomicBool::new(false),
        }
    }

    pub(super) fn is_killed(&self) -> bool {
        self.dead.load(Relaxed)
    }

    /// Marks the entry dead; true for the one caller that did.
    pub(super) fn kill(&self) -> bool {
        !self.dead.swap(true, Relaxed)
    }

    pub(super) fn quota_present(&self, guard: &Guard) -> bool {
        self.cell.present(guard)
    }

    pub(super) fn throttle_present(&self, guard: &Guard) -> bool {
        !self.throttle.absent(guard)
    }

    /// Both sensors exist and the entry is alive: a cached resolution to it is current.
    pub(super) fn complete(&self, guard: &Guard) -> bool {
        !self.is_killed() && self.quota_present(guard) && self.throttle_present(guard)
    }

    /// Whether a request that found the entry in the maps it loaded records into it
    /// directly: settled, alive, and both sensors present.
    #[inline]
    pub(super) fn ready(&self) -> bool {
        self.settled.load(Acquire) && !self.dead.load(Relaxed) && !self.partial.load(Relaxed)
    }

    /// Marks the entry settled (it came out of [`Tables::live`]).
    ///
    /// [`Tables::live`]: crate::sync::table_swap::Tables::live
    pub(super) fn settle_done(&self) {
        if !self.settled.load(Relaxed) {
            self.settled.store(true, Release);
        }
    }

    /// After expiry removed a sensor in place: the fence orders the removal before the
    /// flag, against [`Self::make_present`]'s.
    pub(super) fn mark_partial(&self) {
        fence(SeqCst);
        self.partial.store(true, Relaxed);
    }

    /// Makes anew, empty and last recorded at `now`, whichever sensor expiry removed
    /// (Kafka's `getOrCreateQuotaSensors` creates both). The flag is cleared before the
    /// sensors are looked at, with a fence between (and one between an expiry's removal
    /// and its setting the flag): either the look below sees that removal, or the
    /// expiry's flag comes later in the flag's order than this clearing.
    pub(super) fn make_present(&self, now: i64, guard: &Guard) {
        if self.partial.load(Relaxed) {
            self.partial.store(false, Relaxed);
            fence(SeqCst);
        }
        if !self.quota_present(guard) {
            self.quota_last.store(now, Relaxed);
            self.cell.revive(guard);
        }
        if !self.throttle_present(guard) {
            self.throttle_last.store(now, Relaxed);
            self.throttle.update(guard, |t| t.absent = false);
        }
    }

    /// The bound in force: the stored one, or a fresh one if the configuration changed.
    pub(super) fn bound(&self, tags: Tags<'_>, config: &QuotaConfig, guard: &Guard) -> f64 {
        let stored = self.cell.bound(guard);
        match stored.value {
            Some(value) if config.custom || stored.generation == config.generation => value,
            _ => bound_of(tags, config),
        }
    }

    #[allow(clippy::too_many_arguments)]
    #[inline(always)]
    pub(super) fn record(
        &self,
        tags: Tags<'_>,
        config: &QuotaConfig,
        window: &WindowConfig,
        value: f64,
        now: i64,
        check: bool,
        guard: &Guard,
    ) -> Check {
        self.quota_last.store(now, Relaxed);
        self.cell.record(
            window,
            value,
            now,
            check,
            &bound_source(tags, config),
            guard,
        )
    }

    pub(super) fn measure(&self, window: &WindowConfig, now: i64, guard: &Guard) -> f64 {
        self.cell.measure(window, now, guard)
    }

    pub(super) fn record_throttle(&self, throttle_ms: f64, now: i64, guard: &Guard) {
        self.throttle_last.store(now, Relaxed);
        self.throttle.update(guard, |t| {
            // (Removed since this request resolved: it is made anew by the record.)
            t.absent = false;
            t.samples.record(&Self::THROTTLE_WINDOW, throttle_ms, now);
        });
    }

    pub(super) fn throttle_average(&self, now: i64, guard: &Guard) -> f64 {
        self.throttle.update(guard, |t| {
            t.samples.measure_avg(&Self::THROTTLE_WINDOW, now)
        })
    }

    /// Removes the quota sensor if it is idle for longer than `expiry_ms` at `now`; true
    /// if this call removed it. (The idle check is repeated where the removal takes
    /// effect: a record that touched the sensor before that keeps it.)
    pub(super) fn expire_quota(&self, now: i64, expiry_ms: i64, guard: &Guard) -> bool {
        let expired = || sensor_expired(self.quota_last.load(Relaxed), now, expiry_ms);
        self.quota_present(guard) && expired() && self.cell.remove_if(expired, guard)
    }

    /// [`Self::expire_quota`] for the throttle-time sensor.
    pub(super) fn expire_throttle(&self, now: i64, expiry_ms: i64, guard: &Guard) -> bool {
        let expired = || sensor_expired(self.throttle_last.load(Relaxed), now, expiry_ms);
        if !self.throttle_present(guard) || !expired() {
            return false;
        }
        self.throttle.update(guard, |t| {
            if t.absent || !expired() {
                return false;
            }
            *t = ThrottleSamples {
                samples: Samples::new(),
                absent: true,
            };
            true
        })
    }
}

/// Where a sensor of `tags` takes its bound from: the one it holds under a callback
/// (asked at resolution or reset), otherwise the one of the configuration's generation.
#[inline(always)]
fn bound_source<'a>(
    tags: Tags<'a>,
    config: &'a QuotaConfig,
) -> BoundSource<impl Fn() -> Option<f64> + 'a> {
    let compute = move || Some(bound_of(tags, config));
    if config.custom {
        BoundSource::Keep
    } else {
        BoundSource::Generation {
            generation: config.generation,
            compute,
        }
    }
}
