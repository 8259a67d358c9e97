//! Record-and-check in the core, ns per operation.
//!
//! Baseline measured in the same run: what a straightforward locked implementation would
//! do: one `Mutex<HashMap<(user, client id), Samples>>` and the same sampled-window
//! arithmetic (no precedence walk, no sensor expiry, no bound refresh: less work than
//! kquota does). A second baseline is a peer: the `governor` crate's keyed rate limiter
//! (GCRA over a concurrent hash map; a different algorithm, not Kafka's semantics).
//! Groups: one thread and one key, one thread across 10 000 keys, the same with every
//! record starting a new sample (each key's records one window apart), two threads on the
//! same key, two threads on distinct keys. The first two groups also time a manager built
//! with a custom quota callback (KIP-257, `kquota_with_callback`): a record of a resolved
//! client never calls the callback, so it should cost what the default path does.
//! Each benchmark's clock (a record every 1/64 ms; in the third group a key's records are
//! a second apart) runs on across criterion's samples, as a broker's does: it never goes
//! back, so a sensor starts a new sample every window.

use std::collections::HashMap;
use std::hint::black_box;
use std::sync::{Arc, Barrier, Mutex};
use std::thread;
use std::time::{Duration, Instant};

use criterion::{criterion_group, criterion_main, Criterion};
use kquota_core::kafka::quota::check_bound;
use kquota_core::kafka::samples::{Samples, WindowConfig};
use kquota_core::{ClusterMetadata, QuotaCallback, QuotaEntity, QuotaManager, QuotaType};

const KEYS: usize = 10_000;

/// The locked baseline.
struct LockedRates {
    cfg: WindowConfig,
    sensors: Mutex<HashMap<(String, String), Samples>>,
}

impl LockedRates {
    fn new() -> Self {
        LockedRates {
            cfg: WindowConfig::QUOTA_DEFAULT,
            sensors: Mutex::new(HashMap::new()),
        }
    }

    fn record_and_check(&self, user: &str, client: &str, value: f64, now: i64) -> i64 {
        let mut sensors = self.sensors.lock().unwrap();
        let s = sensors
            .entry((user.to_owned(), client.to_owned()))
            .or_default();
        s.record(&self.cfg, value, now);
        check_bound(s, &self.cfg, 1e12, now).throttle_ms
    }
}

type Governor = governor::DefaultKeyedRateLimiter<String>;

fn governor() -> Governor {
    // A quota no benchmark reaches, so every check takes the "allowed" path.
    let per_second = std::num::NonZeroU32::new(u32::MAX).unwrap();
    governor::RateLimiter::keyed(governor::Quota::per_second(per_second))
}

fn manager() -> QuotaManager {
    let m = QuotaManager::with_defaults(QuotaType::Produce);
    let default_client = QuotaEntity::parse(None, Some("<default>")).unwrap();
    m.set_quota(&default_client, 1e12).unwrap();
    m
}

/// A callback giving every client its own sensor and a quota no benchmark reaches.
struct EveryClient;

impl QuotaCallback for EveryClient {
    fn quota_metric_tags(
        &self,
        _: QuotaType,
        user: &str,
        client_id: &str,
    ) -> kquota_core::Result<(String, String)> {
        Ok((user.to_owned(), client_id.to_owned()))
    }
    fn quota_limit(&self, _: QuotaType, _: (&str, &str)) -> kquota_core::Result<Option<f64>> {
        Ok(Some(1e12))
    }
    fn update_quota(&self, _: QuotaType, _: &QuotaEntity, _: f64) -> kquota_core::Result<()> {
        Ok(())
    }
    fn remove_quota(&self, _: QuotaType, _: &QuotaEntity) -> kquota_core::Result<()> {
        Ok(())
    }
    fn quota_reset_required(&self, _: QuotaType) -> kquota_core::Result<bool> {
        Ok(false)
    }
    fn update_cluster_metadata(&self, _: &ClusterMetadata) -> kquota_core::Result<bool> {
        Ok(false)
    }
}

fn callback_manager() -> QuotaManager {
    QuotaManager::with_callback(
        QuotaType::Produce,
        WindowConfig::QUOTA_DEFAULT,
        kquota_core::DEFAULT_SENSOR_EXPIRY_MS,
        Arc::new(EveryClient),
    )
    .unwrap()
}

/// Runs `op(thread, i)` for `iters` iterations on each of `threads` threads and returns
/// the wall time, so the reported time is per operation per thread under contention.
fn parallel(threads: usize, iters: u64, op: impl Fn(usize, u64) + Sync) -> Duration {
    let barrier = Barrier::new(threads);
    thread::scope(|s| {
        let handles: Vec<_> = (0..threads)
            .map(|k| {
                let (barrier, op) = (&barrier, &op);
                s.spawn(move || {
                    barrier.wait();
                    let start = Instant::now();
                    for i in 0..iters {
                        op(k, i);
                    }
                    start.elapsed()
                })
            })
            .collect();
        handles
            .into_iter()
            .map(|h| h.join().unwrap())
            .max()
            .unwrap()
    })
}

/// Records round robin over the keys, at the time `clock(i)` for the `i`-th record, in
/// kquota (and, with `callback`, in a manager with a quota callback) against the same
/// baselines.
fn round_robin(
    c: &mut Criterion,
    ids: &[String],
    group: &str,
    clock: impl Fn(usize) -> i64 + Copy,
    callback: bool,
) {
    let mut g = c.benchmark_group(group);
    let managers = [
        Some(("kquota", manager())),
        callback.then(|| ("kquota_with_callback", callback_manager())),
    ];
    for (name, m) in managers.into_iter().flatten() {
        let mut i = 0usize; // across samples: the clock only moves forward
        g.bench_function(name, |b| {
            b.iter(|| {
                i += 1;
                black_box(m.record("alice", &ids[i % KEYS], 100.0, clock(i)).unwrap())
            })
        });
    }
    let locked = LockedRates::new();
    let mut i = 0usize; // across samples: the clock only moves forward
    g.bench_function("mutex_baseline", |b| {
        b.iter(|| {
            i += 1;
            black_box(locked.record_and_check("alice", &ids[i % KEYS], 100.0, clock(i)))
        })
    });
    let limiter = governor();
    g.bench_function("governor_keyed", |b| {
        let mut i = 0usize;
        b.iter(|| {
            i += 1;
            black_box(limiter.check_key(&ids[i % KEYS]).is_ok())
        })
    });
    g.finish();
}

fn bench(c: &mut Criterion) {
    let ids: Vec<String> = (0..KEYS).map(|i| format!("client-{i}")).collect();

    let mut g = c.benchmark_group("one_thread_one_key");
    let m = manager();
    let mut now = 0i64; // across samples: the clock only moves forward
    g.bench_function("kquota", |b| {
        b.iter(|| {
            now += 1;
            black_box(m.record("alice", "app-1", 100.0, now / 64).unwrap())
        })
    });
    let custom = callback_manager();
    let mut now = 0i64; // across samples: the clock only moves forward
    g.bench_function("kquota_with_callback", |b| {
        b.iter(|| {
            now += 1;
            black_box(custom.record("alice", "app-1", 100.0, now / 64).unwrap())
        })
    });
    let locked = LockedRates::new();
    let mut now = 0i64; // across samples: the clock only moves forward
    g.bench_function("mutex_baseline", |b| {
        b.iter(|| {
            now += 1;
            black_box(locked.record_and_check("alice", "app-1", 100.0, now / 64))
        })
    });
    let limiter = governor();
    let one_key = "alice/app-1".to_owned();
    g.bench_function("governor_keyed", |b| {
        b.iter(|| black_box(limiter.check_key(&one_key).is_ok()))
    });
    g.finish();

    // 64 records a millisecond: a key's records 156 ms apart.
    round_robin(c, &ids, "one_thread_10k_keys", |i| (i / 64) as i64, true);

    // Every record starts a new sample (and purges the oldest): round robin over the keys,
    // a key's records one window (1 s) apart; then (`sparse`) 2.5 s apart, clients that
    // record less than once a window, so that each open purges every sample 11 s old,
    // the ones an earlier open purged included.
    for (group, apart_ms) in [
        ("one_thread_10k_keys_every_record_opens", 1000),
        ("one_thread_10k_keys_sparse", 2500),
    ] {
        round_robin(c, &ids, group, |i| (i * apart_ms / KEYS) as i64, false);
    }

    for (group, distinct) in [
        ("two_threads_same_key", false),
        ("two_threads_distinct_keys", true),
    ] {
        let mut g = c.benchmark_group(group);
        let key = |k: usize| {
            if distinct {
                ids[k].as_str()
            } else {
                ids[0].as_str()
            }
        };
        let m = Arc::new(manager());
        let mut first = 0u64; // across samples: the clock only moves forward
        g.bench_function("kquota", |b| {
            b.iter_custom(|iters| {
                let from = first;
                first += iters;
                parallel(2, iters, |k, i| {
                    let now = ((from + i) / 64) as i64;
                    black_box(m.record("alice", key(k), 100.0, now).unwrap());
                })
            })
        });
        let locked = LockedRates::new();
        let mut first = 0u64;
        g.bench_function("mutex_baseline", |b| {
            b.iter_custom(|iters| {
                let from = first;
                first += iters;
                parallel(2, iters, |k, i| {
                    let now = ((from + i) / 64) as i64;
                    black_box(locked.record_and_check("alice", key(k), 100.0, now));
                })
            })
        });
        let limiter = governor();
        let owned = [key(0).to_owned(), key(1).to_owned()];
        g.bench_function("governor_keyed", |b| {
            b.iter_custom(|iters| {
                parallel(2, iters, |k, _| {
                    black_box(limiter.check_key(&owned[k]).is_ok());
                })
            })
        });
        g.finish();
    }
}

criterion_group! {
    name = benches;
    config = Criterion::default()
        .warm_up_time(Duration::from_secs(1))
        .measurement_time(Duration::from_secs(3));
    targets = bench
}
criterion_main!(benches);
