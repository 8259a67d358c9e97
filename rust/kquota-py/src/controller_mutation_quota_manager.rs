//! `ControllerMutationQuotaManager`: Kafka's controller-mutation quota manager
//! (KIP-599), and which requests it enforces strictly.

use std::sync::Arc;

use pyo3::prelude::*;

use kquota_core as core;

use crate::args::{self, now_or_clock, Text};
use crate::entity::{self, Entity};
use crate::error::CoreResult;
use crate::mutation_check::MutationCheck;
use crate::mutation_request_quota::MutationRequestQuota;
use crate::shared::pymethods_with;

/// Kafka's controller-mutation quota manager (`controller_mutation_rate`).
#[pyclass(module = "kquota._core", frozen)]
pub(crate) struct ControllerMutationQuotaManager {
    pub(crate) inner: Arc<core::ControllerMutationQuotaManager>,
}

pymethods_with!([window, client_quota] impl ControllerMutationQuotaManager {
    #[new]
    #[pyo3(signature = (*, num_samples=11, window_ms=1000, sensor_expiry_ms=3600000, kafka_version=None))]
    fn new(
        #[pyo3(from_py_with = args::num_samples)] num_samples: i64,
        #[pyo3(from_py_with = args::window_ms)] window_ms: i64,
        #[pyo3(from_py_with = args::sensor_expiry_ms)] sensor_expiry_ms: i64,
        #[pyo3(from_py_with = args::kafka_version)] kafka_version: Option<Text<'_>>,
    ) -> CoreResult<Self> {
        let window = core::WindowConfig::new(num_samples, window_ms)?;
        let release = args::release(kafka_version.as_deref())?;
        Ok(ControllerMutationQuotaManager {
            inner: Arc::new(
                core::ControllerMutationQuotaManager::new(window, sensor_expiry_ms)?
                    .for_release(release),
            ),
        })
    }

    /// The Kafka release whose rules the manager follows where releases differ, as
    /// "major.minor".
    #[getter]
    fn kafka_version(&self) -> String {
        self.inner.release().to_string()
    }

    fn remove_quota(&self, #[pyo3(from_py_with = entity::entity)] entity: Bound<'_, Entity>) {
        self.inner.remove_quota(&entity.get().inner)
    }

    fn tags(
        &self,
        #[pyo3(from_py_with = args::user)] user: Text<'_>,
        #[pyo3(from_py_with = args::client_id)] client_id: Text<'_>,
    ) -> (String, String) {
        self.inner.tags(&user, &client_id)
    }

    fn quota_for(
        &self,
        #[pyo3(from_py_with = args::user)] user: Text<'_>,
        #[pyo3(from_py_with = args::client_id)] client_id: Text<'_>,
    ) -> Option<f64> {
        self.inner.quota_for(&user, &client_id)
    }

    #[pyo3(signature = (user, client_id, permits, now_ms=None))]
    fn record(
        &self,
        #[pyo3(from_py_with = args::user)] user: Text<'_>,
        #[pyo3(from_py_with = args::client_id)] client_id: Text<'_>,
        #[pyo3(from_py_with = args::permits)] permits: f64,
        #[pyo3(from_py_with = args::now_ms)] now_ms: Option<i64>,
    ) -> CoreResult<i32> {
        Ok(self
            .inner
            .record(&user, &client_id, permits, now_or_clock(now_ms))?)
    }

    #[pyo3(signature = (user, client_id, permits, now_ms=None))]
    fn record_strict(
        &self,
        #[pyo3(from_py_with = args::user)] user: Text<'_>,
        #[pyo3(from_py_with = args::client_id)] client_id: Text<'_>,
        #[pyo3(from_py_with = args::permits)] permits: f64,
        #[pyo3(from_py_with = args::now_ms)] now_ms: Option<i64>,
    ) -> CoreResult<MutationCheck> {
        Ok(self
            .inner
            .record_strict(&user, &client_id, permits, now_or_clock(now_ms))?
            .into())
    }

    #[pyo3(signature = (user, client_id, permits, now_ms=None))]
    fn record_permissive(
        &self,
        #[pyo3(from_py_with = args::user)] user: Text<'_>,
        #[pyo3(from_py_with = args::client_id)] client_id: Text<'_>,
        #[pyo3(from_py_with = args::permits)] permits: f64,
        #[pyo3(from_py_with = args::now_ms)] now_ms: Option<i64>,
    ) -> CoreResult<MutationCheck> {
        Ok(self
            .inner
            .record_permissive(&user, &client_id, permits, now_or_clock(now_ms))?
            .into())
    }

    /// Strict or permissive as Kafka picks for `api` (`"create_topics"`,
    /// `"create_partitions"`, `"delete_topics"`) at request `version`.
    #[allow(clippy::too_many_arguments)]
    #[pyo3(signature = (api, version, user, client_id, permits, now_ms=None))]
    fn record_for(
        &self,
        #[pyo3(from_py_with = args::api)] api: Text<'_>,
        #[pyo3(from_py_with = args::version)] version: i16,
        #[pyo3(from_py_with = args::user)] user: Text<'_>,
        #[pyo3(from_py_with = args::client_id)] client_id: Text<'_>,
        #[pyo3(from_py_with = args::permits)] permits: f64,
        #[pyo3(from_py_with = args::now_ms)] now_ms: Option<i64>,
    ) -> CoreResult<MutationCheck> {
        let api: core::MutationApi = (*api).parse()?;
        Ok(self
            .inner
            .record_for(
                api,
                version,
                &user,
                &client_id,
                permits,
                now_or_clock(now_ms),
            )?
            .into())
    }

    /// The quota of one request (Kafka's Strict/PermissiveControllerMutationQuota), made
    /// at `now_ms`: it binds the client's sensors then.
    #[pyo3(signature = (user, client_id, strict, now_ms=None))]
    fn request_quota(
        &self,
        #[pyo3(from_py_with = args::user)] user: Text<'_>,
        #[pyo3(from_py_with = args::client_id)] client_id: Text<'_>,
        #[pyo3(from_py_with = args::strict)] strict: bool,
        #[pyo3(from_py_with = args::now_ms)] now_ms: Option<i64>,
    ) -> MutationRequestQuota {
        let now = now_or_clock(now_ms);
        MutationRequestQuota {
            inner: core::MutationRequestQuota::new(
                self.inner.clone(),
                &user,
                &client_id,
                strict,
                now,
            ),
        }
    }

    #[pyo3(signature = (user, client_id, now_ms=None))]
    fn tokens(
        &self,
        #[pyo3(from_py_with = args::user)] user: Text<'_>,
        #[pyo3(from_py_with = args::client_id)] client_id: Text<'_>,
        #[pyo3(from_py_with = args::now_ms)] now_ms: Option<i64>,
    ) -> Option<f64> {
        self.inner.tokens(&user, &client_id, now_or_clock(now_ms))
    }

    #[pyo3(signature = (user, client_id, now_ms=None))]
    fn mutation_rate(
        &self,
        #[pyo3(from_py_with = args::user)] user: Text<'_>,
        #[pyo3(from_py_with = args::client_id)] client_id: Text<'_>,
        #[pyo3(from_py_with = args::now_ms)] now_ms: Option<i64>,
    ) -> Option<f64> {
        self.inner
            .mutation_rate(&user, &client_id, now_or_clock(now_ms))
    }

    #[getter]
    fn queue_size(&self) -> usize {
        self.inner.queue_size()
    }

    #[getter]
    fn sensor_count(&self) -> usize {
        self.inner.sensor_count()
    }

    #[pyo3(signature = (now_ms=None))]
    fn expire_sensors(
        &self,
        #[pyo3(from_py_with = args::now_ms)] now_ms: Option<i64>,
    ) -> Vec<String> {
        self.inner.expire_sensors(now_or_clock(now_ms))
    }

    fn __repr__(&self) -> String {
        format!(
            "ControllerMutationQuotaManager(num_samples={}, window_ms={})",
            self.num_samples(),
            self.window_ms()
        )
    }
});

/// Whether Kafka enforces the quota strictly on `api` at request `version`.
#[pyfunction]
pub(crate) fn mutation_is_strict(
    #[pyo3(from_py_with = args::api)] api: Text<'_>,
    #[pyo3(from_py_with = args::version)] version: i16,
) -> CoreResult<bool> {
    let api: core::MutationApi = (*api).parse()?;
    Ok(api.is_strict(version))
}
