//! `kquota._core`: the Python binding of `kquota-core`.
//!
//! It only converts types, maps errors and releases the GIL around batch work; every
//! quota rule lives in the core crate.

use args::Text;
use numpy::{PyArray1, PyReadonlyArray1};
use pyo3::exceptions::{PyException, PyValueError};
use pyo3::prelude::*;
use pyo3::sync::PyOnceLock;
use pyo3::types::{PyDict, PyTuple, PyType};
use pyo3::PyTypeInfo;

use kquota_core as core;

mod args;
mod callback;
mod mutation;
mod replay;

/// kquota's exception classes, made once per interpreter. `InvalidValueError` derives
/// from both `KquotaError` and `ValueError`, which `create_exception!` cannot express.
struct Errors {
    base: Py<PyType>,
    value: Py<PyType>,
    config: Py<PyType>,
    quota: Py<PyType>,
    usage: Py<PyType>,
    callback: Py<PyType>,
}

static ERRORS: PyOnceLock<Errors> = PyOnceLock::new();

fn errors(py: Python<'_>) -> PyResult<&'static Errors> {
    ERRORS.get_or_try_init(py, || {
        let make = |name: &str, bases: Vec<Bound<'_, PyAny>>, doc: &str| -> PyResult<Py<PyType>> {
            let namespace = PyDict::new(py);
            namespace.set_item("__module__", "kquota.exceptions")?;
            namespace.set_item("__doc__", doc)?;
            let class =
                PyType::new::<PyType>(py).call1((name, PyTuple::new(py, bases)?, namespace))?;
            Ok(class.cast_into::<PyType>()?.unbind())
        };
        let base = make(
            "KquotaError",
            vec![PyException::type_object(py).into_any()],
            "The base of every error kquota raises.",
        )?;
        let value = make(
            "InvalidValueError",
            vec![
                base.bind(py).clone().into_any(),
                PyValueError::type_object(py).into_any(),
            ],
            "A value outside what kquota (and Kafka) accepts; the message names it.",
        )?;
        let sub = |name: &str, doc: &str| make(name, vec![value.bind(py).clone().into_any()], doc);
        Ok(Errors {
            callback: make(
                "QuotaCallbackError",
                vec![base.bind(py).clone().into_any()],
                "A custom quota callback (KIP-257) raised, or returned a value of the wrong type \
                 or range; the message names the callback, the method and the value.",
            )?,
            config: sub(
                "InvalidConfigError",
                "A malformed configuration: window, samples, quota type or entity.",
            )?,
            quota: sub(
                "InvalidQuotaError",
                "A quota value that is zero, negative, NaN or infinite.",
            )?,
            usage: sub(
                "InvalidUsageError",
                "A value given to a record call that kquota does not accept: a negative, NaN or infinite usage, a throttle <= 0, batch arrays that do not match.",
            )?,
            base,
            value,
        })
    })
}

/// The one mapping from core errors to Python exceptions.
struct CoreError(core::Error);

impl From<core::Error> for CoreError {
    fn from(e: core::Error) -> Self {
        CoreError(e)
    }
}

impl From<CoreError> for PyErr {
    fn from(CoreError(e): CoreError) -> PyErr {
        Python::attach(|py| {
            let errors = match errors(py) {
                Ok(errors) => errors,
                Err(err) => return err,
            };
            let class = match e {
                core::Error::InvalidConfig(_) => &errors.config,
                core::Error::InvalidQuota(_) => &errors.quota,
                core::Error::InvalidUsage(_) => &errors.usage,
                core::Error::Callback(_) => &errors.callback,
            };
            PyErr::from_type(class.bind(py).clone(), e.to_string())
        })
    }
}

type CoreResult<T> = Result<T, CoreError>;

fn now_or_clock(now_ms: Option<i64>) -> i64 {
    now_ms.unwrap_or_else(core::monotonic_ms)
}

/// A quota entity: `<user>`, `<client-id>` or `<user, client-id>`.
#[pyclass(module = "kquota._core", frozen, eq, hash)]
#[derive(Clone, PartialEq, Eq, Hash)]
struct Entity {
    inner: core::QuotaEntity,
}

#[pymethods]
impl Entity {
    #[new]
    #[pyo3(signature = (user=None, client_id=None))]
    fn new(
        #[pyo3(from_py_with = args::opt_user)] user: Option<Text<'_>>,
        #[pyo3(from_py_with = args::opt_client_id)] client_id: Option<Text<'_>>,
    ) -> CoreResult<Self> {
        Ok(Entity {
            inner: core::QuotaEntity::parse(user.as_deref(), client_id.as_deref())?,
        })
    }

    #[getter]
    fn user(&self) -> Option<&str> {
        self.inner.user().map(core::EntityName::as_str)
    }

    #[getter]
    fn client_id(&self) -> Option<&str> {
        self.inner.client_id().map(core::EntityName::as_str)
    }

    fn __repr__(&self) -> String {
        let part = |name: &str, v: Option<&str>| v.map(|v| format!("{name}={v:?}"));
        let parts: Vec<String> = [
            part("user", self.user()),
            part("client_id", self.client_id()),
        ]
        .into_iter()
        .flatten()
        .collect();
        format!("Entity({})", parts.join(", "))
    }

    fn __getnewargs__<'py>(&self, py: Python<'py>) -> PyResult<Bound<'py, PyTuple>> {
        PyTuple::new(py, [self.user(), self.client_id()])
    }
}

/// The outcome of a quota-checked record on a `SampledRate`.
#[pyclass(module = "kquota._core", frozen, get_all)]
struct Check {
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

/// One live quota sensor as a metrics reporter reads it.
#[pyclass(module = "kquota._core", frozen, get_all)]
struct SensorReading {
    user: String,
    client_id: String,
    rate: f64,
    bound: f64,
    throttle_time_avg: Option<f64>,
}

#[pymethods]
impl SensorReading {
    fn __repr__(&self) -> String {
        format!(
            "SensorReading(user={:?}, client_id={:?}, rate={:?}, bound={:?}, throttle_time_avg={})",
            self.user,
            self.client_id,
            self.rate,
            self.bound,
            self.throttle_time_avg
                .map_or("None".to_owned(), |v| format!("{v:?}"))
        )
    }
}

impl From<core::SensorSnapshot> for SensorReading {
    fn from(s: core::SensorSnapshot) -> Self {
        SensorReading {
            user: s.user,
            client_id: s.client_id,
            rate: s.rate,
            bound: s.bound,
            throttle_time_avg: s.throttle_time_avg,
        }
    }
}

/// One Kafka `Rate` over sampled windows, with an optional upper bound.
#[pyclass(module = "kquota._core", frozen)]
struct SampledRate {
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

/// Kafka's client-quota manager for one quota type.
#[pyclass(module = "kquota._core", frozen)]
struct QuotaManager {
    inner: core::QuotaManager,
    /// The Python callback object, if the manager was built with one.
    callback: Option<Py<PyAny>>,
}

#[pymethods]
impl QuotaManager {
    #[new]
    #[pyo3(signature = (quota_type, *, num_samples=11, window_ms=1000, sensor_expiry_ms=3600000, callback=None))]
    fn new(
        #[pyo3(from_py_with = args::quota_type)] quota_type: Text<'_>,
        #[pyo3(from_py_with = args::num_samples)] num_samples: i64,
        #[pyo3(from_py_with = args::window_ms)] window_ms: i64,
        #[pyo3(from_py_with = args::sensor_expiry_ms)] sensor_expiry_ms: i64,
        callback: Option<Bound<'_, PyAny>>,
    ) -> CoreResult<Self> {
        let quota_type: core::QuotaType = (*quota_type).parse()?;
        let window = core::WindowConfig::new(num_samples, window_ms)?;
        let callback = callback.filter(|c| !c.is_none());
        let inner = match &callback {
            None => core::QuotaManager::new(quota_type, window, sensor_expiry_ms)?,
            Some(obj) => {
                let cb = callback::PyCallback::new(obj)?;
                core::QuotaManager::with_callback(
                    quota_type,
                    window,
                    sensor_expiry_ms,
                    std::sync::Arc::new(cb),
                )?
            }
        };
        Ok(QuotaManager {
            inner,
            callback: callback.map(Bound::unbind),
        })
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
    fn num_samples(&self) -> u32 {
        self.inner.window().num_samples()
    }

    #[getter]
    fn window_ms(&self) -> i64 {
        self.inner.window().window_ms()
    }

    #[getter]
    fn sensor_expiry_ms(&self) -> i64 {
        self.inner.sensor_expiry_ms()
    }

    #[getter]
    fn enabled(&self) -> bool {
        self.inner.enabled()
    }

    fn set_quota(
        &self,
        #[pyo3(from_py_with = args::entity)] entity: Bound<'_, Entity>,
        #[pyo3(from_py_with = args::value)] value: f64,
    ) -> CoreResult<()> {
        Ok(self.inner.set_quota(&entity.get().inner, value)?)
    }

    fn remove_quota(
        &self,
        #[pyo3(from_py_with = args::entity)] entity: Bound<'_, Entity>,
    ) -> CoreResult<()> {
        Ok(self.inner.remove_quota(&entity.get().inner)?)
    }

    fn quota(&self, #[pyo3(from_py_with = args::entity)] entity: Bound<'_, Entity>) -> Option<f64> {
        self.inner.quota(&entity.get().inner)
    }

    fn quotas(&self) -> Vec<(Entity, f64)> {
        self.inner
            .quotas()
            .into_iter()
            .map(|(inner, v)| (Entity { inner }, v))
            .collect()
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

    /// The benchmark floor: the same arguments as `record`, parsed the same way, and nothing
    /// done with them. `make bench` times it beside `record` so the table shows how much of a
    /// call is CPython's calling cost rather than the quota work.
    #[pyo3(signature = (user, client_id, value, now_ms=None))]
    fn _noop_record(
        &self,
        #[pyo3(from_py_with = args::user)] user: Text<'_>,
        #[pyo3(from_py_with = args::client_id)] client_id: Text<'_>,
        #[pyo3(from_py_with = args::value)] value: f64,
        #[pyo3(from_py_with = args::now_ms)] now_ms: Option<i64>,
    ) -> i32 {
        let _ = (&user, &client_id, value, now_ms);
        0
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

    #[pyo3(signature = (user, client_id, throttle_ms, now_ms=None, channel=None))]
    fn throttle(
        &self,
        #[pyo3(from_py_with = args::user)] user: Text<'_>,
        #[pyo3(from_py_with = args::client_id)] client_id: Text<'_>,
        #[pyo3(from_py_with = args::throttle_ms)] throttle_ms: i64,
        #[pyo3(from_py_with = args::now_ms)] now_ms: Option<i64>,
        #[pyo3(from_py_with = args::channel)] channel: Option<u64>,
    ) -> CoreResult<i64> {
        Ok(self.inner.throttle(
            &user,
            &client_id,
            throttle_ms,
            now_or_clock(now_ms),
            channel,
        )?)
    }

    #[pyo3(signature = (now_ms=None))]
    fn expired_channels(
        &self,
        #[pyo3(from_py_with = args::now_ms)] now_ms: Option<i64>,
    ) -> Vec<u64> {
        self.inner.expired_channels(now_or_clock(now_ms))
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

    #[pyo3(signature = (user, client_id, now_ms=None))]
    fn throttle_time_avg(
        &self,
        #[pyo3(from_py_with = args::user)] user: Text<'_>,
        #[pyo3(from_py_with = args::client_id)] client_id: Text<'_>,
        #[pyo3(from_py_with = args::now_ms)] now_ms: Option<i64>,
    ) -> Option<f64> {
        self.inner
            .throttle_time_avg(&user, &client_id, now_or_clock(now_ms))
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

    fn sensor_names(&self) -> Vec<String> {
        self.inner.sensor_names()
    }

    fn sensor_count(&self) -> usize {
        self.inner.sensor_count()
    }

    fn next_unmute_ms(&self) -> Option<i64> {
        self.inner.next_unmute_ms()
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
}

/// Tells the callbacks of `managers` about `metadata`, each distinct callback once, and
/// resets the limits of the managers whose callback answered true (Kafka's broker on an
/// UpdateMetadata request). Managers without a callback are skipped. Whether any answered
/// true.
#[pyfunction]
#[pyo3(signature = (metadata, *managers))]
fn update_cluster_metadata(
    metadata: Bound<'_, callback::ClusterMetadata>,
    managers: Vec<Bound<'_, QuotaManager>>,
) -> CoreResult<bool> {
    let md = core::ClusterMetadata::from(metadata.get());
    let refs: Vec<&core::QuotaManager> = managers.iter().map(|m| &m.get().inner).collect();
    Ok(core::callback::update_cluster_metadata(&refs, &md)?)
}

/// What the quota check of one request decided (`kquota_core::Outcome`).
#[pyclass(module = "kquota._core", frozen, get_all, eq)]
#[derive(PartialEq)]
struct RequestOutcome {
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

/// Kafka's request handling over a broker's produce, fetch and request managers.
#[pyclass(module = "kquota._core", frozen)]
struct RequestPath {
    produce: Py<QuotaManager>,
    fetch: Py<QuotaManager>,
    request: Py<QuotaManager>,
}

impl RequestPath {
    fn core(&self) -> core::RequestPath<'_> {
        // The types were checked by `new`; a manager's type never changes.
        core::RequestPath::new(
            &self.produce.get().inner,
            &self.fetch.get().inner,
            &self.request.get().inner,
        )
        .expect("managers checked at construction")
    }

    fn request_of(
        kind: &str,
        size_bytes: f64,
        thread_time_ns: Option<f64>,
        acks: i16,
    ) -> CoreResult<core::Request> {
        Ok(core::Request {
            kind: kind.parse()?,
            bytes: size_bytes,
            thread_time_ns,
            acks,
        })
    }
}

#[pymethods]
impl RequestPath {
    #[new]
    fn new(
        #[pyo3(from_py_with = args::produce)] produce: Py<QuotaManager>,
        #[pyo3(from_py_with = args::fetch)] fetch: Py<QuotaManager>,
        #[pyo3(from_py_with = args::request)] request: Py<QuotaManager>,
    ) -> CoreResult<Self> {
        core::RequestPath::new(
            &produce.get().inner,
            &fetch.get().inner,
            &request.get().inner,
        )?;
        Ok(RequestPath {
            produce,
            fetch,
            request,
        })
    }

    #[getter]
    fn produce(&self, py: Python<'_>) -> Py<QuotaManager> {
        self.produce.clone_ref(py)
    }

    #[getter]
    fn fetch(&self, py: Python<'_>) -> Py<QuotaManager> {
        self.fetch.clone_ref(py)
    }

    #[getter]
    fn request(&self, py: Python<'_>) -> Py<QuotaManager> {
        self.request.clone_ref(py)
    }

    fn manager(
        &self,
        py: Python<'_>,
        #[pyo3(from_py_with = args::quota_type)] quota_type: Text<'_>,
    ) -> CoreResult<Py<QuotaManager>> {
        Ok(match (*quota_type).parse()? {
            core::QuotaType::Produce => self.produce.clone_ref(py),
            core::QuotaType::Fetch => self.fetch.clone_ref(py),
            core::QuotaType::Request => self.request.clone_ref(py),
        })
    }

    #[pyo3(signature = (user, client_id, kind, size_bytes=0.0, thread_time_ns=None, *, acks=-1, now_ms=None))]
    #[pyo3(
        text_signature = "($self, user, client_id, kind, size_bytes=0.0, thread_time_ns=None, *, acks=-1, now_ms=None)"
    )]
    #[allow(clippy::too_many_arguments)]
    fn record(
        &self,
        #[pyo3(from_py_with = args::user)] user: Text<'_>,
        #[pyo3(from_py_with = args::client_id)] client_id: Text<'_>,
        #[pyo3(from_py_with = args::kind)] kind: Text<'_>,
        #[pyo3(from_py_with = args::size_bytes)] size_bytes: f64,
        #[pyo3(from_py_with = args::opt_thread_time_ns)] thread_time_ns: Option<f64>,
        #[pyo3(from_py_with = args::acks)] acks: i16,
        #[pyo3(from_py_with = args::now_ms)] now_ms: Option<i64>,
    ) -> CoreResult<RequestOutcome> {
        let request = Self::request_of(&kind, size_bytes, thread_time_ns, acks)?;
        let outcome = self
            .core()
            .record(&user, &client_id, &request, now_or_clock(now_ms))?;
        Ok(outcome.into())
    }

    #[pyo3(signature = (user, client_id, kind, size_bytes=0.0, thread_time_ns=None, *, acks=-1, now_ms=None, channel=None))]
    #[pyo3(
        text_signature = "($self, user, client_id, kind, size_bytes=0.0, thread_time_ns=None, *, acks=-1, now_ms=None, channel=None)"
    )]
    #[allow(clippy::too_many_arguments)]
    fn handle(
        &self,
        #[pyo3(from_py_with = args::user)] user: Text<'_>,
        #[pyo3(from_py_with = args::client_id)] client_id: Text<'_>,
        #[pyo3(from_py_with = args::kind)] kind: Text<'_>,
        #[pyo3(from_py_with = args::size_bytes)] size_bytes: f64,
        #[pyo3(from_py_with = args::opt_thread_time_ns)] thread_time_ns: Option<f64>,
        #[pyo3(from_py_with = args::acks)] acks: i16,
        #[pyo3(from_py_with = args::now_ms)] now_ms: Option<i64>,
        #[pyo3(from_py_with = args::channel)] channel: Option<u64>,
    ) -> CoreResult<RequestOutcome> {
        let request = Self::request_of(&kind, size_bytes, thread_time_ns, acks)?;
        let outcome =
            self.core()
                .handle(&user, &client_id, &request, now_or_clock(now_ms), channel)?;
        Ok(outcome.into())
    }

    #[pyo3(signature = (user, client_id, requested_max_bytes, now_ms=None))]
    fn fetch_max_bytes(
        &self,
        #[pyo3(from_py_with = args::user)] user: Text<'_>,
        #[pyo3(from_py_with = args::client_id)] client_id: Text<'_>,
        #[pyo3(from_py_with = args::requested_max_bytes)] requested_max_bytes: i64,
        #[pyo3(from_py_with = args::now_ms)] now_ms: Option<i64>,
    ) -> CoreResult<i64> {
        Ok(self.core().fetch_max_bytes(
            &user,
            &client_id,
            requested_max_bytes,
            now_or_clock(now_ms),
        )?)
    }

    fn __repr__(&self) -> String {
        "RequestPath(produce, fetch, request)".to_owned()
    }
}

/// The applied throttle of each event from its three quotas' throttles.
#[pyfunction]
fn applied_throttles<'py>(
    py: Python<'py>,
    #[pyo3(from_py_with = args::produce_ms_array)] produce_ms: PyReadonlyArray1<'py, i32>,
    #[pyo3(from_py_with = args::fetch_ms_array)] fetch_ms: PyReadonlyArray1<'py, i32>,
    #[pyo3(from_py_with = args::request_ms_array)] request_ms: PyReadonlyArray1<'py, i32>,
) -> PyResult<Bound<'py, PyArray1<i32>>> {
    let (p, f, r) = (
        produce_ms.as_array().to_vec(),
        fetch_ms.as_array().to_vec(),
        request_ms.as_array().to_vec(),
    );
    let applied = py
        .detach(|| core::request_path::applied_throttles(&p, &f, &r))
        .map_err(CoreError)?;
    Ok(PyArray1::from_vec(py, applied))
}

/// Java's `(int)` cast of a double: truncation, saturating, NaN to 0.
#[pyfunction]
fn double_to_int(#[pyo3(from_py_with = args::java_double)] value: f64) -> i32 {
    core::javamath::double_to_int(value)
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

/// The clock the core uses when `now_ms` is omitted.
#[pyfunction]
fn monotonic_ms() -> i64 {
    core::monotonic_ms()
}

/// A principal name in Kafka's sanitized form.
#[pyfunction]
fn sanitize_user(#[pyo3(from_py_with = args::principal)] principal: Text<'_>) -> String {
    core::sanitize_user(&principal).into_owned()
}

#[pymodule(gil_used = false)]
fn _core(m: &Bound<'_, PyModule>) -> PyResult<()> {
    let py = m.py();
    m.add("__version__", env!("CARGO_PKG_VERSION"))?;
    m.add("DEFAULT", core::DEFAULT_MARKER)?;
    m.add("UNLIMITED", core::UNLIMITED)?;
    m.add_class::<Entity>()?;
    m.add_class::<Check>()?;
    m.add_class::<SensorReading>()?;
    m.add_class::<SampledRate>()?;
    m.add_class::<QuotaManager>()?;
    m.add_class::<callback::BrokerNode>()?;
    m.add_class::<callback::PartitionLeader>()?;
    m.add_class::<callback::ClusterMetadata>()?;
    m.add_function(wrap_pyfunction!(update_cluster_metadata, m)?)?;
    m.add_class::<RequestOutcome>()?;
    m.add_class::<RequestPath>()?;
    m.add_class::<replay::ReplayKernel>()?;
    m.add_function(wrap_pyfunction!(replay::recommend_quotas, m)?)?;
    m.add_function(wrap_pyfunction!(applied_throttles, m)?)?;
    m.add_function(wrap_pyfunction!(double_to_int, m)?)?;
    m.add_function(wrap_pyfunction!(monotonic_ms, m)?)?;
    m.add_function(wrap_pyfunction!(sanitize_user, m)?)?;
    mutation::register(m)?;
    let errors = errors(py)?;
    m.add("KquotaError", errors.base.bind(py))?;
    m.add("InvalidValueError", errors.value.bind(py))?;
    m.add("InvalidConfigError", errors.config.bind(py))?;
    m.add("InvalidQuotaError", errors.quota.bind(py))?;
    m.add("InvalidUsageError", errors.usage.bind(py))?;
    m.add("QuotaCallbackError", errors.callback.bind(py))?;
    Ok(())
}
