//! Property tests: the lock-free rate cell (in-place records, sealed structural changes)
//! gives exactly what the plain sequential sample ring gives, on random traces with
//! clocks that start anywhere in i64, go backwards and jump by up to i64::MAX (Java's
//! wrapping arithmetic), tiny and huge values (subnormals, -0.0, f64::MAX) and bound
//! changes (tiny and huge bounds too). The same holds through the quota manager, for
//! clients named with any Unicode.
#![cfg(not(loom))]

mod common;
use common::fixed;
use std::collections::HashMap;

use kquota_core::kafka::javamath::long_to_int;
use kquota_core::kafka::quota::{check_bound, Check};
use kquota_core::kafka::samples::{Samples, WindowConfig};
use kquota_core::{sanitize_user, QuotaEntity, QuotaManager, QuotaType, SampledRate, UNLIMITED};
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
        1 => prop::sample::select(vec![i64::MAX / 2, -(i64::MAX / 2), 1 << 62, -(1 << 62), i64::MAX, i64::MIN]),
    ]
}

/// Where a trace's clock starts: zero, now, and the ends of i64.
fn start_time() -> impl Strategy<Value = i64> {
    prop::sample::select(vec![
        0,
        1_700_000_000_000,
        -(1 << 62),
        1 << 62,
        i64::MIN,
        i64::MAX,
    ])
}

fn value() -> impl Strategy<Value = f64> {
    prop_oneof![
        4 => 0.0..1e4f64,
        1 => -1e4..0.0f64,
        1 => prop::sample::select(vec![0.0, 1e-300, 1e300, -1e300, f64::MAX / 4.0, 5e-324]),
        1 => prop::sample::select(TINY_AND_HUGE.iter().flat_map(|&v| [v, -v]).collect::<Vec<_>>()),
    ]
}

/// Whole values (a few negative ones, -0.0, and some near the limit of exact sums), with
/// now and then one that is not.
fn whole_value() -> impl Strategy<Value = f64> {
    prop_oneof![
        8 => (0i64..10_000).prop_map(|v| v as f64),
        1 => (-100i64..0).prop_map(|v| v as f64),
        1 => prop::sample::select(vec![-0.0, (1u64 << 50) as f64, (1u64 << 51) as f64, 0.5]),
    ]
}

/// Subnormals (5e-324 is the smallest double > 0), the smallest normal, and the largest
/// doubles (two of them sum to infinity); `-v` of each is drawn too, -0.0 among them.
const TINY_AND_HUGE: [f64; 7] = [
    0.0,
    5e-324,
    1e-310,
    f64::MIN_POSITIVE,
    1e300,
    f64::MAX / 2.0,
    f64::MAX,
];

/// A quota bound: ordinary, tiny or huge (any finite value > 0 is a valid bound).
fn bound() -> impl Strategy<Value = f64> {
    prop_oneof![
        4 => 1e-3..1e6f64,
        1 => prop::sample::select(TINY_AND_HUGE[1..].to_vec()),
    ]
}

fn ops<S: Strategy<Value = f64> + 'static>(
    window: i64,
    horizon: i64,
    value: impl Fn() -> S,
) -> impl Strategy<Value = Vec<(i64, Op)>> {
    let op = prop_oneof![
        6 => value().prop_map(Op::Record),
        2 => value().prop_map(Op::RecordNoCheck),
        2 => Just(Op::Measure),
        1 => prop::option::of(bound()).prop_map(Op::SetQuota),
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
    #![proptest_config(fixed(400))]

    #[test]
    fn rate_cell_equals_sequential_samples(
        (n, w, trace) in (1i64..13, 1i64..3000).prop_flat_map(|(n, w)| (Just(n), Just(w), ops(w, n * w, value))),
        t0 in start_time(),
    ) {
        rate_cell_trace(n, w, trace, t0)?;
    }

    /// The same with whole values, which let a record that starts a new sample in a full
    /// ring open it in place (`rate_cell`).
    #[test]
    fn rate_cell_equals_sequential_samples_on_whole_values(
        (n, w, trace) in (1i64..13, 1i64..3000).prop_flat_map(|(n, w)| (Just(n), Just(w), ops(w, n * w, whole_value))),
        t0 in start_time(),
    ) {
        rate_cell_trace(n, w, trace, t0)?;
    }
}

fn rate_cell_trace(n: i64, w: i64, trace: Vec<(i64, Op)>, t0: i64) -> Result<(), TestCaseError> {
    let cfg = WindowConfig::new(n, w).unwrap();
    let rate = SampledRate::new(cfg, Some(100.0)).unwrap();
    let mut plain = Samples::new();
    let mut bound = Some(100.0);
    let mut t = t0;
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
                prop_assert!(
                    same_check(&got, &want),
                    "record {v} at {t}: {got:?} != {want:?}"
                );
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
        s.slots()
            .iter()
            .map(|x| (x.value.to_bits(), x.start, x.last))
            .collect()
    };
    prop_assert_eq!(got.current_index(), plain.current_index());
    prop_assert_eq!(observe(&got), observe(&plain));
    Ok(())
}

// -- through the manager -----------------------------------------------------------------

#[derive(Debug, Clone)]
enum ClientOp {
    Record(usize, f64),
    Unrecord(usize, f64),
    RecordNoThrottle(usize, f64),
    Measure(usize),
    SetQuota(f64),
}

/// A name of any Unicode: empty, NUL, astral, unassigned; sometimes `<default>` itself.
fn name() -> impl Strategy<Value = String> {
    prop_oneof![
        4 => prop::collection::vec(any::<char>(), 0..6).prop_map(String::from_iter),
        1 => prop::sample::select(vec!["", "\0", "<default>", "a b", "🦀", "%41"]).prop_map(String::from),
    ]
}

fn usage() -> impl Strategy<Value = f64> {
    prop_oneof![
        4 => 0.0..1e4f64,
        1 => prop::sample::select(TINY_AND_HUGE.to_vec()),
        1 => prop::sample::select(vec![-0.0, 1e9, 1e18]),
    ]
}

fn client_ops(
    clients: usize,
    window: i64,
    horizon: i64,
) -> impl Strategy<Value = Vec<(i64, ClientOp)>> {
    let op = prop_oneof![
        6 => (0..clients, usage()).prop_map(|(c, v)| ClientOp::Record(c, v)),
        1 => (0..clients, usage()).prop_map(|(c, v)| ClientOp::Unrecord(c, v)),
        1 => (0..clients, usage()).prop_map(|(c, v)| ClientOp::RecordNoThrottle(c, v)),
        2 => (0..clients).prop_map(ClientOp::Measure),
        1 => bound().prop_map(ClientOp::SetQuota),
    ];
    prop::collection::vec((time_step(window, horizon), op), 1..80)
}

/// Percent-decodes a sanitized principal back to its bytes.
fn unsanitize(text: &str) -> Vec<u8> {
    let bytes = text.as_bytes();
    let mut out = Vec::new();
    let mut i = 0;
    while i < bytes.len() {
        if bytes[i] == b'%' {
            out.push(u8::from_str_radix(&text[i + 1..i + 3], 16).unwrap());
            i += 3;
        } else {
            out.push(bytes[i]);
            i += 1;
        }
    }
    out
}

proptest! {
    #![proptest_config(fixed(300))]

    /// With one `<default>, <default>` quota, every client has a sensor of its own with
    /// that bound (unlimited when its user or client id is empty: Kafka then finds no
    /// quota): the manager must record, check, throttle and measure exactly as a plain
    /// sample ring per client does, whatever the names, times and values.
    #[test]
    fn manager_equals_a_sample_ring_per_client(
        quota_type in prop::sample::select(QuotaType::ALL.to_vec()),
        names in prop::collection::vec((name(), name()), 1..4),
        (n, w, trace) in (1i64..13, 1i64..6).prop_flat_map(|(n, s)| {
            (Just(n), Just(s * 1000), client_ops(4, s * 1000, n * s * 1000))
        }),
        t0 in start_time(),
        first_bound in bound(),
    ) {
        let cfg = WindowConfig::new(n, w).unwrap();
        let m = QuotaManager::new(quota_type, cfg, i64::MAX).unwrap();
        let everyone = QuotaEntity::parse(Some("<default>"), Some("<default>")).unwrap();
        m.set_quota(&everyone, first_bound).unwrap();
        let mut bound = first_bound;
        let mut plain: HashMap<usize, Samples> = HashMap::new();
        let clients: Vec<(String, String)> = (0..4).map(|i| names[i % names.len()].clone()).collect();
        // Two indices with the same names are one client.
        let key = |c: usize| clients.iter().position(|x| *x == clients[c]).unwrap();
        // Kafka's quotaLimit: an empty user or client-id tag leaves only the other level.
        let applies = |c: usize| !clients[c].0.is_empty() && !clients[c].1.is_empty();
        let unit = |v: f64| match quota_type {
            QuotaType::Request => v * (100.0 / 1e9),
            _ => v,
        };
        let mut t = t0;
        for (step, op) in trace {
            t = t.wrapping_add(step);
            match op {
                ClientOp::Record(c, v) => {
                    let (user, client) = &clients[c];
                    let got = m.record(user, client, v, t).unwrap();
                    let samples = plain.entry(key(c)).or_default();
                    samples.record(&cfg, unit(v), t);
                    let limit = if applies(c) { bound } else { UNLIMITED };
                    let check = check_bound(samples, &cfg, limit, t);
                    let want = match quota_type {
                        QuotaType::Request => long_to_int(check.throttle_ms.min(w)),
                        _ => long_to_int(check.throttle_ms),
                    };
                    prop_assert_eq!(got, want, "record({:?}, {:?}, {}) at {}: {:?}", user, client, v, t, check);
                }
                ClientOp::Unrecord(c, v) => {
                    let (user, client) = &clients[c];
                    m.unrecord(user, client, v, t).unwrap();
                    plain.entry(key(c)).or_default().record(&cfg, -unit(v), t);
                }
                ClientOp::RecordNoThrottle(c, v) => {
                    let (user, client) = &clients[c];
                    m.record_no_throttle(user, client, v, t).unwrap();
                    plain.entry(key(c)).or_default().record(&cfg, unit(v), t);
                }
                ClientOp::Measure(c) => {
                    let (user, client) = &clients[c];
                    let got = m.measure(user, client, t);
                    let want = plain.get_mut(&key(c)).map(|s| s.measure_rate(&cfg, t).0);
                    prop_assert!(
                        match (got, want) { (Some(a), Some(b)) => same(a, b), (a, b) => a == b },
                        "measure({:?}, {:?}) at {}: {:?} != {:?}", user, client, t, got, want
                    );
                }
                ClientOp::SetQuota(b) => {
                    m.set_quota(&everyone, b).unwrap();
                    bound = b;
                }
            }
        }
        // Every client: its own tags (the principal sanitized, reversibly, into URL-safe
        // ASCII), the current bound, and the same rate as its ring.
        for (c, (user, client)) in clients.iter().enumerate() {
            let (tag_user, tag_client) = m.tags(user, client).unwrap();
            prop_assert_eq!(&tag_user, &sanitize_user(user).into_owned());
            prop_assert!(tag_user.bytes().all(|b| b.is_ascii_alphanumeric() || b"._-%".contains(&b)));
            prop_assert_eq!(unsanitize(&tag_user), user.as_bytes().to_vec());
            prop_assert_eq!(&tag_client, client);
            prop_assert_eq!(m.quota_for(user, client).unwrap(), applies(c).then_some(bound));
            let want = plain.get_mut(&key(c)).map(|s| s.measure_rate(&cfg, t).0);
            let got = m.measure(user, client, t);
            prop_assert!(
                match (got, want) { (Some(a), Some(b)) => same(a, b), (a, b) => a == b },
                "final measure({:?}, {:?}): {:?} != {:?}", user, client, got, want
            );
        }
        prop_assert_eq!(m.sensor_count(), plain.len());
    }
}

// -- KIP-599 token bucket ----------------------------------------------------------------

mod token_bucket_properties {
    use super::fixed;
    use kquota_core::kafka::token_bucket::{burst, Bucket, BucketCell};
    use kquota_core::WindowConfig;
    use proptest::prelude::*;

    #[derive(Debug, Clone)]
    enum BucketOp {
        Strict(f64),
        Permissive(f64),
        Record(f64),
        Measure,
    }

    fn bucket_ops() -> impl Strategy<Value = Vec<(i64, BucketOp)>> {
        let value = prop_oneof![0.0..1000.0f64, Just(0.0), -50.0..0.0f64];
        let op = prop_oneof![
            value.clone().prop_map(BucketOp::Strict),
            value.clone().prop_map(BucketOp::Permissive),
            value.prop_map(BucketOp::Record),
            Just(BucketOp::Measure),
        ];
        prop::collection::vec((-500i64..5000, op), 1..60)
    }

    proptest! {
        #![proptest_config(fixed(300))]

        /// The atomic cell gives exactly what the plain bucket gives; tokens never exceed
        /// the burst; a strict record is refused exactly when the bucket is overdrawn,
        /// and every throttle is Kafka's formula of the overdraft (never negative).
        #[test]
        fn bucket_cell_equals_plain_bucket(
            n in 1i64..20, secs in 1i64..5, quota in 0.001f64..1e6,
            t0 in 0i64..2_000_000_000_000, trace in bucket_ops(),
        ) {
            let cfg = WindowConfig::new(n, secs * 1000).unwrap();
            let cell = BucketCell::new();
            let mut plain = Bucket::NEW;
            let mut t = t0;
            for (step, op) in trace {
                t += step;
                match op {
                    BucketOp::Strict(v) => {
                        let before = { let mut b = plain; b.measure(&cfg, quota, t) };
                        let got = cell.record_strict(&cfg, quota, v, t);
                        prop_assert_eq!(got, plain.record_strict(&cfg, quota, v, t));
                        prop_assert_eq!(got.accepted, before >= 0.0);
                        prop_assert!(got.throttle_ms >= 0);
                    }
                    BucketOp::Permissive(v) => {
                        let got = cell.record_permissive(&cfg, quota, v, t);
                        prop_assert_eq!(got, plain.record_permissive(&cfg, quota, v, t));
                        prop_assert!(got.accepted && got.throttle_ms >= 0);
                        prop_assert_eq!(got.violated, plain.tokens < 0.0);
                    }
                    BucketOp::Record(v) => {
                        cell.record(&cfg, quota, v, t);
                        plain.record(&cfg, quota, v, t);
                    }
                    BucketOp::Measure => {
                        prop_assert_eq!(cell.measure(&cfg, quota, t).to_bits(), plain.measure(&cfg, quota, t).to_bits());
                    }
                }
                prop_assert_eq!(cell.get(), plain);
                prop_assert!(plain.tokens <= burst(&cfg, quota));
            }
        }
    }
}
