//! The one error type of the core. Every variant names the rejected value and what
//! would have been accepted; the Python binding maps each variant to one exception.

use std::fmt;

use crate::kafka::quota_config::QuotaConfigError;

/// A value kquota refuses. Nothing is changed by a call that returns an error.
#[derive(Debug, Clone, PartialEq)]
pub enum Error {
    /// A malformed configuration: samples, window, expiry, quota type, entity.
    InvalidConfig(String),
    /// A quota bound that is zero, negative, NaN or infinite.
    InvalidQuota(f64),
    /// A client-quota key or value Kafka (or kquota) refuses for an entity.
    InvalidQuotaConfig(QuotaConfigError),
    /// A recorded value outside what the call accepts.
    InvalidUsage(String),
    /// A custom quota callback (KIP-257) failed or returned something it must not; the
    /// message names the method and what it did.
    Callback(String),
}

impl fmt::Display for Error {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        match self {
            Error::InvalidConfig(msg) | Error::InvalidUsage(msg) | Error::Callback(msg) => {
                f.write_str(msg)
            }
            Error::InvalidQuotaConfig(err) => err.fmt(f),
            Error::InvalidQuota(v) => write!(
                f,
                "invalid quota value {v:?}: a quota must be a finite number greater than 0"
            ),
        }
    }
}

impl std::error::Error for Error {}

impl From<QuotaConfigError> for Error {
    fn from(err: QuotaConfigError) -> Self {
        Error::InvalidQuotaConfig(err)
    }
}

/// Result alias of the core.
pub type Result<T> = std::result::Result<T, Error>;

/// Checks a quota bound as Kafka's controller does (`> 0`), and rejects NaN and infinities.
pub fn check_quota(value: f64) -> Result<f64> {
    if value.is_finite() && value > 0.0 {
        Ok(value)
    } else {
        Err(Error::InvalidQuota(value))
    }
}

/// Checks a usage value given to a quota manager: finite and not negative.
#[inline]
pub fn check_usage(value: f64) -> Result<f64> {
    // Finite and not negative, in two comparisons (each false for NaN).
    if (0.0..f64::INFINITY).contains(&value) {
        Ok(value)
    } else {
        Err(Error::InvalidUsage(format!(
            "invalid usage value {value:?}: usage must be a finite number >= 0 \
             (take usage back with unrecord)"
        )))
    }
}

/// Checks a value recorded on a bare rate sensor: any finite number.
pub fn check_finite(value: f64) -> Result<f64> {
    if value.is_finite() {
        Ok(value)
    } else {
        Err(Error::InvalidUsage(format!(
            "invalid recorded value {value:?}: it must be a finite number"
        )))
    }
}
