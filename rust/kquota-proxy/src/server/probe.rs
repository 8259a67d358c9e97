//! The proxy's own cheap request to each broker its clients use, every
//! [`PROBE_INTERVAL`]: its round trips keep the floor of the broker's path current for the
//! estimate of the broker's handler time (see `broker_time`).

use std::sync::Arc;
use std::time::{Duration, Instant};

use tokio::net::tcp::{OwnedReadHalf, OwnedWriteHalf};

use super::shared::Shared;
use super::transport::{connect, read_response, write_frame};
use crate::broker_time::{probe_request, PROBE_IDLE, PROBE_INTERVAL};
use crate::error::Closed;
use crate::frame::FrameReader;
use crate::gateway::Route;
use crate::header::parse_request_header;
use crate::lock;

/// How long a probe may wait for its answer before its connection is dropped.
const PROBE_TIMEOUT: Duration = Duration::from_secs(5);

/// The probe's connection to the broker.
type Probe = (FrameReader<OwnedReadHalf>, OwnedWriteHalf);

/// Probes `route`'s broker while its clients use it, until the proxy closes. A probe that
/// fails drops its connection and waits [`PROBE_IDLE`] before the next, so that a broker
/// that is down or does not answer it is not reconnected to ten times a second.
pub(super) async fn probe(shared: Arc<Shared>, route: Arc<Route>) {
    let mut closing = shared.closing.clone();
    let mut connection: Option<Probe> = None;
    let mut correlation_id = 0i32;
    let mut wait = PROBE_INTERVAL;
    loop {
        tokio::select! {
            () = tokio::time::sleep(wait) => {}
            _ = closing.wait_for(|closing| *closing) => return,
        }
        wait = PROBE_INTERVAL;
        if !lock(&route.broker_times).in_use(Instant::now()) {
            connection = None; // idle: the connection closes
            continue;
        }
        correlation_id = correlation_id.wrapping_add(1);
        let answered = tokio::time::timeout(
            PROBE_TIMEOUT,
            probe_once(&shared, &route, &mut connection, correlation_id),
        )
        .await;
        match answered {
            Ok(Ok((size, round_trip))) => lock(&route.broker_times).probed(size, round_trip),
            Ok(Err(_)) | Err(_) => {
                connection = None;
                wait = PROBE_IDLE;
            }
        }
    }
}

/// One probe on `connection` (opened first when there is none): the response's size and
/// the round trip, from the request written to the response read, as a client's.
async fn probe_once(
    shared: &Shared,
    route: &Route,
    connection: &mut Option<Probe>,
    correlation_id: i32,
) -> Result<(usize, Duration), Closed> {
    if connection.is_none() {
        let (stream, _) = connect(&shared.config, &route.upstream()).await?;
        stream.set_nodelay(true)?;
        let (read, write) = stream.into_split();
        let frames = FrameReader::new(read, shared.config.max_response_bytes);
        *connection = Some((frames, write));
    }
    let Some((frames, write)) = connection.as_mut() else {
        unreachable!("opened above");
    };
    let request = probe_request(correlation_id);
    let header =
        parse_request_header(&request).map_err(|err| Closed::Upstream(format!("probe: {err}")))?;
    // Taken before the write, as a client's: the broker may answer before this task runs
    // again, and a round trip timed from after the write would then be next to nothing.
    let written = Instant::now();
    write_frame(write, &request).await?;
    let (response, _) = read_response(&shared.config, frames, &header).await?;
    Ok((response.len(), written.elapsed()))
}
