//! `ClusterMetadata`: the brokers and partition leaders a quota callback is told about.

use pyo3::prelude::*;

use kquota_core as core;

use crate::broker_node::BrokerNode;
use crate::partition_leader::PartitionLeader;

/// The cluster metadata a quota callback is told about: brokers and partition leaders.
#[pyclass(module = "kquota._core", frozen, get_all)]
#[derive(Clone)]
pub(crate) struct ClusterMetadata {
    cluster_id: Option<String>,
    local_broker: Option<i32>,
    brokers: Vec<BrokerNode>,
    partitions: Vec<PartitionLeader>,
}

#[pymethods]
impl ClusterMetadata {
    #[new]
    #[pyo3(signature = (brokers=Vec::new(), partitions=Vec::new(), *, cluster_id=None, local_broker=None))]
    fn new(
        brokers: Vec<BrokerNode>,
        partitions: Vec<PartitionLeader>,
        cluster_id: Option<String>,
        local_broker: Option<i32>,
    ) -> Self {
        ClusterMetadata {
            cluster_id,
            local_broker,
            brokers,
            partitions,
        }
    }

    fn __repr__(&self) -> String {
        format!(
            "ClusterMetadata({} brokers, {} partitions, cluster_id={:?}, local_broker={:?})",
            self.brokers.len(),
            self.partitions.len(),
            self.cluster_id,
            self.local_broker
        )
    }
}

impl From<core::ClusterMetadata> for ClusterMetadata {
    fn from(m: core::ClusterMetadata) -> Self {
        ClusterMetadata {
            cluster_id: m.cluster_id,
            local_broker: m.local_broker,
            brokers: m
                .brokers
                .into_iter()
                .map(|b| BrokerNode {
                    node_id: b.node_id,
                    host: b.host,
                    port: b.port,
                    rack: b.rack,
                })
                .collect(),
            partitions: m
                .partitions
                .into_iter()
                .map(|p| PartitionLeader {
                    topic: p.topic,
                    partition: p.partition,
                    leader: p.leader,
                })
                .collect(),
        }
    }
}

impl From<&ClusterMetadata> for core::ClusterMetadata {
    fn from(m: &ClusterMetadata) -> Self {
        core::ClusterMetadata {
            cluster_id: m.cluster_id.clone(),
            local_broker: m.local_broker,
            brokers: m
                .brokers
                .iter()
                .map(|b| core::BrokerNode {
                    node_id: b.node_id,
                    host: b.host.clone(),
                    port: b.port,
                    rack: b.rack.clone(),
                })
                .collect(),
            partitions: m
                .partitions
                .iter()
                .map(|p| core::PartitionLeader {
                    topic: p.topic.clone(),
                    partition: p.partition,
                    leader: p.leader,
                })
                .collect(),
        }
    }
}
