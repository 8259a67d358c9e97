//! `ClusterMetadata`: the brokers and partition leaders a quota callback is told about,
//! and the call that tells the callbacks of several managers.

use pyo3::prelude::*;

use kquota_core as core;

use crate::broker_node::BrokerNode;
use crate::error::CoreResult;
use crate::partition_leader::PartitionLeader;
use crate::quota_manager::QuotaManager;

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

/// Tells the callbacks of `managers` about `metadata`, each distinct callback once, and
/// resets the limits of the managers whose callback answered true (Kafka's broker on an
/// UpdateMetadata request). Managers without a callback are skipped. Whether any answered
/// true.
#[pyfunction]
#[pyo3(signature = (metadata, *managers))]
pub(crate) fn update_cluster_metadata(
    metadata: Bound<'_, ClusterMetadata>,
    managers: Vec<Bound<'_, QuotaManager>>,
) -> CoreResult<bool> {
    let md = core::ClusterMetadata::from(metadata.get());
    let refs: Vec<&core::QuotaManager> = managers.iter().map(|m| &*m.get().inner).collect();
    Ok(core::managers::manager::update_cluster_metadata(
        &refs, &md,
    )?)
}
