//! A Python object as the proxy's [`QuotaAdmin`]: its `describe()` and
//! `alter(changes, validate_only)` (see `kquota.proxy.admin`) called with the GIL, on the
//! data path's blocking threads.

use pyo3::prelude::*;

use kquota_core::kafka::client_quota_admin::QuotaAlteration;
use kquota_proxy::admin::{EntityParts, QuotaAdmin, StoredQuotas};

pub(crate) struct PyQuotaAdmin(pub(crate) Py<PyAny>);

/// A change as `alter` takes it: the entity, and each key with its value (`None`: removed).
type Change = (EntityParts, Vec<(String, Option<f64>)>);

/// Why a call failed, as the admin client reads it: the exception's type and message.
fn reason(py: Python<'_>, err: &PyErr) -> String {
    let kind = err
        .get_type(py)
        .name()
        .map_or_else(|_| "Exception".to_owned(), |name| name.to_string());
    format!("{kind}: {}", err.value(py))
}

impl QuotaAdmin for PyQuotaAdmin {
    fn describe(&self) -> Result<Vec<StoredQuotas>, String> {
        Python::attach(|py| {
            self.0
                .bind(py)
                .call_method0("describe")
                .and_then(|stored| stored.extract())
                .map_err(|err| reason(py, &err))
        })
    }

    fn alter(
        &self,
        changes: &[QuotaAlteration],
        validate_only: bool,
    ) -> Result<Vec<Option<String>>, String> {
        let changes: Vec<Change> = changes
            .iter()
            .map(|c| (c.entity.parts().to_vec(), c.ops.clone()))
            .collect();
        Python::attach(|py| {
            self.0
                .bind(py)
                .call_method1("alter", (changes, validate_only))
                .and_then(|refusals| refusals.extract())
                .map_err(|err| reason(py, &err))
        })
    }
}
