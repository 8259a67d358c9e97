//! Custom quota callbacks (KIP-257) in the core: what the manager asks the callback and
//! when, the limits it enforces, resets, failures, and the replay kernel through it.

use std::collections::HashMap;
use std::sync::atomic::{AtomicBool, AtomicUsize, Ordering::Relaxed};
use std::sync::{Arc, Mutex};

use kquota_core::{
    update_cluster_metadata, BrokerNode, ClusterMetadata, EntityName, Error, Events,
    PartitionLeader, QuotaCallback, QuotaEntity, QuotaManager, QuotaType, ReplayKernel,
    ReplayOptions, Request, RequestPath, WindowConfig, DEFAULT_SENSOR_EXPIRY_MS,
};

/// A user quota split across brokers: each user's configured `<user>` quota, divided by
/// `divisor`, or by the number of brokers once metadata names more than one. Counts
/// every call.
#[derive(Default)]
struct SplitUserQuota {
    quotas: Mutex<HashMap<String, f64>>,
    brokers: AtomicUsize,
    reset: AtomicBool,
    fail: AtomicBool,
    tags_calls: AtomicUsize,
    limit_calls: AtomicUsize,
    reset_calls: AtomicUsize,
}

impl SplitUserQuota {
    fn divisor(&self) -> f64 {
        self.brokers.load(Relaxed).max(2) as f64
    }

    fn calls(&self) -> (usize, usize) {
        (
            self.tags_calls.load(Relaxed),
            self.limit_calls.load(Relaxed),
        )
    }
}

impl QuotaCallback for SplitUserQuota {
    fn quota_metric_tags(
        &self,
        _: QuotaType,
        user: &str,
        _client_id: &str,
    ) -> kquota_core::Result<(String, String)> {
        self.tags_calls.fetch_add(1, Relaxed);
        if self.fail.load(Relaxed) {
            return Err(Error::Callback("quota_metric_tags: boom".into()));
        }
        Ok((kquota_core::sanitize_user(user).into_owned(), String::new()))
    }

    fn quota_limit(&self, _: QuotaType, tags: (&str, &str)) -> kquota_core::Result<Option<f64>> {
        self.limit_calls.fetch_add(1, Relaxed);
        let quotas = self.quotas.lock().unwrap();
        Ok(quotas.get(tags.0).map(|q| q / self.divisor()))
    }

    fn update_quota(&self, _: QuotaType, e: &QuotaEntity, value: f64) -> kquota_core::Result<()> {
        if let (Some(EntityName::Named(u)), None) = (e.user(), e.client_id()) {
            self.quotas.lock().unwrap().insert(u.clone(), value);
        }
        Ok(())
    }

    fn remove_quota(&self, _: QuotaType, e: &QuotaEntity) -> kquota_core::Result<()> {
        if let (Some(EntityName::Named(u)), None) = (e.user(), e.client_id()) {
            self.quotas.lock().unwrap().remove(u);
        }
        Ok(())
    }

    fn quota_reset_required(&self, _: QuotaType) -> kquota_core::Result<bool> {
        self.reset_calls.fetch_add(1, Relaxed);
        Ok(self.reset.swap(false, Relaxed))
    }

    fn update_cluster_metadata(&self, md: &ClusterMetadata) -> kquota_core::Result<bool> {
        let before = self.brokers.swap(md.brokers.len(), Relaxed);
        Ok(before != md.brokers.len())
    }
}

fn user(name: &str) -> QuotaEntity {
    QuotaEntity::parse(Some(name), None).unwrap()
}

fn with(cb: &Arc<SplitUserQuota>, t: QuotaType) -> QuotaManager {
    let cb: Arc<dyn QuotaCallback> = cb.clone();
    QuotaManager::with_callback(t, WindowConfig::QUOTA_DEFAULT, DEFAULT_SENSOR_EXPIRY_MS, cb)
        .unwrap()
}

fn metadata(brokers: i32) -> ClusterMetadata {
    ClusterMetadata {
        cluster_id: Some("c".into()),
        local_broker: Some(0),
        brokers: (0..brokers)
            .map(|id| BrokerNode {
                node_id: id,
                host: "127.0.0.1".into(),
                port: 9092 + id,
                rack: None,
            })
            .collect(),
        partitions: vec![PartitionLeader {
            topic: "t".into(),
            partition: 0,
            leader: Some(0),
        }],
    }
}

/// Throttles of `m` over a fixed produce trace of three clients of two users.
fn trace(m: &QuotaManager) -> Vec<i32> {
    (0..600i64)
        .map(|i| {
            let (u, c) = [("alice", "a1"), ("alice", "a2"), ("bob", "b1")][(i % 3) as usize];
            m.record(u, c, ((i * 37) % 900) as f64, i * 9).unwrap()
        })
        .collect()
}

#[test]
fn a_halved_user_quota_throttles_as_the_built_in_half() {
    let cb = Arc::new(SplitUserQuota::default());
    let custom = with(&cb, QuotaType::Produce);
    custom.set_quota(&user("alice"), 2000.0).unwrap();
    custom.set_quota(&user("bob"), 3000.0).unwrap();
    let builtin = QuotaManager::with_defaults(QuotaType::Produce);
    builtin.set_quota(&user("alice"), 1000.0).unwrap();
    builtin.set_quota(&user("bob"), 1500.0).unwrap();
    let (a, b) = (trace(&custom), trace(&builtin));
    assert_eq!(a, b);
    assert!(a.iter().any(|&t| t > 0), "the trace must throttle");
    assert_eq!(custom.bound("alice", "a1"), Some(1000.0));
    assert_eq!(custom.sensor_names(), builtin.sensor_names());
    assert_eq!(
        custom.max_value_in_quota_window("bob", "b1", 0).unwrap(),
        builtin.max_value_in_quota_window("bob", "b1", 0).unwrap()
    );
}

#[test]
fn the_hot_path_never_calls_the_callback() {
    let cb = Arc::new(SplitUserQuota::default());
    let m = with(&cb, QuotaType::Fetch);
    m.set_quota(&user("alice"), 2000.0).unwrap();
    m.record("alice", "a", 10.0, 0).unwrap();
    m.record("alice", "b", 10.0, 0).unwrap();
    // Two clients resolved: two tag calls; one sensor: one limit call.
    assert_eq!(cb.calls(), (2, 1));
    let resets = cb.reset_calls.load(Relaxed);
    for i in 0..10_000 {
        let c = if i % 2 == 0 { "a" } else { "b" };
        m.record("alice", c, 10.0, i).unwrap();
        m.unrecord("alice", c, 1.0, i).unwrap();
        m.throttle("alice", c, 5, i, None).unwrap();
        m.max_value_in_quota_window("alice", c, i).unwrap();
        m.measure("alice", c, i);
    }
    let keys = vec![("alice".to_owned(), "a".to_owned())];
    m.record_batch(&[10_000; 50], &[0; 50], &[1.0; 50], &keys, None)
        .unwrap();
    assert_eq!(cb.calls(), (2, 1));
    assert_eq!(cb.reset_calls.load(Relaxed), resets);
}

#[test]
fn threads_resolve_each_client_once() {
    let cb = Arc::new(SplitUserQuota::default());
    let m = Arc::new(with(&cb, QuotaType::Produce));
    m.set_quota(&user("u"), 1e9).unwrap();
    let threads: Vec<_> = (0..4)
        .map(|t| {
            let m = m.clone();
            std::thread::spawn(move || {
                for i in 0..20_000i64 {
                    m.record("u", &format!("c{}", (i + t) % 8), 1.0, i).unwrap();
                }
            })
        })
        .collect();
    threads.into_iter().for_each(|t| t.join().unwrap());
    let (tags, limits) = cb.calls();
    // At most one resolution per client per thread (racing first requests), never per record.
    assert!((8..=32).contains(&tags), "{tags}");
    assert!((1..=4).contains(&limits), "{limits}");
    assert_eq!(m.sensor_count(), 1);
}

#[test]
fn metadata_that_changes_quotas_resets_the_limits() {
    let cb = Arc::new(SplitUserQuota::default());
    let (p, f, r) = (
        with(&cb, QuotaType::Produce),
        with(&cb, QuotaType::Fetch),
        with(&cb, QuotaType::Request),
    );
    p.set_quota(&user("u"), 6000.0).unwrap();
    p.record("u", "c", 1.0, 0).unwrap();
    assert_eq!(p.bound("u", "c"), Some(3000.0));
    let before = cb.calls();
    // One callback shared by three managers is told once.
    assert!(update_cluster_metadata(&[&p, &f, &r], &metadata(3)).unwrap());
    assert_eq!(cb.brokers.load(Relaxed), 3);
    assert_eq!(p.bound("u", "c"), Some(2000.0));
    // The reset asked the one live sensor's limit; the client resolves again (tags asked).
    assert_eq!(cb.calls().1, before.1 + 1);
    p.record("u", "c", 1.0, 1).unwrap();
    assert_eq!(cb.calls().0, before.0 + 1);
    // Unchanged metadata: no reset.
    assert!(!update_cluster_metadata(&[&p, &f, &r], &metadata(3)).unwrap());
    assert_eq!(cb.calls().1, before.1 + 1);
    // The samples survive a reset: the rate is that of the same records without one.
    let plain = QuotaManager::with_defaults(QuotaType::Produce);
    plain.set_quota(&user("u"), 2000.0).unwrap();
    plain.record("u", "c", 1.0, 0).unwrap();
    plain.record("u", "c", 1.0, 1).unwrap();
    assert_eq!(p.measure("u", "c", 1), plain.measure("u", "c", 1));
}

#[test]
fn a_reset_required_is_honoured_at_the_next_resolution() {
    let cb = Arc::new(SplitUserQuota::default());
    let m = with(&cb, QuotaType::Produce);
    m.set_quota(&user("u"), 6000.0).unwrap();
    m.record("u", "c", 1.0, 0).unwrap();
    // The callback's own configuration changed behind the manager's back.
    cb.quotas.lock().unwrap().insert("u".into(), 600.0);
    cb.reset.store(true, Relaxed);
    // An already-resolved client does not ask...
    m.record("u", "c", 1.0, 0).unwrap();
    assert_eq!(m.bound("u", "c"), Some(3000.0));
    // ...a new resolution does, and the reset refreshes every live sensor.
    m.record("u", "other", 1.0, 0).unwrap();
    assert_eq!(m.bound("u", "c"), Some(300.0));
    // Or a periodic task asks.
    cb.quotas.lock().unwrap().insert("u".into(), 60.0);
    cb.reset.store(true, Relaxed);
    assert!(m.reset_if_required().unwrap());
    assert_eq!(m.bound("u", "c"), Some(30.0));
    assert!(!m.reset_if_required().unwrap());
}

#[test]
fn a_failing_callback_is_an_error_and_leaves_no_sensor() {
    let cb = Arc::new(SplitUserQuota::default());
    let m = with(&cb, QuotaType::Produce);
    cb.fail.store(true, Relaxed);
    let err = m.record("u", "c", 1.0, 0).unwrap_err();
    assert!(matches!(err, Error::Callback(_)), "{err:?}");
    assert!(err.to_string().contains("quota_metric_tags"), "{err}");
    assert_eq!(m.sensor_count(), 0);
    let keys = vec![("u".to_owned(), "c".to_owned())];
    assert!(m.record_batch(&[0], &[0], &[1.0], &keys, None).is_err());
    assert!(m.max_value_in_quota_window("u", "c", 0).is_err());
    assert_eq!(m.sensor_count(), 0);
    cb.fail.store(false, Relaxed);
    assert_eq!(m.record("u", "c", 1.0, 0).unwrap(), 0);
    assert_eq!(m.sensor_count(), 1);
}

/// Limits a callback must not give.
struct BadLimit(f64);

impl QuotaCallback for BadLimit {
    fn quota_metric_tags(
        &self,
        _: QuotaType,
        u: &str,
        c: &str,
    ) -> kquota_core::Result<(String, String)> {
        Ok((u.into(), c.into()))
    }
    fn quota_limit(&self, _: QuotaType, _: (&str, &str)) -> kquota_core::Result<Option<f64>> {
        Ok(Some(self.0))
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

#[test]
fn a_limit_that_is_not_a_quota_is_refused() {
    for bad in [0.0, -5.0, f64::NAN, f64::INFINITY] {
        let m = QuotaManager::with_callback(
            QuotaType::Produce,
            WindowConfig::QUOTA_DEFAULT,
            DEFAULT_SENSOR_EXPIRY_MS,
            Arc::new(BadLimit(bad)),
        )
        .unwrap();
        let err = m.record("u", "c", 1.0, 0).unwrap_err();
        assert!(matches!(err, Error::Callback(_)), "{err:?}");
        assert!(err.to_string().contains("quota_limit"), "{err}");
        assert!(err.to_string().contains(&format!("{bad:?}")), "{err}");
        assert_eq!(m.sensor_count(), 0);
        assert!(m.quota_for("u", "c").is_err());
    }
}

#[test]
fn the_replay_kernel_resolves_through_the_callback() {
    // One callback per scenario, as a back-test makes one per scenario.
    let build = || {
        let cb = Arc::new(SplitUserQuota::default());
        let managers = QuotaType::ALL.map(|t| with(&cb, t));
        for m in &managers {
            m.set_quota(&user("alice"), 4000.0).unwrap();
            m.set_quota(&user("bob"), 2000.0).unwrap();
        }
        (cb, managers)
    };
    let (kernel_cb, kernel_managers) = build();
    let [p, f, r] = &kernel_managers;
    let pairs = [
        ("alice", "a1"),
        ("alice", "a2"),
        ("bob", "b1"),
        ("carol", "c1"),
    ];
    let path = RequestPath::new(p, f, r).unwrap();
    let mut kernel = ReplayKernel::new(&pairs, &[path], ReplayOptions::default()).unwrap();
    let calls = kernel_cb.calls();
    let n = 900usize;
    let now: Vec<i64> = (0..n as i64).map(|i| i * 7).collect();
    let pair: Vec<i32> = (0..n as i32).map(|i| i % 4).collect();
    let kind: Vec<i8> = (0..n).map(|i| (i % 3 == 0) as i8).collect();
    let bytes: Vec<f64> = (0..n).map(|i| ((i * 53) % 1500) as f64).collect();
    let thread_ns: Vec<f64> = vec![0.0; n];
    let acks: Vec<i16> = vec![-1; n];
    let events = Events {
        time_ms: &now,
        pair: &pair,
        kind: &kind,
        bytes: &bytes,
        thread_ns: &thread_ns,
        acks: &acks,
        partitions: &[],
        strict: &[],
        topic_offsets: &[],
        topic_partitions: &[],
        request_throttle_ms: &[],
    };
    let mut got = vec![None; n];
    for out in [kernel.feed(&events).unwrap(), kernel.finish()] {
        for (seq, t) in out.seq.iter().zip(&out.throttle_ms) {
            got[*seq as usize] = Some(*t);
        }
    }
    // Feeding never asked the callback.
    assert_eq!(kernel_cb.calls(), calls);

    let (_, managers) = build();
    let [p, f, r] = &managers;
    let path = RequestPath::new(p, f, r).unwrap();
    let mut throttled = 0;
    for i in 0..n {
        let (u, c) = pairs[pair[i] as usize];
        let request = if kind[i] == 1 {
            Request::fetch(bytes[i], 0.0)
        } else {
            Request::produce(bytes[i], 0.0, -1)
        };
        let outcome = path.record(u, c, &request, now[i]).unwrap();
        throttled += usize::from(outcome.throttle_ms > 0);
        assert_eq!(got[i], Some(outcome.throttle_ms), "event {i}");
    }
    assert!(throttled > 0, "the trace must throttle");
    let summaries = kernel.summaries();
    let alice = summaries
        .iter()
        .find(|s| s.quota_type == QuotaType::Produce && s.user == "alice")
        .unwrap();
    assert_eq!(alice.quota, Some(2000.0));
}

#[test]
fn each_sibling_has_its_own_callback_told_every_quota() {
    // Each broker has a callback instance of its own: a sibling takes a new one, which
    // learns the quotas set so far and every change made on any sibling after.
    let (cb_a, cb_b) = (
        Arc::new(SplitUserQuota::default()),
        Arc::new(SplitUserQuota::default()),
    );
    let a = with(&cb_a, QuotaType::Produce);
    assert!(matches!(
        a.for_another_broker(),
        Err(Error::InvalidConfig(_))
    ));
    let plain = QuotaManager::with_defaults(QuotaType::Produce);
    assert!(matches!(
        plain.for_another_broker_with_callback(cb_b.clone()),
        Err(Error::InvalidConfig(_))
    ));
    a.set_quota(&user("alice"), 2000.0).unwrap();
    let b = a.for_another_broker_with_callback(cb_b.clone()).unwrap();
    assert_eq!(cb_b.quotas.lock().unwrap().get("alice"), Some(&2000.0));
    // Each measures its own traffic under its own callback's limit.
    assert_eq!(b.record("alice", "x", 600.0, 0).unwrap(), 0);
    assert_eq!(b.bound("alice", "x"), Some(1000.0));
    assert_eq!(a.measure("alice", "x", 0), None);
    assert_eq!(a.record("alice", "x", 100.0, 0).unwrap(), 0);
    assert_eq!(a.measure("alice", "x", 0), Some(10.0));
    // A change on either reaches both callbacks; each asks its own limit again.
    b.set_quota(&user("alice"), 4000.0).unwrap();
    assert_eq!(cb_a.quotas.lock().unwrap().get("alice"), Some(&4000.0));
    a.record("alice", "x", 1.0, 10).unwrap();
    assert_eq!(
        (a.bound("alice", "x"), b.bound("alice", "x")),
        (Some(2000.0), Some(2000.0))
    );
    // Metadata told to one broker's callback changes that broker's limits only.
    assert!(update_cluster_metadata(&[&b], &metadata(4)).unwrap());
    a.record("alice", "x", 1.0, 20).unwrap();
    assert_eq!(
        (a.bound("alice", "x"), b.bound("alice", "x")),
        (Some(2000.0), Some(1000.0))
    );
    a.remove_quota(&user("alice")).unwrap();
    assert!(cb_a.quotas.lock().unwrap().is_empty());
    assert!(cb_b.quotas.lock().unwrap().is_empty());
    b.record("alice", "x", 1.0, 30).unwrap();
    assert_eq!(b.bound("alice", "x"), Some(kquota_core::UNLIMITED));
}
