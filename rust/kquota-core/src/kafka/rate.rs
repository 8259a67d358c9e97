//! [`SampledRate`]: one thread-safe Kafka `Rate` with an optional upper bound.

use crate::error::{check_finite, check_quota, Result};
use crate::kafka::quota::Check;
use crate::kafka::rate_cell::{Bound, BoundSource, RateCell};
use crate::kafka::samples::{Samples, WindowConfig};
use crate::sync::cow::pin;

type Keep = BoundSource<fn() -> Option<f64>>;

/// A rate sensor shared between threads: record, check, measure, rebound.
pub struct SampledRate {
    cfg: WindowConfig,
    cell: RateCell,
}

impl SampledRate {
    /// A rate over `cfg` windows with an optional upper bound (a valid quota value).
    pub fn new(cfg: WindowConfig, bound: Option<f64>) -> Result<Self> {
        let value = bound.map(check_quota).transpose()?;
        Ok(SampledRate {
            cfg,
            cell: RateCell::new(Bound {
                value,
                generation: 0,
            }),
        })
    }

    /// The window configuration.
    pub fn config(&self) -> WindowConfig {
        self.cfg
    }

    /// The current upper bound.
    pub fn quota(&self) -> Option<f64> {
        self.cell.bound(&pin()).value
    }

    /// Replaces the bound (`None` removes it); the samples are kept.
    pub fn set_quota(&self, bound: Option<f64>) -> Result<()> {
        let value = bound.map(check_quota).transpose()?;
        self.cell.set_bound(
            Bound {
                value,
                generation: 0,
            },
            &pin(),
        );
        Ok(())
    }

    /// Records any finite `value` at `t` and checks the bound, as `Sensor.record` does.
    pub fn record(&self, value: f64, t: i64) -> Result<Check> {
        check_finite(value)?;
        Ok(self
            .cell
            .record(&self.cfg, value, t, true, &Keep::Keep, &pin()))
    }

    /// Records any finite `value` at `t` without a check.
    pub fn record_no_check(&self, value: f64, t: i64) -> Result<()> {
        check_finite(value)?;
        self.cell
            .record(&self.cfg, value, t, false, &Keep::Keep, &pin());
        Ok(())
    }

    /// The rate per second at `t`; purges obsolete samples as Kafka's measurement does.
    pub fn measure(&self, t: i64) -> f64 {
        self.cell.measure(&self.cfg, t, &pin())
    }

    /// A copy of the current samples (for model checks and tests).
    #[doc(hidden)]
    pub fn samples_snapshot(&self) -> Samples {
        self.cell.samples(&pin())
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
        // 12 slots of 10 ms, times 0..=109: up to 10 rollovers never reuse a slot, and no
        // sample is ever older than the 110 ms horizon (so no measurement purges one):
        // every recorded value must still be in the ring at the end.
        let cfg = WindowConfig::new(11, 10).unwrap();
        let rate = std::sync::Arc::new(SampledRate::new(cfg, Some(1e12)).unwrap());
        let threads: Vec<_> = (0..4)
            .map(|k| {
                let rate = rate.clone();
                std::thread::spawn(move || {
                    for i in 0..20_000i64 {
                        if k % 2 == 0 {
                            rate.record(1.0, i * 110 / 20_000).unwrap();
                        } else {
                            rate.record_no_check(1.0, i * 110 / 20_000).unwrap();
                        }
                    }
                })
            })
            .collect();
        for t in threads {
            t.join().unwrap();
        }
        let samples = rate.samples_snapshot();
        let total: f64 = samples.slots().iter().map(|s| s.value).sum();
        assert_eq!(total, 80_000.0);
        assert!(samples.slots().len() > 1, "the test must exercise rollover");
    }
}
