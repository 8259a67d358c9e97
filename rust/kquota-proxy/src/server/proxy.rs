//! The running proxy: its listeners, the accept loop (KIP-612's admission on accept),
//! each connection's task (its reader and responder run together), the maintenance of the
//! managers' delay queues and sensors, each broker's probe, and shutdown.

use std::io;
use std::net::SocketAddr;
use std::sync::atomic::{AtomicU64, AtomicUsize, Ordering};
use std::sync::Arc;
use std::time::Duration;

use kquota_core::{monotonic_ms, Maintenance};
use tokio::net::{TcpListener, TcpStream};
use tokio::runtime::Runtime;
use tokio::sync::{mpsc, watch, Notify};

use super::connection::Connection;
use super::decisions::{Decision, Decisions};
use super::probe::probe;
use super::reader::read_requests;
use super::responder::respond;
use super::shared::Shared;
use super::transport::connect;
use super::{Log, ProxyConfig, PIPELINE_DEPTH};
use crate::error::Closed;
use crate::gateway::{Route, Routes};
use crate::managers::Managers;

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
                .check_for_other_brokers()
                .map_err(|err| io::Error::new(io::ErrorKind::InvalidInput, err.to_string()))?;
        }
        let listener = runtime.block_on(TcpListener::bind(listen))?;
        let local_addr = listener.local_addr()?;
        let (closing, closing_rx) = watch::channel(false);
        let route = Arc::new(Route::new(-1, config.upstream.clone(), managers));
        let routes = config
            .gateway
            .clone()
            .map(|gateway| Routes::new(gateway, local_addr.ip()));
        let shared = Arc::new(Shared {
            config,
            route: Arc::clone(&route),
            routes,
            log,
            closing: closing_rx,
            next_channel: AtomicU64::new(1),
            connections: AtomicUsize::new(0),
            decisions: Decisions::new(keep_decisions),
            idle: Notify::new(),
            local_addr,
            open_route,
        });
        runtime.spawn(probe(Arc::clone(&shared), Arc::clone(&route)));
        runtime.spawn(accept(Arc::clone(&shared), listener, route));
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
            .routes
            .as_ref()
            .map_or_else(Vec::new, Routes::ports)
    }

    /// The managers of each broker a gateway serves, by node id (empty for a sidecar):
    /// the ones its port's connections record on, shared, not copies.
    pub fn broker_managers(&self) -> Vec<(i32, Managers)> {
        self.shared
            .routes
            .as_ref()
            .map_or_else(Vec::new, Routes::managers)
    }

    /// Client connections open now.
    pub fn connections(&self) -> usize {
        self.shared.connections.load(Ordering::Acquire)
    }

    /// The decisions made since the last call, in the order they were made (empty unless
    /// the proxy keeps them).
    pub fn take_decisions(&self) -> Vec<Decision> {
        self.shared.decisions.take()
    }

    /// Connections closed unread because their IP was over its `connection_creation_rate`
    /// (on every port of a gateway).
    pub fn ip_throttled_connections(&self) -> u64 {
        self.shared
            .all_routes()
            .iter()
            .filter_map(|route| route.managers.admission())
            .map(|a| a.ip_throttled())
            .sum()
    }

    /// Decisions dropped because [`super::MAX_KEPT_DECISIONS`] were waiting to be taken.
    pub fn dropped_decisions(&self) -> u64 {
        self.shared.decisions.dropped()
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

async fn accept(shared: Arc<Shared>, listener: TcpListener, route: Arc<Route>) {
    let mut closing = shared.closing.clone();
    loop {
        let accepted = tokio::select! {
            accepted = listener.accept() => accepted,
            _ = closing.wait_for(|closing| *closing) => return,
        };
        match accepted {
            Ok((client, peer)) => {
                let ip = peer.ip().to_string();
                let throttle = match route.managers.admission() {
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
                    Arc::clone(&route),
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
/// mute; the queues are Kafka's `queue-size`) and expires idle sensors on the core's
/// timetable ([`Maintenance`]: at once, then every 30 s). Every round drains: it is cheap,
/// and a mute queued since the last round may end before the one this round waited for.
async fn maintain(shared: Arc<Shared>) {
    let mut schedule = Maintenance::new();
    loop {
        let now = monotonic_ms();
        let expire = schedule.due(now, None).expire;
        let next_unmute = shared
            .all_routes()
            .iter()
            .filter_map(|route| route.managers.maintain(now, expire))
            .min();
        if expire {
            schedule.expired(now);
        }
        let due = schedule.next_due_ms(next_unmute).unwrap_or(now);
        let wait = Duration::from_millis((due - monotonic_ms()).clamp(1, 1000) as u64);
        let mut closing = shared.closing.clone();
        tokio::select! {
            () = tokio::time::sleep(wait) => {}
            _ = closing.wait_for(|closing| *closing) => return,
        }
    }
}

/// Serves one connection; one its IP's rate throttled (`ip_throttle_ms` > 0) is held for
/// that long and closed, unread.
async fn serve(
    shared: Arc<Shared>,
    route: Arc<Route>,
    client: TcpStream,
    peer: SocketAddr,
    ip_throttle_ms: i32,
) {
    let connection = Connection::new(
        shared.next_channel.fetch_add(1, Ordering::Relaxed),
        peer,
        route.broker,
    );
    if !*shared.closing.borrow() && admitted(&shared, ip_throttle_ms).await {
        if let Err(err) = relay(&shared, route, &connection, client).await {
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

/// Relays one admitted connection: connects upstream, then runs its reader and responder
/// until both end, one fails, or the connection is idle too long.
async fn relay(
    shared: &Arc<Shared>,
    route: Arc<Route>,
    connection: &Connection,
    client: TcpStream,
) -> Result<(), Closed> {
    let to = route.upstream();
    let (upstream, reached) = connect(&shared.config, &to).await?;
    // A gateway's bootstrap connection counts on the route of the broker it reached.
    let route = match &shared.routes {
        Some(routes) if route.broker < 0 => routes
            .at(reached, upstream.peer_addr().ok())
            .unwrap_or(route),
        _ => route,
    };
    connection.broker.store(route.broker, Ordering::Relaxed);
    client.set_nodelay(true)?;
    upstream.set_nodelay(true)?;
    let (client_read, client_write) = client.into_split();
    let (upstream_read, upstream_write) = upstream.into_split();
    // At most PIPELINE_DEPTH requests are in flight, so the queue never fills.
    let (forwarded, pending) = mpsc::channel(PIPELINE_DEPTH + 1);
    let reader = read_requests(
        shared,
        &route,
        connection,
        client_read,
        upstream_write,
        forwarded,
    );
    let responder = respond(
        shared,
        &route,
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

/// Listens on a broker's port and serves its connections through `route`.
fn open_route(
    shared: &Arc<Shared>,
    routes: &Routes,
    route: Arc<Route>,
    port: u16,
) -> io::Result<()> {
    let listener = std::net::TcpListener::bind((routes.listen_ip, port))?;
    listener.set_nonblocking(true)?;
    let listener = TcpListener::from_std(listener)?;
    tokio::spawn(probe(Arc::clone(shared), Arc::clone(&route)));
    tokio::spawn(accept(Arc::clone(shared), listener, route));
    Ok(())
}
