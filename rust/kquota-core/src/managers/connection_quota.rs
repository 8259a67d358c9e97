//! [`ConnectionQuotas`]: the connection-creation-rate parts of Kafka's `ConnectionQuotas`
//! (KIP-612): the broker-wide and per-listener `max.connection.creation.rate` (the
//! acceptor waits before accepting) and the per-IP `connection_creation_rate` with IP
//! overrides and a `<default>` IP quota (the connection is accepted, then closed after
//! the throttle). The arithmetic and the record/take-back protocol are in
//! [`crate::kafka::connection_rate`]; connection *counts* (`max.connections`,
//! `max.connections.per.ip`) are not modelled here.
//!
//! Lock-free: the configuration (IP quotas, listener and broker limits) is one
//! copy-on-write snapshot with a generation; every rate sensor picks up the bound of the
//! current generation on its next record (so an update is effective at once and a
//! sensor never keeps a stale bound); per-IP sensors live in a lock-free map and expire
//! after an hour without a connection, as Kafka's do. Broker and listener sensors never
//! expire (a listener's go when it is removed).
//!
//! [`ConnectionQuotas::for_another_broker`] gives another broker of the same cluster: the same
//! configuration, shared, and sensors of its own, because each Kafka broker counts only
//! the connections it accepts.

use std::collections::HashMap;
use std::net::IpAddr;
use std::sync::atomic::{
    AtomicBool, AtomicI64,
    Ordering::{Relaxed, Release},
};
use std::sync::Arc;

use crate::error::{Error, Result};
use crate::kafka::broker::check_window_seconds;
use crate::kafka::connection_rate::{self, ConnectionRateSensor, UNLIMITED_CONNECTION_RATE};
use crate::kafka::ip::canonical_ip;
pub use crate::kafka::ip::host_address;
use crate::kafka::quota::Check;
use crate::kafka::rate_cell::{Bound, BoundSource, RateCell};
use crate::kafka::samples::{Samples, WindowConfig};
use crate::kafka::sensor::DEFAULT_SENSOR_EXPIRY_MS;
use crate::sync::cow::{pin, CowCell, Guard};

type Map<K, V> = crate::sync::hash_map::HashMap<K, V, foldhash::fast::RandomState>;

/// Kafka's sensor-name prefix of connection-rate sensors.
const SENSOR_PREFIX: &str = "Connection-Accept-Rate";

fn check_rate(what: &str, rate: i64, min: i64) -> Result<i32> {
    if (min..=i64::from(i32::MAX)).contains(&rate) {
        Ok(rate as i32)
    } else {
        Err(Error::InvalidUsage(format!(
            "invalid {what} {rate}: it must be a whole number of connections per second \
             from {min} to {}",
            i32::MAX
        )))
    }
}

/// A listener's sensors.
struct Listener {
    rate: RateCell,
    /// `connection-accept-throttle-time` (broker/listener delays > 0).
    throttle_avg: CowCell<Samples>,
    /// `ip-connection-accept-throttle-time` (IP throttles > 0).
    ip_throttle_avg: CowCell<Samples>,
}

impl Listener {
    fn new() -> Self {
        Listener {
            rate: ConnectionQuotas::unbounded_cell(),
            throttle_avg: CowCell::new(Samples::new()),
            ip_throttle_avg: CowCell::new(Samples::new()),
        }
    }
}

#[derive(Clone)]
struct ListenerConfig {
    max_rate: i32,
    /// Unique to this registration: a listener removed and added again gets new sensors.
    id: u64,
}

#[derive(Clone)]
struct Config {
    generation: u64,
    default_ip_rate: i32,
    ip_rates: HashMap<IpAddr, i32>,
    broker_rate: i32,
    listeners: HashMap<String, ListenerConfig>,
}

impl Config {
    /// `connectionRateForIp`.
    fn rate_for_ip(&self, ip: &IpAddr) -> i32 {
        self.ip_rates
            .get(ip)
            .copied()
            .unwrap_or(self.default_ip_rate)
    }
}

/// A per-IP sensor.
struct IpSensor {
    rate: RateCell,
    last_record: AtomicI64,
    removed: AtomicBool,
}

/// A rate cell with the bound of the configuration generation in force.
struct Bounded<'a> {
    cell: &'a RateCell,
    window: &'a WindowConfig,
    generation: u64,
    bound: f64,
    guard: &'a Guard,
}

impl ConnectionRateSensor for Bounded<'_> {
    fn record_checked(&self, value: f64, t: i64) -> Check {
        self.record(value, t, true)
    }

    fn record_unchecked(&self, value: f64, t: i64) {
        self.record(value, t, false);
    }
}

impl Bounded<'_> {
    fn record(&self, value: f64, t: i64, check: bool) -> Check {
        let bound = self.bound;
        let source = BoundSource::Generation {
            generation: self.generation,
            compute: move || Some(bound),
        };
        self.cell
            .record(self.window, value, t, check, &source, self.guard)
    }
}

/// What the broker does with a new connection.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct ConnectionDecision {
    /// How long the acceptor waits before accepting (broker / listener rate), >= 0.
    pub accept_delay_ms: i32,
    /// 0: admitted. Positive: the IP is over its rate; the connection is accepted and
    /// closed after this many ms (Kafka's `ConnectionThrottledException`).
    pub ip_throttle_ms: i32,
}

/// Kafka's connection-creation-rate quotas of one broker. Safe to share between threads.
pub struct ConnectionQuotas {
    window: WindowConfig,
    inter_broker_listener: Option<String>,
    ip_sensor_expiry_ms: i64,
    /// Shared with the siblings: one cluster's configuration.
    config: Arc<CowCell<Config>>,
    broker: RateCell,
    /// This broker's listener sensors, by registration id (made at first use).
    listener_sensors: Map<u64, Arc<Listener>>,
    ips: Map<IpAddr, Arc<IpSensor>>,
}

impl ConnectionQuotas {
    /// Quotas measured over `window` (`quota.window.num` x `quota.window.size.seconds`,
    /// a whole number of seconds: the throttle cap is one window), with a broker-wide
    /// `max.connection.creation.rate` of `broker_max_rate` (0 to `i32::MAX`, the default
    /// meaning unlimited) and the inter-broker listener's name.
    pub fn new(
        window: WindowConfig,
        broker_max_rate: i64,
        inter_broker_listener: Option<&str>,
    ) -> Result<Self> {
        check_window_seconds(window.window_ms())?;
        let broker_rate = check_rate("max.connection.creation.rate", broker_max_rate, 0)?;
        Ok(ConnectionQuotas {
            window,
            inter_broker_listener: inter_broker_listener.map(str::to_owned),
            ip_sensor_expiry_ms: DEFAULT_SENSOR_EXPIRY_MS,
            config: Arc::new(CowCell::new(Config {
                generation: 0,
                default_ip_rate: UNLIMITED_CONNECTION_RATE,
                ip_rates: HashMap::new(),
                broker_rate,
                listeners: HashMap::new(),
            })),
            broker: Self::unbounded_cell(),
            listener_sensors: Map::default(),
            ips: Map::default(),
        })
    }

    /// Another broker of the cluster: it shares these quotas' configuration (IP quotas,
    /// the broker-wide and listener limits, the listeners; a change through either is
    /// seen by both at once) and counts its own connections, on sensors of its own, as
    /// each Kafka broker does.
    pub fn for_another_broker(&self) -> Self {
        ConnectionQuotas {
            window: self.window,
            inter_broker_listener: self.inter_broker_listener.clone(),
            ip_sensor_expiry_ms: self.ip_sensor_expiry_ms,
            config: Arc::clone(&self.config),
            broker: Self::unbounded_cell(),
            listener_sensors: Map::default(),
            ips: Map::default(),
        }
    }

    fn unbounded_cell() -> RateCell {
        RateCell::new(Bound {
            value: None,
            generation: u64::MAX,
        })
    }

    /// Kafka's defaults: 11 x 1 s windows, no broker-wide limit, no inter-broker listener.
    pub fn with_defaults() -> Self {
        Self::new(
            WindowConfig::QUOTA_DEFAULT,
            i64::from(UNLIMITED_CONNECTION_RATE),
            None,
        )
        .expect("Kafka's defaults are valid")
    }

    /// The sample windows of every connection-rate sensor.
    pub fn window(&self) -> WindowConfig {
        self.window
    }

    fn update(&self, f: impl Fn(&mut Config)) {
        self.config.update(&pin(), |c| {
            f(c);
            c.generation += 1;
        });
    }

    // -- configuration ---------------------------------------------------------------

    /// Sets (`Some`) or removes (`None`) the `connection_creation_rate` of `ip`, or of the
    /// `<default>` IP when `ip` is `None` (Kafka's `updateIpConnectionRateQuota`). A rate
    /// is a whole number from 1 to `i32::MAX` (as Kafka's controller accepts it);
    /// `i32::MAX` is Kafka's "unlimited" and turns the IP's measurement off.
    pub fn set_ip_quota(&self, ip: Option<&str>, rate: Option<i64>) -> Result<()> {
        let ip = ip.map(canonical_ip).transpose()?;
        let rate = rate
            .map(|r| check_rate("connection_creation_rate", r, 1))
            .transpose()?;
        self.update(|c| match (ip, rate) {
            (Some(ip), Some(r)) => {
                c.ip_rates.insert(ip, r);
            }
            (Some(ip), None) => {
                c.ip_rates.remove(&ip);
            }
            (None, r) => c.default_ip_rate = r.unwrap_or(UNLIMITED_CONNECTION_RATE),
        });
        Ok(())
    }

    /// The rate that applies to `ip` now (`connectionRateForIp`): its override, else the
    /// default IP quota, else `i32::MAX` (unlimited).
    pub fn ip_quota(&self, ip: &str) -> Result<i32> {
        let ip = canonical_ip(ip)?;
        Ok(self.config.read(&pin(), |c| c.rate_for_ip(&ip)))
    }

    /// Every IP override, and the default IP quota if one is set.
    pub fn ip_quotas(&self) -> (Vec<(String, i32)>, Option<i32>) {
        self.config.read(&pin(), |c| {
            let mut ips: Vec<(String, i32)> = c
                .ip_rates
                .iter()
                .map(|(ip, r)| (host_address(ip), *r))
                .collect();
            ips.sort();
            let default =
                (c.default_ip_rate != UNLIMITED_CONNECTION_RATE).then_some(c.default_ip_rate);
            (ips, default)
        })
    }

    /// Sets the broker-wide `max.connection.creation.rate` (0 to `i32::MAX`).
    pub fn set_broker_max_rate(&self, rate: i64) -> Result<()> {
        let rate = check_rate("max.connection.creation.rate", rate, 0)?;
        self.update(|c| c.broker_rate = rate);
        Ok(())
    }

    /// The broker-wide `max.connection.creation.rate`.
    pub fn broker_max_rate(&self) -> i32 {
        self.config.read(&pin(), |c| c.broker_rate)
    }

    /// Registers a listener with its effective `max.connection.creation.rate` (its
    /// `listener.name.<name>.` override, else the broker-wide value; `None` = unlimited).
    /// Adding a listener that exists changes nothing (as Kafka's `addListener`).
    pub fn add_listener(&self, name: &str, max_rate: Option<i64>) -> Result<()> {
        let rate = max_rate
            .map(|r| check_rate("max.connection.creation.rate", r, 0))
            .transpose()?
            .unwrap_or(UNLIMITED_CONNECTION_RATE);
        let name = name.to_owned();
        self.update(|c| {
            // The new generation: no other registration has it.
            let id = c.generation + 1;
            c.listeners
                .entry(name.clone())
                .or_insert(ListenerConfig { max_rate: rate, id });
        });
        Ok(())
    }

    /// Reconfigures a listener's `max.connection.creation.rate` (1 to `i32::MAX`; `None`
    /// removes the limit), as Kafka's `ListenerConnectionQuota.reconfigure`.
    pub fn set_listener_max_rate(&self, name: &str, max_rate: Option<i64>) -> Result<()> {
        let rate = max_rate
            .map(|r| check_rate("max.connection.creation.rate", r, 1))
            .transpose()?
            .unwrap_or(UNLIMITED_CONNECTION_RATE);
        self.known_listener(name)?;
        self.update(|c| {
            if let Some(l) = c.listeners.get_mut(name) {
                l.max_rate = rate;
            }
        });
        Ok(())
    }

    /// Removes a listener and its sensors (a sibling's go at its next
    /// [`expire_sensors`](Self::expire_sensors)); true if it existed.
    pub fn remove_listener(&self, name: &str) -> bool {
        let mut removed = None;
        self.config.update(&pin(), |c| {
            removed = c.listeners.remove(name).map(|l| l.id);
            if removed.is_some() {
                c.generation += 1;
            }
        });
        if let Some(id) = removed {
            self.listener_sensors.pin().remove_if(&id, |_, _| true);
        }
        removed.is_some()
    }

    /// The registered listeners and their limits, sorted by name.
    pub fn listeners(&self) -> Vec<(String, i32)> {
        self.config.read(&pin(), |c| {
            let mut all: Vec<(String, i32)> = c
                .listeners
                .iter()
                .map(|(n, l)| (n.clone(), l.max_rate))
                .collect();
            all.sort();
            all
        })
    }

    fn known_listener(&self, name: &str) -> Result<()> {
        self.config.read(&pin(), |c| {
            if c.listeners.contains_key(name) {
                Ok(())
            } else {
                let mut known: Vec<&String> = c.listeners.keys().collect();
                known.sort();
                Err(Error::InvalidUsage(format!(
                    "unknown listener {name:?}: add it first (listeners: {known:?})"
                )))
            }
        })
    }

    /// Kafka's `protectedListener`: the inter-broker listener while there are several.
    fn protected(&self, config: &Config, listener: &str) -> bool {
        self.inter_broker_listener.as_deref() == Some(listener) && config.listeners.len() > 1
    }

    // -- the accept path -------------------------------------------------------------

    fn max_throttle_ms(&self) -> i64 {
        self.window.window_ms()
    }

    fn listener_of<'c>(config: &'c Config, name: &str) -> Result<&'c ListenerConfig> {
        config.listeners.get(name).ok_or_else(|| {
            let mut known: Vec<&String> = config.listeners.keys().collect();
            known.sort();
            Error::InvalidUsage(format!(
                "unknown listener {name:?}: add it first (listeners: {known:?})"
            ))
        })
    }

    /// The acceptor's delay for a new connection on `listener` at `now` (Kafka's
    /// `recordConnectionAndGetThrottleTimeMs`): records it in the broker-wide sensor
    /// (unless the listener is the protected inter-broker one) and the listener's, and
    /// returns the larger throttle (>= 0) after which the connection is accepted.
    pub fn accept_delay(&self, listener: &str, now: i64) -> Result<i32> {
        let guard = pin();
        let config = self.config.load(&guard);
        let l = Self::listener_of(config, listener)?;
        let sensors = self.sensors_of(l);
        let broker =
            (!self.protected(config, listener)).then(|| self.broker_sensor(config, &guard));
        let listener_sensor = self.bounded(&sensors.rate, config, l.max_rate, &guard);
        let delay = connection_rate::accept_delay(
            broker.as_ref(),
            &listener_sensor,
            now,
            self.max_throttle_ms(),
        );
        if delay > 0 {
            sensors.throttle_avg.update(&guard, |s| {
                s.record(&WindowConfig::METRICS_DEFAULT, f64::from(delay), now)
            });
        }
        Ok(delay)
    }

    /// The IP check of a connection at `now`, after the acceptor's delay (Kafka's
    /// `recordIpConnectionMaybeThrottle`): 0 = admitted; > 0 = the IP is over its rate,
    /// the connection was taken back out of the rates and is to be closed after that
    /// many ms. IPs whose quota is unlimited are not measured.
    pub fn admit_ip(&self, listener: &str, ip: &str, now: i64) -> Result<i32> {
        let addr = canonical_ip(ip)?;
        let guard = pin();
        let config = self.config.load(&guard);
        let l = Self::listener_of(config, listener)?;
        let quota = config.rate_for_ip(&addr);
        if quota == UNLIMITED_CONNECTION_RATE {
            return Ok(0);
        }
        let sensors = self.sensors_of(l);
        let sensor = self.ip_sensor(addr, now);
        sensor.last_record.store(now, Relaxed);
        let ip_sensor = self.bounded(&sensor.rate, config, quota, &guard);
        let broker =
            (!self.protected(config, listener)).then(|| self.broker_sensor(config, &guard));
        let listener_sensor = self.bounded(&sensors.rate, config, l.max_rate, &guard);
        let throttle = connection_rate::admit_ip(
            &ip_sensor,
            broker.as_ref(),
            &listener_sensor,
            now,
            self.max_throttle_ms(),
        );
        if throttle > 0 {
            sensors.ip_throttle_avg.update(&guard, |s| {
                s.record(&WindowConfig::METRICS_DEFAULT, f64::from(throttle), now)
            });
        }
        Ok(throttle)
    }

    /// Both steps of Kafka's `ConnectionQuotas.inc` for a connection arriving at `now`:
    /// the acceptor's delay, then the IP check at `now + delay` (when the acceptor,
    /// having waited, goes on).
    pub fn on_new_connection(
        &self,
        listener: &str,
        ip: &str,
        now: i64,
    ) -> Result<ConnectionDecision> {
        canonical_ip(ip)?;
        let accept_delay_ms = self.accept_delay(listener, now)?;
        let ip_throttle_ms = self.admit_ip(listener, ip, now + i64::from(accept_delay_ms))?;
        Ok(ConnectionDecision {
            accept_delay_ms,
            ip_throttle_ms,
        })
    }

    fn bounded<'a>(
        &'a self,
        cell: &'a RateCell,
        config: &Config,
        rate: i32,
        guard: &'a Guard,
    ) -> Bounded<'a> {
        Bounded {
            cell,
            window: &self.window,
            generation: config.generation,
            bound: f64::from(rate),
            guard,
        }
    }

    /// This broker's sensors of a registered listener.
    fn sensors_of(&self, listener: &ListenerConfig) -> Arc<Listener> {
        self.listener_sensors
            .pin()
            .get_or_insert_with(listener.id, || Arc::new(Listener::new()))
            .clone()
    }

    fn broker_sensor<'a>(&'a self, config: &Config, guard: &'a Guard) -> Bounded<'a> {
        self.bounded(&self.broker, config, config.broker_rate, guard)
    }

    fn ip_sensor(&self, ip: IpAddr, now: i64) -> Arc<IpSensor> {
        let m = self.ips.pin();
        loop {
            let sensor = m
                .get_or_insert_with(ip, || {
                    Arc::new(IpSensor {
                        rate: Self::unbounded_cell(),
                        last_record: AtomicI64::new(now),
                        removed: AtomicBool::new(false),
                    })
                })
                .clone();
            if !sensor.removed.load(Relaxed) {
                return sensor;
            }
            let _ = m.remove_if(&ip, |_, v| Arc::ptr_eq(v, &sensor));
        }
    }

    // -- reading ---------------------------------------------------------------------

    fn measure(&self, cell: &RateCell, now: i64) -> f64 {
        cell.measure(&self.window, now, &pin())
    }

    /// The broker-wide `broker-connection-accept-rate` at `now` (purges, like a metrics read).
    pub fn broker_rate(&self, now: i64) -> f64 {
        self.measure(&self.broker, now)
    }

    /// A listener's `connection-accept-rate` at `now`.
    pub fn listener_rate(&self, listener: &str, now: i64) -> Result<f64> {
        let guard = pin();
        let config = self.config.load(&guard);
        let l = Self::listener_of(config, listener)?;
        Ok(self.measure(&self.sensors_of(l).rate, now))
    }

    /// An IP's `connection-accept-rate` at `now`; `None` when it has no sensor.
    pub fn ip_rate(&self, ip: &str, now: i64) -> Result<Option<f64>> {
        let addr = canonical_ip(ip)?;
        let m = self.ips.pin();
        Ok(m.get(&addr)
            .filter(|s| !s.removed.load(Relaxed))
            .map(|s| self.measure(&s.rate, now)))
    }

    /// The bound an IP's sensor enforces (its metric config's quota): the IP's rate now;
    /// `None` when it has no sensor.
    pub fn ip_bound(&self, ip: &str) -> Result<Option<f64>> {
        let addr = canonical_ip(ip)?;
        let exists = self
            .ips
            .pin()
            .get(&addr)
            .is_some_and(|s| !s.removed.load(Relaxed));
        Ok(exists.then(|| f64::from(self.config.read(&pin(), |c| c.rate_for_ip(&addr)))))
    }

    /// A listener's average broker/listener accept delay (`connection-accept-throttle-time`)
    /// and average IP throttle (`ip-connection-accept-throttle-time`) at `now`; NaN when
    /// there were none in the horizon (2 x 30 s).
    pub fn listener_throttle_avgs(&self, listener: &str, now: i64) -> Result<(f64, f64)> {
        let guard = pin();
        let config = self.config.load(&guard);
        let sensors = self.sensors_of(Self::listener_of(config, listener)?);
        let avg = |c: &CowCell<Samples>| {
            c.update(&guard, |s| {
                s.measure_avg(&WindowConfig::METRICS_DEFAULT, now)
            })
        };
        Ok((avg(&sensors.throttle_avg), avg(&sensors.ip_throttle_avg)))
    }

    /// Kafka names of the live per-IP sensors, sorted.
    pub fn ip_sensor_names(&self) -> Vec<String> {
        let m = self.ips.pin();
        let mut names: Vec<String> = m
            .iter()
            .filter(|(_, s)| !s.removed.load(Relaxed))
            .map(|(ip, _)| format!("{SENSOR_PREFIX}-{}", host_address(ip)))
            .collect();
        names.sort();
        names
    }

    /// Removes the per-IP sensors without a connection for strictly more than an hour;
    /// returns their Kafka names, sorted. (Broker and listener sensors never expire; the
    /// sensors of a listener a sibling removed go here.)
    pub fn expire_sensors(&self, now: i64) -> Vec<String> {
        {
            let live: Vec<u64> = self
                .config
                .read(&pin(), |c| c.listeners.values().map(|l| l.id).collect());
            let sensors = self.listener_sensors.pin();
            let gone: Vec<u64> = sensors
                .iter()
                .map(|(id, _)| *id)
                .filter(|id| !live.contains(id))
                .collect();
            for id in gone {
                sensors.remove_if(&id, |_, _| true);
            }
        }
        let m = self.ips.pin();
        let expiry = self.ip_sensor_expiry_ms;
        let idle = |s: &IpSensor| now.wrapping_sub(s.last_record.load(Relaxed)) > expiry;
        let stale: Vec<(IpAddr, Arc<IpSensor>)> = m
            .iter()
            .filter(|(_, s)| idle(s))
            .map(|(k, s)| (*k, s.clone()))
            .collect();
        let mut names = Vec::new();
        for (ip, sensor) in stale {
            if !idle(&sensor) {
                continue;
            }
            if !sensor.removed.swap(true, Release) {
                names.push(format!("{SENSOR_PREFIX}-{}", host_address(&ip)));
            }
            let _ = m.remove_if(&ip, |_, v| Arc::ptr_eq(v, &sensor));
        }
        names.sort();
        names
    }
}

#[cfg(test)]
mod tests;
