//! How the proxy reaches its broker and the bounds it keeps.

use std::time::Duration;

use crate::access::AdminAccess;
use crate::admin::SharedAdmin;
use crate::gateway::GatewayConfig;

/// How the proxy reaches its broker and the bounds it keeps.
#[derive(Debug, Clone)]
pub struct ProxyConfig {
    /// The broker's listener, `host:port`; in gateway mode, the cluster's bootstrap
    /// addresses (`host:port`, comma-separated: the first that answers).
    pub upstream: String,
    /// Kafka's `socket.request.max.bytes`: a larger request closes its connection.
    pub max_request_bytes: usize,
    /// A larger response closes its connection too.
    pub max_response_bytes: usize,
    /// How long connecting to the broker may take.
    pub connect_timeout: Duration,
    /// How long the broker may take to answer one request.
    pub upstream_timeout: Duration,
    /// Kafka's `connections.max.idle.ms`: a client connection with nothing read from it
    /// or written to it for this long, and no request at the broker or mute running, is
    /// closed (a client stopped in the middle of a frame among them).
    pub connections_max_idle: Duration,
    /// The broker's `num.partitions`: what a CreateTopics topic asking for -1 gets, as the
    /// controller-mutation quota counts it.
    pub default_num_partitions: i32,
    /// Gateway mode: in front of the whole cluster of `upstream`, a port per broker.
    pub gateway: Option<GatewayConfig>,
    /// Answers DescribeClientQuotas and AlterClientQuotas itself, from and into this
    /// configuration, instead of forwarding them.
    pub admin: Option<SharedAdmin>,
    /// Who may have them answered (with `admin`).
    pub admin_access: AdminAccess,
}

impl ProxyConfig {
    /// Kafka's bounds (100 MiB frames, 10 minutes idle), 10 s to connect and 300 s for a
    /// response.
    pub fn new(upstream: impl Into<String>) -> Self {
        ProxyConfig {
            upstream: upstream.into(),
            max_request_bytes: crate::DEFAULT_MAX_FRAME_BYTES,
            max_response_bytes: crate::DEFAULT_MAX_FRAME_BYTES,
            connect_timeout: Duration::from_secs(10),
            upstream_timeout: Duration::from_secs(300),
            connections_max_idle: Duration::from_secs(600),
            default_num_partitions: 1,
            gateway: None,
            admin: None,
            admin_access: AdminAccess::default(),
        }
    }
}
