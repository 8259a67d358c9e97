//! The sensors of one quota type in one replayed scenario, in plain arrays: a sequential
//! copy of what a [`crate::QuotaManager`] keeps for that type, with the same rules.
//!
//! Every distinct `(user, client-id)` pair of the trace is resolved once to the dense id
//! of its sensor (by the manager's precedence rules, [`Overrides::tags`]), again only when
//! the configuration changes. Recording is then an index into a vector: no hash lookup,
//! no atomics.

use std::collections::HashMap;

mod custom;

use super::clock::Clock;
use super::groups::Record;
use super::ring::{Ring, Rings};
use super::stats::{EntityStats, EntitySummary, Histogram, Usage, WindowIndex};
use crate::error::Result;
use crate::kafka::entity::Overrides;
use crate::kafka::quota_type::QuotaType;
use crate::kafka::release::KafkaRelease;
use crate::kafka::samples::WindowConfig;
use crate::kafka::sensor::{max_value_in_quota_window, sensor_expired};
use crate::kafka::units::rate_units;

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
    /// Each sensor's samples, bound and life, by sensor id.
    rings: Rings,
    tags: Vec<(String, String)>,
    /// The summary of each sensor's tags (kept across expiry: one entity per tags).
    stats: Vec<EntityStats>,
    /// Each sensor's ring of window sums for its peak ([`EntityStats::add`]), `span` each.
    spans: Vec<i64>,
    span: usize,
    /// Each sensor's positive throttles.
    positive: Vec<Histogram>,
    /// The whole window of the last event counted, for the peaks.
    clock: WindowIndex,
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
            rings: Rings::new(window),
            tags: Vec::new(),
            stats: Vec::new(),
            spans: Vec::new(),
            span: EntityStats::span(&window),
            positive: Vec::new(),
            clock: WindowIndex::new(&window),
            custom: None,
        }
    }

    /// Whether a quota level is enabled (before 4.2 once any quota was set or removed, from
    /// 4.2 while a quota exists): until then Kafka measures nothing.
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
        let id = self.pair_sensor[pair as usize] as usize;
        let window = self.clock.of(usage.time_ms);
        let spans = &mut self.spans[id * self.span..(id + 1) * self.span];
        self.stats[id].add(usage, window, spans, &mut self.positive[id]);
    }

    /// This table's window configuration.
    pub fn window(&self) -> &WindowConfig {
        &self.window
    }

    /// The summaries of the sensors that recorded something.
    pub fn summaries(&self, scenario: usize) -> impl Iterator<Item = EntitySummary> + '_ {
        self.stats
            .iter()
            .zip(&self.tags)
            .zip(&self.positive)
            .enumerate()
            .filter(|(_, ((s, _), _))| s.requests() > 0)
            .map(move |(id, ((s, tags), positive))| {
                s.summary(
                    positive,
                    scenario,
                    self.quota_type.into(),
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
            let next = self.rings.len() as u32;
            let id = *self.by_tags.entry(tags.clone()).or_insert(next);
            if id == next {
                let bound = self.overrides.bound(&tags.0, &tags.1);
                self.push_sensor(tags, bound);
            }
            self.pair_sensor.push(id);
        }
        Ok(())
    }

    /// A new sensor for `tags` with `bound`, empty and not yet live; its id is the next.
    fn push_sensor(&mut self, tags: (String, String), bound: f64) {
        self.rings.push(bound);
        self.tags.push(tags);
        self.stats.push(EntityStats::default());
        self.spans.resize(self.spans.len() + self.span, 0);
        self.positive.push(Histogram::default());
    }

    /// Forgets pairs `len..` (an [`Self::resolve`] that failed part way).
    pub fn truncate_pairs(&mut self, len: usize) {
        self.pair_sensor.truncate(len);
    }

    /// Sets (`Some`) or removes (`None`) an override, then resolves every pair again and
    /// refreshes every sensor's bound (samples are kept), as the manager does.
    pub fn apply(
        &mut self,
        entity: &crate::kafka::entity::QuotaEntity,
        value: Option<f64>,
        pairs: &[(String, String)],
    ) -> Result<()> {
        if self.custom.is_some() {
            return self.apply_custom(entity, value, pairs);
        }
        self.overrides.apply(entity, value);
        for (id, (u, c)) in self.tags.iter().enumerate() {
            self.rings.set_bound(id, self.overrides.bound(u, c));
        }
        self.resolve(pairs, 0)
    }

    /// Number of sensors (ids `0..`), live or not.
    pub fn sensor_count(&self) -> usize {
        self.rings.len()
    }

    /// The sensor id of `pair` (meaningless while nothing is enabled).
    #[inline]
    pub fn sensor_of(&self, pair: u32) -> u32 {
        self.pair_sensor[pair as usize]
    }

    /// Prefetch (a hint): sensor `id`'s block and summary record.
    #[inline]
    pub fn prefetch_sensor(&self, id: u32) {
        let id = id as usize;
        self.rings.prefetch(id);
        crate::sync::prefetch_all(self.stats.as_ptr().wrapping_add(id));
        crate::sync::prefetch(self.spans.as_ptr().wrapping_add(id * self.span));
    }

    /// Records usage `value` (bytes or thread nanoseconds, valid) of `pair` at `t`; with
    /// `check` returns the manager's throttle (Kafka's int), else 0. Does nothing when no
    /// quota was ever configured.
    #[inline]
    pub fn record(&mut self, pair: u32, value: f64, t: i64, check: bool, run: Option<i64>) -> i32 {
        if !self.enabled() {
            return 0;
        }
        let id = self.pair_sensor[pair as usize] as usize;
        let rules = self.rules();
        rules.record(&mut self.rings.ring(id), value, t, check, run)
    }

    fn rules(&self) -> Rules {
        Rules {
            quota_type: self.quota_type,
            window: self.window,
            release: self.overrides.release,
            expiry_ms: self.expiry_ms,
        }
    }

    /// Open loop: sensor `id`'s records of a batch (`records`, in time order), each
    /// recorded with a check as [`Self::record`] does, the latest expiry run before
    /// it from a copy of `clock`; `decide(record, throttle)` says whether its usage is
    /// taken back (a throttled fetch: recorded again negated, without a check), and the
    /// summary counts it with `usage(record)` (its bytes and usage as whole numbers).
    /// `windows` gives each record's whole window.
    #[inline(always)]
    pub fn replay_run(
        &mut self,
        id: u32,
        records: &[Record],
        clock: &Clock,
        windows: &mut WindowIndex,
        mut decide: impl FnMut(&Record, i32) -> bool,
        usage: impl Fn(&Record) -> (i64, i64),
    ) {
        let rules = self.rules();
        let id = id as usize;
        let mut ring = self.rings.ring(id);
        let stats = &mut self.stats[id];
        let spans = &mut self.spans[id * self.span..(id + 1) * self.span];
        let positive = &mut self.positive[id];
        let mut clock = clock.clone();
        for r in records {
            let run = clock.run_at(r.time);
            let throttle = rules.record(&mut ring, r.value, r.time, true, run);
            let recorded = !decide(r, throttle);
            if !recorded {
                rules.record(&mut ring, -r.value, r.time, false, run);
            }
            let (bytes, usage) = usage(r);
            let u = Usage {
                time_ms: r.time,
                bytes,
                usage,
                recorded,
                throttle_ms: throttle,
                added_latency_ms: 0,
            };
            stats.add(&u, windows.of(r.time), spans, positive);
        }
    }

    /// The rate of `pair`'s sensor at `t` (purges), `None` when it does not exist.
    pub fn measure(&mut self, pair: u32, t: i64, run: Option<i64>) -> Option<f64> {
        if !self.enabled() {
            return None;
        }
        let id = self.pair_sensor[pair as usize] as usize;
        let (last_record, live) = self.rings.life(id);
        let removed = run.is_some_and(|r| sensor_expired(last_record, r, self.expiry_ms));
        if !live || removed {
            return None;
        }
        Some(self.rings.measure(id, t).rate())
    }
}

/// What a table's sensors record by: its quota type, window, Kafka release and sensor
/// expiry.
#[derive(Debug, Clone, Copy)]
struct Rules {
    quota_type: QuotaType,
    window: WindowConfig,
    release: KafkaRelease,
    expiry_ms: i64,
}

impl Rules {
    /// Records usage `value` (bytes or thread nanoseconds) into `ring` at `t`, the sensor
    /// first (re)created empty if it does not exist or the expiry run at `run` removed
    /// it; with `check` returns the manager's throttle (Kafka's int), else 0.
    #[inline(always)]
    fn record(
        &self,
        ring: &mut Ring<'_>,
        value: f64,
        t: i64,
        check: bool,
        run: Option<i64>,
    ) -> i32 {
        let (last_record, live) = ring.life();
        let removed = match run {
            Some(run) => sensor_expired(last_record, run, self.expiry_ms),
            None => false,
        };
        if !live || removed {
            ring.revive();
        }
        ring.set_last_record(t);
        let measured = ring.record(rate_units(self.quota_type, value), t, check);
        if !check {
            return 0;
        }
        measured.throttle(self.quota_type, &self.window, self.release, ring.bound())
    }
}
