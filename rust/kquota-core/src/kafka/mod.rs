//! Kafka's quota arithmetic and entity rules, one module per rule, each exact to the
//! bit: sampled windows, the bound check and throttle formula, token buckets, the
//! connection rate, entities and their precedence, the request path's order, what a
//! broker does around them ([`broker`]: the response's throttle, maintenance, whole-second
//! windows), units and names. Builds only on [`crate::sync`].

pub mod broker;
pub mod client_quota_admin;
pub mod clock;
pub mod connection_rate;
#[cfg(not(loom))]
pub mod delay_queue;
#[cfg(not(loom))]
pub mod entity;
pub mod ip;
pub mod javamath;
pub mod mutation_api;
pub mod quota;
pub mod quota_config;
pub mod quota_type;
pub mod rate;
pub mod rate_cell;
pub mod release;
#[cfg(not(loom))]
pub mod request;
pub mod samples;
pub mod sensor;
pub mod token_bucket;
pub mod units;
