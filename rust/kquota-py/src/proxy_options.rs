//! The proxy's options from Python, judged by the proxy crate's rules
//! (`kquota_proxy::ProxyOptions`): `check_proxy_options` for `ProxyServer` and
//! `kquota proxy`, which check them when given, and `ProxyDataPath`'s constructor, which
//! checks them again as it starts the proxy. No rule is written here.

use pyo3::exceptions::PyTypeError;
use pyo3::prelude::*;
use pyo3::types::{PyBool, PyInt};

use kquota_proxy::{OptionError, ProxyOptions};

use crate::error::invalid_option;

/// An int option as Python gave it: the crate's rules take an `i64`, and a value they
/// cannot hold, or a bool, is still named as given.
#[derive(Debug, Clone)]
pub(crate) enum GivenInt {
    Int(i64),
    /// Beyond `i64`: its repr, and the saturated value the rules refuse.
    Wide(String, i64),
    /// `True` or `False`: no count, though Python's bool is an int.
    Bool(String),
    /// Not an int: its type's name and repr.
    NotInt(String, String),
}

/// A Python int (or an object with `__index__`, as numpy's ints) as a [`GivenInt`].
pub(crate) fn given_int(obj: &Bound<'_, PyAny>) -> PyResult<GivenInt> {
    let repr = || {
        obj.repr()
            .map_or_else(|_| "?".to_owned(), |r| r.to_string())
    };
    if obj.is_instance_of::<PyBool>() {
        return Ok(GivenInt::Bool(repr()));
    }
    let int = if obj.is_instance_of::<PyInt>() {
        obj.clone()
    } else if obj.hasattr("__index__").unwrap_or(false) {
        obj.call_method0("__index__")?
    } else {
        let type_name = obj
            .get_type()
            .name()
            .map_or_else(|_| "?".to_owned(), |n| n.to_string());
        return Ok(GivenInt::NotInt(type_name, repr()));
    };
    if let Ok(value) = int.extract::<i64>() {
        return Ok(GivenInt::Int(value));
    }
    let saturated = if int.lt(0).unwrap_or(false) {
        i64::MIN
    } else {
        i64::MAX
    };
    Ok(GivenInt::Wide(repr(), saturated))
}

/// Options converted from Python, with the ints the crate's `i64` cannot hold shown as
/// they were given.
pub(crate) struct GivenOptions {
    pub(crate) options: ProxyOptions,
    shown: Vec<(&'static str, String)>,
}

impl GivenOptions {
    /// `err` as an `InvalidConfigError`, naming the value as it was given.
    pub(crate) fn refused(&self, py: Python<'_>, mut err: OptionError) -> PyErr {
        if let Some((_, shown)) = self.shown.iter().find(|(name, _)| *name == err.option) {
            err.value.clone_from(shown);
        }
        invalid_option(py, &err)
    }

    /// Every rule, as when the options are given (no host name resolved).
    pub(crate) fn check(&self, py: Python<'_>) -> PyResult<()> {
        self.options.check().map_err(|err| self.refused(py, err))
    }
}

/// The options as `ProxyDataPath` and `check_proxy_options` take them.
#[allow(clippy::too_many_arguments)]
pub(crate) fn given_options(
    py: Python<'_>,
    upstream: &str,
    listen: &str,
    max_request_bytes: GivenInt,
    max_response_bytes: GivenInt,
    connect_timeout: f64,
    upstream_timeout: f64,
    connections_max_idle: f64,
    default_num_partitions: GivenInt,
    listener: &str,
    threads: GivenInt,
    broker_ports: Option<(GivenInt, GivenInt)>,
    advertised_host: Option<String>,
) -> PyResult<GivenOptions> {
    let mut shown = Vec::new();
    let mut int = |name: &'static str, given: GivenInt| match given {
        GivenInt::Int(value) => Ok(value),
        GivenInt::Wide(repr, saturated) => {
            shown.push((name, repr));
            Ok(saturated)
        }
        GivenInt::Bool(repr) => Err(invalid_option(
            py,
            &OptionError {
                option: name,
                value: repr,
                reason: "expected an int, not a bool".to_owned(),
            },
        )),
        GivenInt::NotInt(type_name, repr) => Err(PyTypeError::new_err(format!(
            "argument {name}: expected an int, got {type_name} {repr}"
        ))),
    };
    let max_request_bytes = int("max_request_bytes", max_request_bytes)?;
    let max_response_bytes = int("max_response_bytes", max_response_bytes)?;
    let default_num_partitions = int("default_num_partitions", default_num_partitions)?;
    let threads = int("threads", threads)?;
    let broker_ports = match broker_ports {
        Some((first, last)) => Some((int("broker_ports", first)?, int("broker_ports", last)?)),
        None => None,
    };
    Ok(GivenOptions {
        options: ProxyOptions {
            upstream: upstream.to_owned(),
            listen: listen.to_owned(),
            max_request_bytes,
            max_response_bytes,
            connect_timeout,
            upstream_timeout,
            connections_max_idle,
            default_num_partitions,
            listener: listener.to_owned(),
            threads,
            broker_ports,
            advertised_host,
        },
        shown,
    })
}

/// `(first, last)` ports, each a [`given_int`].
pub(crate) fn given_ports(obj: &Bound<'_, PyAny>) -> PyResult<Option<(GivenInt, GivenInt)>> {
    if obj.is_none() {
        return Ok(None);
    }
    let (first, last): (Bound<'_, PyAny>, Bound<'_, PyAny>) = obj.extract()?;
    Ok(Some((given_int(&first)?, given_int(&last)?)))
}

/// Checks a proxy's options by the rules `ProxyDataPath` starts with (see it for their
/// meaning), without resolving a host name: `InvalidConfigError` names the option.
#[pyfunction]
#[pyo3(
    text_signature = "(upstream, *, listen='127.0.0.1:0', max_request_bytes=104857600, max_response_bytes=104857600, connect_timeout=10.0, upstream_timeout=300.0, connections_max_idle=600.0, default_num_partitions=1, listener='PLAINTEXT', threads=2, broker_ports=None, advertised_host=None)"
)]
#[pyo3(signature = (upstream, *, listen="127.0.0.1:0", max_request_bytes=GivenInt::Int(104857600), max_response_bytes=GivenInt::Int(104857600), connect_timeout=10.0, upstream_timeout=300.0, connections_max_idle=600.0, default_num_partitions=GivenInt::Int(1), listener="PLAINTEXT", threads=GivenInt::Int(2), broker_ports=None, advertised_host=None))]
#[allow(clippy::too_many_arguments)]
pub(crate) fn check_proxy_options(
    py: Python<'_>,
    upstream: &str,
    listen: &str,
    #[pyo3(from_py_with = given_int)] max_request_bytes: GivenInt,
    #[pyo3(from_py_with = given_int)] max_response_bytes: GivenInt,
    connect_timeout: f64,
    upstream_timeout: f64,
    connections_max_idle: f64,
    #[pyo3(from_py_with = given_int)] default_num_partitions: GivenInt,
    listener: &str,
    #[pyo3(from_py_with = given_int)] threads: GivenInt,
    #[pyo3(from_py_with = given_ports)] broker_ports: Option<(GivenInt, GivenInt)>,
    advertised_host: Option<String>,
) -> PyResult<()> {
    given_options(
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
    )?
    .check(py)
}
