//! Relays between a client and its broker.
//!
//! [`plain_relay`] copies bytes both ways and reads nothing: the floor the proxy's
//! throughput is measured against. [`framed_relay`] reads every request and response
//! frame, decodes its header and matches each response to its request by correlation id,
//! which is what the quota decisions are built on.

use std::collections::VecDeque;
use std::io;
use std::net::SocketAddr;

use bytes::BytesMut;

use tokio::io::{AsyncRead, AsyncWrite, AsyncWriteExt};
use tokio::net::TcpStream;
use tokio::sync::mpsc;

use kquota_proxy::{
    parse_request_header, parse_response_header, produce_acks, FrameError, FrameReader,
};

/// Copies bytes both ways between `client` and a new connection to `upstream` until both
/// sides close; returns the bytes copied (client to broker, broker to client).
pub async fn plain_relay(mut client: TcpStream, upstream: SocketAddr) -> io::Result<(u64, u64)> {
    let mut broker = TcpStream::connect(upstream).await?;
    client.set_nodelay(true)?;
    broker.set_nodelay(true)?;
    tokio::io::copy_bidirectional(&mut client, &mut broker).await
}

/// Why a framed relay closed its connection.
#[derive(Debug)]
pub enum RelayError {
    /// A frame from the client could not be read or its header decoded.
    Client(String),
    /// A frame from the broker could not be read, or it answers no request in flight.
    Broker(String),
    /// A socket failed.
    Io(io::Error),
}

impl std::fmt::Display for RelayError {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        match self {
            RelayError::Client(msg) => write!(f, "client: {msg}"),
            RelayError::Broker(msg) => write!(f, "broker: {msg}"),
            RelayError::Io(err) => write!(f, "socket error: {err}"),
        }
    }
}

impl std::error::Error for RelayError {}

impl From<io::Error> for RelayError {
    fn from(err: io::Error) -> Self {
        RelayError::Io(err)
    }
}

/// What the response side needs to know of a request in flight.
#[derive(Debug, Clone, Copy)]
struct InFlight {
    correlation_id: i32,
    response_header_version: i16,
}

const PRODUCE: i16 = 0;

/// Most requests in flight on one connection before the relay stops reading the client
/// (Kafka's clients keep 5 by default; the bound keeps a connection's memory bounded).
pub const MAX_IN_FLIGHT: usize = 128;

/// Relays `client` to a new connection to `upstream` frame by frame: each request's header
/// is decoded, and each response must answer the oldest request in flight (Kafka answers
/// a connection's requests in order). Returns the bytes relayed each way, frames' size
/// prefixes included. A frame over `max_frame_bytes`, a bad header or an unmatched
/// response closes the connection with an error.
pub async fn framed_relay(
    client: TcpStream,
    upstream: SocketAddr,
    max_frame_bytes: usize,
) -> Result<(u64, u64), RelayError> {
    let broker = TcpStream::connect(upstream).await?;
    client.set_nodelay(true)?;
    broker.set_nodelay(true)?;
    let (client_read, client_write) = client.into_split();
    let (broker_read, broker_write) = broker.into_split();
    // The request side tells the response side what it sent, in order; the channel's
    // bound is the in-flight bound.
    let (sent, pending) = mpsc::channel(MAX_IN_FLIGHT);
    let requests = relay_requests(client_read, broker_write, sent, max_frame_bytes);
    let responses = relay_responses(broker_read, client_write, pending, max_frame_bytes);
    let (up, down) = tokio::try_join!(requests, responses)?;
    Ok((up, down))
}

async fn relay_requests<R, W>(
    from: R,
    mut to: W,
    sent: mpsc::Sender<InFlight>,
    max: usize,
) -> Result<u64, RelayError>
where
    R: AsyncRead + Unpin,
    W: AsyncWrite + Unpin,
{
    let mut frames = FrameReader::new(from, max);
    let mut bytes = 0u64;
    while let Some(frame) = next_frame(&mut frames, RelayError::Client).await? {
        let header = parse_request_header(&frame).map_err(|e| RelayError::Client(e.to_string()))?;
        let in_flight = InFlight {
            correlation_id: header.correlation_id,
            response_header_version: header.response_header_version(),
        };
        let answered = header.api_key != PRODUCE
            || produce_acks(&frame, &header).map_err(|e| RelayError::Client(e.to_string()))? != 0;
        if answered && sent.send(in_flight).await.is_err() {
            break; // the response side stopped: the broker closed
        }
        bytes += write_frame(&mut to, &frame).await?;
    }
    to.shutdown().await?;
    Ok(bytes)
}

async fn relay_responses<R, W>(
    from: R,
    mut to: W,
    mut pending: mpsc::Receiver<InFlight>,
    max: usize,
) -> Result<u64, RelayError>
where
    R: AsyncRead + Unpin,
    W: AsyncWrite + Unpin,
{
    let mut frames = FrameReader::new(from, max);
    let mut bytes = 0u64;
    let mut waiting: VecDeque<InFlight> = VecDeque::new();
    while let Some(frame) = next_frame(&mut frames, RelayError::Broker).await? {
        while let Ok(next) = pending.try_recv() {
            waiting.push_back(next);
        }
        let request = match waiting.pop_front() {
            Some(request) => request,
            // the request may still be on its way from the other task
            None => pending.recv().await.ok_or_else(|| {
                RelayError::Broker("a response with no request in flight".to_owned())
            })?,
        };
        let header = parse_response_header(&frame, request.response_header_version)
            .map_err(|e| RelayError::Broker(e.to_string()))?;
        if header.correlation_id != request.correlation_id {
            return Err(RelayError::Broker(format!(
                "response to correlation id {} where {} was expected (Kafka answers in order)",
                header.correlation_id, request.correlation_id
            )));
        }
        bytes += write_frame(&mut to, &frame).await?;
    }
    to.shutdown().await?;
    Ok(bytes)
}

/// The next frame of one side (`None` once it closed between frames); a bad frame is the
/// error `side` makes of its message.
async fn next_frame<R: AsyncRead + Unpin>(
    frames: &mut FrameReader<R>,
    side: fn(String) -> RelayError,
) -> Result<Option<BytesMut>, RelayError> {
    match frames.read_frame().await {
        Ok(frame) => Ok(frame),
        Err(FrameError::Io(err)) => Err(err.into()),
        Err(err) => Err(side(err.to_string())),
    }
}

/// Writes `frame` with its size prefix; returns the bytes written.
async fn write_frame<W: AsyncWrite + Unpin>(to: &mut W, frame: &[u8]) -> Result<u64, RelayError> {
    to.write_all(&(frame.len() as u32).to_be_bytes()).await?;
    to.write_all(frame).await?;
    Ok(4 + frame.len() as u64)
}
