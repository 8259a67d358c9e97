//! Model checks of the rate sensors' lock-free protocol (`rate_cell`) with loom: every
//! interleaving of concurrent in-place records, records that start a new sample (seal,
//! fold, publish), measurements that purge, and threads that help a sealed block along
//! must end in a state that some sequential order of the same operations produces.
//! Nothing is lost and nothing is applied twice.
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

/// What a rate observes of its samples: the sample in progress and every slot's value,
/// start and last-event time (event counts are not kept for rates; Kafka's `Rate` never
/// reads them).
fn observable(samples: &Samples) -> (Option<usize>, Vec<(u64, i64, i64)>) {
    let slots = samples
        .slots()
        .iter()
        .map(|s| (s.value.to_bits(), s.start, s.last))
        .collect();
    (samples.current_index(), slots)
}

/// Every final state of a sequential execution of `a` (in order) interleaved with `b`.
type Observed = (Option<usize>, Vec<(u64, i64, i64)>);

fn sequential_outcomes(cfg: &WindowConfig, a: &[Op], b: &[Op]) -> Vec<Observed> {
    fn go(cfg: &WindowConfig, s: Samples, a: &[Op], b: &[Op], out: &mut Vec<Observed>) {
        if a.is_empty() && b.is_empty() {
            out.push(observable(&s));
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
    // Every interleaving with up to three preemptions (loom's usual bound; exhaustive
    // exploration of the longer traces does not finish in a CI budget).
    let mut model = loom::model::Builder::new();
    model.preemption_bound = Some(3);
    model.check(move || {
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
        let end = observable(&rate.samples_snapshot());
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

#[test]
fn in_place_records_racing_with_a_rollover_and_a_measurement() {
    // Three records into the sample in progress (in place) while the other thread starts
    // a new sample (seals) and then measures.
    let cfg = WindowConfig::new(3, 10).unwrap();
    check_linearizable(
        cfg,
        vec![Op::Record(1.0, 1), Op::Record(2.0, 2), Op::Record(4.0, 3)],
        vec![Op::Record(8.0, 12), Op::Measure(13)],
    );
}
