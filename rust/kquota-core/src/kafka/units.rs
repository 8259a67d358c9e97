//! Unit conversions between what a request reports and what a quota measures.

use super::quota_type::QuotaType;

/// Percent of one thread per second for one nanosecond of thread time (KIP-124).
pub const NANOS_TO_PERCENT: f64 = 100.0 / 1_000_000_000.0;

/// A valid usage value in the unit of `quota_type`'s rate: bytes stay bytes, request
/// thread nanoseconds become percent of a thread (`nanos * (100.0 / 1e9)`, KIP-124).
pub fn rate_units(quota_type: QuotaType, value: f64) -> f64 {
    match quota_type {
        QuotaType::Request => value * NANOS_TO_PERCENT,
        _ => value,
    }
}
