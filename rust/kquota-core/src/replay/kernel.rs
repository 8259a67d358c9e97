//! [`ReplayKernel`]: the scenarios side by side, fed batch after batch.

use super::clock::Clock;
use super::columns::{
    kind_of, ClientLimits, Events, Output, QuotaPass, ReplayOptions, BY_NONE, EXPIRY_TASK_MS,
    KIND_FETCH, KIND_MUTATION, KIND_OTHER, KIND_PRODUCE, SERVED, UNSERVED_BUFFER_FULL,
};
use super::mutation::MutationTable;
use super::scenario::{table_index, ClosedLoop, Decisions, Event, Scenario, Scratch};
use super::sensor::SensorTable;
use super::stats::EntitySummary;
use crate::error::{check_quota, check_usage, Error, Result};
use crate::kafka::entity::{sanitize_user, QuotaEntity};
use crate::kafka::quota_type::QuotaType;
use crate::managers::mutation::ControllerMutationQuotaManager;
use crate::managers::request_path::RequestPath;

/// A sequential replay of one broker's requests under several quota configurations.
/// See the module documentation.
#[derive(Debug, Clone)]
pub struct ReplayKernel {
    /// (sanitized user, client id) of each pair id.
    pairs: Vec<(String, String)>,
    scenarios: Vec<Scenario>,
    closed_loop: bool,
    /// Which quotas the open loop replays.
    pass: QuotaPass,
    /// The position of the next event fed.
    next_seq: u64,
    /// Nothing fed or applied may come before this time.
    horizon: Option<i64>,
    /// Closed loop: rows replayed by a quota change or an expiry run, handed out with the
    /// next batch's.
    held: Output,
    /// The open loop's working space.
    scratch: Scratch,
}

impl ReplayKernel {
    /// A kernel over the distinct `(user, client_id)` pairs of the trace (principal names
    /// as the client authenticates; pair id = position) and one scenario per
    /// [`RequestPath`]: its managers' configurations (window, sensor expiry, quota
    /// overrides and enabled levels) as they are now. Their sensors are not read or
    /// changed.
    pub fn new<U: AsRef<str>, C: AsRef<str>>(
        pairs: &[(U, C)],
        scenarios: &[RequestPath<'_>],
        options: ReplayOptions,
    ) -> Result<Self> {
        if let Some(period) = options.expiry_task_ms.filter(|&p| p <= 0) {
            return Err(Error::InvalidConfig(format!(
                "invalid expiry_task_ms {period}: it must be > 0 (Kafka runs the task every \
                 {EXPIRY_TASK_MS} ms), or None to never expire sensors"
            )));
        }
        let clients = options.clients.map(ClientLimits::checked).transpose()?;
        if clients.is_some() && !options.closed_loop {
            return Err(Error::InvalidConfig(
                "client limits bound closed-loop clients: they need closed_loop=true (an \
                 open-loop replay sends every request at its time)"
                    .to_owned(),
            ));
        }
        if options.pass != QuotaPass::All && options.closed_loop {
            return Err(Error::InvalidConfig(format!(
                "invalid pass {:?}: a closed-loop replay replays every quota in one pass \
                 (a client's waits depend on all of them)",
                options.pass
            )));
        }
        let mut kernel = ReplayKernel {
            pairs: Vec::new(),
            scenarios: scenarios
                .iter()
                .map(|path| Scenario {
                    tables: QuotaType::ALL.map(|t| {
                        let m = path.manager(t);
                        SensorTable::new(t, m.window(), m.sensor_expiry_ms(), m.overrides())
                            .with_callback(m.callback())
                    }),
                    clock: Clock {
                        task_ms: options.expiry_task_ms,
                        explicit: None,
                        tick: None,
                        next_tick: i64::MIN,
                    },
                    closed: options.closed_loop.then(|| ClosedLoop::new(clients)),
                    mutations: MutationTable::new(),
                })
                .collect(),
            closed_loop: options.closed_loop,
            pass: options.pass,
            next_seq: 0,
            horizon: None,
            held: Output::default(),
            scratch: Scratch::default(),
        };
        kernel.add_pairs(pairs)?;
        Ok(kernel)
    }

    /// Appends pairs to the pair table; returns the id of the first one added.
    pub fn add_pairs<U: AsRef<str>, C: AsRef<str>>(&mut self, pairs: &[(U, C)]) -> Result<u32> {
        let first = self.pairs.len();
        if first + pairs.len() > i32::MAX as usize {
            return Err(Error::InvalidUsage(format!(
                "too many pairs: {} + {}, at most {}",
                first,
                pairs.len(),
                i32::MAX
            )));
        }
        self.pairs.extend(pairs.iter().map(|(u, c)| {
            (
                sanitize_user(u.as_ref()).into_owned(),
                c.as_ref().to_owned(),
            )
        }));
        for i in 0..self.scenarios.len() {
            for t in 0..self.scenarios[i].tables.len() {
                if let Err(e) = self.scenarios[i].tables[t].resolve(&self.pairs, first) {
                    // A quota callback failed: forget the new pairs everywhere.
                    self.pairs.truncate(first);
                    for s in &mut self.scenarios {
                        s.tables.iter_mut().for_each(|t| t.truncate_pairs(first));
                    }
                    return Err(e);
                }
            }
        }
        for s in &mut self.scenarios {
            s.mutations.resolve(&self.pairs, first);
            if let Some(closed) = &mut s.closed {
                closed.resize(self.pairs.len());
            }
        }
        Ok(first as u32)
    }

    /// Number of pairs in the pair table.
    pub fn pair_count(&self) -> usize {
        self.pairs.len()
    }

    /// Number of scenarios.
    pub fn scenario_count(&self) -> usize {
        self.scenarios.len()
    }

    /// Whether the kernel replays in closed loop.
    pub fn closed_loop(&self) -> bool {
        self.closed_loop
    }

    /// Closed loop: events fed and not replayed yet (per scenario, summed).
    pub fn pending(&self) -> usize {
        self.scenarios
            .iter()
            .filter_map(|s| s.closed.as_ref())
            .flat_map(|c| c.clients.iter().map(|q| q.queue.len()))
            .sum()
    }

    /// Checks every column of `events`; returns their number. Nothing is changed.
    fn check(&self, events: &Events<'_>) -> Result<usize> {
        let n = events.checked_len()?;
        self.check_pass(events, n)?;
        if self.all_valid(events, n) {
            return Ok(n);
        }
        self.find_invalid(events, n)?;
        Ok(n)
    }

    /// Checks the columns that depend on the kernel's [`QuotaPass`].
    fn check_pass(&self, events: &Events<'_>, n: usize) -> Result<()> {
        let given = events.request_throttle_ms.len();
        if self.pass == QuotaPass::Bytes {
            let expected = n * self.scenarios.len();
            if given != expected {
                return Err(Error::InvalidUsage(format!(
                    "request_throttle_ms has {given} values: the byte pass takes each \
                     scenario's request throttles of the batch, {} x {n} = {expected}",
                    self.scenarios.len()
                )));
            }
        } else if given != 0 {
            return Err(Error::InvalidUsage(format!(
                "request_throttle_ms has {given} values: only a byte pass (pass Bytes) takes \
                 the request quota's throttles; this kernel replays them"
            )));
        }
        if self.pass != QuotaPass::All && !events.partitions.is_empty() {
            return Err(Error::InvalidUsage(
                "a replay split into quota passes has no controller mutations: replay a \
                 traffic with mutations whole (QuotaPass::All)"
                    .to_owned(),
            ));
        }
        Ok(())
    }

    /// Whether every event of equal-length columns is valid: the same rules as
    /// [`Self::find_invalid`], in branch-free passes over each column.
    fn all_valid(&self, events: &Events<'_>, n: usize) -> bool {
        let times = &events.time_ms[..n];
        let ordered = self
            .horizon
            .is_none_or(|h| times.first().is_none_or(|&t| t >= h))
            && times.windows(2).fold(true, |ok, w| ok & (w[0] <= w[1]));
        let pairs = self.pairs.len() as u64;
        let pairs_ok = events.pair[..n]
            .iter()
            .fold(true, |ok, &p| ok & ((p as u32 as u64) < pairs) & (p >= 0));
        let kinds_ok = events.kind[..n].iter().fold(true, |ok, &k| {
            ok & (KIND_PRODUCE..=KIND_MUTATION).contains(&k)
        });
        let mutations_ok = if events.partitions.is_empty() {
            events.kind[..n].iter().all(|&k| k != KIND_MUTATION)
        } else {
            events.kind[..n]
                .iter()
                .zip(&events.partitions[..n])
                .fold(true, |ok, (&k, &p)| ok & ((k != KIND_MUTATION) | (p >= 0)))
        };
        let topics_ok = events.topic_offsets.is_empty()
            || (0..n).all(|i| {
                events.kind[i] != KIND_MUTATION || Self::topics_invalid(events, i).is_none()
            });
        // usage is finite and >= 0 (two comparisons, which NaN fails); other requests'
        // bytes are not read, so only where some bytes are not usage are the kinds asked
        let usage_ok = |v: f64| (0.0..f64::INFINITY).contains(&v);
        let bytes_ok = events.bytes[..n]
            .iter()
            .fold(true, |ok, &b| ok & usage_ok(b))
            || events.kind[..n]
                .iter()
                .zip(&events.bytes[..n])
                .fold(true, |ok, (&k, &b)| ok & ((k >= KIND_OTHER) | usage_ok(b)));
        let threads_ok = events.thread_ns[..n]
            .iter()
            .fold(true, |ok, &ns| ok & (ns.is_nan() | usage_ok(ns)));
        ordered && pairs_ok && kinds_ok && mutations_ok && topics_ok && bytes_ok && threads_ok
    }

    /// Why the topics of mutation event `i` of length-checked columns are invalid (a
    /// negative count, or a sum other than its partitions); `None` when they are valid.
    fn topics_invalid(events: &Events<'_>, i: usize) -> Option<String> {
        let range = events.topic_range(i)?;
        let topics = &events.topic_partitions[range];
        if let Some(bad) = topics.iter().find(|&&t| t < 0) {
            return Some(format!(
                "invalid topic partitions {bad} at row {i}: a topic creates or deletes >= 0 \
                 partitions"
            ));
        }
        let sum: i64 = topics.iter().map(|&t| i64::from(t)).sum();
        let partitions = events.partitions.get(i).copied().unwrap_or(0);
        (sum != i64::from(partitions)).then(|| {
            format!(
                "topic partitions at row {i} sum to {sum}, not its partitions {partitions}: \
                 partitions is the request's total over its topics"
            )
        })
    }

    /// Finds the first invalid event and names it.
    fn find_invalid(&self, events: &Events<'_>, n: usize) -> Result<()> {
        let mut previous = self.horizon;
        for i in 0..n {
            let time = events.time_ms[i];
            if let Some(p) = previous.filter(|&p| time < p) {
                let what = if i == 0 {
                    format!("the last time already replayed or applied, {p}")
                } else {
                    format!("time_ms[{}] = {p}", i - 1)
                };
                return Err(Error::InvalidUsage(format!(
                    "time_ms[{i}] = {time} is before {what}: events must come in time order \
                     (sort by time, ties in input order)"
                )));
            }
            previous = Some(time);
            let code = events.kind[i];
            kind_of(code).ok_or_else(|| {
                Error::InvalidUsage(format!(
                    "invalid kind {code} at row {i}: expected {KIND_PRODUCE} (produce), \
                     {KIND_FETCH} (fetch), {KIND_OTHER} (other) or {KIND_MUTATION} \
                     (controller mutation)"
                ))
            })?;
            if code == KIND_MUTATION {
                let Some(&partitions) = events.partitions.get(i) else {
                    return Err(Error::InvalidUsage(format!(
                        "row {i} is a controller mutation (kind {KIND_MUTATION}) but the \
                         batch has no partitions and strict columns"
                    )));
                };
                if partitions < 0 {
                    return Err(Error::InvalidUsage(format!(
                        "invalid partitions {partitions} at row {i}: a mutation creates or \
                         deletes >= 0 partitions"
                    )));
                }
                if let Some(why) = Self::topics_invalid(events, i) {
                    return Err(Error::InvalidUsage(why));
                }
            }
            let pair = events.pair[i];
            if pair < 0 || pair as usize >= self.pairs.len() {
                return Err(Error::InvalidUsage(format!(
                    "invalid pair {pair} at row {i}: it must index the {} pairs (0 to {})",
                    self.pairs.len(),
                    self.pairs.len() as i64 - 1
                )));
            }
            let bytes = events.bytes[i];
            if code == KIND_PRODUCE || code == KIND_FETCH {
                check_usage(bytes)
                    .map_err(|e| Error::InvalidUsage(format!("bytes at row {i}: {e}")))?;
            }
            let ns = events.thread_ns[i];
            if !ns.is_nan() {
                check_usage(ns).map_err(|e| {
                    Error::InvalidUsage(format!(
                        "thread_ns at row {i}: {e}; NaN means the thread time is unknown"
                    ))
                })?;
            }
        }
        Ok(())
    }

    /// Replays a batch of events (see the module documentation for the order they must
    /// come in). Returns the rows replayed by this call: in open loop every event of the
    /// batch for each scenario (scenario by scenario, events in order); in closed loop
    /// those sent by now (and any replayed by an earlier quota change or expiry run).
    /// A refused batch changes nothing.
    pub fn feed(&mut self, events: &Events<'_>) -> Result<Output> {
        let n = self.check(events)?;
        let first = self.next_seq;
        self.next_seq += n as u64;
        let Some(&last) = events.time_ms.last() else {
            return Ok(std::mem::take(&mut self.held));
        };
        self.horizon = Some(last);
        if !self.closed_loop {
            return Ok(self.replay_open(events, n, first));
        }
        let mut out = std::mem::take(&mut self.held);
        for (index, s) in self.scenarios.iter_mut().enumerate() {
            let bounded = s.closed.as_ref().is_some_and(|c| c.limits.is_some());
            for i in 0..n {
                let e = Event::of(events, i, first);
                if bounded {
                    // A bounded client's room depends on what it sent before this event.
                    s.drain(index, e.time, &mut out);
                }
                let closed = s.closed.as_mut().expect("closed loop");
                if let Some(refused) = closed.admit(e) {
                    out.push_unserved(index, &refused, refused.time, UNSERVED_BUFFER_FULL);
                }
            }
            s.drain(index, last, &mut out);
        }
        Ok(out)
    }

    /// Open loop: replays `n` checked events, scenario by scenario. The columns that do not
    /// depend on the decisions are filled in bulk; the decisions are written in place.
    fn replay_open(&mut self, events: &Events<'_>, n: usize, first: u64) -> Output {
        let rows = n * self.scenarios.len();
        let mut out = Output {
            scenario: Vec::with_capacity(rows),
            seq: Vec::with_capacity(rows),
            throttle_ms: vec![0; rows],
            throttled_by: vec![BY_NONE; rows],
            produce_throttle_ms: vec![0; rows],
            fetch_throttle_ms: vec![0; rows],
            request_throttle_ms: vec![0; rows],
            mutation_throttle_ms: vec![0; rows],
            refused_partitions: vec![0; rows],
            sent_ms: Vec::with_capacity(rows),
            added_latency_ms: vec![0; rows],
            unserved: vec![SERVED; rows],
        };
        let mut scratch = std::mem::take(&mut self.scratch);
        for (index, s) in self.scenarios.iter_mut().enumerate() {
            out.scenario.extend(std::iter::repeat_n(index as u32, n));
            out.seq.extend(first..first + n as u64);
            out.sent_ms.extend_from_slice(&events.time_ms[..n]);
            let at = index * n..(index + 1) * n;
            if self.pass == QuotaPass::Bytes {
                // the request pass's throttles, which the byte pass does not replay
                out.request_throttle_ms[at.clone()]
                    .copy_from_slice(&events.request_throttle_ms[at.clone()]);
            }
            let decisions = Decisions {
                applied: &mut out.throttle_ms[at.clone()],
                by: &mut out.throttled_by[at.clone()],
                produce: &mut out.produce_throttle_ms[at.clone()],
                fetch: &mut out.fetch_throttle_ms[at.clone()],
                request: &mut out.request_throttle_ms[at.clone()],
                mutation: &mut out.mutation_throttle_ms[at.clone()],
                refused: &mut out.refused_partitions[at],
            };
            s.replay_batch(events, n, first, &mut scratch, decisions, self.pass);
        }
        self.scratch = scratch;
        out
    }

    /// Closed loop: replays every event still held (the end of the trace); open loop:
    /// nothing is held. Returns the rows.
    pub fn finish(&mut self) -> Output {
        let mut out = std::mem::take(&mut self.held);
        for (index, s) in self.scenarios.iter_mut().enumerate() {
            s.drain(index, i64::MAX, &mut out);
        }
        out
    }

    /// Moves the replay to `now` before an operation at that time: refuses a time before
    /// what was fed, and in closed loop replays the events sent at or before `now`.
    fn advance(&mut self, now: i64) -> Result<()> {
        if let Some(h) = self.horizon.filter(|&h| now < h) {
            return Err(Error::InvalidUsage(format!(
                "invalid now_ms {now}: it is before the last time already replayed or \
                 applied, {h}"
            )));
        }
        self.horizon = Some(now);
        let mut held = std::mem::take(&mut self.held);
        for (index, s) in self.scenarios.iter_mut().enumerate() {
            s.drain(index, now, &mut held);
        }
        self.held = held;
        Ok(())
    }

    fn scenario_mut(&mut self, scenario: usize) -> Result<&mut Scenario> {
        let n = self.scenarios.len();
        self.scenarios.get_mut(scenario).ok_or_else(|| {
            Error::InvalidUsage(format!(
                "invalid scenario {scenario}: there are {n} scenarios (0 to {})",
                n as i64 - 1
            ))
        })
    }

    fn check_pair(&self, pair: usize) -> Result<u32> {
        if pair >= self.pairs.len() {
            return Err(Error::InvalidUsage(format!(
                "invalid pair {pair}: it must index the {} pairs",
                self.pairs.len()
            )));
        }
        Ok(pair as u32)
    }

    /// Sets the override of `entity` for `quota_type` in `scenario` at `now`, as the
    /// manager's `set_quota` (a finite value > 0).
    pub fn set_quota(
        &mut self,
        scenario: usize,
        quota_type: QuotaType,
        entity: &QuotaEntity,
        value: f64,
        now: i64,
    ) -> Result<()> {
        let value = check_quota(value)?;
        self.change_quota(scenario, Some(quota_type), entity, Some(value), now)
    }

    /// Removes the override of `entity` for `quota_type` in `scenario` at `now`.
    pub fn remove_quota(
        &mut self,
        scenario: usize,
        quota_type: QuotaType,
        entity: &QuotaEntity,
        now: i64,
    ) -> Result<()> {
        self.change_quota(scenario, Some(quota_type), entity, None, now)
    }

    /// Sets (`Some`) or removes (`None`) the override of `entity` in `scenario` at `now`:
    /// for `quota_type`, or the controller-mutation quota when that is `None`.
    fn change_quota(
        &mut self,
        scenario: usize,
        quota_type: Option<QuotaType>,
        entity: &QuotaEntity,
        value: Option<f64>,
        now: i64,
    ) -> Result<()> {
        self.scenario_mut(scenario)?;
        self.advance(now)?;
        let pairs = &self.pairs;
        let s = &mut self.scenarios[scenario];
        match quota_type {
            Some(quota_type) => s.tables[table_index(quota_type)].apply(entity, value, pairs),
            None => {
                s.mutations.apply(entity, value, pairs);
                Ok(())
            }
        }
    }

    /// Takes the controller-mutation quota of `scenario` from `manager`: its window,
    /// sensor expiry and quotas as they are now (its buckets are not read). Call it
    /// before feeding events: the scenario's buckets start again new.
    pub fn set_mutation_manager(
        &mut self,
        scenario: usize,
        manager: &ControllerMutationQuotaManager,
    ) -> Result<()> {
        self.scenario_mut(scenario)?;
        let mut table = MutationTable::of(manager);
        table.resolve(&self.pairs, 0);
        self.scenarios[scenario].mutations = table;
        Ok(())
    }

    /// Sets the `controller_mutation_rate` of `entity` in `scenario` at `now`, as the
    /// manager's `set_quota` (a finite value > 0; buckets keep their tokens).
    pub fn set_mutation_quota(
        &mut self,
        scenario: usize,
        entity: &QuotaEntity,
        value: f64,
        now: i64,
    ) -> Result<()> {
        let value = check_quota(value)?;
        self.change_quota(scenario, None, entity, Some(value), now)
    }

    /// Removes the `controller_mutation_rate` override of `entity` in `scenario` at `now`.
    pub fn remove_mutation_quota(
        &mut self,
        scenario: usize,
        entity: &QuotaEntity,
        now: i64,
    ) -> Result<()> {
        self.change_quota(scenario, None, entity, None, now)
    }

    /// The tokens of `pair`'s controller-mutation bucket in `scenario` at `now` (refills,
    /// as a metrics read does); `None` when that bucket does not exist.
    pub fn mutation_tokens(
        &mut self,
        scenario: usize,
        pair: usize,
        now: i64,
    ) -> Result<Option<f64>> {
        let pair = self.check_pair(pair)?;
        let (s, run) = self.scenario_at(scenario, now)?;
        Ok(s.mutations.tokens(pair, now, run))
    }

    /// The controller-mutation metric tags `(user, client-id)` of `pair` in `scenario`
    /// and the quota that applies to it (`None`: none).
    pub fn mutation_quota_for(
        &self,
        scenario: usize,
        pair: usize,
    ) -> Result<((String, String), Option<f64>)> {
        let pair = self.check_pair(pair)?;
        let s = self.scenario(scenario)?;
        Ok((s.mutations.tags_of(pair), s.mutations.quota_of(pair)))
    }

    /// Runs the broker's sensor-expiry task at `now` in every scenario.
    pub fn expire_sensors(&mut self, now: i64) -> Result<()> {
        self.advance(now)?;
        for s in &mut self.scenarios {
            s.clock.explicit = Some(now);
        }
        Ok(())
    }

    /// Records network-thread time of `pair` on the request quota at `now` without a
    /// check (Kafka's `recordNoThrottle` after a response is sent), in every scenario;
    /// nothing where no request quota was ever configured.
    pub fn record_no_throttle(&mut self, pair: usize, thread_ns: f64, now: i64) -> Result<()> {
        let pair = self.check_pair(pair)?;
        let ns = check_usage(thread_ns)?;
        self.advance(now)?;
        for s in &mut self.scenarios {
            let run = s.clock.run_at(now);
            s.tables[table_index(QuotaType::Request)].record(pair, ns, now, false, run);
        }
        Ok(())
    }

    /// The rate of `pair`'s `quota_type` sensor in `scenario` at `now` (purges, as a
    /// metrics read does); `None` when that sensor does not exist.
    pub fn measure(
        &mut self,
        scenario: usize,
        quota_type: QuotaType,
        pair: usize,
        now: i64,
    ) -> Result<Option<f64>> {
        let pair = self.check_pair(pair)?;
        let (s, run) = self.scenario_at(scenario, now)?;
        Ok(s.tables[table_index(quota_type)].measure(pair, now, run))
    }

    /// The metric tags `(user, client-id)` of `pair` for `quota_type` in `scenario`.
    pub fn tags(
        &self,
        scenario: usize,
        quota_type: QuotaType,
        pair: usize,
    ) -> Result<(String, String)> {
        let (table, pair) = self.table(scenario, quota_type, pair)?;
        Ok(table.tags_of(pair).clone())
    }

    /// The quota that applies to `pair` for `quota_type` in `scenario` (`None`: none).
    pub fn quota_for(
        &self,
        scenario: usize,
        quota_type: QuotaType,
        pair: usize,
    ) -> Result<Option<f64>> {
        let (table, pair) = self.table(scenario, quota_type, pair)?;
        Ok(table.quota_of(pair))
    }

    /// The fetch-size cap of `pair` from its `quota_type` quota in `scenario`: the
    /// manager's `max_value_in_quota_window` (`f64::MAX` with no quota; Kafka caps a fetch
    /// with its fetch quota's).
    pub fn max_value_in_quota_window(
        &self,
        scenario: usize,
        quota_type: QuotaType,
        pair: usize,
    ) -> Result<f64> {
        let (table, pair) = self.table(scenario, quota_type, pair)?;
        Ok(table.max_value_in_quota_window(pair))
    }

    /// `scenario` after the kernel's clock has moved to `now`, and its expiry run then.
    fn scenario_at(&mut self, scenario: usize, now: i64) -> Result<(&mut Scenario, Option<i64>)> {
        self.scenario_mut(scenario)?;
        self.advance(now)?;
        let s = &mut self.scenarios[scenario];
        let run = s.clock.run_at(now);
        Ok((s, run))
    }

    /// The `quota_type` table of `scenario`, with `pair` checked.
    fn table(
        &self,
        scenario: usize,
        quota_type: QuotaType,
        pair: usize,
    ) -> Result<(&SensorTable, u32)> {
        let pair = self.check_pair(pair)?;
        let s = self.scenario(scenario)?;
        Ok((&s.tables[table_index(quota_type)], pair))
    }

    fn scenario(&self, scenario: usize) -> Result<&Scenario> {
        let n = self.scenarios.len();
        self.scenarios.get(scenario).ok_or_else(|| {
            Error::InvalidUsage(format!(
                "invalid scenario {scenario}: there are {n} scenarios (0 to {})",
                n as i64 - 1
            ))
        })
    }

    /// The summaries of every entity that recorded something so far, by scenario, quota
    /// type (produce, fetch, request, controller mutation) and tags.
    pub fn summaries(&self) -> Vec<EntitySummary> {
        let mut all: Vec<EntitySummary> = self
            .scenarios
            .iter()
            .enumerate()
            .flat_map(|(i, s)| {
                s.tables
                    .iter()
                    .flat_map(move |t| t.summaries(i))
                    .chain(s.mutations.summaries(i))
            })
            .collect();
        all.sort_by(|a, b| {
            (a.scenario, a.quota_type, &a.user, &a.client_id).cmp(&(
                b.scenario,
                b.quota_type,
                &b.user,
                &b.client_id,
            ))
        });
        all
    }
}
