//! The state every connection task shares.

use std::io;
use std::net::SocketAddr;
use std::sync::atomic::{AtomicU64, AtomicUsize};
use std::sync::Arc;

use tokio::sync::{watch, Notify};

use super::decisions::Decisions;
use super::{Log, ProxyConfig};
use crate::gateway::{Door, Doors};

/// The state every connection task shares.
pub(super) struct Shared {
    pub(super) config: ProxyConfig,
    /// The listen port's door: the sidecar's broker, or the gateway's bootstrap.
    pub(super) door: Arc<Door>,
    /// The gateway's brokers (gateway mode only).
    pub(super) doors: Option<Doors>,
    pub(super) log: Log,
    pub(super) closing: watch::Receiver<bool>,
    pub(super) next_channel: AtomicU64,
    pub(super) connections: AtomicUsize,
    pub(super) decisions: Decisions,
    /// Notified when the last connection closes.
    pub(super) idle: Notify,
    pub(super) local_addr: SocketAddr,
    /// Listens on a broker's port and serves its connections through its door: the
    /// proxy's accept loop, given here so that a response naming a new broker can open its
    /// port without this side of the server depending on the listener's.
    pub(super) open_door: OpenDoor,
}

/// See [`Shared::open_door`].
pub(super) type OpenDoor = fn(&Arc<Shared>, &Doors, Arc<Door>, u16) -> io::Result<()>;

impl Shared {
    /// The listen port's door, then a gateway's brokers'.
    pub(super) fn all_doors(&self) -> Vec<Arc<Door>> {
        let mut all = vec![Arc::clone(&self.door)];
        if let Some(doors) = &self.doors {
            all.extend(doors.all());
        }
        all
    }
}
