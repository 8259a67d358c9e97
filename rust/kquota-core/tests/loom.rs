//! Model checks of the sensors' copy-on-write protocol with loom: every interleaving of
//! concurrent records (with sample rollover) and measurements (with purges) must end in
//! a state some sequential order of the same operations produces, and lose nothing.
//!
//! Run with `RUSTFLAGS="--cfg loom" cargo test -p kquota-core --release --test loom`.
#![cfg(loom)]

use kquota_core::quota::check_bound;
use kquota_core::samples::Samples;
use kquota_core::{SampledRate, WindowConfig};
use loom::sync::Arc;
use loom::thread;

const BOUND: f64 = 1e9;

#[derive(Clone, Copy, Debug)]
enum Op {
    Record(f64, i64),
    Measure(i64),
}

fn apply(samples: &mut Samples, cfg: &WindowConfig, op: Op) {
    match op {
        Op::Record(v, t) => {
            // A checked record: record, then the measurement of the check (which purges).
            samples.record(cfg, v, t);
            check_bound(samples, cfg, BOUND, t);
        }
        Op::Measure(t) => {
            samples.measure_rate(cfg, t);
        }
    }
}

fn run(rate: &SampledRate, op: Op) {
    match op {
        Op::Record(v, t) => {
            rate.record(v, t).unwrap();
        }
        Op::Measure(t) => {
            rate.measure(t);
        }
    }
}

/// Every final state of a sequential execution of `a` (in order) interleaved with `b`.
fn sequential_outcomes(cfg: &WindowConfig, a: &[Op], b: &[Op]) -> Vec<Samples> {
    fn go(cfg: &WindowConfig, s: Samples, a: &[Op], b: &[Op], out: &mut Vec<Samples>) {
        if a.is_empty() && b.is_empty() {
            out.push(s);
            return;
        }
        if let Some((&op, rest)) = a.split_first() {
            let mut next = s.clone();
            apply(&mut next, cfg, op);
            go(cfg, next, rest, b, out);
        }
        if let Some((&op, rest)) = b.split_first() {
            let mut next = s;
            apply(&mut next, cfg, op);
            go(cfg, next, a, rest, out);
        }
    }
    let mut out = Vec::new();
    go(cfg, Samples::new(), a, b, &mut out);
    out
}

fn check_linearizable(cfg: WindowConfig, a: Vec<Op>, b: Vec<Op>) {
    let allowed = sequential_outcomes(&cfg, &a, &b);
    loom::model(move || {
        let rate = Arc::new(SampledRate::new(cfg, Some(BOUND)).unwrap());
        let other = rate.clone();
        let b = b.clone();
        let worker = thread::spawn(move || {
            for op in b {
                run(&other, op);
            }
        });
        for &op in &a {
            run(&rate, op);
        }
        worker.join().unwrap();
        let end = rate.samples_snapshot();
        assert!(allowed.contains(&end), "not a sequential outcome: {end:?}");
    });
}

#[test]
fn records_racing_across_a_rollover() {
    // 2 samples of 10 ms: the second record of each thread starts a new sample.
    let cfg = WindowConfig::new(2, 10).unwrap();
    check_linearizable(
        cfg,
        vec![Op::Record(1.0, 5), Op::Record(2.0, 12)],
        vec![Op::Record(4.0, 11)],
    );
}

#[test]
fn a_purging_measurement_racing_a_record() {
    // The measurement at 40 purges the samples recorded at 0 (horizon 20 ms).
    let cfg = WindowConfig::new(2, 10).unwrap();
    check_linearizable(
        cfg,
        vec![Op::Record(1.0, 0), Op::Record(8.0, 40)],
        vec![Op::Measure(40), Op::Record(2.0, 41)],
    );
}

#[test]
fn ring_wraps_while_another_thread_records() {
    // 1 sample of 10 ms: two slots, so the third window reuses slot 0.
    let cfg = WindowConfig::new(1, 10).unwrap();
    check_linearizable(
        cfg,
        vec![Op::Record(1.0, 0), Op::Record(2.0, 10), Op::Record(3.0, 20)],
        vec![Op::Record(5.0, 15)],
    );
}
