//! Module-level functions of the core's `kafka::broker`: what a broker does around the
//! quota arithmetic (a KIP-599 response's throttle, the maintenance timetable, the
//! whole-second window), for the Python plugin and its channels.

use pyo3::prelude::*;

use kquota_core as core;

use crate::args;
use crate::error::CoreResult;

/// A CreateTopics, CreatePartitions or DeleteTopics response's throttle and the quota
/// that applies it (`"request"` or `"controller_mutation"`, `None` when not throttled).
#[pyfunction]
pub(crate) fn mutation_response_throttle(
    request_ms: i32,
    mutation_ms: i32,
) -> (i32, Option<&'static str>) {
    let (throttle, by) = core::mutation_response_throttle(request_ms, mutation_ms);
    (throttle, by.map(core::MutationThrottledBy::as_str))
}

/// What maintenance is due at `now_ms`: `(expire, drain)`.
#[pyfunction]
pub(crate) fn maintenance_due(
    now_ms: i64,
    next_expiry_ms: Option<i64>,
    next_unmute_ms: Option<i64>,
) -> (bool, bool) {
    let due = core::Maintenance::with_next_expiry(next_expiry_ms).due(now_ms, next_unmute_ms);
    (due.expire, due.drain)
}

/// The next sensor expiry after one at `now_ms`.
#[pyfunction]
pub(crate) fn next_sensor_expiry_ms(now_ms: i64) -> i64 {
    core::Maintenance::new().expired(now_ms)
}

/// When maintenance is next due (`None`: at once, no expiry has run).
#[pyfunction]
pub(crate) fn next_maintenance_ms(
    next_expiry_ms: Option<i64>,
    next_unmute_ms: Option<i64>,
) -> Option<i64> {
    core::Maintenance::with_next_expiry(next_expiry_ms).next_due_ms(next_unmute_ms)
}

/// `quota.window.size.seconds`: a quota manager's window is whole seconds.
#[pyfunction]
pub(crate) fn check_window_seconds(
    #[pyo3(from_py_with = args::window_ms)] window_ms: i64,
) -> CoreResult<()> {
    Ok(core::check_window_seconds(window_ms)?)
}
