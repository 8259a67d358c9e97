//! The proxy: Kafka's client quotas applied to every connection relayed to one broker.
//!
//! One tokio task per client connection, each with its own connection to the broker, and in
//! it two halves: the reader (client to broker) and the responder (broker to client). As in
//! a Kafka broker's socket server, a connection's requests are answered one at a time and
//! in order: the responder takes each response in turn, checks the quotas at that moment
//! (the core's [`kquota_core::RequestPath`]), writes the applied throttle into the
//! response and sends it at once (KIP-219); a throttle then mutes the connection, and
//! neither half handles anything more of it until the mute ends.
//!
//! A request goes to the broker once every earlier one has been answered, except that a
//! Produce request may go while earlier Produce requests of the connection still wait for
//! their responses (at most [`PIPELINE_DEPTH`], never while muted), as a client pipelines
//! them: the broker is not idle while a response travels back. Its quota is still checked
//! when its turn comes, so the throttles and the times the client gets its answers are
//! Kafka's; only the broker's append can come earlier. A fetch's `max_bytes` is capped by
//! the fetch quota as it stands after the requests before it, and SASL changes whose quota
//! applies, so neither may overtake.
//!
//! What each API's quotas decide is in `crate::handlers`, one handler per concern, with
//! no socket; the modules here move the frames and apply the verdicts:
//! - `proxy`: the listener, the accept loop with KIP-612's admission, each connection's
//!   task, the maintenance of the managers' delay queues and sensors, shutdown;
//! - `shared`: the state every connection task shares;
//! - `connection`: one client connection's state (its mute, its turn, its user, idleness);
//! - `reader`: each request read, handed to its handler, forwarded in turn; the proxy's
//!   own requests on the connection (partition counts, quota access);
//! - `responder`: each response read in turn, handed to its handler, the verdict applied
//!   (mute, decision kept, reply sent);
//! - `brokers`: responses naming brokers (a gateway's addresses, the quota callbacks'
//!   metadata);
//! - `transport`: connecting upstream, reading responses and writing frames;
//! - `decisions`: the decisions kept for the owner; `config`: the proxy's bounds.
//!
//! Bad input (a frame too large or malformed, a response that answers another request)
//! or a broker that is gone closes that one connection, with one line to the proxy's log.

use std::sync::Arc;

mod brokers;
mod config;
mod connection;
mod decisions;
mod probe;
mod proxy;
mod reader;
mod responder;
mod shared;
mod transport;

pub use crate::managers::{Admission, CallbackFactory, Managers};
pub use config::{OptionError, ProxyConfig, ProxyOptions};
pub use decisions::{Decision, MAX_KEPT_DECISIONS};
pub use proxy::Proxy;

/// Produce requests of one connection forwarded and not yet answered, at most.
pub const PIPELINE_DEPTH: usize = 8;

/// How often idle sensors are expired: the core's [`kquota_core::EXPIRY_TASK_MS`].
pub use kquota_core::EXPIRY_TASK_MS as SENSOR_EXPIRY_INTERVAL_MS;

/// The API a follower's fetch is captured as (it is held to the request quota only).
pub const FOLLOWER_FETCH: &str = "follower_fetch";

/// What the proxy reports to its owner: one line per connection closed on an error, and
/// the SASL exchanges whose principal it cannot read.
pub type Log = Arc<dyn Fn(&str) + Send + Sync>;
