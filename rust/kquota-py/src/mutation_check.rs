//! `MutationCheck`: what a strict or permissive controller-mutation record decided.

use pyo3::prelude::*;

use kquota_core as core;

/// The outcome of a strict or permissive controller-mutation record.
#[pyclass(module = "kquota._core", frozen, get_all)]
pub(crate) struct MutationCheck {
    accepted: bool,
    violated: bool,
    throttle_ms: i64,
}

#[pymethods]
impl MutationCheck {
    fn __repr__(&self) -> String {
        let b = |v: bool| if v { "True" } else { "False" };
        format!(
            "MutationCheck(accepted={}, violated={}, throttle_ms={})",
            b(self.accepted),
            b(self.violated),
            self.throttle_ms
        )
    }
}

impl From<core::MutationCheck> for MutationCheck {
    fn from(c: core::MutationCheck) -> Self {
        MutationCheck {
            accepted: c.accepted,
            violated: c.violated,
            throttle_ms: c.throttle_ms,
        }
    }
}
