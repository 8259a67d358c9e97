//! The sensors of one quota type in one replayed scenario, in plain arrays: a sequential
//! copy of what a [`crate::QuotaManager`] keeps for that type, with the same rules.
//!
//! Every distinct `(user, client-id)` pair of the trace is resolved once to the dense id
//! of its sensor (by the manager's precedence rules, [`Overrides::tags`]), again only when
//! the configuration changes. Recording is then an index into a vector: no hash lookup,
//! no atomics.

use std::collections::HashMap;

mod custom;

use super::stats::{EntityStats, EntitySummary, Usage};
use crate::entity::Overrides;
use crate::error::Result;
use crate::manager::{
    max_value_in_quota_window, rate_units, sensor_expired, throttle_int, QuotaType,
};
use crate::quota::{verdict, Check};
use crate::samples::{Samples, Summary, WindowConfig};

/// One rate sensor without atomics: the samples and the [`Summary`] that lets an ordinary
/// record (one in the sample in progress, nothing to purge) add to one value and measure
/// without walking the ring, exactly as [`crate::rate_cell::RateCell`]'s in-place path.
#[derive(Debug, Clone, Default)]
pub(crate) struct PlainRate {
    samples: Samples,
    summary: Option<Summary>,
}

impl PlainRate {
    /// Records `value` at `t` and, with `check`, checks `bound` as Kafka's
    /// `Sensor.record` does; bit for bit [`Samples::record`] then
    /// [`crate::quota::check_bound`].
    pub fn record(
        &mut self,
        cfg: &WindowConfig,
        value: f64,
        t: i64,
        check: bool,
        bound: f64,
    ) -> Check {
        if let Some(summary) = &self.summary {
            if summary.record_in_place(cfg, t, check) {
                let (current, _) = self.samples.current().unwrap_or((0.0, t));
                let updated = current + value;
                self.samples.set_current(updated, t);
                if !check {
                    return Check::UNCHECKED;
                }
                let (rate, window) = summary.rate(cfg, t, updated, self.samples.tail());
                return verdict(rate, bound, window);
            }
        }
        if check {
            let ((rate, window), summary) = self.samples.record_and_measure(cfg, value, t);
            self.summary = Some(summary);
            return verdict(rate, bound, window);
        }
        self.samples.record(cfg, value, t);
        self.summary = self.samples.summary();
        Check::UNCHECKED
    }

    /// The rate at `t` (purges as Kafka's measurement does).
    pub fn measure(&mut self, cfg: &WindowConfig, t: i64) -> f64 {
        let (rate, _) = self.samples.measure_rate(cfg, t);
        self.summary = self.samples.summary();
        rate
    }
}

/// A quota sensor: its rate, the bound it enforces and its life.
#[derive(Debug, Clone)]
struct Sensor {
    rate: PlainRate,
    bound: f64,
    /// Kafka's `Sensor.lastRecordTime`.
    last_record: i64,
    /// Created and not removed by expiry (as seen at `last_record`).
    live: bool,
}

/// The sensors of one quota type of one scenario.
#[derive(Debug, Clone)]
pub(crate) struct SensorTable {
    quota_type: QuotaType,
    window: WindowConfig,
    expiry_ms: i64,
    overrides: Overrides,
    /// Pair id -> sensor id (meaningless while nothing is enabled).
    pair_sensor: Vec<u32>,
    /// Sensor tags -> sensor id; read only when resolving.
    by_tags: HashMap<(String, String), u32>,
    sensors: Vec<Sensor>,
    tags: Vec<(String, String)>,
    /// The summary of each sensor's tags (kept across expiry: one entity per tags).
    stats: Vec<EntityStats>,
    /// The manager's quota callback, if it has one: it resolves instead of `overrides`.
    custom: Option<custom::Custom>,
}

impl SensorTable {
    pub fn new(
        quota_type: QuotaType,
        window: WindowConfig,
        expiry_ms: i64,
        overrides: Overrides,
    ) -> Self {
        SensorTable {
            quota_type,
            window,
            expiry_ms,
            overrides,
            pair_sensor: Vec::new(),
            by_tags: HashMap::new(),
            sensors: Vec::new(),
            tags: Vec::new(),
            stats: Vec::new(),
            custom: None,
        }
    }

    /// Whether any quota was ever set or removed: until then Kafka measures nothing.
    pub fn enabled(&self) -> bool {
        self.overrides.enabled != 0
    }

    /// The tags of `pair`'s sensor.
    pub fn tags_of(&self, pair: u32) -> &(String, String) {
        &self.tags[self.pair_sensor[pair as usize] as usize]
    }

    /// The bound of `pair`'s sensor; `None` when unlimited.
    pub fn quota_of(&self, pair: u32) -> Option<f64> {
        let id = self.pair_sensor[pair as usize] as usize;
        self.limit_of(id)
    }

    /// The quota of sensor `id` (`None`: unlimited).
    fn limit_of(&self, id: usize) -> Option<f64> {
        if let Some(limit) = self.custom_limit(id) {
            return limit;
        }
        let (u, c) = &self.tags[id];
        self.overrides.quota_limit(u, c)
    }

    /// Prefetch, first stage: the sensor and summary records of `pair` (a hint).
    #[inline]
    pub fn prefetch(&self, pair: u32) {
        if let Some(&id) = self.pair_sensor.get(pair as usize) {
            crate::prefetch_all(self.sensors.as_ptr().wrapping_add(id as usize));
            crate::prefetch_all(self.stats.as_ptr().wrapping_add(id as usize));
        }
    }

    /// Prefetch, second stage (once the first has arrived): the sensor's sample ring and
    /// its summary's windows.
    #[inline]
    pub fn prefetch_deep(&self, pair: u32) {
        if let Some(&id) = self.pair_sensor.get(pair as usize) {
            self.sensors[id as usize].rate.samples.prefetch();
            self.stats[id as usize].prefetch();
        }
    }

    /// The fetch-size cap of `pair` ([`max_value_in_quota_window`]); `f64::MAX` while
    /// nothing is enabled.
    pub fn max_value_in_quota_window(&self, pair: u32) -> f64 {
        if !self.enabled() {
            return f64::MAX;
        }
        max_value_in_quota_window(self.quota_of(pair), &self.window)
    }

    /// Adds one event to the summary of `pair`'s sensor.
    #[inline]
    pub fn count(&mut self, pair: u32, usage: &Usage) {
        let id = self.pair_sensor[pair as usize];
        self.stats[id as usize].add(usage, &self.window);
    }

    /// The summaries of the sensors that recorded something.
    pub fn summaries(&self, scenario: usize) -> impl Iterator<Item = EntitySummary> + '_ {
        self.stats
            .iter()
            .zip(&self.tags)
            .enumerate()
            .filter(|(_, (s, _))| s.requests() > 0)
            .map(move |(id, (s, tags))| {
                s.summary(
                    scenario,
                    self.quota_type,
                    tags,
                    self.limit_of(id),
                    &self.window,
                )
            })
    }

    /// Resolves pairs `from..` of `pairs` (sanitized user, client id) to their sensors.
    pub fn resolve(&mut self, pairs: &[(String, String)], from: usize) -> Result<()> {
        if self.custom.is_some() {
            return self.resolve_custom(pairs, from);
        }
        self.pair_sensor.truncate(from);
        for (user, client) in &pairs[from..] {
            let tags = self.overrides.tags(user, client);
            let next = self.sensors.len() as u32;
            let id = *self.by_tags.entry(tags.clone()).or_insert(next);
            if id == next {
                let bound = self.overrides.bound(&tags.0, &tags.1);
                self.sensors.push(Sensor {
                    rate: PlainRate::default(),
                    bound,
                    last_record: 0,
                    live: false,
                });
                self.tags.push(tags);
                self.stats.push(EntityStats::default());
            }
            self.pair_sensor.push(id);
        }
        Ok(())
    }

    /// Forgets pairs `len..` (an [`Self::resolve`] that failed part way).
    pub fn truncate_pairs(&mut self, len: usize) {
        self.pair_sensor.truncate(len);
    }

    /// Sets (`Some`) or removes (`None`) an override, then resolves every pair again and
    /// refreshes every sensor's bound (samples are kept), as the manager does.
    pub fn apply(
        &mut self,
        entity: &crate::entity::QuotaEntity,
        value: Option<f64>,
        pairs: &[(String, String)],
    ) -> Result<()> {
        if self.custom.is_some() {
            return self.apply_custom(entity, value, pairs);
        }
        self.overrides.apply(entity, value);
        for (sensor, (u, c)) in self.sensors.iter_mut().zip(&self.tags) {
            sensor.bound = self.overrides.bound(u, c);
        }
        self.resolve(pairs, 0)
    }

    /// The sensor of `pair`, (re)created empty if it does not exist or the expiry run at
    /// `run` (the latest at or before now, `None` if none) removed it.
    #[inline]
    fn live_sensor(&mut self, pair: u32, run: Option<i64>) -> &mut Sensor {
        let id = self.pair_sensor[pair as usize];
        let sensor = &mut self.sensors[id as usize];
        let removed = match run {
            Some(run) => sensor_expired(sensor.last_record, run, self.expiry_ms),
            None => false,
        };
        if !sensor.live || removed {
            sensor.rate = PlainRate::default();
            sensor.live = true;
        }
        sensor
    }

    /// Records usage `value` (bytes or thread nanoseconds, valid) of `pair` at `t`; with
    /// `check` returns the manager's throttle (Kafka's int), else 0. Does nothing when no
    /// quota was ever configured.
    #[inline]
    pub fn record(&mut self, pair: u32, value: f64, t: i64, check: bool, run: Option<i64>) -> i32 {
        if !self.enabled() {
            return 0;
        }
        let (quota_type, window) = (self.quota_type, self.window);
        let sensor = self.live_sensor(pair, run);
        sensor.last_record = t;
        let outcome = sensor.rate.record(
            &window,
            rate_units(quota_type, value),
            t,
            check,
            sensor.bound,
        );
        throttle_int(quota_type, &window, outcome)
    }

    /// The rate of `pair`'s sensor at `t` (purges), `None` when it does not exist.
    pub fn measure(&mut self, pair: u32, t: i64, run: Option<i64>) -> Option<f64> {
        if !self.enabled() {
            return None;
        }
        let id = self.pair_sensor[pair as usize];
        let window = self.window;
        let sensor = &mut self.sensors[id as usize];
        let removed = run.is_some_and(|r| sensor_expired(sensor.last_record, r, self.expiry_ms));
        if !sensor.live || removed {
            return None;
        }
        Some(sensor.rate.measure(&window, t))
    }
}
