//! `Check`: what a record on a `SampledRate` decided.

use pyo3::prelude::*;

use kquota_core as core;

/// The outcome of a quota-checked record on a `SampledRate`.
#[pyclass(module = "kquota._core", frozen, get_all)]
pub(crate) struct Check {
    violated: bool,
    throttle_ms: i64,
    rate: Option<f64>,
}

#[pymethods]
impl Check {
    fn __repr__(&self) -> String {
        format!(
            "Check(violated={}, throttle_ms={}, rate={})",
            if self.violated { "True" } else { "False" },
            self.throttle_ms,
            self.rate.map_or("None".to_owned(), |r| format!("{r:?}"))
        )
    }
}

impl From<core::Check> for Check {
    fn from(c: core::Check) -> Self {
        Check {
            violated: c.violated,
            throttle_ms: c.throttle_ms,
            rate: c.rate,
        }
    }
}
