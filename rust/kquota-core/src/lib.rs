//! kquota-core: Apache Kafka's client-quota arithmetic, exact to the bit and lock-free.
//!
//! The crate is in layers; each layer imports only from the ones below it:
//!
//! * [`sync`]: lock-free machinery that knows nothing of Kafka: copy-on-write cells
//!   reclaimed by one epoch ([`sync::cow`]), the concurrent hash map under the managers
//!   ([`sync::hash_map`]), and how a manager swaps a map's table for a right-sized one
//!   after expiry while other threads use it ([`sync::table_swap`]).
//! * [`kafka`]: Kafka's arithmetic and rules, one owner each: sampled windows
//!   ([`kafka::samples`]), the bound check and throttle formula ([`kafka::quota`]), one
//!   thread-safe rate sensor ([`kafka::rate::SampledRate`]), the token bucket of KIP-599
//!   ([`kafka::token_bucket`]), the connection-creation rate of KIP-612
//!   ([`kafka::connection_rate`]), entities and precedence ([`kafka::entity`]), the
//!   request path's order ([`kafka::request`]), what a broker does around the arithmetic
//!   (the response's throttle, maintenance, whole-second windows: [`kafka::broker`]), the
//!   strict-since versions
//!   ([`kafka::mutation_api`]), units ([`kafka::units`]), quota-type names
//!   ([`kafka::quota_type`]), IP entities ([`kafka::ip`]) and the administration of client
//!   quotas, KIP-546 ([`kafka::client_quota_admin`]).
//! * [`managers`]: the managers a broker runs: [`QuotaManager`] for one client-quota
//!   type, custom callbacks (KIP-257, [`QuotaCallback`]), the controller-mutation quota
//!   ([`ControllerMutationQuotaManager`]), the connection quotas ([`ConnectionQuotas`])
//!   and the request path over three managers ([`RequestPath`]).
//! * [`replay`]: the same request path replayed sequentially over columns of events, for
//!   back-testing ([`ReplayKernel`]: several scenarios in one pass, open or closed loop).
//! * [`requestlog`]: Kafka's request-log lines as back-test rows (or why a line has none),
//!   column batch in, columns out.
//!
//! [`error`] is shared by every layer. The types a user of the crate needs are re-exported
//! at its root.
//!
//! Everything is safe to call from many threads at once; no operation takes a lock.
//! The spec is `shared/docs/kafka-quota-semantics.md`.

pub mod error;
pub mod kafka;
#[cfg(not(loom))]
pub mod managers;
#[cfg(not(loom))]
pub mod replay;
#[cfg(not(loom))]
pub mod requestlog;
pub mod sync;

pub use error::{Error, Result};
pub use kafka::broker::{
    applied_throttle, check_window_seconds, mutation_response_throttle, Maintenance,
    MutationThrottledBy, EXPIRY_TASK_MS,
};
pub use kafka::clock::monotonic_ms;
pub use kafka::connection_rate::UNLIMITED_CONNECTION_RATE;
#[cfg(not(loom))]
pub use kafka::entity::{sanitize_user, EntityName, QuotaEntity, DEFAULT_MARKER};
pub use kafka::ip::canonical_ip;
pub use kafka::mutation_api::{
    strict_since_versions, MutationApi, CREATE_PARTITIONS_STRICT_SINCE, CREATE_TOPICS_STRICT_SINCE,
    DELETE_TOPICS_STRICT_SINCE,
};
pub use kafka::quota::{Check, UNLIMITED};
pub use kafka::quota_config::{
    check_quota_key, check_quota_value, EntityKind, QuotaConfigError, ValueType, QUOTA_KEYS,
};
pub use kafka::quota_type::{QuotaType, QUOTA_TYPE_NAMES};
pub use kafka::rate::SampledRate;
pub use kafka::release::KafkaRelease;
#[cfg(not(loom))]
pub use kafka::request::{
    fetch_unrecorded, record_request, ApiKind, RecordedThrottles, Request, RequestSensors,
};
pub use kafka::samples::WindowConfig;
pub use kafka::sensor::DEFAULT_SENSOR_EXPIRY_MS;
pub use kafka::token_bucket::{BucketCell, MutationCheck};
pub use kafka::units::{rate_units, NANOS_TO_PERCENT};
#[cfg(not(loom))]
pub use managers::callback::{BrokerNode, ClusterMetadata, PartitionLeader, QuotaCallback};
#[cfg(not(loom))]
pub use managers::connection_quota::{ConnectionDecision, ConnectionQuotas};
#[cfg(not(loom))]
pub use managers::manager::{update_cluster_metadata, QuotaManager, SensorSnapshot};
#[cfg(not(loom))]
pub use managers::mutation::{ControllerMutationQuotaManager, MutationRequestQuota};
#[cfg(not(loom))]
pub use managers::request_path::{Outcome, RequestPath};
#[cfg(not(loom))]
pub use replay::{
    ClientLimits, EntitySummary, Events, Output, QuotaPass, ReplayKernel, ReplayOptions,
    SummaryType,
};
