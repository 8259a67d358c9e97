//! The state every connection task shares.

use std::io;
use std::net::SocketAddr;
use std::sync::atomic::{AtomicU64, AtomicUsize};
use std::sync::Arc;

use tokio::sync::{watch, Notify};

use super::decisions::Decisions;
use super::{Log, ProxyConfig};
use crate::gateway::{Route, Routes};

/// The state every connection task shares.
pub(super) struct Shared {
    pub(super) config: ProxyConfig,
    /// The listen port's route: the sidecar's broker, or the gateway's bootstrap.
    pub(super) route: Arc<Route>,
    /// The gateway's brokers (gateway mode only).
    pub(super) routes: Option<Routes>,
    pub(super) log: Log,
    pub(super) closing: watch::Receiver<bool>,
    pub(super) next_channel: AtomicU64,
    pub(super) connections: AtomicUsize,
    pub(super) decisions: Decisions,
    /// Notified when the last connection closes.
    pub(super) idle: Notify,
    pub(super) local_addr: SocketAddr,
    /// Listens on a broker's port and serves its connections through its route: the
    /// proxy's accept loop, given here so that a response naming a new broker can open its
    /// port without this side of the server depending on the listener's.
    pub(super) open_route: OpenRoute,
}

/// See [`Shared::open_route`].
pub(super) type OpenRoute = fn(&Arc<Shared>, &Routes, Arc<Route>, u16) -> io::Result<()>;

impl Shared {
    /// The listen port's route, then a gateway's brokers'.
    pub(super) fn all_routes(&self) -> Vec<Arc<Route>> {
        let mut all = vec![Arc::clone(&self.route)];
        if let Some(routes) = &self.routes {
            all.extend(routes.all());
        }
        all
    }
}
