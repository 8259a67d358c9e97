//! The replay benchmark's trace and quotas, shared by `benches/replay.rs` and
//! `examples/replay_loop.rs` (included by path; not a bench target of its own).
//!
//! `TRACE` requests, pairs uniform at random over `entities`; 50 % produce (`acks=0` for
//! one in eight), 35 % fetch, 15 % other; sizes of 100 B to 20 kB, handler times of 50 us
//! to 2 ms. The same numbers on every run (xorshift from a fixed seed).

use kquota_core::replay::Events;
use kquota_core::{QuotaEntity, QuotaManager, QuotaType};

pub const TRACE: usize = 1 << 20;

pub struct Trace {
    pub pairs: Vec<(String, String)>,
    pub pair: Vec<i32>,
    pub kind: Vec<i8>,
    pub bytes: Vec<f64>,
    pub thread_ns: Vec<f64>,
    pub acks: Vec<i16>,
}

impl Trace {
    /// The events `at..at + times.len()` of the trace at `times` (no mutations).
    pub fn events<'a>(&'a self, at: usize, times: &'a [i64]) -> Events<'a> {
        let n = times.len();
        Events {
            time_ms: times,
            pair: &self.pair[at..at + n],
            kind: &self.kind[at..at + n],
            bytes: &self.bytes[at..at + n],
            thread_ns: &self.thread_ns[at..at + n],
            acks: &self.acks[at..at + n],
            partitions: &[],
            strict: &[],
            topic_offsets: &[],
            topic_partitions: &[],
            request_throttle_ms: &[],
        }
    }
}

pub fn trace(entities: usize) -> Trace {
    let mut x: u64 = 0x9E37_79B9_7F4A_7C15;
    let mut next = move || {
        x ^= x << 13;
        x ^= x >> 7;
        x ^= x << 17;
        x
    };
    let pairs = (0..entities)
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
        t.pair.push((next() % entities as u64) as i32);
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

/// The `<default>` quotas for a trace of `per_ms` requests per ms over 10^4 entities,
/// scaled so that they throttle a few percent of the requests at either rate (about
/// 4.6 % at 10 per ms and 1.9 % at 100; the bench prints it).
pub fn managers(per_ms: i64) -> [QuotaManager; 3] {
    let defaults = QuotaEntity::parse(Some("<default>"), Some("<default>")).unwrap();
    let scale = if per_ms >= 100 { 7.0 } else { 1.0 };
    QuotaType::ALL.map(|t| {
        let m = QuotaManager::with_defaults(t);
        let quota = scale
            * match t {
                QuotaType::Produce => 14_000.0,
                QuotaType::Fetch => 10_500.0,
                QuotaType::Request => 0.175,
            };
        m.set_quota(&defaults, quota).unwrap();
        m
    })
}
