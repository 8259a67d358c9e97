//! `PartitionLeader`: one partition and its leader in the cluster metadata.

use pyo3::prelude::*;

/// One partition and its leader (`None`: no leader known).
#[pyclass(module = "kquota._core", frozen, get_all, eq, from_py_object)]
#[derive(Clone, PartialEq)]
pub(crate) struct PartitionLeader {
    pub(crate) topic: String,
    pub(crate) partition: i32,
    pub(crate) leader: Option<i32>,
}

#[pymethods]
impl PartitionLeader {
    #[new]
    #[pyo3(signature = (topic, partition, leader=None))]
    fn new(topic: String, partition: i32, leader: Option<i32>) -> Self {
        PartitionLeader {
            topic,
            partition,
            leader,
        }
    }

    fn __repr__(&self) -> String {
        format!(
            "PartitionLeader({:?}, {}, leader={:?})",
            self.topic, self.partition, self.leader
        )
    }
}
