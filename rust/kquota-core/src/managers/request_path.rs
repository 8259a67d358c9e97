//! [`RequestPath`]: what Kafka's request handlers do with a broker's three quota managers
//! for one request: the order of [`record_request`] on the managers, then the applied
//! throttle accounted through the manager that applied it.
//!
//! The rules are plain functions in [`crate::kafka::request`] ([`applied_throttle`],
//! [`fetch_unrecorded`], [`capped_fetch_bytes`]), re-exported here, so that a vectorized
//! caller can apply exactly the same ones.

pub use crate::kafka::request::{
    applied_throttle, applied_throttles, capped_fetch_bytes, checks_request_quota,
    fetch_unrecorded, record_request, ApiKind, RecordedThrottles, Request, RequestSensors,
};

use super::manager::QuotaManager;
use crate::error::{Error, Result};
use crate::kafka::quota_type::QuotaType;

/// What the quota check of one request decided.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct Outcome {
    /// The produce manager's throttle (0 when not recorded there), as Kafka's int.
    pub produce_throttle_ms: i32,
    /// The fetch manager's throttle (0 when not recorded there), as Kafka's int.
    pub fetch_throttle_ms: i32,
    /// The request manager's throttle (0 when not checked), as Kafka's int.
    pub request_throttle_ms: i32,
    /// The applied throttle, what the response carries: > 0, or 0 when not throttled.
    pub throttle_ms: i32,
    /// The quota whose throttle applied (`None` when not throttled).
    pub throttled_by: Option<QuotaType>,
    /// A fetch whose bytes were taken back: the response goes out empty.
    pub unrecorded: bool,
    /// The end of the client's throttle once it has been accounted
    /// ([`RequestPath::throttle`]); `None` when not throttled or not accounted yet.
    pub muted_until_ms: Option<i64>,
}

impl Outcome {
    /// Whether the request was throttled.
    pub fn throttled(&self) -> bool {
        self.throttle_ms > 0
    }
}

/// A broker's produce, fetch and request quota managers, used together as Kafka's request
/// handlers use them.
#[derive(Clone, Copy)]
pub struct RequestPath<'a> {
    produce: &'a QuotaManager,
    fetch: &'a QuotaManager,
    request: &'a QuotaManager,
}

impl<'a> RequestPath<'a> {
    /// The path over three managers, which must be of the produce, fetch and request type.
    pub fn new(
        produce: &'a QuotaManager,
        fetch: &'a QuotaManager,
        request: &'a QuotaManager,
    ) -> Result<Self> {
        for (slot, manager) in [
            (QuotaType::Produce, produce),
            (QuotaType::Fetch, fetch),
            (QuotaType::Request, request),
        ] {
            if manager.quota_type() != slot {
                return Err(Error::InvalidConfig(format!(
                    "invalid {slot} manager: its quota type is {:?}, expected {:?}",
                    manager.quota_type().as_str(),
                    slot.as_str()
                )));
            }
        }
        Ok(RequestPath {
            produce,
            fetch,
            request,
        })
    }

    /// The manager of `quota_type`.
    pub fn manager(&self, quota_type: QuotaType) -> &'a QuotaManager {
        match quota_type {
            QuotaType::Produce => self.produce,
            QuotaType::Fetch => self.fetch,
            QuotaType::Request => self.request,
        }
    }

    /// Records `request` of `(user, client_id)` at `now` on its quotas, takes a throttled
    /// fetch's bytes back and decides the applied throttle. Accounts no throttle: see
    /// [`Self::throttle`], or [`Self::handle`] for both. Nothing is recorded when a usage
    /// value is bad.
    pub fn record(
        &self,
        user: &str,
        client_id: &str,
        request: &Request,
        now: i64,
    ) -> Result<Outcome> {
        request.check()?;
        let mut sensors = Sensors {
            path: self,
            user,
            client_id,
            now,
        };
        let RecordedThrottles {
            produce_ms,
            fetch_ms,
            request_ms,
            unrecorded,
        } = record_request(
            &mut sensors,
            request.kind,
            request.bytes,
            request.checks_request_quota(),
        )?;
        let (throttle_ms, throttled_by) = applied_throttle(produce_ms, fetch_ms, request_ms);
        Ok(Outcome {
            produce_throttle_ms: produce_ms,
            fetch_throttle_ms: fetch_ms,
            request_throttle_ms: request_ms,
            throttle_ms,
            throttled_by,
            unrecorded,
            muted_until_ms: None,
        })
    }

    /// Accounts the applied throttle of `outcome` through the manager that applied it
    /// ([`QuotaManager::throttle`]: the throttle-time sensor, and with a `channel` the
    /// delay queue) and sets its `muted_until_ms`. Does nothing when not throttled.
    pub fn throttle(
        &self,
        user: &str,
        client_id: &str,
        outcome: &mut Outcome,
        now: i64,
        channel: Option<u64>,
    ) -> Result<()> {
        if let Some(by) = outcome.throttled_by {
            let end = self.manager(by).throttle(
                user,
                client_id,
                i64::from(outcome.throttle_ms),
                now,
                channel,
            )?;
            outcome.muted_until_ms = Some(end);
        }
        Ok(())
    }

    /// [`Self::record`], then [`Self::throttle`]: the whole handling of one request.
    pub fn handle(
        &self,
        user: &str,
        client_id: &str,
        request: &Request,
        now: i64,
        channel: Option<u64>,
    ) -> Result<Outcome> {
        let mut outcome = self.record(user, client_id, request, now)?;
        self.throttle(user, client_id, &mut outcome, now, channel)?;
        Ok(outcome)
    }

    /// The fetch's max bytes capped by the client's fetch quota as Kafka caps it:
    /// [`capped_fetch_bytes`] of [`QuotaManager::max_value_in_quota_window`] (`2^31 - 1`
    /// with no quota).
    pub fn fetch_max_bytes(
        &self,
        user: &str,
        client_id: &str,
        requested_max_bytes: i64,
        now: i64,
    ) -> Result<i64> {
        let cap = self.fetch.max_value_in_quota_window(user, client_id, now)?;
        Ok(capped_fetch_bytes(requested_max_bytes, cap))
    }
}

/// One client's sensors in a [`RequestPath`]'s managers at one time.
struct Sensors<'p, 'a> {
    path: &'p RequestPath<'a>,
    user: &'p str,
    client_id: &'p str,
    now: i64,
}

impl RequestSensors for Sensors<'_, '_> {
    type Error = Error;

    fn record(&mut self, quota_type: QuotaType, value: f64) -> Result<i32> {
        self.path
            .manager(quota_type)
            .record(self.user, self.client_id, value, self.now)
    }

    fn unrecord_fetch(&mut self, bytes: f64) -> Result<()> {
        self.path
            .fetch
            .unrecord(self.user, self.client_id, bytes, self.now)
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::kafka::entity::QuotaEntity;

    fn user(name: &str) -> QuotaEntity {
        QuotaEntity::parse(Some(name), None).unwrap()
    }

    struct Broker {
        produce: QuotaManager,
        fetch: QuotaManager,
        request: QuotaManager,
    }

    impl Broker {
        fn new() -> Self {
            Broker {
                produce: QuotaManager::with_defaults(QuotaType::Produce),
                fetch: QuotaManager::with_defaults(QuotaType::Fetch),
                request: QuotaManager::with_defaults(QuotaType::Request),
            }
        }

        fn path(&self) -> RequestPath<'_> {
            RequestPath::new(&self.produce, &self.fetch, &self.request).unwrap()
        }
    }

    #[test]
    fn applied_throttle_takes_the_larger_and_ties_go_to_request() {
        assert_eq!(applied_throttle(0, 0, 0), (0, None));
        assert_eq!(applied_throttle(5, 0, 3), (5, Some(QuotaType::Produce)));
        assert_eq!(applied_throttle(0, 7, 3), (7, Some(QuotaType::Fetch)));
        assert_eq!(applied_throttle(5, 0, 5), (5, Some(QuotaType::Request)));
        assert_eq!(applied_throttle(0, 5, 5), (5, Some(QuotaType::Request)));
        assert_eq!(applied_throttle(-9, 0, 4), (4, Some(QuotaType::Request)));
        // wrapped negative throttles are no throttles
        assert_eq!(applied_throttle(-1_294_967_296, 0, 0), (0, None));
        assert_eq!(applied_throttle(0, -5, -3), (0, None));
        assert_eq!(
            applied_throttle(i32::MAX, 0, i32::MAX),
            (i32::MAX, Some(QuotaType::Request))
        );
    }

    #[test]
    fn applied_throttles_of_columns() {
        assert_eq!(
            applied_throttles(&[5, 0, -7, 0], &[0, 9, 0, 0], &[3, 9, -1, 0]).unwrap(),
            vec![5, 9, 0, 0]
        );
        let err = applied_throttles(&[1], &[], &[1]).unwrap_err();
        assert_eq!(
            err.to_string(),
            "throttle arrays differ in length: produce 1, fetch 0, request 1"
        );
    }

    #[test]
    fn fetch_unrecord_and_cap_rules() {
        assert!(!fetch_unrecorded(0, 0));
        assert!(!fetch_unrecorded(-4, -1));
        assert!(fetch_unrecorded(1, 0));
        assert!(fetch_unrecorded(0, 1));
        assert_eq!(capped_fetch_bytes(52_428_800, f64::MAX), 52_428_800);
        assert_eq!(capped_fetch_bytes(1 << 40, f64::MAX), i64::from(i32::MAX));
        assert_eq!(capped_fetch_bytes(52_428_800, 3000.9), 3000);
        assert_eq!(capped_fetch_bytes(100, 3000.0), 100);
        assert_eq!(capped_fetch_bytes(100, f64::NAN), 0);
        assert_eq!(capped_fetch_bytes(100, -3e12), i64::from(i32::MIN));
    }

    #[test]
    fn managers_must_be_of_their_types() {
        let b = Broker::new();
        let err = RequestPath::new(&b.fetch, &b.fetch, &b.request)
            .err()
            .unwrap();
        assert_eq!(
            err.to_string(),
            "invalid produce manager: its quota type is \"fetch\", expected \"produce\""
        );
        assert!(RequestPath::new(&b.produce, &b.fetch, &b.produce).is_err());
        assert!("bytes".parse::<ApiKind>().is_err());
        assert_eq!("other".parse::<ApiKind>().unwrap(), ApiKind::Other);
    }

    #[test]
    fn produce_by_hand() {
        // 1000 B/s produce quota, 11 x 1 s: 15 000 B at t=0 is a rate of 1500 B/s over
        // 10 s (the spec's padding); throttle = (1500 - 1000) / 1000 * 10 000 = 5000 ms.
        let b = Broker::new();
        b.produce.set_quota(&user("u"), 1000.0).unwrap();
        let path = b.path();
        let out = path
            .handle("u", "c", &Request::produce(15_000.0, 1e6, -1), 0, Some(7))
            .unwrap();
        assert_eq!(
            out,
            Outcome {
                produce_throttle_ms: 5000,
                fetch_throttle_ms: 0,
                request_throttle_ms: 0,
                throttle_ms: 5000,
                throttled_by: Some(QuotaType::Produce),
                unrecorded: false,
                muted_until_ms: Some(5000),
            }
        );
        assert_eq!(b.produce.queue_size(), 1);
        assert_eq!(b.request.queue_size(), 0);
        assert_eq!(b.produce.throttle_time_avg("u", "c", 0), Some(5000.0));
    }

    #[test]
    fn acks_0_skips_the_request_quota() {
        let b = Broker::new();
        b.request.set_quota(&user("u"), 1.0).unwrap();
        let path = b.path();
        let five_s = 5e9;
        let out = path
            .record("u", "c", &Request::produce(10.0, five_s, 0), 0)
            .unwrap();
        assert_eq!(out.throttle_ms, 0);
        assert_eq!(out.request_throttle_ms, 0);
        assert_eq!(b.request.measure("u", "c", 0), None);
        // with acks=1 the same request is throttled by the request quota, capped at one
        // window (1000 ms)
        let out = path
            .handle("u", "c", &Request::produce(10.0, five_s, 1), 0, None)
            .unwrap();
        assert_eq!(out.request_throttle_ms, 1000);
        assert_eq!(out.throttled_by, Some(QuotaType::Request));
        assert_eq!(out.muted_until_ms, Some(1000));
        assert_eq!(b.request.queue_size(), 0); // no channel: accounted only
        assert_eq!(b.request.throttle_time_avg("u", "c", 0), Some(1000.0));
    }

    #[test]
    fn a_fetch_throttled_by_the_request_quota_is_unrecorded() {
        let b = Broker::new();
        b.fetch.set_quota(&user("u"), 1e9).unwrap();
        b.request.set_quota(&user("u"), 1.0).unwrap();
        let path = b.path();
        let out = path
            .handle("u", "c", &Request::fetch(5000.0, 5e9), 0, Some(1))
            .unwrap();
        assert_eq!(out.fetch_throttle_ms, 0);
        assert_eq!(out.request_throttle_ms, 1000);
        assert!(out.unrecorded);
        assert_eq!(out.throttled_by, Some(QuotaType::Request));
        assert_eq!(b.fetch.measure("u", "c", 0), Some(0.0));
        assert_eq!(b.request.queue_size(), 1);
        assert_eq!(b.fetch.queue_size(), 0);
        // not throttled: the bytes stay
        let b = Broker::new();
        b.fetch.set_quota(&user("u"), 1e9).unwrap();
        let out = b
            .path()
            .handle("u", "c", &Request::fetch(5000.0, 5e9), 0, Some(1))
            .unwrap();
        assert!(!out.unrecorded && !out.throttled());
        assert_eq!(b.fetch.measure("u", "c", 0), Some(500.0));
    }

    #[test]
    fn a_fetch_throttled_by_its_bytes_goes_through_the_fetch_manager() {
        let b = Broker::new();
        b.fetch.set_quota(&user("u"), 1000.0).unwrap();
        let out = b
            .path()
            .handle("u", "c", &Request::fetch(15_000.0, 0.0), 0, Some(3))
            .unwrap();
        assert_eq!((out.fetch_throttle_ms, out.throttle_ms), (5000, 5000));
        assert_eq!(out.throttled_by, Some(QuotaType::Fetch));
        assert!(out.unrecorded);
        assert_eq!(b.fetch.measure("u", "c", 0), Some(0.0));
        assert_eq!(b.fetch.expired_channels(5000), vec![3]);
    }

    #[test]
    fn a_wrapped_negative_throttle_is_not_throttled() {
        // 1e-6 B/s: a 1 MB burst's throttle overflows the int to a negative value.
        let b = Broker::new();
        b.produce.set_quota(&user("u"), 1e-6).unwrap();
        let out = b
            .path()
            .handle("u", "c", &Request::produce(1e6, 0.0, -1), 0, Some(1))
            .unwrap();
        let raw = b.produce.record("u", "c", 0.0, 0).unwrap();
        assert!(out.produce_throttle_ms < 0 && raw < 0);
        assert_eq!(out.throttle_ms, 0);
        assert_eq!(out.throttled_by, None);
        assert_eq!(out.muted_until_ms, None);
        assert_eq!(b.produce.queue_size(), 0);
    }

    #[test]
    fn other_requests_and_unknown_thread_time() {
        let b = Broker::new();
        b.request.set_quota(&user("u"), 1.0).unwrap();
        b.produce.set_quota(&user("u"), 1.0).unwrap();
        let path = b.path();
        let out = path.record("u", "c", &Request::other(5e9), 0).unwrap();
        assert_eq!(out.request_throttle_ms, 1000);
        assert_eq!(out.produce_throttle_ms, 0);
        let unknown = Request {
            thread_time_ns: None,
            ..Request::other(0.0)
        };
        let out = path.record("v", "c", &unknown, 0).unwrap();
        assert_eq!(out, path.record("w", "c", &Request::other(0.0), 0).unwrap());
        assert_eq!(b.request.measure("v", "c", 0), None);
    }

    #[test]
    fn bad_usage_records_nothing() {
        let b = Broker::new();
        b.produce.set_quota(&user("u"), 100.0).unwrap();
        b.request.set_quota(&user("u"), 100.0).unwrap();
        let path = b.path();
        let err = path
            .record("u", "c", &Request::produce(10.0, f64::NAN, -1), 0)
            .unwrap_err();
        assert!(err
            .to_string()
            .starts_with("thread_time_ns: invalid usage value NaN"));
        let err = path
            .record("u", "c", &Request::produce(-1.0, 0.0, -1), 0)
            .unwrap_err();
        assert!(err
            .to_string()
            .starts_with("bytes: invalid usage value -1.0"));
        assert_eq!(b.produce.measure("u", "c", 0), None);
        assert_eq!(b.request.measure("u", "c", 0), None);
    }

    #[test]
    fn fetch_max_bytes_caps_with_javas_cast() {
        let b = Broker::new();
        let path = b.path();
        assert_eq!(
            path.fetch_max_bytes("u", "c", 52_428_800, 0).unwrap(),
            52_428_800
        );
        b.fetch.set_quota(&user("u"), 1000.0).unwrap();
        // 1000 B/s x 10 windows x 1 s
        assert_eq!(
            path.fetch_max_bytes("u", "c", 52_428_800, 0).unwrap(),
            10_000
        );
        assert_eq!(path.fetch_max_bytes("u", "c", 500, 0).unwrap(), 500);
        assert_eq!(
            path.fetch_max_bytes("x", "c", 1 << 40, 0).unwrap(),
            i64::from(i32::MAX)
        );
        b.fetch.set_quota(&user("big"), 1e300).unwrap();
        assert_eq!(
            path.fetch_max_bytes("big", "c", 1 << 40, 0).unwrap(),
            i64::from(i32::MAX)
        );
    }

    /// The per-manager calls Kafka's handlers make, written out one by one.
    fn by_hand(b: &Broker, u: &str, r: &Request, now: i64, channel: Option<u64>) -> Outcome {
        let ns = r.thread_time_ns.unwrap_or(0.0);
        let skip_request =
            r.thread_time_ns.is_none() || (r.kind == ApiKind::Produce && r.acks == 0);
        let req = if skip_request {
            0
        } else {
            b.request.record(u, "c", ns, now).unwrap()
        };
        let (p, f) = match r.kind {
            ApiKind::Produce => (b.produce.record(u, "c", r.bytes, now).unwrap(), 0),
            ApiKind::Fetch => (0, b.fetch.record(u, "c", r.bytes, now).unwrap()),
            ApiKind::Other => (0, 0),
        };
        let unrecorded = r.kind == ApiKind::Fetch && (f > 0 || req > 0);
        if unrecorded {
            b.fetch.unrecord(u, "c", r.bytes, now).unwrap();
        }
        let bytes = p.max(f);
        let applied = bytes.max(req);
        let (throttle_ms, by, end) = if applied <= 0 {
            (0, None, None)
        } else {
            let by = if bytes > req {
                if r.kind == ApiKind::Produce {
                    QuotaType::Produce
                } else {
                    QuotaType::Fetch
                }
            } else {
                QuotaType::Request
            };
            let m = match by {
                QuotaType::Produce => &b.produce,
                QuotaType::Fetch => &b.fetch,
                QuotaType::Request => &b.request,
            };
            let end = m
                .throttle(u, "c", i64::from(applied), now, channel)
                .unwrap();
            (applied, Some(by), Some(end))
        };
        Outcome {
            produce_throttle_ms: p,
            fetch_throttle_ms: f,
            request_throttle_ms: req,
            throttle_ms,
            throttled_by: by,
            unrecorded,
            muted_until_ms: end,
        }
    }

    #[test]
    fn equals_the_per_manager_calls_on_a_trace() {
        let (a, b) = (Broker::new(), Broker::new());
        for broker in [&a, &b] {
            broker.produce.set_quota(&user("u"), 2000.0).unwrap();
            broker.fetch.set_quota(&user("u"), 3000.0).unwrap();
            broker.request.set_quota(&user("u"), 20.0).unwrap();
            broker.request.set_quota(&user("v"), 0.5).unwrap();
        }
        let path = a.path();
        // a small deterministic generator (xorshift), no dependency
        let mut x: u64 = 0x9E37_79B9_7F4A_7C15;
        let mut next = move || {
            x ^= x << 13;
            x ^= x >> 7;
            x ^= x << 17;
            x
        };
        let mut now = 0;
        let mut seen = std::collections::HashSet::new();
        for i in 0..5000 {
            now += (next() % 40) as i64; // times repeat
            let u = if next() % 3 == 0 { "v" } else { "u" };
            let bytes = (next() % 4000) as f64;
            let ns = (next() % 8_000_000) as f64;
            let acks = [-1, 0, 1][(next() % 3) as usize];
            let mut r = match next() % 3 {
                0 => Request::produce(bytes, ns, acks),
                1 => Request::fetch(bytes, ns),
                _ => Request::other(ns),
            };
            if next() % 10 == 0 {
                r.thread_time_ns = None;
            }
            let channel = (next() % 2 == 0).then_some(i as u64);
            if i % 997 == 500 {
                for broker in [&a, &b] {
                    broker
                        .produce
                        .set_quota(&user("u"), 500.0 + i as f64)
                        .unwrap();
                    broker.fetch.remove_quota(&user("u")).unwrap();
                }
            }
            let got = path.handle(u, "c", &r, now, channel).unwrap();
            assert_eq!(got, by_hand(&b, u, &r, now, channel), "event {i}");
            seen.insert((got.throttled_by, got.unrecorded));
        }
        // the trace went through every branch
        for by in [QuotaType::Produce, QuotaType::Fetch, QuotaType::Request] {
            assert!(seen.iter().any(|s| s.0 == Some(by)), "{by} never applied");
        }
        assert!(seen.contains(&(Some(QuotaType::Request), true)));
        for t in QuotaType::ALL {
            let (ma, mb) = (
                path.manager(t),
                RequestPath::new(&b.produce, &b.fetch, &b.request)
                    .unwrap()
                    .manager(t),
            );
            assert_eq!(ma.queue_size(), mb.queue_size());
            for u in ["u", "v"] {
                assert_eq!(ma.measure(u, "c", now), mb.measure(u, "c", now));
                let (x, y) = (
                    ma.throttle_time_avg(u, "c", now),
                    mb.throttle_time_avg(u, "c", now),
                );
                assert_eq!(x.map(f64::to_bits), y.map(f64::to_bits));
            }
        }
    }
}
