//! IP entities of the connection-rate quota (KIP-612): one address, one entity.

use std::net::IpAddr;

use crate::error::{Error, Result};

/// Parses an IP literal (IPv4 or IPv6) as Kafka's `InetAddress` would hold it. Host
/// names are refused: kquota does not resolve names.
pub fn canonical_ip(ip: &str) -> Result<IpAddr> {
    let addr: IpAddr = ip.trim().parse().map_err(|_| {
        Error::InvalidUsage(format!(
            "invalid IP {ip:?}: expected an IPv4 or IPv6 address literal such as \
             \"192.168.0.1\" or \"::1\" (host names are not resolved)"
        ))
    })?;
    Ok(addr)
}

/// Java's `InetAddress.getHostAddress()`: dotted IPv4, or eight uncompressed lowercase
/// hex groups for IPv6 (the `ip` tag and sensor name Kafka uses).
pub fn host_address(ip: &IpAddr) -> String {
    match ip {
        IpAddr::V4(v4) => v4.to_string(),
        IpAddr::V6(v6) => v6
            .segments()
            .iter()
            .map(|s| format!("{s:x}"))
            .collect::<Vec<_>>()
            .join(":"),
    }
}
