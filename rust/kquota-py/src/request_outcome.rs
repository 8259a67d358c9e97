//! `RequestOutcome`: what the quota check of one request decided.

use pyo3::prelude::*;

use kquota_core as core;

/// What the quota check of one request decided (`kquota_core::Outcome`).
#[pyclass(module = "kquota._core", frozen, get_all, eq)]
#[derive(PartialEq)]
pub(crate) struct RequestOutcome {
    produce_throttle_ms: i32,
    fetch_throttle_ms: i32,
    request_throttle_ms: i32,
    throttle_ms: i32,
    throttled_by: Option<&'static str>,
    unrecorded: bool,
    muted_until_ms: Option<i64>,
}

#[pymethods]
impl RequestOutcome {
    #[getter]
    fn throttled(&self) -> bool {
        self.throttle_ms > 0
    }

    fn __repr__(&self) -> String {
        let py_bool = |b: bool| if b { "True" } else { "False" };
        format!(
            "RequestOutcome(produce_throttle_ms={}, fetch_throttle_ms={}, request_throttle_ms={}, \
             throttle_ms={}, throttled_by={}, unrecorded={}, muted_until_ms={})",
            self.produce_throttle_ms,
            self.fetch_throttle_ms,
            self.request_throttle_ms,
            self.throttle_ms,
            self.throttled_by
                .map_or("None".to_owned(), |t| format!("'{t}'")),
            py_bool(self.unrecorded),
            self.muted_until_ms
                .map_or("None".to_owned(), |t| t.to_string())
        )
    }
}

impl From<core::Outcome> for RequestOutcome {
    fn from(o: core::Outcome) -> Self {
        RequestOutcome {
            produce_throttle_ms: o.produce_throttle_ms,
            fetch_throttle_ms: o.fetch_throttle_ms,
            request_throttle_ms: o.request_throttle_ms,
            throttle_ms: o.throttle_ms,
            throttled_by: o.throttled_by.map(core::QuotaType::as_str),
            unrecorded: o.unrecorded,
            muted_until_ms: o.muted_until_ms,
        }
    }
}
