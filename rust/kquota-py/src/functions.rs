//! Module-level functions that belong to no class.

use pyo3::prelude::*;

use kquota_core as core;

use crate::args;

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
