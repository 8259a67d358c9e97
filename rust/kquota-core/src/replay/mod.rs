//! [`ReplayKernel`]: a sequential replay of one broker's requests through Kafka's quota
//! rules, for back-testing: several scenarios (quota configurations) side by side, in
//! one pass over columns of events, fed batch after batch.
//!
//! It does what [`crate::RequestPath`] over three [`crate::QuotaManager`]s does for each
//! request, with the same rules ([`crate::request_path`]'s functions, the manager's
//! precedence, units, int conversion and expiry rule, [`crate::samples`]' arithmetic),
//! but for one thread: each distinct `(user, client-id)` pair of the trace is resolved
//! once to a dense sensor id per quota type (again only when a quota changes), and the
//! sensors live in plain vectors. No atomics, no hash lookup per event.
//!
//! **Events** are columns ([`Events`]): time in ms, a pair id into the pair table given
//! at construction (or added with [`ReplayKernel::add_pairs`]), the API kind
//! ([`KIND_PRODUCE`], [`KIND_FETCH`], [`KIND_OTHER`], [`KIND_MUTATION`]), bytes,
//! handler-thread time in ns (NaN = unknown: the request quota is then not consulted, as
//! `RequestPath` with `thread_time_ns=None`), the produce `acks` and, for controller
//! mutations, the partitions and whether the request version is strict (optional
//! columns: a batch without mutations leaves them empty). They must come in time order (ties in
//! input order), within a batch and across batches: the caller sorts; an event earlier
//! than the one before it is refused, naming both. Every column is checked before
//! anything is replayed, so a refused batch changes nothing.
//!
//! **Open loop** replays each event at its time. A request's throttles depend only on its
//! own sensors there, so a batch is replayed quota type by quota type (the request quota
//! first: a fetch's bytes are taken back when it throttles) and, within one, sensor by
//! sensor, each sensor's records in time order (module `groups`: the records sorted by sensor,
//! so a sensor's samples and summary are read once per batch, in memory order; the
//! decisions are those of the request-by-request order, which a property test compares
//! with [`crate::RequestPath`]). **Closed loop** lets clients honour
//! KIP-219: a client (one pair) throttled for `T` ms at `t` sends nothing before `t + T`,
//! and its later requests shift later by what it waited (the shift never shrinks):
//! `sent = max(recorded + shift, mute end)`; events are replayed in order of `sent`, ties
//! in input order. This is the back-test's `replay_closed`, streamed: an event is replayed
//! once no event fed later can come before it (it is sent at or before the last time fed),
//! so only the events not sent yet are held, per client in time order; [`ReplayKernel::finish`]
//! replays the rest. Outputs come out as events are replayed, with their input position.
//!
//! **Sensor expiry** is Kafka's: the broker's expiry task runs every
//! [`ReplayOptions::expiry_task_ms`] (Kafka: 30 s; here at the multiples of it, before
//! the events of that millisecond) and removes sensors idle for longer than the manager's
//! `sensor_expiry_ms`; the next request re-creates its sensor empty. An explicit
//! [`ReplayKernel::expire_sensors`] runs it at a given time. Between runs an idle sensor
//! keeps working, as in Kafka. `expiry_task_ms = None` never runs it (the back-test's
//! Python kernel does not).
//!
//! **Quota changes** ([`ReplayKernel::set_quota`], [`ReplayKernel::remove_quota`]) apply
//! at a time, between batches, as a manager's `set_quota` does: bounds refresh, samples
//! stay, and a pair whose tags change moves to another sensor.
//!
//! **Summaries** ([`ReplayKernel::summaries`]) are accumulated in the same pass, per
//! scenario, quota type and sensor tags (see [`stats`]).

mod groups;
mod mutation;
pub mod recommend;
mod ring;
mod sensor;
mod stats;

use std::cmp::Reverse;
use std::collections::{BinaryHeap, VecDeque};
use std::sync::Arc;

use crate::entity::{sanitize_user, QuotaEntity};
use crate::error::{check_quota, check_usage, Error, Result};
use crate::manager::QuotaType;
use crate::mutation::ControllerMutationQuotaManager;
use crate::request_path::{
    applied_throttle, checks_request_quota, fetch_unrecorded, ApiKind, RequestPath,
};
use crate::token_bucket::remaining_throttle;
use groups::{Groups, Record};
use mutation::MutationTable;
use sensor::SensorTable;
pub use stats::{EntitySummary, SummaryType};
use stats::{Usage, WindowIndex};

/// The most events one batch may hold (the open loop numbers a batch's events in 32 bits).
pub const MAX_BATCH: usize = u32::MAX as usize;

/// How often Kafka's broker runs its sensor-expiry task, ms.
pub const EXPIRY_TASK_MS: i64 = 30_000;

/// Event kind code of a produce request.
pub const KIND_PRODUCE: i8 = 0;
/// Event kind code of a consumer fetch.
pub const KIND_FETCH: i8 = 1;
/// Event kind code of any other throttle-able request.
pub const KIND_OTHER: i8 = 2;
/// Event kind code of a controller mutation (CreateTopics, CreatePartitions,
/// DeleteTopics): [`Events::partitions`] partitions, strict or permissive as
/// [`Events::strict`] says, on the controller-mutation quota, and its thread time on the
/// request quota as any other request.
pub const KIND_MUTATION: i8 = 3;

/// `throttled_by` code: not throttled.
pub const BY_NONE: i8 = -1;
/// `throttled_by` code of the controller-mutation quota.
pub const BY_MUTATION: i8 = 3;

/// The `throttled_by` code of a quota type: its index in [`QuotaType::ALL`].
pub fn quota_code(quota_type: QuotaType) -> i8 {
    match quota_type {
        QuotaType::Produce => 0,
        QuotaType::Fetch => 1,
        QuotaType::Request => 2,
    }
}

fn kind_of(code: i8) -> Option<ApiKind> {
    match code {
        KIND_PRODUCE => Some(ApiKind::Produce),
        KIND_FETCH => Some(ApiKind::Fetch),
        KIND_OTHER | KIND_MUTATION => Some(ApiKind::Other),
        _ => None,
    }
}

/// A batch of events, as columns of equal length, in time order.
#[derive(Debug, Clone, Copy)]
pub struct Events<'a> {
    /// When the request was handled (open loop) or recorded (closed loop), ms.
    pub time_ms: &'a [i64],
    /// Index into the kernel's pair table.
    pub pair: &'a [i32],
    /// [`KIND_PRODUCE`], [`KIND_FETCH`], [`KIND_OTHER`] or [`KIND_MUTATION`].
    pub kind: &'a [i8],
    /// Produce request size or fetch response size (finite, >= 0; ignored for other).
    pub bytes: &'a [f64],
    /// Handler-thread time in ns (finite, >= 0), or NaN when unknown.
    pub thread_ns: &'a [f64],
    /// The produce request's `acks` (`0` skips the request quota; ignored otherwise).
    pub acks: &'a [i16],
    /// Partitions created or deleted by a [`KIND_MUTATION`] event (>= 0; ignored
    /// otherwise). Empty when the batch has no mutation.
    pub partitions: &'a [i32],
    /// Whether a [`KIND_MUTATION`] event's request version is enforced strictly
    /// ([`crate::MutationApi::is_strict`]); ignored otherwise. Empty with `partitions`.
    pub strict: &'a [bool],
    /// Per-topic partitions of the mutations, in request order: event `i`'s topics are
    /// `topic_partitions[topic_offsets[i]..topic_offsets[i + 1]]`. A mutation with topics
    /// is recorded topic by topic, as Kafka's controller does (a strict request's topics
    /// are refused once the bucket is overdrawn); their sum must equal `partitions[i]`.
    /// A mutation with no topic (or a batch without these columns) is one topic of
    /// `partitions[i]`. Ignored for other events. Empty, or `n + 1` offsets.
    pub topic_offsets: &'a [i32],
    /// The per-topic partitions `topic_offsets` indexes (each >= 0).
    pub topic_partitions: &'a [i32],
}

impl Events<'_> {
    /// The number of events; an error naming the lengths if the columns differ.
    pub fn checked_len(&self) -> Result<usize> {
        let n = self.time_ms.len();
        let lens = [
            self.pair.len(),
            self.kind.len(),
            self.bytes.len(),
            self.thread_ns.len(),
            self.acks.len(),
        ];
        if lens.iter().any(|&l| l != n) {
            return Err(Error::InvalidUsage(format!(
                "event columns differ in length: time_ms {n}, pair {}, kind {}, bytes {}, \
                 thread_ns {}, acks {}",
                lens[0], lens[1], lens[2], lens[3], lens[4]
            )));
        }
        if n > MAX_BATCH {
            return Err(Error::InvalidUsage(format!(
                "a batch of {n} events: a batch holds at most {MAX_BATCH}; feed them in \
                 smaller batches"
            )));
        }
        let (p, s) = (self.partitions.len(), self.strict.len());
        if p != s || (p != 0 && p != n) {
            return Err(Error::InvalidUsage(format!(
                "mutation columns: partitions has {p} rows and strict {s}; both must have \
                 the {n} rows of time_ms, or be empty when no event is a mutation"
            )));
        }
        let (o, t) = (self.topic_offsets.len(), self.topic_partitions.len());
        if o != 0 && (o != n + 1 || p == 0) {
            return Err(Error::InvalidUsage(format!(
                "topic columns: topic_offsets has {o} rows; it must have the {n} rows of \
                 time_ms plus one (with the partitions and strict columns), or be empty"
            )));
        }
        if o == 0 && t != 0 {
            return Err(Error::InvalidUsage(format!(
                "topic columns: topic_partitions has {t} values but topic_offsets is empty"
            )));
        }
        if let (Some(&first), Some(&last)) = (self.topic_offsets.first(), self.topic_offsets.last())
        {
            let ordered = self.topic_offsets.windows(2).all(|w| w[0] <= w[1]);
            if first < 0 || !ordered || last as usize != t {
                return Err(Error::InvalidUsage(format!(
                    "topic columns: topic_offsets must rise from >= 0 to the {t} values of \
                     topic_partitions (first {first}, last {last})"
                )));
            }
        }
        Ok(n)
    }
}

/// What the replay decided for each event, per scenario: one row per (scenario, event),
/// in the order they were replayed.
#[derive(Debug, Clone, Default, PartialEq)]
pub struct Output {
    /// The scenario's index.
    pub scenario: Vec<u32>,
    /// The event's position in the input, counted over every batch fed (from 0).
    pub seq: Vec<u64>,
    /// The applied throttle (what the response carries): > 0, or 0.
    pub throttle_ms: Vec<i32>,
    /// The quota whose throttle applied ([`quota_code`]), or [`BY_NONE`].
    pub throttled_by: Vec<i8>,
    /// The produce manager's throttle (Kafka's int; may be negative after a wrap).
    pub produce_throttle_ms: Vec<i32>,
    /// The fetch manager's throttle.
    pub fetch_throttle_ms: Vec<i32>,
    /// The request manager's throttle.
    pub request_throttle_ms: Vec<i32>,
    /// The controller-mutation quota's throttle (0 for events that are not mutations).
    pub mutation_throttle_ms: Vec<i32>,
    /// The partitions a strict mutation was refused (Kafka fails them with
    /// THROTTLING_QUOTA_EXCEEDED); 0 when accepted or not a mutation.
    pub refused_partitions: Vec<i32>,
    /// When the request reached the broker (its time in open loop).
    pub sent_ms: Vec<i64>,
    /// `sent_ms` minus the event's time (0 in open loop).
    pub added_latency_ms: Vec<i64>,
}

impl Output {
    /// Number of rows.
    pub fn len(&self) -> usize {
        self.seq.len()
    }

    /// Whether there is no row.
    pub fn is_empty(&self) -> bool {
        self.seq.is_empty()
    }

    fn push(&mut self, scenario: usize, e: &Event, sent: i64, d: &Decision) {
        self.scenario.push(scenario as u32);
        self.seq.push(e.seq);
        self.throttle_ms.push(d.applied);
        self.throttled_by.push(d.by);
        self.produce_throttle_ms.push(d.produce);
        self.fetch_throttle_ms.push(d.fetch);
        self.request_throttle_ms.push(d.request);
        self.mutation_throttle_ms.push(d.mutation);
        self.refused_partitions.push(d.refused);
        self.sent_ms.push(sent);
        self.added_latency_ms.push(sent - e.time);
    }
}

/// How a [`ReplayKernel`] replays.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct ReplayOptions {
    /// Closed loop (clients honour KIP-219) instead of open loop.
    pub closed_loop: bool,
    /// The period of the broker's sensor-expiry task, ms (> 0); `None`: never expire.
    pub expiry_task_ms: Option<i64>,
}

impl Default for ReplayOptions {
    /// Open loop, Kafka's expiry task every 30 s.
    fn default() -> Self {
        ReplayOptions {
            closed_loop: false,
            expiry_task_ms: Some(EXPIRY_TASK_MS),
        }
    }
}

/// One checked event.
#[derive(Debug, Clone)]
struct Event {
    time: i64,
    seq: u64,
    pair: u32,
    kind: ApiKind,
    acks: i16,
    bytes: f64,
    thread: Option<f64>,
    /// A mutation's partitions and strictness.
    mutation: Option<(i32, bool)>,
    /// A mutation's partitions per topic, in request order, when it has more than one
    /// topic (else one topic of its partitions).
    topics: Option<Arc<[i32]>>,
}

/// The managers' throttles of one event and what applied.
#[derive(Debug, Clone, Copy)]
struct Decision {
    produce: i32,
    fetch: i32,
    request: i32,
    mutation: i32,
    refused: i32,
    applied: i32,
    /// A `throttled_by` code.
    by: i8,
}

/// When the expiry task last ran, as seen from the replay's clock.
#[derive(Debug, Clone)]
struct Clock {
    task_ms: Option<i64>,
    /// The latest explicit run.
    explicit: Option<i64>,
    /// The latest periodic run at or before the clock, and the next one after it.
    tick: Option<i64>,
    next_tick: i64,
}

impl Clock {
    /// The latest expiry run at or before `now` (which never goes backwards).
    #[inline]
    fn run_at(&mut self, now: i64) -> Option<i64> {
        if let Some(period) = self.task_ms {
            if now >= self.next_tick {
                let start = now.div_euclid(period) * period;
                self.tick = Some(start);
                self.next_tick = start.saturating_add(period);
            }
        }
        self.explicit.max(self.tick)
    }
}

/// One client's closed-loop state.
#[derive(Debug, Clone, Default)]
struct Client {
    shift: i64,
    mute_end: Option<i64>,
    /// Fed events not replayed yet, in time order; the first is in the heap when
    /// `scheduled`.
    queue: VecDeque<Event>,
    scheduled: bool,
}

#[derive(Debug, Clone, Default)]
struct ClosedLoop {
    clients: Vec<Client>,
    /// (sent, seq, pair) of each client's next event.
    heap: BinaryHeap<Reverse<(i64, u64, u32)>>,
}

impl ClosedLoop {
    fn schedule(&mut self, pair: u32) {
        let client = &mut self.clients[pair as usize];
        if client.scheduled {
            return;
        }
        let Some(e) = client.queue.front() else {
            return;
        };
        let mut due = e.time + client.shift;
        if let Some(end) = client.mute_end {
            due = due.max(end);
        }
        client.shift = due - e.time;
        client.scheduled = true;
        self.heap.push(Reverse((due, e.seq, pair)));
    }
}

/// One scenario: a broker's quota types under one configuration.
#[derive(Debug, Clone)]
struct Scenario {
    /// Produce, fetch, request.
    tables: [SensorTable; 3],
    /// The controller-mutation quota.
    mutations: MutationTable,
    clock: Clock,
    closed: Option<ClosedLoop>,
}

fn table_index(quota_type: QuotaType) -> usize {
    quota_code(quota_type) as usize
}

/// How many records ahead the open loop prefetches a sensor it moves to.
const PREFETCH: usize = 16;

/// The decisions of one scenario for a batch, column by column (the scenario's part of
/// the [`Output`] columns).
struct Decisions<'a> {
    applied: &'a mut [i32],
    by: &'a mut [i8],
    produce: &'a mut [i32],
    fetch: &'a mut [i32],
    request: &'a mut [i32],
    mutation: &'a mut [i32],
    refused: &'a mut [i32],
}

/// The open loop's working space, reused from batch to batch.
#[derive(Debug, Clone, Default)]
struct Scratch {
    groups: Groups,
}

impl Scenario {
    /// Open loop: replays `n` checked events of a batch, quota type by quota type and,
    /// within one, sensor by sensor ([`Groups`]; sensors are independent in open loop):
    /// the request quota first (a fetch's bytes are taken back when it throttles), then
    /// produce, fetch and the controller mutations. The same decisions and summaries as
    /// [`Scenario::handle`] event by event.
    fn replay_batch(
        &mut self,
        events: &Events<'_>,
        n: usize,
        first: u64,
        scratch: &mut Scratch,
        d: Decisions<'_>,
    ) {
        let groups = &mut scratch.groups;
        let clock = self.clock.clone();
        let [produce, fetch, request] = &mut self.tables;
        if request.enabled() {
            groups.clear(request.sensor_count());
            for i in 0..n {
                let (ns, kind) = (events.thread_ns[i], events.kind[i]);
                let kind = kind_of(kind).unwrap_or(ApiKind::Other);
                if !ns.is_nan() && checks_request_quota(kind, events.acks[i]) {
                    groups.push(Record {
                        sensor: request.sensor_of(events.pair[i] as u32),
                        event: i as u32,
                        time: events.time_ms[i],
                        value: ns,
                        aux: events.bytes[i] as i64,
                    });
                }
            }
            let out = &mut *d.request;
            Self::replay_table(
                request,
                groups,
                &clock,
                |r, throttle| {
                    out[r.event as usize] = throttle;
                    false
                },
                |r| (r.aux, r.value as i64),
            );
        }
        for (table, kind) in [(produce, KIND_PRODUCE), (fetch, KIND_FETCH)] {
            if !table.enabled() {
                continue;
            }
            groups.clear(table.sensor_count());
            for i in 0..n {
                if events.kind[i] == kind {
                    groups.push(Record {
                        sensor: table.sensor_of(events.pair[i] as u32),
                        event: i as u32,
                        time: events.time_ms[i],
                        value: events.bytes[i],
                        aux: i64::from(d.request[i] > 0),
                    });
                }
            }
            let out: &mut [i32] = if kind == KIND_PRODUCE {
                d.produce
            } else {
                d.fetch
            };
            Self::replay_table(
                table,
                groups,
                &clock,
                |r, throttle| {
                    out[r.event as usize] = throttle;
                    // a fetch's bytes are taken back when it or the request quota throttled it
                    kind == KIND_FETCH && fetch_unrecorded(throttle, r.aux as i32)
                },
                |r| (r.value as i64, r.value as i64),
            );
        }
        for i in 0..n {
            let (applied, by) = applied_throttle(d.produce[i], d.fetch[i], d.request[i]);
            d.applied[i] = applied;
            d.by[i] = by.map_or(BY_NONE, quota_code);
        }
        // the controller mutations, in time order, on the scenario's clock
        if events.partitions.is_empty() {
            if let Some(&last) = events.time_ms[..n].last() {
                self.clock.run_at(last);
            }
            return;
        }
        for i in 0..n {
            let run = self.clock.run_at(events.time_ms[i]);
            if events.kind[i] != KIND_MUTATION {
                continue;
            }
            let e = ReplayKernel::event(events, i, first);
            let Some((partitions, strict)) = e.mutation else {
                continue;
            };
            let mut decision = Decision {
                produce: d.produce[i],
                fetch: d.fetch[i],
                request: d.request[i],
                mutation: 0,
                refused: 0,
                applied: d.applied[i],
                by: d.by[i],
            };
            self.mutate(&e, partitions, strict, e.time, run, &mut decision);
            d.mutation[i] = decision.mutation;
            d.refused[i] = decision.refused;
            d.applied[i] = decision.applied;
            d.by[i] = decision.by;
        }
    }

    /// Replays the records of one table sorted by sensor, sensor by sensor, each sensor's
    /// records in time order ([`SensorTable::replay_run`] with `decide` and `usage`),
    /// prefetching the sensors ahead.
    #[inline(always)]
    fn replay_table(
        table: &mut SensorTable,
        groups: &mut Groups,
        clock: &Clock,
        mut decide: impl FnMut(&Record, i32) -> bool,
        usage: impl Fn(&Record) -> (i64, i64) + Copy,
    ) {
        groups.sort();
        let records = groups.records();
        let mut windows = WindowIndex::new(table.window());
        let mut start = 0;
        while start < records.len() {
            let sensor = records[start].sensor;
            let mut end = start + 1;
            while end < records.len() && records[end].sensor == sensor {
                end += 1;
            }
            if let Some(ahead) = records.get(end + PREFETCH) {
                table.prefetch_sensor(ahead.sensor);
            }
            let run = &records[start..end];
            table.replay_run(sensor, run, clock, &mut windows, &mut decide, usage);
            start = end;
        }
    }

    /// Kafka's handling of one request at `now` ([`RequestPath::record`]) and its
    /// entity summaries.
    #[inline]
    fn handle(&mut self, e: &Event, now: i64) -> Decision {
        let run = self.clock.run_at(now);
        let mut d = self.client_quotas(e, now, run);
        if let Some((partitions, strict)) = e.mutation {
            self.mutate(e, partitions, strict, now, run, &mut d);
        }
        d
    }

    /// The client quotas (produce, fetch, request) of one request at `now`, the latest
    /// expiry run being `run`, and their entity summaries: [`RequestPath::record`].
    #[inline(always)]
    fn client_quotas(&mut self, e: &Event, now: i64, run: Option<i64>) -> Decision {
        let [produce, fetch, request] = &mut self.tables;
        let thread = e.thread.filter(|_| checks_request_quota(e.kind, e.acks));
        let (mut p, mut f, mut r) = (0, 0, 0);
        let mut unrecorded = false;
        match e.kind {
            ApiKind::Produce => {
                p = produce.record(e.pair, e.bytes, now, true, run);
                if let Some(ns) = thread {
                    r = request.record(e.pair, ns, now, true, run);
                }
            }
            ApiKind::Fetch => {
                if let Some(ns) = thread {
                    r = request.record(e.pair, ns, now, true, run);
                }
                f = fetch.record(e.pair, e.bytes, now, true, run);
                if fetch_unrecorded(f, r) {
                    fetch.record(e.pair, -e.bytes, now, false, run);
                    unrecorded = true;
                }
            }
            ApiKind::Other => {
                if let Some(ns) = thread {
                    r = request.record(e.pair, ns, now, true, run);
                }
            }
        }
        let (applied, by) = applied_throttle(p, f, r);
        // the summaries
        let bytes = e.bytes as i64;
        let usage = |usage: i64, recorded: bool, throttle_ms: i32| Usage {
            time_ms: now,
            bytes,
            usage,
            recorded,
            throttle_ms,
            added_latency_ms: now - e.time,
        };
        match e.kind {
            ApiKind::Produce if produce.enabled() => {
                produce.count(e.pair, &usage(bytes, true, p));
            }
            ApiKind::Fetch if fetch.enabled() => {
                fetch.count(e.pair, &usage(bytes, !unrecorded, f));
            }
            _ => {}
        }
        if let Some(ns) = thread.filter(|_| request.enabled()) {
            request.count(e.pair, &usage(ns as i64, true, r));
        }
        Decision {
            produce: p,
            fetch: f,
            request: r,
            mutation: 0,
            refused: 0,
            applied,
            by: by.map_or(BY_NONE, quota_code),
        }
    }

    /// A controller mutation of `partitions` (`strict` or not) at `now` on the
    /// controller-mutation quota, and its entity summary; `d` holds the client quotas'
    /// decision and takes the mutation's.
    fn mutate(
        &mut self,
        e: &Event,
        partitions: i32,
        strict: bool,
        now: i64,
        run: Option<i64>,
        d: &mut Decision,
    ) {
        // Kafka's controller records a request topic by topic (its strict or permissive
        // request quota): a strict one refuses each topic while the bucket is overdrawn;
        // the request's throttle is the last violation's. The response then takes the
        // larger of the mutation and request throttles, ties to the request quota
        // (sendResponseMaybeThrottleWithControllerQuota).
        let whole = [partitions];
        let topics: &[i32] = e.topics.as_deref().unwrap_or(&whole);
        let mut last_throttle = 0;
        let mut violated = false;
        let (mut m, mut refused) = (0, 0);
        for &permits in topics {
            let check = self
                .mutations
                .record(e.pair, f64::from(permits), strict, now, run);
            if check.violated {
                violated = true;
                last_throttle = check.throttle_ms;
            }
            if !check.accepted {
                refused += permits;
            }
        }
        if violated {
            m = remaining_throttle(last_throttle, now, now);
        }
        self.mutations.count(
            e.pair,
            &Usage {
                time_ms: now,
                bytes: i64::from(partitions),
                usage: i64::from(partitions - refused),
                recorded: true,
                throttle_ms: m,
                added_latency_ms: now - e.time,
            },
        );
        (d.mutation, d.refused) = (m, refused);
        if m > d.applied {
            (d.applied, d.by) = (m, BY_MUTATION);
        }
    }

    /// Closed loop: replays the held events sent at or before `limit`.
    fn drain(&mut self, index: usize, limit: i64, out: &mut Output) {
        let Some(mut closed) = self.closed.take() else {
            return;
        };
        while let Some(&Reverse((due, _, pair))) = closed.heap.peek() {
            if due > limit {
                break;
            }
            closed.heap.pop();
            let client = &mut closed.clients[pair as usize];
            client.scheduled = false;
            let e = client
                .queue
                .pop_front()
                .expect("a scheduled client holds an event");
            let d = self.handle(&e, due);
            out.push(index, &e, due, &d);
            let client = &mut closed.clients[pair as usize];
            if d.applied > 0 {
                let end = due + i64::from(d.applied);
                if client.mute_end.is_none_or(|m| end > m) {
                    client.mute_end = Some(end);
                }
            }
            closed.schedule(pair);
        }
        self.closed = Some(closed);
    }
}

/// A sequential replay of one broker's requests under several quota configurations.
/// See the module documentation.
#[derive(Debug, Clone)]
pub struct ReplayKernel {
    /// (sanitized user, client id) of each pair id.
    pairs: Vec<(String, String)>,
    scenarios: Vec<Scenario>,
    closed_loop: bool,
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
                 30000 ms), or None to never expire sensors"
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
                    closed: options.closed_loop.then(ClosedLoop::default),
                    mutations: MutationTable::new(),
                })
                .collect(),
            closed_loop: options.closed_loop,
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
                closed
                    .clients
                    .resize_with(self.pairs.len(), Client::default);
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
        if self.all_valid(events, n) {
            return Ok(n);
        }
        self.find_invalid(events, n)?;
        Ok(n)
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
        let range = Self::topic_range(events, i)?;
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

    /// The range of event `i`'s topics in `topic_partitions`; `None` without topics.
    #[inline]
    fn topic_range(events: &Events<'_>, i: usize) -> Option<std::ops::Range<usize>> {
        let o = events.topic_offsets;
        if o.is_empty() {
            return None;
        }
        let (a, b) = (o[i] as usize, o[i + 1] as usize);
        (b > a).then_some(a..b)
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

    /// Event `i` of checked columns, `first_seq` being the position of event 0.
    #[inline]
    fn event(events: &Events<'_>, i: usize, first_seq: u64) -> Event {
        let ns = events.thread_ns[i];
        Event {
            time: events.time_ms[i],
            seq: first_seq + i as u64,
            pair: events.pair[i] as u32,
            kind: kind_of(events.kind[i]).unwrap_or(ApiKind::Other),
            acks: events.acks[i],
            bytes: events.bytes[i],
            thread: (!ns.is_nan()).then_some(ns),
            mutation: (events.kind[i] == KIND_MUTATION)
                .then(|| (events.partitions[i], events.strict[i])),
            topics: if events.kind[i] == KIND_MUTATION {
                Self::topic_range(events, i)
                    .filter(|r| r.len() > 1)
                    .map(|r| Arc::from(&events.topic_partitions[r]))
            } else {
                None
            },
        }
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
            let closed = s.closed.as_mut().expect("closed loop");
            for i in 0..n {
                let e = Self::event(events, i, first);
                let pair = e.pair;
                closed.clients[pair as usize].queue.push_back(e);
                closed.schedule(pair);
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
        };
        let mut scratch = std::mem::take(&mut self.scratch);
        for (index, s) in self.scenarios.iter_mut().enumerate() {
            out.scenario.extend(std::iter::repeat_n(index as u32, n));
            out.seq.extend(first..first + n as u64);
            out.sent_ms.extend_from_slice(&events.time_ms[..n]);
            let at = index * n..(index + 1) * n;
            let decisions = Decisions {
                applied: &mut out.throttle_ms[at.clone()],
                by: &mut out.throttled_by[at.clone()],
                produce: &mut out.produce_throttle_ms[at.clone()],
                fetch: &mut out.fetch_throttle_ms[at.clone()],
                request: &mut out.request_throttle_ms[at.clone()],
                mutation: &mut out.mutation_throttle_ms[at.clone()],
                refused: &mut out.refused_partitions[at],
            };
            s.replay_batch(events, n, first, &mut scratch, decisions);
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
        self.change_quota(scenario, quota_type, entity, Some(value), now)
    }

    /// Removes the override of `entity` for `quota_type` in `scenario` at `now`.
    pub fn remove_quota(
        &mut self,
        scenario: usize,
        quota_type: QuotaType,
        entity: &QuotaEntity,
        now: i64,
    ) -> Result<()> {
        self.change_quota(scenario, quota_type, entity, None, now)
    }

    fn change_quota(
        &mut self,
        scenario: usize,
        quota_type: QuotaType,
        entity: &QuotaEntity,
        value: Option<f64>,
        now: i64,
    ) -> Result<()> {
        self.scenario_mut(scenario)?;
        self.advance(now)?;
        let pairs = &self.pairs;
        self.scenarios[scenario].tables[table_index(quota_type)].apply(entity, value, pairs)
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
        self.change_mutation_quota(scenario, entity, Some(value), now)
    }

    /// Removes the `controller_mutation_rate` override of `entity` in `scenario` at `now`.
    pub fn remove_mutation_quota(
        &mut self,
        scenario: usize,
        entity: &QuotaEntity,
        now: i64,
    ) -> Result<()> {
        self.change_mutation_quota(scenario, entity, None, now)
    }

    fn change_mutation_quota(
        &mut self,
        scenario: usize,
        entity: &QuotaEntity,
        value: Option<f64>,
        now: i64,
    ) -> Result<()> {
        self.scenario_mut(scenario)?;
        self.advance(now)?;
        let pairs = &self.pairs;
        self.scenarios[scenario]
            .mutations
            .apply(entity, value, pairs);
        Ok(())
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
        self.scenario_mut(scenario)?;
        self.advance(now)?;
        let s = &mut self.scenarios[scenario];
        let run = s.clock.run_at(now);
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
        self.scenario_mut(scenario)?;
        self.advance(now)?;
        let s = &mut self.scenarios[scenario];
        let run = s.clock.run_at(now);
        Ok(s.tables[table_index(quota_type)].measure(pair, now, run))
    }

    /// The metric tags `(user, client-id)` of `pair` for `quota_type` in `scenario`.
    pub fn tags(
        &self,
        scenario: usize,
        quota_type: QuotaType,
        pair: usize,
    ) -> Result<(String, String)> {
        let pair = self.check_pair(pair)?;
        let s = self.scenario(scenario)?;
        Ok(s.tables[table_index(quota_type)].tags_of(pair).clone())
    }

    /// The quota that applies to `pair` for `quota_type` in `scenario` (`None`: none).
    pub fn quota_for(
        &self,
        scenario: usize,
        quota_type: QuotaType,
        pair: usize,
    ) -> Result<Option<f64>> {
        let pair = self.check_pair(pair)?;
        let s = self.scenario(scenario)?;
        Ok(s.tables[table_index(quota_type)].quota_of(pair))
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
        let pair = self.check_pair(pair)?;
        let s = self.scenario(scenario)?;
        Ok(s.tables[table_index(quota_type)].max_value_in_quota_window(pair))
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
