//! `BrokerNode`: one broker in the cluster metadata a quota callback is told about.

use pyo3::prelude::*;

/// One broker of the cluster.
#[pyclass(module = "kquota._core", frozen, get_all, eq, from_py_object)]
#[derive(Clone, PartialEq)]
pub(crate) struct BrokerNode {
    pub(crate) node_id: i32,
    pub(crate) host: String,
    pub(crate) port: i32,
    pub(crate) rack: Option<String>,
}

#[pymethods]
impl BrokerNode {
    #[new]
    #[pyo3(signature = (node_id, host, port, rack=None))]
    fn new(node_id: i32, host: String, port: i32, rack: Option<String>) -> Self {
        BrokerNode {
            node_id,
            host,
            port,
            rack,
        }
    }

    fn __repr__(&self) -> String {
        format!(
            "BrokerNode({}, {:?}, {}, rack={:?})",
            self.node_id, self.host, self.port, self.rack
        )
    }
}
