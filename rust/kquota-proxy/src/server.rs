//! The proxy: Kafka's client quotas applied to every connection relayed to one broker.
//!
//! One tokio task per client connection, each with its own connection to the broker, and in
//! it two halves: the reader (client to broker) and the responder (broker to client). As in
//! a Kafka broker's socket server, a connection's requests are answered one at a time and
//! in order: the responder takes each response in turn, checks the quotas at that moment
//! (the core's [`RequestPath`]), writes the applied throttle into the response and sends
//! it at once (KIP-219); a throttle then mutes the connection, and neither half handles
//! anything more of it until the mute ends.
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
//! Per API: Produce records its size (the request frame) on the produce quota and the
//! proxy's handling time on the request quota (not for `acks=0`, which gets no response
//! but is still muted when throttled); a consumer's Fetch has `max_bytes` capped, records
//! the response's size on the fetch quota, and a throttled one is answered with an empty
//! fetch response (its bytes taken back); SaslHandshake and SaslAuthenticate are never
//! throttled (Kafka handles them in the network layer) and give the connection its user;
//! ApiVersions has each API's versions capped to those the proxy reads; every other API
//! (a follower's fetch too) is held to the request quota. After a response went out, the
//! time it took to write is added to the request quota without a check.
//!
//! Bad input (a frame too large or malformed, a response that answers another request)
//! or a broker that is gone closes that one connection, with one line to the proxy's log.

use std::fmt;
use std::io;
use std::net::SocketAddr;
use std::sync::atomic::{AtomicI32, AtomicI64, AtomicU64, AtomicUsize, Ordering};
use std::sync::{Arc, Mutex};
use std::time::{Duration, Instant};

use bytes::{Bytes, BytesMut};
use kafka_protocol::messages::ApiKey;
use kquota_core::{
    monotonic_ms, update_cluster_metadata, ConnectionQuotas, ControllerMutationQuotaManager,
    MutationRequestQuota, Outcome, QuotaCallback, QuotaManager, QuotaType, Request, RequestPath,
};
use tokio::io::AsyncWriteExt;
use tokio::net::tcp::{OwnedReadHalf, OwnedWriteHalf};
use tokio::net::{TcpListener, TcpStream};
use tokio::runtime::Runtime;
use tokio::sync::{mpsc, oneshot, watch, Notify};

use crate::access::AdminAccess;
use crate::addresses::{names_brokers, with_addresses, BrokerAddress};
use crate::admin::{is_admin_api, SharedAdmin};
use crate::broker_time::BrokerTimes;
use crate::error::FrameError;
use crate::fetch::{cap_max_bytes, read_fetch_request, FetchRequestInfo};
use crate::frame::FrameReader;
use crate::gateway::{Door, Doors, GatewayConfig, Learned};
use crate::header::{parse_request_header, parse_response_header, produce_acks, RequestHeader};
use crate::mutation::{metadata_request, mutation_api, partition_counts, MutationRequest};
use crate::rewrite::{capped_api_versions, throttled_fetch_response, with_throttle};
use crate::sasl::{authenticate_bytes, authenticate_error, handshake_mechanism, SaslExchange};

/// Produce requests of one connection forwarded and not yet answered, at most.
pub const PIPELINE_DEPTH: usize = 8;

/// How often idle sensors are expired: Kafka's `ExpireSensorTask` runs every 30 s.
pub const SENSOR_EXPIRY_INTERVAL_MS: i64 = 30_000;

/// The API a follower's fetch is captured as (it is held to the request quota only).
pub const FOLLOWER_FETCH: &str = "follower_fetch";

const PRODUCE: i16 = 0;
const FETCH: i16 = 1;
const SASL_HANDSHAKE: i16 = 17;
const API_VERSIONS: i16 = 18;
const METADATA: i16 = 3;
const SASL_AUTHENTICATE: i16 = 36;

/// A broker's produce, fetch and request quota managers, and its controller-mutation
/// manager and connection rates when given, shared with their owner (who may change their
/// quotas while the proxy runs).
#[derive(Clone)]
pub struct Managers {
    produce: Arc<QuotaManager>,
    fetch: Arc<QuotaManager>,
    request: Arc<QuotaManager>,
    mutation: Option<Arc<ControllerMutationQuotaManager>>,
    admission: Option<Arc<Admission>>,
    new_callback: Option<CallbackFactory>,
}

/// Makes a new instance of the quota callback, for another broker's managers.
pub type CallbackFactory =
    Arc<dyn Fn() -> kquota_core::Result<Arc<dyn QuotaCallback>> + Send + Sync>;

impl Managers {
    /// The three managers, which must be of the produce, fetch and request type.
    pub fn new(
        produce: Arc<QuotaManager>,
        fetch: Arc<QuotaManager>,
        request: Arc<QuotaManager>,
    ) -> kquota_core::Result<Self> {
        RequestPath::new(&produce, &fetch, &request)?;
        Ok(Managers {
            produce,
            fetch,
            request,
            mutation: None,
            admission: None,
            new_callback: None,
        })
    }

    /// With the controller-mutation quota (KIP-599) of CreateTopics, CreatePartitions and
    /// DeleteTopics, applied while its quotas are enabled.
    pub fn with_mutation(mut self, mutation: Arc<ControllerMutationQuotaManager>) -> Self {
        self.mutation = Some(mutation);
        self
    }

    /// With the connection-creation rates (KIP-612) applied to new connections.
    pub fn with_admission(mut self, admission: Admission) -> Self {
        self.admission = Some(Arc::new(admission));
        self
    }

    /// With `new_callback`, which makes another broker's instance of the managers' quota
    /// callback (each Kafka broker has its own): what [`Self::sibling`] needs when the
    /// managers have one.
    pub fn with_callback_factory(mut self, new_callback: CallbackFactory) -> Self {
        self.new_callback = Some(new_callback);
        self
    }

    /// Whether [`Self::sibling`] can make siblings: managers with a quota callback need a
    /// callback factory.
    pub fn check_siblings(&self) -> kquota_core::Result<()> {
        if self.new_callback.is_none() && self.each().iter().any(|m| m.callback().is_some()) {
            return Err(kquota_core::Error::InvalidConfig(
                "managers with a quota callback need a callback factory to make another \
                 broker's: each broker has a callback instance of its own"
                    .to_owned(),
            ));
        }
        Ok(())
    }

    /// The managers of another broker of the cluster: siblings sharing these managers'
    /// quotas, with sensors of their own, and with a new instance of the quota callback
    /// (one for the three) if the managers have one.
    pub fn sibling(&self) -> kquota_core::Result<Self> {
        self.check_siblings()?;
        let callback = match &self.new_callback {
            Some(make) if self.each().iter().any(|m| m.callback().is_some()) => Some(make()?),
            _ => None,
        };
        let sibling = |m: &QuotaManager| -> kquota_core::Result<Arc<QuotaManager>> {
            Ok(Arc::new(match (&callback, m.callback()) {
                (Some(cb), Some(_)) => m.sibling_with_callback(Arc::clone(cb))?,
                _ => m.sibling()?,
            }))
        };
        Ok(Managers {
            produce: sibling(&self.produce)?,
            fetch: sibling(&self.fetch)?,
            request: sibling(&self.request)?,
            mutation: self.mutation.as_ref().map(|m| Arc::new(m.sibling())),
            admission: self.admission.as_ref().map(|a| Arc::new(a.sibling())),
            new_callback: self.new_callback.clone(),
        })
    }

    /// The produce, fetch and request managers, in that order.
    pub fn quota_managers(&self) -> [&Arc<QuotaManager>; 3] {
        [&self.produce, &self.fetch, &self.request]
    }

    /// The controller-mutation manager, if any.
    pub fn mutation(&self) -> Option<&Arc<ControllerMutationQuotaManager>> {
        self.mutation.as_ref()
    }

    /// The connection-creation rates, if any.
    pub fn admission(&self) -> Option<&Arc<Admission>> {
        self.admission.as_ref()
    }

    fn path(&self) -> RequestPath<'_> {
        RequestPath::new(&self.produce, &self.fetch, &self.request)
            .expect("manager types checked by Managers::new")
    }

    fn each(&self) -> [&QuotaManager; 3] {
        [&self.produce, &self.fetch, &self.request]
    }

    /// Drains the delay queues as mutes end and, with `expire`, removes idle sensors;
    /// returns when the next mute ends.
    fn maintain(&self, now: i64, expire: bool) -> Option<i64> {
        for manager in self.each() {
            manager.expired_channels(now);
            if expire {
                manager.expire_sensors(now);
            }
        }
        if let Some(mutation) = &self.mutation {
            mutation.expired_channels(now);
            if expire {
                mutation.expire_sensors(now);
            }
        }
        if let (Some(admission), true) = (&self.admission, expire) {
            admission.quotas.expire_sensors(now);
        }
        self.each()
            .iter()
            .filter_map(|m| m.next_unmute_ms())
            .chain(self.mutation.as_ref().and_then(|m| m.next_unmute_ms()))
            .min()
    }
}

/// How the proxy reaches its broker and the bounds it keeps.
#[derive(Debug, Clone)]
pub struct ProxyConfig {
    /// The broker's listener, `host:port`; in gateway mode, the cluster's bootstrap
    /// addresses (`host:port`, comma-separated: the first that answers).
    pub upstream: String,
    /// Kafka's `socket.request.max.bytes`: a larger request closes its connection.
    pub max_request_bytes: usize,
    /// A larger response closes its connection too.
    pub max_response_bytes: usize,
    /// How long connecting to the broker may take.
    pub connect_timeout: Duration,
    /// How long the broker may take to answer one request.
    pub upstream_timeout: Duration,
    /// Kafka's `connections.max.idle.ms`: a client connection with nothing read from it
    /// or written to it for this long, and no request at the broker or mute running, is
    /// closed (a client stopped in the middle of a frame among them).
    pub connections_max_idle: Duration,
    /// The broker's `num.partitions`: what a CreateTopics topic asking for -1 gets, as the
    /// controller-mutation quota counts it.
    pub default_num_partitions: i32,
    /// Gateway mode: in front of the whole cluster of `upstream`, a port per broker.
    pub gateway: Option<GatewayConfig>,
    /// Answers DescribeClientQuotas and AlterClientQuotas itself, from and into this
    /// configuration, instead of forwarding them.
    pub admin: Option<SharedAdmin>,
    /// Who may have them answered (with `admin`).
    pub admin_access: AdminAccess,
}

impl ProxyConfig {
    /// Kafka's bounds (100 MiB frames, 10 minutes idle), 10 s to connect and 300 s for a
    /// response.
    pub fn new(upstream: impl Into<String>) -> Self {
        ProxyConfig {
            upstream: upstream.into(),
            max_request_bytes: crate::DEFAULT_MAX_FRAME_BYTES,
            max_response_bytes: crate::DEFAULT_MAX_FRAME_BYTES,
            connect_timeout: Duration::from_secs(10),
            upstream_timeout: Duration::from_secs(300),
            connections_max_idle: Duration::from_secs(600),
            default_num_partitions: 1,
            gateway: None,
            admin: None,
            admin_access: AdminAccess::default(),
        }
    }
}

/// One quota decision of the proxy: a request as its quotas were checked, for a capture
/// of the traffic (back-tests) and for its owner's checks.
#[derive(Debug, Clone, PartialEq)]
pub struct Decision {
    /// When it was checked, on the core's clock ([`monotonic_ms`]).
    pub at_ms: i64,
    pub user: String,
    pub client_id: String,
    pub api_key: i16,
    pub api_version: i16,
    pub correlation_id: i32,
    /// A fetch from a replica (held to the request quota only).
    pub follower: bool,
    /// A produce request's size or a consumer fetch response's size; 0 otherwise.
    pub size: f64,
    /// The request time recorded, in nanoseconds: the proxy's own, with the broker's for an
    /// API Kafka answers at once.
    pub thread_ns: f64,
    /// A produce request's `acks` (-1 for other APIs).
    pub acks: i16,
    /// The outcome: the throttles and what applied. For a mutation request, the request
    /// quota's, with the applied throttle (the larger of it and the mutation throttle).
    pub outcome: Outcome,
    /// A mutation request's controller-mutation throttle (`None` for other APIs).
    pub mutation_throttle_ms: Option<i32>,
    /// The client's address.
    pub peer: SocketAddr,
    /// The broker whose quotas applied: its node id in gateway mode (-1 before a
    /// response named the bootstrap's broker), else -1.
    pub broker: i32,
}

/// Decisions kept for the owner to take, at most; more are counted and dropped.
pub const MAX_KEPT_DECISIONS: usize = 1 << 20;

/// KIP-612 at the proxy's door: each new connection waits out the broker's and the
/// listener's `max.connection.creation.rate` (in the accept loop, one at a time and in the
/// order they came, as Kafka's acceptor thread accepts them), then is checked against its
/// IP's `connection_creation_rate`: one over it is accepted and closed after the throttle
/// time, unread.
pub struct Admission {
    quotas: Arc<ConnectionQuotas>,
    listener: String,
    ip_throttled: AtomicU64,
}

impl Admission {
    /// `quotas` applied to new connections, counted under `listener` (added to them if
    /// they lack it).
    pub fn new(quotas: Arc<ConnectionQuotas>, listener: &str) -> kquota_core::Result<Self> {
        if !quotas.listeners().iter().any(|(name, _)| name == listener) {
            quotas.add_listener(listener, None)?;
        }
        Ok(Admission {
            quotas,
            listener: listener.to_owned(),
            ip_throttled: AtomicU64::new(0),
        })
    }

    /// Another broker's door: the same connection quotas' configuration and listener,
    /// with sensors of its own ([`ConnectionQuotas::sibling`]).
    pub fn sibling(&self) -> Self {
        Admission {
            quotas: Arc::new(self.quotas.sibling()),
            listener: self.listener.clone(),
            ip_throttled: AtomicU64::new(0),
        }
    }

    /// The connection quotas applied (shared, not a copy).
    pub fn quotas(&self) -> &Arc<ConnectionQuotas> {
        &self.quotas
    }

    /// Connections closed unread because their IP was over its `connection_creation_rate`.
    pub fn ip_throttled(&self) -> u64 {
        self.ip_throttled.load(Ordering::Relaxed)
    }

    /// The acceptor's part for a connection from `ip`: its delay waited out, then its
    /// IP's throttle (0: admitted; > 0: close it after that many ms, unread).
    async fn accept(&self, ip: &str) -> kquota_core::Result<i32> {
        let delay = self.quotas.accept_delay(&self.listener, monotonic_ms())?;
        if delay > 0 {
            tokio::time::sleep(Duration::from_millis(delay as u64)).await;
        }
        let throttle = self.quotas.admit_ip(&self.listener, ip, monotonic_ms())?;
        if throttle > 0 {
            self.ip_throttled.fetch_add(1, Ordering::Relaxed);
        }
        Ok(throttle)
    }
}

/// What the proxy reports to its owner: one line per connection closed on an error, and
/// the SASL exchanges whose principal it cannot read.
pub type Log = Arc<dyn Fn(&str) + Send + Sync>;

/// Why a connection closed.
#[derive(Debug)]
enum Closed {
    /// The client sent what the proxy cannot read.
    Client(String),
    /// The broker is unreachable, silent, or answered what the proxy cannot read.
    Upstream(String),
    /// A socket failed.
    Io(io::Error),
    /// The quota core refused a value (a bug, or a manager misused by its owner).
    Quota(kquota_core::Error),
}

impl fmt::Display for Closed {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        match self {
            Closed::Client(msg) | Closed::Upstream(msg) => f.write_str(msg),
            Closed::Io(err) => write!(f, "{err}"),
            Closed::Quota(err) => write!(f, "quota error: {err}"),
        }
    }
}

impl From<io::Error> for Closed {
    fn from(err: io::Error) -> Self {
        Closed::Io(err)
    }
}

impl From<kquota_core::Error> for Closed {
    fn from(err: kquota_core::Error) -> Self {
        Closed::Quota(err)
    }
}

/// The state every connection task shares.
struct Shared {
    config: ProxyConfig,
    /// The listen port's door: the sidecar's broker, or the gateway's bootstrap.
    door: Arc<Door>,
    /// The gateway's brokers (gateway mode only).
    doors: Option<Doors>,
    log: Log,
    closing: watch::Receiver<bool>,
    next_channel: AtomicU64,
    connections: AtomicUsize,
    /// The decisions not yet taken, when the owner keeps them.
    decisions: Option<Mutex<Vec<Decision>>>,
    dropped_decisions: AtomicU64,
    /// Notified when the last connection closes.
    idle: Notify,
    local_addr: SocketAddr,
}

impl Shared {
    /// The listen port's door, then a gateway's brokers'.
    fn all_doors(&self) -> Vec<Arc<Door>> {
        let mut all = vec![Arc::clone(&self.door)];
        if let Some(doors) = &self.doors {
            all.extend(doors.all());
        }
        all
    }
}

/// A running proxy: its own tokio runtime, listening until [`Proxy::shutdown`].
pub struct Proxy {
    shared: Arc<Shared>,
    local_addr: SocketAddr,
    closing: watch::Sender<bool>,
    runtime: Option<Runtime>,
}

impl Proxy {
    /// Listens on `listen` (port 0: any free port) and relays each connection to the
    /// broker with `managers`' quotas, on a runtime of `threads` worker threads. With
    /// `keep_decisions`, every quota decision is kept for [`Proxy::take_decisions`].
    pub fn start(
        listen: SocketAddr,
        config: ProxyConfig,
        managers: Managers,
        log: Log,
        threads: usize,
        keep_decisions: bool,
    ) -> io::Result<Proxy> {
        let runtime = tokio::runtime::Builder::new_multi_thread()
            .worker_threads(threads.max(1))
            .thread_name("kquota-proxy")
            .enable_all()
            .build()?;
        if let Some(gateway) = &config.gateway {
            gateway
                .check()
                .map_err(|msg| io::Error::new(io::ErrorKind::InvalidInput, msg))?;
            managers
                .check_siblings()
                .map_err(|err| io::Error::new(io::ErrorKind::InvalidInput, err.to_string()))?;
        }
        let listener = runtime.block_on(TcpListener::bind(listen))?;
        let local_addr = listener.local_addr()?;
        let (closing, closing_rx) = watch::channel(false);
        let door = Arc::new(Door::new(-1, config.upstream.clone(), managers));
        let doors = config
            .gateway
            .clone()
            .map(|gateway| Doors::new(gateway, local_addr.ip()));
        let shared = Arc::new(Shared {
            config,
            door: Arc::clone(&door),
            doors,
            log,
            closing: closing_rx,
            next_channel: AtomicU64::new(1),
            connections: AtomicUsize::new(0),
            decisions: keep_decisions.then(|| Mutex::new(Vec::new())),
            dropped_decisions: AtomicU64::new(0),
            idle: Notify::new(),
            local_addr,
        });
        runtime.spawn(accept(Arc::clone(&shared), listener, door));
        runtime.spawn(maintain(Arc::clone(&shared)));
        Ok(Proxy {
            shared,
            local_addr,
            closing,
            runtime: Some(runtime),
        })
    }

    /// The address the proxy listens on.
    pub fn local_addr(&self) -> SocketAddr {
        self.local_addr
    }

    /// The brokers a gateway serves: node id, address upstream and port on the proxy, by
    /// node id (empty for a sidecar).
    pub fn brokers(&self) -> Vec<(i32, String, u16)> {
        self.shared
            .doors
            .as_ref()
            .map_or_else(Vec::new, Doors::ports)
    }

    /// The managers of each broker a gateway serves, by node id (empty for a sidecar):
    /// the ones its port's connections record on, shared, not copies.
    pub fn broker_managers(&self) -> Vec<(i32, Managers)> {
        self.shared
            .doors
            .as_ref()
            .map_or_else(Vec::new, Doors::managers)
    }

    /// Client connections open now.
    pub fn connections(&self) -> usize {
        self.shared.connections.load(Ordering::Acquire)
    }

    /// The decisions made since the last call, in the order they were made (empty unless
    /// the proxy keeps them).
    pub fn take_decisions(&self) -> Vec<Decision> {
        self.shared
            .decisions
            .as_ref()
            .map_or_else(Vec::new, |kept| std::mem::take(&mut *lock(kept)))
    }

    /// Connections closed unread because their IP was over its `connection_creation_rate`
    /// (on every port of a gateway).
    pub fn ip_throttled_connections(&self) -> u64 {
        self.shared
            .all_doors()
            .iter()
            .filter_map(|door| door.managers.admission())
            .map(|a| a.ip_throttled())
            .sum()
    }

    /// Decisions dropped because [`MAX_KEPT_DECISIONS`] were waiting to be taken.
    pub fn dropped_decisions(&self) -> u64 {
        self.shared.dropped_decisions.load(Ordering::Relaxed)
    }

    /// Stops accepting, answers the requests in flight, then closes every connection.
    ///
    /// Connections waiting for their next request (or for a mute to end, or for their turn
    /// to forward one, which is dropped unread as a muted broker leaves it) close at once;
    /// those with requests in flight finish them first, for at most `timeout`. Blocks the
    /// calling thread (not a runtime's); a second call does nothing.
    pub fn shutdown(&mut self, timeout: Duration) {
        let Some(runtime) = self.runtime.take() else {
            return;
        };
        self.closing.send_replace(true);
        let shared = Arc::clone(&self.shared);
        runtime.block_on(async move {
            let all_closed = async {
                loop {
                    let idle = shared.idle.notified();
                    if shared.connections.load(Ordering::Acquire) == 0 {
                        return;
                    }
                    idle.await;
                }
            };
            let _ = tokio::time::timeout(timeout, all_closed).await;
        });
        // Connections still open past the timeout are dropped with the runtime.
        runtime.shutdown_timeout(Duration::from_secs(1));
    }
}

impl Drop for Proxy {
    fn drop(&mut self) {
        if let Some(runtime) = self.runtime.take() {
            self.closing.send_replace(true);
            runtime.shutdown_background();
        }
    }
}

async fn accept(shared: Arc<Shared>, listener: TcpListener, door: Arc<Door>) {
    let mut closing = shared.closing.clone();
    loop {
        let accepted = tokio::select! {
            accepted = listener.accept() => accepted,
            _ = closing.wait_for(|closing| *closing) => return,
        };
        match accepted {
            Ok((client, peer)) => {
                let ip = peer.ip().to_string();
                let throttle = match door.managers.admission() {
                    None => 0,
                    Some(admission) => tokio::select! {
                        throttle = admission.accept(&ip) => {
                            throttle.unwrap_or_else(|err| {
                                (shared.log)(&format!("closing connection from {peer}: {err}"));
                                i32::MAX
                            })
                        }
                        _ = closing.wait_for(|closing| *closing) => return,
                    },
                };
                shared.connections.fetch_add(1, Ordering::AcqRel);
                tokio::spawn(serve(
                    Arc::clone(&shared),
                    Arc::clone(&door),
                    client,
                    peer,
                    throttle,
                ));
            }
            // Out of file descriptors and the like: the listener itself stays usable.
            Err(err) => {
                (shared.log)(&format!("accepting a connection failed: {err}"));
                tokio::time::sleep(Duration::from_millis(50)).await;
            }
        }
    }
}

/// Drains the managers' delay queues as mutes end (each connection waits out its own
/// mute; the queues are Kafka's `queue-size`) and expires idle sensors every 30 s.
async fn maintain(shared: Arc<Shared>) {
    let mut next_expiry = monotonic_ms();
    loop {
        let now = monotonic_ms();
        let expire = now >= next_expiry;
        let next_unmute = shared
            .all_doors()
            .iter()
            .filter_map(|door| door.managers.maintain(now, expire))
            .min();
        if expire {
            next_expiry = now + SENSOR_EXPIRY_INTERVAL_MS;
        }
        let due = next_unmute.map_or(next_expiry, |end| end.min(next_expiry));
        let wait = Duration::from_millis((due - monotonic_ms()).clamp(1, 1000) as u64);
        let mut closing = shared.closing.clone();
        tokio::select! {
            () = tokio::time::sleep(wait) => {}
            _ = closing.wait_for(|closing| *closing) => return,
        }
    }
}

/// One request forwarded to the broker whose response the client has not had yet.
struct Pending {
    header: RequestHeader<'static>,
    user: String,
    /// The request frame's size (a produce request's usage).
    size: usize,
    acks: i16,
    fetch: Option<FetchRequestInfo>,
    /// The request's time so far: the proxy's (reading and checking it), and the estimate
    /// of the broker's once answered, for an API Kafka answers at once
    /// ([`answered_at_once`]).
    handled: Duration,
    /// When the request's write to the broker began.
    written: Instant,
    mutation: Option<Box<RecordedMutation>>,
    /// The response the proxy made itself (quota administration), and its body's offset.
    local: Option<(BytesMut, usize)>,
}

impl Pending {
    /// Adds the estimate of the broker's handler time on an API Kafka answers at once
    /// ([`BrokerTimes::estimate`]) from its round trip: from the request written, or the
    /// responder free to read its answer when later, to the answer read.
    fn add_broker_time(
        &mut self,
        times: &Mutex<BrokerTimes>,
        response_size: usize,
        free: Instant,
        read: Instant,
    ) {
        if answered_at_once(self.header.api_key, self.acks) {
            let round_trip = read.saturating_duration_since(self.written.max(free));
            let size = self.size.max(response_size);
            self.handled += lock(times).estimate(self.header.api_key, size, round_trip);
        }
    }
}

/// The APIs whose whole time Kafka charges to the request quota, because its handler
/// answers them before it returns: the proxy charges an estimate of the broker's handler
/// time on them from their round trips ([`crate::broker_time`]). Kafka charges the others
/// (a fetch or an `acks=all` produce parked until its data or replicas are there, the group
/// coordinator's APIs, the ones it forwards to the controller) only up to its handler's
/// return, which the proxy cannot see: those are charged with the proxy's own time.
fn answered_at_once(api_key: i16, acks: i16) -> bool {
    match api_key {
        PRODUCE => acks == 1,
        // ListOffsets, Metadata, OffsetForLeaderEpoch, FindCoordinator, ApiVersions,
        // DescribeAcls, DescribeConfigs, DescribeLogDirs, DescribeClientQuotas,
        // DescribeUserScramCredentials, DescribeCluster, DescribeProducers,
        // DescribeTransactions, ListTransactions, DescribeTopicPartitions
        2 | 3 | 23 | 10 | 18 | 29 | 32 | 35 | 48 | 50 | 60 | 61 | 65 | 66 | 75 => true,
        _ => false,
    }
}

/// A mutation request under the controller-mutation quota, as recorded.
struct RecordedMutation {
    request: MutationRequest,
    quota: MutationRequestQuota,
    /// Partitions recorded (accepted).
    permits: i64,
}

impl RecordedMutation {
    /// Every topic refused: answered by the proxy, nothing went to the broker.
    fn local(&self) -> bool {
        self.request.all_refused()
    }
}

/// What the reader hands the responder, in the order the broker answers.
enum Work {
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

/// Where the correlation ids of the proxy's own requests start.
const OWN_CORRELATION_IDS: i32 = 0x7F00_0000;

/// Which requests may go to the broker now.
#[derive(Default)]
struct Turn {
    in_flight: usize,
    produces: usize,
}

/// One client connection's state, shared by its two halves.
struct Connection {
    channel: u64,
    peer: SocketAddr,
    /// The end of the connection's mute on the core's clock (0: never muted).
    muted_until: AtomicI64,
    /// When bytes last came from the client or went to it, on the core's clock.
    last_activity: AtomicI64,
    /// Bytes read from the client, and those of them that made whole frames.
    bytes_in: AtomicU64,
    bytes_framed: AtomicU64,
    turn: Mutex<Turn>,
    answered: Notify,
    sasl: Mutex<SaslExchange>,
    client_id: Mutex<String>,
    own_requests: AtomicI32,
    /// The node id of the door whose quotas apply (see [`Decision::broker`]).
    broker: AtomicI32,
}

impl Connection {
    fn user(&self) -> String {
        lock(&self.sasl).user().to_owned()
    }

    fn who(&self) -> String {
        let client_id = lock(&self.client_id);
        if client_id.is_empty() {
            self.peer.to_string()
        } else {
            format!("{} (client id {:?})", self.peer, *client_id)
        }
    }

    fn mute(&self, until: i64) {
        self.muted_until.fetch_max(until, Ordering::AcqRel);
    }

    fn active(&self) {
        self.last_activity
            .fetch_max(monotonic_ms(), Ordering::AcqRel);
    }

    /// Closes the connection (by returning) once it has been idle for `max_idle`:
    /// nothing read or written, no request at the broker, no mute running. Kafka's
    /// `connections.max.idle.ms`.
    async fn expire_idle(&self, max_idle: Duration) -> Closed {
        let max = i64::try_from(max_idle.as_millis()).unwrap_or(i64::MAX);
        loop {
            let now = monotonic_ms();
            let due = self
                .last_activity
                .load(Ordering::Acquire)
                .saturating_add(max);
            if now >= due {
                let busy = lock(&self.turn).in_flight > 0
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

    async fn wait_unmuted(&self) {
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
    async fn wait_turn(&self, produce: bool) {
        loop {
            self.wait_unmuted().await;
            {
                let mut turn = lock(&self.turn);
                let free = turn.in_flight == 0
                    || (produce
                        && turn.produces == turn.in_flight
                        && turn.in_flight < PIPELINE_DEPTH);
                let muted = self.muted_until.load(Ordering::Acquire) > monotonic_ms();
                if free && !muted {
                    turn.in_flight += 1;
                    turn.produces += usize::from(produce);
                    return;
                }
            }
            self.answered.notified().await;
        }
    }

    fn answer_done(&self, produce: bool) {
        self.active();
        {
            let mut turn = lock(&self.turn);
            turn.in_flight -= 1;
            turn.produces -= usize::from(produce);
        }
        // A permit is kept when the reader is not waiting yet: no wake-up is lost.
        self.answered.notify_one();
    }
}

/// A connection's read half that notes, for [`Connection::expire_idle`], when and how
/// many bytes came.
struct Stamped<'a> {
    inner: OwnedReadHalf,
    connection: &'a Connection,
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

pub(crate) fn lock<T>(mutex: &Mutex<T>) -> std::sync::MutexGuard<'_, T> {
    // A panic elsewhere cannot leave these small values half-written.
    mutex
        .lock()
        .unwrap_or_else(std::sync::PoisonError::into_inner)
}

/// Serves one connection; one its IP's rate throttled (`ip_throttle_ms` > 0) is held for
/// that long and closed, unread.
async fn serve(
    shared: Arc<Shared>,
    door: Arc<Door>,
    client: TcpStream,
    peer: SocketAddr,
    ip_throttle_ms: i32,
) {
    let connection = Connection {
        channel: shared.next_channel.fetch_add(1, Ordering::Relaxed),
        peer,
        muted_until: AtomicI64::new(0),
        last_activity: AtomicI64::new(monotonic_ms()),
        bytes_in: AtomicU64::new(0),
        bytes_framed: AtomicU64::new(0),
        turn: Mutex::new(Turn::default()),
        answered: Notify::new(),
        sasl: Mutex::new(SaslExchange::default()),
        client_id: Mutex::new(String::new()),
        own_requests: AtomicI32::new(0),
        broker: AtomicI32::new(door.broker),
    };
    if !*shared.closing.borrow() && admitted(&shared, ip_throttle_ms).await {
        if let Err(err) = relay(&shared, door, &connection, client).await {
            (shared.log)(&format!(
                "closing connection from {}: {err}",
                connection.who()
            ));
        }
    }
    if shared.connections.fetch_sub(1, Ordering::AcqRel) == 1 {
        shared.idle.notify_waiters();
    }
}

/// Whether a connection is served: one over its IP's rate is first held for its throttle
/// (a shutdown meanwhile closes it at once).
async fn admitted(shared: &Shared, ip_throttle_ms: i32) -> bool {
    if ip_throttle_ms <= 0 {
        return true;
    }
    let mut closing = shared.closing.clone();
    tokio::select! {
        () = tokio::time::sleep(Duration::from_millis(ip_throttle_ms as u64)) => {}
        _ = closing.wait_for(|closing| *closing) => {}
    }
    false
}

async fn relay(
    shared: &Arc<Shared>,
    door: Arc<Door>,
    connection: &Connection,
    client: TcpStream,
) -> Result<(), Closed> {
    let to = door.upstream();
    let (upstream, reached) = connect(&shared.config, &to).await?;
    // A gateway's bootstrap connection counts on the door of the broker it reached.
    let door = match &shared.doors {
        Some(doors) if door.broker < 0 => {
            doors.at(reached, upstream.peer_addr().ok()).unwrap_or(door)
        }
        _ => door,
    };
    connection.broker.store(door.broker, Ordering::Relaxed);
    client.set_nodelay(true)?;
    upstream.set_nodelay(true)?;
    let (client_read, client_write) = client.into_split();
    let (upstream_read, upstream_write) = upstream.into_split();
    // At most PIPELINE_DEPTH requests are in flight, so the queue never fills.
    let (forwarded, pending) = mpsc::channel(PIPELINE_DEPTH + 1);
    let reader = read_requests(
        shared,
        &door,
        connection,
        client_read,
        upstream_write,
        forwarded,
    );
    let responder = respond(
        shared,
        &door,
        connection,
        upstream_read,
        client_write,
        pending,
    );
    let idle = connection.expire_idle(shared.config.connections_max_idle);
    tokio::select! {
        both = async { tokio::try_join!(reader, responder) } => both.map(|_| ()),
        closed = idle => Err(closed),
    }
}

/// A connection to `to`: `host:port`, or several comma-separated (a bootstrap list),
/// tried in turn until one answers; with the one that did.
async fn connect<'a>(config: &ProxyConfig, to: &'a str) -> Result<(TcpStream, &'a str), Closed> {
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

/// The reader: each request read, checked and forwarded once its turn comes; ends at the
/// client's end of stream or when the proxy shuts down.
async fn read_requests(
    shared: &Shared,
    door: &Door,
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
    let path = door.managers.path();
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
        check_version(&frame)?;
        let header = parse_request_header(&frame)
            .map_err(|err| Closed::Client(format!("request: {err}")))?
            .into_owned();
        {
            let mut client_id = lock(&connection.client_id);
            if client_id.as_str() != header.client_id() {
                header.client_id().clone_into(&mut client_id);
            }
        }
        let produce = header.api_key == PRODUCE;
        let mut handled = started.elapsed();
        tokio::select! {
            () = connection.wait_turn(produce) => {}
            _ = closing.wait_for(|closing| *closing) => break,
        }
        let mut started = Instant::now();
        let user = connection.user();
        let bad = |err: crate::HeaderError| Closed::Client(format!("request: {err}"));
        let mut acks = -1;
        let mut fetch = None;
        let mut mutation = None;
        let mut local = None;
        match header.api_key {
            PRODUCE => acks = produce_acks(&frame, &header).map_err(bad)?,
            FETCH => {
                let info = read_fetch_request(&frame, &header).map_err(bad)?;
                if let (true, Some((requested, _))) = (info.is_consumer(), info.max_bytes) {
                    let cap = path.fetch_max_bytes(
                        &user,
                        header.client_id(),
                        i64::from(requested),
                        monotonic_ms(),
                    )?;
                    cap_max_bytes(&mut frame, &info, i32::try_from(cap).unwrap_or(i32::MAX));
                }
                fetch = Some(info);
            }
            SASL_HANDSHAKE => {
                if header.api_version == 0 {
                    return Err(Closed::Client(
                        "SaslHandshake v0 (raw SASL tokens) is not supported".to_owned(),
                    ));
                }
                let mechanism = handshake_mechanism(&frame, &header).map_err(bad)?;
                lock(&connection.sasl).handshake(&mechanism);
            }
            SASL_AUTHENTICATE => {
                let auth = authenticate_bytes(&frame, &header).map_err(bad)?;
                let mut sasl = lock(&connection.sasl);
                if sasl.authenticate(&auth) {
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
                if let Some(manager) = door
                    .managers
                    .mutation
                    .as_ref()
                    .filter(|m| mutation_api(key).is_some() && m.enabled())
                {
                    handled += started.elapsed();
                    let counts =
                        own_metadata(connection, &header, &frame, &mut upstream, &forwarded)
                            .await?;
                    started = Instant::now();
                    let recorded =
                        record_mutation(shared, manager, &user, &header, &frame, &counts)?;
                    if recorded.request.any_refused() && !recorded.local() {
                        frame = recorded.request.rewritten().map_err(bad)?;
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
            mutation,
            local,
        };
        if forwarded.send(Work::Answer(entry)).await.is_err() {
            break; // the responder ended: its error closes the connection
        }
    }
    Ok(())
}

/// The responder: each forwarded request answered in turn, once the connection's mute (if
/// any) has ended; ends when the reader has and every forwarded request is answered.
async fn respond(
    shared: &Arc<Shared>,
    door: &Door,
    connection: &Connection,
    upstream: OwnedReadHalf,
    mut client: OwnedWriteHalf,
    mut pending: mpsc::Receiver<Work>,
) -> Result<(), Closed> {
    let mut frames = FrameReader::new(upstream, shared.config.max_response_bytes);
    let path = door.managers.path();
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
            let request = Request::produce(entry.size as f64, nanos(entry.handled), 0);
            decide(shared, &path, connection, &entry, &request)?;
        } else if let Some(recorded) = &entry.mutation {
            let response = if recorded.local() {
                None
            } else {
                Some(read_response(&shared.config, &mut frames, &entry.header).await?)
            };
            connection.wait_unmuted().await;
            answer_mutation(
                shared,
                door,
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
                    entry.add_broker_time(&door.broker_times, response.0.len(), free, read);
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
/// store ([`crate::access`]): `None` when it may, else the refusal to answer with (Kafka's,
/// or the cluster's own), logged.
async fn authorize_admin(
    shared: &Shared,
    connection: &Connection,
    header: &RequestHeader<'_>,
    frame: &[u8],
    upstream: &mut OwnedWriteHalf,
    forwarded: &mpsc::Sender<Work>,
) -> Result<Option<(BytesMut, usize)>, Closed> {
    let access = &shared.config.admin_access;
    let user = connection.user();
    let bad = |err: crate::HeaderError| Closed::Client(format!("request: {err}"));
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
    if !access.lists(&user) {
        refused("not a listed principal");
        return crate::access::refusal(frame, header).map(Some).map_err(bad);
    }
    if !access.ask_cluster {
        return Ok(None);
    }
    let probe =
        crate::access::cluster_probe(frame, header, own_correlation_id(connection)).map_err(bad)?;
    let response = own_request(probe, upstream, forwarded).await?;
    let refusal = crate::access::cluster_refusal(response, header)
        .map_err(|err| Closed::Upstream(format!("the cluster's answer on quota access: {err}")))?;
    if refusal.is_some() {
        refused("the cluster refuses it");
    }
    Ok(refusal)
}

/// A correlation id for the proxy's own next request on the connection.
fn own_correlation_id(connection: &Connection) -> i32 {
    OWN_CORRELATION_IDS | (connection.own_requests.fetch_add(1, Ordering::Relaxed) & 0xFF_FFFF)
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
    frame: &[u8],
    upstream: &mut OwnedWriteHalf,
    forwarded: &mpsc::Sender<Work>,
) -> Result<crate::mutation::PartitionCounts, Closed> {
    let request = MutationRequest::parse(frame, header)
        .map_err(|err| Closed::Client(format!("request: {err}")))?;
    let names = request.names();
    let metadata = metadata_request(
        own_correlation_id(connection),
        header.client_id(),
        names.as_deref(),
    );
    let response = own_request(metadata, upstream, forwarded).await?;
    partition_counts(&response)
        .map_err(|err| Closed::Upstream(format!("the proxy's Metadata request: {err}")))
}

/// Counts a mutation request's partitions per topic and records them in the client's
/// controller-mutation quota in request order; a strict quota (CreateTopics v6+,
/// CreatePartitions v3+, DeleteTopics v5+) refuses the topics once the bucket is overdrawn
/// (Kafka's `StrictControllerMutationQuota`).
fn record_mutation(
    shared: &Shared,
    manager: &Arc<ControllerMutationQuotaManager>,
    user: &str,
    header: &RequestHeader<'_>,
    frame: &[u8],
    counts: &crate::mutation::PartitionCounts,
) -> Result<RecordedMutation, Closed> {
    let mut request = MutationRequest::parse(frame, header)
        .map_err(|err| Closed::Client(format!("request: {err}")))?;
    request.count(counts, shared.config.default_num_partitions);
    let strict = request.api.is_strict(header.api_version);
    let now = monotonic_ms();
    let quota =
        MutationRequestQuota::new(Arc::clone(manager), user, header.client_id(), strict, now);
    let mut permits = 0;
    for topic in &mut request.topics {
        let Some(n) = topic.permits else { continue };
        if quota.record(n as f64, now)?.accepted {
            permits += n;
        } else {
            topic.throttled = true;
        }
    }
    Ok(RecordedMutation {
        request,
        quota,
        permits,
    })
}

/// Answers a mutation request: the request quota recorded as for any request, and the
/// larger of its throttle and the mutation throttle applied through the manager of the
/// larger one (the request manager when equal), as Kafka's
/// `sendResponseMaybeThrottleWithControllerQuota` does; the broker's results merged with
/// the refused topics' errors.
async fn answer_mutation(
    shared: &Shared,
    door: &Door,
    path: &RequestPath<'_>,
    connection: &Connection,
    client: &mut OwnedWriteHalf,
    entry: &Pending,
    response: Option<(BytesMut, usize)>,
) -> Result<(), Closed> {
    let resumed = Instant::now();
    let recorded = entry.mutation.as_ref().expect("a mutation request");
    let header = &entry.header;
    let client_id = header.client_id();
    let now = monotonic_ms();
    let handled = nanos(entry.handled + resumed.elapsed());
    let mut outcome = path.record(&entry.user, client_id, &Request::other(handled), now)?;
    let request_ms = if outcome.throttled_by.is_some() {
        outcome.throttle_ms
    } else {
        0
    };
    let mutation_ms = recorded.quota.throttle_time(now);
    let throttle = mutation_ms.max(request_ms);
    outcome.throttle_ms = throttle.max(0);
    outcome.throttled_by = None;
    if throttle > 0 {
        let channel = Some(connection.channel);
        let end = match &door.managers.mutation {
            Some(manager) if mutation_ms > request_ms => {
                manager.throttle(&entry.user, client_id, i64::from(throttle), now, channel)?
            }
            _ => {
                outcome.throttled_by = Some(QuotaType::Request);
                path.manager(QuotaType::Request).throttle(
                    &entry.user,
                    client_id,
                    i64::from(throttle),
                    now,
                    channel,
                )?
            }
        };
        outcome.muted_until_ms = Some(end);
        connection.mute(end);
    }
    let permits = recorded.permits as f64;
    keep_decision(
        shared,
        connection,
        entry,
        permits,
        handled,
        outcome,
        Some(mutation_ms),
        now,
    );
    let frame = response.as_ref().map(|(frame, _)| &frame[..]);
    let rewritten = if recorded.request.any_refused() {
        let merged = recorded
            .request
            .merged_response(header, frame, outcome.throttle_ms);
        Some(merged.map_err(|err| Closed::Upstream(format!("response: {err}")))?)
    } else if throttle > 0 {
        frame.and_then(|f| with_throttle(f, header, throttle))
    } else {
        None
    };
    let out = match (&rewritten, frame) {
        (Some(rewritten), _) => &rewritten[..],
        (None, Some(frame)) => frame,
        (None, None) => return Err(Closed::Client("a mutation answered by no one".to_owned())),
    };
    send(path, client, out, Some((entry.user.as_str(), client_id))).await
}

/// Refuses a version of an API the proxy cannot read (the codec's versions are those of
/// Kafka's schemas it was generated from; ApiVersions answers offer no others).
/// Checked before the rest of the header, whose layout depends on the version.
fn check_version(frame: &[u8]) -> Result<(), Closed> {
    let [k0, k1, v0, v1, ..] = *frame else {
        return Ok(()); // too short for a header: parsing it says so
    };
    let (api_key, api_version) = (i16::from_be_bytes([k0, k1]), i16::from_be_bytes([v0, v1]));
    let Ok(key) = ApiKey::try_from(api_key) else {
        return Ok(()); // parsing the header names the unknown key
    };
    let known = key.valid_versions();
    // ApiVersions of any version is answered (with v0 when the broker lacks it).
    if api_key != API_VERSIONS && !(known.min..=known.max).contains(&api_version) {
        return Err(Closed::Client(format!(
            "unsupported version {api_version} of API {api_key} ({key:?}): expected {} to {}",
            known.min, known.max
        )));
    }
    Ok(())
}

/// Checks the quotas of one answered request and sends the client its response.
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
    let response = match &shared.doors {
        Some(doors) if names_brokers(header.api_key, header.api_version) => {
            gateway_addresses(shared, doors, response.freeze(), body_offset, header)?
        }
        _ => response.freeze(),
    };
    match header.api_key {
        SASL_HANDSHAKE => return send(path, client, &response, None).await,
        SASL_AUTHENTICATE => {
            lock(&connection.sasl).result(authenticate_error(&response, header));
            return send(path, client, &response, None).await;
        }
        _ => {}
    }
    let handled = nanos(entry.handled + resumed.elapsed());
    let consumer_fetch = entry.fetch.filter(FetchRequestInfo::is_consumer);
    let request = match header.api_key {
        PRODUCE => Request::produce(entry.size as f64, handled, entry.acks),
        // Kafka's FetchResponse.sizeOf: the body and the 4-byte correlation id
        FETCH if consumer_fetch.is_some() => {
            Request::fetch((4 + response.len() - body_offset) as f64, handled)
        }
        _ => Request::other(handled),
    };
    let outcome = decide(shared, path, connection, &entry, &request)?;
    if header.api_key == METADATA {
        tell_callback(shared, &response[body_offset..], header.api_version);
    }
    let entity = Some((entry.user.as_str(), header.client_id()));
    if outcome.unrecorded {
        let info = consumer_fetch.expect("only a consumer fetch is unrecorded");
        let session = if info.session_epoch > 0 {
            info.session_id
        } else {
            0
        };
        let empty =
            throttled_fetch_response(header, outcome.throttle_ms, session).ok_or_else(|| {
                Closed::Client(format!(
                    "fetch v{} has no throttled response",
                    header.api_version
                ))
            })?;
        return send(path, client, &empty, entity).await;
    }
    let rewritten = if header.api_key == API_VERSIONS {
        capped_api_versions(&response, header, outcome.throttle_ms)
    } else if outcome.throttled() {
        with_throttle(&response, header, outcome.throttle_ms)
    } else {
        None
    };
    send(
        path,
        client,
        rewritten.as_deref().unwrap_or(&response),
        entity,
    )
    .await
}

/// A gateway's response naming brokers, with each one's address replaced by its port on
/// the proxy: a broker named for the first time gets its door and port first, so that the
/// client can connect as soon as it reads the response. A response the proxy cannot read
/// closes the connection (passing it on would show the client the brokers themselves).
fn gateway_addresses(
    shared: &Arc<Shared>,
    doors: &Doors,
    response: Bytes,
    body_offset: usize,
    header: &RequestHeader<'_>,
) -> Result<Bytes, Closed> {
    let advertised = doors.config.advertised_host.clone();
    let mut to = |broker: &BrokerAddress| {
        let upstream = format!("{}:{}", broker.host, broker.port);
        let Some(port) = doors.config.port_of(broker.node_id) else {
            if doors.first_without_port(broker.node_id) {
                (shared.log)(&format!(
                    "broker {} at {upstream} has no port on the gateway (node ids 0 to {} \
                     have one): clients are told its own address",
                    broker.node_id,
                    doors.config.ports - 1
                ));
            }
            return None;
        };
        let siblings = || shared.door.managers.sibling();
        let open = |door| open_door(shared, doors, door, port);
        match doors.learn(broker.node_id, &upstream, siblings, open) {
            Ok(Learned::Known | Learned::Opened) => {}
            Ok(Learned::Moved) => {
                (shared.log)(&format!("broker {} is now at {upstream}", broker.node_id));
            }
            Err(err) => {
                (shared.log)(&format!("broker {} at {upstream}: {err}", broker.node_id));
                return None;
            }
        }
        Some((advertised.clone(), i32::from(port)))
    };
    match with_addresses(
        &response,
        body_offset,
        header.api_key,
        header.api_version,
        &mut to,
    ) {
        Ok(Some(rewritten)) => Ok(rewritten.freeze()),
        Ok(None) => Ok(response),
        Err(err) => Err(Closed::Upstream(format!(
            "response naming brokers (API key {} v{}): {err}",
            header.api_key, header.api_version
        ))),
    }
}

/// Listens on a broker's port and serves its connections through `door`.
fn open_door(shared: &Arc<Shared>, doors: &Doors, door: Arc<Door>, port: u16) -> io::Result<()> {
    let listener = std::net::TcpListener::bind((doors.listen_ip, port))?;
    listener.set_nonblocking(true)?;
    let listener = TcpListener::from_std(listener)?;
    tokio::spawn(accept(Arc::clone(shared), listener, door));
    Ok(())
}

/// A Metadata response went through: tell the quota callbacks (if any) when the brokers
/// or partition leaders changed. In gateway mode every broker's callback is told, each as
/// its own broker (every Kafka broker learns the cluster's metadata), and the bootstrap's
/// as no broker. A response that cannot be read or a callback that fails is logged, and
/// the client's response goes on unchanged.
fn tell_callback(shared: &Shared, body: &[u8], version: i16) {
    // (A broker's managers have a callback when the listen port's have one.)
    let managers = shared.door.managers.each();
    if managers.iter().all(|m| m.callback().is_none()) {
        return;
    }
    let doors = match &shared.doors {
        Some(_) => shared.all_doors(),
        None => vec![Arc::clone(&shared.door)],
    };
    let metadata = match crate::metadata::cluster_metadata(body, version, shared.local_addr) {
        Ok(metadata) => metadata,
        Err(err) => {
            (shared.log)(&format!(
                "Metadata v{version} response not read for the quota callback: {err}"
            ));
            return;
        }
    };
    for d in doors {
        let mut own = metadata.clone();
        if shared.doors.is_some() {
            own.local_broker = (d.broker >= 0).then_some(d.broker);
        }
        {
            let mut told = lock(&d.told);
            if told.as_ref() == Some(&own) {
                continue;
            }
            *told = Some(own.clone());
        }
        if let Err(err) = update_cluster_metadata(&d.managers.each(), &own) {
            (shared.log)(&format!("quota callback update_cluster_metadata: {err}"));
        }
    }
}

/// Records `request` of `entry` on the quotas and, when throttled, mutes the connection
/// through the manager whose throttle applied (its throttle-time sensor and delay queue).
fn decide(
    shared: &Shared,
    path: &RequestPath<'_>,
    connection: &Connection,
    entry: &Pending,
    request: &Request,
) -> Result<Outcome, Closed> {
    let now = monotonic_ms();
    let client_id = entry.header.client_id();
    let mut outcome = path.record(&entry.user, client_id, request, now)?;
    path.throttle(
        &entry.user,
        client_id,
        &mut outcome,
        now,
        Some(connection.channel),
    )?;
    if let Some(until) = outcome.muted_until_ms {
        connection.mute(until);
    }
    let size = if request.kind == kquota_core::ApiKind::Other {
        0.0
    } else {
        request.bytes
    };
    let thread_ns = request.thread_time_ns.unwrap_or(0.0);
    keep_decision(
        shared, connection, entry, size, thread_ns, outcome, None, now,
    );
    Ok(outcome)
}

/// Keeps a decision for the owner, when it keeps them.
#[allow(clippy::too_many_arguments)]
fn keep_decision(
    shared: &Shared,
    connection: &Connection,
    entry: &Pending,
    size: f64,
    thread_ns: f64,
    outcome: Outcome,
    mutation_throttle_ms: Option<i32>,
    now: i64,
) {
    let Some(kept) = &shared.decisions else {
        return;
    };
    let header = &entry.header;
    let decision = Decision {
        at_ms: now,
        user: entry.user.clone(),
        client_id: header.client_id().to_owned(),
        api_key: header.api_key,
        api_version: header.api_version,
        correlation_id: header.correlation_id,
        follower: entry.fetch.is_some_and(|f| !f.is_consumer()),
        size,
        thread_ns,
        acks: entry.acks,
        outcome,
        mutation_throttle_ms,
        peer: connection.peer,
        broker: connection.broker.load(Ordering::Relaxed),
    };
    let mut kept = lock(kept);
    if kept.len() < MAX_KEPT_DECISIONS {
        kept.push(decision);
    } else {
        shared.dropped_decisions.fetch_add(1, Ordering::Relaxed);
    }
}

/// The broker's response to the request of `header`, and where its body starts.
async fn read_response(
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
async fn send(
    path: &RequestPath<'_>,
    client: &mut OwnedWriteHalf,
    response: &[u8],
    entity: Option<(&str, &str)>,
) -> Result<(), Closed> {
    let started = Instant::now();
    write_frame(client, response).await?;
    if let Some((user, client_id)) = entity {
        path.manager(kquota_core::QuotaType::Request)
            .record_no_throttle(user, client_id, nanos(started.elapsed()), monotonic_ms())?;
    }
    Ok(())
}

/// Writes `frame` with its size prefix, in one write when the socket takes it.
async fn write_frame(to: &mut OwnedWriteHalf, frame: &[u8]) -> io::Result<()> {
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

fn nanos(d: Duration) -> f64 {
    d.as_nanos() as f64
}
