//! [`SampledRate`]: one thread-safe Kafka `Rate` with an optional upper bound.

use crate::cow::{pin, CowCell};
use crate::error::{check_finite, check_quota, Result};
use crate::quota::{check_bound, Check};
use crate::samples::{Samples, WindowConfig};

#[derive(Clone)]
struct RateState {
    samples: Samples,
    bound: Option<f64>,
}

/// A rate sensor shared between threads: record, check, measure, rebound.
pub struct SampledRate {
    cfg: WindowConfig,
    state: CowCell<RateState>,
}

impl SampledRate {
    /// A rate over `cfg` windows with an optional upper bound (a valid quota value).
    pub fn new(cfg: WindowConfig, bound: Option<f64>) -> Result<Self> {
        let bound = bound.map(check_quota).transpose()?;
        Ok(SampledRate {
            cfg,
            state: CowCell::new(RateState {
                samples: Samples::new(),
                bound,
            }),
        })
    }

    /// The window configuration.
    pub fn config(&self) -> WindowConfig {
        self.cfg
    }

    /// The current upper bound.
    pub fn quota(&self) -> Option<f64> {
        self.state.read(&pin(), |s| s.bound)
    }

    /// Replaces the bound (`None` removes it); the samples are kept.
    pub fn set_quota(&self, bound: Option<f64>) -> Result<()> {
        let bound = bound.map(check_quota).transpose()?;
        self.state.update(&pin(), |s| s.bound = bound);
        Ok(())
    }

    /// Records any finite `value` at `t` and checks the bound, as `Sensor.record` does.
    pub fn record(&self, value: f64, t: i64) -> Result<Check> {
        check_finite(value)?;
        let cfg = self.cfg;
        Ok(self.state.update(&pin(), |s| {
            s.samples.record(&cfg, value, t);
            match s.bound {
                Some(bound) => check_bound(&mut s.samples, &cfg, bound, t),
                None => Check::UNCHECKED,
            }
        }))
    }

    /// Records any finite `value` at `t` without a check.
    pub fn record_no_check(&self, value: f64, t: i64) -> Result<()> {
        check_finite(value)?;
        let cfg = self.cfg;
        self.state
            .update(&pin(), |s| s.samples.record(&cfg, value, t));
        Ok(())
    }

    /// A copy of the current samples (for model checks and tests).
    #[doc(hidden)]
    pub fn samples_snapshot(&self) -> Samples {
        self.state.read(&pin(), |s| s.samples.clone())
    }

    /// The rate per second at `t`; purges obsolete samples as Kafka's measurement does.
    pub fn measure(&self, t: i64) -> f64 {
        let cfg = self.cfg;
        let guard = pin();
        let unchanged = self.state.read(&guard, |s| {
            (!s.samples.measure_mutates(&cfg, t)).then(|| s.samples.rate_unchanged(&cfg, t).0)
        });
        unchanged.unwrap_or_else(|| {
            self.state
                .update(&guard, |s| s.samples.measure_rate(&cfg, t).0)
        })
    }
}

#[cfg(all(test, not(loom)))]
mod tests {
    use super::*;

    #[test]
    fn rejected_values_change_nothing() {
        let rate = SampledRate::new(WindowConfig::QUOTA_DEFAULT, Some(100.0)).unwrap();
        rate.record(500.0, 0).unwrap();
        assert!(rate.record(f64::NAN, 1).is_err());
        assert!(rate.record(f64::INFINITY, 1).is_err());
        assert!(rate.set_quota(Some(0.0)).is_err());
        assert!(rate.set_quota(Some(-1.0)).is_err());
        assert_eq!(rate.quota(), Some(100.0));
        assert_eq!(rate.measure(0), 50.0);
    }

    #[test]
    fn negative_values_unrecord() {
        let rate = SampledRate::new(WindowConfig::QUOTA_DEFAULT, None).unwrap();
        rate.record_no_check(3000.0, 0).unwrap();
        rate.record_no_check(-3000.0, 0).unwrap();
        assert_eq!(rate.measure(0), 0.0);
    }

    #[test]
    fn concurrent_records_lose_nothing() {
        // 12 slots of 10 ms: times 0..=118 roll over up to 11 times but never reuse a slot,
        // so every recorded value must still be in the ring at the end.
        let cfg = WindowConfig::new(11, 10).unwrap();
        let rate = std::sync::Arc::new(SampledRate::new(cfg, None).unwrap());
        let threads: Vec<_> = (0..4)
            .map(|_| {
                let rate = rate.clone();
                std::thread::spawn(move || {
                    for i in 0..20_000i64 {
                        rate.record_no_check(1.0, i * 119 / 20_000).unwrap();
                    }
                })
            })
            .collect();
        for t in threads {
            t.join().unwrap();
        }
        let (total, count, slots) = rate.state.read(&pin(), |s| {
            let slots = s.samples.slots();
            (
                slots.iter().map(|s| s.value).sum::<f64>(),
                slots.iter().map(|s| s.count).sum::<u64>(),
                slots.len(),
            )
        });
        assert_eq!(total, 80_000.0);
        assert_eq!(count, 80_000);
        assert!(slots > 1, "the test must exercise rollover");
    }
}
