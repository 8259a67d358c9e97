//! Replays `requests` requests of the replay bench's trace (10 000 entities, open loop,
//! one scenario, `per_ms` requests per ms; default 10) through the replay kernel, for
//! counting instructions and cache misses per request with cachegrind, or timing it
//! without criterion:
//!
//! ```text
//! cargo build --release -p kquota-core --example replay_loop
//! valgrind --tool=cachegrind --cache-sim=yes target/release/examples/replay_loop 2000000
//! valgrind --tool=cachegrind --cache-sim=yes target/release/examples/replay_loop 4000000
//! target/release/examples/replay_loop 50000000 10 time
//! target/release/examples/replay_loop 50000000 10 time 1000
//! ```
//!
//! The last argument, the number of entities, tells how much of the time is memory: with
//! 1000 entities every sensor stays in cache.
//!
//! The difference of two totals over the difference of the requests is the cost of one
//! request (the set-up is the same in both). The trace and quotas are the bench's
//! (`benches/common/replay_trace.rs`); the quotas suit 10^4 entities.

use std::hint::black_box;
use std::time::Instant;

use kquota_core::{ReplayKernel, ReplayOptions, RequestPath};

#[path = "../benches/common/replay_trace.rs"]
mod replay_trace;
use replay_trace::{managers, TRACE};

const BATCH: usize = 1 << 16;

fn main() {
    let mut args = std::env::args().skip(1);
    let requests: u64 = args.next().map_or(2_000_000, |a| a.parse().unwrap());
    let per_ms: i64 = args.next().map_or(10, |a| a.parse().unwrap());
    let timed = args.next().is_some_and(|a| a == "time");
    let entities: usize = args.next().map_or(10_000, |a| a.parse().unwrap());
    let t = replay_trace::trace(entities);
    let [p, f, r] = managers(per_ms);
    let path = RequestPath::new(&p, &f, &r).unwrap();
    let mut kernel = ReplayKernel::new(&t.pairs, &[path], ReplayOptions::default()).unwrap();
    let mut times = vec![0i64; BATCH];
    let mut done: u64 = 0;
    let mut throttled = 0usize;
    let mut start = Instant::now();
    let mut cpu_start = cpu_seconds();
    let warm = if timed { TRACE as u64 } else { 0 };
    while done < warm + requests {
        if done == warm {
            start = Instant::now();
            cpu_start = cpu_seconds();
        }
        let at = (done % TRACE as u64) as usize;
        let end = if done < warm { warm } else { warm + requests };
        let n = (end - done).min(BATCH as u64).min((TRACE - at) as u64) as usize;
        for (k, slot) in times[..n].iter_mut().enumerate() {
            *slot = (done + k as u64) as i64 / per_ms;
        }
        let events = t.events(at, &times[..n]);
        let out = black_box(kernel.feed(&events).unwrap());
        throttled += out.throttle_ms.iter().filter(|&&t| t > 0).count();
        done += n as u64;
    }
    if timed {
        let ns = start.elapsed().as_nanos() as f64 / requests as f64;
        let cpu = (cpu_seconds() - cpu_start) * 1e9 / requests as f64;
        println!(
            "{ns:.1} ns per request, {cpu:.1} ns of CPU ({per_ms} per ms, {throttled} throttled)"
        );
    } else {
        println!("{throttled} throttled");
    }
}

/// This process's user + system CPU time in seconds (Linux, from /proc; 0 elsewhere): on
/// a loaded machine it moves less than the wall clock.
fn cpu_seconds() -> f64 {
    let Ok(stat) = std::fs::read_to_string("/proc/self/stat") else {
        return 0.0;
    };
    // the fields after the command's closing parenthesis; utime and stime are 14th and 15th
    let rest = stat.rsplit_once(')').map_or("", |(_, r)| r);
    let fields: Vec<&str> = rest.split_whitespace().collect();
    let ticks: f64 =
        fields[11].parse::<f64>().unwrap_or(0.0) + fields[12].parse::<f64>().unwrap_or(0.0);
    ticks / 100.0
}
