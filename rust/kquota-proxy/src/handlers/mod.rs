//! One handler per protocol concern, as Kroxylicious has one filter per concern: each
//! takes what a request or its response says and the broker's quota state, decides, and
//! returns what to do (forward, answer with a throttle, mute the channel until a time,
//! rewrite). None of them touches a socket: the server moves the frames and applies the
//! verdicts, and each rule is unit-tested here on the core's own managers.
//!
//! [`produce`], [`fetch`] and [`request`] (every other API, held to the request quota) are
//! the request path's; [`mutation`] is the controller-mutation quota (KIP-599); [`admin`]
//! decides who has quota administration answered; [`sasl`] follows the exchange that gives
//! a connection its user.

use bytes::BytesMut;
use kquota_core::{ApiKind, Outcome, Request, RequestPath};

use crate::error::Closed;
use crate::header::RequestHeader;
use crate::rewrite::with_throttle;

pub(crate) mod admin;
pub(crate) mod fetch;
pub(crate) mod mutation;
pub(crate) mod produce;
pub(crate) mod request;
pub(crate) mod sasl;
#[cfg(test)]
mod testing;

pub(crate) const PRODUCE: i16 = 0;
pub(crate) const FETCH: i16 = 1;
pub(crate) const METADATA: i16 = 3;
pub(crate) const SASL_HANDSHAKE: i16 = 17;
pub(crate) const API_VERSIONS: i16 = 18;
pub(crate) const SASL_AUTHENTICATE: i16 = 36;

/// Whose quotas a request is held to, and the channel a throttle mutes.
#[derive(Debug, Clone, Copy)]
pub(crate) struct Client<'a> {
    pub user: &'a str,
    pub client_id: &'a str,
    pub channel: u64,
}

/// What goes to the client for one request.
#[derive(Debug, PartialEq)]
pub(crate) enum Reply {
    /// Nothing: Kafka sends no response to an `acks=0` produce.
    Nothing,
    /// The broker's response as it came.
    AsIs,
    /// A response of the proxy's making: the broker's rewritten, or one in its place.
    Own(BytesMut),
}

/// A handler's verdict on one answered request.
#[derive(Debug)]
pub(crate) struct Verdict {
    /// The quotas' outcome. A throttle has been accounted through the manager that applied
    /// it, and `muted_until_ms` is when the channel's mute ends: the reply goes at once
    /// and the channel stays muted until then (KIP-219).
    pub outcome: Outcome,
    /// The usage recorded (a produce request's or consumer fetch response's size, a
    /// mutation's partitions; 0 otherwise) and the request time recorded, in nanoseconds.
    pub size: f64,
    pub thread_ns: f64,
    /// A mutation request's controller-mutation throttle.
    pub mutation_throttle_ms: Option<i32>,
    pub reply: Reply,
}

/// Records `request` on the client's quotas and, when throttled, accounts the applied
/// throttle through the manager whose throttle it is (its throttle-time sensor, and the
/// channel in its delay queue). The reply is the broker's response as it came.
pub(crate) fn check(
    path: &RequestPath<'_>,
    client: Client<'_>,
    request: &Request,
    now: i64,
) -> Result<Verdict, Closed> {
    let outcome = path.handle(
        client.user,
        client.client_id,
        request,
        now,
        Some(client.channel),
    )?;
    let size = if request.kind == ApiKind::Other {
        0.0
    } else {
        request.bytes
    };
    Ok(Verdict {
        outcome,
        size,
        thread_ns: request.thread_time_ns.unwrap_or(0.0),
        mutation_throttle_ms: None,
        reply: Reply::AsIs,
    })
}

/// The response with the applied throttle in its `throttle_time_ms` when throttled (the
/// broker's own as it came when not, when it already says as much, or when its version
/// has no such field).
pub(crate) fn throttled_reply(
    response: &[u8],
    header: &RequestHeader<'_>,
    throttle_ms: i32,
) -> Reply {
    if throttle_ms <= 0 {
        return Reply::AsIs;
    }
    with_throttle(response, header, throttle_ms).map_or(Reply::AsIs, Reply::Own)
}
