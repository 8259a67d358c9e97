//! A Python object as the core's `QuotaCallback` (KIP-257). Every call takes the GIL (the
//! core calls only when it resolves a client or resets limits, never per record); whatever
//! the object raises or returns that does not fit becomes a core `Callback` error naming
//! the object, the method and the value, which the binding raises as
//! `QuotaCallbackError`.

use pyo3::prelude::*;
use pyo3::types::{PyBool, PyDict, PyFloat, PyInt, PyMapping, PyString};

use kquota_core as core;

use crate::cluster_metadata::ClusterMetadata;
use crate::entity::Entity;

/// The methods a callback must have (`close` is called by the Python layers that own it).
pub(crate) const METHODS: [&str; 7] = [
    "quota_metric_tags",
    "quota_limit",
    "update_quota",
    "remove_quota",
    "quota_reset_required",
    "update_cluster_metadata",
    "close",
];

/// The Python object behind a manager's callback.
pub(crate) struct PyCallback {
    obj: Py<PyAny>,
    /// `repr(obj)`, for messages.
    name: String,
}

impl PyCallback {
    /// The Python object.
    pub(crate) fn object(&self, py: Python<'_>) -> Py<PyAny> {
        self.obj.clone_ref(py)
    }

    /// Wraps `obj` after checking it has every method of the protocol.
    pub(crate) fn new(obj: &Bound<'_, PyAny>) -> Result<Self, core::Error> {
        let name = obj
            .repr()
            .map(|r| r.to_string_lossy().into_owned())
            .unwrap_or_else(|_| "<callback>".to_owned());
        let missing: Vec<&str> = METHODS
            .iter()
            .copied()
            .filter(|m| !obj.getattr(*m).is_ok_and(|a| a.is_callable()))
            .collect();
        if !missing.is_empty() {
            return Err(core::Error::InvalidConfig(format!(
                "invalid quota callback {name}: it has no method {} (a kquota.QuotaCallback \
                 has {})",
                missing.join(", "),
                METHODS.join(", ")
            )));
        }
        Ok(PyCallback {
            obj: obj.clone().unbind(),
            name,
        })
    }

    fn error(&self, method: &str, message: impl std::fmt::Display) -> core::Error {
        core::Error::Callback(format!(
            "quota callback {}.{method} failed: {message}",
            self.name
        ))
    }

    /// Calls `method(*args)`; an exception becomes an error naming it.
    fn call<'py, A>(
        &self,
        py: Python<'py>,
        method: &str,
        args: A,
    ) -> core::Result<Bound<'py, PyAny>>
    where
        A: pyo3::call::PyCallArgs<'py>,
    {
        self.obj
            .bind(py)
            .call_method1(method, args)
            .map_err(|e| self.error(method, raised(py, &e)))
    }

    fn wrong(&self, method: &str, value: &Bound<'_, PyAny>, expected: &str) -> core::Error {
        let shown = value
            .repr()
            .map(|r| r.to_string_lossy().into_owned())
            .unwrap_or_else(|_| "?".to_owned());
        self.error(
            method,
            format_args!("it returned {shown}: expected {expected}"),
        )
    }
}

/// `it raised <type>: <message>`, as callback errors say what an exception was.
pub(crate) fn raised(py: Python<'_>, err: &PyErr) -> String {
    let kind = err
        .get_type(py)
        .name()
        .map_or_else(|_| "exception".to_owned(), |n| n.to_string());
    format!("it raised {kind}: {}", err.value(py))
}

fn entity<'py>(py: Python<'py>, e: &core::QuotaEntity) -> PyResult<Bound<'py, Entity>> {
    Bound::new(py, Entity { inner: e.clone() })
}

impl core::QuotaCallback for PyCallback {
    fn quota_metric_tags(
        &self,
        quota_type: core::QuotaType,
        user: &str,
        client_id: &str,
    ) -> core::Result<(String, String)> {
        const M: &str = "quota_metric_tags";
        const EXPECTED: &str = "a mapping of \"user\" and \"client-id\" to str (an absent key \
                                is an empty tag), e.g. {\"user\": user, \"client-id\": \"\"}";
        Python::attach(|py| {
            let out = self.call(py, M, (quota_type.as_str(), user, client_id))?;
            let map = out
                .cast::<PyMapping>()
                .map_err(|_| self.wrong(M, &out, EXPECTED))?;
            let items = map.items().map_err(|_| self.wrong(M, &out, EXPECTED))?;
            let (mut u, mut c) = (String::new(), String::new());
            for item in items.iter() {
                let (k, v): (Bound<'_, PyAny>, Bound<'_, PyAny>) =
                    item.extract().map_err(|_| self.wrong(M, &out, EXPECTED))?;
                let k = k
                    .cast::<PyString>()
                    .ok()
                    .and_then(|k| k.to_str().ok().map(str::to_owned));
                let v = v
                    .cast::<PyString>()
                    .ok()
                    .and_then(|v| v.to_str().ok().map(str::to_owned));
                match (k.as_deref(), v) {
                    (Some("user"), Some(v)) => u = v,
                    (Some("client-id"), Some(v)) => c = v,
                    _ => return Err(self.wrong(M, &out, EXPECTED)),
                }
            }
            Ok((u, c))
        })
    }

    fn quota_limit(
        &self,
        quota_type: core::QuotaType,
        tags: (&str, &str),
    ) -> core::Result<Option<f64>> {
        const M: &str = "quota_limit";
        Python::attach(|py| {
            let dict = PyDict::new(py);
            let set = |k: &str, v: &str| dict.set_item(k, v);
            set("user", tags.0)
                .and_then(|_| set("client-id", tags.1))
                .map_err(|e| self.error(M, e))?;
            let out = self.call(py, M, (quota_type.as_str(), dict))?;
            if out.is_none() {
                return Ok(None);
            }
            if out.is_instance_of::<PyBool>()
                || !(out.is_instance_of::<PyFloat>() || out.is_instance_of::<PyInt>())
            {
                return Err(self.wrong(M, &out, "a float > 0, or None for no quota"));
            }
            let v: f64 = out
                .extract()
                .map_err(|_| self.wrong(M, &out, "a float > 0, or None for no quota"))?;
            Ok(Some(v))
        })
    }

    fn update_quota(
        &self,
        quota_type: core::QuotaType,
        e: &core::QuotaEntity,
        value: f64,
    ) -> core::Result<()> {
        Python::attach(|py| {
            let e = entity(py, e).map_err(|err| self.error("update_quota", err))?;
            self.call(py, "update_quota", (quota_type.as_str(), e, value))?;
            Ok(())
        })
    }

    fn remove_quota(&self, quota_type: core::QuotaType, e: &core::QuotaEntity) -> core::Result<()> {
        Python::attach(|py| {
            let e = entity(py, e).map_err(|err| self.error("remove_quota", err))?;
            self.call(py, "remove_quota", (quota_type.as_str(), e))?;
            Ok(())
        })
    }

    fn quota_reset_required(&self, quota_type: core::QuotaType) -> core::Result<bool> {
        const M: &str = "quota_reset_required";
        Python::attach(|py| {
            let out = self.call(py, M, (quota_type.as_str(),))?;
            out.cast::<PyBool>()
                .map(|b| b.is_true())
                .map_err(|_| self.wrong(M, &out, "a bool"))
        })
    }

    /// The Python object's identity: managers built with one object share it.
    fn identity(&self) -> usize {
        self.obj.as_ptr() as usize
    }

    fn as_any(&self) -> Option<&dyn std::any::Any> {
        Some(self)
    }

    fn update_cluster_metadata(&self, metadata: &core::ClusterMetadata) -> core::Result<bool> {
        const M: &str = "update_cluster_metadata";
        Python::attach(|py| {
            let md = Bound::new(py, ClusterMetadata::from(metadata.clone()))
                .map_err(|e| self.error(M, e))?;
            let out = self.call(py, M, (md,))?;
            out.cast::<PyBool>()
                .map(|b| b.is_true())
                .map_err(|_| self.wrong(M, &out, "a bool"))
        })
    }
}
