//! Unit tests of [`Samples`] and its summary, against Kafka's own examples where it has
//! them.

use super::*;

#[test]
fn summary_offsets_round_trip_or_refuse() {
    let times = [
        i64::MIN,
        i64::MIN + 1,
        -5_000,
        -1,
        0,
        1,
        999,
        i64::from(i32::MAX) - 1,
        i64::from(i32::MAX),
        i64::MAX - 1,
        i64::MAX,
    ];
    for &cur_start in &times {
        for &a in &times {
            for &b in &times {
                let s = Summary {
                    cur_start,
                    min_start: a,
                    min_other_last: b,
                    max_other_last: a,
                    prefix: -0.0,
                };
                match s.to_offsets() {
                    Some((c, p, o)) => {
                        let back = Summary::from_offsets(c, p, o);
                        assert_eq!(back, s);
                        assert_eq!(back.prefix.to_bits(), s.prefix.to_bits());
                    }
                    None => assert!([a, b].iter().any(|&t| {
                        t != i64::MAX
                            && t != i64::MIN
                            && t.checked_sub(cur_start).is_none_or(|o| {
                                o <= i64::from(i32::MIN) || o >= i64::from(i32::MAX)
                            })
                    })),
                }
            }
        }
    }
}

/// Section 2.4's window as the spec writes it: always the division.
fn window_by_division(cfg: &WindowConfig, oldest: i64, t: i64) -> i64 {
    let mut elapsed = t.wrapping_sub(oldest);
    let full = (elapsed / cfg.window_ms) as i32;
    let min_full = cfg.num_samples as i32 - 1;
    if full < min_full {
        let missing = i64::from(min_full.wrapping_sub(full));
        elapsed = elapsed.wrapping_add(missing.wrapping_mul(cfg.window_ms));
    }
    elapsed.max(1)
}

#[test]
fn window_without_division_is_the_same() {
    let mut configs = vec![cfg(1, 1), cfg(2, 1), cfg(11, 1000), cfg(2, 30_000)];
    configs.push(cfg(1, i64::MAX / 2));
    configs.push(cfg(3, i64::MAX / 4));
    configs.push(cfg(u16::MAX.into(), 1 << 40));
    for c in &configs {
        let w = c.window_ms;
        let n = i64::from(c.num_samples);
        let mut ages = vec![0, 1, -1, i64::MAX, i64::MIN, i64::MAX - 1, i64::MIN + 1];
        for k in [n - 2, n - 1, n, 1 << 31, (1 << 31) - 1, (1 << 32) + 5] {
            let base = k.saturating_mul(w);
            for d in [-1, 0, 1] {
                ages.push(base.saturating_add(d));
                ages.push(base.saturating_neg().saturating_add(d));
            }
        }
        for &age in &ages {
            for t in [0, 7, i64::MAX, i64::MIN] {
                let oldest = t.wrapping_sub(age);
                assert_eq!(
                    window_from_oldest(c, oldest, t),
                    window_by_division(c, oldest, t),
                    "{c:?} age {age} t {t}"
                );
            }
        }
    }
}

fn cfg(n: i64, w: i64) -> WindowConfig {
    WindowConfig::new(n, w).unwrap()
}

#[test]
fn lone_record_is_padded_to_ten_windows() {
    let c = cfg(11, 1000);
    let mut s = Samples::new();
    s.record(&c, 600.0, 0);
    assert_eq!(s.measure_rate(&c, 0), (60.0, 10_000));
}

#[test]
fn kafka_unit_test_example() {
    // 400 B every second for 10 s, then 2300 B at 10.5 s: 6300 B / 10.5 s.
    let c = cfg(11, 1000);
    let mut s = Samples::new();
    for i in 0..10 {
        s.record(&c, 400.0, i * 1000);
    }
    s.record(&c, 2300.0, 10_500);
    let (rate, window) = s.measure_rate(&c, 10_500);
    assert_eq!(rate, 600.0);
    assert_eq!(window, 10_500);
}

#[test]
fn ring_reuses_slots_after_n_plus_one() {
    let c = cfg(2, 1000);
    let mut s = Samples::new();
    for i in 0..5 {
        s.record(&c, 1.0, i * 1000);
    }
    assert_eq!(s.slots().len(), 3);
    assert_eq!(s.heap_bytes(), 3 * 4 * 8);
    assert_eq!(s.cur, 4 % 3);
    let counts: Vec<u64> = s.slots().iter().map(|x| x.count).collect();
    assert_eq!(counts, [1, 1, 1]);
}

#[test]
fn backwards_clock_pads_and_never_fails() {
    let c = cfg(11, 1000);
    let mut s = Samples::new();
    s.record(&c, 100.0, 5000);
    let (_, window) = s.measure_rate(&c, 3500);
    // elapsed = -1500, full = -1, window = 11_000 - 1500.
    assert_eq!(window, 9500);
}

#[test]
fn avg_is_nan_without_events() {
    let c = WindowConfig::METRICS_DEFAULT;
    let mut s = Samples::new();
    assert!(s.measure_avg(&c, 0).is_nan());
    s.record(&c, 10.0, 0);
    s.record(&c, 20.0, 1);
    assert_eq!(s.measure_avg(&c, 2), 15.0);
}

#[test]
fn record_and_measure_is_record_then_measure() {
    let c = cfg(3, 100);
    let (mut a, mut b) = (Samples::new(), Samples::new());
    for (i, t) in [0i64, 5, 99, 100, 150, 420, 421, 300, 900, 901, 1500, 1500]
        .iter()
        .enumerate()
    {
        let v = (i as f64) * 7.5 - 10.0;
        b.record(&c, v, *t);
        let expected = b.measure_rate(&c, *t);
        let (got, summary) = a.record_and_measure(&c, v, *t);
        assert_eq!(got.0.to_bits(), expected.0.to_bits(), "t={t}");
        assert_eq!(got.1, expected.1, "t={t}");
        assert_eq!(a, b, "t={t}");
        assert_eq!(Some(summary), b.summary(), "t={t}");
    }
}

#[test]
fn bad_configs_are_named() {
    let err = WindowConfig::new(0, 1000).unwrap_err().to_string();
    assert!(err.contains("num_samples 0"), "{err}");
    let err = WindowConfig::new(11, 0).unwrap_err().to_string();
    assert!(err.contains("window_ms 0"), "{err}");
}
