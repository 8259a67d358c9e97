//! The data path of `kquota proxy`, in Rust: Kafka's size-delimited frames read with a
//! bounded buffer, request and response headers decoded (and nothing else of a message
//! that a decision does not need), and the proxy that relays them
//! between clients and their brokers with Kafka's client quotas.
//!
//! Layers, each using only those above it: [`error`], [`frame`] (bytes to frames),
//! [`header`] (a frame's header), [`fetch`] (what a fetch request says), [`sasl`] (the principal of a connection), [`rewrite`]
//! (the throttle in a response), [`addresses`] (the broker addresses in a response, for a
//! gateway), [`admin`] (client-quota administration answered by the proxy), [`access`] (who may
//! administer it), [`broker_time`] (the broker's handler time on a request, estimated from
//! its round trips), [`managers`] (a broker's
//! quota managers as the proxy holds them), [`gateway`] (the proxy in front of a whole
//! cluster: a port and quota sensors per broker), `handlers` (each API's quota decision,
//! with no socket), [`server`] (the proxy: connections with Kafka's client quotas, moving
//! frames between the sockets and the handlers).

pub mod access;
pub mod addresses;
pub mod admin;
pub mod broker_time;
pub mod error;
pub mod fetch;
pub mod frame;
pub mod gateway;
mod handlers;
pub mod header;
pub mod managers;
pub mod metadata;
pub mod mutation;
mod precheck;
pub mod rewrite;
pub mod sasl;
pub mod server;

pub use access::AdminAccess;
pub use addresses::{names_brokers, with_addresses, BrokerAddress};
pub use admin::{QuotaAdmin, SharedAdmin};
pub use error::{FrameError, HeaderError};
pub use frame::{split_frame, FrameReader, DEFAULT_MAX_FRAME_BYTES};
pub use gateway::GatewayConfig;
pub use header::{
    api_name, parse_request_header, parse_response_header, produce_acks, RequestHeader,
    ResponseHeader,
};
pub use managers::{Admission, Managers};
pub use server::{Log, OptionError, Proxy, ProxyConfig, ProxyOptions};

/// Locks `mutex`; a panic elsewhere cannot leave the small values kept under these locks
/// half-written, so a poisoned lock is used as it is.
pub(crate) fn lock<T>(mutex: &std::sync::Mutex<T>) -> std::sync::MutexGuard<'_, T> {
    mutex
        .lock()
        .unwrap_or_else(std::sync::PoisonError::into_inner)
}
