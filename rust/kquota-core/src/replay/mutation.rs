//! The controller-mutation quota of one replay scenario: what
//! [`crate::ControllerMutationQuotaManager`] does, for one thread. The buckets are the
//! same [`Bucket`] arithmetic (strict and permissive enforcement from
//! [`crate::kafka::token_bucket`]), the tags and bounds the same [`Overrides`] rules; each pair
//! of the trace is resolved once to a dense bucket id (again when a quota changes).

use std::collections::HashMap;

use super::stats::{EntityStats, EntitySummary, Histogram, SummaryType, Usage, WindowIndex};

use crate::kafka::entity::{Overrides, QuotaEntity};
use crate::kafka::quota::UNLIMITED;
use crate::kafka::release::KafkaRelease;
use crate::kafka::samples::WindowConfig;
use crate::kafka::token_bucket::{Bucket, MutationCheck};
use crate::managers::mutation::ControllerMutationQuotaManager;

/// One bucket sensor (one tag pair).
#[derive(Debug, Clone)]
struct MutationSensor {
    /// `None` until the first mutation creates it (and again after expiry removed it).
    bucket: Option<Bucket>,
    /// When it last recorded (or was created), for expiry.
    last_record: i64,
    bound: f64,
    /// The entity summary (partitions), its positive throttles and the ring of its peak.
    stats: EntityStats,
    positive: Histogram,
    spans: Vec<i64>,
}

/// The buckets of one scenario.
#[derive(Debug, Clone)]
pub(crate) struct MutationTable {
    window: WindowConfig,
    sensor_expiry_ms: i64,
    overrides: Overrides,
    sensors: Vec<MutationSensor>,
    by_tags: HashMap<(String, String), u32>,
    /// The sensor of each pair.
    of_pair: Vec<u32>,
    /// The whole window of the last mutation counted, for the peaks.
    clock: WindowIndex,
}

impl MutationTable {
    /// A table with Kafka's defaults and no quota (every mutation free).
    pub(crate) fn new() -> Self {
        let m = ControllerMutationQuotaManager::with_defaults();
        Self::of(&m)
    }

    /// A table with `manager`'s window, sensor expiry and quotas as they are now.
    pub(crate) fn of(manager: &ControllerMutationQuotaManager) -> Self {
        MutationTable {
            window: manager.window(),
            sensor_expiry_ms: manager.sensor_expiry_ms(),
            overrides: manager.overrides(),
            sensors: Vec::new(),
            by_tags: HashMap::new(),
            of_pair: Vec::new(),
            clock: WindowIndex::new(&manager.window()),
        }
    }

    /// The Kafka release whose rules the table follows.
    pub(crate) fn release(&self) -> KafkaRelease {
        self.overrides.release
    }

    /// Whether a quota level is enabled (before 4.2 once any quota was set or removed, from
    /// 4.2 while a quota exists): until then every mutation is free.
    pub(crate) fn enabled(&self) -> bool {
        self.overrides.enabled != 0
    }

    /// Resolves the pairs from `first` on (sanitized users).
    pub(crate) fn resolve(&mut self, pairs: &[(String, String)], first: usize) {
        self.of_pair.truncate(first);
        for (user, client) in &pairs[first..] {
            let tags = self.overrides.tags(user, client);
            let id = match self.by_tags.get(&tags) {
                Some(&id) => id,
                None => {
                    let id = self.sensors.len() as u32;
                    let bound = self
                        .overrides
                        .quota_limit(&tags.0, &tags.1)
                        .unwrap_or(UNLIMITED);
                    self.sensors.push(MutationSensor {
                        bucket: None,
                        last_record: 0,
                        bound,
                        stats: EntityStats::default(),
                        positive: Histogram::default(),
                        spans: vec![0; EntityStats::span(&self.window)],
                    });
                    self.by_tags.insert(tags, id);
                    id
                }
            };
            self.of_pair.push(id);
        }
    }

    /// Sets or removes the override of `entity`: bounds refresh at once, buckets keep
    /// their tokens, and a pair whose tags change moves to another bucket.
    pub(crate) fn apply(
        &mut self,
        entity: &QuotaEntity,
        value: Option<f64>,
        pairs: &[(String, String)],
    ) {
        self.overrides.apply(entity, value);
        for ((u, c), &id) in &self.by_tags {
            self.sensors[id as usize].bound = self.overrides.quota_limit(u, c).unwrap_or(UNLIMITED);
        }
        self.resolve(pairs, 0);
    }

    /// The tags of `pair`'s bucket.
    pub(crate) fn tags_of(&self, pair: u32) -> (String, String) {
        let id = self.of_pair[pair as usize];
        self.by_tags
            .iter()
            .find(|(_, &v)| v == id)
            .map(|(k, _)| k.clone())
            .expect("every sensor id has tags")
    }

    /// The quota that applies to `pair` (`None`: none).
    pub(crate) fn quota_of(&self, pair: u32) -> Option<f64> {
        let (u, c) = self.tags_of(pair);
        self.overrides.quota_limit(&u, &c)
    }

    /// A mutation of `permits` partitions by `pair` at `now`, strict or permissive, as
    /// the manager's `record_strict` / `record_permissive`; `run` is the latest run of
    /// the expiry task at or before `now` (a bucket idle for longer than the expiry at
    /// that run was removed and starts again new).
    pub(crate) fn record(
        &mut self,
        pair: u32,
        permits: f64,
        strict: bool,
        now: i64,
        run: Option<i64>,
    ) -> MutationCheck {
        if !self.enabled() {
            return MutationCheck::FREE;
        }
        let expiry = self.sensor_expiry_ms;
        let cfg = self.window;
        let s = &mut self.sensors[self.of_pair[pair as usize] as usize];
        if s.bucket.is_some()
            && run.is_some_and(|r| r >= s.last_record && r.wrapping_sub(s.last_record) > expiry)
        {
            s.bucket = None;
        }
        if s.bucket.is_none() {
            // created now, as Kafka's getOrCreateQuotaSensors does
            s.bucket = Some(Bucket::NEW);
            s.last_record = now;
        }
        let bucket = s.bucket.as_mut().expect("just created");
        let check = if strict {
            bucket.record_strict(&cfg, s.bound, permits, now)
        } else {
            bucket.record_permissive(&cfg, s.bound, permits, now)
        };
        if check.accepted {
            s.last_record = now;
        }
        check
    }

    /// Adds one mutation to the summary of `pair`'s sensor (only while quotas are enabled,
    /// as only then is there a sensor).
    pub(crate) fn count(&mut self, pair: u32, usage: &Usage) {
        if !self.enabled() {
            return;
        }
        let window = self.clock.of(usage.time_ms);
        let s = &mut self.sensors[self.of_pair[pair as usize] as usize];
        s.stats.add(usage, window, &mut s.spans, &mut s.positive);
    }

    /// The summaries of the sensors that recorded something, by tags.
    pub(crate) fn summaries(&self, scenario: usize) -> Vec<EntitySummary> {
        let mut out: Vec<EntitySummary> = self
            .by_tags
            .iter()
            .filter_map(|(tags, &id)| {
                let s = &self.sensors[id as usize];
                (s.stats.requests() > 0).then(|| {
                    s.stats.summary(
                        &s.positive,
                        scenario,
                        SummaryType::ControllerMutation,
                        tags,
                        self.overrides.quota_limit(&tags.0, &tags.1),
                        &self.window,
                    )
                })
            })
            .collect();
        out.sort_by(|a, b| (&a.user, &a.client_id).cmp(&(&b.user, &b.client_id)));
        out
    }

    /// The tokens of `pair`'s bucket at `now` (refills, as a metrics read does); `None`
    /// when it does not exist.
    pub(crate) fn tokens(&mut self, pair: u32, now: i64, run: Option<i64>) -> Option<f64> {
        let expiry = self.sensor_expiry_ms;
        let cfg = self.window;
        let s = &mut self.sensors[self.of_pair[pair as usize] as usize];
        if run.is_some_and(|r| r >= s.last_record && r.wrapping_sub(s.last_record) > expiry) {
            s.bucket = None;
        }
        let bound = s.bound;
        s.bucket.as_mut().map(|b| b.measure(&cfg, bound, now))
    }
}
