//! Unit tests of [`ControllerMutationQuotaManager`] and its token buckets.

use super::*;
use crate::kafka::rate::SampledRate;

fn pair(user: &str, client: &str) -> QuotaEntity {
    QuotaEntity::parse(Some(user), Some(client)).unwrap()
}

#[test]
fn siblings_share_quotas_and_keep_their_own_buckets() {
    let a = ControllerMutationQuotaManager::with_defaults();
    let b = a.for_another_broker();
    b.set_quota(&pair("u", "c"), 2.0).unwrap();
    assert!(a.enabled());
    let t = 1_700_000_000_000;
    // Strict checks overdraw a's bucket until it refuses; b's is still full.
    let mut taken = 0;
    while a.record_strict("u", "c", 5.0, t).unwrap().accepted {
        taken += 1;
        assert!(taken < 100, "a strict quota must refuse once overdrawn");
    }
    assert!(b.record_strict("u", "c", 5.0, t).unwrap().accepted);
    a.remove_quota(&pair("u", "c"));
    assert_eq!(b.quota(&pair("u", "c")), None);
}

#[test]
fn mutation_rate_is_a_rate_of_what_was_recorded_over_the_metrics_windows() {
    // Kafka's sensor records into its Rate (broker metrics windows, 2 x 30 s) exactly
    // what it records into the bucket: nothing when a strict check refuses.
    let m = ControllerMutationQuotaManager::new(WindowConfig::new(10, 1000).unwrap(), 3_600_000)
        .unwrap();
    assert_eq!(m.mutation_rate("u", "c", 0), None);
    m.set_quota(&pair("u", "c"), 2.0).unwrap();
    let reference = SampledRate::new(WindowConfig::METRICS_DEFAULT, None).unwrap();
    let t0 = 1_700_000_000_000;
    let mut refused = 0;
    for (step, (permits, strict)) in [
        (15.0, true),
        (9.0, true),
        (4.0, true),
        (7.0, false),
        (3.0, true),
    ]
    .into_iter()
    .enumerate()
    {
        let t = t0 + 700 * step as i64;
        let check = if strict {
            m.record_strict("u", "c", permits, t).unwrap()
        } else {
            m.record_permissive("u", "c", permits, t).unwrap()
        };
        if check.accepted {
            reference.record_no_check(permits, t).unwrap();
        } else {
            refused += 1;
        }
        assert_eq!(
            m.mutation_rate("u", "c", t),
            Some(reference.measure(t)),
            "step {step}"
        );
    }
    assert!(refused >= 1, "the trace must include a strict refusal");
    let later = t0 + 45_000;
    assert_eq!(
        m.mutation_rate("u", "c", later),
        Some(reference.measure(later))
    );
    assert_eq!(m.mutation_rate("other", "c", later), None);
}

#[test]
fn kafka_manager_test_quota_violation() {
    // ControllerMutationQuotaManagerTest.testControllerMutationQuotaViolation:
    // 10 samples of 1 s, quota 10 for (ANONYMOUS, test-client).
    let m = ControllerMutationQuotaManager::new(WindowConfig::new(10, 1000).unwrap(), 3_600_000)
        .unwrap();
    m.set_quota(&pair("ANONYMOUS", "test-client"), 10.0)
        .unwrap();
    let mut t = 1_700_000_000_000;
    for _ in 0..10 {
        assert_eq!(m.record("ANONYMOUS", "test-client", 10.0, t).unwrap(), 0);
        t += 1000;
    }
    assert_eq!(m.record("ANONYMOUS", "test-client", 110.0, t).unwrap(), 0);
    let throttle = m.record("ANONYMOUS", "test-client", 110.0, t).unwrap();
    assert_eq!(throttle, 1000);
    m.throttle("ANONYMOUS", "test-client", 1000, t, Some(1))
        .unwrap();
    assert_eq!(m.queue_size(), 1);
    assert_eq!(m.next_unmute_ms(), Some(t + 1000));
    assert!(m.expired_channels(t).is_empty());
    t += 1000;
    assert_eq!(m.expired_channels(t), vec![1]);
    assert_eq!(m.next_unmute_ms(), None);
    assert_eq!(m.record("ANONYMOUS", "test-client", 110.0, t).unwrap(), 0);
}

#[test]
fn disabled_until_a_quota_is_set_and_bad_input_changes_nothing() {
    let m = ControllerMutationQuotaManager::with_defaults();
    assert_eq!(m.record("u", "c", 1e9, 0).unwrap(), 0);
    assert_eq!(m.sensor_count(), 0);
    let e = QuotaEntity::parse(Some("u"), None).unwrap();
    for bad in [0.0, -1.0, f64::NAN, f64::INFINITY] {
        assert!(matches!(m.set_quota(&e, bad), Err(Error::InvalidQuota(_))));
    }
    assert!(!m.enabled());
    m.set_quota(&e, 5.0).unwrap();
    assert_eq!(m.tags("u", "c"), ("u".to_owned(), String::new()));
    m.record_strict("u", "c", 3.0, 10_000).unwrap();
    let before = m.tokens("u", "c", 10_000);
    for bad in [-1.0, f64::NAN, f64::INFINITY] {
        assert!(matches!(
            m.record_strict("u", "c", bad, 10_000),
            Err(Error::InvalidUsage(_))
        ));
        assert!(m.record_permissive("u", "c", bad, 10_000).is_err());
    }
    assert_eq!(m.tokens("u", "c", 10_000), before);
    assert_eq!(before, Some(47.0));
}

#[test]
fn quota_change_is_effective_at_once_and_keeps_tokens() {
    let m =
        ControllerMutationQuotaManager::new(WindowConfig::new(10, 1000).unwrap(), 1000).unwrap();
    let e = QuotaEntity::parse(None, Some("<default>")).unwrap();
    m.set_quota(&e, 10.0).unwrap();
    let t = 1_000_000;
    m.record_strict("u", "c", 150.0, t).unwrap();
    assert_eq!(m.tokens("u", "c", t), Some(-50.0));
    m.set_quota(&e, 100.0).unwrap();
    let refused = m.record_strict("u", "c", 1.0, t).unwrap();
    assert_eq!((refused.accepted, refused.throttle_ms), (false, 500));
    assert_eq!(m.tokens("u", "c", t + 500), Some(0.0));
    assert_eq!(
        m.expire_sensors(t + 1501),
        vec![
            "ControllerMutation-:c".to_owned(),
            "ControllerMutationThrottleTime-:c".to_owned()
        ]
    );
    assert_eq!(m.sensor_count(), 0);
}

#[test]
fn request_quota_remembers_and_decays_its_throttle() {
    let m = Arc::new(
        ControllerMutationQuotaManager::new(WindowConfig::new(10, 1000).unwrap(), 1000).unwrap(),
    );
    m.set_quota(&pair("u", "c"), 10.0).unwrap();
    let t = 1_000_000;
    let strict = MutationRequestQuota::new(m.clone(), "u", "c", true, t);
    assert!(strict.record(90.0, t).unwrap().accepted);
    assert!(strict.record(90.0, t).unwrap().accepted);
    assert!(!strict.record(90.0, t).unwrap().accepted);
    assert!(strict.is_exceeded());
    assert_eq!(strict.throttle_time(t + 5000), 3000);
    assert!(MutationApi::CreateTopics.is_strict(6));
    assert!(!MutationApi::DeleteTopics.is_strict(4));
    assert!("alter_topics".parse::<MutationApi>().is_err());
}

#[test]
fn a_new_mutation_bucket_is_full_at_first_use_on_the_default_clock() {
    let manager = ControllerMutationQuotaManager::with_defaults();
    let user = QuotaEntity::parse(Some("u"), None).unwrap();
    manager.set_quota(&user, 10.0).unwrap();
    let now = crate::kafka::clock::monotonic_ms();
    assert_eq!(manager.record("u", "c", 1.0, now).unwrap(), 0);
    // 11 samples x 1 s x 10 partitions/s, less the one recorded.
    assert_eq!(manager.tokens("u", "c", now), Some(109.0));
}
