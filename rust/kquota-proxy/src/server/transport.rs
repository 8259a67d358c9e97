//! The transport: connecting upstream, responses read and checked against their requests,
//! frames written (a response's write time charged to the request quota).

use std::io;
use std::time::{Duration, Instant};

use bytes::BytesMut;
use kquota_core::{monotonic_ms, QuotaType, RequestPath};
use tokio::io::AsyncWriteExt;
use tokio::net::tcp::{OwnedReadHalf, OwnedWriteHalf};
use tokio::net::TcpStream;

use super::ProxyConfig;
use crate::error::{Closed, FrameError};
use crate::frame::FrameReader;
use crate::header::{parse_response_header, RequestHeader};

/// A connection to `to`: `host:port`, or several comma-separated (a bootstrap list),
/// tried in turn until one answers; with the one that did.
pub(super) async fn connect<'a>(
    config: &ProxyConfig,
    to: &'a str,
) -> Result<(TcpStream, &'a str), Closed> {
    let mut reasons = Vec::new();
    for address in to.split(',').map(str::trim).filter(|a| !a.is_empty()) {
        match tokio::time::timeout(config.connect_timeout, TcpStream::connect(address)).await {
            Ok(Ok(stream)) => return Ok((stream, address)),
            Ok(Err(err)) => reasons.push(format!("{address}: {err}")),
            Err(_) => reasons.push(format!(
                "{address}: no connection within {:?}",
                config.connect_timeout
            )),
        }
    }
    Err(Closed::Upstream(format!(
        "upstream {to} unreachable: {}",
        reasons.join("; ")
    )))
}

/// The broker's response to the request of `header`, and where its body starts.
pub(super) async fn read_response(
    config: &ProxyConfig,
    frames: &mut FrameReader<OwnedReadHalf>,
    header: &RequestHeader<'_>,
) -> Result<(BytesMut, usize), Closed> {
    let frame = match tokio::time::timeout(config.upstream_timeout, frames.read_frame()).await {
        Err(_) => {
            return Err(Closed::Upstream(format!(
                "no response from the upstream within {:?}",
                config.upstream_timeout
            )))
        }
        Ok(Ok(Some(frame))) => frame,
        Ok(Ok(None)) => {
            return Err(Closed::Upstream(
                "the upstream closed the connection".to_owned(),
            ))
        }
        Ok(Err(FrameError::Io(err))) => return Err(err.into()),
        Ok(Err(err)) => return Err(Closed::Upstream(format!("response: {err}"))),
    };
    let parsed = parse_response_header(&frame, header.response_header_version())
        .map_err(|err| Closed::Upstream(format!("response: {err}")))?;
    if parsed.correlation_id != header.correlation_id {
        return Err(Closed::Upstream(format!(
            "upstream answered correlation id {} to request {} (API key {} v{})",
            parsed.correlation_id, header.correlation_id, header.api_key, header.api_version
        )));
    }
    Ok((frame, parsed.body_offset))
}

/// Writes a response to the client; the time the write took goes to `entity`'s request
/// quota without a check (Kafka's `recordNoThrottle` of the network thread's time).
pub(super) async fn send(
    path: &RequestPath<'_>,
    client: &mut OwnedWriteHalf,
    response: &[u8],
    entity: Option<(&str, &str)>,
) -> Result<(), Closed> {
    let started = Instant::now();
    write_frame(client, response).await?;
    if let Some((user, client_id)) = entity {
        path.manager(QuotaType::Request).record_no_throttle(
            user,
            client_id,
            nanos(started.elapsed()),
            monotonic_ms(),
        )?;
    }
    Ok(())
}

/// Writes `frame` with its size prefix, in one write when the socket takes it.
pub(super) async fn write_frame(to: &mut OwnedWriteHalf, frame: &[u8]) -> io::Result<()> {
    let prefix = (frame.len() as u32).to_be_bytes();
    let mut bufs = [io::IoSlice::new(&prefix), io::IoSlice::new(frame)];
    let mut slices: &mut [io::IoSlice<'_>] = &mut bufs;
    let mut left = prefix.len() + frame.len();
    while left > 0 {
        let n = to.write_vectored(slices).await?;
        if n == 0 {
            return Err(io::ErrorKind::WriteZero.into());
        }
        left -= n;
        io::IoSlice::advance_slices(&mut slices, n);
    }
    Ok(())
}

pub(super) fn nanos(d: Duration) -> f64 {
    d.as_nanos() as f64
}
