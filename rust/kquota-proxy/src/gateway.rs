//! Gateway mode: the proxy in front of a whole cluster, with no change to its brokers.
//!
//! The proxy listens on a bootstrap port and gives each broker a port of its own
//! (`first_port + node id`, the scheme of the common Kafka proxies), and rewrites every
//! broker address a response names (see [`crate::addresses`]) to the broker's port on the
//! proxy, so a client only ever connects through it. A broker gets its port the first time
//! a response names it, before that response reaches the client, so new brokers join while
//! clients run; a broker that restarts keeps its port.
//!
//! Each broker has a route: its port, its address upstream, and its own quota managers
//! (siblings sharing one configuration), because each Kafka broker enforces the quotas on
//! its own traffic only. A connection to the bootstrap port is relayed to the bootstrap
//! address and counts on the route of the broker found there, once a response has named it.

use std::collections::{HashMap, HashSet};
use std::net::{IpAddr, SocketAddr};
use std::sync::{Arc, Mutex};

use kquota_core::ClusterMetadata;

use crate::broker_time::BrokerTimes;
use crate::lock;
use crate::managers::Managers;

/// How the gateway numbers its ports and what it tells clients.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct GatewayConfig {
    /// The host clients are told each broker is at (the proxy's, as clients reach it).
    pub advertised_host: String,
    /// Broker node id `n` is served on `first_port + n`.
    pub first_port: u16,
    /// How many ports from `first_port` the gateway may take: node ids `0..ports`.
    pub ports: u16,
}

impl GatewayConfig {
    /// The port of broker `node_id`, if its id is in the range.
    pub fn port_of(&self, node_id: i32) -> Option<u16> {
        let offset = u16::try_from(node_id).ok().filter(|n| *n < self.ports)?;
        self.first_port.checked_add(offset)
    }

    /// Checks the range fits in the port numbers (and is not empty).
    pub fn check(&self) -> Result<(), String> {
        if self.ports == 0 || self.first_port == 0 {
            return Err(format!(
                "invalid broker ports {}+{}: expected a first port > 0 and at least one port",
                self.first_port, self.ports
            ));
        }
        if u32::from(self.first_port) + u32::from(self.ports) - 1 > u32::from(u16::MAX) {
            return Err(format!(
                "invalid broker ports {}-{}: the last port is above 65535",
                self.first_port,
                u32::from(self.first_port) + u32::from(self.ports) - 1
            ));
        }
        if self.advertised_host.is_empty() {
            return Err("invalid advertised host \"\": expected a host name or IP".to_owned());
        }
        Ok(())
    }
}

/// A port of the proxy and where its connections go.
pub(crate) struct Route {
    /// The broker's node id; -1 for the sidecar's one broker and the gateway's bootstrap.
    pub(crate) broker: i32,
    /// `host:port` upstream (a comma-separated list for a bootstrap).
    upstream: Mutex<String>,
    pub(crate) managers: Managers,
    /// The cluster metadata its quota callback was last told of.
    pub(crate) told: Mutex<Option<ClusterMetadata>>,
    /// The broker's round trips, for the estimate of its handler time on a request.
    pub(crate) broker_times: Mutex<BrokerTimes>,
}

impl Route {
    pub(crate) fn new(broker: i32, upstream: String, managers: Managers) -> Self {
        Route {
            broker,
            upstream: Mutex::new(upstream),
            managers,
            told: Mutex::new(None),
            broker_times: Mutex::new(BrokerTimes::new()),
        }
    }

    pub(crate) fn upstream(&self) -> String {
        lock(&self.upstream).clone()
    }
}

/// What a response told the gateway of one broker.
pub(crate) enum BrokerChange {
    /// Known, at the same address.
    Known,
    /// Known, and its address changed (now set).
    Moved,
    /// New: its route was made and its port opened.
    Opened,
}

/// The gateway's brokers: one route each, by node id.
pub(crate) struct Routes {
    pub(crate) config: GatewayConfig,
    /// The IP the brokers' ports are bound on (the bootstrap port's).
    pub(crate) listen_ip: IpAddr,
    by_id: Mutex<HashMap<i32, Arc<Route>>>,
    /// Node ids above the port range, already logged.
    without_port: Mutex<HashSet<i32>>,
}

impl Routes {
    pub(crate) fn new(config: GatewayConfig, listen_ip: IpAddr) -> Self {
        Routes {
            config,
            listen_ip,
            by_id: Mutex::new(HashMap::new()),
            without_port: Mutex::new(HashSet::new()),
        }
    }

    /// Broker `node_id` is at `upstream`: a new one's route is made with `managers()` and
    /// its port opened with `open` before any other response can name it (under the
    /// lock), so no client is told of a port that is not listening yet; a route whose port
    /// cannot be opened is not kept (a later response tries again).
    pub(crate) fn learn(
        &self,
        node_id: i32,
        upstream: &str,
        managers: impl FnOnce() -> kquota_core::Result<Managers>,
        open: impl FnOnce(Arc<Route>) -> std::io::Result<()>,
    ) -> Result<BrokerChange, String> {
        let mut by_id = lock(&self.by_id);
        if let Some(route) = by_id.get(&node_id) {
            let mut at = lock(&route.upstream);
            if *at == upstream {
                return Ok(BrokerChange::Known);
            }
            upstream.clone_into(&mut at);
            return Ok(BrokerChange::Moved);
        }
        let managers = managers().map_err(|err| err.to_string())?;
        let route = Arc::new(Route::new(node_id, upstream.to_owned(), managers));
        open(Arc::clone(&route)).map_err(|err| format!("cannot listen on its port: {err}"))?;
        by_id.insert(node_id, route);
        Ok(BrokerChange::Opened)
    }

    /// Whether broker `node_id`, which has no port, is named for the first time (its
    /// warning is logged once).
    pub(crate) fn first_without_port(&self, node_id: i32) -> bool {
        lock(&self.without_port).insert(node_id)
    }

    /// The route of the broker at `upstream` (`host:port` as responses name it, or the
    /// address a connection reached), if any.
    pub(crate) fn at(&self, upstream: &str, reached: Option<SocketAddr>) -> Option<Arc<Route>> {
        let reached = reached.map(|a| a.to_string());
        lock(&self.by_id)
            .values()
            .find(|d| {
                let at = d.upstream();
                at == upstream || reached.as_deref() == Some(at.as_str())
            })
            .cloned()
    }

    /// Every route, for the maintenance of their managers.
    pub(crate) fn all(&self) -> Vec<Arc<Route>> {
        lock(&self.by_id).values().cloned().collect()
    }

    /// Each broker's managers (shared with its route), by node id.
    pub(crate) fn managers(&self) -> Vec<(i32, Managers)> {
        let mut managers: Vec<_> = lock(&self.by_id)
            .values()
            .map(|d| (d.broker, d.managers.clone()))
            .collect();
        managers.sort_unstable_by_key(|(node_id, _)| *node_id);
        managers
    }

    /// The brokers' ports on the proxy, by node id.
    pub(crate) fn ports(&self) -> Vec<(i32, String, u16)> {
        let mut ports: Vec<_> = lock(&self.by_id)
            .values()
            .filter_map(|d| Some((d.broker, d.upstream(), self.config.port_of(d.broker)?)))
            .collect();
        ports.sort_unstable();
        ports
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn config(first_port: u16, ports: u16) -> GatewayConfig {
        GatewayConfig {
            advertised_host: "127.0.0.1".to_owned(),
            first_port,
            ports,
        }
    }

    #[test]
    fn a_broker_port_is_the_first_port_plus_its_id() {
        let c = config(9300, 100);
        assert_eq!(c.port_of(0), Some(9300));
        assert_eq!(c.port_of(99), Some(9399));
        assert_eq!(c.port_of(100), None);
        assert_eq!(c.port_of(-1), None);
        assert!(c.check().is_ok());
        assert!(config(65500, 100).check().unwrap_err().contains("65599"));
        assert!(config(9300, 0).check().is_err());
        assert!(config(65436, 100).check().is_ok());
    }

    fn managers() -> kquota_core::Result<Managers> {
        use kquota_core::{QuotaManager, QuotaType};
        let m = |t| Arc::new(QuotaManager::with_defaults(t));
        Managers::new(
            m(QuotaType::Produce),
            m(QuotaType::Fetch),
            m(QuotaType::Request),
        )
    }

    #[test]
    fn a_broker_is_learned_once_and_follows_its_address() {
        let routes = Routes::new(config(9300, 10), "127.0.0.1".parse().unwrap());
        let refused = routes.learn(2, "kafka-2:9092", managers, |_| {
            Err(std::io::ErrorKind::AddrInUse.into())
        });
        assert!(refused.is_err_and(|err| err.contains("cannot listen")));
        assert!(
            routes.all().is_empty(),
            "a route whose port is not open is not kept"
        );
        let mut opened = None;
        let learned = routes.learn(2, "kafka-2:9092", managers, |route| {
            opened = Some(route);
            Ok(())
        });
        assert!(matches!(learned, Ok(BrokerChange::Opened)));
        let route = opened.expect("its port opened");
        assert_eq!(
            (route.broker, route.upstream()),
            (2, "kafka-2:9092".to_owned())
        );
        assert!(matches!(
            routes.learn(
                2,
                "kafka-2:9092",
                || unreachable!("known"),
                |_| unreachable!()
            ),
            Ok(BrokerChange::Known)
        ));
        assert!(matches!(
            routes.learn(
                2,
                "kafka-2b:9092",
                || unreachable!("known"),
                |_| unreachable!()
            ),
            Ok(BrokerChange::Moved)
        ));
        assert_eq!(route.upstream(), "kafka-2b:9092");
        assert!(routes
            .at("kafka-2b:9092", None)
            .is_some_and(|d| d.broker == 2));
        let reached: SocketAddr = "10.0.0.2:9092".parse().unwrap();
        assert!(routes.at("elsewhere:1", Some(reached)).is_none());
        assert_eq!(routes.ports(), vec![(2, "kafka-2b:9092".to_owned(), 9302)]);
        let listed = routes.managers();
        assert_eq!(listed.len(), 1);
        assert_eq!(listed[0].0, 2);
        for (read, recorded) in listed[0]
            .1
            .quota_managers()
            .into_iter()
            .zip(route.managers.quota_managers())
        {
            assert!(Arc::ptr_eq(read, recorded), "the route's own managers");
        }
        assert!(routes.first_without_port(200));
        assert!(!routes.first_without_port(200));
    }
}
