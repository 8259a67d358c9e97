//! kquota's exception classes and the one mapping of core errors onto them.

use pyo3::exceptions::{PyException, PyValueError};
use pyo3::prelude::*;
use pyo3::sync::PyOnceLock;
use pyo3::types::{PyDict, PyTuple, PyType};
use pyo3::PyTypeInfo;

use kquota_core as core;

/// kquota's exception classes, made once per interpreter. `InvalidValueError` derives
/// from both `KquotaError` and `ValueError`, which `create_exception!` cannot express.
pub(crate) struct Errors {
    pub(crate) base: Py<PyType>,
    pub(crate) value: Py<PyType>,
    pub(crate) config: Py<PyType>,
    pub(crate) quota: Py<PyType>,
    pub(crate) usage: Py<PyType>,
    pub(crate) callback: Py<PyType>,
}

static ERRORS: PyOnceLock<Errors> = PyOnceLock::new();

pub(crate) fn errors(py: Python<'_>) -> PyResult<&'static Errors> {
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
                "A quota value that is zero, negative, NaN or infinite, or a quota key or \
                 value Kafka refuses for an entity.",
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
pub(crate) struct CoreError(pub(crate) core::Error);

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
                core::Error::InvalidQuota(_) | core::Error::InvalidQuotaConfig(_) => &errors.quota,
                core::Error::InvalidUsage(_) => &errors.usage,
                core::Error::Callback(_) => &errors.callback,
            };
            PyErr::from_type(class.bind(py).clone(), e.to_string())
        })
    }
}

pub(crate) type CoreResult<T> = Result<T, CoreError>;

/// A proxy option outside its rule (`kquota_proxy::OptionError`): an `InvalidConfigError`
/// with the proxy crate's message.
pub(crate) fn invalid_option(py: Python<'_>, err: &kquota_proxy::OptionError) -> PyErr {
    match errors(py) {
        Ok(errors) => PyErr::from_type(errors.config.bind(py).clone(), err.to_string()),
        Err(err) => err,
    }
}
