//! `SampledRate`: one Kafka `Rate` with an optional bound.

use pyo3::prelude::*;

use kquota_core as core;

use crate::args::{self, now_or_clock};
use crate::check::Check;
use crate::error::CoreResult;

/// One Kafka `Rate` over sampled windows, with an optional upper bound.
#[pyclass(module = "kquota._core", frozen)]
pub(crate) struct SampledRate {
    inner: core::SampledRate,
}

#[pymethods]
impl SampledRate {
    #[new]
    #[pyo3(signature = (num_samples=11, window_ms=1000, quota=None))]
    fn new(
        #[pyo3(from_py_with = args::num_samples)] num_samples: i64,
        #[pyo3(from_py_with = args::window_ms)] window_ms: i64,
        #[pyo3(from_py_with = args::opt_quota)] quota: Option<f64>,
    ) -> CoreResult<Self> {
        let cfg = core::WindowConfig::new(num_samples, window_ms)?;
        Ok(SampledRate {
            inner: core::SampledRate::new(cfg, quota)?,
        })
    }

    #[getter]
    fn num_samples(&self) -> u32 {
        self.inner.config().num_samples()
    }

    #[getter]
    fn window_ms(&self) -> i64 {
        self.inner.config().window_ms()
    }

    #[getter]
    fn quota(&self) -> Option<f64> {
        self.inner.quota()
    }

    fn set_quota(
        &self,
        #[pyo3(from_py_with = args::opt_quota)] quota: Option<f64>,
    ) -> CoreResult<()> {
        Ok(self.inner.set_quota(quota)?)
    }

    #[pyo3(signature = (value, now_ms=None))]
    fn record(
        &self,
        #[pyo3(from_py_with = args::value)] value: f64,
        #[pyo3(from_py_with = args::now_ms)] now_ms: Option<i64>,
    ) -> CoreResult<Check> {
        Ok(self.inner.record(value, now_or_clock(now_ms))?.into())
    }

    #[pyo3(signature = (value, now_ms=None))]
    fn record_no_check(
        &self,
        #[pyo3(from_py_with = args::value)] value: f64,
        #[pyo3(from_py_with = args::now_ms)] now_ms: Option<i64>,
    ) -> CoreResult<()> {
        Ok(self.inner.record_no_check(value, now_or_clock(now_ms))?)
    }

    #[pyo3(signature = (now_ms=None))]
    fn measure(&self, #[pyo3(from_py_with = args::now_ms)] now_ms: Option<i64>) -> f64 {
        self.inner.measure(now_or_clock(now_ms))
    }

    fn __repr__(&self) -> String {
        format!(
            "SampledRate(num_samples={}, window_ms={}, quota={})",
            self.num_samples(),
            self.window_ms(),
            self.quota().map_or("None".to_owned(), |q| format!("{q:?}"))
        )
    }
}
