//! `TokenBucket`: Kafka's `TokenBucket` stat with a bound (KIP-599), and the throttle
//! of an overdrawn bucket.

use std::sync::atomic::{AtomicU64, Ordering::Relaxed};

use pyo3::prelude::*;

use kquota_core as core;
use kquota_core::kafka::token_bucket::{self, BucketCell};

use crate::args::{self, now_or_clock};
use crate::error::CoreResult;
use crate::mutation_check::MutationCheck;

/// Kafka's `TokenBucket` stat with a bound, shared between threads.
#[pyclass(module = "kquota._core", frozen)]
pub(crate) struct TokenBucket {
    cfg: core::WindowConfig,
    quota: AtomicU64,
    cell: BucketCell,
}

impl TokenBucket {
    fn q(&self) -> f64 {
        f64::from_bits(self.quota.load(Relaxed))
    }
}

#[pymethods]
impl TokenBucket {
    #[new]
    #[pyo3(signature = (quota, *, num_samples=11, window_ms=1000))]
    fn new(
        #[pyo3(from_py_with = args::quota)] quota: f64,
        #[pyo3(from_py_with = args::num_samples)] num_samples: i64,
        #[pyo3(from_py_with = args::window_ms)] window_ms: i64,
    ) -> CoreResult<Self> {
        let quota = core::error::check_quota(quota)?;
        Ok(TokenBucket {
            cfg: core::WindowConfig::new(num_samples, window_ms)?,
            quota: AtomicU64::new(quota.to_bits()),
            cell: BucketCell::new(),
        })
    }

    #[getter]
    fn quota(&self) -> f64 {
        self.q()
    }

    /// Replaces the bound (the tokens are kept).
    fn set_quota(&self, #[pyo3(from_py_with = args::quota)] quota: f64) -> CoreResult<()> {
        let quota = core::error::check_quota(quota)?;
        self.quota.store(quota.to_bits(), Relaxed);
        Ok(())
    }

    #[getter]
    fn num_samples(&self) -> u32 {
        self.cfg.num_samples()
    }

    #[getter]
    fn window_ms(&self) -> i64 {
        self.cfg.window_ms()
    }

    #[getter]
    fn burst(&self) -> f64 {
        token_bucket::burst(&self.cfg, self.q())
    }

    /// (tokens, last_update_ms) as stored, without a refill.
    #[getter]
    fn state(&self) -> (f64, i64) {
        let b = self.cell.get();
        (b.tokens, b.last_update_ms)
    }

    #[pyo3(signature = (now_ms=None))]
    fn measure(&self, #[pyo3(from_py_with = args::now_ms)] now_ms: Option<i64>) -> f64 {
        self.cell.measure(&self.cfg, self.q(), now_or_clock(now_ms))
    }

    #[pyo3(signature = (value, now_ms=None))]
    fn record(
        &self,
        #[pyo3(from_py_with = args::value)] value: f64,
        #[pyo3(from_py_with = args::now_ms)] now_ms: Option<i64>,
    ) -> CoreResult<()> {
        let value = core::error::check_finite(value)?;
        self.cell
            .record(&self.cfg, self.q(), value, now_or_clock(now_ms));
        Ok(())
    }

    #[pyo3(signature = (permits, now_ms=None))]
    fn record_strict(
        &self,
        #[pyo3(from_py_with = args::permits)] permits: f64,
        #[pyo3(from_py_with = args::now_ms)] now_ms: Option<i64>,
    ) -> CoreResult<MutationCheck> {
        let permits = token_bucket::check_permits(permits)?;
        Ok(self
            .cell
            .record_strict(&self.cfg, self.q(), permits, now_or_clock(now_ms))
            .into())
    }

    #[pyo3(signature = (permits, now_ms=None))]
    fn record_permissive(
        &self,
        #[pyo3(from_py_with = args::permits)] permits: f64,
        #[pyo3(from_py_with = args::now_ms)] now_ms: Option<i64>,
    ) -> CoreResult<MutationCheck> {
        let permits = token_bucket::check_permits(permits)?;
        Ok(self
            .cell
            .record_permissive(&self.cfg, self.q(), permits, now_or_clock(now_ms))
            .into())
    }

    fn __repr__(&self) -> String {
        format!(
            "TokenBucket(quota={:?}, num_samples={}, window_ms={})",
            self.q(),
            self.cfg.num_samples(),
            self.cfg.window_ms()
        )
    }
}

/// `Math.round(-tokens / quota * 1000)`: the throttle of an overdrawn bucket.
#[pyfunction]
pub(crate) fn token_bucket_throttle_time(
    #[pyo3(from_py_with = args::tokens)] tokens: f64,
    #[pyo3(from_py_with = args::quota)] quota: f64,
) -> CoreResult<i64> {
    let quota = core::error::check_quota(quota)?;
    Ok(token_bucket::throttle_time(tokens, quota))
}
