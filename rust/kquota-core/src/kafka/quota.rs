//! The quota bound check and Kafka's throttle-time formula (spec sections 3 and 4).

use crate::kafka::javamath;
use crate::kafka::samples::{Samples, WindowConfig};

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

/// Whether the rate of `sum` over `window_ms` (`sum / (window_ms / 1000.0)`, Kafka's
/// `Rate`) is certainly within `bound`, so that [`verdict`] finds no violation, decided
/// without a division: `sum` is at most `bound * window_ms / 1000` less 2^-40 of it.
/// That margin covers every rounding on both sides (the products here and Kafka's two
/// divisions, each off by at most 2^-53), so the rate Kafka computes is at most `bound`.
/// `false` says nothing: the caller measures the rate. For `window_ms >= 1`.
#[inline]
pub fn certainly_within(sum: f64, bound: f64, window_ms: i64) -> bool {
    const SCALE: f64 = 0.001 * (1.0 - 1.0 / (1u64 << 40) as f64);
    let limit = bound * window_ms as f64 * SCALE;
    limit.is_finite() && sum <= limit
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

    /// Whenever the shortcut says "within", Kafka's rate is within the bound: sums at,
    /// just above and just below the bound's window total, and far from it, with window
    /// lengths of every size, negative and NaN sums.
    #[test]
    fn certainly_within_implies_no_violation() {
        let mut x: u64 = 0x9E37_79B9_7F4A_7C15;
        let mut within = 0;
        for _ in 0..200_000 {
            x ^= x << 13;
            x ^= x >> 7;
            x ^= x << 17;
            let bound = match x % 4 {
                0 => UNLIMITED,
                1 => ((x >> 8) % 1_000_000 + 1) as f64,
                2 => ((x >> 8) % 100_000) as f64 / 997.0 + 1e-9,
                _ => f64::from_bits(0x3ff0_0000_0000_0000 | (x >> 12)) * 1e3,
            };
            let window = match (x >> 30) % 3 {
                0 => ((x >> 32) % 11_000 + 1) as i64,
                1 => ((x >> 32) % 100 + 1) as i64,
                _ => ((x >> 20) % (1 << 40) + 1) as i64,
            };
            let exact = bound * (window as f64 / 1000.0);
            let sum = match (x >> 50) % 6 {
                0 => exact,
                1 => exact * (1.0 - 1e-12),
                2 => exact * (1.0 - 1e-15),
                3 => -exact,
                4 => f64::NAN,
                _ => exact * ((x >> 54) % 3) as f64 / 2.0,
            };
            if certainly_within(sum, bound, window) {
                within += 1;
                let rate = crate::kafka::samples::per_second(sum, window);
                assert!(
                    !verdict(rate, bound, window).violated,
                    "sum {sum}, bound {bound}, window {window}"
                );
            }
        }
        assert!(within > 50_000, "the shortcut decided {within} of 200000");
    }

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
