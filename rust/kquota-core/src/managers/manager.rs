//! [`QuotaManager`]: Kafka's client-quota manager for one quota type (spec sections 5-11).
//!
//! Lock-free throughout: the quota configuration is one copy-on-write snapshot, sensors
//! live in lock-free hash maps keyed by their metric tags, each sensor's samples are a
//! copy-on-write cell, and a resolution cache maps a client (principal, client id) to
//! its sensors for as long as the configuration it was resolved under is current.
//! Everything a request touches (the maps' entries and tables, the configuration, the
//! sensors' blocks) is reclaimed by one epoch, so a request pins once.
//!
//! The sensor maps and the cache are replaced by fresh, right-sized ones when expiry has
//! left them far below the size they reached (a map's table only grows), without a
//! lock and without losing or splitting a sensor: see [`crate::sync::table_swap`].

use std::sync::atomic::{
    fence, AtomicBool, AtomicI64, AtomicU64, AtomicUsize,
    Ordering::{AcqRel, Acquire, Relaxed, Release, SeqCst},
};
use std::sync::{Arc, Mutex, Weak};

use super::callback::{check_limit, ClusterMetadata, QuotaCallback};
use crate::error::{check_quota, check_usage, Error, Result};
use crate::kafka::delay_queue::DelayQueue;
use crate::kafka::entity::{sanitize_user, Overrides, Pair, PairRef, QuotaEntity};
use crate::kafka::quota::{Check, UNLIMITED};
pub use crate::kafka::quota_type::QuotaType;
use crate::kafka::rate_cell::{Bound, BoundSource, RateCell};
use crate::kafka::release::KafkaRelease;
use crate::kafka::samples::{Samples, WindowConfig};
pub use crate::kafka::sensor::DEFAULT_SENSOR_EXPIRY_MS;
use crate::kafka::sensor::{
    check_manager_config, max_value_in_quota_window, sensor_expired, throttle_int,
};
use crate::kafka::units::rate_units;
use crate::sync::cow::{collect_garbage, pin, CowCell, Guard};
use crate::sync::hash_map::Node;
use crate::sync::table_swap::{copy_again, unlink_dead, Mortal, Table, Tables};

type Map<K, V> = crate::sync::hash_map::HashMap<K, V, foldhash::fast::RandomState>;

/// The maps are rebuilt right-sized once they reached at least this many entries and
/// hold fewer than an eighth of that.
const SHRINK_FLOOR: usize = 1024;
const SHRINK_RATIO: usize = 8;

/// The configuration snapshot: overrides, enabled levels and a generation that every
/// change bumps (sensors and cached resolutions compare it to know they are current).
#[derive(Clone, Default)]
struct QuotaConfig {
    generation: u64,
    overrides: Overrides,
    /// Built with a [`QuotaCallback`]: tags and limits come from it, and a sensor keeps
    /// the bound a resolution or a reset gave it (a record never computes one).
    custom: bool,
}

/// The enabled-levels value of a manager with a callback (Kafka's `CustomQuotas`):
/// quotas are always on.
const CUSTOM_LEVELS: u8 = 8;

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
struct Sensors {
    /// The quota sensor's samples and bound; absent when expiry removed it.
    cell: RateCell,
    /// Kafka's `Sensor.lastRecordTime` of each sensor.
    quota_last: AtomicI64,
    /// Killed by expiry (both sensors removed): never used again.
    dead: AtomicBool,
    /// Returned by a settle ([`Tables::live`]): the entry is (or will be, by a rebuild's
    /// copy) the one of its tags in the current maps, so a request that finds it in the
    /// maps it loaded may record into it without settling again.
    settled: AtomicBool,
    /// Set by expiry after it removed one of the two sensors in place (a request that
    /// finds it makes them present again first). Never left false while one is absent:
    /// see [`Sensors::make_present`].
    partial: AtomicBool,
    throttle_last: AtomicI64,
    throttle: ThrottleCell,
}

impl Sensors {
    const THROTTLE_WINDOW: WindowConfig = WindowConfig::METRICS_DEFAULT;

    fn new(tags: Tags<'_>, config: &QuotaConfig, now: i64) -> Self {
        let bound = Bound {
            value: Some(bound_of(tags, config)),
            generation: config.generation,
        };
        Self::with_bound(bound, now)
    }

    fn with_bound(bound: Bound, now: i64) -> Self {
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

    fn is_killed(&self) -> bool {
        self.dead.load(Relaxed)
    }

    /// Marks the entry dead; true for the one caller that did.
    fn kill(&self) -> bool {
        !self.dead.swap(true, Relaxed)
    }

    fn quota_present(&self, guard: &Guard) -> bool {
        self.cell.present(guard)
    }

    fn throttle_present(&self, guard: &Guard) -> bool {
        !self.throttle.absent(guard)
    }

    /// Both sensors exist and the entry is alive: a cached resolution to it is current.
    fn complete(&self, guard: &Guard) -> bool {
        !self.is_killed() && self.quota_present(guard) && self.throttle_present(guard)
    }

    /// Whether a request that found the entry in the maps it loaded records into it
    /// directly: settled, alive, and both sensors present.
    #[inline]
    fn ready(&self) -> bool {
        self.settled.load(Acquire) && !self.dead.load(Relaxed) && !self.partial.load(Relaxed)
    }

    /// Marks the entry settled (it came out of [`Tables::live`]).
    fn settle_done(&self) {
        if !self.settled.load(Relaxed) {
            self.settled.store(true, Release);
        }
    }

    /// After expiry removed a sensor in place: the fence orders the removal before the
    /// flag, against [`Self::make_present`]'s.
    fn mark_partial(&self) {
        fence(SeqCst);
        self.partial.store(true, Relaxed);
    }

    /// Makes anew, empty and last recorded at `now`, whichever sensor expiry removed
    /// (Kafka's `getOrCreateQuotaSensors` creates both). The flag is cleared before the
    /// sensors are looked at, with a fence between (and one between an expiry's removal
    /// and its setting the flag): either the look below sees that removal, or the
    /// expiry's flag comes later in the flag's order than this clearing.
    fn make_present(&self, now: i64, guard: &Guard) {
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
    fn bound(&self, tags: Tags<'_>, config: &QuotaConfig, guard: &Guard) -> f64 {
        let stored = self.cell.bound(guard);
        match stored.value {
            Some(value) if config.custom || stored.generation == config.generation => value,
            _ => bound_of(tags, config),
        }
    }

    #[allow(clippy::too_many_arguments)]
    #[inline(always)]
    fn record(
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

    fn measure(&self, window: &WindowConfig, now: i64, guard: &Guard) -> f64 {
        self.cell.measure(window, now, guard)
    }

    fn record_throttle(&self, throttle_ms: f64, now: i64, guard: &Guard) {
        self.throttle_last.store(now, Relaxed);
        self.throttle.update(guard, |t| {
            // (Removed since this request resolved: it is made anew by the record.)
            t.absent = false;
            t.samples.record(&Self::THROTTLE_WINDOW, throttle_ms, now);
        });
    }

    fn throttle_average(&self, now: i64, guard: &Guard) -> f64 {
        self.throttle.update(guard, |t| {
            t.samples.measure_avg(&Self::THROTTLE_WINDOW, now)
        })
    }

    /// Removes the quota sensor if it is idle for longer than `expiry_ms` at `now`; true
    /// if this call removed it. (The idle check is repeated where the removal takes
    /// effect: a record that touched the sensor before that keeps it.)
    fn expire_quota(&self, now: i64, expiry_ms: i64, guard: &Guard) -> bool {
        let expired = || sensor_expired(self.quota_last.load(Relaxed), now, expiry_ms);
        self.quota_present(guard) && expired() && self.cell.remove_if(expired, guard)
    }

    /// [`Self::expire_quota`] for the throttle-time sensor.
    fn expire_throttle(&self, now: i64, expiry_ms: i64, guard: &Guard) -> bool {
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

/// A client's sensors (and their tags, the node's key), valid while the configuration
/// generation is unchanged and no sensor expiry has removed anything since (then the
/// sensors' own state decides).
struct Resolved {
    generation: u64,
    expiry_round: u64,
    sensors: SharedSensors,
}

/// An entry of the sensor map, as its users hold it: the tags and the sensors in one
/// reference-counted node, which a rebuild puts in the old and the new map at once.
type SharedSensors = Arc<Node<Pair, Sensors>>;

impl Mortal for Node<Pair, Sensors> {
    fn is_dead(&self) -> bool {
        self.is_killed()
    }
}

impl Table for Map<Pair, Sensors> {
    type Key = Pair;
    type Value = Node<Pair, Sensors>;

    fn get(&self, key: &Pair) -> Option<SharedSensors> {
        self.get_node(key, &pin())
    }

    fn get_or_insert(&self, key: &Pair, value: SharedSensors) -> SharedSensors {
        debug_assert!(value.key() == key);
        self.get_or_insert_node(value, &pin())
    }

    fn remove_same(&self, key: &Pair, value: &SharedSensors) {
        let same: &Sensors = value;
        let _ = self.remove_if(key, |_, v| std::ptr::eq(v, same), &pin());
    }

    fn entries(&self) -> Vec<(Pair, SharedSensors)> {
        self.nodes(&pin(), |_, _| true)
            .into_iter()
            .map(|n| (n.key().clone(), n))
            .collect()
    }
}

/// The sensor map and the resolution cache, replaced together by a rebuild.
struct Maps {
    /// Tags -> the entry holding both sensors of those tags.
    sensors: Map<Pair, Sensors>,
    /// (principal, client id) -> the sensors its requests record into. A cache: a
    /// rebuild starts it empty.
    clients: Map<Pair, Resolved>,
    /// The most entries one of the maps held, as expiry saw it (they grow only between
    /// two expiries): what their tables were sized for.
    peak: AtomicUsize,
}

impl Maps {
    fn with_capacity(sensors: usize) -> Self {
        Maps {
            sensors: Map::with_capacity_and_hasher(sensors, Default::default()),
            clients: Map::default(),
            peak: AtomicUsize::new(sensors),
        }
    }

    /// The most entries one of the maps holds now.
    fn len(&self) -> usize {
        self.sensors.len().max(self.clients.len())
    }

    /// Fresh maps, sized for the live sensors of `old` and holding them (the first copy).
    fn copy_of(old: &Maps) -> Maps {
        let new = Maps::with_capacity(old.sensors.len());
        copy_again(&old.sensors, &new.sensors);
        new
    }
}

fn sensor_map(m: &Maps) -> &Map<Pair, Sensors> {
    &m.sensors
}

/// Removes the sensors idle for longer than `expiry_ms` in `maps`, killing and unlinking
/// the entries left with neither sensor (and unlinking any killed entry found there);
/// yields the Kafka names of the sensors this call removed. An entry is marked before it
/// is unlinked: an entry missing from a map it was in is dead, which a rebuild's second
/// copy relies on.
fn remove_expired(
    tables: &Tables<Maps>,
    maps: &Maps,
    now: i64,
    expiry_ms: i64,
    name: impl Fn(&str, &Pair) -> String,
    quota_removed_alone: &AtomicBool,
    guard: &Guard,
) -> Vec<String> {
    let idle = |last: &AtomicI64| sensor_expired(last.load(Relaxed), now, expiry_ms);
    let stale = maps.sensors.nodes(guard, |_, s| {
        s.is_killed()
            || (s.quota_present(guard) && idle(&s.quota_last))
            || (s.throttle_present(guard) && idle(&s.throttle_last))
            || (!s.quota_present(guard) && !s.throttle_present(guard))
    });
    let mut names = Vec::new();
    for sensors in stale {
        let tags = sensors.key();
        if !sensors.is_killed() {
            let (quota, throttle) = (
                sensors.quota_present(guard),
                sensors.throttle_present(guard),
            );
            if (!quota || idle(&sensors.quota_last)) && (!throttle || idle(&sensors.throttle_last))
            {
                // Both sensors gone: the entry is killed whole (nothing is copied or
                // retired per sensor).
                if sensors.kill() {
                    if quota {
                        names.push(name("", tags));
                    }
                    if throttle {
                        names.push(name("ThrottleTime", tags));
                    }
                }
            } else {
                // One of them expired: it is removed in place.
                if sensors.expire_quota(now, expiry_ms, guard) {
                    names.push(name("", tags));
                    quota_removed_alone.store(true, Relaxed);
                    sensors.mark_partial();
                }
                if sensors.expire_throttle(now, expiry_ms, guard) {
                    names.push(name("ThrottleTime", tags));
                    sensors.mark_partial();
                }
                continue;
            }
        }
        tables.unlink(sensor_map, maps, tags, &sensors, guard);
    }
    names
}

/// A sensor's tags `(user, client-id)`, borrowed.
type Tags<'a> = (&'a str, &'a str);

fn tags_of(pair: &Pair) -> Tags<'_> {
    (pair.first(), pair.second())
}

fn bound_of(tags: Tags<'_>, config: &QuotaConfig) -> f64 {
    config.overrides.bound(tags.0, tags.1)
}

/// Kafka's client-quota manager for one quota type. Safe to share between threads.
pub struct QuotaManager {
    quota_type: QuotaType,
    window: WindowConfig,
    /// Whose rules apply where Kafka releases differ (shared with the config's overrides).
    release: KafkaRelease,
    sensor_expiry_ms: i64,
    /// Shared with the manager's siblings (other brokers' managers of one configuration).
    config: Arc<CowCell<QuotaConfig>>,
    maps: Tables<Maps>,
    /// Bumped by every expiry run that removed a sensor.
    expiry_round: AtomicU64,
    /// Set once expiry removed a quota sensor and kept its entry for the throttle-time
    /// sensor: from then on counting quota sensors looks at each entry.
    quota_removed_alone: AtomicBool,
    delay_queue: DelayQueue,
    callback: Option<Arc<dyn QuotaCallback>>,
    /// The callbacks of the manager and its siblings (shared with them), which every
    /// quota change is told to. Changes and new siblings take its lock, so a sibling's
    /// callback is told every quota exactly once; the request path never takes it.
    family: Arc<Mutex<Vec<Weak<dyn QuotaCallback>>>>,
}

/// One live quota sensor, as a metrics reporter sees it.
#[derive(Debug, Clone, PartialEq)]
pub struct SensorSnapshot {
    /// The `user` tag (sanitized; empty when the sensor is not per user).
    pub user: String,
    /// The `client-id` tag (empty when the sensor is not per client id).
    pub client_id: String,
    /// The measured rate (bytes/s, or percent of a thread for `request`).
    pub rate: f64,
    /// The bound the sensor enforces ([`crate::UNLIMITED`] when no quota applies).
    pub bound: f64,
    /// The throttle-time average (NaN with no throttles), if that sensor is live.
    pub throttle_time_avg: Option<f64>,
}

impl QuotaManager {
    /// A manager for `quota_type` whose window is a whole number of seconds, as Kafka's
    /// `quota.window.size.seconds`; sensors expire after `sensor_expiry_ms` without a record.
    pub fn new(quota_type: QuotaType, window: WindowConfig, sensor_expiry_ms: i64) -> Result<Self> {
        check_manager_config(&window, sensor_expiry_ms)?;
        Ok(QuotaManager {
            quota_type,
            window,
            release: KafkaRelease::DEFAULT,
            sensor_expiry_ms,
            config: Arc::new(CowCell::new(QuotaConfig::default())),
            maps: Tables::new(Maps::with_capacity(0)),
            expiry_round: AtomicU64::new(0),
            quota_removed_alone: AtomicBool::new(false),
            delay_queue: DelayQueue::new(),
            callback: None,
            family: Arc::default(),
        })
    }

    /// A manager whose entity resolution and quota limits come from `callback` (KIP-257)
    /// instead of Kafka's precedence; see [`crate::managers::callback`]. Quotas are on from the
    /// start, as in Kafka with a callback.
    pub fn with_callback(
        quota_type: QuotaType,
        window: WindowConfig,
        sensor_expiry_ms: i64,
        callback: Arc<dyn QuotaCallback>,
    ) -> Result<Self> {
        let mut m = Self::new(quota_type, window, sensor_expiry_ms)?;
        let mut overrides = Overrides::default();
        overrides.enabled = CUSTOM_LEVELS;
        m.config = Arc::new(CowCell::new(QuotaConfig {
            custom: true,
            overrides,
            ..QuotaConfig::default()
        }));
        m.family = Arc::new(Mutex::new(vec![Arc::downgrade(&callback)]));
        m.callback = Some(callback);
        Ok(m)
    }

    /// A manager for another broker of the same cluster: the same quota type, windows and
    /// quotas (one configuration: a quota set on either applies to both), its own sensors
    /// and delay queue, as each Kafka broker measures only its own traffic. A manager with
    /// a callback has none this way: each broker has a callback instance of its own
    /// ([`Self::sibling_with_callback`]).
    pub fn sibling(&self) -> Result<Self> {
        if self.callback.is_some() {
            return Err(Error::InvalidConfig(
                "a manager with a quota callback has no sibling without one: each broker has \
                 its own callback instance"
                    .to_owned(),
            ));
        }
        Ok(self.sibling_of(None))
    }

    /// A sibling ([`Self::sibling`]) of a manager with a callback, with `callback` (a new
    /// instance, as each Kafka broker has its own): it is first told every quota set so
    /// far, as a broker that starts reads them all, and from then on every quota set or
    /// removed on any sibling. Limits reset by one sibling are asked again by each of the
    /// others of its own callback before their next record. Fails, making nothing, if this
    /// manager has no callback or `callback` fails to take a quota.
    pub fn sibling_with_callback(&self, callback: Arc<dyn QuotaCallback>) -> Result<Self> {
        if self.callback.is_none() {
            return Err(Error::InvalidConfig(
                "a manager without a quota callback has siblings without one".to_owned(),
            ));
        }
        let mut family = self.lock_family();
        for (entity, value) in self.quotas() {
            callback.update_quota(self.quota_type, &entity, value)?;
        }
        family.retain(|cb| cb.strong_count() > 0);
        family.push(Arc::downgrade(&callback));
        drop(family);
        Ok(self.sibling_of(Some(callback)))
    }

    fn sibling_of(&self, callback: Option<Arc<dyn QuotaCallback>>) -> Self {
        QuotaManager {
            quota_type: self.quota_type,
            window: self.window,
            release: self.release,
            sensor_expiry_ms: self.sensor_expiry_ms,
            config: Arc::clone(&self.config),
            maps: Tables::new(Maps::with_capacity(0)),
            expiry_round: AtomicU64::new(0),
            quota_removed_alone: AtomicBool::new(false),
            delay_queue: DelayQueue::new(),
            callback,
            family: Arc::clone(&self.family),
        }
    }

    /// The same manager following `release` where Kafka releases differ (see
    /// [`KafkaRelease`]); its siblings follow it too. Meant for a manager just built: the
    /// levels already enabled are kept as they are.
    pub fn for_release(mut self, release: KafkaRelease) -> Self {
        self.release = release;
        self.config
            .update(&pin(), |c| c.overrides.release = release);
        self
    }

    /// The Kafka release whose rules the manager follows.
    pub fn release(&self) -> KafkaRelease {
        self.release
    }

    /// The family's callbacks, locked (a callback that panicked leaves them usable).
    fn lock_family(&self) -> std::sync::MutexGuard<'_, Vec<Weak<dyn QuotaCallback>>> {
        self.family
            .lock()
            .unwrap_or_else(std::sync::PoisonError::into_inner)
    }

    /// The callback the manager was built with.
    pub fn callback(&self) -> Option<&Arc<dyn QuotaCallback>> {
        self.callback.as_ref()
    }

    /// A manager with Kafka's defaults: 11 windows of 1 s, sensors expire after one hour.
    pub fn with_defaults(quota_type: QuotaType) -> Self {
        Self::new(
            quota_type,
            WindowConfig::QUOTA_DEFAULT,
            DEFAULT_SENSOR_EXPIRY_MS,
        )
        .expect("Kafka's defaults are valid")
    }

    /// The quota type.
    pub fn quota_type(&self) -> QuotaType {
        self.quota_type
    }

    /// The sample windows of the quota sensors.
    pub fn window(&self) -> WindowConfig {
        self.window
    }

    /// How long a sensor may go without a record before [`Self::expire_sensors`] removes it.
    pub fn sensor_expiry_ms(&self) -> i64 {
        self.sensor_expiry_ms
    }

    /// Whether a quota level is enabled (before 4.2 once any quota was set or removed, from
    /// 4.2 while a quota exists): until then Kafka measures nothing.
    pub fn enabled(&self) -> bool {
        self.config.read(&pin(), |c| c.overrides.enabled != 0)
    }

    // -- configuration ---------------------------------------------------------------

    /// Sets the override of `entity` (a finite value > 0), effective on the next record.
    /// With a callback: tells it (`update_quota`), then the siblings' callbacks, then
    /// resets the limits.
    pub fn set_quota(&self, entity: &QuotaEntity, value: f64) -> Result<()> {
        let value = check_quota(value)?;
        self.change(entity, Some(value))
    }

    /// Removes the override of `entity`. With a callback: tells it (`remove_quota`), then
    /// the siblings' callbacks, then resets the limits.
    pub fn remove_quota(&self, entity: &QuotaEntity) -> Result<()> {
        self.change(entity, None)
    }

    /// Applies a quota change. With a callback, its own callback is told first (failing,
    /// it changes nothing); the siblings' callbacks are told after the change is applied,
    /// each one even if another fails (as each Kafka broker takes a change on its own),
    /// and the first of their errors is returned.
    fn change(&self, entity: &QuotaEntity, value: Option<f64>) -> Result<()> {
        let Some(own) = &self.callback else {
            self.apply(entity, value);
            return Ok(());
        };
        let tell = |cb: &dyn QuotaCallback| match value {
            Some(v) => cb.update_quota(self.quota_type, entity, v),
            None => cb.remove_quota(self.quota_type, entity),
        };
        let family = self.lock_family();
        tell(own.as_ref())?;
        self.apply(entity, value);
        let mut failed = None;
        for cb in family.iter().filter_map(Weak::upgrade) {
            // (The same allocation: `own` itself, already told.)
            if Arc::as_ptr(&cb).cast::<()>() != Arc::as_ptr(own).cast::<()>() {
                if let Err(err) = tell(cb.as_ref()) {
                    failed.get_or_insert(err);
                }
            }
        }
        drop(family);
        self.reset_limits()?;
        failed.map_or(Ok(()), Err)
    }

    /// Kafka's `updateQuotaMetricConfigs` for a manager with a callback: asks the limit of
    /// every live sensor again and installs it, and makes every client resolve again (its
    /// tags are asked again) on its next request. Every limit is asked before anything
    /// changes, so a failing callback leaves the manager as it was. Without a callback it
    /// does nothing (the built-in precedence refreshes bounds by itself).
    pub fn reset_limits(&self) -> Result<()> {
        let Some(cb) = &self.callback else {
            return Ok(());
        };
        let guard = pin();
        let maps = self.maps.load(&guard);
        let sensors = maps
            .sensors
            .nodes(&guard, |_, s| !s.is_killed() && s.quota_present(&guard));
        let mut limits = Vec::with_capacity(sensors.len());
        for sensor in &sensors {
            limits.push(self.ask_limit(cb.as_ref(), sensor.key())?);
        }
        let mut generation = 0;
        self.config.update(&guard, |c| {
            c.generation += 1;
            generation = c.generation;
        });
        for (sensor, value) in sensors.iter().zip(limits) {
            sensor.cell.set_bound(
                Bound {
                    value: Some(value),
                    generation,
                },
                &guard,
            );
        }
        Ok(())
    }

    /// Asks the callback whether a reset is required (Kafka asks on every request; kquota
    /// when a client is resolved and when this is called, e.g. by a periodic task) and
    /// resets if so. Returns whether it reset.
    pub fn reset_if_required(&self) -> Result<bool> {
        let Some(cb) = &self.callback else {
            return Ok(false);
        };
        if cb.quota_reset_required(self.quota_type)? {
            self.reset_limits()?;
            return Ok(true);
        }
        Ok(false)
    }

    /// The bound of a sensor with `tags` from the callback: its checked limit, or
    /// [`UNLIMITED`] for `None`, as Kafka's `quotaLimit` gives `Long.MAX_VALUE`.
    fn ask_limit(&self, cb: &dyn QuotaCallback, tags: &Pair) -> Result<f64> {
        let t = (tags.first(), tags.second());
        let limit = check_limit(t, cb.quota_limit(self.quota_type, t)?)?;
        Ok(limit.unwrap_or(UNLIMITED))
    }

    /// The tags the callback gives a client.
    fn ask_tags(&self, cb: &dyn QuotaCallback, user: &str, client_id: &str) -> Result<Pair> {
        let (u, c) = cb.quota_metric_tags(self.quota_type, user, client_id)?;
        Ok(Pair::new(&u, &c))
    }

    /// The live quota sensor with `tags` of a manager with a callback, created with the
    /// callback's limit if there is none; an existing sensor whose bound is older than
    /// `config` (a reset raced with its creation) gets the limit asked again.
    fn custom_sensor(
        &self,
        cb: &dyn QuotaCallback,
        config: &QuotaConfig,
        tags: &Pair,
        now: i64,
        guard: &Guard,
    ) -> Result<SharedSensors> {
        // (A sensor made below without an asked limit has none: it is not current; nor
        // is one that expiry removed.)
        let current = |s: &Sensors| {
            let b = s.cell.bound(guard);
            b.value.is_some() && b.generation >= config.generation
        };
        let existing = sensor_map(self.maps.load(guard))
            .get(tags, guard)
            .filter(|s| !s.is_killed());
        let mut asked = match &existing {
            Some(s) if current(s) => None,
            _ => Some(self.ask_limit(cb, tags)?),
        };
        let bound = Bound {
            value: asked,
            generation: config.generation,
        };
        let sensor = self.maps.live(
            sensor_map,
            tags,
            || Node::new(tags.clone(), Sensors::with_bound(bound, now)),
            guard,
        );
        sensor.settle_done();
        sensor.make_present(now, guard);
        if !current(&sensor) {
            let value = match asked.take() {
                Some(v) => v,
                None => self.ask_limit(cb, tags)?,
            };
            sensor.cell.set_bound(
                Bound {
                    value: Some(value),
                    generation: config.generation,
                },
                guard,
            );
        }
        Ok(sensor)
    }

    fn apply(&self, entity: &QuotaEntity, value: Option<f64>) {
        self.config.update(&pin(), |c| {
            c.overrides.apply(entity, value);
            c.generation += 1;
        });
    }

    /// The override of exactly `entity`.
    pub fn quota(&self, entity: &QuotaEntity) -> Option<f64> {
        self.config.read(&pin(), |c| c.overrides.get(entity))
    }

    /// A copy of the overrides and enabled levels (what a replay starts from).
    pub(crate) fn overrides(&self) -> Overrides {
        self.config.read(&pin(), |c| c.overrides.clone())
    }

    /// Every override.
    pub fn quotas(&self) -> Vec<(QuotaEntity, f64)> {
        self.config.read(&pin(), |c| {
            c.overrides.iter().map(|(e, v)| (e.clone(), v)).collect()
        })
    }

    // -- resolution ------------------------------------------------------------------

    /// The metric tags `(user, client-id)` a request from `user` with `client_id` records
    /// under (with a callback: as the callback gives them now).
    pub fn tags(&self, user: &str, client_id: &str) -> Result<(String, String)> {
        if let Some(cb) = &self.callback {
            return cb.quota_metric_tags(self.quota_type, user, client_id);
        }
        Ok(self.config.read(&pin(), |c| {
            c.overrides.tags(&sanitize_user(user), client_id)
        }))
    }

    /// The quota that applies to the client now (`None` when none does; with a callback:
    /// as the callback gives it now).
    pub fn quota_for(&self, user: &str, client_id: &str) -> Result<Option<f64>> {
        if let Some(cb) = &self.callback {
            let tags = self.ask_tags(cb.as_ref(), user, client_id)?;
            let t = (tags.first(), tags.second());
            return check_limit(t, cb.quota_limit(self.quota_type, t)?);
        }
        Ok(self.config.read(&pin(), |c| {
            let (u, ci) = c.overrides.tags(&sanitize_user(user), client_id);
            c.overrides.quota_limit(&u, &ci)
        }))
    }

    /// The client's sensors, created at `now` if they do not exist.
    /// `maps` are the maps loaded under `guard` and `clients` a guard of their cache.
    #[allow(clippy::too_many_arguments)]
    fn resolve<'g>(
        &self,
        config: &QuotaConfig,
        maps: &'g Maps,
        user: &str,
        client_id: &str,
        now: i64,
        guard: &'g Guard,
    ) -> Result<&'g Resolved>
    where
        Self: 'g,
    {
        loop {
            let round = self.expiry_round.load(Acquire);
            if let Some(resolved) = maps.clients.get(&PairRef::new(user, client_id), guard) {
                if resolved.generation == config.generation
                    && (resolved.expiry_round == round || resolved.sensors.complete(guard))
                {
                    return Ok(resolved);
                }
            }
            // Kafka's `SensorAccess.getOrCreate`, settled against a concurrent rebuild (the
            // sensors may come from newer maps than `maps`: caching them in `maps` is
            // still right, their users loaded `maps` before the rebuild).
            let sensors = match &self.callback {
                None => {
                    let (u, c) = config.overrides.tags(&sanitize_user(user), client_id);
                    let tags = Pair::new(&u, &c);
                    let sensors = self.maps.live(
                        sensor_map,
                        &tags,
                        || Node::new(tags.clone(), Sensors::new((&u, &c), config, now)),
                        guard,
                    );
                    sensors.settle_done();
                    sensors.make_present(now, guard);
                    sensors
                }
                Some(cb) => {
                    // (A reset here makes this resolution stale: the next request
                    // resolves again under the new limits.)
                    self.reset_if_required()?;
                    let tags = self.ask_tags(cb.as_ref(), user, client_id)?;
                    self.custom_sensor(cb.as_ref(), config, &tags, now, guard)?
                }
            };
            let resolved = Resolved {
                generation: config.generation,
                expiry_round: round,
                sensors,
            };
            // An expiry may remove the entry before we read it back: then resolve again.
            maps.clients
                .insert(Pair::new(user, client_id), resolved, guard);
        }
    }

    /// Calls `f` on the client's sensors (created at `now` if they do not exist).
    ///
    /// With one level of quotas enabled (or none) and no callback, the tags follow from
    /// the client without allocating, and the entry is looked up by them: one lookup, no
    /// resolution cache. Otherwise (several levels enabled, whose precedence asks the
    /// overrides, or a callback) resolutions are cached per client ([`Self::resolve`]).
    #[inline]
    fn with_sensors<R>(
        &self,
        config: &QuotaConfig,
        user: &str,
        client_id: &str,
        now: i64,
        guard: &Guard,
        f: impl FnOnce(Tags<'_>, &Sensors) -> R,
    ) -> Result<R> {
        let maps = self.maps.load(guard);
        if !config.custom {
            if let Some((u, c)) = config.overrides.simple_tags(user, client_id) {
                let u: &str = &u;
                if let Some(sensors) = maps
                    .sensors
                    .get(&PairRef::new(u, c), guard)
                    .filter(|s| s.ready())
                {
                    return Ok(f((u, c), sensors));
                }
                // Kafka's `SensorAccess.getOrCreate`, settled against a concurrent rebuild.
                let tags = Pair::new(u, c);
                let sensors = self.maps.live(
                    sensor_map,
                    &tags,
                    || Node::new(tags.clone(), Sensors::new((u, c), config, now)),
                    guard,
                );
                sensors.settle_done();
                sensors.make_present(now, guard);
                return Ok(f((u, c), &sensors));
            }
        }
        let resolved = self.resolve(config, maps, user, client_id, now, guard)?;
        Ok(f(tags_of(resolved.sensors.key()), &resolved.sensors))
    }

    /// Resolves the client's sensors (creating them at `now`), recording nothing.
    fn resolve_only(&self, user: &str, client_id: &str, now: i64) -> Result<()> {
        let guard = pin();
        let config = self.config.load(&guard);
        self.with_sensors(config, user, client_id, now, &guard, |_, _| ())
    }

    // -- the request path ------------------------------------------------------------

    /// Checks a usage value and converts it to the unit of the rate (nanoseconds to
    /// percent of a thread for `request`).
    fn usage(&self, value: f64) -> Result<f64> {
        Ok(rate_units(self.quota_type, check_usage(value)?))
    }

    /// Kafka's throttle as the manager returns it: the int of the long (wrapping), and
    /// for `request` first capped at one window.
    fn throttle_int(&self, check: Check) -> i32 {
        throttle_int(self.quota_type, &self.window, self.release, check)
    }

    /// Records usage with a quota check and returns Kafka's throttle time in ms
    /// (`maybeRecordAndGetThrottleTimeMs`); `<= 0` means not throttled.
    pub fn record(&self, user: &str, client_id: &str, value: f64, now: i64) -> Result<i32> {
        let value = self.usage(value)?;
        self.record_usage(user, client_id, value, now, true)
    }

    /// Takes back usage recorded earlier (a throttled fetch), without a check.
    pub fn unrecord(&self, user: &str, client_id: &str, value: f64, now: i64) -> Result<()> {
        let value = self.usage(value)?;
        self.record_usage(user, client_id, -value, now, false)?;
        Ok(())
    }

    /// Records usage without a check (network-thread time after the response is sent).
    pub fn record_no_throttle(
        &self,
        user: &str,
        client_id: &str,
        value: f64,
        now: i64,
    ) -> Result<()> {
        let value = self.usage(value)?;
        self.record_usage(user, client_id, value, now, false)?;
        Ok(())
    }

    /// Records a converted, valid value; does nothing while no quota level is enabled.
    #[inline]
    fn record_usage(
        &self,
        user: &str,
        client_id: &str,
        value: f64,
        now: i64,
        check: bool,
    ) -> Result<i32> {
        let guard = pin();
        let config = self.config.load(&guard);
        if config.overrides.enabled == 0 {
            return Ok(0);
        }
        match self.record_ready(config, user, client_id, value, now, check, &guard) {
            Some(outcome) => Ok(self.throttle_int(outcome)),
            None => self.record_resolving(config, user, client_id, value, now, check, &guard),
        }
    }

    /// [`Self::record_usage`]'s common case, inline: no callback, one level of quotas
    /// (the tags follow from the client, [`Overrides::simple_tags`]), and the entry of
    /// those tags in the current maps and ready (what [`Self::with_sensors`] checks
    /// first). `None` otherwise, having recorded nothing.
    #[inline(always)]
    #[allow(clippy::too_many_arguments)]
    fn record_ready(
        &self,
        config: &QuotaConfig,
        user: &str,
        client_id: &str,
        value: f64,
        now: i64,
        check: bool,
        guard: &Guard,
    ) -> Option<Check> {
        if config.custom {
            return None;
        }
        let (u, c) = config.overrides.simple_tags(user, client_id)?;
        let u: &str = &u;
        let sensors = self
            .maps
            .load(guard)
            .sensors
            .get(&PairRef::new(u, c), guard)
            .filter(|s| s.ready())?;
        Some(sensors.record((u, c), config, &self.window, value, now, check, guard))
    }

    /// [`Self::record_usage`] in every case: resolving the client's sensors (creating
    /// them if need be) and recording in any way.
    #[inline(never)]
    #[allow(clippy::too_many_arguments)]
    fn record_resolving(
        &self,
        config: &QuotaConfig,
        user: &str,
        client_id: &str,
        value: f64,
        now: i64,
        check: bool,
        guard: &Guard,
    ) -> Result<i32> {
        // (The closure returns the throttle, not the check: copying the check out of the
        // closure's result makes a load wait on two stores.)
        self.with_sensors(config, user, client_id, now, guard, |tags, s| {
            self.throttle_int(s.record(tags, config, &self.window, value, now, check, guard))
        })
    }

    /// Accounts a throttle of `throttle_ms` > 0 applied to a client: records it in the
    /// throttle-time sensor and, when the response went out on a `channel`, queues that
    /// channel until `now + throttle_ms` (Kafka's delay queue). A throttle with no channel
    /// is only accounted: nothing would ever drain its queue entry. Returns the end of
    /// the mute.
    pub fn throttle(
        &self,
        user: &str,
        client_id: &str,
        throttle_ms: i64,
        now: i64,
        channel: Option<u64>,
    ) -> Result<i64> {
        if throttle_ms <= 0 {
            return Err(Error::InvalidUsage(format!(
                "invalid throttle_ms {throttle_ms}: only a throttle > 0 mutes a channel"
            )));
        }
        let guard = pin();
        let config = self.config.load(&guard);
        self.with_sensors(config, user, client_id, now, &guard, |_, s| {
            s.record_throttle(throttle_ms as f64, now, &guard)
        })?;
        let end = now.saturating_add(throttle_ms);
        if let Some(channel) = channel {
            self.delay_queue.push(end, channel);
        }
        Ok(end)
    }

    /// Removes the delay-queue entries that end at or before `now`; returns their channels.
    pub fn expired_channels(&self, now: i64) -> Vec<u64> {
        self.delay_queue.expire(now)
    }

    /// Channels waiting in the delay queue (Kafka's `queue-size`).
    pub fn queue_size(&self) -> usize {
        self.delay_queue.len()
    }

    /// The earliest end of a mute still queued.
    pub fn next_unmute_ms(&self) -> Option<i64> {
        self.delay_queue.next_end_ms()
    }

    /// The fetch-size cap `bound * (num_samples - 1) * window_seconds`, or `f64::MAX`
    /// when no quota applies; creates the client's sensors when quotas are enabled. (With
    /// a callback the limit is the one its sensor holds, asked at resolution or reset.)
    pub fn max_value_in_quota_window(&self, user: &str, client_id: &str, now: i64) -> Result<f64> {
        let guard = pin();
        let config = self.config.load(&guard);
        if config.overrides.enabled == 0 {
            return Ok(f64::MAX);
        }
        let limit = self.with_sensors(config, user, client_id, now, &guard, |tags, quota| {
            if config.custom {
                Some(quota.bound(tags, config, &guard)).filter(|&b| b != UNLIMITED)
            } else {
                config.overrides.quota_limit(tags.0, tags.1)
            }
        })?;
        Ok(max_value_in_quota_window(limit, &self.window))
    }

    // -- reading ---------------------------------------------------------------------

    /// The live sensors entry of the client in the current maps, or in the maps a rebuild
    /// is copying from (a read: nothing is created or moved).
    fn existing_sensors(
        &self,
        user: &str,
        client_id: &str,
        guard: &Guard,
    ) -> Option<(Pair, SharedSensors)> {
        let (u, c) = match &self.callback {
            // With a callback: the sensor the client last resolved to (a read never calls
            // the callback).
            Some(_) => {
                let maps = self.maps.load(guard);
                let cached = maps
                    .clients
                    .get(&PairRef::new(user, client_id), guard)?
                    .sensors
                    .key()
                    .clone();
                (cached.first().to_owned(), cached.second().to_owned())
            }
            None => self
                .config
                .read(guard, |c| c.overrides.tags(&sanitize_user(user), client_id)),
        };
        let key = PairRef::new(&u, &c);
        let find = |maps: &Maps| {
            maps.sensors
                .get_node(&key, guard)
                .filter(|s| !s.is_killed())
        };
        let sensors =
            find(self.maps.load(guard)).or_else(|| self.maps.prev(guard).and_then(find))?;
        Some((Pair::new(&u, &c), sensors))
    }

    /// The client's quota sensor, if it exists.
    fn existing_quota_sensor(
        &self,
        user: &str,
        client_id: &str,
        guard: &Guard,
    ) -> Option<(Pair, SharedSensors)> {
        self.existing_sensors(user, client_id, guard)
            .filter(|(_, s)| s.quota_present(guard))
    }

    /// The client's current rate, measured at `now` (purges, like a JMX read);
    /// `None` when its sensor does not exist.
    pub fn measure(&self, user: &str, client_id: &str, now: i64) -> Option<f64> {
        let guard = pin();
        let (_, sensor) = self.existing_quota_sensor(user, client_id, &guard)?;
        Some(sensor.measure(&self.window, now, &guard))
    }

    /// The bound the client's existing sensor enforces.
    pub fn bound(&self, user: &str, client_id: &str) -> Option<f64> {
        let guard = pin();
        let (tags, sensor) = self.existing_quota_sensor(user, client_id, &guard)?;
        let config = self.config.load(&guard);
        Some(sensor.bound(tags_of(&tags), config, &guard))
    }

    /// The client's throttle-time average at `now` (NaN with no throttles in the
    /// horizon); `None` when that sensor does not exist.
    pub fn throttle_time_avg(&self, user: &str, client_id: &str, now: i64) -> Option<f64> {
        let guard = pin();
        let (_, sensor) = self
            .existing_sensors(user, client_id, &guard)
            .filter(|(_, s)| s.throttle_present(&guard))?;
        Some(sensor.throttle_average(now, &guard))
    }

    /// Every live quota sensor with its rate at `now` (a metrics scrape; purges like one).
    pub fn snapshot(&self, now: i64) -> Vec<SensorSnapshot> {
        let guard = pin();
        let config = self.config.load(&guard);
        let maps = self.maps.load(&guard);
        let sensors = maps.sensors.pin();
        let all = sensors
            .iter()
            .filter(|(_, sensor)| !sensor.is_killed() && sensor.quota_present(&guard))
            .map(|(tags, sensor)| {
                let rate = sensor.measure(&self.window, now, &guard);
                let bound = sensor.bound(tags_of(tags), config, &guard);
                let throttle_time_avg = sensor
                    .throttle_present(&guard)
                    .then(|| sensor.throttle_average(now, &guard));
                SensorSnapshot {
                    user: tags.first().to_owned(),
                    client_id: tags.second().to_owned(),
                    rate,
                    bound,
                    throttle_time_avg,
                }
            })
            .collect();
        all
    }

    fn sensor_name(&self, kind: &str, tags: &Pair) -> String {
        format!(
            "{}{}-{}:{}",
            self.quota_type.group(),
            kind,
            tags.first(),
            tags.second()
        )
    }

    /// Kafka names of the live sensors, sorted.
    pub fn sensor_names(&self) -> Vec<String> {
        let guard = pin();
        let maps = self.maps.load(&guard);
        let mut names = Vec::new();
        for (tags, s) in maps.sensors.pin().iter().filter(|(_, s)| !s.is_killed()) {
            if s.quota_present(&guard) {
                names.push(self.sensor_name("", tags));
            }
            if s.throttle_present(&guard) {
                names.push(self.sensor_name("ThrottleTime", tags));
            }
        }
        names.sort();
        names
    }

    /// Number of live quota sensors.
    pub fn sensor_count(&self) -> usize {
        let guard = pin();
        let maps = self.maps.load(&guard);
        if !self.quota_removed_alone.load(Relaxed) {
            return maps.sensors.len();
        }
        // (Some entry may hold only a throttle-time sensor: count the quota sensors.)
        let sensors = maps.sensors.pin();
        let count = sensors
            .iter()
            .filter(|(_, s)| !s.is_killed() && s.quota_present(&guard))
            .count();
        count
    }

    /// Diagnostic (for tests and memory checks, not part of Kafka's API): how many
    /// entries the current sensor maps and resolution cache are sized for, i.e. the most
    /// one of them held (a map's table grows with it and never shrinks by itself: a
    /// resize happens only when an insert finds it half full). Back to about the live count after an expiry that
    /// left the maps below an eighth of this (and it was at least 1024): then
    /// [`Self::expire_sensors`] replaced them by right-sized ones.
    pub fn table_capacity(&self) -> usize {
        let guard = pin();
        let maps = self.maps.load(&guard);
        maps.peak.load(Relaxed).max(maps.len())
    }

    /// Removes the sensors idle for longer than the expiry (strictly) and frees them;
    /// returns their Kafka names, sorted. Kafka runs this every 30 s. Then, if the maps
    /// hold less than an eighth of what they once did, replaces them by right-sized
    /// copies (unless another call is doing that already).
    pub fn expire_sensors(&self, now: i64) -> Vec<String> {
        let expiry = self.sensor_expiry_ms;
        let guard = pin();
        let maps = self.maps.load(&guard);
        // The maps grow only between expiries: their size now is the most they held.
        maps.peak.fetch_max(maps.len(), Relaxed);
        let name = |kind: &str, tags: &Pair| self.sensor_name(kind, tags);
        let alone = &self.quota_removed_alone;
        let mut names = remove_expired(&self.maps, maps, now, expiry, name, alone, &guard);
        if !names.is_empty() {
            self.expiry_round.fetch_add(1, Release);
            let current = self.maps.load(&guard);
            current
                .clients
                .retain(|_, r| r.sensors.complete(&guard), &guard);
            self.shrink(current, &guard);
            drop(guard);
            // The removed entries (at most one per name, and as many cached
            // resolutions) and any replaced tables are retired: free them now, not
            // over the next pins.
            collect_garbage(2 * names.len());
        }
        names.sort();
        names
    }

    /// Replaces `maps` (the current maps) by right-sized copies if they hold less than
    /// an eighth of what they once did.
    /// Whether it replaced them.
    fn shrink(&self, maps: &Maps, guard: &Guard) -> bool {
        let peak = maps.peak.load(Relaxed);
        if peak < SHRINK_FLOOR || maps.len().saturating_mul(SHRINK_RATIO) >= peak {
            return false;
        }
        self.maps.rebuild(
            Maps::copy_of,
            |old, new| {
                copy_again(&old.sensors, &new.sensors);
            },
            |new| {
                unlink_dead(&new.sensors);
            },
            guard,
        )
    }

    // -- batch -----------------------------------------------------------------------

    /// Records many requests in order: event `i` is `record(keys[key_index[i]], values[i],
    /// now[i])`, and for a `fetch` manager a throttled fetch (throttle > 0, or
    /// `unrecord_if[i]`: another quota throttled the same request) is then unrecorded, as
    /// Kafka takes back the bytes of a fetch it answers empty. So on a fetch manager a batch
    /// equals `record` followed by `unrecord` for each throttled event, not `record` alone.
    /// `unrecord_if` is refused on produce and request managers, where Kafka unrecords
    /// nothing. Every input is checked before anything is recorded. Returns the throttle
    /// of each event.
    pub fn record_batch(
        &self,
        now: &[i64],
        key_index: &[i64],
        values: &[f64],
        keys: &[(String, String)],
        unrecord_if: Option<&[bool]>,
    ) -> Result<Vec<i32>> {
        let fetch = self.quota_type == QuotaType::Fetch;
        if unrecord_if.is_some() && !fetch {
            return Err(Error::InvalidUsage(format!(
                "unrecord_if given to a {} manager: only a fetch manager unrecords \
                 (a throttled fetch is answered empty); pass None",
                self.quota_type.as_str()
            )));
        }
        let n = now.len();
        if key_index.len() != n || values.len() != n || unrecord_if.is_some_and(|u| u.len() != n) {
            return Err(Error::InvalidUsage(format!(
                "batch arrays differ in length: now_ms {n}, key_index {}, values {}{}",
                key_index.len(),
                values.len(),
                unrecord_if
                    .map(|u| format!(", unrecord_if {}", u.len()))
                    .unwrap_or_default()
            )));
        }
        if let Some((i, k)) = key_index
            .iter()
            .enumerate()
            .find(|(_, &k)| k < 0 || k as usize >= keys.len())
        {
            return Err(Error::InvalidUsage(format!(
                "invalid key_index {k} at event {i}: it must index the {} keys",
                keys.len()
            )));
        }
        let mut usage = Vec::with_capacity(n);
        for (i, &v) in values.iter().enumerate() {
            usage.push(
                self.usage(v)
                    .map_err(|e| Error::InvalidUsage(format!("event {i}: {e}")))?,
            );
        }
        if self.callback.is_some() {
            // Resolve every key first: a callback that fails does so before anything is
            // recorded.
            let mut used = vec![None; keys.len()];
            for (&k, &t) in key_index.iter().zip(now) {
                used[k as usize].get_or_insert(t);
            }
            for ((user, client_id), t) in keys.iter().zip(used) {
                if let Some(t) = t {
                    self.resolve_only(user, client_id, t)?;
                }
            }
        }
        let mut throttles = Vec::with_capacity(n);
        for i in 0..n {
            let (user, client_id) = &keys[key_index[i] as usize];
            let throttle = self.record_usage(user, client_id, usage[i], now[i], true)?;
            if fetch && (throttle > 0 || unrecord_if.is_some_and(|u| u[i])) {
                self.record_usage(user, client_id, -usage[i], now[i], false)?;
            }
            throttles.push(throttle);
        }
        Ok(throttles)
    }
}

/// Tells every distinct callback of `managers` (by identity: three managers usually share
/// one) about `metadata` once, then resets the limits of the managers whose callback
/// answered true, as Kafka's broker does for its three quota managers. Managers without a
/// callback are skipped. Returns whether any callback answered true.
pub fn update_cluster_metadata(
    managers: &[&QuotaManager],
    metadata: &ClusterMetadata,
) -> Result<bool> {
    let mut answers: Vec<(usize, bool)> = Vec::new();
    let mut any = false;
    for m in managers {
        let Some(cb) = m.callback() else { continue };
        let id = cb.identity();
        let changed = match answers.iter().find(|(p, _)| *p == id) {
            Some(&(_, changed)) => changed,
            None => {
                let changed = cb.update_cluster_metadata(metadata)?;
                answers.push((id, changed));
                changed
            }
        };
        if changed {
            m.reset_limits()?;
            any = true;
        }
    }
    Ok(any)
}

#[cfg(test)]
mod tests {
    use super::*;

    fn user(name: &str) -> QuotaEntity {
        QuotaEntity::parse(Some(name), None).unwrap()
    }

    #[test]
    fn nothing_is_measured_before_any_quota() {
        let m = QuotaManager::with_defaults(QuotaType::Produce);
        assert_eq!(m.record("alice", "app", 1e12, 0).unwrap(), 0);
        assert_eq!(m.sensor_count(), 0);
        assert_eq!(
            m.max_value_in_quota_window("alice", "app", 0).unwrap(),
            f64::MAX
        );
    }

    #[test]
    fn first_request_on_a_user_quota() {
        let m = QuotaManager::with_defaults(QuotaType::Produce);
        m.set_quota(&user("alice"), 1024.0).unwrap();
        assert_eq!(m.record("alice", "app1", 600.0, 0).unwrap(), 0);
        assert_eq!(m.measure("alice", "app1", 0), Some(60.0));
        assert_eq!(m.record("alice", "app1", 10_000.0, 0).unwrap(), 352);
        assert_eq!(
            m.tags("alice", "app2").unwrap(),
            ("alice".to_owned(), String::new())
        );
        assert_eq!(
            m.sensor_names(),
            vec!["Produce-alice:", "ProduceThrottleTime-alice:"]
        );
    }

    #[test]
    fn siblings_share_quotas_and_measure_apart() {
        let a = QuotaManager::with_defaults(QuotaType::Produce);
        let b = a.sibling().unwrap();
        assert!(!b.enabled());
        b.set_quota(&user("alice"), 1024.0).unwrap();
        assert!(a.enabled());
        assert_eq!(a.quota(&user("alice")), Some(1024.0));
        // Each measures as a manager of its own with that quota would.
        let alone = || {
            let m = QuotaManager::with_defaults(QuotaType::Produce);
            m.set_quota(&user("alice"), 1024.0).unwrap();
            m
        };
        let (ra, rb) = (alone(), alone());
        for (t, bytes) in [(0, 10_000.0), (400, 5_000.0), (900, 700.0)] {
            assert_eq!(
                a.record("alice", "app", bytes, t).unwrap(),
                ra.record("alice", "app", bytes, t).unwrap()
            );
        }
        assert!(a.measure("alice", "app", 900) > Some(1024.0));
        assert_eq!(
            b.record("alice", "app", 600.0, 900).unwrap(),
            rb.record("alice", "app", 600.0, 900).unwrap()
        );
        assert_eq!(
            b.measure("alice", "app", 900),
            rb.measure("alice", "app", 900)
        );
        assert!(b.measure("alice", "app", 900) < Some(1024.0));
        a.set_quota(&user("alice"), 2048.0).unwrap();
        assert_eq!(b.bound("alice", "app"), Some(2048.0));
        a.remove_quota(&user("alice")).unwrap();
        assert_eq!(b.quota(&user("alice")), None);
        assert_eq!(a.throttle("alice", "app", 10, 0, Some(1)).unwrap(), 10);
        assert_eq!((a.queue_size(), b.queue_size()), (1, 0));
    }

    #[test]
    fn bad_input_changes_nothing() {
        let m = QuotaManager::with_defaults(QuotaType::Fetch);
        for bad in [0.0, -1.0, f64::NAN, f64::INFINITY] {
            assert!(matches!(
                m.set_quota(&user("a"), bad),
                Err(Error::InvalidQuota(_))
            ));
        }
        assert!(!m.enabled());
        m.set_quota(&user("a"), 100.0).unwrap();
        m.record("a", "c", 500.0, 0).unwrap();
        for bad in [-1.0, f64::NAN, f64::NEG_INFINITY] {
            assert!(m.record("a", "c", bad, 0).is_err());
            assert!(m.unrecord("a", "c", bad, 0).is_err());
        }
        assert_eq!(m.measure("a", "c", 0), Some(50.0));
        assert!(m.throttle("a", "c", 0, 0, Some(1)).is_err());
        assert_eq!(m.queue_size(), 0);
        let keys = vec![("a".to_owned(), "c".to_owned())];
        assert!(m
            .record_batch(&[0, 0], &[0, 1], &[1.0, 1.0], &keys, None)
            .is_err());
        assert!(m
            .record_batch(&[0, 0], &[0, 0], &[1.0, f64::NAN], &keys, None)
            .is_err());
        assert_eq!(m.measure("a", "c", 0), Some(50.0));
        assert!(
            QuotaManager::new(QuotaType::Produce, WindowConfig::new(11, 1500).unwrap(), 1).is_err()
        );
        assert!("bytes".parse::<QuotaType>().is_err());
    }

    #[test]
    fn a_throttle_without_a_channel_is_accounted_but_not_queued() {
        let m = QuotaManager::with_defaults(QuotaType::Produce);
        m.set_quota(&user("a"), 100.0).unwrap();
        assert_eq!(m.throttle("a", "c", 500, 0, None).unwrap(), 500);
        assert_eq!(m.queue_size(), 0);
        assert_eq!(m.throttle_time_avg("a", "c", 0), Some(500.0));
        assert_eq!(m.throttle("a", "c", 300, 0, Some(7)).unwrap(), 300);
        assert_eq!(m.queue_size(), 1);
        assert_eq!(m.throttle_time_avg("a", "c", 0), Some(400.0));
        assert_eq!(m.expired_channels(300), vec![7]);
    }

    #[test]
    fn unrecord_if_only_on_fetch_managers() {
        let keys = vec![("a".to_owned(), "c".to_owned())];
        for quota_type in [QuotaType::Produce, QuotaType::Request] {
            let m = QuotaManager::with_defaults(quota_type);
            m.set_quota(&user("a"), 100.0).unwrap();
            let err = m
                .record_batch(&[0], &[0], &[1.0], &keys, Some(&[true]))
                .unwrap_err();
            assert!(matches!(err, Error::InvalidUsage(_)), "{err:?}");
            assert!(err.to_string().contains(quota_type.as_str()), "{err}");
            assert_eq!(m.sensor_count(), 0, "a refused batch recorded something");
        }
        let m = QuotaManager::with_defaults(QuotaType::Fetch);
        m.set_quota(&user("a"), 100.0).unwrap();
        m.record_batch(&[0], &[0], &[1.0], &keys, Some(&[true]))
            .unwrap();
        assert_eq!(m.measure("a", "c", 0), Some(0.0));
    }

    #[test]
    fn quota_and_throttle_time_sensors_expire_separately() {
        let e = DEFAULT_SENSOR_EXPIRY_MS;
        let m = QuotaManager::with_defaults(QuotaType::Produce);
        m.set_quota(&user("u"), 100.0).unwrap();
        // The throttle-time sensor outlives the quota sensor.
        m.record("u", "c", 1e6, 0).unwrap();
        m.throttle("u", "c", 50, 1000, None).unwrap();
        assert_eq!(m.expire_sensors(e + 1), vec!["Produce-u:"]);
        assert_eq!(m.sensor_names(), vec!["ProduceThrottleTime-u:"]);
        assert_eq!(m.sensor_count(), 0);
        assert_eq!(m.measure("u", "c", e + 1), None);
        assert_eq!(m.bound("u", "c"), None);
        assert_eq!(m.throttle_time_avg("u", "c", 1000), Some(50.0));
        assert!(m.snapshot(e + 1).is_empty());
        // The next request makes a brand-new quota sensor; the throttle one is kept.
        m.record("u", "c", 10.0, e + 2).unwrap();
        assert_eq!(m.sensor_count(), 1);
        assert_eq!(m.measure("u", "c", e + 2), Some(1.0));
        assert_eq!(m.throttle_time_avg("u", "c", 1000), Some(50.0));
        assert_eq!(
            m.sensor_names(),
            vec!["Produce-u:", "ProduceThrottleTime-u:"]
        );
        // Then the throttle-time sensor expires alone, and a request makes it anew.
        assert_eq!(m.expire_sensors(e + 1001), vec!["ProduceThrottleTime-u:"]);
        assert_eq!(m.sensor_names(), vec!["Produce-u:"]);
        assert_eq!(m.throttle_time_avg("u", "c", e + 1001), None);
        m.record("u", "c", 10.0, e + 1002).unwrap();
        assert!(m.throttle_time_avg("u", "c", e + 1002).unwrap().is_nan());
        // Both expire: the entry goes.
        let mut gone = m.expire_sensors(3 * e);
        gone.sort();
        assert_eq!(gone, vec!["Produce-u:", "ProduceThrottleTime-u:"]);
        assert_eq!(m.maps.load(&pin()).sensors.len(), 0);
        assert_eq!(m.sensor_count(), 0);
        // A throttle alone also makes both sensors anew.
        m.throttle("u", "c", 5, 4 * e, None).unwrap();
        assert_eq!(
            m.sensor_names(),
            vec!["Produce-u:", "ProduceThrottleTime-u:"]
        );
    }

    #[test]
    fn expiry_frees_sensors_and_cached_resolutions() {
        let m = QuotaManager::with_defaults(QuotaType::Produce);
        m.set_quota(&QuotaEntity::parse(None, Some("<default>")).unwrap(), 100.0)
            .unwrap();
        for i in 0..100 {
            m.record("u", &format!("c{i}"), 1.0, 0).unwrap();
        }
        assert_eq!(m.sensor_count(), 100);
        // One level enabled: the tags follow from the client, nothing is cached.
        assert_eq!(m.maps.load(&pin()).sensors.len(), 100);
        assert_eq!(m.maps.load(&pin()).clients.len(), 0);
        assert!(m.expire_sensors(DEFAULT_SENSOR_EXPIRY_MS).is_empty());
        assert_eq!(m.expire_sensors(DEFAULT_SENSOR_EXPIRY_MS + 1).len(), 200);
        assert_eq!(m.sensor_count(), 0);
        assert_eq!(m.maps.load(&pin()).sensors.len(), 0);
        // Two levels: resolutions are cached per client, and expiry drops them.
        m.set_quota(&user("v"), 100.0).unwrap();
        for i in 0..100 {
            m.record("u", &format!("c{i}"), 1.0, 0).unwrap();
        }
        m.record("v", "c0", 1.0, 0).unwrap();
        assert_eq!(m.sensor_count(), 101);
        assert_eq!(m.maps.load(&pin()).clients.len(), 101);
        assert_eq!(m.expire_sensors(DEFAULT_SENSOR_EXPIRY_MS + 1).len(), 202);
        assert_eq!(m.sensor_count(), 0);
        assert_eq!(m.maps.load(&pin()).clients.len(), 0);
    }

    #[test]
    fn an_expired_burst_gives_its_table_capacity_back() {
        let m = QuotaManager::with_defaults(QuotaType::Produce);
        m.set_quota(&QuotaEntity::parse(None, Some("<default>")).unwrap(), 1e9)
            .unwrap();
        for i in 0..100_000 {
            m.record("u", &format!("burst-{i}"), 1.0, 0).unwrap();
        }
        // Ten clients still active at the expiry: they survive the rebuild.
        for i in 0..10 {
            m.record("u", &format!("steady-{i}"), 7.0, 0).unwrap();
            m.record("u", &format!("steady-{i}"), 3.0, DEFAULT_SENSOR_EXPIRY_MS)
                .unwrap();
        }
        assert!(m.table_capacity() >= 100_010);
        // Every burst sensor, and the steady clients' throttle-time sensors (idle).
        let expired = m.expire_sensors(DEFAULT_SENSOR_EXPIRY_MS + 1);
        assert_eq!(expired.len(), 200_010);
        assert_eq!(m.sensor_count(), 10);
        assert!(m.table_capacity() <= 16, "{}", m.table_capacity());
        // Measured where the steady clients' one sample starts: the rate is over 10 s.
        let now = DEFAULT_SENSOR_EXPIRY_MS;
        let total = |client: &str| m.measure("u", client, now).map(|r| r * 10.0);
        for i in 0..10 {
            assert_eq!(total(&format!("steady-{i}")), Some(3.0), "steady-{i}");
        }
        // Records keep working on old and new clients.
        m.record("u", "steady-0", 1.0, now).unwrap();
        m.record("u", "new", 5.0, now).unwrap();
        assert_eq!(total("steady-0"), Some(4.0));
        assert_eq!(total("new"), Some(5.0));
        assert_eq!(m.sensor_count(), 11);
        // (The two clients resolved again have a throttle-time sensor again.)
        assert_eq!(m.sensor_names().len(), 13);
        // Below the floor nothing is rebuilt.
        assert!(m.expire_sensors(now).is_empty());
        assert_eq!(m.table_capacity(), 11);
    }

    #[test]
    fn batch_equals_one_at_a_time() {
        let a = QuotaManager::with_defaults(QuotaType::Fetch);
        let b = QuotaManager::with_defaults(QuotaType::Fetch);
        for m in [&a, &b] {
            m.set_quota(
                &QuotaEntity::parse(None, Some("<default>")).unwrap(),
                5000.0,
            )
            .unwrap();
        }
        let keys: Vec<(String, String)> =
            (0..3).map(|i| ("u".to_owned(), format!("c{i}"))).collect();
        let now: Vec<i64> = (0..600).map(|i| i * 7).collect();
        let idx: Vec<i64> = (0..600).map(|i| i % 3).collect();
        let values: Vec<f64> = (0..600).map(|i| f64::from((i * 37) % 4000)).collect();
        let batch = a.record_batch(&now, &idx, &values, &keys, None).unwrap();
        for i in 0..600 {
            let (u, c) = &keys[idx[i] as usize];
            let t = b.record(u, c, values[i], now[i]).unwrap();
            if t > 0 {
                b.unrecord(u, c, values[i], now[i]).unwrap();
            }
            assert_eq!(batch[i], t, "event {i}");
        }
        assert!(batch.iter().any(|&t| t > 0), "the trace must throttle");
    }
}
