//! `Entity`: a quota entity, the converter of an `entity` argument, and the sanitized
//! form of a user name.

use pyo3::prelude::*;
use pyo3::types::PyTuple;

use kquota_core as core;

use crate::args::{self, Text};
use crate::error::CoreResult;

/// A quota entity: `<user>`, `<client-id>` or `<user, client-id>`.
#[pyclass(module = "kquota._core", frozen, eq, hash)]
#[derive(Clone, PartialEq, Eq, Hash)]
pub(crate) struct Entity {
    pub(crate) inner: core::QuotaEntity,
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

/// A principal name in Kafka's sanitized form.
#[pyfunction]
pub(crate) fn sanitize_user(#[pyo3(from_py_with = args::principal)] principal: Text<'_>) -> String {
    core::sanitize_user(&principal).into_owned()
}

/// The argument `entity`: a `kquota.Entity`.
pub(crate) fn entity<'py>(obj: &Bound<'py, PyAny>) -> PyResult<Bound<'py, Entity>> {
    obj.cast::<Entity>().cloned().map_err(|_| {
        args::wrong_type(
            "entity",
            "a kquota.Entity, e.g. Entity(user='alice') or Entity(client_id=DEFAULT)",
            obj,
        )
    })
}
