//! Rules of a client-quota sensor that do not depend on how its samples are stored:
//! expiry, the throttle a manager returns, the fetch-size cap.

use super::broker::check_window_seconds;
use super::javamath::long_to_int;
use super::quota::Check;
use super::quota_type::QuotaType;
use super::release::KafkaRelease;
use super::samples::WindowConfig;
use crate::error::{Error, Result};

/// Kafka's sensor-expiry time for quota sensors: one hour without a record.
pub const DEFAULT_SENSOR_EXPIRY_MS: i64 = 3_600_000;

/// What a quota manager's sensors take: a window of whole seconds, as Kafka's
/// `quota.window.size.seconds`, and an expiry of at least 0 ms.
pub fn check_manager_config(window: &WindowConfig, sensor_expiry_ms: i64) -> Result<()> {
    check_window_seconds(window.window_ms())?;
    if sensor_expiry_ms < 0 {
        return Err(Error::InvalidConfig(format!(
            "invalid sensor_expiry_ms {sensor_expiry_ms}: it must be >= 0"
        )));
    }
    Ok(())
}

/// Kafka's throttle as a quota manager of `release` returns it from a check on windows
/// `window`: the int of the long (wrapping; from 4.4 first capped at `i32::MAX`), and for
/// `request` first capped at one window (KIP-124).
pub fn throttle_int(
    quota_type: QuotaType,
    window: &WindowConfig,
    release: KafkaRelease,
    check: Check,
) -> i32 {
    let t = check.throttle_ms;
    match quota_type {
        QuotaType::Request => long_to_int(t.min(window.window_ms())),
        _ if release.saturates_throttle() => long_to_int(t.min(i64::from(i32::MAX))),
        _ => long_to_int(t),
    }
}

/// Kafka's fetch-size cap for a client whose sensor enforces `bound` (`None`: no quota
/// applies): `bound * (num_samples - 1) * window_seconds`, or `f64::MAX`.
pub fn max_value_in_quota_window(bound: Option<f64>, window: &WindowConfig) -> f64 {
    match bound {
        Some(bound) => {
            bound * f64::from(window.num_samples() - 1) * (window.window_ms() / 1000) as f64
        }
        None => f64::MAX,
    }
}

/// Whether a sensor that last recorded at `last_record` is expired at `now`: idle for
/// strictly longer than `expiry_ms` (Kafka's `Sensor.hasExpired`).
pub fn sensor_expired(last_record: i64, now: i64, expiry_ms: i64) -> bool {
    now.wrapping_sub(last_record) > expiry_ms
}
