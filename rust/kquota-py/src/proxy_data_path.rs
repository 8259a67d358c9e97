//! `ProxyDataPath`: the proxy's data path (`kquota_proxy::Proxy`) run on its own threads,
//! started and stopped from Python, which keeps the control plane.

use std::collections::BTreeMap;
use std::sync::atomic::{AtomicBool, Ordering};
use std::sync::{Arc, Mutex};
use std::time::Duration;

use pyo3::exceptions::PyOSError;
use pyo3::prelude::*;

use kquota_proxy::server::{Admission, CallbackFactory, Managers, Proxy};
use kquota_proxy::{AdminAccess, SharedAdmin};

use crate::callback::{raised, PyCallback};
use crate::connection_quotas::ConnectionQuotas;
use crate::controller_mutation_quota_manager::ControllerMutationQuotaManager;
use crate::error::{errors, CoreError};
use crate::proxy_decision::ProxyDecision;
use crate::proxy_options::{given_int, given_options, given_ports, GivenInt};
use crate::quota_admin::PyQuotaAdmin;
use crate::quota_manager::{self, QuotaManager};

/// One gateway broker's managers as Python receives them: produce, fetch, request, the
/// controller-mutation manager and the connection quotas, if any.
type BrokerManagers = (
    Py<QuotaManager>,
    Py<QuotaManager>,
    Py<QuotaManager>,
    Option<Py<ControllerMutationQuotaManager>>,
    Option<Py<ConnectionQuotas>>,
);

/// Kafka's client quotas on every connection relayed to one broker, in Rust.
#[pyclass(module = "kquota._core", frozen)]
pub(crate) struct ProxyDataPath {
    /// Taken out while it shuts down (with the GIL released), then put back: its last
    /// decisions can still be taken.
    proxy: Mutex<Option<Proxy>>,
    stopped: AtomicBool,
    address: (String, u16),
}

fn invalid_config(py: Python<'_>, message: String) -> PyErr {
    match errors(py) {
        Ok(errors) => PyErr::from_type(errors.config.bind(py).clone(), message),
        Err(err) => err,
    }
}

/// An object answering the quota administration: it must have `describe` and `alter`.
fn quota_admin(py: Python<'_>, admin: Py<PyAny>) -> PyResult<SharedAdmin> {
    for method in ["describe", "alter"] {
        let callable = admin
            .bind(py)
            .getattr(method)
            .is_ok_and(|m| m.is_callable());
        if !callable {
            let shown = admin
                .bind(py)
                .repr()
                .map_or_else(|_| "?".to_owned(), |r| r.to_string());
            return Err(invalid_config(
                py,
                format!("invalid admin {shown}: expected an object with describe() and alter(changes, validate_only) methods, such as kquota.proxy.StoreAdmin"),
            ));
        }
    }
    Ok(SharedAdmin(Arc::new(PyQuotaAdmin(admin))))
}

/// A Python callable returning a new quota callback object, as the core's factory: a
/// gateway calls it for each broker it learns (each Kafka broker has its own instance).
fn callback_factory_of(py: Python<'_>, factory: Py<PyAny>) -> PyResult<CallbackFactory> {
    let shown = factory
        .bind(py)
        .repr()
        .map_or_else(|_| "?".to_owned(), |r| r.to_string());
    if !factory.bind(py).is_callable() {
        return Err(invalid_config(
            py,
            format!("invalid callback_factory {shown}: expected a callable returning a new quota callback"),
        ));
    }
    Ok(Arc::new(move || {
        Python::attach(|py| {
            let made = factory.bind(py).call0().map_err(|err| {
                kquota_core::Error::Callback(format!(
                    "quota callback factory {shown} failed: {}",
                    raised(py, &err)
                ))
            })?;
            let callback: Arc<dyn kquota_core::QuotaCallback> = Arc::new(PyCallback::new(&made)?);
            Ok(callback)
        })
    }))
}

#[pymethods]
impl ProxyDataPath {
    /// Listens on `listen` and relays each connection to `upstream` with the quotas of
    /// the three managers, on `threads` threads of its own; returns once it listens.
    #[new]
    #[pyo3(
        text_signature = "(upstream, produce, fetch, request, *, mutation=None, default_num_partitions=1, connection_quotas=None, listener='PLAINTEXT', listen='127.0.0.1:0', max_request_bytes=104857600, max_response_bytes=104857600, connect_timeout=10.0, upstream_timeout=300.0, connections_max_idle=600.0, threads=2, keep_decisions=False, broker_ports=None, advertised_host=None, admin=None, admin_ask_cluster=True, admin_users=None, callback_factory=None)"
    )]
    #[pyo3(signature = (upstream, produce, fetch, request, *, mutation=None, default_num_partitions=GivenInt::Int(1), connection_quotas=None, listener="PLAINTEXT", listen="127.0.0.1:0", max_request_bytes=GivenInt::Int(104857600), max_response_bytes=GivenInt::Int(104857600), connect_timeout=10.0, upstream_timeout=300.0, connections_max_idle=600.0, threads=GivenInt::Int(2), keep_decisions=false, broker_ports=None, advertised_host=None, admin=None, admin_ask_cluster=true, admin_users=None, callback_factory=None))]
    #[allow(clippy::too_many_arguments)]
    fn new(
        py: Python<'_>,
        upstream: &str,
        #[pyo3(from_py_with = quota_manager::produce)] produce: Py<QuotaManager>,
        #[pyo3(from_py_with = quota_manager::fetch)] fetch: Py<QuotaManager>,
        #[pyo3(from_py_with = quota_manager::request)] request: Py<QuotaManager>,
        mutation: Option<Py<ControllerMutationQuotaManager>>,
        #[pyo3(from_py_with = given_int)] default_num_partitions: GivenInt,
        connection_quotas: Option<Py<ConnectionQuotas>>,
        listener: &str,
        listen: &str,
        #[pyo3(from_py_with = given_int)] max_request_bytes: GivenInt,
        #[pyo3(from_py_with = given_int)] max_response_bytes: GivenInt,
        connect_timeout: f64,
        upstream_timeout: f64,
        connections_max_idle: f64,
        #[pyo3(from_py_with = given_int)] threads: GivenInt,
        keep_decisions: bool,
        #[pyo3(from_py_with = given_ports)] broker_ports: Option<(GivenInt, GivenInt)>,
        advertised_host: Option<String>,
        admin: Option<Py<PyAny>>,
        admin_ask_cluster: bool,
        admin_users: Option<Vec<String>>,
        callback_factory: Option<Py<PyAny>>,
    ) -> PyResult<Self> {
        // The proxy crate's rules, as `check_proxy_options` applies them, then the names
        // resolved.
        let given = given_options(
            py,
            upstream,
            listen,
            max_request_bytes,
            max_response_bytes,
            connect_timeout,
            upstream_timeout,
            connections_max_idle,
            default_num_partitions,
            listener,
            threads,
            broker_ports,
            advertised_host,
        )?;
        let (listen_at, mut config, threads) = given
            .options
            .config()
            .map_err(|err| given.refused(py, err))?;
        config.admin = admin.map(|admin| quota_admin(py, admin)).transpose()?;
        config.admin_access = AdminAccess {
            ask_cluster: admin_ask_cluster,
            users: admin_users.map(|users| users.into_iter().collect()),
        };
        let managers = Managers::new(
            Arc::clone(&produce.get().inner),
            Arc::clone(&fetch.get().inner),
            Arc::clone(&request.get().inner),
        )
        .map_err(CoreError)?;
        let managers = match &mutation {
            Some(m) => managers.with_mutation(Arc::clone(&m.get().inner)),
            None => managers,
        };
        let managers = match callback_factory {
            Some(factory) => managers.with_callback_factory(callback_factory_of(py, factory)?),
            None => managers,
        };
        let managers = match connection_quotas {
            Some(quotas) => managers.with_admission(
                Admission::new(Arc::clone(&quotas.get().inner), listener).map_err(CoreError)?,
            ),
            None => managers,
        };
        // A closed connection is one warning on the `kquota.proxy` logger, as before: rare,
        // so taking the GIL for it costs nothing on the data path.
        let log: kquota_proxy::Log = Arc::new(|line: &str| {
            Python::attach(|py| {
                let logged = py
                    .import("logging")
                    .and_then(|logging| logging.call_method1("getLogger", ("kquota.proxy",)))
                    .and_then(|logger| logger.call_method1("warning", ("%s", line)));
                if let Err(err) = logged {
                    err.write_unraisable(py, None);
                }
            });
        });
        let proxy = py
            .detach(|| Proxy::start(listen_at, config, managers, log, threads, keep_decisions))
            .map_err(|err| match err.kind() {
                std::io::ErrorKind::InvalidInput => invalid_config(py, err.to_string()),
                _ => PyOSError::new_err(format!("cannot listen on {listen}: {err}")),
            })?;
        let address = proxy.local_addr();
        Ok(ProxyDataPath {
            proxy: Mutex::new(Some(proxy)),
            stopped: AtomicBool::new(false),
            address: (address.ip().to_string(), address.port()),
        })
    }

    /// `(host, port)` the proxy listens on.
    #[getter]
    fn address(&self) -> (String, u16) {
        self.address.clone()
    }

    /// A gateway's brokers: `(node_id, upstream "host:port", port on the proxy)` for each
    /// broker a response has named, by node id (empty for a sidecar).
    #[getter]
    fn brokers(&self, py: Python<'_>) -> Vec<(i32, String, u16)> {
        self.with_proxy(py, Proxy::brokers).unwrap_or_default()
    }

    /// A gateway's brokers' managers, by node id: `(produce, fetch, request, mutation,
    /// connection_quotas)` for each broker a response has named (empty for a sidecar).
    /// Each is a new handle on the manager the broker's connections record on (not a
    /// copy), so reading it reads that broker's own sensors.
    fn broker_managers(&self, py: Python<'_>) -> PyResult<BTreeMap<i32, BrokerManagers>> {
        let listed = self
            .with_proxy(py, Proxy::broker_managers)
            .unwrap_or_default();
        let handle = |m: &Arc<kquota_core::QuotaManager>| {
            Py::new(py, QuotaManager::sharing(py, Arc::clone(m)))
        };
        listed
            .into_iter()
            .map(|(node_id, managers)| {
                let [produce, fetch, request] = managers.quota_managers();
                let mutation = managers
                    .mutation()
                    .map(|m| {
                        Py::new(
                            py,
                            ControllerMutationQuotaManager {
                                inner: Arc::clone(m),
                            },
                        )
                    })
                    .transpose()?;
                let connections = managers
                    .admission()
                    .map(|a| {
                        Py::new(
                            py,
                            ConnectionQuotas {
                                inner: Arc::clone(a.quotas()),
                            },
                        )
                    })
                    .transpose()?;
                Ok((
                    node_id,
                    (
                        handle(produce)?,
                        handle(fetch)?,
                        handle(request)?,
                        mutation,
                        connections,
                    ),
                ))
            })
            .collect()
    }

    /// Client connections open now (0 once shut down).
    #[getter]
    fn connections(&self, py: Python<'_>) -> usize {
        if !self.running() {
            return 0;
        }
        self.with_proxy(py, Proxy::connections).unwrap_or(0)
    }

    /// Whether it still runs (`shutdown` not called yet).
    #[getter]
    fn running(&self) -> bool {
        !self.stopped.load(Ordering::Acquire)
    }

    /// The user of a connection without SASL, or whose principal the proxy cannot read.
    #[classattr]
    const ANONYMOUS: &'static str = kquota_proxy::sasl::ANONYMOUS;

    /// An API's name as a capture records it: Kafka's name in snake case
    /// (`"create_topics"`), `"api_<key>"` for a key the data path does not know.
    #[staticmethod]
    fn api_name(api_key: i16) -> String {
        kquota_proxy::api_name(api_key)
    }

    /// The quota decisions made since the last call, oldest first; empty unless built with
    /// `keep_decisions`.
    fn take_decisions(&self, py: Python<'_>) -> Vec<ProxyDecision> {
        let taken = self
            .with_proxy(py, Proxy::take_decisions)
            .unwrap_or_default();
        taken.into_iter().map(ProxyDecision::from).collect()
    }

    /// Connections closed unread because their IP was over its rate.
    #[getter]
    fn ip_throttled_connections(&self, py: Python<'_>) -> u64 {
        self.with_proxy(py, Proxy::ip_throttled_connections)
            .unwrap_or(0)
    }

    /// Decisions dropped because too many waited to be taken.
    #[getter]
    fn dropped_decisions(&self, py: Python<'_>) -> u64 {
        self.with_proxy(py, Proxy::dropped_decisions).unwrap_or(0)
    }

    /// Stops accepting, answers the requests in flight (for at most `timeout` seconds),
    /// then closes every connection; the GIL is released meanwhile. Calling it again does
    /// nothing. The decisions of the last requests can still be taken after it.
    #[pyo3(signature = (timeout=30.0))]
    fn shutdown(&self, py: Python<'_>, timeout: f64) -> PyResult<()> {
        let timeout = Duration::try_from_secs_f64(timeout).map_err(|_| {
            invalid_config(
                py,
                format!("invalid timeout {timeout}: expected seconds >= 0"),
            )
        })?;
        if self.stopped.swap(true, Ordering::AcqRel) {
            return Ok(());
        }
        // Not under the lock: a connection closing meanwhile logs, which takes the GIL.
        let taken = self.lock().take();
        if let Some(mut proxy) = taken {
            let proxy = py.detach(move || {
                proxy.shutdown(timeout);
                proxy
            });
            *self.lock() = Some(proxy);
        }
        Ok(())
    }

    fn __repr__(&self) -> String {
        let (host, port) = &self.address;
        let state = if self.running() { "running" } else { "stopped" };
        format!("ProxyDataPath({host}:{port}, {state})")
    }
}

impl ProxyDataPath {
    fn lock(&self) -> std::sync::MutexGuard<'_, Option<Proxy>> {
        self.proxy
            .lock()
            .unwrap_or_else(std::sync::PoisonError::into_inner)
    }

    /// `f` of the running proxy, without the GIL: a gateway makes a new broker's
    /// managers, calling the Python callback factory, under the lock `f` may need.
    fn with_proxy<R: Send>(&self, py: Python<'_>, f: impl FnOnce(&Proxy) -> R + Send) -> Option<R> {
        py.detach(|| self.lock().as_ref().map(f))
    }
}
