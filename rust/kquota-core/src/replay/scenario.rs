//! One scenario (one quota configuration) of a replay: its sensor tables, its expiry
//! clock, the request-by-request and the batched open-loop replay, and the closed loop's
//! clients.

use std::cmp::Reverse;
use std::collections::{BinaryHeap, VecDeque};
use std::sync::Arc;

use super::clock::Clock;
use super::columns::{
    kind_of, quota_code, ClientLimits, Events, Output, QuotaPass, BY_MUTATION, BY_NONE, KIND_FETCH,
    KIND_MUTATION, KIND_PRODUCE, SERVED, UNSERVED_TIMED_OUT,
};
use super::groups::{Groups, Record};
use super::mutation::MutationTable;
use super::sensor::SensorTable;
use super::stats::{Usage, WindowIndex};
use crate::kafka::broker::{mutation_response_throttle, MutationThrottledBy};
use crate::kafka::quota_type::QuotaType;
use crate::kafka::request::{
    applied_throttle, checks_request_quota, fetch_unrecorded, record_request, ApiKind,
    RecordedThrottles, RequestSensors,
};
use crate::kafka::token_bucket::remaining_throttle;

/// One checked event.
#[derive(Debug, Clone)]
pub(super) struct Event {
    pub(super) time: i64,
    pub(super) seq: u64,
    pub(super) pair: u32,
    pub(super) kind: ApiKind,
    pub(super) acks: i16,
    pub(super) bytes: f64,
    pub(super) thread: Option<f64>,
    /// A mutation's partitions and strictness.
    pub(super) mutation: Option<(i32, bool)>,
    /// A mutation's partitions per topic, in request order, when it has more than one
    /// topic (else one topic of its partitions).
    pub(super) topics: Option<Arc<[i32]>>,
}

impl Event {
    /// Event `i` of checked columns, `first_seq` being the position of event 0.
    #[inline]
    pub(super) fn of(events: &Events<'_>, i: usize, first_seq: u64) -> Event {
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
                events
                    .topic_range(i)
                    .filter(|r| r.len() > 1)
                    .map(|r| Arc::from(&events.topic_partitions[r]))
            } else {
                None
            },
        }
    }
}

/// The managers' throttles of one event and what applied.
#[derive(Debug, Clone, Copy)]
pub(super) struct Decision {
    pub(super) produce: i32,
    pub(super) fetch: i32,
    pub(super) request: i32,
    pub(super) mutation: i32,
    pub(super) refused: i32,
    pub(super) applied: i32,
    /// A `throttled_by` code.
    pub(super) by: i8,
}

/// One client's closed-loop state.
#[derive(Debug, Clone, Default)]
pub(super) struct Client {
    pub(super) shift: i64,
    pub(super) mute_end: Option<i64>,
    /// Fed events not replayed yet, in time order; the first is in the heap when
    /// `scheduled`.
    pub(super) queue: VecDeque<Event>,
    pub(super) scheduled: bool,
    /// Bounded clients: the produce bytes in `queue`.
    pub(super) buffered: f64,
    /// Bounded clients: when the client last sent or gave up a request (its next one
    /// comes no earlier).
    pub(super) last: Option<i64>,
    /// Bounded clients: the scheduled event is to be given up (its timeout runs out
    /// before it can be sent).
    pub(super) giving_up: bool,
}

#[derive(Debug, Clone, Default)]
pub(super) struct ClosedLoop {
    /// Unbounded: one client per pair. Bounded: [`LANES`] per pair (its producer, its
    /// consumer and the rest, each a connection of its own), at `pair * LANES + lane`.
    pub(super) clients: Vec<Client>,
    /// (sent, seq, client) of each client's next event.
    pub(super) heap: BinaryHeap<Reverse<(i64, u64, usize)>>,
    /// Bounded clients, or `None`: unbounded ones.
    pub(super) limits: Option<ClientLimits>,
}

/// Bounded clients: the connections of one pair (a client id of a user) the replay tells
/// apart. Kafka mutes the connection a throttled response went out on, and a producer and a
/// consumer of one client id are different connections: a lagging consumer does not hold
/// its producer's requests back.
pub(super) const LANES: usize = 3;

fn lane(kind: ApiKind) -> usize {
    match kind {
        ApiKind::Produce => 0,
        ApiKind::Fetch => 1,
        _ => 2,
    }
}

impl ClosedLoop {
    pub(super) fn new(limits: Option<ClientLimits>) -> Self {
        ClosedLoop {
            limits,
            ..ClosedLoop::default()
        }
    }

    /// The clients of `pairs` pairs.
    pub(super) fn resize(&mut self, pairs: usize) {
        let lanes = if self.limits.is_some() { LANES } else { 1 };
        self.clients.resize_with(pairs * lanes, Client::default);
    }

    /// The client that sends `e`.
    fn client_of(&self, e: &Event) -> usize {
        match self.limits {
            None => e.pair as usize,
            Some(_) => e.pair as usize * LANES + lane(e.kind),
        }
    }

    /// Takes event `e` into its client at its time; gives it back when a bounded
    /// client's buffer has no room for it (it is then not served).
    pub(super) fn admit(&mut self, e: Event) -> Option<Event> {
        let at = self.client_of(&e);
        let client = &mut self.clients[at];
        if let (Some(limits), ApiKind::Produce) = (self.limits, e.kind) {
            if client.buffered + e.bytes > limits.buffer_bytes as f64 {
                return Some(e);
            }
            client.buffered += e.bytes;
        }
        client.queue.push_back(e);
        self.schedule(at);
        None
    }

    pub(super) fn schedule(&mut self, at: usize) {
        let client = &mut self.clients[at];
        if client.scheduled {
            return;
        }
        let Some(e) = client.queue.front() else {
            return;
        };
        let mute_end = client.mute_end.unwrap_or(i64::MIN);
        let due = match self.limits {
            // An unbounded client's whole timeline moves by what it waited.
            None => {
                let due = (e.time + client.shift).max(mute_end);
                client.shift = due - e.time;
                due
            }
            // A bounded client sends what it holds as soon as it may, or gives it up when
            // its timeout runs out first (then, or now if that has passed).
            Some(limits) => {
                let last = client.last.unwrap_or(i64::MIN);
                let ready = e.time.max(last).max(mute_end);
                let expiry = e.time.saturating_add(limits.timeout_ms(e.kind));
                client.giving_up = ready > expiry;
                if client.giving_up {
                    expiry.max(last)
                } else {
                    ready
                }
            }
        };
        client.scheduled = true;
        self.heap.push(Reverse((due, e.seq, at)));
    }
}

/// One scenario: a broker's quota types under one configuration.
#[derive(Debug, Clone)]
pub(super) struct Scenario {
    /// Produce, fetch, request.
    pub(super) tables: [SensorTable; 3],
    /// The controller-mutation quota.
    pub(super) mutations: MutationTable,
    pub(super) clock: Clock,
    pub(super) closed: Option<ClosedLoop>,
}

pub(super) fn table_index(quota_type: QuotaType) -> usize {
    quota_code(quota_type) as usize
}

/// One pair's sensors in a scenario's tables at one time, each record checked; the
/// replay's side of [`record_request`].
pub(super) struct PairSensors<'t> {
    pub(super) tables: &'t mut [SensorTable; 3],
    pub(super) pair: u32,
    pub(super) now: i64,
    pub(super) run: Option<i64>,
}

impl RequestSensors for PairSensors<'_> {
    type Error = std::convert::Infallible;

    #[inline(always)]
    fn record(
        &mut self,
        quota_type: QuotaType,
        value: f64,
    ) -> std::result::Result<i32, Self::Error> {
        let table = &mut self.tables[table_index(quota_type)];
        Ok(table.record(self.pair, value, self.now, true, self.run))
    }

    #[inline(always)]
    fn unrecord_fetch(&mut self, bytes: f64) -> std::result::Result<(), Self::Error> {
        let table = &mut self.tables[table_index(QuotaType::Fetch)];
        table.record(self.pair, -bytes, self.now, false, self.run);
        Ok(())
    }
}

/// How many records ahead the open loop prefetches a sensor it moves to.
pub(super) const PREFETCH: usize = 16;

/// The decisions of one scenario for a batch, column by column (the scenario's part of
/// the [`Output`] columns).
pub(super) struct Decisions<'a> {
    pub(super) applied: &'a mut [i32],
    pub(super) by: &'a mut [i8],
    pub(super) produce: &'a mut [i32],
    pub(super) fetch: &'a mut [i32],
    pub(super) request: &'a mut [i32],
    pub(super) mutation: &'a mut [i32],
    pub(super) refused: &'a mut [i32],
}

/// The open loop's working space, reused from batch to batch.
#[derive(Debug, Clone, Default)]
pub(super) struct Scratch {
    pub(super) groups: Groups,
}

impl Scenario {
    /// Open loop: replays `n` checked events of a batch, quota type by quota type and,
    /// within one, sensor by sensor ([`Groups`]; sensors are independent in open loop):
    /// the request quota first (a fetch's bytes are taken back when it throttles), then
    /// produce, fetch and the controller mutations. The same decisions and summaries as
    /// [`Scenario::handle`] event by event.
    pub(super) fn replay_batch(
        &mut self,
        events: &Events<'_>,
        n: usize,
        first: u64,
        scratch: &mut Scratch,
        d: Decisions<'_>,
        pass: QuotaPass,
    ) {
        let groups = &mut scratch.groups;
        let clock = self.clock.clone();
        let [produce, fetch, request] = &mut self.tables;
        // a byte pass's request throttles are given, already in `d.request`
        if pass.replays(QuotaType::Request) && request.enabled() {
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
        for (table, kind, quota_type) in [
            (produce, KIND_PRODUCE, QuotaType::Produce),
            (fetch, KIND_FETCH, QuotaType::Fetch),
        ] {
            if !pass.replays(quota_type) || !table.enabled() {
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
            let e = Event::of(events, i, first);
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
    pub(super) fn replay_table(
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
    pub(super) fn handle(&mut self, e: &Event, now: i64) -> Decision {
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
    pub(super) fn client_quotas(&mut self, e: &Event, now: i64, run: Option<i64>) -> Decision {
        let thread = e.thread.filter(|_| checks_request_quota(e.kind, e.acks));
        let mut sensors = PairSensors {
            tables: &mut self.tables,
            pair: e.pair,
            now,
            run,
        };
        let Ok(RecordedThrottles {
            produce_ms: p,
            fetch_ms: f,
            request_ms: r,
            unrecorded,
        }) = record_request(&mut sensors, e.kind, e.bytes, thread);
        let [produce, fetch, request] = &mut self.tables;
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
    pub(super) fn mutate(
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
        // the request's throttle is the last violation's. The response's throttle is then
        // the broker's rule (mutation_response_throttle).
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
            m = remaining_throttle(last_throttle, now, now, self.mutations.release());
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
        // The client quotas' applied throttle is the request quota's here (a mutation is
        // checked as any other API), so it stands when the request quota wins.
        if let (applied, Some(MutationThrottledBy::ControllerMutation)) =
            mutation_response_throttle(d.applied, m)
        {
            (d.applied, d.by) = (applied, BY_MUTATION);
        }
    }

    /// Closed loop: replays the held events sent at or before `limit`.
    pub(super) fn drain(&mut self, index: usize, limit: i64, out: &mut Output) {
        let Some(mut closed) = self.closed.take() else {
            return;
        };
        while let Some(&Reverse((due, _, at))) = closed.heap.peek() {
            if due > limit {
                break;
            }
            closed.heap.pop();
            let limits = closed.limits;
            let client = &mut closed.clients[at];
            client.scheduled = false;
            let e = client
                .queue
                .pop_front()
                .expect("a scheduled client holds an event");
            if limits.is_some() {
                client.last = Some(due);
                if e.kind == ApiKind::Produce {
                    client.buffered -= e.bytes;
                }
                if client.giving_up {
                    out.push_unserved(index, &e, due, UNSERVED_TIMED_OUT);
                    closed.schedule(at);
                    continue;
                }
            }
            let d = self.handle(&e, due);
            out.push(index, &e, due, &d);
            let client = &mut closed.clients[at];
            if d.applied > 0 {
                let end = due + i64::from(d.applied);
                if client.mute_end.is_none_or(|m| end > m) {
                    client.mute_end = Some(end);
                }
            }
            closed.schedule(at);
        }
        self.closed = Some(closed);
    }
}

impl Output {
    /// Appends the row of event `e` of `scenario`, sent at `sent`, decided `d`.
    pub(super) fn push(&mut self, scenario: usize, e: &Event, sent: i64, d: &Decision) {
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
        self.unserved.push(SERVED);
    }

    /// Appends the row of event `e` of `scenario`, given up by its client at `at` for
    /// `why` (an `unserved` code): no throttle, nothing recorded.
    pub(super) fn push_unserved(&mut self, scenario: usize, e: &Event, at: i64, why: i8) {
        let none = Decision {
            produce: 0,
            fetch: 0,
            request: 0,
            mutation: 0,
            refused: 0,
            applied: 0,
            by: BY_NONE,
        };
        self.push(scenario, e, at, &none);
        *self.unserved.last_mut().expect("a row was pushed") = why;
    }
}
