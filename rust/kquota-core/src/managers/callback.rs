//! Custom quota callbacks (KIP-257, Kafka's `ClientQuotaCallback`).
//!
//! A [`QuotaCallback`] replaces Kafka's built-in precedence: it maps a request's
//! (principal, client id) to the metric tags of the sensor it records into, and those tags
//! to a quota limit. A [`crate::QuotaManager`] built with one
//! ([`crate::QuotaManager::with_callback`]) asks it only when a client is resolved to
//! its sensors (a client seen for the first time, or again after a reset or an expiry) and
//! when the limits are reset; a record for a client already resolved never calls it.
//!
//! A reset (Kafka's `updateQuotaMetricConfigs` over every quota metric) happens after
//! every quota update or removal, after [`QuotaCallback::update_cluster_metadata`]
//! returned true, and when [`QuotaCallback::quota_reset_required`] returns true (asked when
//! a client is resolved, and by [`crate::QuotaManager::reset_if_required`]). It asks the
//! limit of every live sensor again and makes every client resolve again (so its tags are
//! asked again) on its next request. Kafka asks for the tags on every request; kquota
//! caches them between resets, which is the one difference a callback can observe.

use crate::error::{Error, Result};
use crate::kafka::entity::QuotaEntity;
use crate::kafka::quota_type::QuotaType;

/// One broker of the cluster, as a Metadata response lists it.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct BrokerNode {
    /// The broker id.
    pub node_id: i32,
    /// Its advertised host.
    pub host: String,
    /// Its advertised port.
    pub port: i32,
    /// Its rack, if any.
    pub rack: Option<String>,
}

/// One partition and its leader (`None`: no leader known).
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct PartitionLeader {
    /// The topic name.
    pub topic: String,
    /// The partition index.
    pub partition: i32,
    /// The leader's broker id, if known.
    pub leader: Option<i32>,
}

/// The cluster metadata a callback is told about (Kafka's `Cluster`, reduced to what a
/// quota callback reads: brokers and partition leaders).
#[derive(Debug, Clone, Default, PartialEq, Eq)]
pub struct ClusterMetadata {
    /// The cluster id, if known.
    pub cluster_id: Option<String>,
    /// The broker this process serves or stands in front of, if known.
    pub local_broker: Option<i32>,
    /// The brokers.
    pub brokers: Vec<BrokerNode>,
    /// The partitions with their leaders.
    pub partitions: Vec<PartitionLeader>,
}

/// Kafka's `ClientQuotaCallback`. Every method may fail (a callback written in Python
/// may raise); the manager then returns the error and changes nothing it had not already
/// told the callback. Implementations are shared between threads.
pub trait QuotaCallback: Send + Sync {
    /// The metric tags `(user, client-id)` of a request from principal `user` (as the
    /// client authenticated, not sanitized) with `client_id`: clients with equal tags share
    /// a sensor and its quota. An empty tag is a dimension the sensor does not have.
    fn quota_metric_tags(
        &self,
        quota_type: QuotaType,
        user: &str,
        client_id: &str,
    ) -> Result<(String, String)>;

    /// The quota of the sensor with `tags` (bytes/s, or percent of a thread for
    /// `request`); `None`: no quota (the sensor enforces Kafka's `Long.MAX_VALUE`).
    fn quota_limit(&self, quota_type: QuotaType, tags: (&str, &str)) -> Result<Option<f64>>;

    /// A quota was set (`kafka-configs --alter --add-config`).
    fn update_quota(&self, quota_type: QuotaType, entity: &QuotaEntity, value: f64) -> Result<()>;

    /// A quota was removed (`--delete-config`).
    fn remove_quota(&self, quota_type: QuotaType, entity: &QuotaEntity) -> Result<()>;

    /// Whether limits may have changed since the last call for `quota_type` (other than
    /// through the three methods above, which always reset).
    fn quota_reset_required(&self, quota_type: QuotaType) -> Result<bool>;

    /// The cluster metadata changed; true if quotas changed and limits must be asked again.
    fn update_cluster_metadata(&self, metadata: &ClusterMetadata) -> Result<bool>;

    /// Which callback this is: two managers whose callbacks have the same identity share
    /// one (and [`crate::update_cluster_metadata`] tells it once). The address of `self` unless
    /// a wrapper knows better (a binding wrapping one foreign object several times).
    fn identity(&self) -> usize {
        (self as *const Self).cast::<()>() as usize
    }

    /// The implementation as `Any`, for a binding to find its own wrapper again (the
    /// object a manager's callback wraps); `None` by default.
    fn as_any(&self) -> Option<&dyn std::any::Any> {
        None
    }
}

/// A callback error naming the method, as every caller reports it.
pub fn callback_error(method: &str, message: impl std::fmt::Display) -> Error {
    Error::Callback(format!("quota callback {method} failed: {message}"))
}

/// Checks a limit a callback returned: `None` or a finite number > 0.
pub(crate) fn check_limit(tags: (&str, &str), limit: Option<f64>) -> Result<Option<f64>> {
    match limit {
        Some(v) if !(v.is_finite() && v > 0.0) => Err(callback_error(
            "quota_limit",
            format_args!(
                "it returned {v:?} for tags (user {:?}, client-id {:?}): a quota limit must \
                 be a finite number greater than 0, or None for no quota",
                tags.0, tags.1
            ),
        )),
        other => Ok(other),
    }
}
