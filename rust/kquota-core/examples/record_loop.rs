//! Records `iterations` times round robin over `keys` clients (default 10 000 and
//! 1 000 000), `per_ms` records per millisecond of the clock (default 64, as the record
//! benchmark; a huge one keeps the clock still, so no record starts a new sample), for
//! counting instructions per record with cachegrind:
//!
//! ```text
//! cargo build --release -p kquota-core --example record_loop
//! valgrind --tool=cachegrind target/release/examples/record_loop 10000 1000000
//! valgrind --tool=cachegrind target/release/examples/record_loop 10000 2000000
//! ```
//!
//! The difference of the two totals over 10^6 is the cost of one record (the set-up,
//! which creates the clients, is the same in both).

use std::hint::black_box;

use kquota_core::{QuotaEntity, QuotaManager, QuotaType};

fn main() {
    let mut args = std::env::args()
        .skip(1)
        .map(|a| a.parse::<usize>().unwrap());
    let keys = args.next().unwrap_or(10_000);
    let iterations = args.next().unwrap_or(1_000_000);
    let per_ms = args.next().unwrap_or(64);
    let m = QuotaManager::with_defaults(QuotaType::Produce);
    m.set_quota(&QuotaEntity::parse(None, Some("<default>")).unwrap(), 1e12)
        .unwrap();
    let ids: Vec<String> = (0..keys).map(|i| format!("client-{i}")).collect();
    for id in &ids {
        m.record("alice", id, 1.0, 0).unwrap();
    }
    let start = std::time::Instant::now();
    for i in 0..iterations {
        let id = &ids[i % keys];
        black_box(m.record("alice", id, 100.0, (i / per_ms) as i64).unwrap());
    }
    let ns = start.elapsed().as_nanos() as f64 / iterations.max(1) as f64;
    eprintln!("{ns:.1} ns per record (the loop alone)");
}
