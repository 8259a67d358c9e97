//! Module-level functions that belong to no class.

use numpy::{PyArray1, PyReadonlyArray1};
use pyo3::prelude::*;

use kquota_core as core;

use crate::args;
use crate::error::CoreError;

/// Java's `(int)` cast of a double: truncation, saturating, NaN to 0.
#[pyfunction]
pub(crate) fn double_to_int(#[pyo3(from_py_with = args::java_double)] value: f64) -> i32 {
    core::kafka::javamath::double_to_int(value)
}

/// The clock the core uses when `now_ms` is omitted.
#[pyfunction]
pub(crate) fn monotonic_ms() -> i64 {
    core::monotonic_ms()
}

/// An IP address literal in the form the connection quota keys it: an IPv4-mapped IPv6
/// address is its IPv4 address (as Java's `InetAddress` reads it), IPv6 is compressed.
#[pyfunction]
pub(crate) fn canonical_ip(ip: &str) -> PyResult<String> {
    Ok(core::canonical_ip(ip).map_err(CoreError)?.to_string())
}

/// A quota value as every manager takes it: finite and greater than 0.
#[pyfunction]
pub(crate) fn check_quota(value: f64) -> PyResult<f64> {
    Ok(core::error::check_quota(value).map_err(CoreError)?)
}

/// The entity kind a Python caller names: `ip=True` an IP, `False` a user or client id,
/// `None` whichever kind the key belongs on.
fn entity_kind(ip: Option<bool>) -> Option<core::EntityKind> {
    ip.map(|ip| {
        if ip {
            core::EntityKind::Ip
        } else {
            core::EntityKind::Client
        }
    })
}

/// A client-quota value as Kafka's controller (and kquota) accepts it for `key`.
#[pyfunction]
#[pyo3(signature = (key, value, *, ip = None))]
pub(crate) fn check_quota_value(key: &str, value: f64, ip: Option<bool>) -> PyResult<f64> {
    Ok(
        core::check_quota_value(entity_kind(ip), key, value)
            .map_err(|err| CoreError(err.into()))?,
    )
}

/// A client-quota key as Kafka's controller accepts it on an entity of the kind.
#[pyfunction]
#[pyo3(signature = (key, *, ip = None))]
pub(crate) fn check_quota_key(key: &str, ip: Option<bool>) -> PyResult<()> {
    Ok(core::check_quota_key(entity_kind(ip), key).map_err(|err| CoreError(err.into()))?)
}

/// Which fetches the request quota's throttles make the fetch quota unrecord (the request
/// half of the core's `fetch_unrecorded`; the fetch manager applies the fetch half).
#[pyfunction]
pub(crate) fn unrecorded_by_request<'py>(
    py: Python<'py>,
    #[pyo3(from_py_with = args::request_ms_array)] request_ms: PyReadonlyArray1<'py, i32>,
) -> Bound<'py, PyArray1<bool>> {
    let unrecorded: Vec<bool> = request_ms
        .as_array()
        .iter()
        .map(|&request| core::fetch_unrecorded(0, request))
        .collect();
    PyArray1::from_vec(py, unrecorded)
}
