//! Model checks of the rate sensors' lock-free protocol (`rate_cell`) and of the copy-on-write
//! cell (`cow`) with loom: every
//! interleaving of concurrent in-place records, records that start a new sample (seal,
//! fold, publish), measurements that purge, and threads that help a sealed block along
//! must end in a state that some sequential order of the same operations produces.
//! Nothing is lost and nothing is applied twice.
//!
//! Run with `RUSTFLAGS="--cfg loom" cargo test -p kquota-core --release --test loom`.
#![cfg(loom)]

use kquota_core::kafka::quota::check_bound;
use kquota_core::kafka::samples::Samples;
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

/// A bound change racing checked records: every record's verdict, not only the final
/// samples, must be what some sequential order of the same operations gives (the check
/// sees the bound in force before or after the change, never a mix).
#[test]
fn a_quota_change_racing_checked_records() {
    use kquota_core::Check;

    #[derive(Clone, Copy, Debug)]
    enum Step {
        Record(f64, i64),
        SetQuota(f64),
    }
    type Outcome = (Observed, Vec<Option<Check>>, Vec<Option<Check>>);

    fn step(state: &mut (Samples, f64), cfg: &WindowConfig, op: Step) -> Option<Check> {
        match op {
            Step::Record(v, t) => {
                state.0.record(cfg, v, t);
                Some(check_bound(&mut state.0, cfg, state.1, t))
            }
            Step::SetQuota(q) => {
                state.1 = q;
                None
            }
        }
    }

    fn outcomes(cfg: &WindowConfig, a: &[Step], b: &[Step]) -> Vec<Outcome> {
        #[allow(clippy::too_many_arguments)]
        fn go(
            cfg: &WindowConfig,
            s: (Samples, f64),
            a: &[Step],
            b: &[Step],
            ra: Vec<Option<Check>>,
            rb: Vec<Option<Check>>,
            out: &mut Vec<Outcome>,
        ) {
            if a.is_empty() && b.is_empty() {
                out.push((observable(&s.0), ra, rb));
                return;
            }
            if let Some((&op, rest)) = a.split_first() {
                let mut next = s.clone();
                let mut ra = ra.clone();
                ra.push(step(&mut next, cfg, op));
                go(cfg, next, rest, b, ra, rb.clone(), out);
            }
            if let Some((&op, rest)) = b.split_first() {
                let mut next = s;
                let mut rb = rb;
                rb.push(step(&mut next, cfg, op));
                go(cfg, next, a, rest, ra, rb, out);
            }
        }
        let mut out = Vec::new();
        go(cfg, (Samples::new(), 50.0), a, b, vec![], vec![], &mut out);
        out
    }

    fn run_step(rate: &SampledRate, op: Step) -> Option<Check> {
        match op {
            Step::Record(v, t) => Some(rate.record(v, t).unwrap()),
            Step::SetQuota(q) => {
                rate.set_quota(Some(q)).unwrap();
                None
            }
        }
    }

    let cfg = WindowConfig::new(2, 10).unwrap();
    // 600 over the padded 10 ms window breaks a bound of 50/s but not 1e9/s.
    let a = vec![Step::Record(600.0, 1), Step::Record(1.0, 12)];
    let b = vec![Step::SetQuota(1e9), Step::Record(2.0, 2)];
    let allowed = outcomes(&cfg, &a, &b);
    assert!(allowed.iter().any(|o| o.1[0].unwrap().violated));
    assert!(allowed.iter().any(|o| !o.1[0].unwrap().violated));
    let mut model = loom::model::Builder::new();
    model.preemption_bound = Some(3);
    model.check(move || {
        let rate = Arc::new(SampledRate::new(cfg, Some(50.0)).unwrap());
        let other = rate.clone();
        let b = b.clone();
        let worker =
            thread::spawn(move || b.iter().map(|&op| run_step(&other, op)).collect::<Vec<_>>());
        let ra: Vec<_> = a.iter().map(|&op| run_step(&rate, op)).collect();
        let rb = worker.join().unwrap();
        let end = (observable(&rate.samples_snapshot()), ra, rb);
        assert!(allowed.contains(&end), "not a sequential outcome: {end:?}");
        assert_eq!(rate.quota(), Some(1e9));
    });
}

/// Opening the next sample in place (`rate_cell`'s claim, write and publish): models that
/// start from a full ring of whole values, so that a record starting a new sample opens it
/// in place when nothing else intervenes. Every record's check, every measurement and the
/// final samples must be those of some sequential order of the same operations.
mod open_in_place {
    use super::*;
    use kquota_core::Check;

    #[derive(Clone, Copy, Debug)]
    enum Step {
        Record(f64, i64),
        Measure(i64),
        SetQuota(f64),
    }

    #[derive(Clone, Copy, Debug, PartialEq)]
    enum Seen {
        Check(Check),
        Rate(u64),
        Nothing,
    }

    type Outcome = (Observed, Vec<Seen>, Vec<Seen>);

    fn step(state: &mut (Samples, f64), cfg: &WindowConfig, op: Step) -> Seen {
        match op {
            Step::Record(v, t) => {
                state.0.record(cfg, v, t);
                Seen::Check(check_bound(&mut state.0, cfg, state.1, t))
            }
            Step::Measure(t) => Seen::Rate(state.0.measure_rate(cfg, t).0.to_bits()),
            Step::SetQuota(q) => {
                state.1 = q;
                Seen::Nothing
            }
        }
    }

    fn run_step(rate: &SampledRate, op: Step) -> Seen {
        match op {
            Step::Record(v, t) => Seen::Check(rate.record(v, t).unwrap()),
            Step::Measure(t) => Seen::Rate(rate.measure(t).to_bits()),
            Step::SetQuota(q) => {
                rate.set_quota(Some(q)).unwrap();
                Seen::Nothing
            }
        }
    }

    fn outcomes(cfg: &WindowConfig, start: (Samples, f64), a: &[Step], b: &[Step]) -> Vec<Outcome> {
        fn go(
            cfg: &WindowConfig,
            s: (Samples, f64),
            a: &[Step],
            b: &[Step],
            seen: (Vec<Seen>, Vec<Seen>),
            out: &mut Vec<Outcome>,
        ) {
            if a.is_empty() && b.is_empty() {
                out.push((observable(&s.0), seen.0, seen.1));
                return;
            }
            if let Some((&op, rest)) = a.split_first() {
                let mut next = s.clone();
                let mut seen = seen.clone();
                seen.0.push(step(&mut next, cfg, op));
                go(cfg, next, rest, b, seen, out);
            }
            if let Some((&op, rest)) = b.split_first() {
                let mut next = s;
                let mut seen = seen;
                seen.1.push(step(&mut next, cfg, op));
                go(cfg, next, a, rest, seen, out);
            }
        }
        let mut out = Vec::new();
        go(cfg, start, a, b, (vec![], vec![]), &mut out);
        out
    }

    /// 2 samples of 10 ms (3 slots, horizon 20 ms), filled by records at 0, 10, 19, 20
    /// and 29: the sample in progress started at 20, and a record at 30 opens the next
    /// one in place (nothing is obsolete at 30: the oldest other sample last recorded at
    /// 19).
    const FILL: [Step; 5] = [
        Step::Record(1.0, 0),
        Step::Record(1.0, 10),
        Step::Record(1.0, 19),
        Step::Record(1.0, 20),
        Step::Record(1.0, 29),
    ];

    fn check(quota: f64, a: Vec<Step>, b: Vec<Step>) {
        let cfg = WindowConfig::new(2, 10).unwrap();
        let mut start = (Samples::new(), quota);
        for op in FILL {
            step(&mut start, &cfg, op);
        }
        let allowed = outcomes(&cfg, start, &a, &b);
        let mut model = loom::model::Builder::new();
        model.preemption_bound = Some(3);
        model.check(move || {
            let rate = Arc::new(SampledRate::new(cfg, Some(quota)).unwrap());
            for op in FILL {
                run_step(&rate, op);
            }
            let other = rate.clone();
            let b = b.clone();
            let worker =
                thread::spawn(move || b.iter().map(|&op| run_step(&other, op)).collect::<Vec<_>>());
            let ra: Vec<_> = a.iter().map(|&op| run_step(&rate, op)).collect();
            let rb = worker.join().unwrap();
            let end = (observable(&rate.samples_snapshot()), ra, rb);
            assert!(allowed.contains(&end), "not a sequential outcome: {end:?}");
        });
    }

    #[test]
    fn two_records_race_to_open_the_next_sample() {
        // Whichever opens first, the other records into the new sample; if the one at 31
        // opens first, the one at 30 lands before the new sample's start (Kafka adds it
        // to the sample in progress).
        check(
            BOUND,
            vec![Step::Record(2.0, 30)],
            vec![Step::Record(4.0, 31)],
        );
    }

    #[test]
    fn an_open_racing_a_purging_measurement() {
        // The measurement at 40 purges the sample last recorded at 19.
        check(
            BOUND,
            vec![Step::Record(2.0, 30), Step::Record(1.0, 35)],
            vec![Step::Measure(40)],
        );
    }

    #[test]
    fn two_opens_in_place_racing_a_record() {
        // The opens at 30 and 40 use both views in turn; the record at 39 either lands in
        // the sample opened at 30 or opens its own.
        check(
            BOUND,
            vec![Step::Record(1.0, 30), Step::Record(1.0, 40)],
            vec![Step::Record(1.0, 39)],
        );
    }

    #[test]
    fn purging_opens_racing_a_record() {
        // The record at 39 purges the sample last recorded at 19 (a new block); the open
        // at 50 purges the one last recorded at 29 (in place: the new state holds it as
        // purged), the one at 60 the one last recorded at 39, and writes the slot the
        // first purged; the record at 52 lands in between or opens its own.
        check(
            BOUND,
            vec![
                Step::Record(1.0, 30),
                Step::Record(1.0, 39),
                Step::Record(1.0, 50),
                Step::Record(1.0, 60),
            ],
            vec![Step::Record(2.0, 52)],
        );
    }

    #[test]
    fn an_open_purging_the_closed_sample_racing_a_record() {
        // A client that records less than once a window: the open at 55 purges both other
        // samples (last recorded at 19 and 29), the one it closes included, in place (the
        // new state holds them in its purged mask); the open at 66 writes their slots
        // while it holds the accumulator, and the record at 58 lands before or after
        // either open.
        check(
            BOUND,
            vec![Step::Record(1.0, 55), Step::Record(1.0, 66)],
            vec![Step::Record(2.0, 58)],
        );
    }

    #[test]
    fn an_open_racing_a_quota_change() {
        // The check of the record at 30 (about 200/s) breaks a bound of 50/s but not 1e9.
        check(
            50.0,
            vec![Step::Record(2.0, 30), Step::Measure(31)],
            vec![Step::SetQuota(1e9), Step::Record(1.0, 32)],
        );
    }
}

/// The copy-on-write cell (quota configuration, throttle-time averages): concurrent
/// updates are never lost, and a reader sees a whole value, never half of an update.
#[test]
fn copy_on_write_updates_are_never_lost() {
    use kquota_core::sync::cow::{pin, CowCell};

    let mut model = loom::model::Builder::new();
    model.preemption_bound = Some(3);
    model.check(|| {
        // Two fields every update changes together: a torn read would see them differ.
        let cell = Arc::new(CowCell::new((0u32, 0u32)));
        let workers: Vec<_> = (0..2)
            .map(|_| {
                let cell = cell.clone();
                thread::spawn(move || {
                    cell.update(&pin(), |v| {
                        v.0 += 1;
                        v.1 += 1;
                    })
                })
            })
            .collect();
        let seen = cell.read(&pin(), |v| *v);
        assert_eq!(seen.0, seen.1, "torn read {seen:?}");
        for w in workers {
            w.join().unwrap();
        }
        assert_eq!(cell.read(&pin(), |v| *v), (2, 2));
    });
}

/// The rebuild of the manager's maps (`migrate`): a shrink racing a new client's insert
/// (on two threads, so that one of them may find the key only through `prev`) and records
/// on an existing sensor, one through a sensor settled before the shrink (a cached
/// resolution) and one looked up during it. Every record must be in the one sensor each
/// key has in the current maps afterwards.
mod rebuild {
    use kquota_core::sync::cow::pin;
    use kquota_core::sync::table_swap::{copy_again, unlink_dead, Mortal, Table, Tables};
    use loom::sync::atomic::{AtomicBool, AtomicUsize};
    use loom::sync::Mutex;
    use loom::thread;
    use std::collections::BTreeMap;
    use std::sync::atomic::Ordering::Relaxed;
    use std::sync::Arc;

    struct Sensor {
        records: AtomicUsize,
        dead: AtomicBool,
    }

    impl Sensor {
        fn new() -> Self {
            Sensor {
                records: AtomicUsize::new(0),
                dead: AtomicBool::new(false),
            }
        }

        fn record(&self) {
            self.records.fetch_add(1, Relaxed);
        }
    }

    impl Mortal for Sensor {
        fn is_dead(&self) -> bool {
            self.dead.load(Relaxed)
        }
    }

    /// A linearizable map (as papaya's operations are): one loom mutex.
    #[derive(Default)]
    struct Map(Mutex<BTreeMap<u8, Arc<Sensor>>>);

    impl Table for Map {
        type Key = u8;
        type Value = Sensor;

        fn get(&self, key: &u8) -> Option<Arc<Sensor>> {
            self.0.lock().unwrap().get(key).cloned()
        }

        fn get_or_insert(&self, key: &u8, value: Arc<Sensor>) -> Arc<Sensor> {
            self.0.lock().unwrap().entry(*key).or_insert(value).clone()
        }

        fn remove_same(&self, key: &u8, value: &Arc<Sensor>) {
            let mut map = self.0.lock().unwrap();
            if map.get(key).is_some_and(|v| Arc::ptr_eq(v, value)) {
                map.remove(key);
            }
        }

        fn entries(&self) -> Vec<(u8, Arc<Sensor>)> {
            let map = self.0.lock().unwrap();
            map.iter().map(|(k, v)| (*k, v.clone())).collect()
        }
    }

    #[derive(Default)]
    struct Maps {
        sensors: Map,
    }

    fn sensors(m: &Maps) -> &Map {
        &m.sensors
    }

    const OLD: u8 = 1;
    const NEW: u8 = 2;

    fn shrink(tables: &Tables<Maps>) {
        let rebuilt = tables.rebuild(
            |old| {
                let new = Maps::default();
                copy_again(&old.sensors, &new.sensors);
                new
            },
            |old, new| copy_again(&old.sensors, &new.sensors),
            |new| unlink_dead(&new.sensors),
            &pin(),
        );
        assert!(rebuilt);
    }

    fn record(tables: &Tables<Maps>, key: u8) {
        tables
            .live(sensors, &key, || Arc::new(Sensor::new()), &pin())
            .record();
    }

    /// The sensor of each key in the current maps, and its records.
    fn settled(tables: &Tables<Maps>) -> BTreeMap<u8, usize> {
        let guard = pin();
        assert!(tables.prev(&guard).is_none());
        let entries = tables.load(&guard).sensors.entries();
        entries
            .iter()
            .map(|(k, s)| {
                assert!(!s.is_dead());
                (*k, s.records.load(Relaxed))
            })
            .collect()
    }

    #[test]
    fn a_shrink_racing_a_new_client_and_records() {
        let mut model = loom::model::Builder::new();
        model.preemption_bound = Some(3);
        model.check(|| {
            let tables = Arc::new(Tables::new(Maps::default()));
            // The existing client, settled before the shrink (its cached resolution).
            let cached = tables.live(sensors, &OLD, || Arc::new(Sensor::new()), &pin());
            let shrinker = {
                let tables = tables.clone();
                thread::spawn(move || shrink(&tables))
            };
            let newcomer = {
                let tables = tables.clone();
                thread::spawn(move || record(&tables, NEW))
            };
            cached.record();
            record(&tables, OLD);
            record(&tables, NEW);
            shrinker.join().unwrap();
            newcomer.join().unwrap();
            let end = settled(&tables);
            assert_eq!(end, BTreeMap::from([(OLD, 2), (NEW, 2)]), "records lost");
        });
    }

    /// Expiry killing a sensor while a shrink copies it: the dead sensor must not come
    /// back to life in the new maps.
    #[test]
    fn a_shrink_racing_an_expiry() {
        let mut model = loom::model::Builder::new();
        model.preemption_bound = Some(3);
        model.check(|| {
            let tables = Arc::new(Tables::new(Maps::default()));
            let doomed = tables.live(sensors, &OLD, || Arc::new(Sensor::new()), &pin());
            let shrinker = {
                let tables = tables.clone();
                thread::spawn(move || shrink(&tables))
            };
            let newcomer = {
                let tables = tables.clone();
                thread::spawn(move || record(&tables, NEW))
            };
            {
                // `remove_expired`: mark, then unlink from where it was found.
                let guard = pin();
                let found_in = tables.load(&guard);
                doomed.dead.store(true, Relaxed);
                tables.unlink(sensors, found_in, &OLD, &doomed, &guard);
            }
            shrinker.join().unwrap();
            newcomer.join().unwrap();
            assert_eq!(settled(&tables), BTreeMap::from([(NEW, 1)]));
        });
    }
}

// -- KIP-599: the token bucket cell ----------------------------------------------------

mod token_bucket_model {
    use kquota_core::kafka::token_bucket::{Bucket, BucketCell, MutationCheck};
    use kquota_core::WindowConfig;
    use loom::sync::Arc;
    use loom::thread;

    #[derive(Clone, Copy, Debug)]
    enum Op {
        Strict(f64, i64),
        Permissive(f64, i64),
        Measure(i64),
    }

    const QUOTA: f64 = 10.0;

    fn apply(b: &mut Bucket, cfg: &WindowConfig, op: Op) -> (Option<MutationCheck>, u64) {
        match op {
            Op::Strict(v, t) => (Some(b.record_strict(cfg, QUOTA, v, t)), 0),
            Op::Permissive(v, t) => (Some(b.record_permissive(cfg, QUOTA, v, t)), 0),
            Op::Measure(t) => (None, b.measure(cfg, QUOTA, t).to_bits()),
        }
    }

    fn run(cell: &BucketCell, cfg: &WindowConfig, op: Op) -> (Option<MutationCheck>, u64) {
        match op {
            Op::Strict(v, t) => (Some(cell.record_strict(cfg, QUOTA, v, t)), 0),
            Op::Permissive(v, t) => (Some(cell.record_permissive(cfg, QUOTA, v, t)), 0),
            Op::Measure(t) => (None, cell.measure(cfg, QUOTA, t).to_bits()),
        }
    }

    type Outcome = (
        Vec<(Option<MutationCheck>, u64)>,
        Vec<(Option<MutationCheck>, u64)>,
        (u64, i64),
    );

    /// Every (results of a, results of b, final state) of a sequential interleaving.
    fn sequential(cfg: &WindowConfig, a: &[Op], b: &[Op]) -> Vec<Outcome> {
        let mut out = Vec::new();
        let n = a.len() + b.len();
        for mask in 0u32..(1 << n) {
            if mask.count_ones() as usize != b.len() {
                continue;
            }
            let (mut ia, mut ib) = (0, 0);
            let (mut ra, mut rb) = (Vec::new(), Vec::new());
            let mut bucket = Bucket::NEW;
            for k in 0..n {
                if mask & (1 << k) != 0 {
                    rb.push(apply(&mut bucket, cfg, b[ib]));
                    ib += 1;
                } else {
                    ra.push(apply(&mut bucket, cfg, a[ia]));
                    ia += 1;
                }
            }
            out.push((ra, rb, (bucket.tokens.to_bits(), bucket.last_update_ms)));
        }
        out
    }

    fn check(a: Vec<Op>, b: Vec<Op>) {
        let cfg = WindowConfig::new(10, 1000).unwrap();
        let allowed = sequential(&cfg, &a, &b);
        loom::model(move || {
            let cell = Arc::new(BucketCell::new());
            let other = cell.clone();
            let b = b.clone();
            let worker = thread::spawn(move || {
                b.iter()
                    .map(|&op| run(&other, &cfg, op))
                    .collect::<Vec<_>>()
            });
            let ra: Vec<_> = a.iter().map(|&op| run(&cell, &cfg, op)).collect();
            let rb = worker.join().unwrap();
            let end = cell.get();
            let got = (ra, rb, (end.tokens.to_bits(), end.last_update_ms));
            assert!(allowed.contains(&got), "not a sequential outcome: {got:?}");
        });
    }

    #[test]
    fn strict_records_racing_for_the_last_tokens() {
        // Full bucket (100) at 10 s: the second strict record of 90 overdraws it, the
        // third is refused; which thread gets refused depends on the order only.
        check(
            vec![Op::Strict(90.0, 10_000), Op::Strict(90.0, 10_000)],
            vec![Op::Strict(90.0, 10_000)],
        );
    }

    #[test]
    fn permissive_record_racing_a_refilling_measurement() {
        check(
            vec![Op::Permissive(150.0, 10_000), Op::Measure(12_000)],
            vec![Op::Strict(5.0, 11_000)],
        );
    }
}

// -- KIP-612: an IP's connection taken back out of the rates ---------------------------

mod connection_model {
    use kquota_core::kafka::connection_rate::{accept_delay, admit_ip};
    use kquota_core::{SampledRate, WindowConfig};
    use loom::sync::Arc;
    use loom::thread;

    fn total(rate: &SampledRate) -> f64 {
        rate.samples_snapshot()
            .slots()
            .iter()
            .map(|s| s.value)
            .sum()
    }

    #[test]
    fn two_connections_of_one_ip_over_a_quota_of_one() {
        // IP quota 1/s, broker and listener unbounded, both connections at the same
        // instant: exactly one is admitted, and every sensor ends up counting just it.
        let cfg = WindowConfig::new(2, 1000).unwrap();
        let mut model = loom::model::Builder::new();
        model.preemption_bound = Some(3);
        model.check(move || {
            let ip = Arc::new(SampledRate::new(cfg, Some(1.0)).unwrap());
            let broker = Arc::new(SampledRate::new(cfg, None).unwrap());
            let listener = Arc::new(SampledRate::new(cfg, None).unwrap());
            let connect = {
                let (ip, broker, listener) = (ip.clone(), broker.clone(), listener.clone());
                move || {
                    assert_eq!(accept_delay(Some(&*broker), &*listener, 0, 1000), 0);
                    admit_ip(&*ip, Some(&*broker), &*listener, 0, 1000)
                }
            };
            let other = thread::spawn(connect.clone());
            let mine = connect();
            let theirs = other.join().unwrap();
            let admitted = [mine, theirs].iter().filter(|&&t| t == 0).count();
            assert_eq!(admitted, 1, "throttles {mine}, {theirs}");
            assert_eq!([mine, theirs].iter().max(), Some(&1000));
            for rate in [&ip, &broker, &listener] {
                assert_eq!(total(rate), 1.0);
            }
        });
    }
}
