//! The binding of the controller-mutation quota (KIP-599: `TokenBucket`,
//! `ControllerMutationQuotaManager`, `MutationRequestQuota`) and the connection-creation
//! rate quotas (KIP-612: `ConnectionQuotas`). Conversions only; the rules are the core's.

use std::sync::atomic::{AtomicU64, Ordering::Relaxed};
use std::sync::Arc;

use pyo3::prelude::*;

use crate::args::{self, Text};
use crate::{now_or_clock, CoreResult, Entity};
use kquota_core as core;
use kquota_core::token_bucket::{self, BucketCell};

/// The outcome of a strict or permissive controller-mutation record.
#[pyclass(module = "kquota._core", frozen, get_all)]
struct MutationCheck {
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

/// Kafka's `TokenBucket` stat with a bound, shared between threads.
#[pyclass(module = "kquota._core", frozen)]
struct TokenBucket {
    cfg: core::WindowConfig,
    quota: AtomicU64,
    cell: BucketCell,
}

impl TokenBucket {
    fn q(&self) -> f64 {
        f64::from_bits(self.quota.load(Relaxed))
    }
}

#[pymethods]
impl TokenBucket {
    #[new]
    #[pyo3(signature = (quota, *, num_samples=11, window_ms=1000))]
    fn new(
        #[pyo3(from_py_with = args::quota)] quota: f64,
        #[pyo3(from_py_with = args::num_samples)] num_samples: i64,
        #[pyo3(from_py_with = args::window_ms)] window_ms: i64,
    ) -> CoreResult<Self> {
        let quota = core::error::check_quota(quota)?;
        Ok(TokenBucket {
            cfg: core::WindowConfig::new(num_samples, window_ms)?,
            quota: AtomicU64::new(quota.to_bits()),
            cell: BucketCell::new(),
        })
    }

    #[getter]
    fn quota(&self) -> f64 {
        self.q()
    }

    /// Replaces the bound (the tokens are kept).
    fn set_quota(&self, #[pyo3(from_py_with = args::quota)] quota: f64) -> CoreResult<()> {
        let quota = core::error::check_quota(quota)?;
        self.quota.store(quota.to_bits(), Relaxed);
        Ok(())
    }

    #[getter]
    fn num_samples(&self) -> u32 {
        self.cfg.num_samples()
    }

    #[getter]
    fn window_ms(&self) -> i64 {
        self.cfg.window_ms()
    }

    #[getter]
    fn burst(&self) -> f64 {
        token_bucket::burst(&self.cfg, self.q())
    }

    /// (tokens, last_update_ms) as stored, without a refill.
    #[getter]
    fn state(&self) -> (f64, i64) {
        let b = self.cell.get();
        (b.tokens, b.last_update_ms)
    }

    #[pyo3(signature = (now_ms=None))]
    fn measure(&self, #[pyo3(from_py_with = args::now_ms)] now_ms: Option<i64>) -> f64 {
        self.cell.measure(&self.cfg, self.q(), now_or_clock(now_ms))
    }

    #[pyo3(signature = (value, now_ms=None))]
    fn record(
        &self,
        #[pyo3(from_py_with = args::value)] value: f64,
        #[pyo3(from_py_with = args::now_ms)] now_ms: Option<i64>,
    ) -> CoreResult<()> {
        let value = core::error::check_finite(value)?;
        self.cell
            .record(&self.cfg, self.q(), value, now_or_clock(now_ms));
        Ok(())
    }

    #[pyo3(signature = (permits, now_ms=None))]
    fn record_strict(
        &self,
        #[pyo3(from_py_with = args::permits)] permits: f64,
        #[pyo3(from_py_with = args::now_ms)] now_ms: Option<i64>,
    ) -> CoreResult<MutationCheck> {
        let permits = token_bucket::check_permits(permits)?;
        Ok(self
            .cell
            .record_strict(&self.cfg, self.q(), permits, now_or_clock(now_ms))
            .into())
    }

    #[pyo3(signature = (permits, now_ms=None))]
    fn record_permissive(
        &self,
        #[pyo3(from_py_with = args::permits)] permits: f64,
        #[pyo3(from_py_with = args::now_ms)] now_ms: Option<i64>,
    ) -> CoreResult<MutationCheck> {
        let permits = token_bucket::check_permits(permits)?;
        Ok(self
            .cell
            .record_permissive(&self.cfg, self.q(), permits, now_or_clock(now_ms))
            .into())
    }

    fn __repr__(&self) -> String {
        format!(
            "TokenBucket(quota={:?}, num_samples={}, window_ms={})",
            self.q(),
            self.cfg.num_samples(),
            self.cfg.window_ms()
        )
    }
}

/// `Math.round(-tokens / quota * 1000)`: the throttle of an overdrawn bucket.
#[pyfunction]
fn token_bucket_throttle_time(
    #[pyo3(from_py_with = args::tokens)] tokens: f64,
    #[pyo3(from_py_with = args::quota)] quota: f64,
) -> CoreResult<i64> {
    let quota = core::error::check_quota(quota)?;
    Ok(token_bucket::throttle_time(tokens, quota))
}

/// Whether Kafka enforces the quota strictly on `api` at request `version`.
#[pyfunction]
fn mutation_is_strict(
    #[pyo3(from_py_with = args::api)] api: Text<'_>,
    #[pyo3(from_py_with = args::version)] version: i16,
) -> CoreResult<bool> {
    let api: core::MutationApi = (*api).parse()?;
    Ok(api.is_strict(version))
}

/// Kafka's controller-mutation quota manager (`controller_mutation_rate`).
#[pyclass(module = "kquota._core", frozen)]
pub(crate) struct ControllerMutationQuotaManager {
    pub(crate) inner: Arc<core::ControllerMutationQuotaManager>,
}

#[pymethods]
impl ControllerMutationQuotaManager {
    #[new]
    #[pyo3(signature = (*, num_samples=11, window_ms=1000, sensor_expiry_ms=3600000))]
    fn new(
        #[pyo3(from_py_with = args::num_samples)] num_samples: i64,
        #[pyo3(from_py_with = args::window_ms)] window_ms: i64,
        #[pyo3(from_py_with = args::sensor_expiry_ms)] sensor_expiry_ms: i64,
    ) -> CoreResult<Self> {
        let window = core::WindowConfig::new(num_samples, window_ms)?;
        Ok(ControllerMutationQuotaManager {
            inner: Arc::new(core::ControllerMutationQuotaManager::new(
                window,
                sensor_expiry_ms,
            )?),
        })
    }

    #[getter]
    fn num_samples(&self) -> u32 {
        self.inner.window().num_samples()
    }

    #[getter]
    fn window_ms(&self) -> i64 {
        self.inner.window().window_ms()
    }

    #[getter]
    fn enabled(&self) -> bool {
        self.inner.enabled()
    }

    fn set_quota(
        &self,
        #[pyo3(from_py_with = args::entity)] entity: Bound<'_, Entity>,
        #[pyo3(from_py_with = args::value)] value: f64,
    ) -> CoreResult<()> {
        Ok(self.inner.set_quota(&entity.get().inner, value)?)
    }

    fn remove_quota(&self, #[pyo3(from_py_with = args::entity)] entity: Bound<'_, Entity>) {
        self.inner.remove_quota(&entity.get().inner)
    }

    fn quota(&self, #[pyo3(from_py_with = args::entity)] entity: Bound<'_, Entity>) -> Option<f64> {
        self.inner.quota(&entity.get().inner)
    }

    fn quotas(&self) -> Vec<(Entity, f64)> {
        self.inner
            .quotas()
            .into_iter()
            .map(|(inner, v)| (Entity { inner }, v))
            .collect()
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

    /// The quota of one request (Kafka's Strict/PermissiveControllerMutationQuota).
    fn request_quota(
        &self,
        #[pyo3(from_py_with = args::user)] user: Text<'_>,
        #[pyo3(from_py_with = args::client_id)] client_id: Text<'_>,
        #[pyo3(from_py_with = args::strict)] strict: bool,
    ) -> MutationRequestQuota {
        MutationRequestQuota {
            inner: core::MutationRequestQuota::new(self.inner.clone(), &user, &client_id, strict),
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

    #[pyo3(signature = (user, client_id, throttle_ms, now_ms=None, channel=None))]
    fn throttle(
        &self,
        #[pyo3(from_py_with = args::user)] user: Text<'_>,
        #[pyo3(from_py_with = args::client_id)] client_id: Text<'_>,
        #[pyo3(from_py_with = args::throttle_ms)] throttle_ms: i64,
        #[pyo3(from_py_with = args::now_ms)] now_ms: Option<i64>,
        #[pyo3(from_py_with = args::channel)] channel: Option<u64>,
    ) -> CoreResult<i64> {
        Ok(self.inner.throttle(
            &user,
            &client_id,
            throttle_ms,
            now_or_clock(now_ms),
            channel,
        )?)
    }

    #[pyo3(signature = (user, client_id, now_ms=None))]
    fn throttle_time_avg(
        &self,
        #[pyo3(from_py_with = args::user)] user: Text<'_>,
        #[pyo3(from_py_with = args::client_id)] client_id: Text<'_>,
        #[pyo3(from_py_with = args::now_ms)] now_ms: Option<i64>,
    ) -> Option<f64> {
        self.inner
            .throttle_time_avg(&user, &client_id, now_or_clock(now_ms))
    }

    #[pyo3(signature = (now_ms=None))]
    fn expired_channels(
        &self,
        #[pyo3(from_py_with = args::now_ms)] now_ms: Option<i64>,
    ) -> Vec<u64> {
        self.inner.expired_channels(now_or_clock(now_ms))
    }

    #[getter]
    fn queue_size(&self) -> usize {
        self.inner.queue_size()
    }

    fn next_unmute_ms(&self) -> Option<i64> {
        self.inner.next_unmute_ms()
    }

    fn sensor_names(&self) -> Vec<String> {
        self.inner.sensor_names()
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
}

/// One mutation request's quota: records each topic's partitions in turn.
#[pyclass(module = "kquota._core", frozen)]
struct MutationRequestQuota {
    inner: core::MutationRequestQuota,
}

#[pymethods]
impl MutationRequestQuota {
    #[getter]
    fn strict(&self) -> bool {
        self.inner.strict()
    }

    #[pyo3(signature = (permits, now_ms=None))]
    fn record(
        &self,
        #[pyo3(from_py_with = args::permits)] permits: f64,
        #[pyo3(from_py_with = args::now_ms)] now_ms: Option<i64>,
    ) -> CoreResult<MutationCheck> {
        Ok(self.inner.record(permits, now_or_clock(now_ms))?.into())
    }

    #[getter]
    fn is_exceeded(&self) -> bool {
        self.inner.is_exceeded()
    }

    #[pyo3(signature = (now_ms=None))]
    fn throttle_time(&self, #[pyo3(from_py_with = args::now_ms)] now_ms: Option<i64>) -> i32 {
        self.inner.throttle_time(now_or_clock(now_ms))
    }
}

/// What the broker does with a new connection.
#[pyclass(module = "kquota._core", frozen, get_all)]
struct ConnectionDecision {
    accept_delay_ms: i32,
    ip_throttle_ms: i32,
}

#[pymethods]
impl ConnectionDecision {
    fn __repr__(&self) -> String {
        format!(
            "ConnectionDecision(accept_delay_ms={}, ip_throttle_ms={})",
            self.accept_delay_ms, self.ip_throttle_ms
        )
    }
}

/// Kafka's connection-creation-rate quotas of one broker (KIP-612).
#[pyclass(module = "kquota._core", frozen)]
struct ConnectionQuotas {
    inner: core::ConnectionQuotas,
}

#[pymethods]
impl ConnectionQuotas {
    #[new]
    #[pyo3(signature = (*, num_samples=11, window_ms=1000, max_connection_creation_rate=2147483647, inter_broker_listener=None))]
    fn new(
        #[pyo3(from_py_with = args::num_samples)] num_samples: i64,
        #[pyo3(from_py_with = args::window_ms)] window_ms: i64,
        #[pyo3(from_py_with = args::rate)] max_connection_creation_rate: i64,
        #[pyo3(from_py_with = args::opt_listener)] inter_broker_listener: Option<Text<'_>>,
    ) -> CoreResult<Self> {
        let window = core::WindowConfig::new(num_samples, window_ms)?;
        Ok(ConnectionQuotas {
            inner: core::ConnectionQuotas::new(
                window,
                max_connection_creation_rate,
                inter_broker_listener.as_deref(),
            )?,
        })
    }

    #[getter]
    fn num_samples(&self) -> u32 {
        self.inner.window().num_samples()
    }

    #[getter]
    fn window_ms(&self) -> i64 {
        self.inner.window().window_ms()
    }

    /// Sets (or with `rate=None` removes) the quota of `ip`, or of the `<default>` IP
    /// when `ip` is None.
    fn set_ip_quota(
        &self,
        #[pyo3(from_py_with = args::opt_ip)] ip: Option<Text<'_>>,
        #[pyo3(from_py_with = args::opt_rate)] rate: Option<i64>,
    ) -> CoreResult<()> {
        Ok(self.inner.set_ip_quota(ip.as_deref(), rate)?)
    }

    fn ip_quota(&self, #[pyo3(from_py_with = args::ip)] ip: Text<'_>) -> CoreResult<i32> {
        Ok(self.inner.ip_quota(&ip)?)
    }

    fn ip_quotas(&self) -> (Vec<(String, i32)>, Option<i32>) {
        self.inner.ip_quotas()
    }

    fn set_broker_max_rate(&self, #[pyo3(from_py_with = args::rate)] rate: i64) -> CoreResult<()> {
        Ok(self.inner.set_broker_max_rate(rate)?)
    }

    #[getter]
    fn broker_max_rate(&self) -> i32 {
        self.inner.broker_max_rate()
    }

    #[pyo3(signature = (listener, max_connection_creation_rate=None))]
    fn add_listener(
        &self,
        #[pyo3(from_py_with = args::listener)] listener: Text<'_>,
        #[pyo3(from_py_with = args::opt_rate)] max_connection_creation_rate: Option<i64>,
    ) -> CoreResult<()> {
        Ok(self
            .inner
            .add_listener(&listener, max_connection_creation_rate)?)
    }

    fn set_listener_max_rate(
        &self,
        #[pyo3(from_py_with = args::listener)] listener: Text<'_>,
        #[pyo3(from_py_with = args::opt_rate)] rate: Option<i64>,
    ) -> CoreResult<()> {
        Ok(self.inner.set_listener_max_rate(&listener, rate)?)
    }

    fn remove_listener(&self, #[pyo3(from_py_with = args::listener)] listener: Text<'_>) -> bool {
        self.inner.remove_listener(&listener)
    }

    fn listeners(&self) -> Vec<(String, i32)> {
        self.inner.listeners()
    }

    #[pyo3(signature = (listener, now_ms=None))]
    fn accept_delay(
        &self,
        #[pyo3(from_py_with = args::listener)] listener: Text<'_>,
        #[pyo3(from_py_with = args::now_ms)] now_ms: Option<i64>,
    ) -> CoreResult<i32> {
        Ok(self.inner.accept_delay(&listener, now_or_clock(now_ms))?)
    }

    #[pyo3(signature = (listener, ip, now_ms=None))]
    fn admit_ip(
        &self,
        #[pyo3(from_py_with = args::listener)] listener: Text<'_>,
        #[pyo3(from_py_with = args::ip)] ip: Text<'_>,
        #[pyo3(from_py_with = args::now_ms)] now_ms: Option<i64>,
    ) -> CoreResult<i32> {
        Ok(self.inner.admit_ip(&listener, &ip, now_or_clock(now_ms))?)
    }

    #[pyo3(signature = (listener, ip, now_ms=None))]
    fn on_new_connection(
        &self,
        #[pyo3(from_py_with = args::listener)] listener: Text<'_>,
        #[pyo3(from_py_with = args::ip)] ip: Text<'_>,
        #[pyo3(from_py_with = args::now_ms)] now_ms: Option<i64>,
    ) -> CoreResult<ConnectionDecision> {
        let d = self
            .inner
            .on_new_connection(&listener, &ip, now_or_clock(now_ms))?;
        Ok(ConnectionDecision {
            accept_delay_ms: d.accept_delay_ms,
            ip_throttle_ms: d.ip_throttle_ms,
        })
    }

    #[pyo3(signature = (now_ms=None))]
    fn broker_rate(&self, #[pyo3(from_py_with = args::now_ms)] now_ms: Option<i64>) -> f64 {
        self.inner.broker_rate(now_or_clock(now_ms))
    }

    #[pyo3(signature = (listener, now_ms=None))]
    fn listener_rate(
        &self,
        #[pyo3(from_py_with = args::listener)] listener: Text<'_>,
        #[pyo3(from_py_with = args::now_ms)] now_ms: Option<i64>,
    ) -> CoreResult<f64> {
        Ok(self.inner.listener_rate(&listener, now_or_clock(now_ms))?)
    }

    #[pyo3(signature = (ip, now_ms=None))]
    fn ip_rate(
        &self,
        #[pyo3(from_py_with = args::ip)] ip: Text<'_>,
        #[pyo3(from_py_with = args::now_ms)] now_ms: Option<i64>,
    ) -> CoreResult<Option<f64>> {
        Ok(self.inner.ip_rate(&ip, now_or_clock(now_ms))?)
    }

    fn ip_bound(&self, #[pyo3(from_py_with = args::ip)] ip: Text<'_>) -> CoreResult<Option<f64>> {
        Ok(self.inner.ip_bound(&ip)?)
    }

    #[pyo3(signature = (listener, now_ms=None))]
    fn listener_throttle_avgs(
        &self,
        #[pyo3(from_py_with = args::listener)] listener: Text<'_>,
        #[pyo3(from_py_with = args::now_ms)] now_ms: Option<i64>,
    ) -> CoreResult<(f64, f64)> {
        Ok(self
            .inner
            .listener_throttle_avgs(&listener, now_or_clock(now_ms))?)
    }

    fn ip_sensor_names(&self) -> Vec<String> {
        self.inner.ip_sensor_names()
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
            "ConnectionQuotas(num_samples={}, window_ms={}, max_connection_creation_rate={})",
            self.num_samples(),
            self.window_ms(),
            self.broker_max_rate()
        )
    }
}

/// Registers this module's classes and functions in `kquota._core`.
pub(crate) fn register(m: &Bound<'_, PyModule>) -> PyResult<()> {
    m.add("UNLIMITED_CONNECTION_RATE", core::UNLIMITED_CONNECTION_RATE)?;
    m.add_class::<MutationCheck>()?;
    m.add_class::<TokenBucket>()?;
    m.add_class::<ControllerMutationQuotaManager>()?;
    m.add_class::<MutationRequestQuota>()?;
    m.add_class::<ConnectionDecision>()?;
    m.add_class::<ConnectionQuotas>()?;
    m.add_function(wrap_pyfunction!(token_bucket_throttle_time, m)?)?;
    m.add_function(wrap_pyfunction!(mutation_is_strict, m)?)?;
    Ok(())
}
