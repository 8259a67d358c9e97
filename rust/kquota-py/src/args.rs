//! Argument conversion with kquota's error contract: a wrong type raises `TypeError`, a
//! value no parameter of that kind can hold (an int out of range, text that is not valid
//! Unicode, a malformed batch key) raises `InvalidValueError`; either way the message
//! names the parameter and the value, and nothing has been done yet.
//!
//! PyO3's own conversions raise `OverflowError`/`UnicodeEncodeError` without naming the
//! parameter, so every public argument goes through these functions
//! (`#[pyo3(from_py_with = ...)]`). Each converter below is one parameter name. A
//! converter to one of the binding's classes lives beside that class (`entity::entity`,
//! `quota_manager::produce`, `request_path::scenarios`), so that this module, which every
//! class uses, uses none of them.

use std::fmt::Display;
use std::ops::Deref;

use kquota_core as core;
use numpy::{PyReadonlyArray1, PyUntypedArrayMethods};
use pyo3::exceptions::PyTypeError;
use pyo3::prelude::*;
use pyo3::types::{PyBool, PyFloat, PyInt, PyString, PyTuple};

use crate::error::errors;

/// At most this many characters of a bad value are quoted in a message.
const SHOWN: usize = 80;

/// `repr(obj)`, cut short (a huge int's repr may itself fail: then a description).
fn shown(obj: &Bound<'_, PyAny>) -> String {
    match obj.repr() {
        Ok(r) => {
            let r = r.to_string_lossy().into_owned();
            if r.chars().count() > SHOWN {
                let cut: String = r.chars().take(SHOWN).collect();
                format!("{cut}...")
            } else {
                r
            }
        }
        Err(_) => format!("(a {} too large to print)", type_name(obj)),
    }
}

fn type_name(obj: &Bound<'_, PyAny>) -> String {
    obj.get_type()
        .name()
        .map(|n| n.to_string())
        .unwrap_or_else(|_| "?".to_owned())
}

/// An `InvalidValueError` (a `KquotaError` and a `ValueError`).
fn invalid(py: Python<'_>, message: String) -> PyErr {
    match errors(py) {
        Ok(e) => PyErr::from_type(e.value.bind(py).clone(), message),
        Err(err) => err,
    }
}

/// An `InvalidUsageError` (batch input that does not fit together).
fn invalid_usage(py: Python<'_>, message: String) -> PyErr {
    match errors(py) {
        Ok(e) => PyErr::from_type(e.usage.bind(py).clone(), message),
        Err(err) => err,
    }
}

/// A `TypeError` naming the parameter, what it takes and what it got.
pub(crate) fn wrong_type(name: &str, expected: &str, obj: &Bound<'_, PyAny>) -> PyErr {
    PyTypeError::new_err(format!(
        "argument {name}: expected {expected}, got {} {}",
        type_name(obj),
        shown(obj)
    ))
}

/// A Python int in `min..=max`.
fn int_in<T: TryFrom<i128>>(
    obj: &Bound<'_, PyAny>,
    name: &str,
    min: impl Display,
    max: impl Display,
) -> PyResult<T> {
    let out_of_range = || {
        invalid(
            obj.py(),
            format!(
                "invalid {name} {}: it must be a whole number from {min} to {max}",
                shown(obj)
            ),
        )
    };
    if !obj.is_instance_of::<pyo3::types::PyInt>() {
        // Objects with __index__ (numpy integers) are ints to Python's own APIs too.
        if obj.hasattr("__index__").unwrap_or(false) {
            let index = obj.call_method0("__index__")?;
            return int_in(&index, name, min, max);
        }
        return Err(wrong_type(name, "an int", obj));
    }
    let wide: i128 = obj.extract().map_err(|_| out_of_range())?;
    T::try_from(wide).map_err(|_| out_of_range())
}

fn i64_arg(obj: &Bound<'_, PyAny>, name: &str) -> PyResult<i64> {
    // The usual case first and cheaply; the general path only explains failures.
    if let Ok(v) = obj.extract::<i64>() {
        return Ok(v);
    }
    int_in(obj, name, i64::MIN, i64::MAX)
}

/// A Python str checked to be valid Unicode: it reads as a `&str` without copying (the
/// UTF-8 form is cached in the str object by the check).
pub(crate) struct Text<'py>(Bound<'py, PyString>);

impl Deref for Text<'_> {
    type Target = str;

    fn deref(&self) -> &str {
        // Cannot fail: `text` checked it, and CPython keeps the UTF-8 form it made.
        self.0.to_str().unwrap_or_default()
    }
}

/// Text that is valid Unicode (no lone surrogates), without copying it.
fn text<'py>(obj: &Bound<'py, PyAny>, name: &str) -> PyResult<Text<'py>> {
    let s = obj
        .cast::<PyString>()
        .map_err(|_| wrong_type(name, "a str", obj))?;
    match s.to_str() {
        Ok(_) => Ok(Text(s.clone())),
        Err(_) => Err({
            invalid(
                obj.py(),
                format!(
                    "invalid {name} {}: it is not valid Unicode text (a lone surrogate cannot be \
                 encoded as UTF-8)",
                    shown(obj)
                ),
            )
        }),
    }
}

fn optional<'py, T>(
    obj: &Bound<'py, PyAny>,
    convert: impl FnOnce(&Bound<'py, PyAny>) -> PyResult<T>,
) -> PyResult<Option<T>> {
    if obj.is_none() {
        Ok(None)
    } else {
        convert(obj).map(Some)
    }
}

pub(crate) fn user<'py>(obj: &Bound<'py, PyAny>) -> PyResult<Text<'py>> {
    text(obj, "user")
}

pub(crate) fn client_id<'py>(obj: &Bound<'py, PyAny>) -> PyResult<Text<'py>> {
    text(obj, "client_id")
}

pub(crate) fn opt_user<'py>(obj: &Bound<'py, PyAny>) -> PyResult<Option<Text<'py>>> {
    optional(obj, user)
}

pub(crate) fn opt_client_id<'py>(obj: &Bound<'py, PyAny>) -> PyResult<Option<Text<'py>>> {
    optional(obj, client_id)
}

pub(crate) fn principal<'py>(obj: &Bound<'py, PyAny>) -> PyResult<Text<'py>> {
    text(obj, "principal")
}

pub(crate) fn quota_type<'py>(obj: &Bound<'py, PyAny>) -> PyResult<Text<'py>> {
    text(obj, "quota_type")
}

/// `kafka_version`: text such as "4.4" or "4.4.0", or None (kquota's default release).
pub(crate) fn kafka_version<'py>(obj: &Bound<'py, PyAny>) -> PyResult<Option<Text<'py>>> {
    optional(obj, |o| text(o, "kafka_version"))
}

/// The release `kafka_version` names (None: kquota's default); a malformed one raises
/// InvalidConfigError naming it.
pub(crate) fn release(kafka_version: Option<&str>) -> core::Result<core::KafkaRelease> {
    kafka_version.map_or(Ok(core::KafkaRelease::DEFAULT), core::KafkaRelease::parse)
}

/// `now_ms` when given, else the core's clock.
pub(crate) fn now_or_clock(now_ms: Option<i64>) -> i64 {
    now_ms.unwrap_or_else(kquota_core::monotonic_ms)
}

pub(crate) fn now_ms(obj: &Bound<'_, PyAny>) -> PyResult<Option<i64>> {
    optional(obj, |o| i64_arg(o, "now_ms"))
}

pub(crate) fn throttle_ms(obj: &Bound<'_, PyAny>) -> PyResult<i64> {
    i64_arg(obj, "throttle_ms")
}

pub(crate) fn channel(obj: &Bound<'_, PyAny>) -> PyResult<Option<u64>> {
    optional(obj, |o| int_in(o, "channel", 0, u64::MAX))
}

/// A real number as a float: a `float`, an `int` (not a `bool`), or an object with
/// `__float__`/`__index__` (NumPy scalars). Whether the number is acceptable (finite,
/// >= 0, > 0) is the core's rule, checked there.
fn real(obj: &Bound<'_, PyAny>, name: &str) -> PyResult<f64> {
    if let Ok(f) = obj.cast_exact::<PyFloat>() {
        return Ok(f.value());
    }
    if obj.is_instance_of::<PyBool>() || obj.is_instance_of::<PyString>() {
        return Err(wrong_type(name, "a real number (int or float)", obj));
    }
    let numeric = obj.is_instance_of::<PyInt>()
        || obj.is_instance_of::<PyFloat>()
        || obj.hasattr("__float__").unwrap_or(false)
        || obj.hasattr("__index__").unwrap_or(false);
    if !numeric {
        return Err(wrong_type(name, "a real number (int or float)", obj));
    }
    obj.extract::<f64>().map_err(|_| {
        invalid(
            obj.py(),
            format!(
                "invalid {name} {}: it does not fit in a float (at most about 1.8e308)",
                shown(obj)
            ),
        )
    })
}

pub(crate) fn value(obj: &Bound<'_, PyAny>) -> PyResult<f64> {
    real(obj, "value")
}

pub(crate) fn quota(obj: &Bound<'_, PyAny>) -> PyResult<f64> {
    real(obj, "quota")
}

pub(crate) fn opt_quota(obj: &Bound<'_, PyAny>) -> PyResult<Option<f64>> {
    optional(obj, quota)
}

pub(crate) fn num_samples(obj: &Bound<'_, PyAny>) -> PyResult<i64> {
    i64_arg(obj, "num_samples")
}

pub(crate) fn window_ms(obj: &Bound<'_, PyAny>) -> PyResult<i64> {
    i64_arg(obj, "window_ms")
}

pub(crate) fn sensor_expiry_ms(obj: &Bound<'_, PyAny>) -> PyResult<i64> {
    i64_arg(obj, "sensor_expiry_ms")
}

fn array<'py, T: numpy::Element>(
    obj: &Bound<'py, PyAny>,
    name: &str,
    dtype: &str,
) -> PyResult<PyReadonlyArray1<'py, T>> {
    obj.extract::<PyReadonlyArray1<'py, T>>().map_err(|_| {
        let got = match obj.cast::<numpy::PyUntypedArray>() {
            Ok(a) => format!("an array of {} with {} dimension(s)", a.dtype(), a.ndim()),
            Err(_) => format!("{} {}", type_name(obj), shown(obj)),
        };
        PyTypeError::new_err(format!(
            "argument {name}: expected a one-dimensional numpy array of {dtype}, got {got}"
        ))
    })
}

pub(crate) fn now_ms_array<'py>(obj: &Bound<'py, PyAny>) -> PyResult<PyReadonlyArray1<'py, i64>> {
    array(obj, "now_ms", "int64")
}

pub(crate) fn key_index_array<'py>(
    obj: &Bound<'py, PyAny>,
) -> PyResult<PyReadonlyArray1<'py, i64>> {
    array(obj, "key_index", "int64")
}

pub(crate) fn values_array<'py>(obj: &Bound<'py, PyAny>) -> PyResult<PyReadonlyArray1<'py, f64>> {
    array(obj, "values", "float64")
}

pub(crate) fn unrecord_if_array<'py>(
    obj: &Bound<'py, PyAny>,
) -> PyResult<Option<PyReadonlyArray1<'py, bool>>> {
    if obj.is_none() {
        Ok(None)
    } else {
        array(obj, "unrecord_if", "bool").map(Some)
    }
}

/// The batch keys: a sequence (not a str) of `(user, client_id)` pairs of str.
pub(crate) fn keys(obj: &Bound<'_, PyAny>) -> PyResult<Vec<(String, String)>> {
    user_client_pairs(obj, "keys")
}

/// A replay's pair table: a sequence of `(user, client_id)` pairs of str.
pub(crate) fn pairs(obj: &Bound<'_, PyAny>) -> PyResult<Vec<(String, String)>> {
    user_client_pairs(obj, "pairs")
}

fn user_client_pairs(obj: &Bound<'_, PyAny>, name: &str) -> PyResult<Vec<(String, String)>> {
    if obj.is_instance_of::<PyString>() {
        return Err(wrong_type(
            name,
            "a sequence of (user, client_id) pairs",
            obj,
        ));
    }
    let items = obj
        .try_iter()
        .map_err(|_| wrong_type(name, "a sequence of (user, client_id) pairs", obj))?;
    let mut out = Vec::new();
    for (i, item) in items.enumerate() {
        let item = item?;
        let pair = item
            .cast::<PyTuple>()
            .ok()
            .filter(|t| t.len() == 2)
            .ok_or_else(|| {
                invalid_usage(
                    obj.py(),
                    format!(
                        "invalid {name}[{i}] {}: each must be a (user, client_id) tuple of two str",
                        shown(&item)
                    ),
                )
            })?;
        let user = text(&pair.get_item(0)?, &format!("{name}[{i}] user"))?;
        let client = text(&pair.get_item(1)?, &format!("{name}[{i}] client_id"))?;
        out.push((String::from(&*user), String::from(&*client)));
    }
    Ok(out)
}

pub(crate) fn kind<'py>(obj: &Bound<'py, PyAny>) -> PyResult<Text<'py>> {
    text(obj, "kind")
}

pub(crate) fn size_bytes(obj: &Bound<'_, PyAny>) -> PyResult<f64> {
    real(obj, "size_bytes")
}

pub(crate) fn opt_thread_time_ns(obj: &Bound<'_, PyAny>) -> PyResult<Option<f64>> {
    optional(obj, |o| real(o, "thread_time_ns"))
}

pub(crate) fn acks(obj: &Bound<'_, PyAny>) -> PyResult<i16> {
    int_in(obj, "acks", i16::MIN, i16::MAX)
}

pub(crate) fn requested_max_bytes(obj: &Bound<'_, PyAny>) -> PyResult<i64> {
    i64_arg(obj, "requested_max_bytes")
}

pub(crate) fn java_double(obj: &Bound<'_, PyAny>) -> PyResult<f64> {
    real(obj, "value")
}

fn throttles_array<'py>(
    obj: &Bound<'py, PyAny>,
    name: &str,
) -> PyResult<PyReadonlyArray1<'py, i32>> {
    array(obj, name, "int32")
}

pub(crate) fn produce_ms_array<'py>(
    obj: &Bound<'py, PyAny>,
) -> PyResult<PyReadonlyArray1<'py, i32>> {
    throttles_array(obj, "produce_ms")
}

pub(crate) fn fetch_ms_array<'py>(obj: &Bound<'py, PyAny>) -> PyResult<PyReadonlyArray1<'py, i32>> {
    throttles_array(obj, "fetch_ms")
}

pub(crate) fn request_ms_array<'py>(
    obj: &Bound<'py, PyAny>,
) -> PyResult<PyReadonlyArray1<'py, i32>> {
    throttles_array(obj, "request_ms")
}

pub(crate) fn time_ms_array<'py>(obj: &Bound<'py, PyAny>) -> PyResult<PyReadonlyArray1<'py, i64>> {
    array(obj, "time_ms", "int64")
}

pub(crate) fn pair_array<'py>(obj: &Bound<'py, PyAny>) -> PyResult<PyReadonlyArray1<'py, i32>> {
    array(obj, "pair", "int32")
}

pub(crate) fn kind_array<'py>(obj: &Bound<'py, PyAny>) -> PyResult<PyReadonlyArray1<'py, i8>> {
    array(obj, "kind", "int8")
}

pub(crate) fn bytes_array<'py>(obj: &Bound<'py, PyAny>) -> PyResult<PyReadonlyArray1<'py, f64>> {
    array(obj, "bytes", "float64")
}

pub(crate) fn thread_ns_array<'py>(
    obj: &Bound<'py, PyAny>,
) -> PyResult<PyReadonlyArray1<'py, f64>> {
    array(obj, "thread_ns", "float64")
}

pub(crate) fn acks_array<'py>(obj: &Bound<'py, PyAny>) -> PyResult<PyReadonlyArray1<'py, i16>> {
    array(obj, "acks", "int16")
}

pub(crate) fn partitions_array<'py>(
    obj: &Bound<'py, PyAny>,
) -> PyResult<Option<PyReadonlyArray1<'py, i32>>> {
    if obj.is_none() {
        return Ok(None);
    }
    array(obj, "partitions", "int32").map(Some)
}

pub(crate) fn strict_array<'py>(
    obj: &Bound<'py, PyAny>,
) -> PyResult<Option<PyReadonlyArray1<'py, bool>>> {
    if obj.is_none() {
        return Ok(None);
    }
    array(obj, "strict", "bool").map(Some)
}

pub(crate) fn topic_offsets_array<'py>(
    obj: &Bound<'py, PyAny>,
) -> PyResult<Option<PyReadonlyArray1<'py, i32>>> {
    if obj.is_none() {
        return Ok(None);
    }
    array(obj, "topic_offsets", "int32").map(Some)
}

pub(crate) fn topic_partitions_array<'py>(
    obj: &Bound<'py, PyAny>,
) -> PyResult<Option<PyReadonlyArray1<'py, i32>>> {
    if obj.is_none() {
        return Ok(None);
    }
    array(obj, "topic_partitions", "int32").map(Some)
}

pub(crate) fn request_throttle_ms_array<'py>(
    obj: &Bound<'py, PyAny>,
) -> PyResult<Option<PyReadonlyArray1<'py, i32>>> {
    optional(obj, |o| array(o, "request_throttle_ms", "int32"))
}

/// `quota_pass`: "all", "request" or "bytes".
pub(crate) fn quota_pass(obj: &Bound<'_, PyAny>) -> PyResult<core::QuotaPass> {
    match &*text(obj, "quota_pass")? {
        "all" => Ok(core::QuotaPass::All),
        "request" => Ok(core::QuotaPass::Request),
        "bytes" => Ok(core::QuotaPass::Bytes),
        _ => Err(invalid(
            obj.py(),
            format!(
                "invalid quota_pass {}: expected 'all', 'request' or 'bytes'",
                shown(obj)
            ),
        )),
    }
}

pub(crate) fn closed_loop(obj: &Bound<'_, PyAny>) -> PyResult<bool> {
    obj.cast::<PyBool>()
        .map(|b| b.is_true())
        .map_err(|_| wrong_type("closed_loop", "a bool", obj))
}

pub(crate) fn client_limits(obj: &Bound<'_, PyAny>) -> PyResult<Option<core::ClientLimits>> {
    optional(obj, |o| {
        let (buffer_bytes, delivery_timeout_ms, api_timeout_ms) =
            o.extract::<(i64, i64, i64)>().map_err(|_| {
                wrong_type(
                    "client_limits",
                    "a tuple of three ints (buffer_bytes, delivery_timeout_ms, api_timeout_ms)",
                    o,
                )
            })?;
        Ok(core::ClientLimits {
            buffer_bytes,
            delivery_timeout_ms,
            api_timeout_ms,
        })
    })
}

pub(crate) fn expiry_task_ms(obj: &Bound<'_, PyAny>) -> PyResult<Option<i64>> {
    optional(obj, |o| i64_arg(o, "expiry_task_ms"))
}

pub(crate) fn scenario(obj: &Bound<'_, PyAny>) -> PyResult<usize> {
    int_in(obj, "scenario", 0, usize::MAX)
}

pub(crate) fn pair(obj: &Bound<'_, PyAny>) -> PyResult<usize> {
    int_in(obj, "pair", 0, usize::MAX)
}

pub(crate) fn thread_time_ns(obj: &Bound<'_, PyAny>) -> PyResult<f64> {
    real(obj, "thread_time_ns")
}

pub(crate) fn required_now_ms(obj: &Bound<'_, PyAny>) -> PyResult<i64> {
    i64_arg(obj, "now_ms")
}

// -- KIP-599 / KIP-612 arguments (the `mutation` module) ---------------------------------

pub(crate) fn permits(obj: &Bound<'_, PyAny>) -> PyResult<f64> {
    real(obj, "permits")
}

pub(crate) fn tokens(obj: &Bound<'_, PyAny>) -> PyResult<f64> {
    real(obj, "tokens")
}

pub(crate) fn version(obj: &Bound<'_, PyAny>) -> PyResult<i16> {
    int_in(obj, "version", i16::MIN, i16::MAX)
}

pub(crate) fn strict(obj: &Bound<'_, PyAny>) -> PyResult<bool> {
    obj.cast::<PyBool>()
        .map(|b| b.is_true())
        .map_err(|_| wrong_type("strict", "a bool", obj))
}

pub(crate) fn api<'py>(obj: &Bound<'py, PyAny>) -> PyResult<Text<'py>> {
    text(obj, "api")
}

pub(crate) fn ip<'py>(obj: &Bound<'py, PyAny>) -> PyResult<Text<'py>> {
    text(obj, "ip")
}

pub(crate) fn opt_ip<'py>(obj: &Bound<'py, PyAny>) -> PyResult<Option<Text<'py>>> {
    optional(obj, ip)
}

pub(crate) fn listener<'py>(obj: &Bound<'py, PyAny>) -> PyResult<Text<'py>> {
    text(obj, "listener")
}

pub(crate) fn opt_listener<'py>(obj: &Bound<'py, PyAny>) -> PyResult<Option<Text<'py>>> {
    optional(obj, listener)
}

/// A connection rate: any int (the core says which are accepted, naming the setting).
pub(crate) fn rate(obj: &Bound<'_, PyAny>) -> PyResult<i64> {
    i64_arg(obj, "rate")
}

pub(crate) fn opt_rate(obj: &Bound<'_, PyAny>) -> PyResult<Option<i64>> {
    optional(obj, rate)
}

pub(crate) fn times_ms_array<'py>(obj: &Bound<'py, PyAny>) -> PyResult<PyReadonlyArray1<'py, i64>> {
    array(obj, "times_ms", "int64")
}

pub(crate) fn usage_array<'py>(obj: &Bound<'py, PyAny>) -> PyResult<PyReadonlyArray1<'py, f64>> {
    array(obj, "usage", "float64")
}

pub(crate) fn runs_array<'py>(obj: &Bound<'py, PyAny>) -> PyResult<PyReadonlyArray1<'py, i64>> {
    array(obj, "runs", "int64")
}

pub(crate) fn entities_array<'py>(obj: &Bound<'py, PyAny>) -> PyResult<PyReadonlyArray1<'py, i64>> {
    array(obj, "entities", "int64")
}

pub(crate) fn target(obj: &Bound<'_, PyAny>) -> PyResult<f64> {
    real(obj, "target")
}
