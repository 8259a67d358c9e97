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
