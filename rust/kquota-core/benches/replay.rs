//! The replay kernel: one broker's requests replayed in open loop, one scenario, 10 000
//! entities (distinct `(user, client-id)` pairs, each with its own produce, fetch and
//! request sensor under `<default>` user + `<default>` client quotas), ns per request on
//! one core, in the steady state.
//!
//! Baseline measured in the same run: the per-request path, [`RequestPath::record`] over
//! three [`QuotaManager`]s, one request at a time by name (what the back-test's Python
//! kernel runs per request, without the Python around it).
//!
//! The trace (`common/replay_trace.rs`): 2^20 requests, pairs uniform at random; 50 %
//! produce (`acks=0` for one in eight), 35 % fetch, 15 % other; sizes of 100 B to 20 kB,
//! handler times of 50 us to 2 ms; the quotas (scaled with the rate) throttle a few
//! percent of the requests. Longer runs repeat it later in time. Two rates:
//!
//! * `replay_open_10k_entities`: 10 requests per ms (10^4 requests/s, the low end of a
//!   busy broker's range), so each entity sends about one request a second: with Kafka's
//!   1 s windows nearly every record opens a new window of its sensor (the worst case for
//!   the kernel: a ring advance, a purge check and a full window sum per record);
//! * `replay_open_10k_entities_100_per_ms`: 100 requests per ms (10^5 requests/s, the
//!   high end), about ten requests per entity per second, as a producer batching to a
//!   busy broker or a consumer long-polling sends: most records land in their sensor's
//!   current window.
//!
//! Both sides are timed in the steady state: the kernel (and the managers) are created
//! once per benchmark and first fed 2^20 requests (100 s or 10 s of trace, every ring
//! full), untimed; each timed run then continues the trace where the last one stopped,
//! so sensors are not created or grown while timed. The kernel is fed 65 536 requests a
//! batch, and its time includes writing the batch's time column and the outputs.

use std::hint::black_box;
use std::time::{Duration, Instant};

use criterion::{criterion_group, criterion_main, Criterion};
use kquota_core::{ApiKind, QuotaManager, ReplayKernel, ReplayOptions, Request, RequestPath};

#[path = "common/replay_trace.rs"]
mod replay_trace;
use replay_trace::{managers, Trace, TRACE};

const ENTITIES: usize = 10_000;
const BATCH: usize = 1 << 16;

/// The kernel, fed the trace from request `done` on.
struct KernelRun<'a> {
    trace: &'a Trace,
    per_ms: i64,
    kernel: ReplayKernel,
    times: Vec<i64>,
    done: u64,
}

impl<'a> KernelRun<'a> {
    fn new(trace: &'a Trace, per_ms: i64) -> Self {
        let [p, f, r] = &managers(per_ms);
        let path = RequestPath::new(p, f, r).unwrap();
        let kernel = ReplayKernel::new(&trace.pairs, &[path], ReplayOptions::default()).unwrap();
        let mut run = KernelRun {
            trace,
            per_ms,
            kernel,
            times: vec![0; BATCH],
            done: 0,
        };
        run.feed(TRACE as u64);
        run
    }

    /// Feeds the next `count` requests; returns how many were throttled.
    fn feed(&mut self, count: u64) -> usize {
        let t = self.trace;
        let mut throttled = 0;
        let end = self.done + count;
        while self.done < end {
            let at = (self.done % TRACE as u64) as usize;
            let n = (end - self.done).min(BATCH as u64).min((TRACE - at) as u64) as usize;
            for (k, slot) in self.times[..n].iter_mut().enumerate() {
                *slot = (self.done + k as u64) as i64 / self.per_ms;
            }
            let events = t.events(at, &self.times[..n]);
            let out = black_box(self.kernel.feed(&events).unwrap());
            throttled += out.throttle_ms.iter().filter(|&&x| x > 0).count();
            self.done += n as u64;
        }
        throttled
    }
}

/// The per-request path over the managers, fed the trace from request `done` on.
struct PathRun<'a> {
    trace: &'a Trace,
    per_ms: i64,
    managers: [QuotaManager; 3],
    kinds: Vec<ApiKind>,
    done: u64,
}

impl<'a> PathRun<'a> {
    fn new(trace: &'a Trace, per_ms: i64) -> Self {
        let kinds = trace
            .kind
            .iter()
            .map(|&k| ["produce", "fetch", "other"][k as usize].parse().unwrap())
            .collect();
        let mut run = PathRun {
            trace,
            per_ms,
            managers: managers(per_ms),
            kinds,
            done: 0,
        };
        run.feed(TRACE as u64);
        run
    }

    fn feed(&mut self, count: u64) {
        let t = self.trace;
        let [p, f, r] = &self.managers;
        let path = RequestPath::new(p, f, r).unwrap();
        for i in self.done..self.done + count {
            let at = (i % TRACE as u64) as usize;
            let (user, client) = &t.pairs[t.pair[at] as usize];
            let request = Request {
                kind: self.kinds[at],
                bytes: t.bytes[at],
                thread_time_ns: Some(t.thread_ns[at]),
                acks: t.acks[at],
            };
            black_box(
                path.record(user, client, &request, i as i64 / self.per_ms)
                    .unwrap(),
            );
        }
        self.done += count;
    }
}

fn bench_rate(c: &mut Criterion, trace: &Trace, group: &str, per_ms: i64) {
    let mut g = c.benchmark_group(group);
    g.sample_size(10);
    let mut kernel = KernelRun::new(trace, per_ms);
    g.bench_function("kquota", |b| {
        b.iter_custom(|iters| {
            let start = Instant::now();
            kernel.feed(iters);
            start.elapsed()
        })
    });
    let mut path = PathRun::new(trace, per_ms);
    g.bench_function("request_path", |b| {
        b.iter_custom(|iters| {
            let start = Instant::now();
            path.feed(iters);
            start.elapsed()
        })
    });
    g.finish();
    // How much of the trace the quotas throttle (printed once, for the record).
    let mut kernel = KernelRun::new(trace, per_ms);
    let throttled = kernel.feed(TRACE as u64);
    println!(
        "{group}: {per_ms} requests/ms, {:.1} % of {TRACE} requests throttled (steady state)",
        100.0 * throttled as f64 / TRACE as f64
    );
}

fn bench(c: &mut Criterion) {
    let trace = replay_trace::trace(ENTITIES);
    bench_rate(c, &trace, "replay_open_10k_entities", 10);
    bench_rate(c, &trace, "replay_open_10k_entities_100_per_ms", 100);
}

criterion_group! {
    name = benches;
    config = Criterion::default()
        .warm_up_time(Duration::from_secs(1))
        .measurement_time(Duration::from_secs(3));
    targets = bench
}
criterion_main!(benches);
