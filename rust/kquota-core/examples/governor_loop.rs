//! The record benchmark's peer, `governor`'s keyed rate limiter, in the same loop as
//! `record_loop` (`iterations` checks round robin over `keys` keys), for comparing
//! instructions and cache misses per operation with cachegrind:
//!
//! ```text
//! cargo build --release -p kquota-core --example governor_loop
//! valgrind --tool=cachegrind target/release/examples/governor_loop 10000 1000000
//! valgrind --tool=cachegrind target/release/examples/governor_loop 10000 2000000
//! ```

use std::hint::black_box;

fn main() {
    let mut args = std::env::args()
        .skip(1)
        .map(|a| a.parse::<usize>().unwrap());
    let keys = args.next().unwrap_or(10_000);
    let iterations = args.next().unwrap_or(1_000_000);
    let per_second = std::num::NonZeroU32::new(u32::MAX).unwrap();
    let limiter: governor::DefaultKeyedRateLimiter<String> =
        governor::RateLimiter::keyed(governor::Quota::per_second(per_second));
    let ids: Vec<String> = (0..keys).map(|i| format!("client-{i}")).collect();
    for id in &ids {
        let _ = limiter.check_key(id);
    }
    let start = std::time::Instant::now();
    for i in 0..iterations {
        black_box(limiter.check_key(&ids[i % keys]).is_ok());
    }
    let ns = start.elapsed().as_nanos() as f64 / iterations.max(1) as f64;
    eprintln!("{ns:.1} ns per check (the loop alone)");
}
