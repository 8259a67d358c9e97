//! `RequestPath`: Kafka's request handling over a broker's three quota managers, the
//! applied throttle of batches of events, and the converter of a replay's `scenarios`.

use numpy::{PyArray1, PyReadonlyArray1};
use pyo3::prelude::*;
use pyo3::types::PyString;

use kquota_core as core;

use crate::args::{self, now_or_clock, Text};
use crate::error::{CoreError, CoreResult};
use crate::quota_manager::{self, QuotaManager};
use crate::request_outcome::RequestOutcome;

/// Kafka's request handling over a broker's produce, fetch and request managers.
#[pyclass(module = "kquota._core", frozen)]
pub(crate) struct RequestPath {
    produce: Py<QuotaManager>,
    fetch: Py<QuotaManager>,
    request: Py<QuotaManager>,
}

impl RequestPath {
    pub(crate) fn core(&self) -> core::RequestPath<'_> {
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
        #[pyo3(from_py_with = quota_manager::produce)] produce: Py<QuotaManager>,
        #[pyo3(from_py_with = quota_manager::fetch)] fetch: Py<QuotaManager>,
        #[pyo3(from_py_with = quota_manager::request)] request: Py<QuotaManager>,
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
pub(crate) fn applied_throttles<'py>(
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
        .detach(|| core::managers::request_path::applied_throttles(&p, &f, &r))
        .map_err(CoreError)?;
    Ok(PyArray1::from_vec(py, applied))
}

/// The scenarios of a replay: a sequence of `kquota.RequestPath`.
pub(crate) fn scenarios(obj: &Bound<'_, PyAny>) -> PyResult<Vec<Py<RequestPath>>> {
    let expected = "a sequence of kquota.RequestPath (one per scenario)";
    if obj.is_instance_of::<PyString>() {
        return Err(args::wrong_type("scenarios", expected, obj));
    }
    let items = obj
        .try_iter()
        .map_err(|_| args::wrong_type("scenarios", expected, obj))?;
    let mut out = Vec::new();
    for (i, item) in items.enumerate() {
        let item = item?;
        let path = item.cast::<RequestPath>().map_err(|_| {
            args::wrong_type(&format!("scenarios[{i}]"), "a kquota.RequestPath", &item)
        })?;
        out.push(path.clone().unbind());
    }
    Ok(out)
}
