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
//!
//! This file holds the manager's state and its construction; the rest is in its
//! submodules, one concern each: a map entry's two sensors (`sensors`), quota
//! configuration and entity lookup (`config`), recording and throttling (`recording`),
//! sensor expiry and the maps' rebuild (`expiry`), and what metrics read (`metrics`).

use std::sync::atomic::{AtomicBool, AtomicU64, AtomicUsize};
use std::sync::{Arc, Mutex, Weak};

use super::callback::QuotaCallback;
use crate::error::{Error, Result};
use crate::kafka::delay_queue::DelayQueue;
use crate::kafka::entity::{Overrides, Pair};
pub use crate::kafka::quota_type::QuotaType;
use crate::kafka::release::KafkaRelease;
use crate::kafka::samples::WindowConfig;
use crate::kafka::sensor::check_manager_config;
pub use crate::kafka::sensor::DEFAULT_SENSOR_EXPIRY_MS;
use crate::sync::cow::{pin, CowCell};
use crate::sync::hash_map::Node;
use crate::sync::table_swap::{copy_again, Mortal, Table, Tables};

mod config;
mod expiry;
mod metrics;
mod recording;
mod sensors;

pub use config::update_cluster_metadata;
pub use metrics::SensorSnapshot;
use sensors::Sensors;

type Map<K, V> = crate::sync::hash_map::HashMap<K, V, foldhash::fast::RandomState>;

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

/// A sensor's tags `(user, client-id)`, borrowed.
type Tags<'a> = (&'a str, &'a str);

fn tags_of(pair: &Pair) -> Tags<'_> {
    (pair.first(), pair.second())
}

fn bound_of(tags: Tags<'_>, config: &QuotaConfig) -> f64 {
    config.overrides.bound(tags.0, tags.1)
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
    /// ([`Self::for_another_broker_with_callback`]).
    pub fn for_another_broker(&self) -> Result<Self> {
        if self.callback.is_some() {
            return Err(Error::InvalidConfig(
                "a manager with a quota callback has no sibling without one: each broker has \
                 its own callback instance"
                    .to_owned(),
            ));
        }
        Ok(self.for_broker_with(None))
    }

    /// A sibling ([`Self::for_another_broker`]) of a manager with a callback, with `callback` (a new
    /// instance, as each Kafka broker has its own): it is first told every quota set so
    /// far, as a broker that starts reads them all, and from then on every quota set or
    /// removed on any sibling. Limits reset by one sibling are asked again by each of the
    /// others of its own callback before their next record. Fails, making nothing, if this
    /// manager has no callback or `callback` fails to take a quota.
    pub fn for_another_broker_with_callback(
        &self,
        callback: Arc<dyn QuotaCallback>,
    ) -> Result<Self> {
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
        Ok(self.for_broker_with(Some(callback)))
    }

    fn for_broker_with(&self, callback: Option<Arc<dyn QuotaCallback>>) -> Self {
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
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::kafka::entity::QuotaEntity;

    pub(super) fn user(name: &str) -> QuotaEntity {
        QuotaEntity::parse(Some(name), None).unwrap()
    }

    #[test]
    fn siblings_share_quotas_and_measure_apart() {
        let a = QuotaManager::with_defaults(QuotaType::Produce);
        let b = a.for_another_broker().unwrap();
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
}
