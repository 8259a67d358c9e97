//! The request rules of Kafka's request handlers (`KafkaApis.handleProduceRequest` /
//! `handleFetchRequest` and the request-quota check of every other throttle-able API;
//! spec sections 9-11), independent of how a sensor is stored:
//!
//! * produce: the bytes are recorded on the produce quota and the handler-thread time on
//!   the request quota, except with `acks=0` (no response, no request-quota check);
//! * fetch: the thread time on the request quota, then the response bytes on the fetch
//!   quota; if either throttles, the bytes are taken back (the response goes out empty);
//! * any other API: the request quota only.
//!
//! The applied throttle is the larger of the two (ties go to the request quota); a
//! throttle `<= 0`, including one that Kafka's int conversion wrapped negative, means
//! "not throttled". That rule is [`super::broker`]'s ([`applied_throttle`]), re-exported
//! here.
//!
//! [`record_request`] is that order, generic over the sensors ([`RequestSensors`]), so
//! the managers' [`crate::RequestPath`] and the sequential replay run the same one.

pub use super::broker::applied_throttle;
use super::javamath::double_to_int;
use super::quota_type::QuotaType;
use crate::error::{check_usage, Error, Result};

/// The kind of API a request is, as far as client quotas tell them apart.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Hash)]
pub enum ApiKind {
    /// `Produce`: bytes on the produce quota, thread time on the request quota.
    Produce,
    /// A consumer `Fetch`: thread time on the request quota, bytes on the fetch quota.
    Fetch,
    /// Any other throttle-able API: the request quota only.
    Other,
}

impl ApiKind {
    /// `"produce"`, `"fetch"` or `"other"`.
    pub fn as_str(self) -> &'static str {
        match self {
            ApiKind::Produce => "produce",
            ApiKind::Fetch => "fetch",
            ApiKind::Other => "other",
        }
    }
}

impl std::str::FromStr for ApiKind {
    type Err = Error;

    fn from_str(s: &str) -> Result<Self> {
        match s {
            "produce" => Ok(ApiKind::Produce),
            "fetch" => Ok(ApiKind::Fetch),
            "other" => Ok(ApiKind::Other),
            _ => Err(Error::InvalidUsage(format!(
                "invalid kind {s:?}: expected \"produce\", \"fetch\" or \"other\""
            ))),
        }
    }
}

/// One request as the quota check sees it.
#[derive(Debug, Clone, Copy, PartialEq)]
pub struct Request {
    /// Which quotas it is checked against.
    pub kind: ApiKind,
    /// Produce request size or fetch response size in bytes (ignored for [`ApiKind::Other`]).
    pub bytes: f64,
    /// Request-handler thread time in nanoseconds; `None` when it is not known (a traffic
    /// trace without it): then the request quota is not consulted.
    pub thread_time_ns: Option<f64>,
    /// The produce request's `acks` (ignored for other kinds); `0` skips the request quota.
    pub acks: i16,
}

impl Request {
    /// A produce request of `bytes` that took `thread_time_ns` of handler time.
    pub fn produce(bytes: f64, thread_time_ns: f64, acks: i16) -> Self {
        Request {
            kind: ApiKind::Produce,
            bytes,
            thread_time_ns: Some(thread_time_ns),
            acks,
        }
    }

    /// A consumer fetch whose response holds `bytes`.
    pub fn fetch(bytes: f64, thread_time_ns: f64) -> Self {
        Request {
            kind: ApiKind::Fetch,
            bytes,
            thread_time_ns: Some(thread_time_ns),
            acks: -1,
        }
    }

    /// Any other throttle-able request.
    pub fn other(thread_time_ns: f64) -> Self {
        Request {
            kind: ApiKind::Other,
            bytes: 0.0,
            thread_time_ns: Some(thread_time_ns),
            acks: -1,
        }
    }

    /// Whether the request quota is checked: thread time known, and not a produce with
    /// `acks=0`.
    pub(crate) fn checks_request_quota(&self) -> Option<f64> {
        self.thread_time_ns
            .filter(|_| checks_request_quota(self.kind, self.acks))
    }

    /// Checks both usage values before anything is recorded.
    pub(crate) fn check(&self) -> Result<()> {
        if self.kind != ApiKind::Other {
            check_usage(self.bytes).map_err(|e| named("bytes", e))?;
        }
        if let Some(ns) = self.thread_time_ns {
            check_usage(ns).map_err(|e| named("thread_time_ns", e))?;
        }
        Ok(())
    }
}

fn named(name: &str, e: Error) -> Error {
    Error::InvalidUsage(format!("{name}: {e}"))
}

/// [`applied_throttle`] of each event of three columns of throttles (produce, fetch,
/// request), for a caller that recorded each quota type as a batch.
pub fn applied_throttles(
    produce_ms: &[i32],
    fetch_ms: &[i32],
    request_ms: &[i32],
) -> Result<Vec<i32>> {
    let n = produce_ms.len();
    if fetch_ms.len() != n || request_ms.len() != n {
        return Err(Error::InvalidUsage(format!(
            "throttle arrays differ in length: produce {n}, fetch {}, request {}",
            fetch_ms.len(),
            request_ms.len()
        )));
    }
    Ok((0..n)
        .map(|i| applied_throttle(produce_ms[i], fetch_ms[i], request_ms[i]).0)
        .collect())
}

/// Whether a request of `kind` with `acks` is checked against the request quota (when its
/// thread time is known): every request but a produce with `acks=0`, which gets no response.
pub fn checks_request_quota(kind: ApiKind, acks: i16) -> bool {
    !(kind == ApiKind::Produce && acks == 0)
}

/// Whether a fetch's bytes are taken back: its fetch or its request quota throttled it.
pub fn fetch_unrecorded(fetch_ms: i32, request_ms: i32) -> bool {
    fetch_ms > 0 || request_ms > 0
}

/// A fetch's max bytes capped by the fetch quota's window cap (from
/// [`crate::QuotaManager::max_value_in_quota_window`]), converted to an int as Java's `(int)`
/// cast does (truncating, saturating, NaN to 0).
pub fn capped_fetch_bytes(requested_max_bytes: i64, cap: f64) -> i64 {
    requested_max_bytes.min(i64::from(double_to_int(cap)))
}

/// The three quotas' sensors of one client, as [`record_request`] records a request on
/// them.
pub trait RequestSensors {
    /// What recording may fail with.
    type Error;

    /// Records `value` (bytes, or thread nanoseconds for `request`) on the sensor of
    /// `quota_type` and returns its throttle as Kafka's int.
    fn record(
        &mut self,
        quota_type: QuotaType,
        value: f64,
    ) -> std::result::Result<i32, Self::Error>;

    /// Takes `bytes` back from the fetch sensor (a throttled fetch's response goes out
    /// empty).
    fn unrecord_fetch(&mut self, bytes: f64) -> std::result::Result<(), Self::Error>;
}

/// The quotas' throttles of one recorded request, before the applied one is chosen
/// ([`applied_throttle`]).
#[derive(Debug, Clone, Copy, Default, PartialEq, Eq)]
pub struct RecordedThrottles {
    /// The produce sensor's throttle (0 when not recorded there).
    pub produce_ms: i32,
    /// The fetch sensor's throttle (0 when not recorded there).
    pub fetch_ms: i32,
    /// The request sensor's throttle (0 when not checked).
    pub request_ms: i32,
    /// A fetch whose bytes were taken back ([`fetch_unrecorded`]).
    pub unrecorded: bool,
}

/// Records one request of `kind` and `bytes` on `sensors` in Kafka's order: produce
/// bytes then thread time; fetch thread time, then bytes, then the bytes taken back if
/// either throttled; any other API, thread time only. `thread_ns` is the thread time when
/// the request quota checks this request (see [`checks_request_quota`]), else `None`.
/// Stops at the first error.
#[inline(always)]
pub fn record_request<S: RequestSensors>(
    sensors: &mut S,
    kind: ApiKind,
    bytes: f64,
    thread_ns: Option<f64>,
) -> std::result::Result<RecordedThrottles, S::Error> {
    let mut t = RecordedThrottles::default();
    match kind {
        ApiKind::Produce => {
            t.produce_ms = sensors.record(QuotaType::Produce, bytes)?;
            if let Some(ns) = thread_ns {
                t.request_ms = sensors.record(QuotaType::Request, ns)?;
            }
        }
        ApiKind::Fetch => {
            if let Some(ns) = thread_ns {
                t.request_ms = sensors.record(QuotaType::Request, ns)?;
            }
            t.fetch_ms = sensors.record(QuotaType::Fetch, bytes)?;
            if fetch_unrecorded(t.fetch_ms, t.request_ms) {
                sensors.unrecord_fetch(bytes)?;
                t.unrecorded = true;
            }
        }
        ApiKind::Other => {
            if let Some(ns) = thread_ns {
                t.request_ms = sensors.record(QuotaType::Request, ns)?;
            }
        }
    }
    Ok(t)
}
