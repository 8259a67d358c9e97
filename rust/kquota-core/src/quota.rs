//! The quota bound check and Kafka's throttle-time formula (spec sections 3 and 4).

use crate::javamath;
use crate::samples::{Samples, WindowConfig};

/// The bound of a sensor to which no quota applies: `(double) Long.MAX_VALUE`.
pub const UNLIMITED: f64 = i64::MAX as f64;

/// The outcome of a quota check.
#[derive(Debug, Clone, Copy, PartialEq)]
pub struct Check {
    /// Whether the measured rate broke the bound (`!(rate <= bound)`, so NaN breaks it).
    pub violated: bool,
    /// Kafka's throttle time as a long, 0 when not violated.
    pub throttle_ms: i64,
    /// The rate the check measured; `None` when there was no bound to check.
    pub rate: Option<f64>,
}

impl Check {
    /// The outcome of a record made without a bound.
    pub const UNCHECKED: Check = Check {
        violated: false,
        throttle_ms: 0,
        rate: None,
    };
}

/// The delay that brings the windowed average back to the bound:
/// `Math.round(((rate - bound) / bound) * window_ms)`.
pub fn throttle_time(rate: f64, bound: f64, window_ms: i64) -> i64 {
    javamath::round(((rate - bound) / bound) * window_ms as f64)
}

/// Measures `samples` at `t` (mutating as Kafka does) and checks the upper bound.
pub fn check_bound(samples: &mut Samples, cfg: &WindowConfig, bound: f64, t: i64) -> Check {
    let (rate, window_ms) = samples.measure_rate(cfg, t);
    verdict(rate, bound, window_ms)
}

/// The check of a measured `rate` (over `window_ms`) against an upper `bound`.
pub fn verdict(rate: f64, bound: f64, window_ms: i64) -> Check {
    if rate <= bound {
        Check {
            violated: false,
            throttle_ms: 0,
            rate: Some(rate),
        }
    } else {
        Check {
            violated: true,
            throttle_ms: throttle_time(rate, bound, window_ms),
            rate: Some(rate),
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn kip13_example() {
        // 6.5 MiB/s observed against 5 MiB/s over 10 whole windows: 3000 ms.
        let mib = 1024.0 * 1024.0;
        assert_eq!(throttle_time(6.5 * mib, 5.0 * mib, 10_000), 3000);
    }

    #[test]
    fn kafka_unit_test_example() {
        assert_eq!(throttle_time(600.0, 500.0, 10_500), 2100);
    }

    #[test]
    fn unlimited_is_long_max_as_double() {
        assert_eq!(UNLIMITED, 9.223372036854776e18);
    }

    #[test]
    fn nan_rate_is_a_violation_with_zero_throttle() {
        let cfg = WindowConfig::QUOTA_DEFAULT;
        let mut s = Samples::new();
        s.record(&cfg, f64::MAX, 0);
        s.record(&cfg, f64::MAX, 0);
        s.record(&cfg, f64::MIN, 0);
        let check = check_bound(&mut s, &cfg, 1.0, 0);
        assert!(check.violated);
        assert_eq!(check.throttle_ms, i64::MAX);
    }
}
