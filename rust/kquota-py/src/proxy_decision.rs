//! `ProxyDecision`: one quota decision of the proxy's data path, as Python reads it.

use pyo3::prelude::*;
use pyo3::BoundObject;

use kquota_proxy::server::{Decision, FOLLOWER_FETCH};

use crate::request_outcome::RequestOutcome;

/// One quota decision of the proxy's data path (`ProxyDataPath.take_decisions`).
///
/// It holds the data path's own record: a field becomes a Python object only when read,
/// so a capture that takes decisions in batches pays for the fields it reads.
#[pyclass(module = "kquota._core", frozen, eq)]
#[derive(PartialEq)]
pub(crate) struct ProxyDecision(Decision);

impl From<Decision> for ProxyDecision {
    fn from(d: Decision) -> Self {
        ProxyDecision(d)
    }
}

#[pymethods]
impl ProxyDecision {
    #[getter]
    fn at_ms(&self) -> i64 {
        self.0.at_ms
    }

    #[getter]
    fn user(&self) -> &str {
        &self.0.user
    }

    #[getter]
    fn client_id(&self) -> &str {
        &self.0.client_id
    }

    #[getter]
    fn api_key(&self) -> i16 {
        self.0.api_key
    }

    #[getter]
    fn api_version(&self) -> i16 {
        self.0.api_version
    }

    #[getter]
    fn correlation_id(&self) -> i32 {
        self.0.correlation_id
    }

    #[getter]
    fn follower(&self) -> bool {
        self.0.follower
    }

    #[getter]
    fn size(&self) -> f64 {
        self.0.size
    }

    #[getter]
    fn thread_ns(&self) -> f64 {
        self.0.thread_ns
    }

    #[getter]
    fn acks(&self) -> i16 {
        self.0.acks
    }

    #[getter]
    fn outcome(&self) -> RequestOutcome {
        self.0.outcome.into()
    }

    #[getter]
    fn mutation_throttle_ms(&self) -> Option<i32> {
        self.0.mutation_throttle_ms
    }

    #[getter]
    fn peer(&self) -> String {
        self.0.peer.to_string()
    }

    #[getter]
    fn broker(&self) -> i32 {
        self.0.broker
    }

    /// The API's name as a capture records it (`follower_fetch` for a replica's fetch).
    #[getter]
    fn api(&self) -> String {
        if self.0.follower {
            FOLLOWER_FETCH.to_owned()
        } else {
            kquota_proxy::api_name(self.0.api_key)
        }
    }

    fn __repr__(&self, py: Python<'_>) -> PyResult<String> {
        let d = &self.0;
        let fields = [
            ("at_ms", repr(py, d.at_ms)?),
            ("user", repr(py, &d.user)?),
            ("client_id", repr(py, &d.client_id)?),
            ("api", repr(py, self.api())?),
            ("api_key", repr(py, d.api_key)?),
            ("api_version", repr(py, d.api_version)?),
            ("correlation_id", repr(py, d.correlation_id)?),
            ("follower", repr(py, d.follower)?),
            ("size", repr(py, d.size)?),
            ("thread_ns", repr(py, d.thread_ns)?),
            ("acks", repr(py, d.acks)?),
            ("outcome", repr(py, self.outcome())?),
            ("mutation_throttle_ms", repr(py, d.mutation_throttle_ms)?),
            ("peer", repr(py, self.peer())?),
            ("broker", repr(py, d.broker)?),
        ];
        let shown: Vec<String> = fields.iter().map(|(k, v)| format!("{k}={v}")).collect();
        Ok(format!("ProxyDecision({})", shown.join(", ")))
    }
}

/// Python's `repr` of a value, as a field of a repr shows it.
fn repr<'py, T: IntoPyObject<'py>>(py: Python<'py>, value: T) -> PyResult<String>
where
    PyErr: From<T::Error>,
{
    Ok(value
        .into_pyobject(py)?
        .into_any()
        .into_bound()
        .repr()?
        .to_string())
}
