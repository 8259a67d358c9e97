//! The replay kernel against the per-request path: on random traces (the three quota
//! types, quotas changing, repeated timestamps, few and many entities, gaps that expire
//! sensors, measurements that purge), [`ReplayKernel`] gives event for event the
//! throttles [`RequestPath`] over [`QuotaManager`]s gives, in open and closed loop, fed
//! in random batches; and bad input is refused without changing anything.
#![cfg(not(loom))]

mod common;
use common::fixed;
use std::cmp::Reverse;
use std::collections::BinaryHeap;

use kquota_core::kafka::samples::WindowConfig;
use kquota_core::replay::{quota_code, Events, Output, QuotaPass, BY_NONE};
use kquota_core::{
    Error, QuotaEntity, QuotaManager, QuotaType, ReplayKernel, ReplayOptions, Request, RequestPath,
};
use proptest::prelude::*;

const USERS: [&str; 4] = ["alice", "bob", "User:CN=c d", ""];
const CLIENTS: [&str; 4] = ["app-1", "app-2", "", "x"];

#[derive(Debug, Clone)]
struct Ev {
    /// Time step from the previous item.
    dt: i64,
    pair: usize,
    kind: i8,
    bytes: f64,
    thread_ns: f64,
    acks: i16,
}

#[derive(Debug, Clone)]
enum Item {
    Event(Ev),
    /// (dt, scenario, type, entity index, value or removal)
    Quota(i64, usize, QuotaType, usize, Option<f64>),
    Expire(i64),
    Measure(i64, usize, QuotaType, usize),
    NoThrottle(i64, usize, f64),
}

impl Item {
    fn dt(&self) -> i64 {
        match self {
            Item::Event(e) => e.dt,
            Item::Quota(dt, ..) | Item::Expire(dt) | Item::Measure(dt, ..) => *dt,
            Item::NoThrottle(dt, ..) => *dt,
        }
    }
}

#[derive(Debug, Clone)]
struct Trace {
    pairs: Vec<(String, String)>,
    num_samples: i64,
    window_ms: i64,
    expiry_ms: i64,
    task_ms: Option<i64>,
    /// Per scenario, the initial overrides: (type, entity index, value).
    scenarios: Vec<Vec<(QuotaType, usize, f64)>>,
    items: Vec<Item>,
    /// Batch boundaries (sizes) for feeding.
    cuts: Vec<usize>,
}

fn entities() -> Vec<QuotaEntity> {
    let mut out = Vec::new();
    let users: Vec<Option<&str>> = vec![None, Some("<default>"), Some("alice"), Some("bob")];
    let clients: Vec<Option<&str>> = vec![None, Some("<default>"), Some("app-1"), Some("x")];
    for u in &users {
        for c in &clients {
            if let Ok(e) = QuotaEntity::parse(*u, *c) {
                out.push(e);
            }
        }
    }
    out
}

fn quota_type() -> impl Strategy<Value = QuotaType> {
    prop::sample::select(QuotaType::ALL.to_vec())
}

fn dt(window: i64) -> impl Strategy<Value = i64> {
    prop_oneof![
        6 => Just(0i64),
        8 => 0..window / 4,
        3 => 0..3 * window,
        1 => prop::sample::select(vec![4_999, 5_000, 5_001, 30_000, 3_600_001, 7_200_000]),
    ]
}

fn quota_value(quota_type: QuotaType) -> impl Strategy<Value = f64> {
    match quota_type {
        QuotaType::Request => (1u32..200).prop_map(|v| f64::from(v) / 10.0).boxed(),
        _ => (1u32..50_000).prop_map(f64::from).boxed(),
    }
}

fn item(n_pairs: usize, n_scenarios: usize, window: i64) -> impl Strategy<Value = Item> {
    let n_entities = entities().len();
    let event = (
        dt(window),
        0..n_pairs,
        prop::sample::select(vec![0i8, 0, 1, 1, 2]),
        prop_oneof![
            4 => Just(0.0),
            4 => 0.0..20_000.0f64,
            4 => (0u32..20_000).prop_map(f64::from),
            // far over any quota: throttles past i32::MAX ms, which Kafka's int wraps
            1 => 1e9..1e13f64,
        ],
        prop_oneof![1 => Just(f64::NAN), 6 => 0.0..40_000_000.0f64],
        prop::sample::select(vec![-1i16, 0, 1]),
    )
        .prop_map(|(dt, pair, kind, bytes, thread_ns, acks)| {
            Item::Event(Ev {
                dt,
                pair,
                kind,
                bytes,
                thread_ns,
                acks,
            })
        });
    let change = (dt(window), 0..n_scenarios, quota_type(), 0..n_entities)
        .prop_flat_map(|(dt, s, t, e)| {
            (
                Just((dt, s, t, e)),
                prop_oneof![1 => Just(None), 3 => quota_value(t).prop_map(Some)],
            )
        })
        .prop_map(|((dt, s, t, e), v)| Item::Quota(dt, s, t, e, v));
    prop_oneof![
        40 => event,
        2 => change,
        1 => dt(window).prop_map(Item::Expire),
        3 => (dt(window), 0..n_scenarios, quota_type(), 0..n_pairs)
            .prop_map(|(dt, s, t, p)| Item::Measure(dt, s, t, p)),
        1 => (dt(window), 0..n_pairs, 0.0..5_000_000.0f64)
            .prop_map(|(dt, p, ns)| Item::NoThrottle(dt, p, ns)),
    ]
}

fn trace() -> impl Strategy<Value = Trace> {
    (
        prop_oneof![Just(1usize), 2..6usize, 10..40usize],
        1..4usize,
        prop::sample::select(vec![1i64, 2, 11]),
        prop::sample::select(vec![1000i64, 2000]),
        prop::sample::select(vec![5_000i64, 3_600_000]),
        prop::sample::select(vec![None, Some(1000i64), Some(30_000)]),
    )
        .prop_flat_map(|(n_pairs, n_scenarios, n, w, expiry, task)| {
            let pairs = prop::collection::vec(
                (
                    prop::sample::select(USERS.to_vec()),
                    prop::sample::select(CLIENTS.to_vec()),
                ),
                n_pairs,
            );
            let n_entities = entities().len();
            let overrides = prop::collection::vec(
                (quota_type(), 0..n_entities)
                    .prop_flat_map(|(t, e)| (Just(t), Just(e), quota_value(t))),
                0..5,
            );
            (
                pairs,
                prop::collection::vec(overrides, n_scenarios),
                prop::collection::vec(item(n_pairs, n_scenarios, w), 1..300),
                prop::collection::vec(1usize..80, 1..10),
                Just((n, w, expiry, task)),
            )
        })
        .prop_map(
            |(pairs, scenarios, items, cuts, (n, w, expiry, task))| Trace {
                pairs: pairs
                    .into_iter()
                    .map(|(u, c)| (u.to_owned(), c.to_owned()))
                    .collect(),
                num_samples: n,
                window_ms: w,
                expiry_ms: expiry,
                task_ms: task,
                scenarios,
                items,
                cuts,
            },
        )
}

struct Broker {
    managers: [QuotaManager; 3],
}

impl Broker {
    fn new(trace: &Trace, overrides: &[(QuotaType, usize, f64)]) -> Broker {
        let window = WindowConfig::new(trace.num_samples, trace.window_ms).unwrap();
        let managers =
            QuotaType::ALL.map(|t| QuotaManager::new(t, window, trace.expiry_ms).unwrap());
        let all = entities();
        for (t, e, v) in overrides {
            managers[quota_code(*t) as usize]
                .set_quota(&all[*e], *v)
                .unwrap();
        }
        Broker { managers }
    }

    fn path(&self) -> RequestPath<'_> {
        let [p, f, r] = &self.managers;
        RequestPath::new(p, f, r).unwrap()
    }

    fn manager(&self, t: QuotaType) -> &QuotaManager {
        &self.managers[quota_code(t) as usize]
    }
}

/// One row of either side: (scenario, seq, p, f, r, applied, by, sent).
type Row = (u32, u64, i32, i32, i32, i32, i8, i64);

fn rows(out: &Output) -> Vec<Row> {
    (0..out.len())
        .map(|i| {
            (
                out.scenario[i],
                out.seq[i],
                out.produce_throttle_ms[i],
                out.fetch_throttle_ms[i],
                out.request_throttle_ms[i],
                out.throttle_ms[i],
                out.throttled_by[i],
                out.sent_ms[i],
            )
        })
        .collect()
}

/// What the oracle and the kernel measured (`Measure` items), in order.
type Measured = Vec<(usize, Option<u64>)>;

/// The per-request oracle: managers driven one request at a time, the expiry task run as
/// the kernel defines it (at multiples of the period, before that millisecond's events),
/// the closed loop as the back-test's `replay_closed` (a heap of each client's next
/// request by (sent, input position); operations are items at their own time).
fn oracle(trace: &Trace, closed: bool) -> (Vec<Row>, Measured) {
    let (rows, measured, _) = oracle_counting(trace, closed);
    (rows, measured)
}

/// [`oracle`], and how many sensors its expiry runs removed.
fn oracle_counting(trace: &Trace, closed: bool) -> (Vec<Row>, Measured, usize) {
    let mut expired = 0;
    let brokers: Vec<Broker> = trace
        .scenarios
        .iter()
        .map(|o| Broker::new(trace, o))
        .collect();
    let all = entities();
    let mut out = Vec::new();
    let mut measured = Vec::new();
    // absolute times and event sequence numbers
    let mut t = 0i64;
    let mut timed = Vec::new();
    let mut seq = 0u64;
    for item in &trace.items {
        t += item.dt();
        let s = matches!(item, Item::Event(_)).then(|| {
            seq += 1;
            seq - 1
        });
        timed.push((t, s, item.clone()));
    }
    for (index, broker) in brokers.iter().enumerate() {
        let path = broker.path();
        let mut last_tick: Option<i64> = None;
        let tick = |now: i64, last_tick: &mut Option<i64>, expired: &mut usize| {
            if let Some(p) = trace.task_ms {
                let at = now.div_euclid(p) * p;
                if last_tick.is_none_or(|l| at > l) {
                    for m in &broker.managers {
                        *expired += m.expire_sensors(at).len();
                    }
                    *last_tick = Some(at);
                }
            }
        };
        // the closed loop's state per pair
        let n = trace.pairs.len();
        let mut shift = vec![0i64; n];
        let mut mute_end: Vec<Option<i64>> = vec![None; n];
        let mut queues: Vec<std::collections::VecDeque<usize>> = vec![Default::default(); n];
        let mut heap: BinaryHeap<Reverse<(i64, usize)>> = BinaryHeap::new();
        let schedule = |pair: usize,
                        queues: &Vec<std::collections::VecDeque<usize>>,
                        shift: &mut Vec<i64>,
                        mute_end: &Vec<Option<i64>>,
                        heap: &mut BinaryHeap<Reverse<(i64, usize)>>| {
            if let Some(&k) = queues[pair].front() {
                let recorded = timed[k].0;
                let mut due = recorded + shift[pair];
                if let Some(end) = mute_end[pair] {
                    due = due.max(end);
                }
                shift[pair] = due - recorded;
                heap.push(Reverse((due, k)));
            }
        };
        for (k, (time, _, item)) in timed.iter().enumerate() {
            match item {
                Item::Event(e) if closed => {
                    queues[e.pair].push_back(k);
                    if queues[e.pair].len() == 1 {
                        schedule(e.pair, &queues, &mut shift, &mute_end, &mut heap);
                    }
                }
                _ => heap.push(Reverse((*time, k))),
            }
        }
        while let Some(Reverse((now, k))) = heap.pop() {
            let (_, seq, item) = &timed[k];
            match item {
                Item::Event(e) => {
                    tick(now, &mut last_tick, &mut expired);
                    let (user, client) = &trace.pairs[e.pair];
                    let kind = ["produce", "fetch", "other"][e.kind as usize]
                        .parse()
                        .unwrap();
                    let request = Request {
                        kind,
                        bytes: e.bytes,
                        thread_time_ns: (!e.thread_ns.is_nan()).then_some(e.thread_ns),
                        acks: e.acks,
                    };
                    let o = path.record(user, client, &request, now).unwrap();
                    out.push((
                        index as u32,
                        seq.unwrap(),
                        o.produce_throttle_ms,
                        o.fetch_throttle_ms,
                        o.request_throttle_ms,
                        o.throttle_ms,
                        o.throttled_by.map_or(BY_NONE, quota_code),
                        now,
                    ));
                    if closed {
                        if o.throttle_ms > 0 {
                            let end = now + i64::from(o.throttle_ms);
                            if mute_end[e.pair].is_none_or(|m| end > m) {
                                mute_end[e.pair] = Some(end);
                            }
                        }
                        queues[e.pair].pop_front();
                        schedule(e.pair, &queues, &mut shift, &mute_end, &mut heap);
                    }
                }
                Item::Quota(_, s, t, e, v) => {
                    if *s == index {
                        match v {
                            Some(v) => broker.manager(*t).set_quota(&all[*e], *v).unwrap(),
                            None => broker.manager(*t).remove_quota(&all[*e]).unwrap(),
                        }
                    }
                }
                Item::Expire(_) => {
                    for m in &broker.managers {
                        expired += m.expire_sensors(now).len();
                    }
                }
                Item::Measure(_, s, t, p) => {
                    if *s == index {
                        tick(now, &mut last_tick, &mut expired);
                        let (user, client) = &trace.pairs[*p];
                        let rate = broker.manager(*t).measure(user, client, now);
                        measured.push((k, rate.map(f64::to_bits)));
                    }
                }
                Item::NoThrottle(_, p, ns) => {
                    tick(now, &mut last_tick, &mut expired);
                    let (user, client) = &trace.pairs[*p];
                    broker
                        .manager(QuotaType::Request)
                        .record_no_throttle(user, client, *ns, now)
                        .unwrap();
                }
            }
        }
    }
    out.sort_by_key(|r| (r.0, r.1));
    measured.sort();
    (out, measured, expired)
}

/// Event columns being gathered for a batch: time, pair, kind, bytes, thread ns, acks.
type Columns = (Vec<i64>, Vec<i32>, Vec<i8>, Vec<f64>, Vec<f64>, Vec<i16>);

/// The kernel fed the trace in batches cut at `trace.cuts` (and at every operation).
fn kernel(trace: &Trace, closed: bool) -> (Vec<Row>, Measured) {
    replayed(trace, closed, false)
}

/// [`kernel`], or with `split` the open loop as two kernels: a request pass, then a byte
/// pass given the request pass's throttles batch by batch (every operation on both).
fn replayed(trace: &Trace, closed: bool, split: bool) -> (Vec<Row>, Measured) {
    let brokers: Vec<Broker> = trace
        .scenarios
        .iter()
        .map(|o| Broker::new(trace, o))
        .collect();
    let paths: Vec<RequestPath<'_>> = brokers.iter().map(Broker::path).collect();
    let options = |pass| ReplayOptions {
        closed_loop: closed,
        expiry_task_ms: trace.task_ms,
        clients: None,
        pass,
    };
    let new = |pass| ReplayKernel::new(&trace.pairs, &paths, options(pass)).unwrap();
    // kernels[0] replays the request quota (all of them without `split`), the last the rest
    let mut kernels = if split {
        vec![new(QuotaPass::Request), new(QuotaPass::Bytes)]
    } else {
        vec![new(QuotaPass::All)]
    };
    let all = entities();
    let mut out = Vec::new();
    let mut measured = Vec::new();
    let mut cols: Columns = Default::default();
    let mut cuts = trace.cuts.iter().cycle();
    let mut next_cut = *cuts.next().unwrap();
    let flush = |kernels: &mut [ReplayKernel], cols: &mut Columns, out: &mut Vec<Row>| {
        let mut fed = kernels[0].feed(&events(cols)).unwrap();
        if let [_, bytes] = kernels {
            let given = fed.request_throttle_ms.clone();
            fed = bytes
                .feed(&Events {
                    request_throttle_ms: &given,
                    ..events(cols)
                })
                .unwrap();
        }
        out.extend(rows(&fed));
        *cols = Default::default();
    };
    let mut t = 0i64;
    for (index, item) in trace.items.iter().enumerate() {
        t += item.dt();
        if !matches!(item, Item::Event(_)) {
            flush(&mut kernels, &mut cols, &mut out);
        }
        match item {
            Item::Event(e) => {
                cols.0.push(t);
                cols.1.push(e.pair as i32);
                cols.2.push(e.kind);
                cols.3.push(e.bytes);
                cols.4.push(e.thread_ns);
                cols.5.push(e.acks);
                if cols.0.len() >= next_cut {
                    flush(&mut kernels, &mut cols, &mut out);
                    next_cut = *cuts.next().unwrap();
                }
            }
            Item::Quota(_, s, qt, e, v) => {
                for k in &mut kernels {
                    match v {
                        Some(v) => k.set_quota(*s, *qt, &all[*e], *v, t).unwrap(),
                        None => k.remove_quota(*s, *qt, &all[*e], t).unwrap(),
                    }
                }
            }
            Item::Expire(_) => kernels
                .iter_mut()
                .for_each(|k| k.expire_sensors(t).unwrap()),
            Item::Measure(_, s, qt, p) => {
                let k = if *qt == QuotaType::Request {
                    &mut kernels[0]
                } else {
                    kernels.last_mut().unwrap()
                };
                let rate = k.measure(*s, *qt, *p, t).unwrap();
                measured.push((index, rate.map(f64::to_bits)));
            }
            Item::NoThrottle(_, p, ns) => {
                for k in &mut kernels {
                    k.record_no_throttle(*p, *ns, t).unwrap();
                }
            }
        }
    }
    flush(&mut kernels, &mut cols, &mut out);
    for k in &mut kernels {
        out.extend(rows(&k.finish()));
        assert_eq!(k.pending(), 0);
    }
    out.sort_by_key(|r| (r.0, r.1));
    (out, measured)
}

/// The kernel's throttles and measurements on `trace` are the request path's, event for
/// event.
fn equals_the_request_path(trace: &Trace, closed_loop: bool) -> Result<(), TestCaseError> {
    let (expected, measured) = oracle(trace, closed_loop);
    let (got, got_measured) = kernel(trace, closed_loop);
    prop_assert_eq!(got.len(), expected.len());
    for (g, e) in got.iter().zip(&expected) {
        prop_assert_eq!(g, e);
    }
    prop_assert_eq!(got_measured, measured);
    Ok(())
}

proptest! {
    #![proptest_config(fixed(400))]

    #[test]
    fn open_loop_equals_the_request_path(trace in trace()) {
        equals_the_request_path(&trace, false)?;
    }

    #[test]
    fn closed_loop_equals_the_request_path(trace in trace()) {
        equals_the_request_path(&trace, true)?;
    }

    /// A request pass then a byte pass given its throttles (the replay split by sensor)
    /// decide what one open-loop pass decides, event for event.
    #[test]
    fn two_quota_passes_equal_one(trace in trace()) {
        let (one, measured) = kernel(&trace, false);
        let (two, two_measured) = replayed(&trace, false, true);
        prop_assert_eq!(two, one);
        prop_assert_eq!(two_measured, measured);
    }
}

/// The random traces reach every branch: each quota applying a throttle, closed-loop
/// delays, sensors removed by expiry (then measured empty: no sensor until the pair's
/// next request), and produce and fetch throttles that Kafka's int conversion wraps
/// negative ("not throttled").
#[test]
fn traces_cover_every_branch() {
    use proptest::strategy::ValueTree;
    use proptest::test_runner::TestRunner;
    let mut runner = TestRunner::new(fixed(200));
    let mut by = [0usize; 3];
    let mut delayed = 0;
    let mut wrapped = 0;
    let mut expired = 0;
    let mut measured_empty = 0;
    for _ in 0..200 {
        let trace = trace().new_tree(&mut runner).unwrap().current();
        let (rows, _, removed) = oracle_counting(&trace, true);
        let (open, measured, _) = oracle_counting(&trace, false);
        for r in &rows {
            if r.6 >= 0 {
                by[r.6 as usize] += 1;
            }
        }
        delayed += rows.iter().zip(&open).filter(|(c, o)| c.7 > o.7).count();
        wrapped += open.iter().filter(|r| r.2 < 0 || r.3 < 0).count();
        expired += removed;
        // a sensor measured live, then measured absent
        let mut live = std::collections::HashSet::new();
        for (k, m) in &measured {
            let Item::Measure(_, s, t, p) = &trace.items[*k] else {
                unreachable!("a measurement comes from a Measure item");
            };
            if m.is_some() {
                live.insert((*s, *t, *p));
            } else if live.remove(&(*s, *t, *p)) {
                measured_empty += 1;
            }
        }
    }
    assert!(by.iter().all(|&n| n > 50), "throttles by type: {by:?}");
    assert!(delayed > 100, "closed loop delayed {delayed} events");
    assert!(expired > 50, "expiry removed {expired} sensors");
    assert!(
        measured_empty > 10,
        "{measured_empty} sensors measured empty"
    );
    assert!(
        wrapped > 20,
        "{wrapped} produce or fetch throttles wrapped negative"
    );
}

fn one_broker(quota: f64) -> Broker {
    let window = WindowConfig::QUOTA_DEFAULT;
    let managers = QuotaType::ALL.map(|t| QuotaManager::new(t, window, 3_600_000).unwrap());
    let user = QuotaEntity::parse(Some("u"), None).unwrap();
    for m in &managers {
        m.set_quota(&user, quota).unwrap();
    }
    Broker { managers }
}

fn events<'a>(cols: &'a Columns) -> Events<'a> {
    Events {
        time_ms: &cols.0,
        pair: &cols.1,
        kind: &cols.2,
        bytes: &cols.3,
        thread_ns: &cols.4,
        acks: &cols.5,
        partitions: &[],
        strict: &[],
        topic_offsets: &[],
        topic_partitions: &[],
        request_throttle_ms: &[],
    }
}

fn batch(start: i64) -> Columns {
    (
        vec![start, start + 10, start + 10, start + 500],
        vec![0, 1, 0, 1],
        vec![0, 1, 2, 0],
        vec![50_000.0, 70_000.0, 0.0, 9_000.0],
        vec![4e6, f64::NAN, 2e6, 1e6],
        vec![-1, -1, -1, 0],
    )
}

/// A change that makes a good batch bad.
type Spoil = Box<dyn Fn(&mut Columns)>;

#[test]
fn bad_input_is_refused_naming_the_value_and_changes_nothing() {
    let broker = one_broker(1000.0);
    let pairs = [("u", "a"), ("u", "b")];
    let new = || ReplayKernel::new(&pairs, &[broker.path()], ReplayOptions::default()).unwrap();
    let (mut k, mut fresh) = (new(), new());
    let first = batch(0);
    assert_eq!(k.feed(&events(&first)), fresh.feed(&events(&first)));
    let bad: Vec<(Spoil, &str)> = vec![
        (
            Box::new(|c| c.1.pop().map(drop).unwrap_or(())),
            "differ in length: time_ms 4, pair 3",
        ),
        (Box::new(|c| c.2[2] = 4), "invalid kind 4 at row 2"),
        (
            Box::new(|c| c.2[2] = 3),
            "row 2 is a controller mutation (kind 3) but the batch has no partitions",
        ),
        (Box::new(|c| c.1[1] = 2), "invalid pair 2 at row 1"),
        (Box::new(|c| c.1[3] = -7), "invalid pair -7 at row 3"),
        (
            Box::new(|c| c.3[0] = f64::NAN),
            "bytes at row 0: invalid usage value NaN",
        ),
        (
            Box::new(|c| c.3[1] = -1.0),
            "bytes at row 1: invalid usage value -1.0",
        ),
        (
            Box::new(|c| c.4[0] = f64::INFINITY),
            "thread_ns at row 0: invalid usage value inf",
        ),
        (
            Box::new(|c| c.0[2] = 1005),
            "time_ms[2] = 1005 is before time_ms[1] = 1010",
        ),
        (
            Box::new(|c| c.0[0] = 499),
            "time_ms[0] = 499 is before the last time",
        ),
    ];
    for (spoil, message) in bad {
        let mut cols = batch(1000);
        spoil(&mut cols);
        let err = k.feed(&events(&cols)).unwrap_err();
        assert!(matches!(err, Error::InvalidUsage(_)), "{err:?}");
        assert!(err.to_string().contains(message), "{err} / {message}");
    }
    let e = k.set_quota(0, QuotaType::Produce, &entities()[0], f64::NAN, 2000);
    assert!(matches!(e, Err(Error::InvalidQuota(_))));
    assert!(k.measure(1, QuotaType::Produce, 0, 2000).is_err());
    assert!(k.record_no_throttle(2, 1.0, 2000).is_err());
    assert!(k.expire_sensors(10).is_err());
    // nothing changed: the same as a kernel that saw only the good batches
    let good = batch(1000);
    assert_eq!(k.feed(&events(&good)), fresh.feed(&events(&good)));
    assert_eq!(k.summaries(), fresh.summaries());
    let options = ReplayOptions {
        expiry_task_ms: Some(0),
        ..ReplayOptions::default()
    };
    assert!(matches!(
        ReplayKernel::new(&pairs, &[broker.path()], options),
        Err(Error::InvalidConfig(_))
    ));
}

#[test]
fn summaries_by_hand() {
    // 1000 B/s produce quota for user u (11 x 1 s): 20 000 B at t=0 throttles 10 000 ms
    // (2000 B/s over 10 s), then small requests.
    let broker = one_broker(1000.0);
    let pairs = [("u", "a")];
    let mut k = ReplayKernel::new(&pairs, &[broker.path()], ReplayOptions::default()).unwrap();
    let cols: Columns = (
        vec![0, 100, 1500, 2500],
        vec![0; 4],
        vec![0; 4],
        vec![20_000.0, 100.0, 100.0, 100.0],
        vec![f64::NAN; 4],
        vec![-1; 4],
    );
    let out = k.feed(&events(&cols)).unwrap();
    assert_eq!(out.throttle_ms[0], 10_000);
    assert_eq!(out.throttled_by[0], quota_code(QuotaType::Produce));
    let s = &k.summaries()[0];
    assert_eq!((s.user.as_str(), s.client_id.as_str()), ("u", ""));
    assert_eq!(s.quota_type, QuotaType::Produce);
    assert_eq!(s.quota, Some(1000.0));
    assert_eq!((s.requests, s.bytes, s.usage), (4, 20_300, 20_300));
    assert_eq!(
        s.throttled_requests as usize,
        out.throttle_ms.iter().filter(|&&t| t > 0).count()
    );
    let mut sorted: Vec<i64> = out
        .throttle_ms
        .iter()
        .map(|&t| i64::from(t.max(0)))
        .collect();
    sorted.sort();
    assert_eq!(s.p99_throttle_ms, sorted[3]);
    assert_eq!(s.p50_throttle_ms, sorted[1]);
    assert_eq!(s.max_throttle_ms, 10_000);
    assert_eq!(s.total_throttle_ms, sorted.iter().sum::<i64>());
    // the peak: all 20 300 B within 10 windows, over 10 s
    assert_eq!(s.peak_rate, 2030.0);
    assert_eq!(s.utilization(), 2.03);
    assert_eq!(s.mean_added_latency_ms(), 0.0);
}

#[test]
fn quota_passes_refuse_what_they_cannot_replay() {
    let broker = one_broker(1e6);
    let pairs = [("u", "a"), ("u", "b")];
    let closed = ReplayOptions {
        closed_loop: true,
        pass: QuotaPass::Request,
        ..ReplayOptions::default()
    };
    let e = ReplayKernel::new(&pairs, &[broker.path()], closed)
        .unwrap_err()
        .to_string();
    assert!(
        e.contains("invalid pass Request") && e.contains("closed-loop"),
        "{e}"
    );
    let good = batch(1000);
    let with = |given: &'static [i32]| Events {
        request_throttle_ms: given,
        ..events(&good)
    };
    let bytes = ReplayOptions {
        pass: QuotaPass::Bytes,
        ..ReplayOptions::default()
    };
    let mut k = ReplayKernel::new(&pairs, &[broker.path()], bytes).unwrap();
    let e = k.feed(&with(&[0; 3])).unwrap_err().to_string();
    assert!(
        e.contains("request_throttle_ms has 3 values") && e.contains("1 x 4 = 4"),
        "{e}"
    );
    let e = k.feed(&events(&good)).unwrap_err().to_string();
    assert!(e.contains("request_throttle_ms has 0 values"), "{e}");
    assert_eq!(k.pending(), 0);
    k.feed(&with(&[0; 4])).unwrap();
    let mut all = ReplayKernel::new(&pairs, &[broker.path()], ReplayOptions::default()).unwrap();
    let e = all.feed(&with(&[0; 4])).unwrap_err().to_string();
    assert!(e.contains("only a byte pass"), "{e}");
}
