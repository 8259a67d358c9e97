//! One client connection's state, shared by its reader and responder: its mute, whose turn
//! it is to go to the broker, its SASL exchange and client id, and its idleness.

use std::io;
use std::net::SocketAddr;
use std::sync::atomic::{AtomicI32, AtomicI64, AtomicU64, Ordering};
use std::sync::Mutex;
use std::time::Duration;

use kquota_core::monotonic_ms;
use tokio::net::tcp::OwnedReadHalf;
use tokio::sync::Notify;

use super::PIPELINE_DEPTH;
use crate::error::Closed;
use crate::lock;
use crate::sasl::SaslExchange;

/// Where the correlation ids of the proxy's own requests start.
const OWN_CORRELATION_IDS: i32 = 0x7F00_0000;

/// The requests of a connection forwarded and not yet answered, and how many of them are
/// produce requests: which request may go to the broker now.
#[derive(Default)]
struct InFlight {
    requests: usize,
    produces: usize,
}

/// One client connection's state, shared by its two halves.
pub(super) struct Connection {
    pub(super) channel: u64,
    pub(super) peer: SocketAddr,
    /// The end of the connection's mute on the core's clock (0: never muted).
    muted_until: AtomicI64,
    /// When bytes last came from the client or went to it, on the core's clock.
    last_activity: AtomicI64,
    /// Bytes read from the client, and those of them that made whole frames.
    bytes_in: AtomicU64,
    pub(super) bytes_framed: AtomicU64,
    in_flight: Mutex<InFlight>,
    answered: Notify,
    pub(super) sasl: Mutex<SaslExchange>,
    pub(super) client_id: Mutex<String>,
    own_requests: AtomicI32,
    /// The node id of the route whose quotas apply (see [`super::Decision::broker`]).
    pub(super) broker: AtomicI32,
}

impl Connection {
    pub(super) fn new(channel: u64, peer: SocketAddr, broker: i32) -> Self {
        Connection {
            channel,
            peer,
            muted_until: AtomicI64::new(0),
            last_activity: AtomicI64::new(monotonic_ms()),
            bytes_in: AtomicU64::new(0),
            bytes_framed: AtomicU64::new(0),
            in_flight: Mutex::new(InFlight::default()),
            answered: Notify::new(),
            sasl: Mutex::new(SaslExchange::default()),
            client_id: Mutex::new(String::new()),
            own_requests: AtomicI32::new(0),
            broker: AtomicI32::new(broker),
        }
    }

    pub(super) fn user(&self) -> String {
        lock(&self.sasl).user().to_owned()
    }

    pub(super) fn who(&self) -> String {
        let client_id = lock(&self.client_id);
        if client_id.is_empty() {
            self.peer.to_string()
        } else {
            format!("{} (client id {:?})", self.peer, *client_id)
        }
    }

    pub(super) fn mute(&self, until: i64) {
        self.muted_until.fetch_max(until, Ordering::AcqRel);
    }

    pub(super) fn active(&self) {
        self.last_activity
            .fetch_max(monotonic_ms(), Ordering::AcqRel);
    }

    /// Closes the connection (by returning) once it has been idle for `max_idle`:
    /// nothing read or written, no request at the broker, no mute running. Kafka's
    /// `connections.max.idle.ms`.
    pub(super) async fn expire_idle(&self, max_idle: Duration) -> Closed {
        let max = i64::try_from(max_idle.as_millis()).unwrap_or(i64::MAX);
        loop {
            let now = monotonic_ms();
            let due = self
                .last_activity
                .load(Ordering::Acquire)
                .saturating_add(max);
            if now >= due {
                let busy = lock(&self.in_flight).requests > 0
                    || self.muted_until.load(Ordering::Acquire) > now;
                if !busy {
                    // framed first: it never passes bytes_in, so the difference cannot go
                    // below zero however a read interleaves
                    let framed = self.bytes_framed.load(Ordering::Acquire);
                    let unfinished = self.bytes_in.load(Ordering::Acquire) - framed;
                    return Closed::Client(if unfinished > 0 {
                        format!(
                            "idle for {max} ms (connections.max.idle.ms) in the middle of a \
                             request, {unfinished} bytes of it read"
                        )
                    } else {
                        format!("idle for {max} ms (connections.max.idle.ms)")
                    });
                }
                self.active(); // waiting on the broker or a mute is not idleness
                continue;
            }
            tokio::time::sleep(Duration::from_millis((due - now) as u64)).await;
        }
    }

    pub(super) async fn wait_unmuted(&self) {
        loop {
            let left = self.muted_until.load(Ordering::Acquire) - monotonic_ms();
            if left <= 0 {
                return;
            }
            tokio::time::sleep(Duration::from_millis(left as u64)).await;
        }
    }

    /// Waits until a request may go: not muted, and every earlier request answered, or (a
    /// produce request) only produce requests in flight, fewer than [`PIPELINE_DEPTH`].
    /// Returns whether it goes behind requests still in flight (a pipelined produce).
    pub(super) async fn wait_turn(&self, produce: bool) -> bool {
        loop {
            self.wait_unmuted().await;
            {
                let mut flight = lock(&self.in_flight);
                let free = flight.requests == 0
                    || (produce
                        && flight.produces == flight.requests
                        && flight.requests < PIPELINE_DEPTH);
                let muted = self.muted_until.load(Ordering::Acquire) > monotonic_ms();
                if free && !muted {
                    let behind = flight.requests > 0;
                    flight.requests += 1;
                    flight.produces += usize::from(produce);
                    return behind;
                }
            }
            self.answered.notified().await;
        }
    }

    pub(super) fn answer_done(&self, produce: bool) {
        self.active();
        {
            let mut flight = lock(&self.in_flight);
            flight.requests -= 1;
            flight.produces -= usize::from(produce);
        }
        // A permit is kept when the reader is not waiting yet: no wake-up is lost.
        self.answered.notify_one();
    }
}

/// A connection's read half that notes, for [`Connection::expire_idle`], when and how
/// many bytes came.
pub(super) struct Stamped<'a> {
    pub(super) inner: OwnedReadHalf,
    pub(super) connection: &'a Connection,
}

impl tokio::io::AsyncRead for Stamped<'_> {
    fn poll_read(
        mut self: std::pin::Pin<&mut Self>,
        cx: &mut std::task::Context<'_>,
        buf: &mut tokio::io::ReadBuf<'_>,
    ) -> std::task::Poll<io::Result<()>> {
        let before = buf.filled().len();
        let polled = std::pin::Pin::new(&mut self.inner).poll_read(cx, buf);
        let read = buf.filled().len() - before;
        if read > 0 {
            self.connection
                .bytes_in
                .fetch_add(read as u64, Ordering::AcqRel);
            self.connection.active();
        }
        polled
    }
}

impl Connection {
    /// A correlation id for the proxy's own next request on the connection.
    pub(super) fn own_correlation_id(&self) -> i32 {
        OWN_CORRELATION_IDS | (self.own_requests.fetch_add(1, Ordering::Relaxed) & 0xFF_FFFF)
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn connection() -> Connection {
        Connection::new(7, "127.0.0.1:5000".parse().unwrap(), -1)
    }

    /// Whether `wait_turn` lets the request go at once (polled once, no waiting).
    async fn goes_now(c: &Connection, produce: bool) -> Option<bool> {
        tokio::time::timeout(Duration::ZERO, c.wait_turn(produce))
            .await
            .ok()
    }

    #[tokio::test]
    async fn a_request_waits_for_the_one_before_unless_both_are_produce_requests() {
        let c = connection();
        assert_eq!(
            goes_now(&c, false).await,
            Some(false),
            "the first goes, behind none"
        );
        assert_eq!(
            goes_now(&c, false).await,
            None,
            "the next waits for its answer"
        );
        assert_eq!(goes_now(&c, true).await, None, "so does a produce request");
        c.answer_done(false);
        assert_eq!(goes_now(&c, true).await, Some(false));
        // produce requests pipeline behind produce requests, up to the depth
        for _ in 1..PIPELINE_DEPTH {
            assert_eq!(goes_now(&c, true).await, Some(true), "behind one in flight");
        }
        assert_eq!(goes_now(&c, true).await, None, "the pipeline is full");
        assert_eq!(
            goes_now(&c, false).await,
            None,
            "other requests wait for every answer"
        );
        for _ in 0..PIPELINE_DEPTH {
            c.answer_done(true);
        }
        assert_eq!(goes_now(&c, false).await, Some(false));
    }

    #[tokio::test]
    async fn a_muted_connection_sends_nothing_and_its_mute_only_grows() {
        let c = connection();
        let later = monotonic_ms() + 60_000;
        c.mute(later);
        c.mute(later - 30_000);
        assert_eq!(c.muted_until.load(Ordering::Acquire), later);
        assert_eq!(goes_now(&c, false).await, None);
        assert_eq!(goes_now(&c, true).await, None);
        let passed = connection();
        passed.mute(monotonic_ms() - 1);
        assert_eq!(
            goes_now(&passed, false).await,
            Some(false),
            "a mute that ended"
        );
    }

    #[tokio::test]
    async fn an_idle_connection_is_closed_saying_whether_a_request_was_cut() {
        let c = connection();
        let Closed::Client(why) = c.expire_idle(Duration::ZERO).await else {
            panic!("the client's side closes")
        };
        assert_eq!(why, "idle for 0 ms (connections.max.idle.ms)");
        c.bytes_in.fetch_add(10, Ordering::AcqRel);
        c.bytes_framed.fetch_add(4, Ordering::AcqRel);
        let Closed::Client(why) = c.expire_idle(Duration::ZERO).await else {
            panic!("the client's side closes")
        };
        assert!(
            why.ends_with("in the middle of a request, 6 bytes of it read"),
            "{why}"
        );
    }

    #[tokio::test]
    async fn a_connection_waiting_on_the_broker_is_not_idle() {
        let c = connection();
        assert_eq!(goes_now(&c, false).await, Some(false));
        // 1 ms: the wait that counts as activity moves the deadline past now
        let idle = Duration::from_millis(1);
        let expired = tokio::time::timeout(Duration::ZERO, c.expire_idle(idle)).await;
        assert!(
            expired.is_err(),
            "a request at the broker keeps the connection open"
        );
    }

    #[test]
    fn own_requests_have_correlation_ids_no_client_uses_first() {
        let c = connection();
        assert_eq!(c.own_correlation_id(), OWN_CORRELATION_IDS);
        assert_eq!(c.own_correlation_id(), OWN_CORRELATION_IDS + 1);
        c.own_requests.store(0xFF_FFFF, Ordering::Relaxed);
        assert_eq!(c.own_correlation_id(), OWN_CORRELATION_IDS | 0xFF_FFFF);
        assert_eq!(
            c.own_correlation_id(),
            OWN_CORRELATION_IDS,
            "wraps within its range"
        );
    }

    #[test]
    fn a_connection_is_named_by_its_peer_and_client_id() {
        let c = connection();
        assert_eq!(c.who(), "127.0.0.1:5000");
        *lock(&c.client_id) = "app".to_owned();
        assert_eq!(c.who(), "127.0.0.1:5000 (client id \"app\")");
    }
}
