//! `ReplayKernel`: the binding of `kquota_core::ReplayKernel`, and `recommend_quotas`
//! over the same replays. Converts columns and results, maps errors and runs each batch
//! without the GIL.

use std::sync::{Mutex, MutexGuard, TryLockError};

use numpy::{PyArray1, PyReadonlyArray1};
use pyo3::prelude::*;
use pyo3::types::PyDict;

use kquota_core as core;

use crate::args::{self, Text};
use crate::controller_mutation_quota_manager::ControllerMutationQuotaManager;
use crate::entity::{self, Entity};
use crate::error::{errors, CoreError, CoreResult};
use crate::request_path::{self, RequestPath};

/// A sequential replay of one broker's requests under several quota configurations.
#[pyclass(module = "kquota._core", frozen)]
pub(crate) struct ReplayKernel {
    /// A kernel is one sequence of events: a second thread gets an error, not a wait
    /// (waiting for the lock while holding the GIL could deadlock with a batch that
    /// needs the GIL back).
    inner: Mutex<core::ReplayKernel>,
}

impl ReplayKernel {
    fn kernel(&self, py: Python<'_>) -> PyResult<MutexGuard<'_, core::ReplayKernel>> {
        match self.inner.try_lock() {
            Ok(guard) => Ok(guard),
            Err(TryLockError::Poisoned(p)) => Ok(p.into_inner()),
            Err(TryLockError::WouldBlock) => Err(match errors(py) {
                Ok(e) => PyErr::from_type(
                    e.base.bind(py).clone(),
                    "ReplayKernel is in use by another thread: a kernel replays one sequence \
                     of events, from one thread at a time",
                ),
                Err(err) => err,
            }),
        }
    }
}

/// One summary column: the value of a summary.
type Field<'a, T> = &'a dyn Fn(&core::EntitySummary) -> T;

fn quota_type(text: &str) -> CoreResult<core::QuotaType> {
    Ok(text.parse()?)
}

/// The output columns as a dict of NumPy arrays.
fn output_dict<'py>(py: Python<'py>, out: core::Output) -> PyResult<Bound<'py, PyDict>> {
    let d = PyDict::new(py);
    d.set_item("scenario", PyArray1::from_vec(py, out.scenario))?;
    d.set_item("seq", PyArray1::from_vec(py, out.seq))?;
    d.set_item("throttle_ms", PyArray1::from_vec(py, out.throttle_ms))?;
    d.set_item("throttled_by", PyArray1::from_vec(py, out.throttled_by))?;
    d.set_item(
        "produce_throttle_ms",
        PyArray1::from_vec(py, out.produce_throttle_ms),
    )?;
    d.set_item(
        "fetch_throttle_ms",
        PyArray1::from_vec(py, out.fetch_throttle_ms),
    )?;
    d.set_item(
        "request_throttle_ms",
        PyArray1::from_vec(py, out.request_throttle_ms),
    )?;
    d.set_item(
        "mutation_throttle_ms",
        PyArray1::from_vec(py, out.mutation_throttle_ms),
    )?;
    d.set_item(
        "refused_partitions",
        PyArray1::from_vec(py, out.refused_partitions),
    )?;
    d.set_item("sent_ms", PyArray1::from_vec(py, out.sent_ms))?;
    d.set_item(
        "added_latency_ms",
        PyArray1::from_vec(py, out.added_latency_ms),
    )?;
    d.set_item("unserved", PyArray1::from_vec(py, out.unserved))?;
    Ok(d)
}

#[pymethods]
impl ReplayKernel {
    #[new]
    #[pyo3(signature = (
        pairs, scenarios, *, closed_loop=false,
        expiry_task_ms=Some(core::replay::EXPIRY_TASK_MS), client_limits=None,
        quota_pass=core::QuotaPass::All
    ))]
    #[pyo3(
        text_signature = "(pairs, scenarios, *, closed_loop=False, expiry_task_ms=30000, client_limits=None, quota_pass='all')"
    )]
    fn new(
        #[pyo3(from_py_with = args::pairs)] pairs: Vec<(String, String)>,
        #[pyo3(from_py_with = request_path::scenarios)] scenarios: Vec<Py<RequestPath>>,
        #[pyo3(from_py_with = args::closed_loop)] closed_loop: bool,
        #[pyo3(from_py_with = args::expiry_task_ms)] expiry_task_ms: Option<i64>,
        #[pyo3(from_py_with = args::client_limits)] client_limits: Option<core::ClientLimits>,
        #[pyo3(from_py_with = args::quota_pass)] quota_pass: core::QuotaPass,
    ) -> CoreResult<Self> {
        let paths: Vec<core::RequestPath<'_>> = scenarios.iter().map(|p| p.get().core()).collect();
        let options = core::ReplayOptions {
            closed_loop,
            expiry_task_ms,
            clients: client_limits,
            pass: quota_pass,
        };
        Ok(ReplayKernel {
            inner: Mutex::new(core::ReplayKernel::new(&pairs, &paths, options)?),
        })
    }

    #[getter]
    fn closed_loop(&self, py: Python<'_>) -> PyResult<bool> {
        Ok(self.kernel(py)?.closed_loop())
    }

    #[getter]
    fn pair_count(&self, py: Python<'_>) -> PyResult<usize> {
        Ok(self.kernel(py)?.pair_count())
    }

    #[getter]
    fn scenario_count(&self, py: Python<'_>) -> PyResult<usize> {
        Ok(self.kernel(py)?.scenario_count())
    }

    #[getter]
    fn pending(&self, py: Python<'_>) -> PyResult<usize> {
        Ok(self.kernel(py)?.pending())
    }

    fn add_pairs(
        &self,
        py: Python<'_>,
        #[pyo3(from_py_with = args::pairs)] pairs: Vec<(String, String)>,
    ) -> PyResult<u32> {
        Ok(self.kernel(py)?.add_pairs(&pairs).map_err(CoreError)?)
    }

    #[allow(clippy::too_many_arguments)]
    #[pyo3(signature = (
        time_ms, pair, kind, bytes, thread_ns, acks, partitions=None, strict=None,
        topic_offsets=None, topic_partitions=None, request_throttle_ms=None
    ))]
    fn feed<'py>(
        &self,
        py: Python<'py>,
        #[pyo3(from_py_with = args::time_ms_array)] time_ms: PyReadonlyArray1<'py, i64>,
        #[pyo3(from_py_with = args::pair_array)] pair: PyReadonlyArray1<'py, i32>,
        #[pyo3(from_py_with = args::kind_array)] kind: PyReadonlyArray1<'py, i8>,
        #[pyo3(from_py_with = args::bytes_array)] bytes: PyReadonlyArray1<'py, f64>,
        #[pyo3(from_py_with = args::thread_ns_array)] thread_ns: PyReadonlyArray1<'py, f64>,
        #[pyo3(from_py_with = args::acks_array)] acks: PyReadonlyArray1<'py, i16>,
        #[pyo3(from_py_with = args::partitions_array)] partitions: Option<
            PyReadonlyArray1<'py, i32>,
        >,
        #[pyo3(from_py_with = args::strict_array)] strict: Option<PyReadonlyArray1<'py, bool>>,
        #[pyo3(from_py_with = args::topic_offsets_array)] topic_offsets: Option<
            PyReadonlyArray1<'py, i32>,
        >,
        #[pyo3(from_py_with = args::topic_partitions_array)] topic_partitions: Option<
            PyReadonlyArray1<'py, i32>,
        >,
        #[pyo3(from_py_with = args::request_throttle_ms_array)] request_throttle_ms: Option<
            PyReadonlyArray1<'py, i32>,
        >,
    ) -> PyResult<Bound<'py, PyDict>> {
        // Copy into owned buffers (the arrays may change while the GIL is released), then
        // replay the whole batch without the GIL.
        let (t, p, k) = (
            time_ms.as_array().to_vec(),
            pair.as_array().to_vec(),
            kind.as_array().to_vec(),
        );
        let (b, n, a) = (
            bytes.as_array().to_vec(),
            thread_ns.as_array().to_vec(),
            acks.as_array().to_vec(),
        );
        let parts = partitions.map_or_else(Vec::new, |a| a.as_array().to_vec());
        let stricts = strict.map_or_else(Vec::new, |a| a.as_array().to_vec());
        let offsets = topic_offsets.map_or_else(Vec::new, |a| a.as_array().to_vec());
        let topics = topic_partitions.map_or_else(Vec::new, |a| a.as_array().to_vec());
        let given = request_throttle_ms.map_or_else(Vec::new, |a| a.as_array().to_vec());
        let mut guard = self.kernel(py)?;
        let kernel: &mut core::ReplayKernel = &mut guard;
        let out = py
            .detach(|| {
                kernel.feed(&core::Events {
                    time_ms: &t,
                    pair: &p,
                    kind: &k,
                    bytes: &b,
                    thread_ns: &n,
                    acks: &a,
                    partitions: &parts,
                    strict: &stricts,
                    topic_offsets: &offsets,
                    topic_partitions: &topics,
                    request_throttle_ms: &given,
                })
            })
            .map_err(CoreError)?;
        drop(guard);
        output_dict(py, out)
    }

    fn finish<'py>(&self, py: Python<'py>) -> PyResult<Bound<'py, PyDict>> {
        let mut guard = self.kernel(py)?;
        let kernel: &mut core::ReplayKernel = &mut guard;
        let out = py.detach(|| kernel.finish());
        drop(guard);
        output_dict(py, out)
    }

    fn set_quota(
        &self,
        py: Python<'_>,
        #[pyo3(from_py_with = args::scenario)] scenario: usize,
        #[pyo3(from_py_with = args::quota_type)] quota_type: Text<'_>,
        #[pyo3(from_py_with = entity::entity)] entity: Bound<'_, Entity>,
        #[pyo3(from_py_with = args::value)] value: f64,
        #[pyo3(from_py_with = args::required_now_ms)] now_ms: i64,
    ) -> PyResult<()> {
        let t = quota_type_of(&quota_type)?;
        let mut k = self.kernel(py)?;
        Ok(k.set_quota(scenario, t, &entity.get().inner, value, now_ms)
            .map_err(CoreError)?)
    }

    fn remove_quota(
        &self,
        py: Python<'_>,
        #[pyo3(from_py_with = args::scenario)] scenario: usize,
        #[pyo3(from_py_with = args::quota_type)] quota_type: Text<'_>,
        #[pyo3(from_py_with = entity::entity)] entity: Bound<'_, Entity>,
        #[pyo3(from_py_with = args::required_now_ms)] now_ms: i64,
    ) -> PyResult<()> {
        let t = quota_type_of(&quota_type)?;
        let mut k = self.kernel(py)?;
        Ok(k.remove_quota(scenario, t, &entity.get().inner, now_ms)
            .map_err(CoreError)?)
    }

    fn set_mutation_manager(
        &self,
        py: Python<'_>,
        #[pyo3(from_py_with = args::scenario)] scenario: usize,
        manager: PyRef<'_, ControllerMutationQuotaManager>,
    ) -> PyResult<()> {
        Ok(self
            .kernel(py)?
            .set_mutation_manager(scenario, &manager.inner)
            .map_err(CoreError)?)
    }

    fn set_mutation_quota(
        &self,
        py: Python<'_>,
        #[pyo3(from_py_with = args::scenario)] scenario: usize,
        #[pyo3(from_py_with = entity::entity)] entity: Bound<'_, Entity>,
        #[pyo3(from_py_with = args::value)] value: f64,
        #[pyo3(from_py_with = args::required_now_ms)] now_ms: i64,
    ) -> PyResult<()> {
        let mut k = self.kernel(py)?;
        Ok(
            k.set_mutation_quota(scenario, &entity.get().inner, value, now_ms)
                .map_err(CoreError)?,
        )
    }

    fn remove_mutation_quota(
        &self,
        py: Python<'_>,
        #[pyo3(from_py_with = args::scenario)] scenario: usize,
        #[pyo3(from_py_with = entity::entity)] entity: Bound<'_, Entity>,
        #[pyo3(from_py_with = args::required_now_ms)] now_ms: i64,
    ) -> PyResult<()> {
        let mut k = self.kernel(py)?;
        Ok(
            k.remove_mutation_quota(scenario, &entity.get().inner, now_ms)
                .map_err(CoreError)?,
        )
    }

    fn mutation_tokens(
        &self,
        py: Python<'_>,
        #[pyo3(from_py_with = args::scenario)] scenario: usize,
        #[pyo3(from_py_with = args::pair)] pair: usize,
        #[pyo3(from_py_with = args::required_now_ms)] now_ms: i64,
    ) -> PyResult<Option<f64>> {
        Ok(self
            .kernel(py)?
            .mutation_tokens(scenario, pair, now_ms)
            .map_err(CoreError)?)
    }

    fn expire_sensors(
        &self,
        py: Python<'_>,
        #[pyo3(from_py_with = args::required_now_ms)] now_ms: i64,
    ) -> PyResult<()> {
        Ok(self.kernel(py)?.expire_sensors(now_ms).map_err(CoreError)?)
    }

    fn record_no_throttle(
        &self,
        py: Python<'_>,
        #[pyo3(from_py_with = args::pair)] pair: usize,
        #[pyo3(from_py_with = args::thread_time_ns)] thread_time_ns: f64,
        #[pyo3(from_py_with = args::required_now_ms)] now_ms: i64,
    ) -> PyResult<()> {
        Ok(self
            .kernel(py)?
            .record_no_throttle(pair, thread_time_ns, now_ms)
            .map_err(CoreError)?)
    }

    fn measure(
        &self,
        py: Python<'_>,
        #[pyo3(from_py_with = args::scenario)] scenario: usize,
        #[pyo3(from_py_with = args::quota_type)] quota_type: Text<'_>,
        #[pyo3(from_py_with = args::pair)] pair: usize,
        #[pyo3(from_py_with = args::required_now_ms)] now_ms: i64,
    ) -> PyResult<Option<f64>> {
        let t = quota_type_of(&quota_type)?;
        Ok(self
            .kernel(py)?
            .measure(scenario, t, pair, now_ms)
            .map_err(CoreError)?)
    }

    fn tags(
        &self,
        py: Python<'_>,
        #[pyo3(from_py_with = args::scenario)] scenario: usize,
        #[pyo3(from_py_with = args::quota_type)] quota_type: Text<'_>,
        #[pyo3(from_py_with = args::pair)] pair: usize,
    ) -> PyResult<(String, String)> {
        let t = quota_type_of(&quota_type)?;
        Ok(self
            .kernel(py)?
            .tags(scenario, t, pair)
            .map_err(CoreError)?)
    }

    fn quota_for(
        &self,
        py: Python<'_>,
        #[pyo3(from_py_with = args::scenario)] scenario: usize,
        #[pyo3(from_py_with = args::quota_type)] quota_type: Text<'_>,
        #[pyo3(from_py_with = args::pair)] pair: usize,
    ) -> PyResult<Option<f64>> {
        let t = quota_type_of(&quota_type)?;
        Ok(self
            .kernel(py)?
            .quota_for(scenario, t, pair)
            .map_err(CoreError)?)
    }

    fn max_value_in_quota_window(
        &self,
        py: Python<'_>,
        #[pyo3(from_py_with = args::scenario)] scenario: usize,
        #[pyo3(from_py_with = args::quota_type)] quota_type: Text<'_>,
        #[pyo3(from_py_with = args::pair)] pair: usize,
    ) -> PyResult<f64> {
        let t = quota_type_of(&quota_type)?;
        Ok(self
            .kernel(py)?
            .max_value_in_quota_window(scenario, t, pair)
            .map_err(CoreError)?)
    }

    fn summaries<'py>(&self, py: Python<'py>) -> PyResult<Bound<'py, PyDict>> {
        let all = self.kernel(py)?.summaries();
        let col_f =
            |f: &dyn Fn(&core::EntitySummary) -> f64| -> Vec<f64> { all.iter().map(f).collect() };
        let col_i =
            |f: &dyn Fn(&core::EntitySummary) -> i64| -> Vec<i64> { all.iter().map(f).collect() };
        let d = PyDict::new(py);
        d.set_item(
            "scenario",
            PyArray1::from_vec(py, col_i(&|s| s.scenario as i64)),
        )?;
        d.set_item(
            "quota_type",
            all.iter()
                .map(|s| s.quota_type.as_str())
                .collect::<Vec<_>>(),
        )?;
        d.set_item(
            "sensor_user",
            all.iter().map(|s| s.user.as_str()).collect::<Vec<_>>(),
        )?;
        d.set_item(
            "sensor_client_id",
            all.iter().map(|s| s.client_id.as_str()).collect::<Vec<_>>(),
        )?;
        let ints: [(&str, Field<i64>); 9] = [
            ("requests", &|s| s.requests as i64),
            ("bytes", &|s| s.bytes),
            ("usage", &|s| s.usage),
            ("throttled_requests", &|s| s.throttled_requests as i64),
            ("total_throttle_ms", &|s| s.total_throttle_ms),
            ("p50_throttle_ms", &|s| s.p50_throttle_ms),
            ("p99_throttle_ms", &|s| s.p99_throttle_ms),
            ("max_throttle_ms", &|s| s.max_throttle_ms),
            ("max_added_latency_ms", &|s| s.max_added_latency_ms),
        ];
        for (name, f) in ints {
            d.set_item(name, PyArray1::from_vec(py, col_i(f)))?;
        }
        let floats: [(&str, Field<f64>); 6] = [
            ("quota", &|s| s.quota.unwrap_or(f64::NAN)),
            ("throttled_fraction", &|s| s.throttled_fraction()),
            ("mean_throttle_ms", &|s| s.mean_throttle_ms()),
            ("peak_rate", &|s| s.peak_rate),
            ("utilization", &|s| s.utilization()),
            ("mean_added_latency_ms", &|s| s.mean_added_latency_ms()),
        ];
        for (name, f) in floats {
            d.set_item(name, PyArray1::from_vec(py, col_f(f)))?;
        }
        Ok(d)
    }

    fn __repr__(&self, py: Python<'_>) -> PyResult<String> {
        let k = self.kernel(py)?;
        Ok(format!(
            "ReplayKernel({} pairs, {} scenarios, closed_loop={})",
            k.pair_count(),
            k.scenario_count(),
            if k.closed_loop() { "True" } else { "False" }
        ))
    }
}

fn quota_type_of(text: &str) -> PyResult<core::QuotaType> {
    Ok(quota_type(text)?)
}

/// The recommended quotas and the fractions they throttle, one per entity.
type QuotasAndFractions<'py> = (Bound<'py, PyArray1<f64>>, Bound<'py, PyArray1<f64>>);

/// Offsets as indices; a negative one is named.
fn offsets(name: &str, values: &[i64]) -> core::Result<Vec<usize>> {
    values
        .iter()
        .map(|&v| {
            usize::try_from(v).map_err(|_| {
                core::Error::InvalidUsage(format!(
                    "invalid {name} offset {v}: offsets are row positions >= 0"
                ))
            })
        })
        .collect()
}

/// Per entity, the smallest quota that throttles at most `target` of its requests, by
/// bisection over replays of its traffic (`kquota_core::replay::recommend`). Runs without
/// the GIL. Returns the quotas and the fractions they throttle, one per entity.
#[pyfunction]
#[pyo3(signature = (quota_type, times_ms, usage, runs, entities, *, target, num_samples=11, window_ms=1000, unrecord_if=None, kafka_version=None))]
#[allow(clippy::too_many_arguments)]
pub(crate) fn recommend_quotas<'py>(
    py: Python<'py>,
    #[pyo3(from_py_with = args::quota_type)] quota_type: Text<'_>,
    #[pyo3(from_py_with = args::times_ms_array)] times_ms: PyReadonlyArray1<'py, i64>,
    #[pyo3(from_py_with = args::usage_array)] usage: PyReadonlyArray1<'py, f64>,
    #[pyo3(from_py_with = args::runs_array)] runs: PyReadonlyArray1<'py, i64>,
    #[pyo3(from_py_with = args::entities_array)] entities: PyReadonlyArray1<'py, i64>,
    #[pyo3(from_py_with = args::target)] target: f64,
    #[pyo3(from_py_with = args::num_samples)] num_samples: i64,
    #[pyo3(from_py_with = args::window_ms)] window_ms: i64,
    #[pyo3(from_py_with = args::unrecord_if_array)] unrecord_if: Option<
        PyReadonlyArray1<'py, bool>,
    >,
    #[pyo3(from_py_with = args::kafka_version)] kafka_version: Option<Text<'_>>,
) -> PyResult<QuotasAndFractions<'py>> {
    let quota_type = quota_type_of(&quota_type)?;
    let window = core::WindowConfig::new(num_samples, window_ms).map_err(CoreError)?;
    let release = args::release(kafka_version.as_deref()).map_err(CoreError)?;
    // Owned copies (any strides), then the whole search without the GIL.
    let runs = offsets("run", &runs.as_array().to_vec()).map_err(CoreError)?;
    let entities = offsets("entity", &entities.as_array().to_vec()).map_err(CoreError)?;
    let times = times_ms.as_array().to_vec();
    let usage = usage.as_array().to_vec();
    let unrecord_if = unrecord_if.map(|u| u.as_array().to_vec());
    let traffic = core::replay::recommend::RecommendTraffic {
        times: &times,
        usage: &usage,
        unrecord_if: unrecord_if.as_deref(),
        runs: &runs,
        entities: &entities,
    };
    let found = py
        .detach(|| {
            core::replay::recommend::recommend(quota_type, &window, release, target, &traffic)
        })
        .map_err(CoreError)?;
    let quotas = found.iter().map(|r| r.quota).collect::<Vec<_>>();
    let fractions = found
        .iter()
        .map(|r| r.throttled_fraction)
        .collect::<Vec<_>>();
    Ok((
        PyArray1::from_vec(py, quotas),
        PyArray1::from_vec(py, fractions),
    ))
}
