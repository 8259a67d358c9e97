//! Property tests: the lock-free rate cell (in-place records, sealed structural changes)
//! gives exactly what the plain sequential sample ring gives, on random traces with
//! clocks that go backwards, huge time jumps, tiny and huge values, and bound changes.
#![cfg(not(loom))]

use kquota_core::quota::{check_bound, Check};
use kquota_core::samples::{Samples, WindowConfig};
use kquota_core::SampledRate;
use proptest::prelude::*;

#[derive(Debug, Clone)]
enum Op {
    Record(f64),
    RecordNoCheck(f64),
    Measure,
    SetQuota(Option<f64>),
}

fn time_step(window: i64, horizon: i64) -> impl Strategy<Value = i64> {
    prop_oneof![
        8 => prop::sample::select(vec![0, 1, window - 1, window, window + 1, horizon - 1, horizon, horizon + 1]),
        4 => 0..3 * window,
        1 => -3 * window..0,
        1 => prop::sample::select(vec![i64::MAX / 2, -(i64::MAX / 2), 1 << 62, -(1 << 62)]),
    ]
}

fn value() -> impl Strategy<Value = f64> {
    prop_oneof![
        4 => 0.0..1e4f64,
        1 => -1e4..0.0f64,
        1 => prop::sample::select(vec![0.0, 1e-300, 1e300, -1e300, f64::MAX / 4.0, 5e-324]),
    ]
}

fn ops(window: i64, horizon: i64) -> impl Strategy<Value = Vec<(i64, Op)>> {
    let op = prop_oneof![
        6 => value().prop_map(Op::Record),
        2 => value().prop_map(Op::RecordNoCheck),
        2 => Just(Op::Measure),
        1 => prop::option::of(1e-3..1e6f64).prop_map(Op::SetQuota),
    ];
    prop::collection::vec((time_step(window, horizon), op), 1..120)
}

fn same(a: f64, b: f64) -> bool {
    a.to_bits() == b.to_bits() || (a.is_nan() && b.is_nan())
}

fn same_check(a: &Check, b: &Check) -> bool {
    a.violated == b.violated
        && a.throttle_ms == b.throttle_ms
        && match (a.rate, b.rate) {
            (Some(x), Some(y)) => same(x, y),
            (None, None) => true,
            _ => false,
        }
}

proptest! {
    #![proptest_config(ProptestConfig::with_cases(400))]

    #[test]
    fn rate_cell_equals_sequential_samples(
        (n, w, trace) in (1i64..13, 1i64..3000).prop_flat_map(|(n, w)| (Just(n), Just(w), ops(w, n * w)))
    ) {
        let cfg = WindowConfig::new(n, w).unwrap();
        let rate = SampledRate::new(cfg, Some(100.0)).unwrap();
        let mut plain = Samples::new();
        let mut bound = Some(100.0);
        let mut t = 0i64;
        for (step, op) in trace {
            t = t.wrapping_add(step);
            match op {
                Op::Record(v) => {
                    let got = rate.record(v, t).unwrap();
                    plain.record(&cfg, v, t);
                    let want = match bound {
                        Some(b) => check_bound(&mut plain, &cfg, b, t),
                        None => Check::UNCHECKED,
                    };
                    prop_assert!(same_check(&got, &want), "record {v} at {t}: {got:?} != {want:?}");
                }
                Op::RecordNoCheck(v) => {
                    rate.record_no_check(v, t).unwrap();
                    plain.record(&cfg, v, t);
                }
                Op::Measure => {
                    let got = rate.measure(t);
                    let want = plain.measure_rate(&cfg, t).0;
                    prop_assert!(same(got, want), "measure at {t}: {got} != {want}");
                }
                Op::SetQuota(q) => {
                    rate.set_quota(q).unwrap();
                    bound = q;
                }
            }
        }
        let got = rate.samples_snapshot();
        let observe = |s: &Samples| -> Vec<(u64, i64, i64)> {
            s.slots().iter().map(|x| (x.value.to_bits(), x.start, x.last)).collect()
        };
        prop_assert_eq!(got.current_index(), plain.current_index());
        prop_assert_eq!(observe(&got), observe(&plain));
    }
}
