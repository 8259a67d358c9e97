//! The broker addresses in the responses a gateway passes on. A proxy in front of a whole
//! cluster must be the only address its clients learn: a client that reads a broker's own
//! host in a response connects there next, past the proxy and its quotas. So every field
//! that names a broker is handed to the caller's mapping and written back as it says.
//!
//! The responses that name brokers: Metadata and DescribeCluster (the cluster's brokers),
//! FindCoordinator (a group's or transaction's coordinator), and the `node_endpoints` of
//! Produce (v10+), Fetch (v16+), ShareFetch and ShareAcknowledge: the new leaders' addresses
//! a broker adds when a partition's leader moved (KIP-951), so the client need not wait for
//! a metadata refresh. Fetch responses carry the records and can be megabytes: older
//! versions are not looked at, newer ones are decoded from the frame without copying it
//! (the codec keeps records as slices of it), and only a response whose addresses change is
//! encoded again. Responses come from the cluster and are decoded as they are (see `precheck`:
//! the codec trusts the counts it reads).

use bytes::{Bytes, BytesMut};
use kafka_protocol::messages::{
    ApiKey, DescribeClusterResponse, FetchResponse, FindCoordinatorResponse, MetadataResponse,
    ProduceResponse, ShareAcknowledgeResponse, ShareFetchResponse,
};
use kafka_protocol::protocol::{Decodable, Encodable, StrBytes};

use crate::error::HeaderError;

/// A broker as a response names it.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct BrokerAddress {
    pub node_id: i32,
    pub host: String,
    pub port: i32,
    pub rack: Option<String>,
}

/// The first Produce version with `node_endpoints` (KIP-951).
const PRODUCE_ENDPOINTS: i16 = 10;
/// The first Fetch version with `node_endpoints` (KIP-951).
const FETCH_ENDPOINTS: i16 = 16;
/// FindCoordinator answers for a batch of keys from v4 (KIP-699), one coordinator each.
const FIND_COORDINATOR_BATCHED: i16 = 4;

/// Whether responses of this API at this version can name brokers (so the caller can skip
/// all work for every other response cheaply).
///
/// Versions newer than the codec reads count as naming brokers: [`with_addresses`] then
/// refuses them, rather than pass on addresses it cannot see.
pub fn names_brokers(api_key: i16, api_version: i16) -> bool {
    match ApiKey::try_from(api_key) {
        Ok(ApiKey::Metadata | ApiKey::FindCoordinator | ApiKey::DescribeCluster) => {
            api_version >= 0
        }
        Ok(ApiKey::Produce) => api_version >= PRODUCE_ENDPOINTS,
        Ok(ApiKey::Fetch) => api_version >= FETCH_ENDPOINTS,
        // node_endpoints in every version (v0, KIP-932's early access, the codec refuses)
        Ok(ApiKey::ShareFetch | ApiKey::ShareAcknowledge) => api_version >= 0,
        _ => false,
    }
}

/// The response `frame` (a whole response frame without its 4-byte size prefix: response
/// header then body starting at `body_offset`) to a request of `api_key`/`api_version`,
/// with every broker it names passed to `to`, which returns the (host, port) the client
/// must see instead (None: leave that one as it is). Returns Ok(None) when the API names
/// no brokers at this version, the response names none, or `to` changed none (then the
/// caller sends the frame unchanged); Ok(Some(new_frame)) with the header bytes copied
/// unchanged and the body re-encoded; Err when the body cannot be decoded at that version
/// or has trailing bytes.
///
/// A broker with a negative node id or an empty host (FindCoordinator's answer when there
/// is no coordinator) is never passed to `to`, nor is one of a coordinator entry with an
/// error. A host too long for the response's string type is an error too.
pub fn with_addresses(
    frame: &Bytes,
    body_offset: usize,
    api_key: i16,
    api_version: i16,
    to: &mut dyn FnMut(&BrokerAddress) -> Option<(String, i32)>,
) -> Result<Option<BytesMut>, HeaderError> {
    if !names_brokers(api_key, api_version) {
        return Ok(None);
    }
    if body_offset > frame.len() {
        return Err(HeaderError::Short {
            needed: body_offset,
            len: frame.len(),
        });
    }
    let version = api_version;
    // names_brokers knows the key
    let Ok(key) = ApiKey::try_from(api_key) else {
        return Ok(None);
    };
    // each broker of the list `$list` (whose elements have `$id`, host, port and rack)
    macro_rules! brokers {
        ($message:ty, $name:literal, $list:ident, $id:ident) => {
            rewritten(frame, body_offset, version, $name, |m: &mut $message| {
                let mut changed = false;
                for b in &mut m.$list {
                    let rack = b.rack.as_ref();
                    changed |= moved(b.$id.0, &mut b.host, &mut b.port, rack, to)?;
                }
                Ok(changed)
            })
        };
    }
    match key {
        ApiKey::Metadata => brokers!(MetadataResponse, "Metadata response", brokers, node_id),
        ApiKey::DescribeCluster => brokers!(
            DescribeClusterResponse,
            "DescribeCluster response",
            brokers,
            broker_id
        ),
        ApiKey::FindCoordinator => rewritten(
            frame,
            body_offset,
            version,
            "FindCoordinator response",
            |m: &mut FindCoordinatorResponse| {
                if version < FIND_COORDINATOR_BATCHED {
                    if m.error_code != 0 {
                        return Ok(false);
                    }
                    return moved(m.node_id.0, &mut m.host, &mut m.port, None, to);
                }
                let mut changed = false;
                for c in m.coordinators.iter_mut().filter(|c| c.error_code == 0) {
                    changed |= moved(c.node_id.0, &mut c.host, &mut c.port, None, to)?;
                }
                Ok(changed)
            },
        ),
        // the KIP-951 leader hints: a struct of the same fields in each message's module
        ApiKey::Produce => {
            brokers!(ProduceResponse, "Produce response", node_endpoints, node_id)
        }
        ApiKey::Fetch => brokers!(FetchResponse, "Fetch response", node_endpoints, node_id),
        ApiKey::ShareFetch => brokers!(
            ShareFetchResponse,
            "ShareFetch response",
            node_endpoints,
            node_id
        ),
        ApiKey::ShareAcknowledge => brokers!(
            ShareAcknowledgeResponse,
            "ShareAcknowledge response",
            node_endpoints,
            node_id
        ),
        _ => Ok(None),
    }
}

/// The frame with its body `M` decoded, changed by `change` (which says whether it changed
/// anything) and encoded again after the original header bytes.
fn rewritten<M: Decodable + Encodable>(
    frame: &Bytes,
    body_offset: usize,
    version: i16,
    message: &'static str,
    change: impl FnOnce(&mut M) -> Result<bool, HeaderError>,
) -> Result<Option<BytesMut>, HeaderError> {
    let unreadable = || HeaderError::Unreadable { message, version };
    // a slice of the frame: what the codec keeps as bytes (records) stays in it
    let mut body = frame.slice(body_offset..);
    let mut response = M::decode(&mut body, version).map_err(|_| unreadable())?;
    if !body.is_empty() {
        return Err(unreadable()); // bytes the codec does not know could name brokers
    }
    if !change(&mut response)? {
        return Ok(None);
    }
    let size = response.compute_size(version).map_err(|_| unreadable())?;
    let mut out = BytesMut::with_capacity(body_offset + size);
    out.extend_from_slice(&frame[..body_offset]);
    response
        .encode(&mut out, version)
        .map_err(|_| unreadable())?;
    Ok(Some(out))
}

/// Whether `to` moved the broker `node_id` at `host`:`port` elsewhere (then written into
/// `host` and `port`).
fn moved(
    node_id: i32,
    host: &mut StrBytes,
    port: &mut i32,
    rack: Option<&StrBytes>,
    to: &mut dyn FnMut(&BrokerAddress) -> Option<(String, i32)>,
) -> Result<bool, HeaderError> {
    if node_id < 0 || host.is_empty() {
        return Ok(false); // no broker: nothing a client could connect to
    }
    let broker = BrokerAddress {
        node_id,
        host: host.to_string(),
        port: *port,
        rack: rack.map(ToString::to_string),
    };
    let Some((new_host, new_port)) = to(&broker) else {
        return Ok(false);
    };
    if new_host == broker.host && new_port == broker.port {
        return Ok(false);
    }
    // the non-flexible versions write a host with an int16 length
    if new_host.len() > i16::MAX as usize {
        return Err(HeaderError::BadLength {
            field: "broker host length",
            value: new_host.len() as i64,
        });
    }
    *host = StrBytes::from_string(new_host);
    *port = new_port;
    Ok(true)
}

#[cfg(test)]
mod tests;
