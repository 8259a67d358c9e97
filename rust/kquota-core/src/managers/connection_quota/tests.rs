//! Unit tests of [`ConnectionQuotas`], after Kafka's `ConnectionQuotasTest`.

use super::*;

const EXTERNAL_IP: &str = "192.168.1.1";

fn quotas() -> ConnectionQuotas {
    // ConnectionQuotasTest: 2 samples of 1 s, three listeners, REPLICATION inter-broker.
    let q = ConnectionQuotas::new(
        WindowConfig::new(2, 1000).unwrap(),
        i64::from(i32::MAX),
        Some("REPLICATION"),
    )
    .unwrap();
    for l in ["EXTERNAL", "REPLICATION", "ADMIN"] {
        q.add_listener(l, None).unwrap();
    }
    q
}

#[test]
fn ip_quota_update_is_enforced_at_once() {
    // ConnectionQuotasTest.testEnforcedIpConnectionRateQuotaUpdate (numbers).
    let q = quotas();
    let t = 1_700_000_000_000;
    q.set_ip_quota(Some(EXTERNAL_IP), Some(20)).unwrap();
    let accept = |n: usize| {
        (0..n)
            .take_while(|_| {
                q.on_new_connection("EXTERNAL", EXTERNAL_IP, t)
                    .unwrap()
                    .ip_throttle_ms
                    == 0
            })
            .count()
    };
    assert_eq!(accept(40), 20);
    q.set_ip_quota(Some(EXTERNAL_IP), Some(30)).unwrap();
    assert_eq!(accept(40), 10);
    q.set_ip_quota(Some(EXTERNAL_IP), None).unwrap();
    assert_eq!(accept(40), 40);
    assert_eq!(q.ip_quota(EXTERNAL_IP).unwrap(), i32::MAX);
}

#[test]
fn bad_input_changes_nothing() {
    let q = quotas();
    for bad in [0, -1, i64::from(i32::MAX) + 1] {
        assert!(matches!(
            q.set_ip_quota(None, Some(bad)),
            Err(Error::InvalidUsage(_))
        ));
    }
    assert!(q.set_ip_quota(Some("not-an-ip"), Some(5)).is_err());
    assert!(q.set_ip_quota(Some("300.1.1.1"), Some(5)).is_err());
    assert!(q.set_broker_max_rate(-1).is_err());
    assert!(q.set_listener_max_rate("EXTERNAL", Some(0)).is_err());
    assert!(q.set_listener_max_rate("NOPE", Some(5)).is_err());
    assert!(q.accept_delay("NOPE", 0).is_err());
    assert!(q.on_new_connection("EXTERNAL", "x", 0).is_err());
    assert_eq!(q.ip_quotas(), (vec![], None));
    assert_eq!(q.broker_rate(0), 0.0);
    assert_eq!(q.broker_max_rate(), i32::MAX);
}

#[test]
fn broker_limit_delays_but_not_the_protected_listener() {
    let q = quotas();
    q.set_broker_max_rate(2).unwrap();
    let t = 10_000;
    assert_eq!(q.accept_delay("EXTERNAL", t).unwrap(), 0);
    assert_eq!(q.accept_delay("EXTERNAL", t).unwrap(), 0);
    // 3 connections over the padded 1 s window: (3-2)/2 * 1000 = 500 ms.
    assert_eq!(q.accept_delay("EXTERNAL", t).unwrap(), 500);
    assert_eq!(q.accept_delay("REPLICATION", t).unwrap(), 0);
    assert_eq!(q.listener_throttle_avgs("EXTERNAL", t).unwrap().0, 500.0);
    assert_eq!(q.broker_rate(t), 3.0);
}

#[test]
fn siblings_share_the_configuration_and_count_apart() {
    let a = quotas();
    let b = a.for_another_broker();
    let t = 1_700_000_000_000;
    // A change through either is seen by both.
    b.set_ip_quota(Some(EXTERNAL_IP), Some(2)).unwrap();
    a.set_broker_max_rate(3).unwrap();
    assert_eq!(a.ip_quota(EXTERNAL_IP).unwrap(), 2);
    assert_eq!(b.broker_max_rate(), 3);
    b.add_listener("INTERNAL", Some(7)).unwrap();
    assert!(a.listeners().contains(&("INTERNAL".to_owned(), 7)));
    // Each counts its own connections, as one broker alone with these quotas would.
    for q in [&a, &b] {
        let alone = quotas();
        alone.set_ip_quota(Some(EXTERNAL_IP), Some(2)).unwrap();
        alone.set_broker_max_rate(3).unwrap();
        let decide = |q: &ConnectionQuotas| -> Vec<ConnectionDecision> {
            (0..3)
                .map(|_| q.on_new_connection("EXTERNAL", EXTERNAL_IP, t).unwrap())
                .collect()
        };
        let decisions = decide(q);
        assert_eq!(decisions, decide(&alone));
        assert!(decisions[2].ip_throttle_ms > 0, "{decisions:?}");
        assert_eq!(
            q.listener_rate("EXTERNAL", t).unwrap(),
            alone.listener_rate("EXTERNAL", t).unwrap()
        );
        assert_eq!(q.broker_rate(t), alone.broker_rate(t));
        assert_eq!(
            q.ip_rate(EXTERNAL_IP, t).unwrap(),
            alone.ip_rate(EXTERNAL_IP, t).unwrap()
        );
    }
    assert_eq!(a.broker_rate(t), b.broker_rate(t));
    // A listener one removes is gone for both; the other's sensors go at its expiry.
    assert!(a.remove_listener("EXTERNAL"));
    assert!(b.listener_rate("EXTERNAL", t).is_err());
    assert_eq!(b.listener_sensors.pin().iter().count(), 1);
    b.expire_sensors(t);
    assert_eq!(b.listener_sensors.pin().iter().count(), 0);
    // Added again, it starts from nothing on both.
    a.add_listener("EXTERNAL", None).unwrap();
    assert_eq!(b.listener_rate("EXTERNAL", t).unwrap(), 0.0);
    assert_eq!(a.listener_rate("EXTERNAL", t).unwrap(), 0.0);
}

#[test]
fn ipv6_host_address_is_javas() {
    assert_eq!(
        host_address(&canonical_ip("::1").unwrap()),
        "0:0:0:0:0:0:0:1"
    );
    assert_eq!(host_address(&canonical_ip("10.0.0.1").unwrap()), "10.0.0.1");
}

#[test]
fn idle_ip_sensors_expire() {
    let q = quotas();
    q.set_ip_quota(None, Some(5)).unwrap();
    q.on_new_connection("ADMIN", "10.0.0.1", 0).unwrap();
    assert_eq!(q.ip_sensor_names(), vec!["Connection-Accept-Rate-10.0.0.1"]);
    assert!(q.expire_sensors(3_600_000).is_empty());
    assert_eq!(
        q.expire_sensors(3_600_001),
        vec!["Connection-Accept-Rate-10.0.0.1"]
    );
    assert_eq!(q.ip_rate("10.0.0.1", 3_600_001).unwrap(), None);
}

const V4: &str = "10.0.0.1";
const MAPPED: &str = "::ffff:10.0.0.1";

#[test]
fn an_ipv4_mapped_address_is_its_ipv4_entity_for_quotas() {
    // set under one spelling, read and removed under the other
    for (set, get) in [(V4, MAPPED), (MAPPED, V4)] {
        let q = quotas();
        q.set_ip_quota(Some(set), Some(1)).unwrap();
        assert_eq!(q.ip_quota(get).unwrap(), 1);
        assert_eq!(q.ip_quota(set).unwrap(), 1);
        assert_eq!(q.ip_quotas(), (vec![(V4.to_string(), 1)], None));
        q.set_ip_quota(Some(get), None).unwrap();
        assert_eq!(q.ip_quota(set).unwrap(), i32::MAX);
        assert_eq!(q.ip_quotas(), (vec![], None));
    }
}

#[test]
fn an_ipv4_mapped_address_records_on_its_ipv4_sensor() {
    let q = quotas();
    let t = 1_700_000_000_000;
    q.set_ip_quota(Some(V4), Some(2)).unwrap();
    for ip in [V4, MAPPED] {
        let d = q.on_new_connection("EXTERNAL", ip, t).unwrap();
        assert_eq!(d.ip_throttle_ms, 0, "{ip}");
    }
    // the third connection, under either spelling, is over the one entity's quota of 2
    assert!(
        q.on_new_connection("EXTERNAL", MAPPED, t)
            .unwrap()
            .ip_throttle_ms
            > 0
    );
    assert_eq!(q.ip_sensor_names(), vec!["Connection-Accept-Rate-10.0.0.1"]);
    assert_eq!(q.ip_rate(MAPPED, t).unwrap(), q.ip_rate(V4, t).unwrap());
    assert_eq!(q.ip_bound(MAPPED).unwrap(), Some(2.0));
    assert!(q.admit_ip("EXTERNAL", MAPPED, t).unwrap() > 0);
}
