//! Closed loop with bounded clients: a produce that finds its client's buffer full is not
//! served, a request still waiting when its timeout runs out is given up then, and a
//! bounded client catches up when its demand drops (an unbounded one stays behind).
#![cfg(not(loom))]

use kquota_core::kafka::samples::WindowConfig;
use kquota_core::replay::{
    ClientLimits, Events, Output, KIND_OTHER, KIND_PRODUCE, SERVED, UNSERVED_BUFFER_FULL,
    UNSERVED_TIMED_OUT,
};
use kquota_core::{
    Error, QuotaEntity, QuotaManager, QuotaType, ReplayKernel, ReplayOptions, RequestPath,
};

/// One user's produce, fetch and request quotas of 1000 (B/s, %).
fn managers() -> [QuotaManager; 3] {
    let window = WindowConfig::QUOTA_DEFAULT;
    let managers = QuotaType::ALL.map(|t| QuotaManager::new(t, window, 3_600_000).unwrap());
    let user = QuotaEntity::parse(Some("u"), None).unwrap();
    for m in &managers {
        m.set_quota(&user, 1000.0).unwrap();
    }
    managers
}

fn kernel(managers: &[QuotaManager; 3], clients: Option<ClientLimits>) -> ReplayKernel {
    let [p, f, r] = managers;
    let path = RequestPath::new(p, f, r).unwrap();
    let options = ReplayOptions {
        closed_loop: true,
        expiry_task_ms: None,
        clients,
        ..ReplayOptions::default()
    };
    ReplayKernel::new(&[("u", "producer")], &[path], options).unwrap()
}

/// Feeds `(time, kind, bytes)` events of the one client, then finishes; the rows by seq.
fn replay(k: &mut ReplayKernel, events: &[(i64, i8, f64)]) -> Vec<Row> {
    let n = events.len();
    let time: Vec<i64> = events.iter().map(|e| e.0).collect();
    let kind: Vec<i8> = events.iter().map(|e| e.1).collect();
    let bytes: Vec<f64> = events.iter().map(|e| e.2).collect();
    let batch = Events {
        time_ms: &time,
        pair: &vec![0; n],
        kind: &kind,
        bytes: &bytes,
        thread_ns: &vec![f64::NAN; n],
        acks: &vec![-1; n],
        partitions: &[],
        strict: &[],
        topic_offsets: &[],
        topic_partitions: &[],
        request_throttle_ms: &[],
    };
    let mut rows = rows(&k.feed(&batch).unwrap());
    rows.extend(rows_of(k.finish()));
    rows.sort_by_key(|r| r.seq);
    assert_eq!(rows.len(), n, "one row per event");
    rows
}

#[derive(Debug, Clone, Copy, PartialEq)]
struct Row {
    seq: u64,
    throttle: i32,
    sent: i64,
    latency: i64,
    unserved: i8,
}

fn rows(out: &Output) -> Vec<Row> {
    (0..out.len())
        .map(|i| Row {
            seq: out.seq[i],
            throttle: out.throttle_ms[i],
            sent: out.sent_ms[i],
            latency: out.added_latency_ms[i],
            unserved: out.unserved[i],
        })
        .collect()
}

fn rows_of(out: Output) -> Vec<Row> {
    rows(&out)
}

const LIMITS: ClientLimits = ClientLimits {
    buffer_bytes: 25_000,
    delivery_timeout_ms: 100_000,
    api_timeout_ms: 60_000,
};

#[test]
fn a_produce_that_finds_the_buffer_full_is_not_served() {
    let m = managers();
    let mut k = kernel(&m, Some(LIMITS));
    let rows = replay(
        &mut k,
        &[
            (0, KIND_PRODUCE, 20_000.0),
            (1, KIND_PRODUCE, 15_000.0),
            (2, KIND_PRODUCE, 15_000.0),
            (3, KIND_PRODUCE, 5_000.0),
        ],
    );
    let mute = rows[0].throttle as i64;
    assert!(mute > 3, "the first produce throttles: {rows:?}");
    // 15 kB wait in the buffer; the next 15 kB do not fit in 25 kB; 5 kB do.
    assert_eq!(rows[1].unserved, SERVED);
    assert_eq!((rows[1].sent, rows[1].latency), (mute, mute - 1));
    assert_eq!(rows[2].unserved, UNSERVED_BUFFER_FULL);
    assert_eq!((rows[2].sent, rows[2].throttle, rows[2].latency), (2, 0, 0));
    assert_eq!(rows[3].unserved, SERVED);
    assert!(rows[3].sent >= rows[1].sent, "{rows:?}");
    // What was not served was recorded on no sensor.
    let produce = k
        .summaries()
        .into_iter()
        .find(|s| s.quota_type == QuotaType::Produce)
        .unwrap();
    assert_eq!((produce.requests, produce.bytes), (3, 40_000));
}

#[test]
fn a_request_waiting_past_its_timeout_is_given_up_then() {
    let m = managers();
    let limits = ClientLimits {
        buffer_bytes: 1 << 30,
        delivery_timeout_ms: 100,
        api_timeout_ms: 60_000,
    };
    let mut k = kernel(&m, Some(limits));
    let rows = replay(
        &mut k,
        &[
            (0, KIND_PRODUCE, 20_000.0),
            (50, KIND_PRODUCE, 10.0),
            (60, KIND_OTHER, 0.0),
        ],
    );
    let mute = rows[0].throttle as i64;
    assert!(mute > 160 && mute < 60_060, "{rows:?}");
    // The produce's 100 ms run out at 150, while the channel is muted.
    assert_eq!(rows[1].unserved, UNSERVED_TIMED_OUT);
    assert_eq!(
        (rows[1].sent, rows[1].latency, rows[1].throttle),
        (150, 100, 0)
    );
    // The other request is another connection of the client id's, not muted: it goes out
    // at its time.
    assert_eq!(rows[2].unserved, SERVED);
    assert_eq!((rows[2].sent, rows[2].latency), (60, 0));
}

#[test]
fn a_bounded_client_catches_up_and_an_unbounded_one_stays_behind() {
    let m = managers();
    let events = |mute_hint: i64| {
        vec![
            (0, KIND_PRODUCE, 20_000.0),
            (1, KIND_PRODUCE, 10.0),
            (mute_hint + 60_000, KIND_PRODUCE, 10.0),
        ]
    };
    let first = replay(&mut kernel(&m, None), &events(0));
    let mute = first[0].throttle as i64;
    let unbounded = replay(&mut kernel(&managers(), None), &events(mute));
    let bounded = replay(
        &mut kernel(&managers(), Some(ClientLimits::KAFKA_DEFAULTS)),
        &events(mute),
    );
    for rows in [&unbounded, &bounded] {
        assert_eq!(rows[0].throttle as i64, mute);
        assert_eq!((rows[1].sent, rows[1].latency), (mute, mute - 1));
    }
    // A minute after the mute: the unbounded client is still `mute - 1` late.
    assert_eq!(unbounded[2].latency, mute - 1);
    assert_eq!((bounded[2].sent, bounded[2].latency), (mute + 60_000, 0));
    assert!(bounded.iter().all(|r| r.unserved == SERVED));
}

#[test]
fn without_throttles_bounded_clients_send_at_their_times() {
    let m = managers();
    let events: Vec<(i64, i8, f64)> = (0..50).map(|i| (i * 1000, KIND_PRODUCE, 100.0)).collect();
    let rows = replay(&mut kernel(&m, Some(ClientLimits::KAFKA_DEFAULTS)), &events);
    for (row, e) in rows.iter().zip(&events) {
        assert_eq!(
            (row.sent, row.latency, row.throttle, row.unserved),
            (e.0, 0, 0, SERVED)
        );
    }
}

#[test]
fn client_limits_are_checked() {
    let [p, f, r] = managers();
    let path = RequestPath::new(&p, &f, &r).unwrap();
    let open = ReplayOptions {
        closed_loop: false,
        expiry_task_ms: None,
        clients: Some(ClientLimits::KAFKA_DEFAULTS),
        ..ReplayOptions::default()
    };
    let err = ReplayKernel::new(&[("u", "c")], &[path], open).unwrap_err();
    assert!(
        matches!(err, Error::InvalidConfig(ref m) if m.contains("closed_loop")),
        "{err}"
    );
    let zero = ReplayOptions {
        closed_loop: true,
        expiry_task_ms: None,
        clients: Some(ClientLimits {
            delivery_timeout_ms: 0,
            ..ClientLimits::KAFKA_DEFAULTS
        }),
        ..ReplayOptions::default()
    };
    let err = ReplayKernel::new(&[("u", "c")], &[path], zero).unwrap_err();
    assert!(
        matches!(err, Error::InvalidConfig(ref m) if m.contains("delivery_timeout_ms 0")),
        "{err}"
    );
}
