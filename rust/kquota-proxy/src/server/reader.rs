//! The reader: each request read from the client, handed to its API's handler (a fetch's
//! `max_bytes` capped, a mutation's partitions recorded, the SASL exchange followed,
//! quota administration authorized and answered) and forwarded to the broker once its
//! turn comes; and the proxy's own requests on the connection.

use std::sync::atomic::Ordering;
use std::time::Instant;

use bytes::BytesMut;
use kquota_core::monotonic_ms;
use tokio::net::tcp::{OwnedReadHalf, OwnedWriteHalf};
use tokio::sync::{mpsc, oneshot};

use super::connection::{Connection, Stamped};
use super::responder::{Pending, Work};
use super::shared::Shared;
use super::transport::write_frame;
use crate::admin::is_admin_api;
use crate::error::{Closed, FrameError};
use crate::fetch::{cap_max_bytes, read_fetch_request};
use crate::frame::FrameReader;
use crate::gateway::Route;
use crate::handlers::admin::{self, Access};
use crate::handlers::{self, FETCH, PRODUCE, SASL_AUTHENTICATE, SASL_HANDSHAKE};
use crate::header::{parse_request_header, parse_response_header, produce_acks, RequestHeader};
use crate::lock;
use crate::mutation::{
    metadata_request, mutation_api, partition_counts, MutationRequest, PartitionCounts,
};

/// The reader: each request read, checked and forwarded once its turn comes; ends at the
/// client's end of stream or when the proxy shuts down.
pub(super) async fn read_requests(
    shared: &Shared,
    route: &Route,
    connection: &Connection,
    client: OwnedReadHalf,
    mut upstream: OwnedWriteHalf,
    forwarded: mpsc::Sender<Work>,
) -> Result<(), Closed> {
    let client = Stamped {
        inner: client,
        connection,
    };
    let mut frames = FrameReader::new(client, shared.config.max_request_bytes);
    let mut closing = shared.closing.clone();
    let path = route.managers.path();
    loop {
        // Waiting for a request, a mute's end or a turn: a shutdown drops the connection.
        let next = async {
            connection.wait_unmuted().await;
            frames.read_frame().await
        };
        let frame = tokio::select! {
            frame = next => frame,
            _ = closing.wait_for(|closing| *closing) => break,
        };
        let mut frame = match frame {
            Ok(Some(frame)) => frame,
            Ok(None) => break,
            Err(FrameError::Io(err)) => return Err(err.into()),
            Err(err) => return Err(Closed::Client(format!("request: {err}"))),
        };
        connection
            .bytes_framed
            .fetch_add(4 + frame.len() as u64, Ordering::AcqRel);
        let started = Instant::now();
        handlers::request::check_version(&frame)?;
        let header = parse_request_header(&frame)
            .map_err(Closed::request)?
            .into_owned();
        {
            let mut client_id = lock(&connection.client_id);
            if client_id.as_str() != header.client_id() {
                header.client_id().clone_into(&mut client_id);
            }
        }
        let produce = header.api_key == PRODUCE;
        let mut handled = started.elapsed();
        let behind = tokio::select! {
            behind = connection.wait_turn(produce) => behind,
            _ = closing.wait_for(|closing| *closing) => break,
        };
        let mut started = Instant::now();
        let user = connection.user();
        let mut acks = -1;
        let mut fetch = None;
        let mut mutation = None;
        let mut local = None;
        match header.api_key {
            PRODUCE => acks = produce_acks(&frame, &header).map_err(Closed::request)?,
            FETCH => {
                let info = read_fetch_request(&frame, &header).map_err(Closed::request)?;
                let (client_id, now) = (header.client_id(), monotonic_ms());
                if let Some(cap) = handlers::fetch::max_bytes(&path, &user, client_id, &info, now)?
                {
                    cap_max_bytes(&mut frame, &info, cap);
                }
                fetch = Some(info);
            }
            SASL_HANDSHAKE | SASL_AUTHENTICATE => {
                let mut sasl = lock(&connection.sasl);
                if handlers::sasl::request(&mut sasl, &header, &frame)? {
                    (shared.log)(&format!(
                        "connection from {}: SASL {} principal unknown to the proxy; its quotas apply as {}",
                        connection.peer,
                        sasl.mechanism().unwrap_or(""),
                        crate::sasl::ANONYMOUS
                    ));
                }
            }
            key if is_admin_api(key) && shared.config.admin.is_some() => {
                handled += started.elapsed();
                let refused = authorize_admin(
                    shared,
                    connection,
                    &header,
                    &frame,
                    &mut upstream,
                    &forwarded,
                )
                .await?;
                started = Instant::now();
                local = Some(match refused {
                    Some(refusal) => refusal,
                    None => administer(shared, &frame, &header).await?,
                });
            }
            key => {
                if let Some(manager) = route
                    .managers
                    .mutation()
                    .filter(|m| mutation_api(key).is_some() && m.enabled())
                {
                    handled += started.elapsed();
                    let request =
                        MutationRequest::parse(&frame, &header).map_err(Closed::request)?;
                    let counts =
                        own_metadata(connection, &header, &request, &mut upstream, &forwarded)
                            .await?;
                    started = Instant::now();
                    let partitions = shared.config.default_num_partitions;
                    let recorded = handlers::mutation::record(
                        manager,
                        &user,
                        &header,
                        request,
                        &counts,
                        partitions,
                        monotonic_ms(),
                    )?;
                    if let Some(forwarded) = recorded.forwarded()? {
                        frame = forwarded;
                    }
                    mutation = Some(Box::new(recorded));
                }
            }
        }
        handled += started.elapsed();
        // Taken before the write: the broker may answer before this thread runs again.
        let written = Instant::now();
        if local.is_none() && !mutation.as_ref().is_some_and(|m| m.local()) {
            write_frame(&mut upstream, &frame).await?;
        }
        let entry = Pending {
            header,
            user,
            size: frame.len(),
            acks,
            fetch,
            handled,
            written,
            behind,
            mutation,
            local,
        };
        if forwarded.send(Work::Answer(entry)).await.is_err() {
            break; // the responder ended: its error closes the connection
        }
    }
    Ok(())
}

/// Answers a DescribeClientQuotas or AlterClientQuotas request with the proxy's own
/// configuration, on a blocking thread (the store may take its time); its time is the
/// proxy's, charged to the request quota as a broker charges its handler's.
async fn administer(
    shared: &Shared,
    frame: &BytesMut,
    header: &RequestHeader<'static>,
) -> Result<(BytesMut, usize), Closed> {
    let admin = shared.config.admin.clone().expect("an administered proxy");
    let (request, header) = (frame.clone(), header.clone());
    let answered = tokio::task::spawn_blocking(move || {
        let response = crate::admin::answer(&*admin.0, &request, &header)?;
        let at = parse_response_header(&response, header.response_header_version())?;
        Ok::<_, crate::HeaderError>((response, at.body_offset))
    })
    .await
    .map_err(|err| Closed::Client(format!("quota administration failed: {err}")))?;
    answered.map_err(|err| Closed::Client(format!("request: {err}")))
}

/// Whether the connection may have its quota administration request answered from the
/// store ([`handlers::admin`]): `None` when it may, else the refusal to answer with
/// (Kafka's, or the cluster's own), logged.
async fn authorize_admin(
    shared: &Shared,
    connection: &Connection,
    header: &RequestHeader<'_>,
    frame: &[u8],
    upstream: &mut OwnedWriteHalf,
    forwarded: &mpsc::Sender<Work>,
) -> Result<Option<(BytesMut, usize)>, Closed> {
    let user = connection.user();
    let refused = |why: &str| {
        (shared.log)(&format!(
            "{} refused to {} (principal User:{user}): {why}",
            if header.api_key == crate::admin::ALTER_CLIENT_QUOTAS {
                "AlterClientQuotas"
            } else {
                "DescribeClientQuotas"
            },
            connection.who(),
        ));
    };
    let own_id = || connection.own_correlation_id();
    let probe = match admin::authorize(&shared.config.admin_access, &user, header, frame, own_id)? {
        Access::Answer => return Ok(None),
        Access::Refuse(refusal) => {
            refused("not a listed principal");
            return Ok(Some(refusal));
        }
        Access::AskCluster(probe) => probe,
    };
    let response = own_request(probe, upstream, forwarded).await?;
    let refusal = admin::cluster_says(response, header)?;
    if refusal.is_some() {
        refused("the cluster refuses it");
    }
    Ok(refusal)
}

/// Sends the proxy's own `request` frame to the broker on the connection (idle: every
/// earlier request is answered) and waits for its response, which the responder reads in
/// turn and hands back.
async fn own_request(
    request: BytesMut,
    upstream: &mut OwnedWriteHalf,
    forwarded: &mpsc::Sender<Work>,
) -> Result<BytesMut, Closed> {
    let header = parse_request_header(&request)
        .map_err(|err| Closed::Client(format!("the proxy's own request: {err}")))?
        .into_owned();
    write_frame(upstream, &request).await?;
    let gone = || Closed::Upstream("the upstream closed the connection".to_owned());
    let (reply, answer) = oneshot::channel();
    forwarded
        .send(Work::Own { header, reply })
        .await
        .map_err(|_| gone())?;
    answer.await.map_err(|_| gone())
}

/// The partitions the topics of a mutation request have now, from a Metadata request
/// the proxy sends the broker first on the connection.
async fn own_metadata(
    connection: &Connection,
    header: &RequestHeader<'_>,
    request: &MutationRequest,
    upstream: &mut OwnedWriteHalf,
    forwarded: &mpsc::Sender<Work>,
) -> Result<PartitionCounts, Closed> {
    let names = request.names();
    let metadata = metadata_request(
        connection.own_correlation_id(),
        header.client_id(),
        names.as_deref(),
    );
    let response = own_request(metadata, upstream, forwarded).await?;
    partition_counts(&response)
        .map_err(|err| Closed::Upstream(format!("the proxy's Metadata request: {err}")))
}
