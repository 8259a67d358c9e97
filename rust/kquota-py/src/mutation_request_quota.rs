//! `MutationRequestQuota`: the controller-mutation quota of one request.

use pyo3::prelude::*;

use kquota_core as core;

use crate::args::{self, now_or_clock};
use crate::error::CoreResult;
use crate::mutation_check::MutationCheck;

/// One mutation request's quota: records each topic's partitions in turn.
#[pyclass(module = "kquota._core", frozen)]
pub(crate) struct MutationRequestQuota {
    pub(crate) inner: core::MutationRequestQuota,
}

#[pymethods]
impl MutationRequestQuota {
    #[getter]
    fn strict(&self) -> bool {
        self.inner.strict()
    }

    #[pyo3(signature = (permits, now_ms=None))]
    fn record(
        &self,
        #[pyo3(from_py_with = args::permits)] permits: f64,
        #[pyo3(from_py_with = args::now_ms)] now_ms: Option<i64>,
    ) -> CoreResult<MutationCheck> {
        Ok(self.inner.record(permits, now_or_clock(now_ms))?.into())
    }

    #[getter]
    fn last_throttle_ms(&self) -> i64 {
        self.inner.last_throttle_ms()
    }

    #[getter]
    fn is_exceeded(&self) -> bool {
        self.inner.is_exceeded()
    }

    #[pyo3(signature = (now_ms=None))]
    fn throttle_time(&self, #[pyo3(from_py_with = args::now_ms)] now_ms: Option<i64>) -> i32 {
        self.inner.throttle_time(now_or_clock(now_ms))
    }
}
