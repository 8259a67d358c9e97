//! IP entities of the connection-rate quota (KIP-612): one address, one entity.

use std::net::IpAddr;

use crate::error::{Error, Result};

/// Parses an IP literal (IPv4 or IPv6) into the address Kafka's `InetAddress` holds for
/// it: an IPv4-mapped IPv6 address (`::ffff:10.0.0.1`) is its IPv4 address, as Java's
/// `InetAddress.getByName` returns an `Inet4Address` for it, so both spellings are one
/// entity. Host names are refused: kquota does not resolve names.
pub fn canonical_ip(ip: &str) -> Result<IpAddr> {
    let addr: IpAddr = ip.parse().map_err(|_| {
        Error::InvalidUsage(format!(
            "invalid IP {ip:?}: expected an IPv4 or IPv6 address literal such as \
             \"192.168.0.1\" or \"::1\" (host names are not resolved)"
        ))
    })?;
    Ok(addr.to_canonical())
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

#[cfg(test)]
mod tests {
    use super::*;
    use std::net::Ipv4Addr;

    #[test]
    fn an_ipv4_mapped_address_is_its_ipv4_address() {
        let v4 = IpAddr::V4(Ipv4Addr::new(10, 0, 0, 1));
        assert_eq!(canonical_ip("10.0.0.1").unwrap(), v4);
        assert_eq!(canonical_ip("::ffff:10.0.0.1").unwrap(), v4);
        assert_eq!(canonical_ip("::FFFF:a00:1").unwrap(), v4);
        // A literal exactly: no white space, as in a store's entity name.
        assert!(canonical_ip(" 10.0.0.1").is_err() && canonical_ip("10.0.0.1 ").is_err());
        assert_eq!(
            host_address(&canonical_ip("::ffff:10.0.0.1").unwrap()),
            "10.0.0.1"
        );
        // Only the mapped form: an IPv4-compatible or other IPv6 address stays IPv6.
        assert!(canonical_ip("::10.0.0.1").unwrap().is_ipv6());
        assert!(canonical_ip("::1").unwrap().is_ipv6());
        assert!(canonical_ip("host.example").is_err());
    }
}
