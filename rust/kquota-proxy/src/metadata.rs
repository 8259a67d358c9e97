//! What the proxy tells a custom quota callback (KIP-257) about the cluster: the brokers
//! and partition leaders of the Metadata responses that pass through it.
//!
//! Kafka's broker calls `updateClusterMetadata` on every UpdateMetadata request from the
//! controller; a proxy sees no such request, so it reads the same facts from the Metadata
//! responses its clients ask for, and tells the callback only when they changed (a
//! callback that counts partition leaders would otherwise reset the quotas on each
//! client's metadata refresh).

use std::net::SocketAddr;

use bytes::Bytes;
use kafka_protocol::messages::MetadataResponse;
use kafka_protocol::protocol::Decodable;
use kquota_core::{BrokerNode, ClusterMetadata, PartitionLeader};

use crate::error::HeaderError;

/// The cluster metadata of a Metadata response body `body` of `version`; the local broker
/// is the one advertised at `local` (the proxy's address), else the only broker. Topics
/// with an error (e.g. being deleted) are left out, as Kafka leaves them out.
pub fn cluster_metadata(
    body: &[u8],
    version: i16,
    local: SocketAddr,
) -> Result<ClusterMetadata, HeaderError> {
    let mut bytes = Bytes::copy_from_slice(body);
    let response =
        MetadataResponse::decode(&mut bytes, version).map_err(|_| HeaderError::Unreadable {
            message: "Metadata response",
            version,
        })?;
    let brokers: Vec<BrokerNode> = response
        .brokers
        .iter()
        .map(|b| BrokerNode {
            node_id: b.node_id.0,
            host: b.host.to_string(),
            port: b.port,
            rack: b.rack.as_ref().map(ToString::to_string),
        })
        .collect();
    let local_host = local.ip().to_string();
    let local_broker = brokers
        .iter()
        .find(|b| b.host == local_host && b.port == i32::from(local.port()))
        .or(if brokers.len() == 1 {
            brokers.first()
        } else {
            None
        })
        .map(|b| b.node_id);
    let partitions = response
        .topics
        .iter()
        .filter(|t| t.error_code == 0)
        .filter_map(|t| t.name.as_ref().map(|name| (name.0.to_string(), t)))
        .flat_map(|(name, t)| {
            t.partitions.iter().map(move |p| PartitionLeader {
                topic: name.clone(),
                partition: p.partition_index,
                leader: (p.leader_id.0 >= 0).then_some(p.leader_id.0),
            })
        })
        .collect();
    Ok(ClusterMetadata {
        cluster_id: response.cluster_id.as_ref().map(ToString::to_string),
        local_broker,
        brokers,
        partitions,
    })
}
