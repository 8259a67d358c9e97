//! The replay kernel: one broker's requests replayed in open loop, one scenario, 10 000
//! entities (distinct `(user, client-id)` pairs, each with its own produce, fetch and
//! request sensor under `<default>` user + `<default>` client quotas), ns per request on
//! one core.
//!
//! Baseline measured in the same run: the per-request path, [`RequestPath::record`] over
//! three [`QuotaManager`]s, one request at a time by name (what the back-test's Python
//! kernel runs per request, without the Python around it).
//!
//! The trace: 2^20 requests, 10 per ms (each pair about once a second), pairs uniform at
//! random; 50 % produce (`acks=0` for one in eight), 35 % fetch, 15 % other; sizes of
//! 100 B to 20 kB, handler times of 50 us to 2 ms; the quotas throttle a few percent of
//! the requests. Longer runs repeat it later in time. The kernel is fed 65 536 requests a
//! batch, and its time includes writing the batch's time column and the outputs.

use std::hint::black_box;
use std::time::{Duration, Instant};

use criterion::{criterion_group, criterion_main, Criterion};
use kquota_core::replay::Events;
use kquota_core::{
    QuotaEntity, QuotaManager, QuotaType, ReplayKernel, ReplayOptions, Request, RequestPath,
};

const ENTITIES: usize = 10_000;
const TRACE: usize = 1 << 20;
const BATCH: usize = 1 << 16;
/// Requests per ms.
const PER_MS: i64 = 10;

struct Trace {
    pairs: Vec<(String, String)>,
    pair: Vec<i32>,
    kind: Vec<i8>,
    bytes: Vec<f64>,
    thread_ns: Vec<f64>,
    acks: Vec<i16>,
}

fn trace() -> Trace {
    let mut x: u64 = 0x9E37_79B9_7F4A_7C15;
    let mut next = move || {
        x ^= x << 13;
        x ^= x >> 7;
        x ^= x << 17;
        x
    };
    let pairs = (0..ENTITIES)
        .map(|i| (format!("user-{}", i % 1000), format!("client-{i}")))
        .collect();
    let mut t = Trace {
        pairs,
        pair: Vec::with_capacity(TRACE),
        kind: Vec::with_capacity(TRACE),
        bytes: Vec::with_capacity(TRACE),
        thread_ns: Vec::with_capacity(TRACE),
        acks: Vec::with_capacity(TRACE),
    };
    for _ in 0..TRACE {
        t.pair.push((next() % ENTITIES as u64) as i32);
        let k = next() % 100;
        t.kind.push(if k < 50 {
            0
        } else if k < 85 {
            1
        } else {
            2
        });
        t.bytes.push((100 + next() % 19_900) as f64);
        t.thread_ns.push((50_000 + next() % 1_950_000) as f64);
        t.acks.push(if next() % 8 == 0 { 0 } else { -1 });
    }
    t
}

fn managers() -> [QuotaManager; 3] {
    let defaults = QuotaEntity::parse(Some("<default>"), Some("<default>")).unwrap();
    QuotaType::ALL.map(|t| {
        let m = QuotaManager::with_defaults(t);
        let quota = match t {
            QuotaType::Produce => 14_000.0,
            QuotaType::Fetch => 10_500.0,
            QuotaType::Request => 0.175,
        };
        m.set_quota(&defaults, quota).unwrap();
        m
    })
}

fn time_of(i: u64) -> i64 {
    i as i64 / PER_MS
}

fn bench(c: &mut Criterion) {
    let trace = trace();
    let mut g = c.benchmark_group("replay_open_10k_entities");
    g.sample_size(10);
    g.bench_function("kquota", |b| {
        b.iter_custom(|iters| {
            let [p, f, r] = &managers();
            let path = RequestPath::new(p, f, r).unwrap();
            let mut kernel =
                ReplayKernel::new(&trace.pairs, &[path], ReplayOptions::default()).unwrap();
            let mut times = vec![0i64; BATCH];
            let mut done = 0u64;
            let start = Instant::now();
            while done < iters {
                let at = (done % TRACE as u64) as usize;
                let n = (iters - done).min(BATCH as u64).min((TRACE - at) as u64) as usize;
                for (k, slot) in times[..n].iter_mut().enumerate() {
                    *slot = time_of(done + k as u64);
                }
                let events = Events {
                    time_ms: &times[..n],
                    pair: &trace.pair[at..at + n],
                    kind: &trace.kind[at..at + n],
                    bytes: &trace.bytes[at..at + n],
                    thread_ns: &trace.thread_ns[at..at + n],
                    acks: &trace.acks[at..at + n],
                };
                black_box(kernel.feed(&events).unwrap());
                done += n as u64;
            }
            start.elapsed()
        })
    });
    g.bench_function("request_path", |b| {
        b.iter_custom(|iters| {
            let [p, f, r] = &managers();
            let path = RequestPath::new(p, f, r).unwrap();
            let start = Instant::now();
            for i in 0..iters {
                let at = (i % TRACE as u64) as usize;
                let (user, client) = &trace.pairs[trace.pair[at] as usize];
                let request = Request {
                    kind: ["produce", "fetch", "other"][trace.kind[at] as usize]
                        .parse()
                        .unwrap(),
                    bytes: trace.bytes[at],
                    thread_time_ns: Some(trace.thread_ns[at]),
                    acks: trace.acks[at],
                };
                black_box(path.record(user, client, &request, time_of(i)).unwrap());
            }
            start.elapsed()
        })
    });
    g.finish();

    // How much of the trace the quotas throttle (printed once, for the record).
    let [p, f, r] = &managers();
    let path = RequestPath::new(p, f, r).unwrap();
    let mut kernel = ReplayKernel::new(&trace.pairs, &[path], ReplayOptions::default()).unwrap();
    let times: Vec<i64> = (0..TRACE as u64).map(time_of).collect();
    let out = kernel
        .feed(&Events {
            time_ms: &times,
            pair: &trace.pair,
            kind: &trace.kind,
            bytes: &trace.bytes,
            thread_ns: &trace.thread_ns,
            acks: &trace.acks,
        })
        .unwrap();
    let throttled = out.throttle_ms.iter().filter(|&&t| t > 0).count();
    println!(
        "replay trace: {} requests, {:.1} % throttled",
        out.len(),
        100.0 * throttled as f64 / out.len() as f64
    );
}

criterion_group! {
    name = benches;
    config = Criterion::default()
        .warm_up_time(Duration::from_secs(1))
        .measurement_time(Duration::from_secs(3));
    targets = bench
}
criterion_main!(benches);
