//! `ConnectionQuotas`: Kafka's connection-creation-rate quotas of one broker (KIP-612).

use pyo3::prelude::*;

use kquota_core as core;

use crate::args::{self, now_or_clock, Text};
use crate::connection_decision::ConnectionDecision;
use crate::error::CoreResult;
use crate::shared::pymethods_with;

/// Kafka's connection-creation-rate quotas of one broker (KIP-612).
#[pyclass(module = "kquota._core", frozen)]
pub(crate) struct ConnectionQuotas {
    pub(crate) inner: std::sync::Arc<core::ConnectionQuotas>,
}

pymethods_with!([window] impl ConnectionQuotas {
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
            inner: std::sync::Arc::new(core::ConnectionQuotas::new(
                window,
                max_connection_creation_rate,
                inter_broker_listener.as_deref(),
            )?),
        })
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
        Ok(self
            .inner
            .on_new_connection(&listener, &ip, now_or_clock(now_ms))?
            .into())
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

    /// Another broker of the same cluster: the same configuration, shared (a change
    /// through either applies to both), and sensors of its own.
    fn for_another_broker(&self) -> Self {
        ConnectionQuotas {
            inner: std::sync::Arc::new(self.inner.for_another_broker()),
        }
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
});
