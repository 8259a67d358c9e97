//! Stress: OS threads record on shared and distinct entities while another thread keeps
//! changing quotas and another keeps creating and expiring idle sensors (on the writers'
//! clock, as in a broker). Nothing may be lost and nothing may fail: at the end every
//! entity's rate accounts for exactly what was recorded into it.
#![cfg(not(loom))]

use std::sync::atomic::{AtomicBool, AtomicI64, Ordering::Relaxed};
use std::sync::{Arc, Barrier};
use std::thread;

use kquota_core::{QuotaEntity, QuotaManager, QuotaType, WindowConfig};

const WRITERS: usize = 4;
const RECORDS: i64 = 50_000;

#[test]
fn records_are_exact_while_quotas_change_and_sensors_expire() {
    // 11 x 1 s windows, times 0..=4_999 ms: no sample is purged or reused, so every
    // value recorded into an entity's sensor is still in it at the end. Idle sensors
    // expire after 100 ms; the writers' sensors record every millisecond or so.
    let window = WindowConfig::new(11, 1000).unwrap();
    let m = Arc::new(QuotaManager::new(QuotaType::Produce, window, 100).unwrap());
    let default_client = QuotaEntity::parse(None, Some("<default>")).unwrap();
    m.set_quota(&default_client, 1e15).unwrap();
    let start = Arc::new(Barrier::new(WRITERS + 2));
    let done = Arc::new(AtomicBool::new(false));
    // The slowest writer's clock: the expiry thread never runs ahead of it.
    let clock: Arc<Vec<AtomicI64>> = Arc::new((0..WRITERS).map(|_| AtomicI64::new(0)).collect());

    let writers: Vec<_> = (0..WRITERS)
        .map(|k| {
            let (m, start, clock) = (m.clone(), start.clone(), clock.clone());
            thread::spawn(move || {
                start.wait();
                let own = format!("own-{k}");
                for i in 0..RECORDS {
                    let now = i / 10;
                    clock[k].store(now, Relaxed);
                    let client = if i % 2 == 0 { "shared" } else { own.as_str() };
                    m.record("u", client, 1.0, now).unwrap();
                }
            })
        })
        .collect();
    let churn = {
        let (m, start, done) = (m.clone(), start.clone(), done.clone());
        thread::spawn(move || {
            start.wait();
            let mut changes = 0u64;
            while !done.load(Relaxed) {
                // Bounds far above every rate: the records' totals must not depend on them.
                let bound = 1e15 + (changes % 7) as f64;
                m.set_quota(&default_client, bound).unwrap();
                let other = QuotaEntity::parse(Some("someone-else"), None).unwrap();
                if changes % 2 == 0 {
                    m.set_quota(&other, 1e12).unwrap();
                } else {
                    m.remove_quota(&other);
                }
                changes += 1;
            }
            changes
        })
    };
    let expiry = {
        let (m, start, done) = (m.clone(), start.clone(), done.clone());
        thread::spawn(move || {
            start.wait();
            let (mut rounds, mut removed) = (0u64, 0usize);
            while !done.load(Relaxed) {
                let now = clock.iter().map(|c| c.load(Relaxed)).min().unwrap_or(0);
                // An idle client last seen 150 ms ago: expired now (after 100 ms idle).
                m.record("idle", &format!("c{rounds}"), 1.0, now - 150)
                    .unwrap();
                removed += m.expire_sensors(now).len();
                rounds += 1;
            }
            (rounds, removed)
        })
    };
    for w in writers {
        w.join().unwrap();
    }
    done.store(true, Relaxed);
    let changes = churn.join().unwrap();
    let (rounds, removed) = expiry.join().unwrap();
    assert!(
        changes > 10 && rounds > 10,
        "the churn must overlap the writers"
    );
    assert!(removed > 0, "idle sensors must have expired meanwhile");

    // At 5000 ms the padded window is exactly 10 s: the total is rate * 10.
    let shared = m.measure("u", "shared", 5_000).unwrap();
    assert_eq!(shared * 10.0, (WRITERS as i64 * RECORDS / 2) as f64);
    for k in 0..WRITERS {
        let own = m.measure("u", &format!("own-{k}"), 5_000).unwrap();
        assert_eq!(own * 10.0, (RECORDS / 2) as f64, "own-{k}");
    }
}

#[test]
fn an_expiry_clock_far_ahead_of_the_writers_fails_nothing() {
    // A caller whose expiry clock runs far ahead removes sensors the writers are still
    // using, over and over: records must keep working (Kafka's race: a record into a
    // sensor removed meanwhile is not counted), and nothing may panic.
    let window = WindowConfig::new(11, 1000).unwrap();
    let m = Arc::new(QuotaManager::new(QuotaType::Fetch, window, 0).unwrap());
    m.set_quota(&QuotaEntity::parse(Some("<default>"), None).unwrap(), 10.0)
        .unwrap();
    let done = Arc::new(AtomicBool::new(false));
    let expiry = {
        let (m, done) = (m.clone(), done.clone());
        thread::spawn(move || {
            let mut removed = 0;
            while !done.load(Relaxed) {
                removed += m.expire_sensors(i64::MAX / 4).len();
            }
            removed
        })
    };
    let writers: Vec<_> = (0..WRITERS)
        .map(|k| {
            let m = m.clone();
            thread::spawn(move || {
                let mut throttled = 0;
                for i in 0..20_000i64 {
                    let user = format!("u{}", i % 3);
                    let t = m.record(&user, &format!("c{k}"), 100.0, i).unwrap();
                    if t > 0 {
                        m.unrecord(&user, &format!("c{k}"), 100.0, i).unwrap();
                        m.throttle(&user, "c", i64::from(t), i, Some(k as u64)).unwrap();
                        throttled += 1;
                    }
                }
                throttled
            })
        })
        .collect();
    let throttled: i32 = writers.into_iter().map(|w| w.join().unwrap()).sum();
    done.store(true, Relaxed);
    assert!(expiry.join().unwrap() > 0);
    assert!(throttled > 0);
    assert_eq!(
        m.expired_channels(i64::MAX).len(),
        m.queue_size() + throttled as usize
    );
}
