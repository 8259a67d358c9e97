//! The replay kernel's controller mutations (KIND_MUTATION) against the broker's own
//! parts: on random traces of mutations (strict and permissive, several clients, quota
//! changes, gaps that expire buckets) mixed with other requests under a request quota,
//! [`ReplayKernel`] gives event for event what [`ControllerMutationQuotaManager`] (the
//! mutation throttle, the refused partitions, the bucket's tokens) and [`RequestPath`]
//! (the request throttle) give, with the applied throttle the larger of the two, ties to
//! the request quota, as Kafka's `sendResponseMaybeThrottleWithControllerQuota`. A
//! mutation of several topics is recorded topic by topic, as Kafka's controller (and the
//! proxy) does through [`MutationRequestQuota`]: a strict request's later topics are
//! refused once an earlier one overdrew the bucket.
#![cfg(not(loom))]

mod common;
use common::fixed_from;
use kquota_core::kafka::samples::WindowConfig;
use kquota_core::replay::{
    quota_code, Events, Output, BY_MUTATION, BY_NONE, KIND_MUTATION, KIND_OTHER,
};
use kquota_core::{
    ControllerMutationQuotaManager, MutationRequestQuota, QuotaEntity, QuotaManager, QuotaType,
    ReplayKernel, ReplayOptions, Request, RequestPath,
};
use proptest::prelude::*;
use std::sync::Arc;

const PAIRS: [(&str, &str); 4] = [
    ("alice", "app-1"),
    ("alice", "x"),
    ("bob", "app-1"),
    ("", "x"),
];

fn entities() -> Vec<QuotaEntity> {
    let users = [None, Some("<default>"), Some("alice"), Some("bob")];
    let clients = [None, Some("<default>"), Some("app-1"), Some("x")];
    let mut out = Vec::new();
    for u in users {
        for c in clients {
            if let Ok(e) = QuotaEntity::parse(u, c) {
                out.push(e);
            }
        }
    }
    out
}

#[derive(Debug, Clone)]
enum Item {
    /// dt, pair, partitions per topic (None: not a mutation), strict, thread ns (NaN:
    /// unknown)
    Event(i64, usize, Option<Vec<i32>>, bool, f64),
    /// dt, entity, quota (None: remove)
    Quota(i64, usize, Option<f64>),
    Expire(i64),
}

#[derive(Debug, Clone)]
struct Trace {
    start: i64,
    expiry_ms: i64,
    request_quota: Option<f64>,
    initial: Vec<(usize, f64)>,
    items: Vec<Item>,
}

fn dt() -> impl Strategy<Value = i64> {
    prop_oneof![4 => Just(0i64), 6 => 1i64..2_000, 1 => 2_000i64..40_000]
}

fn trace() -> impl Strategy<Value = Trace> {
    let n_entities = entities().len();
    let event = (
        dt(),
        0..PAIRS.len(),
        prop_oneof![
            1 => Just(None),
            2 => (0i32..60).prop_map(|n| Some(vec![n])),
            2 => prop::collection::vec(0i32..30, 0..5).prop_map(Some),
        ],
        any::<bool>(),
        prop_oneof![1 => Just(f64::NAN), 3 => 0.0..2_000_000_000.0f64],
    )
        .prop_map(|(dt, p, n, s, ns)| Item::Event(dt, p, n, s, ns));
    let quota = (
        dt(),
        0..n_entities,
        prop_oneof![1 => Just(None), 3 => (0.5..20.0f64).prop_map(Some)],
    )
        .prop_map(|(dt, e, v)| Item::Quota(dt, e, v));
    let item = prop_oneof![30 => event, 2 => quota, 1 => dt().prop_map(Item::Expire)];
    (
        prop_oneof![Just(0i64), Just(1_700_000_000_000i64)],
        prop_oneof![Just(5_000i64), Just(3_600_000)],
        prop_oneof![Just(None), (20.0..200.0f64).prop_map(Some)],
        prop::collection::vec((0..n_entities, 0.5..20.0f64), 0..3),
        prop::collection::vec(item, 1..120),
    )
        .prop_map(|(start, expiry_ms, request_quota, initial, items)| Trace {
            start,
            expiry_ms,
            request_quota,
            initial,
            items,
        })
}

/// (seq, applied, by, request, mutation, refused) of one event.
type Row = (u64, i32, i8, i32, i32, i32);

struct Broker {
    managers: [QuotaManager; 3],
    mutation: Arc<ControllerMutationQuotaManager>,
}

impl Broker {
    fn new(trace: &Trace) -> Broker {
        let window = WindowConfig::QUOTA_DEFAULT;
        let managers =
            QuotaType::ALL.map(|t| QuotaManager::new(t, window, trace.expiry_ms).unwrap());
        if let Some(q) = trace.request_quota {
            let default_user = QuotaEntity::parse(Some("<default>"), None).unwrap();
            managers[quota_code(QuotaType::Request) as usize]
                .set_quota(&default_user, q)
                .unwrap();
        }
        let mutation = ControllerMutationQuotaManager::new(window, trace.expiry_ms).unwrap();
        let all = entities();
        for (e, v) in &trace.initial {
            mutation.set_quota(&all[*e], *v).unwrap();
        }
        Broker {
            managers,
            mutation: Arc::new(mutation),
        }
    }

    fn path(&self) -> RequestPath<'_> {
        let [p, f, r] = &self.managers;
        RequestPath::new(p, f, r).unwrap()
    }
}

/// The broker's managers, request by request.
fn oracle(trace: &Trace) -> (Vec<Row>, Vec<Option<u64>>) {
    let b = Broker::new(trace);
    let path = b.path();
    let all = entities();
    let mut t = trace.start;
    let mut seq = 0;
    let mut rows = Vec::new();
    for item in &trace.items {
        match item {
            Item::Event(dt, p, partitions, strict, ns) => {
                t += dt;
                let (user, client) = PAIRS[*p];
                let request = if ns.is_nan() {
                    0
                } else {
                    let o = path.record(user, client, &Request::other(*ns), t).unwrap();
                    if o.throttled_by.is_some() {
                        o.throttle_ms
                    } else {
                        0
                    }
                };
                let (mut applied, mut by) = if request > 0 {
                    (request, quota_code(QuotaType::Request))
                } else {
                    (0, BY_NONE)
                };
                let (mut m, mut refused) = (0, 0);
                if let Some(topics) = partitions {
                    // as the proxy (and Kafka's controller): one request quota, each
                    // topic recorded in turn; no topic is one mutation of 0 partitions
                    let quota =
                        MutationRequestQuota::new(b.mutation.clone(), user, client, *strict, t);
                    let whole = [0];
                    let topics: &[i32] = if topics.is_empty() { &whole } else { topics };
                    for &n in topics {
                        if !quota.record(f64::from(n), t).unwrap().accepted {
                            refused += n;
                        }
                    }
                    m = quota.throttle_time(t);
                    if m > applied {
                        (applied, by) = (m, BY_MUTATION);
                    }
                }
                rows.push((seq, applied, by, request, m, refused));
                seq += 1;
            }
            Item::Quota(dt, e, v) => {
                t += dt;
                match v {
                    Some(v) => b.mutation.set_quota(&all[*e], *v).unwrap(),
                    None => b.mutation.remove_quota(&all[*e]),
                }
            }
            Item::Expire(dt) => {
                t += dt;
                for m in &b.managers {
                    m.expire_sensors(t);
                }
                b.mutation.expire_sensors(t);
            }
        }
    }
    let tokens = PAIRS
        .iter()
        .map(|(u, c)| b.mutation.tokens(u, c, t).map(f64::to_bits))
        .collect();
    (rows, tokens)
}

fn rows(out: &Output) -> Vec<Row> {
    (0..out.len())
        .map(|i| {
            (
                out.seq[i],
                out.throttle_ms[i],
                out.throttled_by[i],
                out.request_throttle_ms[i],
                out.mutation_throttle_ms[i],
                out.refused_partitions[i],
            )
        })
        .collect()
}

#[derive(Default)]
struct Columns {
    time: Vec<i64>,
    pair: Vec<i32>,
    kind: Vec<i8>,
    bytes: Vec<f64>,
    thread: Vec<f64>,
    acks: Vec<i16>,
    partitions: Vec<i32>,
    strict: Vec<bool>,
    topic_offsets: Vec<i32>,
    topic_partitions: Vec<i32>,
}

impl Columns {
    fn feed(&mut self, k: &mut ReplayKernel, out: &mut Vec<Row>) {
        let has_mutations = self.kind.contains(&KIND_MUTATION);
        let events = Events {
            time_ms: &self.time,
            pair: &self.pair,
            kind: &self.kind,
            bytes: &self.bytes,
            thread_ns: &self.thread,
            acks: &self.acks,
            partitions: if has_mutations { &self.partitions } else { &[] },
            strict: if has_mutations { &self.strict } else { &[] },
            topic_offsets: if has_mutations {
                &self.topic_offsets
            } else {
                &[]
            },
            topic_partitions: if has_mutations {
                &self.topic_partitions
            } else {
                &[]
            },
            request_throttle_ms: &[],
        };
        out.extend(rows(&k.feed(&events).unwrap()));
        *self = Columns::default();
    }
}

/// The kernel, fed in batches cut at every quota change and expiry run.
fn kernel(trace: &Trace, closed_loop: bool) -> (Vec<Row>, Vec<Option<u64>>) {
    let b = Broker::new(trace);
    let path = b.path();
    let options = ReplayOptions {
        closed_loop,
        expiry_task_ms: None,
        clients: None,
        ..ReplayOptions::default()
    };
    let mut k = ReplayKernel::new(&PAIRS, &[path], options).unwrap();
    k.set_mutation_manager(0, &b.mutation).unwrap();
    let all = entities();
    let mut t = trace.start;
    let mut out = Vec::new();
    let mut cols = Columns::default();
    for item in &trace.items {
        match item {
            Item::Event(dt, p, partitions, strict, ns) => {
                t += dt;
                cols.time.push(t);
                cols.pair.push(*p as i32);
                cols.kind.push(if partitions.is_some() {
                    KIND_MUTATION
                } else {
                    KIND_OTHER
                });
                cols.bytes.push(0.0);
                cols.thread.push(*ns);
                cols.acks.push(-1);
                let topics = partitions.as_deref().unwrap_or(&[]);
                cols.partitions.push(topics.iter().sum());
                cols.strict.push(*strict);
                // a single topic goes as the partitions column alone (no topics): the
                // kernel's one-topic path; several go as per-topic counts
                if cols.topic_offsets.is_empty() {
                    cols.topic_offsets.push(0);
                }
                if topics.len() > 1 {
                    cols.topic_partitions.extend_from_slice(topics);
                }
                cols.topic_offsets.push(cols.topic_partitions.len() as i32);
            }
            Item::Quota(dt, e, v) => {
                cols.feed(&mut k, &mut out);
                t += dt;
                match v {
                    Some(v) => k.set_mutation_quota(0, &all[*e], *v, t).unwrap(),
                    None => k.remove_mutation_quota(0, &all[*e], t).unwrap(),
                }
            }
            Item::Expire(dt) => {
                cols.feed(&mut k, &mut out);
                t += dt;
                k.expire_sensors(t).unwrap();
            }
        }
    }
    cols.feed(&mut k, &mut out);
    out.extend(rows(&k.finish()));
    out.sort_by_key(|r| r.0);
    let tokens = (0..PAIRS.len())
        .map(|p| k.mutation_tokens(0, p, t).unwrap().map(f64::to_bits))
        .collect();
    (out, tokens)
}

proptest! {
    #![proptest_config(fixed_from(0x6d75_7461_7465, 300))]

    #[test]
    fn mutations_equal_the_controller_mutation_manager(trace in trace()) {
        let (expected, expected_tokens) = oracle(&trace);
        let (got, tokens) = kernel(&trace, false);
        prop_assert_eq!(got, expected);
        prop_assert_eq!(tokens, expected_tokens);
    }
}

/// The random traces reach every branch: strict refusals, permissive throttles, the
/// mutation quota applying over the request quota and the request quota winning.
#[test]
fn traces_cover_every_branch() {
    use proptest::strategy::ValueTree;
    use proptest::test_runner::TestRunner;
    let mut runner = TestRunner::new(fixed_from(0x6d75_7461_7465, 300));
    let (mut refused, mut by_mutation, mut by_request, mut both) = (0, 0, 0, 0);
    let mut later_topics_refused = 0;
    for _ in 0..300 {
        let trace = trace().new_tree(&mut runner).unwrap().current();
        let (rows, _) = oracle(&trace);
        let asked = trace.items.iter().filter_map(|i| match i {
            Item::Event(_, _, p, s, _) => Some((p.clone().unwrap_or_default(), *s)),
            _ => None,
        });
        for (r, (topics, strict)) in rows.iter().zip(asked) {
            // a strict request of several topics with some, not all, refused
            let total: i32 = topics.iter().sum();
            later_topics_refused +=
                usize::from(strict && topics.len() > 1 && r.5 > 0 && r.5 < total);
            refused += usize::from(r.5 > 0);
            by_mutation += usize::from(r.2 == BY_MUTATION);
            by_request += usize::from(r.2 == quota_code(QuotaType::Request));
            both += usize::from(r.3 > 0 && r.4 > 0);
        }
    }
    assert!(refused > 50, "strict refusals: {refused}");
    assert!(
        by_mutation > 50,
        "throttled by the mutation quota: {by_mutation}"
    );
    assert!(
        by_request > 50,
        "throttled by the request quota: {by_request}"
    );
    assert!(both > 5, "both quotas throttling one request: {both}");
    assert!(
        later_topics_refused > 20,
        "strict requests with their later topics refused: {later_topics_refused}"
    );
}

/// Closed loop: a client throttled by the mutation quota sends its next request after
/// the throttle, and the bucket has refilled by then as the manager's would.
#[test]
fn closed_loop_waits_out_a_mutation_throttle() {
    let t0 = 1_700_000_000_000i64;
    let m = ControllerMutationQuotaManager::with_defaults();
    m.set_quota(&QuotaEntity::parse(Some("alice"), None).unwrap(), 2.0)
        .unwrap();
    let mut k = mutation_kernel(&m, &PAIRS[..1], true);
    // 30 partitions overdraw the 22-token burst by 8 (permissive: 4 s throttle); the
    // strict request 1 ms later is held until the throttle ends, then accepted.
    let times = [t0, t0 + 1];
    let events = Events {
        time_ms: &times,
        pair: &[0, 0],
        kind: &[KIND_MUTATION, KIND_MUTATION],
        bytes: &[0.0, 0.0],
        thread_ns: &[f64::NAN, f64::NAN],
        acks: &[-1, -1],
        partitions: &[30, 1],
        strict: &[false, true],
        topic_offsets: &[],
        topic_partitions: &[],
        request_throttle_ms: &[],
    };
    let mut out = k.feed(&events).unwrap();
    let rest = k.finish();
    out.mutation_throttle_ms.extend(rest.mutation_throttle_ms);
    out.sent_ms.extend(rest.sent_ms);
    out.refused_partitions.extend(rest.refused_partitions);
    let first = m.record_permissive("alice", "app-1", 30.0, t0).unwrap();
    assert_eq!(first.throttle_ms, 4000);
    assert_eq!(out.mutation_throttle_ms[0], 4000);
    assert_eq!(out.sent_ms[1], t0 + 4000);
    let second = m.record_strict("alice", "app-1", 1.0, t0 + 4000).unwrap();
    assert!(second.accepted);
    assert_eq!(out.refused_partitions[1], 0);
    assert_eq!(out.mutation_throttle_ms[1], 0);
}

/// Bad mutation columns are refused, naming the value, and change nothing.
#[test]
fn bad_mutation_columns_are_refused() {
    let m = ControllerMutationQuotaManager::with_defaults();
    m.set_quota(&QuotaEntity::parse(Some("alice"), None).unwrap(), 2.0)
        .unwrap();
    let mut k = mutation_kernel(&m, &PAIRS[..1], false);
    let base = |partitions: &'static [i32], strict: &'static [bool]| Events {
        time_ms: &[5],
        pair: &[0],
        kind: &[KIND_MUTATION],
        bytes: &[0.0],
        thread_ns: &[f64::NAN],
        acks: &[-1],
        partitions,
        strict,
        topic_offsets: &[],
        topic_partitions: &[],
        request_throttle_ms: &[],
    };
    let e = k.feed(&base(&[-3], &[true])).unwrap_err().to_string();
    assert!(e.contains("invalid partitions -3 at row 0"), "{e}");
    let e = k.feed(&base(&[], &[])).unwrap_err().to_string();
    assert!(e.contains("no partitions and strict columns"), "{e}");
    let e = k.feed(&base(&[1], &[])).unwrap_err().to_string();
    assert!(e.contains("partitions has 1 rows and strict 0"), "{e}");
    let topics = |offsets: &'static [i32], topics: &'static [i32]| Events {
        topic_offsets: offsets,
        topic_partitions: topics,
        ..base(&[3], &[true])
    };
    let e = k.feed(&topics(&[0, 2], &[1, 1])).unwrap_err().to_string();
    assert!(e.contains("sum to 2, not its partitions 3"), "{e}");
    let e = k.feed(&topics(&[0, 2], &[4, -1])).unwrap_err().to_string();
    assert!(e.contains("invalid topic partitions -1 at row 0"), "{e}");
    let e = k.feed(&topics(&[0], &[3])).unwrap_err().to_string();
    assert!(e.contains("topic_offsets has 1 rows"), "{e}");
    let e = k.feed(&topics(&[0, 1], &[1, 2])).unwrap_err().to_string();
    assert!(e.contains("topic_offsets must rise"), "{e}");
    assert_eq!(k.mutation_tokens(0, 0, 5).unwrap(), None);
    let out = k.feed(&base(&[1], &[true])).unwrap();
    assert_eq!(out.refused_partitions, vec![0]);
}

/// The kernel's controller-mutation summaries: per sensor, the requests, partitions asked
/// and recorded, throttles and peak, as counted from what the manager decided.
#[test]
fn mutation_summaries_count_what_the_manager_decided() {
    use kquota_core::SummaryType;
    let t0 = 1_700_000_000_000i64;
    let m = ControllerMutationQuotaManager::with_defaults();
    m.set_quota(&QuotaEntity::parse(Some("<default>"), None).unwrap(), 3.0)
        .unwrap();
    let pairs = [("alice", "a"), ("bob", "b")];
    let mut k = mutation_kernel(&m, &pairs, false);
    let n = 50;
    let time: Vec<i64> = (0..n).map(|i| t0 + 300 * (i / 2)).collect();
    let pair: Vec<i32> = (0..n).map(|i| (i % 2) as i32).collect();
    let partitions: Vec<i32> = (0..n).map(|i| ((5 * i) % 13) as i32).collect();
    let strict: Vec<bool> = (0..n).map(|i| i % 4 != 1).collect();
    let events = Events {
        time_ms: &time,
        pair: &pair,
        kind: &vec![KIND_MUTATION; n as usize],
        bytes: &vec![0.0; n as usize],
        thread_ns: &vec![f64::NAN; n as usize],
        acks: &vec![-1; n as usize],
        partitions: &partitions,
        strict: &strict,
        topic_offsets: &[],
        topic_partitions: &[],
        request_throttle_ms: &[],
    };
    k.feed(&events).unwrap();
    let summaries = k.summaries();
    assert_eq!(summaries.len(), 2);
    for (s, (user, client)) in summaries.iter().zip(pairs) {
        let (mut requests, mut asked, mut recorded, mut throttled, mut total, mut max) =
            (0u64, 0i64, 0i64, 0u64, 0i64, 0i64);
        for i in 0..n as usize {
            if pairs[pair[i] as usize].0 != user {
                continue;
            }
            let parts = f64::from(partitions[i]);
            let check = if strict[i] {
                m.record_strict(user, client, parts, time[i]).unwrap()
            } else {
                m.record_permissive(user, client, parts, time[i]).unwrap()
            };
            let throttle = if check.violated { check.throttle_ms } else { 0 };
            requests += 1;
            asked += i64::from(partitions[i]);
            recorded += if check.accepted {
                i64::from(partitions[i])
            } else {
                0
            };
            throttled += u64::from(throttle > 0);
            total += throttle;
            max = max.max(throttle);
        }
        assert_eq!(s.quota_type, SummaryType::ControllerMutation);
        assert_eq!((s.user.as_str(), s.client_id.as_str()), (user, ""));
        assert_eq!(s.quota, Some(3.0));
        assert_eq!(
            (s.requests, s.bytes, s.usage, s.throttled_requests),
            (requests, asked, recorded, throttled)
        );
        assert_eq!((s.total_throttle_ms, s.max_throttle_ms), (total, max));
        assert!(throttled > 0 && recorded < asked, "{s:?}");
    }
}

/// A one-scenario kernel over `pairs` with default produce, fetch and request managers
/// and `m`'s controller-mutation quota, with no expiry task.
fn mutation_kernel(
    m: &ControllerMutationQuotaManager,
    pairs: &[(&str, &str)],
    closed_loop: bool,
) -> ReplayKernel {
    let managers = QuotaType::ALL.map(QuotaManager::with_defaults);
    let [p, f, r] = &managers;
    let path = RequestPath::new(p, f, r).unwrap();
    let options = ReplayOptions {
        closed_loop,
        expiry_task_ms: None,
        clients: None,
        ..ReplayOptions::default()
    };
    let mut k = ReplayKernel::new(pairs, &[path], options).unwrap();
    k.set_mutation_manager(0, m).unwrap();
    k
}
