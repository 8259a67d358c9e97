//! `kquota._core`: the Python binding of `kquota-core`.
//!
//! It only converts types, maps errors and releases the GIL around batch work; every
//! quota rule lives in the core crate. One module per Python class, named after it;
//! `args` converts arguments, `error` maps core errors onto kquota's exceptions, `shared`
//! writes the methods several classes share.

use pyo3::prelude::*;
use pyo3::types::{PyDict, PyTuple};

use kquota_core as core;

mod args;
mod broker;
mod broker_node;
mod callback;
mod check;
mod cluster_metadata;
mod connection_decision;
mod connection_quotas;
mod controller_mutation_quota_manager;
mod entity;
mod error;
mod functions;
mod mutation_check;
mod mutation_request_quota;
mod partition_leader;
mod proxy_data_path;
mod proxy_decision;
mod proxy_options;
mod quota_admin;
mod quota_manager;
mod replay_kernel;
mod request_log;
mod request_outcome;
mod request_path;
mod sampled_rate;
mod sensor_reading;
mod shared;
mod token_bucket;

use broker::{
    check_window_seconds, maintenance_due, mutation_response_throttle, next_maintenance_ms,
    next_sensor_expiry_ms,
};
use broker_node::BrokerNode;
use check::Check;
use cluster_metadata::ClusterMetadata;
use connection_decision::ConnectionDecision;
use connection_quotas::ConnectionQuotas;
use controller_mutation_quota_manager::{mutation_is_strict, ControllerMutationQuotaManager};
use entity::{sanitize_user, Entity};
use functions::{
    canonical_ip, check_quota, check_quota_key, check_quota_value, double_to_int, monotonic_ms,
    unrecorded_by_request,
};
use mutation_check::MutationCheck;
use mutation_request_quota::MutationRequestQuota;
use partition_leader::PartitionLeader;
use quota_manager::{bench_noop_record, update_cluster_metadata, QuotaManager};
use replay_kernel::{recommend_quotas, ReplayKernel};
use request_log::{parse_request_log, throttled_fetch_size};
use request_outcome::RequestOutcome;
use request_path::{applied_throttles, RequestPath};
use sampled_rate::SampledRate;
use sensor_reading::SensorReading;
use token_bucket::{token_bucket_throttle_time, TokenBucket};

#[pymodule(gil_used = false)]
fn _core(m: &Bound<'_, PyModule>) -> PyResult<()> {
    let py = m.py();
    m.add("__version__", env!("CARGO_PKG_VERSION"))?;
    m.add("DEFAULT", core::DEFAULT_MARKER)?;
    m.add("UNLIMITED", core::UNLIMITED)?;
    m.add("UNLIMITED_CONNECTION_RATE", core::UNLIMITED_CONNECTION_RATE)?;
    m.add_class::<Entity>()?;
    m.add_class::<Check>()?;
    m.add_class::<SensorReading>()?;
    m.add_class::<SampledRate>()?;
    m.add_class::<QuotaManager>()?;
    m.add_class::<BrokerNode>()?;
    m.add_class::<PartitionLeader>()?;
    m.add_class::<ClusterMetadata>()?;
    m.add_class::<RequestOutcome>()?;
    m.add_class::<RequestPath>()?;
    m.add_class::<ReplayKernel>()?;
    m.add_class::<MutationCheck>()?;
    m.add_class::<TokenBucket>()?;
    m.add_class::<ControllerMutationQuotaManager>()?;
    m.add_class::<MutationRequestQuota>()?;
    m.add_class::<ConnectionDecision>()?;
    m.add_class::<ConnectionQuotas>()?;
    m.add_class::<proxy_data_path::ProxyDataPath>()?;
    m.add_class::<proxy_decision::ProxyDecision>()?;
    m.add_function(wrap_pyfunction!(update_cluster_metadata, m)?)?;
    m.add_function(wrap_pyfunction!(applied_throttles, m)?)?;
    m.add_function(wrap_pyfunction!(recommend_quotas, m)?)?;
    m.add_function(wrap_pyfunction!(token_bucket_throttle_time, m)?)?;
    m.add_function(wrap_pyfunction!(mutation_is_strict, m)?)?;
    m.add_function(wrap_pyfunction!(double_to_int, m)?)?;
    m.add_function(wrap_pyfunction!(monotonic_ms, m)?)?;
    m.add_function(wrap_pyfunction!(sanitize_user, m)?)?;
    m.add_function(wrap_pyfunction!(canonical_ip, m)?)?;
    m.add_function(wrap_pyfunction!(check_quota, m)?)?;
    m.add_function(wrap_pyfunction!(check_quota_key, m)?)?;
    m.add_function(wrap_pyfunction!(check_quota_value, m)?)?;
    m.add_function(wrap_pyfunction!(unrecorded_by_request, m)?)?;
    m.add_function(wrap_pyfunction!(parse_request_log, m)?)?;
    m.add_function(wrap_pyfunction!(throttled_fetch_size, m)?)?;
    m.add_function(wrap_pyfunction!(mutation_response_throttle, m)?)?;
    m.add_function(wrap_pyfunction!(maintenance_due, m)?)?;
    m.add_function(wrap_pyfunction!(next_sensor_expiry_ms, m)?)?;
    m.add_function(wrap_pyfunction!(next_maintenance_ms, m)?)?;
    m.add_function(wrap_pyfunction!(check_window_seconds, m)?)?;
    m.add_function(wrap_pyfunction!(proxy_options::check_proxy_options, m)?)?;
    m.add("EXPIRY_TASK_MS", core::EXPIRY_TASK_MS)?;
    m.add(
        "REQUEST_LOG_REASONS",
        PyTuple::new(py, core::requestlog::REASONS)?,
    )?;
    m.add(
        "REQUEST_LOG_TOPIC_OPS",
        PyTuple::new(py, core::requestlog::TOPIC_OPS)?,
    )?;
    m.add(
        "REQUEST_LOG_READ_KINDS",
        PyTuple::new(py, core::requestlog::READ_KINDS)?,
    )?;
    m.add(
        "REQUEST_LOG_NETWORK_TIME",
        core::requestlog::request_time::describe(),
    )?;
    m.add(
        "REQUEST_LOG_SAME_POSITION",
        core::requestlog::fetch::SAME_POSITION,
    )?;
    m.add("QUOTA_TYPES", PyTuple::new(py, core::QUOTA_TYPE_NAMES)?)?;
    for (name, kind) in [
        ("CLIENT_QUOTA_KEYS", core::EntityKind::Client),
        ("IP_QUOTA_KEYS", core::EntityKind::Ip),
    ] {
        let keys = core::QUOTA_KEYS
            .iter()
            .filter(|(_, k, _)| *k == kind)
            .map(|(key, _, _)| *key)
            .collect::<Vec<_>>();
        m.add(name, PyTuple::new(py, keys)?)?;
    }
    m.add("NANOS_TO_PERCENT", core::NANOS_TO_PERCENT)?;
    let strict_since = PyDict::new(py);
    for (api, version) in core::strict_since_versions() {
        strict_since.set_item(api, version)?;
    }
    m.add("MUTATION_STRICT_SINCE", strict_since)?;
    m.add(
        "QUOTA_CALLBACK_METHODS",
        PyTuple::new(py, callback::METHODS)?,
    )?;
    // Bound without `add_function`, which would list it in `__all__`: it is private.
    let floor = wrap_pyfunction!(bench_noop_record, m)?;
    m.setattr("_bench_noop_record", floor)?;
    let errors = error::errors(py)?;
    m.add("KquotaError", errors.base.bind(py))?;
    m.add("InvalidValueError", errors.value.bind(py))?;
    m.add("InvalidConfigError", errors.config.bind(py))?;
    m.add("InvalidQuotaError", errors.quota.bind(py))?;
    m.add("InvalidUsageError", errors.usage.bind(py))?;
    m.add("QuotaCallbackError", errors.callback.bind(py))?;
    Ok(())
}
