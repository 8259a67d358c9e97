//! [`ControllerMutationQuotaManager`]: Kafka's controller-mutation quota (KIP-599,
//! `controller_mutation_rate`): partitions created or deleted per second by CreateTopics,
//! CreatePartitions and DeleteTopics, per user / client id with the same entities,
//! precedence and sensor sharing as the other client quotas (spec section 6, reused from
//! [`crate::kafka::entity`]), measured by a [`crate::kafka::token_bucket`] instead of a sampled rate.
//!
//! Lock-free: the configuration is one copy-on-write snapshot, the sensors live in
//! lock-free hash maps keyed by their metric tags, each bucket is one atomic word and
//! the bound of a bucket is looked up from the configuration in force at each operation
//! (so a quota change is effective at once; the tokens are kept, as Kafka keeps them).

use std::sync::atomic::{
    AtomicBool, AtomicI64, AtomicU64,
    Ordering::{Acquire, Relaxed, Release},
};
use std::sync::Arc;

use crate::error::{check_quota, Error, Result};
use crate::kafka::delay_queue::DelayQueue;
use crate::kafka::entity::{sanitize_user, Overrides, Pair, PairRef, QuotaEntity};
use crate::kafka::javamath::long_to_int;
pub use crate::kafka::mutation_api::MutationApi;
use crate::kafka::quota::UNLIMITED;
use crate::kafka::release::KafkaRelease;
use crate::kafka::samples::{Samples, WindowConfig};
use crate::kafka::sensor::{check_manager_config, DEFAULT_SENSOR_EXPIRY_MS};
use crate::kafka::token_bucket::{check_permits, BucketCell, MutationCheck};
use crate::sync::cow::{pin, CowCell};

type Map<K, V> = crate::sync::hash_map::HashMap<K, V, foldhash::fast::RandomState>;

/// When a sensor last recorded and whether expiry removed it.
struct Life {
    last_record: AtomicI64,
    removed: AtomicBool,
}

impl Life {
    fn new(now: i64) -> Self {
        Life {
            last_record: AtomicI64::new(now),
            removed: AtomicBool::new(false),
        }
    }
}

/// The quota sensor of one tag pair: Kafka's sensor holds two stats, the `tokens` bucket
/// (the quota's windows) and the `mutation-rate` Rate, which has no config of its own and
/// so takes the broker's metrics windows (2 x 30 s). Both record the same values.
struct BucketSensor {
    bucket: BucketCell,
    rate: CowCell<Samples>,
    life: Life,
    /// The bound once expiry removed the sensor (f64 bits), set before `life.removed`.
    frozen_bound: AtomicU64,
}

/// The throttle-time `Avg` sensor of one tag pair (broker default windows, 2 x 30 s).
struct ThrottleSensor {
    samples: CowCell<Samples>,
    life: Life,
}

trait Alive {
    fn life(&self) -> &Life;
}

impl Alive for BucketSensor {
    fn life(&self) -> &Life {
        &self.life
    }
}

impl Alive for ThrottleSensor {
    fn life(&self) -> &Life {
        &self.life
    }
}

/// The live sensor under `key`, created with `create` when there is none (or only one
/// that expiry removed).
fn get_or_create<S: Alive + Send + Sync + 'static>(
    map: &Map<Pair, Arc<S>>,
    key: &Pair,
    create: impl Fn() -> S,
) -> Arc<S> {
    let m = map.pin();
    loop {
        let sensor = m
            .get_or_insert_with(key.clone(), || Arc::new(create()))
            .clone();
        if !sensor.life().removed.load(Relaxed) {
            return sensor;
        }
        let _ = m.remove_if(key, |_, v| Arc::ptr_eq(v, &sensor));
    }
}

/// Removes the sensors of `map` idle for longer than `expiry_ms`, calling `on_remove` on
/// each before it is marked removed; their tags.
fn expire<S: Alive + Send + Sync + 'static>(
    map: &Map<Pair, Arc<S>>,
    now: i64,
    expiry_ms: i64,
    on_remove: impl Fn(&Pair, &S),
) -> Vec<Pair> {
    let m = map.pin();
    let stale: Vec<(Pair, Arc<S>)> = m
        .iter()
        .filter(|(_, s)| now.wrapping_sub(s.life().last_record.load(Relaxed)) > expiry_ms)
        .map(|(k, s)| (k.clone(), s.clone()))
        .collect();
    let mut removed = Vec::new();
    for (key, sensor) in stale {
        if now.wrapping_sub(sensor.life().last_record.load(Relaxed)) <= expiry_ms {
            continue;
        }
        on_remove(&key, &sensor);
        if !sensor.life().removed.swap(true, Release) {
            removed.push(key.clone());
        }
        let _ = m.remove_if(&key, |_, v| Arc::ptr_eq(v, &sensor));
    }
    removed
}

#[derive(Clone, Default)]
struct MutationConfig {
    overrides: Overrides,
}

/// Kafka's `ControllerMutationQuotaManager`. Safe to share between threads.
pub struct ControllerMutationQuotaManager {
    window: WindowConfig,
    sensor_expiry_ms: i64,
    /// Shared with the manager's siblings (other brokers' managers of one configuration).
    config: Arc<CowCell<MutationConfig>>,
    buckets: Map<Pair, Arc<BucketSensor>>,
    throttles: Map<Pair, Arc<ThrottleSensor>>,
    delay_queue: DelayQueue,
}

impl ControllerMutationQuotaManager {
    /// A manager whose buckets hold `window.num_samples() * window seconds` of quota; the
    /// window is a whole number of seconds (`quota.window.size.seconds`). Sensors expire
    /// after `sensor_expiry_ms` without a record.
    pub fn new(window: WindowConfig, sensor_expiry_ms: i64) -> Result<Self> {
        check_manager_config(&window, sensor_expiry_ms)?;
        Ok(ControllerMutationQuotaManager {
            window,
            sensor_expiry_ms,
            config: Arc::new(CowCell::new(MutationConfig::default())),
            buckets: Map::default(),
            throttles: Map::default(),
            delay_queue: DelayQueue::new(),
        })
    }

    /// A manager for another broker of the same cluster: the same windows and quotas (one
    /// configuration: a quota set on either applies to both), its own buckets, throttle
    /// sensors and delay queue, as each Kafka broker holds its own.
    pub fn for_another_broker(&self) -> Self {
        ControllerMutationQuotaManager {
            window: self.window,
            sensor_expiry_ms: self.sensor_expiry_ms,
            config: Arc::clone(&self.config),
            buckets: Map::default(),
            throttles: Map::default(),
            delay_queue: DelayQueue::new(),
        }
    }

    /// Kafka's defaults: 11 windows of 1 s (a burst of 11 s of quota), one hour expiry.
    pub fn with_defaults() -> Self {
        Self::new(WindowConfig::QUOTA_DEFAULT, DEFAULT_SENSOR_EXPIRY_MS)
            .expect("Kafka's defaults are valid")
    }

    /// The same manager following `release` where Kafka releases differ (see
    /// [`KafkaRelease`]); its siblings follow it too. Meant for a manager just built.
    pub fn for_release(self, release: KafkaRelease) -> Self {
        self.config
            .update(&pin(), |c| c.overrides.release = release);
        self
    }

    /// The Kafka release whose rules the manager follows.
    pub fn release(&self) -> KafkaRelease {
        self.config.read(&pin(), |c| c.overrides.release)
    }

    /// The sample configuration the burst is computed from.
    pub fn window(&self) -> WindowConfig {
        self.window
    }

    /// How long a sensor lives without a record, ms.
    pub fn sensor_expiry_ms(&self) -> i64 {
        self.sensor_expiry_ms
    }

    /// The overrides and enabled levels in force now (for the replay kernel).
    pub(crate) fn overrides(&self) -> Overrides {
        self.config.read(&pin(), |c| c.overrides.clone())
    }

    /// Whether a quota level is enabled (`quotasEnabled`; before 4.2 once any quota was set or
    /// removed, from 4.2 while a quota exists): until then nothing is
    /// measured and every mutation is free.
    pub fn enabled(&self) -> bool {
        self.config.read(&pin(), |c| c.overrides.enabled != 0)
    }

    /// Sets the `controller_mutation_rate` of `entity` (mutations per second, finite > 0).
    pub fn set_quota(&self, entity: &QuotaEntity, value: f64) -> Result<()> {
        let value = check_quota(value)?;
        self.config
            .update(&pin(), |c| c.overrides.apply(entity, Some(value)));
        Ok(())
    }

    /// Removes the override of `entity`.
    pub fn remove_quota(&self, entity: &QuotaEntity) {
        self.config
            .update(&pin(), |c| c.overrides.apply(entity, None));
    }

    /// The override of exactly `entity`.
    pub fn quota(&self, entity: &QuotaEntity) -> Option<f64> {
        self.config.read(&pin(), |c| c.overrides.get(entity))
    }

    /// Every override.
    pub fn quotas(&self) -> Vec<(QuotaEntity, f64)> {
        self.config.read(&pin(), |c| {
            c.overrides.iter().map(|(e, v)| (e.clone(), v)).collect()
        })
    }

    /// The metric tags `(user, client-id)` a request from `user` with `client_id` uses.
    pub fn tags(&self, user: &str, client_id: &str) -> (String, String) {
        self.config.read(&pin(), |c| {
            c.overrides.tags(&sanitize_user(user), client_id)
        })
    }

    /// The quota that applies to the client now (`None` when none does).
    pub fn quota_for(&self, user: &str, client_id: &str) -> Option<f64> {
        self.config.read(&pin(), |c| {
            let (u, ci) = c.overrides.tags(&sanitize_user(user), client_id);
            c.overrides.quota_limit(&u, &ci)
        })
    }

    /// The client's bucket sensor and its tags, creating it and the throttle-time sensor
    /// as Kafka's `getOrCreateQuotaSensors` does; `None` when quotas were never enabled.
    fn bind(&self, user: &str, client_id: &str, now: i64) -> Option<(Pair, Arc<BucketSensor>)> {
        let guard = pin();
        let config = self.config.load(&guard);
        if config.overrides.enabled == 0 {
            return None;
        }
        let (u, c) = config.overrides.tags(&sanitize_user(user), client_id);
        let tags = Pair::new(&u, &c);
        let sensor = get_or_create(&self.buckets, &tags, || BucketSensor {
            bucket: BucketCell::new(),
            rate: CowCell::new(Samples::new()),
            life: Life::new(now),
            frozen_bound: AtomicU64::new(UNLIMITED.to_bits()),
        });
        get_or_create(&self.throttles, &tags, || ThrottleSensor {
            samples: CowCell::new(Samples::new()),
            life: Life::new(now),
        });
        Some((tags, sensor))
    }

    /// Records `permits` into `sensor` (of `tags`), strictly or permissively, with the
    /// bound its tags have now (Kafka updates a live sensor's quota when quotas change).
    /// The sensor counts as recorded into (for expiry) only when the mutation was
    /// accepted: a strict refusal records nothing in Kafka.
    fn record_into(
        &self,
        tags: &Pair,
        sensor: &BucketSensor,
        strict: bool,
        permits: f64,
        now: i64,
    ) -> MutationCheck {
        let guard = pin();
        let bound = if sensor.life.removed.load(Acquire) {
            f64::from_bits(sensor.frozen_bound.load(Relaxed))
        } else {
            self.config
                .read(&guard, |c| {
                    c.overrides.quota_limit(tags.first(), tags.second())
                })
                .unwrap_or(UNLIMITED)
        };
        let check = if strict {
            sensor
                .bucket
                .record_strict(&self.window, bound, permits, now)
        } else {
            sensor
                .bucket
                .record_permissive(&self.window, bound, permits, now)
        };
        if check.accepted {
            sensor.rate.update(&guard, |s| {
                s.record(&WindowConfig::METRICS_DEFAULT, permits, now)
            });
            sensor.life.last_record.store(now, Relaxed);
        }
        check
    }

    fn record_now(
        &self,
        user: &str,
        client_id: &str,
        strict: bool,
        permits: f64,
        now: i64,
    ) -> Result<MutationCheck> {
        let permits = check_permits(permits)?;
        Ok(match self.bind(user, client_id, now) {
            Some((tags, sensor)) => self.record_into(&tags, &sensor, strict, permits, now),
            None => MutationCheck::FREE,
        })
    }

    /// Strict enforcement (new request versions): if the client's bucket is already
    /// overdrawn at `now` the mutation of `permits` partitions is refused with the
    /// throttle (Kafka fails the topic with THROTTLING_QUOTA_EXCEEDED); otherwise it is
    /// recorded, even if it overdraws the bucket, and not throttled.
    pub fn record_strict(
        &self,
        user: &str,
        client_id: &str,
        permits: f64,
        now: i64,
    ) -> Result<MutationCheck> {
        self.record_now(user, client_id, true, permits, now)
    }

    /// Permissive enforcement (old request versions): records `permits`, then gives the
    /// throttle if that overdrew the bucket. Always accepted.
    pub fn record_permissive(
        &self,
        user: &str,
        client_id: &str,
        permits: f64,
        now: i64,
    ) -> Result<MutationCheck> {
        self.record_now(user, client_id, false, permits, now)
    }

    /// Strict or permissive as Kafka picks for `api` at request `version`.
    pub fn record_for(
        &self,
        api: MutationApi,
        version: i16,
        user: &str,
        client_id: &str,
        permits: f64,
        now: i64,
    ) -> Result<MutationCheck> {
        if api.is_strict(version) {
            self.record_strict(user, client_id, permits, now)
        } else {
            self.record_permissive(user, client_id, permits, now)
        }
    }

    /// Kafka's `maybeRecordAndGetThrottleTimeMs` on this manager: the strict record, its
    /// throttle as an int (the low 32 bits of the long); 0 while quotas are disabled.
    pub fn record(&self, user: &str, client_id: &str, permits: f64, now: i64) -> Result<i32> {
        Ok(long_to_int(
            self.record_strict(user, client_id, permits, now)?
                .throttle_ms,
        ))
    }

    /// The client's remaining tokens at `now` (refills, as a metrics read does); `None`
    /// when its bucket does not exist.
    pub fn tokens(&self, user: &str, client_id: &str, now: i64) -> Option<f64> {
        let guard = pin();
        let config = self.config.load(&guard);
        let (u, c) = config.overrides.tags(&sanitize_user(user), client_id);
        let bound = config.overrides.quota_limit(&u, &c).unwrap_or(UNLIMITED);
        let m = self.buckets.pin();
        let sensor = m
            .get(&PairRef::new(&u, &c))
            .filter(|s| !s.life.removed.load(Relaxed))?;
        Some(sensor.bucket.measure(&self.window, bound, now))
    }

    /// The client's `mutation-rate` at `now`: partitions mutated per second, Kafka's
    /// `Rate` over the broker's metrics windows (2 x 30 s); `None` when its sensor does not
    /// exist. Refused (strict) mutations are not counted, as Kafka records nothing then.
    pub fn mutation_rate(&self, user: &str, client_id: &str, now: i64) -> Option<f64> {
        let (u, c) = self.tags(user, client_id);
        let m = self.buckets.pin();
        let sensor = m
            .get(&PairRef::new(&u, &c))
            .filter(|s| !s.life.removed.load(Relaxed))?;
        Some(sensor.rate.update(&pin(), |s| {
            s.measure_rate(&WindowConfig::METRICS_DEFAULT, now).0
        }))
    }

    /// Accounts a throttle of `throttle_ms` > 0 applied to a client (throttle-time sensor)
    /// and, with a `channel`, queues it until `now + throttle_ms`. Returns the end.
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
        let (u, c) = self.tags(user, client_id);
        let tags = Pair::new(&u, &c);
        // Kafka's throttle gets (or creates) both of the client's sensors, the bucket
        // too, whether quotas are enabled or not.
        get_or_create(&self.buckets, &tags, || BucketSensor {
            bucket: BucketCell::new(),
            rate: CowCell::new(Samples::new()),
            life: Life::new(now),
            frozen_bound: AtomicU64::new(UNLIMITED.to_bits()),
        });
        let sensor = get_or_create(&self.throttles, &tags, || ThrottleSensor {
            samples: CowCell::new(Samples::new()),
            life: Life::new(now),
        });
        sensor.life.last_record.store(now, Relaxed);
        sensor.samples.update(&pin(), |s| {
            s.record(&WindowConfig::METRICS_DEFAULT, throttle_ms as f64, now)
        });
        let end = now.saturating_add(throttle_ms);
        if let Some(channel) = channel {
            self.delay_queue.push(end, channel);
        }
        Ok(end)
    }

    /// The client's throttle-time average (NaN with none in the horizon); `None` when
    /// that sensor does not exist.
    pub fn throttle_time_avg(&self, user: &str, client_id: &str, now: i64) -> Option<f64> {
        let (u, c) = self.tags(user, client_id);
        let m = self.throttles.pin();
        let sensor = m
            .get(&PairRef::new(&u, &c))
            .filter(|s| !s.life.removed.load(Relaxed))?;
        Some(sensor.samples.update(&pin(), |s| {
            s.measure_avg(&WindowConfig::METRICS_DEFAULT, now)
        }))
    }

    /// Removes the delay-queue entries ending at or before `now`; returns their channels.
    pub fn expired_channels(&self, now: i64) -> Vec<u64> {
        self.delay_queue.expire(now)
    }

    /// Channels waiting in the delay queue (`queue-size`).
    pub fn queue_size(&self) -> usize {
        self.delay_queue.len()
    }

    /// The earliest end of a mute still queued (`None` when the queue is empty).
    pub fn next_unmute_ms(&self) -> Option<i64> {
        self.delay_queue.next_end_ms()
    }

    fn sensor_name(kind: &str, tags: &Pair) -> String {
        format!(
            "ControllerMutation{kind}-{}:{}",
            tags.first(),
            tags.second()
        )
    }

    /// Kafka names of the live sensors, sorted.
    pub fn sensor_names(&self) -> Vec<String> {
        let b = self.buckets.pin();
        let t = self.throttles.pin();
        let mut names: Vec<String> = b
            .iter()
            .filter(|(_, s)| !s.life.removed.load(Relaxed))
            .map(|(k, _)| Self::sensor_name("", k))
            .chain(
                t.iter()
                    .filter(|(_, s)| !s.life.removed.load(Relaxed))
                    .map(|(k, _)| Self::sensor_name("ThrottleTime", k)),
            )
            .collect();
        names.sort();
        names
    }

    /// Number of live buckets.
    pub fn sensor_count(&self) -> usize {
        self.buckets.len()
    }

    /// Removes the sensors idle for strictly longer than the expiry; returns their Kafka
    /// names, sorted. A bucket created again later starts as a new one.
    pub fn expire_sensors(&self, now: i64) -> Vec<String> {
        let guard = pin();
        let config = self.config.load(&guard);
        // A removed bucket keeps the bound its tags have now: Kafka updates the quota of
        // registered sensors only, and a request that holds this one records on with it.
        let freeze = |tags: &Pair, sensor: &BucketSensor| {
            let bound = config
                .overrides
                .quota_limit(tags.first(), tags.second())
                .unwrap_or(UNLIMITED);
            sensor.frozen_bound.store(bound.to_bits(), Relaxed);
        };
        let mut names: Vec<String> = expire(&self.buckets, now, self.sensor_expiry_ms, freeze)
            .iter()
            .map(|k| Self::sensor_name("", k))
            .chain(
                expire(&self.throttles, now, self.sensor_expiry_ms, |_, _| {})
                    .iter()
                    .map(|k| Self::sensor_name("ThrottleTime", k)),
            )
            .collect();
        names.sort();
        names
    }
}

/// One mutation request's view of the quota (Kafka's `StrictControllerMutationQuota` /
/// `PermissiveControllerMutationQuota`): records the permits of each topic in turn and
/// remembers the last throttle, which the response reports minus the time the request
/// waited since. Shareable (atomics), though a request normally uses it from one thread.
pub struct MutationRequestQuota {
    manager: Arc<ControllerMutationQuotaManager>,
    /// The client's sensor and its tags, bound when the request's quota is made, as
    /// Kafka's `newStrictQuotaFor` / `newPermissiveQuotaFor` bind it: a quota change or an
    /// expiry during the request does not move it. `None` when quotas were never enabled
    /// then (Kafka's unbounded quota: nothing is recorded).
    sensor: Option<(Pair, Arc<BucketSensor>)>,
    strict: bool,
    last_throttle_ms: AtomicI64,
    last_recorded_ms: AtomicI64,
}

impl MutationRequestQuota {
    /// The quota of one request from `user` / `client_id`, strict or permissive, made at
    /// `now`: it gets or creates the client's sensors then.
    pub fn new(
        manager: Arc<ControllerMutationQuotaManager>,
        user: &str,
        client_id: &str,
        strict: bool,
        now: i64,
    ) -> Self {
        let sensor = manager.bind(user, client_id, now);
        MutationRequestQuota {
            manager,
            sensor,
            strict,
            last_throttle_ms: AtomicI64::new(0),
            last_recorded_ms: AtomicI64::new(0),
        }
    }

    /// Whether this request's quota is strict.
    pub fn strict(&self) -> bool {
        self.strict
    }

    /// Records the permits of one topic at `now` into the request's sensor. A strict
    /// quota refuses it (the topic fails with THROTTLING_QUOTA_EXCEEDED) when the bucket
    /// is already overdrawn.
    pub fn record(&self, permits: f64, now: i64) -> Result<MutationCheck> {
        let permits = check_permits(permits)?;
        let check = match &self.sensor {
            Some((tags, sensor)) => {
                self.manager
                    .record_into(tags, sensor, self.strict, permits, now)
            }
            None => MutationCheck::FREE,
        };
        if check.violated {
            self.last_throttle_ms.store(check.throttle_ms, Relaxed);
            self.last_recorded_ms.store(now, Relaxed);
        }
        Ok(check)
    }

    /// The throttle of the last record that overdrew the bucket, as it computed it (0
    /// before any did): Kafka's `lastThrottleTimeMs`.
    pub fn last_throttle_ms(&self) -> i64 {
        self.last_throttle_ms.load(Relaxed)
    }

    /// `isExceeded`: a strict quota that refused a record (a permissive one never is).
    pub fn is_exceeded(&self) -> bool {
        self.strict && self.last_throttle_ms.load(Relaxed) > 0
    }

    /// The throttle to put in the response at `now`: the last throttle minus the time
    /// since it was computed, at least 0.
    pub fn throttle_time(&self, now: i64) -> i32 {
        crate::kafka::token_bucket::remaining_throttle(
            self.last_throttle_ms.load(Relaxed),
            self.last_recorded_ms.load(Relaxed),
            now,
            self.manager.release(),
        )
    }
}

#[cfg(test)]
mod tests;
