//! Replays the scenario vectors of `tests/vectors/` (controller-mutation token bucket and
//! connection-creation rates; values from Kafka's own tests of those classes, each vector
//! names its test) through the core. Doubles are compared exactly; a `rate` expectation
//! is `{value, epsilon}` where Kafka's test asserts within an epsilon.
#![cfg(not(loom))]

use std::collections::HashMap;
use std::path::PathBuf;
use std::sync::Arc;

use kquota_core::kafka::token_bucket::{throttle_time, Bucket};
use kquota_core::{
    ConnectionQuotas, ControllerMutationQuotaManager, MutationRequestQuota, QuotaEntity,
    WindowConfig,
};
use serde_json::Value;

fn vectors() -> Vec<(String, Value)> {
    let dir = PathBuf::from(env!("CARGO_MANIFEST_DIR")).join("../../tests/vectors");
    let mut all: Vec<(String, Value)> = std::fs::read_dir(&dir)
        .unwrap_or_else(|e| panic!("{}: {e}", dir.display()))
        .map(|e| e.unwrap().path())
        .filter(|p| p.extension().is_some_and(|x| x == "json"))
        .map(|p| {
            let text = std::fs::read_to_string(&p).unwrap();
            let v: Value = serde_json::from_str(&text).unwrap();
            (p.file_stem().unwrap().to_string_lossy().into_owned(), v)
        })
        .collect();
    all.sort_by(|a, b| a.0.cmp(&b.0));
    all
}

fn i(v: &Value) -> i64 {
    v.as_i64().unwrap_or_else(|| panic!("not an integer: {v}"))
}

fn f(v: &Value) -> f64 {
    v.as_f64().unwrap_or_else(|| panic!("not a number: {v}"))
}

fn s(v: &Value) -> Option<&str> {
    v.as_str()
}

fn window(v: &Value) -> WindowConfig {
    WindowConfig::new(i(&v["config"]["num_samples"]), i(&v["config"]["window_ms"])).unwrap()
}

/// Compares every field of `expect` with `got` (absent fields in `expect` are unchecked).
fn check(name: &str, step: usize, expect: &Value, got: &Value) {
    if let Some(map) = expect.as_object() {
        for (k, want) in map {
            let have = &got[k];
            if let (Some(r), true) = (want.get("epsilon"), k == "rate") {
                let (w, e, h) = (f(&want["value"]), f(r), f(have));
                // Shown with --nocapture: how close the replay comes to Kafka's rate.
                eprintln!("{name} step {step}: rate {h} (Kafka's test: {w} +- {e})");
                assert!(
                    (h - w).abs() <= e,
                    "{name} step {step}: rate {h} not within {e} of {w}"
                );
            } else if want.is_object() {
                check(name, step, want, have);
            } else if want.is_number() && have.is_number() {
                assert_eq!(f(have), f(want), "{name} step {step}: {k}");
            } else {
                assert_eq!(have, want, "{name} step {step}: {k}");
            }
        }
    }
}

fn token_bucket(name: &str, v: &Value) {
    let cfg = window(v);
    let quota = f(&v["quotas"][0]["value"]);
    let mut bucket = Bucket::NEW;
    for (n, step) in v["steps"].as_array().unwrap().iter().enumerate() {
        let t = i(&step["t_ms"]);
        let got = match step["op"].as_str().unwrap() {
            "measure" => serde_json::json!({"tokens": bucket.measure(&cfg, quota, t)}),
            "record" => {
                bucket.record(&cfg, quota, f(&step["value"]), t);
                Value::Null
            }
            "throttle_time" => {
                serde_json::json!({"throttle_ms": throttle_time(f(&step["tokens"]), quota)})
            }
            op => panic!("{name}: unknown op {op}"),
        };
        check(name, n, &step["expect"], &got);
    }
}

fn entity(q: &Value) -> QuotaEntity {
    QuotaEntity::parse(s(&q["user"]), s(&q["client_id"])).unwrap()
}

fn controller_mutation(name: &str, v: &Value) {
    let m = Arc::new(ControllerMutationQuotaManager::new(window(v), 3_600_000).unwrap());
    for q in v["quotas"].as_array().unwrap() {
        m.set_quota(&entity(q), f(&q["value"])).unwrap();
    }
    let mut requests: HashMap<String, MutationRequestQuota> = HashMap::new();
    for (n, step) in v["steps"].as_array().unwrap().iter().enumerate() {
        let t = i(&step["t_ms"]);
        let (user, client) = (
            s(&step["user"]).unwrap_or(""),
            s(&step["client_id"]).unwrap_or(""),
        );
        let got = match step["op"].as_str().unwrap() {
            "record" => {
                serde_json::json!({"throttle_ms": m.record(user, client, f(&step["value"]), t).unwrap()})
            }
            "request" => {
                let r = MutationRequestQuota::new(
                    m.clone(),
                    user,
                    client,
                    step["strict"].as_bool().unwrap(),
                    t,
                );
                let got = serde_json::json!({"exceeded": r.is_exceeded()});
                requests.insert(step["request"].as_str().unwrap().to_owned(), r);
                got
            }
            "request_record" => {
                let r = &requests[step["request"].as_str().unwrap()];
                let c = r.record(f(&step["value"]), t).unwrap();
                serde_json::json!({"accepted": c.accepted, "exceeded": r.is_exceeded(),
                                   "throttle_time_ms": r.throttle_time(t)})
            }
            "request_throttle_time" => {
                let r = &requests[step["request"].as_str().unwrap()];
                serde_json::json!({"throttle_time_ms": r.throttle_time(t)})
            }
            "throttle" => {
                let channel = step["channel"].as_u64();
                m.throttle(user, client, i(&step["throttle_ms"]), t, channel)
                    .unwrap();
                serde_json::json!({"queue_size": m.queue_size()})
            }
            "drain" => {
                let channels = m.expired_channels(t);
                serde_json::json!({"channels": channels, "queue_size": m.queue_size()})
            }
            "sensors" => serde_json::json!({"names": m.sensor_names()}),
            "set_quota" => {
                m.set_quota(&entity(step), f(&step["value"])).unwrap();
                Value::Null
            }
            "remove_quota" => {
                m.remove_quota(&entity(step));
                Value::Null
            }
            op => panic!("{name}: unknown op {op}"),
        };
        check(name, n, &step["expect"], &got);
    }
}

/// One acceptor thread of `ConnectionQuotasTest.acceptConnections`: a connection every
/// `interval_ms` (or as fast as the quotas let it), on its own simulated clock.
struct Acceptor<'a> {
    spec: &'a Value,
    clock: i64,
    start: i64,
    next_send: i64,
    done: i64,
    accepted: i64,
    blocked: bool,
    ip_throttled: bool,
    stopped: bool,
}

fn connection_rate(name: &str, v: &Value) {
    let broker = &v["broker"];
    let q = ConnectionQuotas::new(
        window(v),
        broker["max_connection_creation_rate"]
            .as_i64()
            .unwrap_or(i64::from(i32::MAX)),
        s(&broker["inter_broker_listener"]),
    )
    .unwrap();
    for l in v["listeners"].as_array().unwrap() {
        q.add_listener(
            s(&l["name"]).unwrap(),
            l["max_connection_creation_rate"].as_i64(),
        )
        .unwrap();
    }
    // Connections per IP, as ConnectionQuotas.get counts them.
    let mut counts: HashMap<String, i64> = HashMap::new();
    let mut blocked: HashMap<String, bool> = HashMap::new();
    for (n, step) in v["steps"].as_array().unwrap().iter().enumerate() {
        let t = i(&step["t_ms"]);
        let got = match step["op"].as_str().unwrap() {
            "set_ip_quota" => {
                q.set_ip_quota(s(&step["ip"]), step["value"].as_i64())
                    .unwrap();
                Value::Null
            }
            "set_broker_max_rate" => {
                q.set_broker_max_rate(i(&step["value"])).unwrap();
                Value::Null
            }
            "set_listener_max_rate" => {
                q.set_listener_max_rate(s(&step["listener"]).unwrap(), step["value"].as_i64())
                    .unwrap();
                Value::Null
            }
            "connect" => {
                let (l, ip) = (s(&step["listener"]).unwrap(), s(&step["ip"]).unwrap());
                let d = q.on_new_connection(l, ip, t).unwrap();
                if d.ip_throttle_ms <= 0 {
                    *counts.entry(ip.to_owned()).or_default() += 1;
                }
                serde_json::json!({"accept_delay_ms": d.accept_delay_ms, "ip_throttle_ms": d.ip_throttle_ms})
            }
            "accept_connections" => {
                let loops = step["loops"].as_array().unwrap();
                let mut acceptors: Vec<Acceptor> = loops
                    .iter()
                    .map(|spec| Acceptor {
                        spec,
                        clock: t,
                        start: t,
                        next_send: t + i(&spec["interval_ms"]),
                        done: 0,
                        accepted: 0,
                        blocked: false,
                        ip_throttled: false,
                        stopped: false,
                    })
                    .collect();
                // Earliest acceptor first (ties in the order listed).
                while let Some(a) = acceptors
                    .iter_mut()
                    .filter(|a| !a.stopped && a.done < i(&a.spec["count"]))
                    .min_by_key(|a| a.clock)
                {
                    let (l, ip) = (s(&a.spec["listener"]).unwrap(), s(&a.spec["ip"]).unwrap());
                    let d = q.on_new_connection(l, ip, a.clock).unwrap();
                    a.clock += i64::from(d.accept_delay_ms);
                    a.blocked |= d.accept_delay_ms > 0;
                    a.done += 1;
                    if d.ip_throttle_ms > 0 {
                        a.ip_throttled = true;
                        if !a.spec["expect_ip_throttle"].as_bool().unwrap_or(false) {
                            // Kafka's loop ends on the ConnectionThrottledException.
                            a.stopped = true;
                            continue;
                        }
                    } else {
                        a.accepted += 1;
                        *counts.entry(ip.to_owned()).or_default() += 1;
                    }
                    a.clock = a.clock.max(a.next_send);
                    a.next_send += i(&a.spec["interval_ms"]);
                }
                for a in &acceptors {
                    let l = s(&a.spec["listener"]).unwrap().to_owned();
                    *blocked.entry(l).or_default() |= a.blocked;
                    let elapsed = (a.clock - a.start) as f64 / 1000.0;
                    let got = serde_json::json!({
                        "accepted": a.accepted, "blocked": a.blocked,
                        "ip_throttled": a.ip_throttled, "end_t_ms": a.clock,
                        "rate": a.accepted as f64 / elapsed,
                    });
                    check(name, n, &a.spec["expect"], &got);
                }
                Value::Null
            }
            "count" => {
                serde_json::json!({"connections": counts.get(s(&step["ip"]).unwrap()).copied().unwrap_or(0)})
            }
            "rates" => {
                let mut ips = serde_json::Map::new();
                for ip in step["expect"]["ip"]
                    .as_object()
                    .into_iter()
                    .flat_map(|m| m.keys())
                {
                    ips.insert(ip.clone(), serde_json::json!(q.ip_rate(ip, t).unwrap()));
                }
                let mut listeners = serde_json::Map::new();
                for l in step["expect"]["listener"]
                    .as_object()
                    .into_iter()
                    .flat_map(|m| m.keys())
                {
                    listeners.insert(l.clone(), serde_json::json!(q.listener_rate(l, t).unwrap()));
                }
                serde_json::json!({"ip": ips, "listener": listeners, "broker": q.broker_rate(t)})
            }
            "ip_quota" => {
                let ip = s(&step["ip"]).unwrap();
                serde_json::json!({"quota": q.ip_quota(ip).unwrap(), "bound": q.ip_bound(ip).unwrap()})
            }
            "listener_throttle" => {
                let l = s(&step["listener"]).unwrap();
                let (_, ip_avg) = q.listener_throttle_avgs(l, t).unwrap();
                // Kafka reads the Avg as a long (NaN -> 0); the acceptor "blocked" when it
                // waited (Kafka's BlockedPercent meter).
                serde_json::json!({"ip_throttled": (ip_avg as i64) > 0,
                                   "blocked": blocked.get(l).copied().unwrap_or(false)})
            }
            op => panic!("{name}: unknown op {op}"),
        };
        check(name, n, &step["expect"], &got);
    }
}

#[test]
fn every_vector_replays() {
    let all = vectors();
    assert!(all.len() >= 19, "{} vectors", all.len());
    for (name, v) in &all {
        assert_eq!(v["name"], name.as_str());
        assert!(v["kafka_test"].is_string(), "{name} names no Kafka test");
        match v["quota_type"].as_str().unwrap() {
            "token_bucket" => token_bucket(name, v),
            "controller_mutation" => controller_mutation(name, v),
            "connection_rate" => connection_rate(name, v),
            other => panic!("{name}: unknown quota_type {other}"),
        }
    }
}
