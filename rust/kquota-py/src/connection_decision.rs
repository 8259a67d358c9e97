//! `ConnectionDecision`: what the broker does with a new connection.

use pyo3::prelude::*;

use kquota_core as core;

/// What the broker does with a new connection.
#[pyclass(module = "kquota._core", frozen, get_all)]
pub(crate) struct ConnectionDecision {
    accept_delay_ms: i32,
    ip_throttle_ms: i32,
}

#[pymethods]
impl ConnectionDecision {
    fn __repr__(&self) -> String {
        format!(
            "ConnectionDecision(accept_delay_ms={}, ip_throttle_ms={})",
            self.accept_delay_ms, self.ip_throttle_ms
        )
    }
}

impl From<core::ConnectionDecision> for ConnectionDecision {
    fn from(d: core::ConnectionDecision) -> Self {
        ConnectionDecision {
            accept_delay_ms: d.accept_delay_ms,
            ip_throttle_ms: d.ip_throttle_ms,
        }
    }
}
