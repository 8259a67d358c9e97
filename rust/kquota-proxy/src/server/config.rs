//! How the proxy reaches its broker and the bounds it keeps, and the rules on the options
//! they are made from: every entry point (the Python `ProxyServer`, the data path's
//! binding, `kquota proxy`) checks its options here, so each rule and its message is
//! written once.

use std::fmt;
use std::net::{IpAddr, SocketAddr, ToSocketAddrs};
use std::time::Duration;

use crate::access::AdminAccess;
use crate::admin::SharedAdmin;
use crate::gateway::GatewayConfig;

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

/// The largest request or response frame an option may allow: Kafka's frame size is an
/// `int32`.
const MAX_FRAME_OPTION: i64 = i32::MAX as i64;
/// At most this many threads serve the connections.
const MAX_THREADS: i64 = 256;

/// An option outside its rule: which option, its value as given, and what is expected.
/// Shown as `invalid threads 0: expected 1 to 256`; an entry point with other names for
/// its options (the command line's flags) puts its own name in place of `option`.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct OptionError {
    /// The option's name, as [`ProxyOptions`] spells it (`threads`, `broker_ports`, ...).
    pub option: &'static str,
    /// The value as given (text quoted).
    pub value: String,
    /// What is expected instead, or why the value cannot be used.
    pub reason: String,
}

impl OptionError {
    fn new(option: &'static str, value: impl fmt::Display, reason: impl Into<String>) -> Self {
        OptionError {
            option,
            value: value.to_string(),
            reason: reason.into(),
        }
    }

    fn text(option: &'static str, value: &str, reason: impl Into<String>) -> Self {
        Self::new(option, format!("{value:?}"), reason)
    }
}

impl fmt::Display for OptionError {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        write!(f, "invalid {} {}: {}", self.option, self.value, self.reason)
    }
}

impl std::error::Error for OptionError {}

/// A proxy's options as its entry points take them, not yet checked: numbers as given
/// (so a value out of range is named as it was given) and addresses as text. Every rule
/// on them is here, once: [`ProxyOptions::check`] applies them when the options are given,
/// [`ProxyOptions::config`] again when the proxy starts, then resolves the addresses.
#[derive(Debug, Clone, PartialEq)]
pub struct ProxyOptions {
    /// The broker's `HOST:PORT`; with `broker_ports`, the cluster's bootstrap addresses
    /// (`HOST:PORT`, comma-separated).
    pub upstream: String,
    /// Where the proxy listens, `HOST:PORT` (port 0: any free port).
    pub listen: String,
    /// Kafka's `socket.request.max.bytes`.
    pub max_request_bytes: i64,
    pub max_response_bytes: i64,
    /// Seconds.
    pub connect_timeout: f64,
    /// Seconds.
    pub upstream_timeout: f64,
    /// Kafka's `connections.max.idle.ms`, in seconds.
    pub connections_max_idle: f64,
    /// The broker's `num.partitions`.
    pub default_num_partitions: i64,
    /// The listener name the connection quotas count under.
    pub listener: String,
    pub threads: i64,
    /// Gateway mode: the ports the brokers get, `(first, last)`.
    pub broker_ports: Option<(i64, i64)>,
    /// Gateway mode: the host clients are told (default: the listen address's IP).
    pub advertised_host: Option<String>,
}

/// What the rules make of the options, before any name is resolved.
struct Checked {
    max_request_bytes: usize,
    max_response_bytes: usize,
    connect_timeout: Duration,
    upstream_timeout: Duration,
    connections_max_idle: Duration,
    default_num_partitions: i32,
    threads: usize,
    gateway: Option<(u16, u16)>,
}

impl ProxyOptions {
    /// A sidecar in front of `upstream` with [`ProxyConfig::new`]'s bounds, listening on
    /// `127.0.0.1:0`, on 2 threads.
    pub fn new(upstream: impl Into<String>) -> Self {
        ProxyOptions {
            upstream: upstream.into(),
            listen: "127.0.0.1:0".to_owned(),
            max_request_bytes: crate::DEFAULT_MAX_FRAME_BYTES as i64,
            max_response_bytes: crate::DEFAULT_MAX_FRAME_BYTES as i64,
            connect_timeout: 10.0,
            upstream_timeout: 300.0,
            connections_max_idle: 600.0,
            default_num_partitions: 1,
            listener: "PLAINTEXT".to_owned(),
            threads: 2,
            broker_ports: None,
            advertised_host: None,
        }
    }

    /// Every rule, without resolving a host name (which [`ProxyOptions::config`] does).
    pub fn check(&self) -> Result<(), OptionError> {
        self.checked().map(|_| ())
    }

    /// The checked options as the proxy runs them: the address to listen on, the
    /// configuration (no `admin`) and the threads. Resolves the listen address and the
    /// upstream's host names: one that does not resolve is named here rather than on
    /// every connection.
    pub fn config(&self) -> Result<(SocketAddr, ProxyConfig, usize), OptionError> {
        let checked = self.checked()?;
        let listen = resolve("listen", &self.listen)?;
        for address in self.upstream_addresses() {
            resolve("upstream", address)?;
        }
        let gateway = match checked.gateway {
            None => None,
            Some((first_port, last_port)) => Some(GatewayConfig {
                advertised_host: advertised_host(self.advertised_host.as_deref(), listen)?,
                first_port,
                ports: last_port - first_port + 1,
            }),
        };
        let mut config = ProxyConfig::new(self.upstream.clone());
        config.max_request_bytes = checked.max_request_bytes;
        config.max_response_bytes = checked.max_response_bytes;
        config.connect_timeout = checked.connect_timeout;
        config.upstream_timeout = checked.upstream_timeout;
        config.connections_max_idle = checked.connections_max_idle;
        config.default_num_partitions = checked.default_num_partitions;
        config.gateway = gateway;
        Ok((listen, config, checked.threads))
    }

    fn upstream_addresses(&self) -> impl Iterator<Item = &str> {
        self.upstream.split(',').map(str::trim)
    }

    fn checked(&self) -> Result<Checked, OptionError> {
        let listen = host_port("listen", &self.listen, 0)?;
        if self.broker_ports.is_none() && self.upstream.contains(',') {
            return Err(OptionError::text(
                "upstream",
                &self.upstream,
                "a sidecar has one broker (HOST:PORT); several addresses are a gateway's \
                 bootstrap (give broker_ports)",
            ));
        }
        for address in self.upstream_addresses() {
            host_port("upstream", address, 1)?;
        }
        let gateway = match self.broker_ports {
            None => {
                if let Some(host) = &self.advertised_host {
                    return Err(OptionError::text(
                        "advertised_host",
                        host,
                        "a sidecar advertises no host of its own (advertised_host needs \
                         broker_ports)",
                    ));
                }
                None
            }
            Some(ports) => {
                let range = broker_ports(ports)?;
                // A host name is resolved at start; an IP can be judged now.
                if let Ok(ip) = listen.0.parse::<IpAddr>() {
                    advertised_host(
                        self.advertised_host.as_deref(),
                        SocketAddr::new(ip, listen.1),
                    )?;
                } else if let Some(host) = &self.advertised_host {
                    advertised_host(Some(host), SocketAddr::from(([127, 0, 0, 1], 0)))?;
                }
                Some(range)
            }
        };
        if !(1..=MAX_THREADS).contains(&self.threads) {
            return Err(OptionError::new(
                "threads",
                self.threads,
                format!("expected 1 to {MAX_THREADS}"),
            ));
        }
        if self.listener.trim().is_empty() {
            return Err(OptionError::text(
                "listener",
                &self.listener,
                "expected a listener name",
            ));
        }
        Ok(Checked {
            max_request_bytes: frame_bound("max_request_bytes", self.max_request_bytes)?,
            max_response_bytes: frame_bound("max_response_bytes", self.max_response_bytes)?,
            connect_timeout: seconds("connect_timeout", self.connect_timeout)?,
            upstream_timeout: seconds("upstream_timeout", self.upstream_timeout)?,
            connections_max_idle: seconds("connections_max_idle", self.connections_max_idle)?,
            default_num_partitions: i32::try_from(self.default_num_partitions)
                .ok()
                .filter(|n| *n > 0)
                .ok_or_else(|| {
                    OptionError::new(
                        "default_num_partitions",
                        self.default_num_partitions,
                        format!("expected 1 to {}", i32::MAX),
                    )
                })?,
            threads: self.threads as usize,
            gateway,
        })
    }
}

/// `HOST:PORT` (an IPv6 host in brackets or not), with a port from `min_port` to 65535.
fn host_port(
    option: &'static str,
    text: &str,
    min_port: u16,
) -> Result<(String, u16), OptionError> {
    let bad = || {
        OptionError::text(
            option,
            text,
            format!("expected HOST:PORT with a port from {min_port} to 65535, e.g. 127.0.0.1:9092"),
        )
    };
    let (host, port) = text.rsplit_once(':').ok_or_else(bad)?;
    let host = host.trim_start_matches('[').trim_end_matches(']');
    let port: u16 = port.parse().map_err(|_| bad())?;
    if host.is_empty() || host.contains(char::is_whitespace) || port < min_port {
        return Err(bad());
    }
    Ok((host.to_owned(), port))
}

/// The first address `text` resolves to.
fn resolve(option: &'static str, text: &str) -> Result<SocketAddr, OptionError> {
    text.to_socket_addrs()
        .ok()
        .and_then(|mut addresses| addresses.next())
        .ok_or_else(|| OptionError::text(option, text, "its host does not resolve"))
}

fn broker_ports((first, last): (i64, i64)) -> Result<(u16, u16), OptionError> {
    let shown = format!("({first}, {last})");
    let port = |p: i64| u16::try_from(p).ok().filter(|p| *p > 0);
    let (Some(first_port), Some(last_port)) = (port(first), port(last)) else {
        return Err(OptionError::new(
            "broker_ports",
            shown,
            "expected ports from 1 to 65535",
        ));
    };
    if last_port < first_port {
        return Err(OptionError::new(
            "broker_ports",
            shown,
            "the last port is below the first",
        ));
    }
    Ok((first_port, last_port))
}

/// The host a gateway tells clients: `given`, else the listen address's IP, which must
/// then not be a wildcard (clients cannot connect to "every interface").
fn advertised_host(given: Option<&str>, listen: SocketAddr) -> Result<String, OptionError> {
    match given {
        Some(host) if !host.trim().is_empty() && !host.contains(char::is_whitespace) => {
            Ok(host.to_owned())
        }
        Some(host) => Err(OptionError::text(
            "advertised_host",
            host,
            "expected a host name or IP",
        )),
        None if listen.ip().is_unspecified() => Err(OptionError::text(
            "listen",
            &listen.to_string(),
            "a gateway on every interface needs advertised_host, the host clients reach it at",
        )),
        None => Ok(listen.ip().to_string()),
    }
}

fn seconds(option: &'static str, value: f64) -> Result<Duration, OptionError> {
    Duration::try_from_secs_f64(value)
        .ok()
        .filter(|d| !d.is_zero())
        .ok_or_else(|| OptionError::new(option, value, "expected seconds > 0"))
}

fn frame_bound(option: &'static str, value: i64) -> Result<usize, OptionError> {
    if (1..=MAX_FRAME_OPTION).contains(&value) {
        Ok(value as usize)
    } else {
        Err(OptionError::new(
            option,
            value,
            format!("expected 1 to {MAX_FRAME_OPTION}"),
        ))
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    /// The message of the options `change` makes of a sidecar's defaults.
    fn refused(change: impl FnOnce(&mut ProxyOptions)) -> String {
        let mut options = ProxyOptions::new("127.0.0.1:9092");
        change(&mut options);
        options.check().expect_err("accepted").to_string()
    }

    fn gateway(options: &mut ProxyOptions) {
        options.upstream = "127.0.0.1:9092,127.0.0.1:9093".to_owned();
        options.broker_ports = Some((9100, 9199));
    }

    #[test]
    fn the_defaults_pass_and_make_proxy_configs_defaults() {
        let options = ProxyOptions::new("127.0.0.1:9092");
        options.check().unwrap();
        let (listen, config, threads) = options.config().unwrap();
        let default = ProxyConfig::new("127.0.0.1:9092");
        assert_eq!(listen, SocketAddr::from(([127, 0, 0, 1], 0)));
        assert_eq!(threads, 2);
        assert_eq!(config.max_request_bytes, default.max_request_bytes);
        assert_eq!(config.max_response_bytes, default.max_response_bytes);
        assert_eq!(config.connect_timeout, default.connect_timeout);
        assert_eq!(config.upstream_timeout, default.upstream_timeout);
        assert_eq!(config.connections_max_idle, default.connections_max_idle);
        assert_eq!(
            config.default_num_partitions,
            default.default_num_partitions
        );
        assert!(config.gateway.is_none());
    }

    #[test]
    fn listen_is_host_colon_port() {
        assert_eq!(
            refused(|o| o.listen = "nowhere".to_owned()),
            "invalid listen \"nowhere\": expected HOST:PORT with a port from 0 to 65535, \
             e.g. 127.0.0.1:9092"
        );
        assert!(
            refused(|o| o.listen = "h:65536".to_owned()).starts_with("invalid listen \"h:65536\"")
        );
        let mut bracketed = ProxyOptions::new("127.0.0.1:9092");
        bracketed.listen = "[::1]:0".to_owned();
        bracketed.check().unwrap();
    }

    #[test]
    fn upstream_is_host_colon_port_with_a_port_above_0() {
        assert_eq!(
            refused(|o| o.upstream = "h:0".to_owned()),
            "invalid upstream \"h:0\": expected HOST:PORT with a port from 1 to 65535, \
             e.g. 127.0.0.1:9092"
        );
        assert!(refused(|o| o.upstream = ":9".to_owned()).starts_with("invalid upstream \":9\""));
        // Not resolved by check: the proxy resolves it when it starts.
        ProxyOptions::new("no-such-host.invalid:9092")
            .check()
            .unwrap();
    }

    #[test]
    fn a_sidecar_has_one_upstream() {
        assert_eq!(
            refused(|o| o.upstream = "h:9,g:9".to_owned()),
            "invalid upstream \"h:9,g:9\": a sidecar has one broker (HOST:PORT); several \
             addresses are a gateway's bootstrap (give broker_ports)"
        );
    }

    #[test]
    fn each_bootstrap_address_is_host_colon_port() {
        assert!(refused(|o| {
            gateway(o);
            o.upstream = "127.0.0.1:9, nowhere".to_owned();
        })
        .starts_with("invalid upstream \"nowhere\": expected HOST:PORT"));
    }

    #[test]
    fn broker_ports_are_ports() {
        for ports in [(0, 10), (1, 65536), (-1, 5)] {
            let message = refused(|o| {
                gateway(o);
                o.broker_ports = Some(ports);
            });
            assert_eq!(
                message,
                format!(
                    "invalid broker_ports ({}, {}): expected ports from 1 to 65535",
                    ports.0, ports.1
                )
            );
        }
    }

    #[test]
    fn broker_ports_go_up() {
        assert_eq!(
            refused(|o| {
                gateway(o);
                o.broker_ports = Some((9400, 9300));
            }),
            "invalid broker_ports (9400, 9300): the last port is below the first"
        );
    }

    #[test]
    fn only_a_gateway_advertises_a_host() {
        assert_eq!(
            refused(|o| o.advertised_host = Some("gw".to_owned())),
            "invalid advertised_host \"gw\": a sidecar advertises no host of its own \
             (advertised_host needs broker_ports)"
        );
    }

    #[test]
    fn an_advertised_host_is_a_name() {
        for host in ["", " ", "a b"] {
            assert_eq!(
                refused(|o| {
                    gateway(o);
                    o.advertised_host = Some(host.to_owned());
                }),
                format!("invalid advertised_host {host:?}: expected a host name or IP")
            );
        }
    }

    #[test]
    fn a_gateway_on_every_interface_needs_an_advertised_host() {
        assert_eq!(
            refused(|o| {
                gateway(o);
                o.listen = "0.0.0.0:9092".to_owned();
            }),
            "invalid listen \"0.0.0.0:9092\": a gateway on every interface needs \
             advertised_host, the host clients reach it at"
        );
        let mut told = ProxyOptions::new("");
        gateway(&mut told);
        told.listen = "0.0.0.0:0".to_owned();
        told.advertised_host = Some("gw.example".to_owned());
        let (_, config, _) = told.config().unwrap();
        let gateway = config.gateway.unwrap();
        assert_eq!(gateway.advertised_host, "gw.example");
        assert_eq!((gateway.first_port, gateway.ports), (9100, 100));
    }

    #[test]
    fn a_gateway_advertises_its_listen_ip_by_default() {
        let mut options = ProxyOptions::new("");
        gateway(&mut options);
        options.listen = "127.0.0.2:0".to_owned();
        let (_, config, _) = options.config().unwrap();
        assert_eq!(config.gateway.unwrap().advertised_host, "127.0.0.2");
    }

    #[test]
    fn threads_are_1_to_256() {
        for threads in [0, -1, 257] {
            assert_eq!(
                refused(|o| o.threads = threads),
                format!("invalid threads {threads}: expected 1 to 256")
            );
        }
    }

    #[test]
    fn the_listener_has_a_name() {
        assert_eq!(
            refused(|o| o.listener = String::new()),
            "invalid listener \"\": expected a listener name"
        );
    }

    #[test]
    fn frame_bounds_are_1_to_int32_max() {
        for value in [0, -5, 1 << 31] {
            assert_eq!(
                refused(|o| o.max_request_bytes = value),
                format!("invalid max_request_bytes {value}: expected 1 to 2147483647")
            );
            assert_eq!(
                refused(|o| o.max_response_bytes = value),
                format!("invalid max_response_bytes {value}: expected 1 to 2147483647")
            );
        }
    }

    #[test]
    fn times_are_seconds_above_0() {
        for value in [0.0, -1.0, f64::NAN, f64::INFINITY] {
            assert_eq!(
                refused(|o| o.connect_timeout = value),
                format!("invalid connect_timeout {value}: expected seconds > 0")
            );
            assert_eq!(
                refused(|o| o.upstream_timeout = value),
                format!("invalid upstream_timeout {value}: expected seconds > 0")
            );
            assert_eq!(
                refused(|o| o.connections_max_idle = value),
                format!("invalid connections_max_idle {value}: expected seconds > 0")
            );
        }
    }

    #[test]
    fn default_num_partitions_is_1_to_int32_max() {
        for value in [0, -1, 1 << 31] {
            assert_eq!(
                refused(|o| o.default_num_partitions = value),
                format!("invalid default_num_partitions {value}: expected 1 to 2147483647")
            );
        }
    }

    #[test]
    fn config_names_a_host_that_does_not_resolve() {
        let mut options = ProxyOptions::new("no-such-host.invalid:9092");
        options.check().unwrap();
        let err = options.config().unwrap_err();
        assert_eq!(
            err.to_string(),
            "invalid upstream \"no-such-host.invalid:9092\": its host does not resolve"
        );
        options.upstream = "127.0.0.1:9092".to_owned();
        options.listen = "no-such-host.invalid:0".to_owned();
        assert_eq!(options.config().unwrap_err().option, "listen");
    }
}
