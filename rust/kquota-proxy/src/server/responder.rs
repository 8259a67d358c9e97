//! The responder: each forwarded request answered in turn, once the connection's mute (if
//! any) has ended. Its API's handler decides on the broker's response; the verdict is
//! applied here (the mute, the decision kept) and its reply sent.

use std::sync::atomic::Ordering;
use std::sync::{Arc, Mutex};
use std::time::{Duration, Instant};

use bytes::BytesMut;
use kquota_core::{monotonic_ms, RequestPath};
use tokio::io::AsyncWriteExt;
use tokio::net::tcp::{OwnedReadHalf, OwnedWriteHalf};
use tokio::sync::{mpsc, oneshot};

use super::brokers::{gateway_addresses, tell_callback};
use super::connection::Connection;
use super::decisions::Decision;
use super::shared::Shared;
use super::transport::{nanos, read_response, send};
use crate::addresses::names_brokers;
use crate::broker_time::BrokerTimes;
use crate::error::Closed;
use crate::fetch::FetchRequestInfo;
use crate::frame::FrameReader;
use crate::gateway::Route;
use crate::handlers::mutation::RecordedMutation;
use crate::handlers::request::answered_at_once;
use crate::handlers::{
    fetch, mutation, produce, request, sasl, Client, Reply, Verdict, FETCH, METADATA, PRODUCE,
    SASL_AUTHENTICATE, SASL_HANDSHAKE,
};
use crate::header::RequestHeader;
use crate::lock;

/// One request forwarded to the broker whose response the client has not had yet.
pub(super) struct Pending {
    pub(super) header: RequestHeader<'static>,
    pub(super) user: String,
    /// The request frame's size (a produce request's usage).
    pub(super) size: usize,
    pub(super) acks: i16,
    pub(super) fetch: Option<FetchRequestInfo>,
    /// The request's time so far: the proxy's (reading and checking it), and the estimate
    /// of the broker's once answered, for an API Kafka answers at once
    /// ([`answered_at_once`]).
    pub(super) handled: Duration,
    /// When the request's write to the broker began.
    pub(super) written: Instant,
    /// Whether it was written behind requests still in flight (a pipelined produce): its
    /// answer may wait for theirs.
    pub(super) behind: bool,
    pub(super) mutation: Option<Box<RecordedMutation>>,
    /// The response the proxy made itself (quota administration), and its body's offset.
    pub(super) local: Option<(BytesMut, usize)>,
}

impl Pending {
    /// Whose quotas the request is held to, on `channel`.
    fn client(&self, channel: u64) -> Client<'_> {
        Client {
            user: &self.user,
            client_id: self.header.client_id(),
            channel,
        }
    }

    /// Adds the estimate of the broker's handler time on an API Kafka answers at once
    /// ([`BrokerTimes::estimate`]) from its round trip: from the request written, or the
    /// responder free to read its answer when later, to the answer read. A request written
    /// behind others still in flight (pipelined produce requests) has no round trip of its
    /// own: its answer may have waited for theirs, and the time since the responder was
    /// free can be next to nothing, which would pull the kind's percentile and the path's
    /// floor down to it; it is charged its kind's estimate ([`BrokerTimes::charge`]).
    fn add_broker_time(
        &mut self,
        times: &Mutex<BrokerTimes>,
        response_size: usize,
        free: Instant,
        read: Instant,
    ) {
        if answered_at_once(self.header.api_key, self.acks) {
            let size = self.size.max(response_size);
            let mut times = lock(times);
            self.handled += if self.behind {
                times.charge(self.header.api_key, size)
            } else {
                let round_trip = read.saturating_duration_since(self.written.max(free));
                times.estimate(self.header.api_key, size, round_trip)
            };
        }
    }
}

/// What the reader hands the responder, in the order the broker answers.
pub(super) enum Work {
    /// A client's request: answer it.
    Answer(Pending),
    /// The proxy's own request on the connection (a Metadata request for a mutation
    /// request's partition counts, a quota administration asked of the cluster first):
    /// hand its response to the reader.
    Own {
        header: RequestHeader<'static>,
        reply: oneshot::Sender<BytesMut>,
    },
}

/// The responder: each forwarded request answered in turn, once the connection's mute (if
/// any) has ended; ends when the reader has and every forwarded request is answered.
pub(super) async fn respond(
    shared: &Arc<Shared>,
    route: &Route,
    connection: &Connection,
    upstream: OwnedReadHalf,
    mut client: OwnedWriteHalf,
    mut pending: mpsc::Receiver<Work>,
) -> Result<(), Closed> {
    let mut frames = FrameReader::new(upstream, shared.config.max_response_bytes);
    let path = route.managers.path();
    // When the responder was last free to read the broker's next answer: taken before it
    // waits for the next request, not after, so that its own wake-up (which may come
    // after the answer arrived) does not hide the broker's time.
    let mut free = Instant::now();
    while let Some(work) = pending.recv().await {
        let entry = match work {
            Work::Answer(entry) => entry,
            Work::Own { header, reply } => {
                let (response, _) = read_response(&shared.config, &mut frames, &header).await?;
                let _ = reply.send(response); // a reader gone has closed the connection
                free = Instant::now();
                continue;
            }
        };
        let produce = entry.header.api_key == PRODUCE;
        if produce && entry.acks == 0 {
            // No response (Kafka sends none for acks=0); a throttle still mutes.
            connection.wait_unmuted().await;
            let now = monotonic_ms();
            let who = entry.client(connection.channel);
            let (handled, size) = (nanos(entry.handled), entry.size);
            let verdict = produce::answer(&path, who, &entry.header, size, 0, None, handled, now)?;
            apply(shared, connection, &entry, &verdict, now);
        } else if let Some(recorded) = &entry.mutation {
            let response = if recorded.local() {
                None
            } else {
                Some(read_response(&shared.config, &mut frames, &entry.header).await?)
            };
            connection.wait_unmuted().await;
            answer_mutation(
                shared,
                route,
                &path,
                connection,
                &mut client,
                &entry,
                response,
            )
            .await?;
        } else {
            // Read before a pipelined produce's wait for its connection's mute, so that
            // the broker's time is not counted with the mute.
            let mut entry = entry;
            let response = match entry.local.take() {
                Some(response) => response,
                None => {
                    let response =
                        read_response(&shared.config, &mut frames, &entry.header).await?;
                    let read = Instant::now();
                    entry.add_broker_time(&route.broker_times, response.0.len(), free, read);
                    response
                }
            };
            connection.wait_unmuted().await;
            answer(shared, &path, connection, &mut client, entry, response).await?;
        }
        // before the reader may write the next request (answer_done gives it its turn)
        free = Instant::now();
        connection.answer_done(produce);
    }
    client.shutdown().await?;
    Ok(())
}

/// Answers a mutation request ([`mutation::answer`]) with the broker's response
/// (`None` when nothing was forwarded).
async fn answer_mutation(
    shared: &Shared,
    route: &Route,
    path: &RequestPath<'_>,
    connection: &Connection,
    client: &mut OwnedWriteHalf,
    entry: &Pending,
    response: Option<(BytesMut, usize)>,
) -> Result<(), Closed> {
    let resumed = Instant::now();
    let recorded = entry.mutation.as_ref().expect("a mutation request");
    let header = &entry.header;
    let now = monotonic_ms();
    let handled = nanos(entry.handled + resumed.elapsed());
    let frame = response.as_ref().map(|(frame, _)| &frame[..]);
    let who = entry.client(connection.channel);
    let mutation = route.managers.mutation();
    let verdict = mutation::answer(path, mutation, who, header, recorded, frame, handled, now)?;
    apply(shared, connection, entry, &verdict, now);
    let out = match (&verdict.reply, frame) {
        (Reply::Own(own), _) => &own[..],
        (_, Some(frame)) => frame,
        (_, None) => return Err(Closed::Client("a mutation answered by no one".to_owned())),
    };
    let entity = Some((entry.user.as_str(), header.client_id()));
    send(path, client, out, entity).await
}

/// Checks the quotas of one answered request (its API's handler) and sends the client
/// its response.
async fn answer(
    shared: &Arc<Shared>,
    path: &RequestPath<'_>,
    connection: &Connection,
    client: &mut OwnedWriteHalf,
    entry: Pending,
    response: (BytesMut, usize),
) -> Result<(), Closed> {
    let resumed = Instant::now();
    let (response, body_offset) = response;
    let header = &entry.header;
    let response = match &shared.routes {
        Some(routes) if names_brokers(header.api_key, header.api_version) => {
            gateway_addresses(shared, routes, response.freeze(), body_offset, header)?
        }
        _ => response.freeze(),
    };
    match header.api_key {
        SASL_HANDSHAKE => return send(path, client, &response, None).await,
        SASL_AUTHENTICATE => {
            sasl::authenticated(&mut lock(&connection.sasl), header, &response);
            return send(path, client, &response, None).await;
        }
        _ => {}
    }
    let handled = nanos(entry.handled + resumed.elapsed());
    let now = monotonic_ms();
    let who = entry.client(connection.channel);
    let verdict = match (
        header.api_key,
        entry.fetch.filter(FetchRequestInfo::is_consumer),
    ) {
        (PRODUCE, _) => {
            let (size, acks) = (entry.size, entry.acks);
            produce::answer(path, who, header, size, acks, Some(&response), handled, now)?
        }
        (FETCH, Some(info)) => fetch::answer(
            path,
            who,
            header,
            &info,
            &response,
            body_offset,
            handled,
            now,
        )?,
        _ => request::answer(path, who, header, &response, handled, now)?,
    };
    apply(shared, connection, &entry, &verdict, now);
    if header.api_key == METADATA {
        tell_callback(shared, &response[body_offset..], header.api_version);
    }
    let out = match &verdict.reply {
        Reply::Own(own) => &own[..],
        Reply::AsIs | Reply::Nothing => &response[..],
    };
    let entity = Some((entry.user.as_str(), header.client_id()));
    send(path, client, out, entity).await
}

/// Applies a handler's verdict on `entry` before its reply goes: the connection muted
/// until its throttle ends, the decision kept for the owner (when it keeps them).
fn apply(shared: &Shared, connection: &Connection, entry: &Pending, verdict: &Verdict, now: i64) {
    if let Some(until) = verdict.outcome.muted_until_ms {
        connection.mute(until);
    }
    if !shared.decisions.kept() {
        return;
    }
    let header = &entry.header;
    shared.decisions.keep(Decision {
        at_ms: now,
        user: entry.user.clone(),
        client_id: header.client_id().to_owned(),
        api_key: header.api_key,
        api_version: header.api_version,
        correlation_id: header.correlation_id,
        follower: entry.fetch.is_some_and(|f| !f.is_consumer()),
        size: verdict.size,
        thread_ns: verdict.thread_ns,
        acks: entry.acks,
        outcome: verdict.outcome,
        mutation_throttle_ms: verdict.mutation_throttle_ms,
        peer: connection.peer,
        broker: connection.broker.load(Ordering::Relaxed),
    });
}
