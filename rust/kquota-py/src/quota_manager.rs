//! `QuotaManager`: Kafka's client-quota manager for one quota type, the benchmark floor of
//! its `record`, the converters of the arguments that take one, and the call that tells
//! the callbacks of several managers about the cluster.

use numpy::{PyArray1, PyReadonlyArray1};
use pyo3::prelude::*;

use kquota_core as core;

use crate::args::{self, now_or_clock, Text};
use crate::callback::PyCallback;
use crate::cluster_metadata::ClusterMetadata;
use crate::entity::{self, Entity};
use crate::error::{CoreError, CoreResult};
use crate::sensor_reading::SensorReading;
use crate::shared::pymethods_with;

/// Kafka's client-quota manager for one quota type.
#[pyclass(module = "kquota._core", frozen)]
pub(crate) struct QuotaManager {
    pub(crate) inner: std::sync::Arc<core::QuotaManager>,
    /// The Python callback object, if the manager was built with one.
    callback: Option<Py<PyAny>>,
}

pymethods_with!([window, client_quota] impl QuotaManager {
    #[new]
    #[pyo3(signature = (quota_type, *, num_samples=11, window_ms=1000, sensor_expiry_ms=3600000, callback=None, kafka_version=None))]
    fn new(
        #[pyo3(from_py_with = args::quota_type)] quota_type: Text<'_>,
        #[pyo3(from_py_with = args::num_samples)] num_samples: i64,
        #[pyo3(from_py_with = args::window_ms)] window_ms: i64,
        #[pyo3(from_py_with = args::sensor_expiry_ms)] sensor_expiry_ms: i64,
        callback: Option<Bound<'_, PyAny>>,
        #[pyo3(from_py_with = args::kafka_version)] kafka_version: Option<Text<'_>>,
    ) -> CoreResult<Self> {
        let quota_type: core::QuotaType = (*quota_type).parse()?;
        let window = core::WindowConfig::new(num_samples, window_ms)?;
        let release = args::release(kafka_version.as_deref())?;
        let callback = callback.filter(|c| !c.is_none());
        let inner = match &callback {
            None => core::QuotaManager::new(quota_type, window, sensor_expiry_ms)?,
            Some(obj) => {
                let cb = PyCallback::new(obj)?;
                core::QuotaManager::with_callback(
                    quota_type,
                    window,
                    sensor_expiry_ms,
                    std::sync::Arc::new(cb),
                )?
            }
        };
        Ok(QuotaManager {
            inner: std::sync::Arc::new(inner.for_release(release)),
            callback: callback.map(Bound::unbind),
        })
    }

    /// The Kafka release whose rules the manager follows where releases differ, as
    /// "major.minor".
    #[getter]
    fn kafka_version(&self) -> String {
        self.inner.release().to_string()
    }

    /// The custom quota callback the manager was built with, or None.
    #[getter]
    fn callback(&self, py: Python<'_>) -> Option<Py<PyAny>> {
        self.callback.as_ref().map(|c| c.clone_ref(py))
    }

    /// Kafka's `updateQuotaMetricConfigs` with a callback: asks every live sensor's limit
    /// again and makes every client resolve again on its next request.
    fn reset_limits(&self) -> CoreResult<()> {
        Ok(self.inner.reset_limits()?)
    }

    /// Asks the callback's `quota_reset_required` and resets if it says so.
    fn reset_if_required(&self) -> CoreResult<bool> {
        Ok(self.inner.reset_if_required()?)
    }

    #[getter]
    fn quota_type(&self) -> &'static str {
        self.inner.quota_type().as_str()
    }

    #[getter]
    fn sensor_expiry_ms(&self) -> i64 {
        self.inner.sensor_expiry_ms()
    }

    fn remove_quota(
        &self,
        #[pyo3(from_py_with = entity::entity)] entity: Bound<'_, Entity>,
    ) -> CoreResult<()> {
        // Without the GIL, as `set_quota`.
        let e = entity.get().inner.clone();
        Ok(entity.py().detach(|| self.inner.remove_quota(&e))?)
    }

    fn tags(
        &self,
        #[pyo3(from_py_with = args::user)] user: Text<'_>,
        #[pyo3(from_py_with = args::client_id)] client_id: Text<'_>,
    ) -> CoreResult<(String, String)> {
        Ok(self.inner.tags(&user, &client_id)?)
    }

    fn quota_for(
        &self,
        #[pyo3(from_py_with = args::user)] user: Text<'_>,
        #[pyo3(from_py_with = args::client_id)] client_id: Text<'_>,
    ) -> CoreResult<Option<f64>> {
        Ok(self.inner.quota_for(&user, &client_id)?)
    }

    #[pyo3(signature = (user, client_id, value, now_ms=None))]
    fn record(
        &self,
        #[pyo3(from_py_with = args::user)] user: Text<'_>,
        #[pyo3(from_py_with = args::client_id)] client_id: Text<'_>,
        #[pyo3(from_py_with = args::value)] value: f64,
        #[pyo3(from_py_with = args::now_ms)] now_ms: Option<i64>,
    ) -> CoreResult<i32> {
        Ok(self
            .inner
            .record(&user, &client_id, value, now_or_clock(now_ms))?)
    }

    #[pyo3(signature = (user, client_id, value, now_ms=None))]
    fn unrecord(
        &self,
        #[pyo3(from_py_with = args::user)] user: Text<'_>,
        #[pyo3(from_py_with = args::client_id)] client_id: Text<'_>,
        #[pyo3(from_py_with = args::value)] value: f64,
        #[pyo3(from_py_with = args::now_ms)] now_ms: Option<i64>,
    ) -> CoreResult<()> {
        Ok(self
            .inner
            .unrecord(&user, &client_id, value, now_or_clock(now_ms))?)
    }

    #[pyo3(signature = (user, client_id, value, now_ms=None))]
    fn record_no_throttle(
        &self,
        #[pyo3(from_py_with = args::user)] user: Text<'_>,
        #[pyo3(from_py_with = args::client_id)] client_id: Text<'_>,
        #[pyo3(from_py_with = args::value)] value: f64,
        #[pyo3(from_py_with = args::now_ms)] now_ms: Option<i64>,
    ) -> CoreResult<()> {
        Ok(self
            .inner
            .record_no_throttle(&user, &client_id, value, now_or_clock(now_ms))?)
    }

    fn queue_size(&self) -> usize {
        self.inner.queue_size()
    }

    #[pyo3(signature = (user, client_id, now_ms=None))]
    fn max_value_in_quota_window(
        &self,
        #[pyo3(from_py_with = args::user)] user: Text<'_>,
        #[pyo3(from_py_with = args::client_id)] client_id: Text<'_>,
        #[pyo3(from_py_with = args::now_ms)] now_ms: Option<i64>,
    ) -> CoreResult<f64> {
        Ok(self
            .inner
            .max_value_in_quota_window(&user, &client_id, now_or_clock(now_ms))?)
    }

    #[pyo3(signature = (user, client_id, now_ms=None))]
    fn measure(
        &self,
        #[pyo3(from_py_with = args::user)] user: Text<'_>,
        #[pyo3(from_py_with = args::client_id)] client_id: Text<'_>,
        #[pyo3(from_py_with = args::now_ms)] now_ms: Option<i64>,
    ) -> Option<f64> {
        self.inner.measure(&user, &client_id, now_or_clock(now_ms))
    }

    fn bound(
        &self,
        #[pyo3(from_py_with = args::user)] user: Text<'_>,
        #[pyo3(from_py_with = args::client_id)] client_id: Text<'_>,
    ) -> Option<f64> {
        self.inner.bound(&user, &client_id)
    }

    #[pyo3(signature = (now_ms=None))]
    fn expire_sensors(
        &self,
        py: Python<'_>,
        #[pyo3(from_py_with = args::now_ms)] now_ms: Option<i64>,
    ) -> Vec<String> {
        let now = now_or_clock(now_ms);
        let inner = &self.inner;
        py.detach(|| {
            let capacity = inner.table_capacity();
            let removed = inner.expire_sensors(now);
            if removed.len() >= RELEASE_AFTER_EXPIRED || inner.table_capacity() < capacity {
                release_freed_memory();
            }
            removed
        })
    }

    fn sensor_count(&self) -> usize {
        self.inner.sensor_count()
    }

    #[pyo3(signature = (now_ms=None))]
    fn snapshot(
        &self,
        py: Python<'_>,
        #[pyo3(from_py_with = args::now_ms)] now_ms: Option<i64>,
    ) -> Vec<SensorReading> {
        let now = now_or_clock(now_ms);
        let inner = &self.inner;
        py.detach(|| inner.snapshot(now))
            .into_iter()
            .map(SensorReading::from)
            .collect()
    }

    #[pyo3(signature = (now_ms, key_index, values, keys, unrecord_if=None))]
    fn record_batch<'py>(
        &self,
        py: Python<'py>,
        #[pyo3(from_py_with = args::now_ms_array)] now_ms: PyReadonlyArray1<'py, i64>,
        #[pyo3(from_py_with = args::key_index_array)] key_index: PyReadonlyArray1<'py, i64>,
        #[pyo3(from_py_with = args::values_array)] values: PyReadonlyArray1<'py, f64>,
        #[pyo3(from_py_with = args::keys)] keys: Vec<(String, String)>,
        #[pyo3(from_py_with = args::unrecord_if_array)] unrecord_if: Option<
            PyReadonlyArray1<'py, bool>,
        >,
    ) -> PyResult<Bound<'py, PyArray1<i32>>> {
        // Copy into owned buffers, then run the whole batch without the GIL.
        let now_ms = now_ms.as_array().to_vec();
        let key_index = key_index.as_array().to_vec();
        let values = values.as_array().to_vec();
        let unrecord_if = unrecord_if.map(|u| u.as_array().to_vec());
        let inner = &self.inner;
        let throttles = py
            .detach(|| {
                inner.record_batch(&now_ms, &key_index, &values, &keys, unrecord_if.as_deref())
            })
            .map_err(CoreError)?;
        Ok(PyArray1::from_vec(py, throttles))
    }

    fn __repr__(&self) -> String {
        format!(
            "QuotaManager({:?}, num_samples={}, window_ms={})",
            self.quota_type(),
            self.num_samples(),
            self.window_ms()
        )
    }
});

impl QuotaManager {
    /// Another Python handle on `inner` (a gateway broker's manager): it reads and changes
    /// the same sensors, and has the same callback object.
    pub(crate) fn sharing(py: Python<'_>, inner: std::sync::Arc<core::QuotaManager>) -> Self {
        let callback = inner
            .callback()
            .and_then(|cb| cb.as_any())
            .and_then(|any| any.downcast_ref::<PyCallback>())
            .map(|cb| cb.object(py));
        QuotaManager { inner, callback }
    }
}

/// The benchmark floor: a call into the extension with `QuotaManager.record`'s arguments,
/// converted the same way, and nothing done with them. `make bench` times it beside
/// `record` so the table shows how much of a call is CPython's calling cost rather than
/// the quota work. It takes no manager: a fifth argument would cost more than the check
/// of a method's `self`, and the floor would rise above a call of `record`'s shape.
#[pyfunction]
#[pyo3(name = "_bench_noop_record", signature = (user, client_id, value, now_ms=None))]
pub(crate) fn bench_noop_record(
    #[pyo3(from_py_with = args::user)] user: Text<'_>,
    #[pyo3(from_py_with = args::client_id)] client_id: Text<'_>,
    #[pyo3(from_py_with = args::value)] value: f64,
    #[pyo3(from_py_with = args::now_ms)] now_ms: Option<i64>,
) -> i32 {
    let _ = (&user, &client_id, value, now_ms);
    0
}

/// An expiry that removes at least this many sensors (or shrinks the tables) hands the
/// freed memory back.
const RELEASE_AFTER_EXPIRED: usize = 4096;

/// Hands the heap's free pages back to the system. glibc's malloc keeps what expired
/// sensors freed inside a fragmented heap, so without this a service's memory stays at its
/// peak after a burst of clients has expired. Part of what an expiry frees is only freed
/// later by the epoch scheme, so this hands back about one expiry behind.
fn release_freed_memory() {
    #[cfg(all(target_os = "linux", target_env = "gnu"))]
    {
        extern "C" {
            fn malloc_trim(pad: usize) -> std::ffi::c_int;
        }
        // SAFETY: malloc_trim only releases free memory of glibc's heaps; it takes no pointer.
        unsafe {
            malloc_trim(0);
        }
    }
}

/// A `kquota.QuotaManager`, for the parameter `name`.
fn manager<'py>(obj: &Bound<'py, PyAny>, name: &str) -> PyResult<Py<QuotaManager>> {
    obj.cast::<QuotaManager>()
        .map(|m| m.clone().unbind())
        .map_err(|_| args::wrong_type(name, "a kquota.QuotaManager", obj))
}

pub(crate) fn produce(obj: &Bound<'_, PyAny>) -> PyResult<Py<QuotaManager>> {
    manager(obj, "produce")
}

pub(crate) fn fetch(obj: &Bound<'_, PyAny>) -> PyResult<Py<QuotaManager>> {
    manager(obj, "fetch")
}

pub(crate) fn request(obj: &Bound<'_, PyAny>) -> PyResult<Py<QuotaManager>> {
    manager(obj, "request")
}

/// Tells the callbacks of `managers` about `metadata`, each distinct callback once, and
/// resets the limits of the managers whose callback answered true (Kafka's broker on an
/// UpdateMetadata request). Managers without a callback are skipped. Whether any answered
/// true.
#[pyfunction]
#[pyo3(signature = (metadata, *managers))]
pub(crate) fn update_cluster_metadata(
    metadata: Bound<'_, ClusterMetadata>,
    managers: Vec<Bound<'_, QuotaManager>>,
) -> CoreResult<bool> {
    let md = core::ClusterMetadata::from(metadata.get());
    let refs: Vec<&core::QuotaManager> = managers.iter().map(|m| &*m.get().inner).collect();
    Ok(core::managers::manager::update_cluster_metadata(
        &refs, &md,
    )?)
}
