//! Recommended quotas: per entity, the smallest quota that keeps the fraction of its
//! requests that are throttled at most a target, found by bisection over replays of the
//! entity's own traffic.
//!
//! The quota applies per broker: each candidate is replayed through one sensor per broker
//! that enforces it (a fresh sensor, as a manager with only that quota would create on the
//! entity's first request; no expiry), with a fetch's usage taken back when either its
//! own quota or the request quota throttled it. The replay of one candidate is the same
//! arithmetic as [`crate::QuotaManager::record_batch`] on a manager holding only a
//! `<default>` client quota of that value (tested against it), without the manager.
//!
//! Entities are independent, so a whole group of them is searched in one call; the search
//! itself (start, widening, bisection to 0.1 %, rounding) is the back-test's documented
//! one, step for step, so its results are the same numbers.

use super::ring::Rings;
use crate::error::{check_usage, Error, Result};
use crate::kafka::quota_type::QuotaType;
use crate::kafka::release::KafkaRelease;
use crate::kafka::samples::WindowConfig;
use crate::kafka::units::rate_units;

/// The traffic of a group of entities, sorted by entity, then broker, then replay order.
#[derive(Debug, Clone, Copy)]
pub struct RecommendTraffic<'a> {
    /// When each request was recorded (epoch ms), ascending within a run.
    pub times: &'a [i64],
    /// Its usage: bytes, or handler-thread nanoseconds for the request quota.
    pub usage: &'a [f64],
    /// Fetch only: the request quota throttled it (its bytes are unrecorded too).
    pub unrecord_if: Option<&'a [bool]>,
    /// Row offsets of the runs (one entity on one broker): `0 = runs[0] <= ... <= runs[r] = n`.
    pub runs: &'a [usize],
    /// Run offsets of the entities: `0 = entities[0] <= ... <= entities[e] = r`, entity `k`
    /// holds runs `entities[k]..entities[k + 1]` (brokers in the order their sums add).
    pub entities: &'a [usize],
}

/// What the search found for one entity.
#[derive(Debug, Clone, Copy, PartialEq)]
pub struct Recommendation {
    /// The smallest quota found (rounded up to whole bytes/s, or hundredths of a percent
    /// for the request quota), within 0.1 % of the smallest whose fraction meets the target.
    pub quota: f64,
    /// The fraction of the entity's requests throttled under [`Recommendation::quota`].
    pub throttled_fraction: f64,
}

/// Bisection stops when `high / low` is at most this.
const PRECISION: f64 = 1.0 + 1e-3;

/// One broker's run of an entity: times, usage in the quota's unit, fetch drops.
type Run<'a> = (&'a [i64], Vec<f64>, Option<&'a [bool]>);

/// One entity's traffic, checked and in the quota's unit.
struct Entity<'a> {
    quota_type: QuotaType,
    window: &'a WindowConfig,
    release: KafkaRelease,
    /// Per broker: times, usage in the quota's unit, fetch drops.
    runs: Vec<Run<'a>>,
    total: usize,
}

impl Entity<'_> {
    /// How many requests a quota of `quota` throttles, one fresh sensor per broker.
    fn throttled(&self, quota: f64) -> usize {
        let fetch = self.quota_type == QuotaType::Fetch;
        let mut throttled = 0;
        for (times, units, drops) in &self.runs {
            let mut rings = Rings::new(*self.window);
            let sensor = rings.push(quota);
            for (i, (&t, &v)) in times.iter().zip(units).enumerate() {
                let measured = rings.record(sensor, v, t, true);
                let throttle = measured.throttle(self.quota_type, self.window, self.release, quota);
                if throttle > 0 {
                    throttled += 1;
                }
                if fetch && (throttle > 0 || drops.is_some_and(|d| d[i])) {
                    rings.record(sensor, -v, t, false);
                }
            }
        }
        throttled
    }

    fn fraction(&self, quota: f64) -> f64 {
        if self.total == 0 {
            return 0.0;
        }
        self.throttled(quota) as f64 / self.total as f64
    }

    /// A rate no measurement can exceed, so a quota this high throttles nothing: the
    /// largest usage within a sensor's horizon over the shortest span it divides by (with
    /// one sample, all usage over one millisecond).
    fn rate_bound(&self) -> f64 {
        let num_samples = i64::from(self.window.num_samples());
        let window_ms = self.window.window_ms();
        if num_samples == 1 {
            let mut total = 0.0;
            for (_, units, _) in &self.runs {
                total += numpy_sum(units);
            }
            return (total / 0.001).max(1e-6);
        }
        let horizon = (num_samples + 1) * window_ms + 1;
        let span_s = ((num_samples - 1) * window_ms) as f64 / 1000.0;
        let mut largest = 0.0_f64;
        for (times, units, _) in &self.runs {
            let mut running = Vec::with_capacity(units.len() + 1);
            let mut sum = 0.0;
            running.push(0.0);
            for &v in units {
                sum += v;
                running.push(sum);
            }
            let mut first = 0;
            for (i, &t) in times.iter().enumerate() {
                let edge = t - horizon;
                while first < times.len() && times[first] <= edge {
                    first += 1;
                }
                let within = running[i + 1] - running[first];
                if within > largest {
                    largest = within;
                }
            }
        }
        (largest / span_s).max(1e-6)
    }

    fn round_up(&self, value: f64) -> f64 {
        match self.quota_type {
            QuotaType::Request => (value * 100.0).ceil() / 100.0,
            _ => value.ceil(),
        }
    }

    fn search(&self, target: f64) -> Recommendation {
        let fine = |quota: f64| self.fraction(quota) <= target;
        let mut high = self.rate_bound() * (1.0 + 1e-9);
        for _ in 0..64 {
            if fine(high) {
                break;
            }
            high *= 2.0;
        }
        let mut low = high * 1e-4;
        while low > 1e-9 && fine(low) {
            high = low;
            low *= 1e-4;
        }
        while high / low > PRECISION {
            let middle = (low * high).sqrt();
            if fine(middle) {
                high = middle;
            } else {
                low = middle;
            }
        }
        // The fraction need not fall monotonically (an unrecorded fetch changes what later
        // requests see): raise the rounded value until it meets the target.
        let mut chosen = self.round_up(high);
        for _ in 0..10_000 {
            if fine(chosen) {
                break;
            }
            chosen = self.round_up(chosen * PRECISION);
        }
        Recommendation {
            quota: chosen,
            throttled_fraction: self.fraction(chosen),
        }
    }
}

/// NumPy's sum of a float64 array (`ndarray.sum()`), bit for bit: the first element plus
/// the pairwise sum of the rest (blocks of up to 128 in eight accumulators).
fn numpy_sum(values: &[f64]) -> f64 {
    fn pairwise(a: &[f64]) -> f64 {
        let n = a.len();
        if n < 8 {
            let mut res = 0.0;
            for &v in a {
                res += v;
            }
            res
        } else if n <= 128 {
            let mut r = [0.0; 8];
            r.copy_from_slice(&a[..8]);
            let whole = n - n % 8;
            let mut i = 8;
            while i < whole {
                for (j, acc) in r.iter_mut().enumerate() {
                    *acc += a[i + j];
                }
                i += 8;
            }
            let mut res = ((r[0] + r[1]) + (r[2] + r[3])) + ((r[4] + r[5]) + (r[6] + r[7]));
            for &v in &a[whole..] {
                res += v;
            }
            res
        } else {
            let mut half = n / 2;
            half -= half % 8;
            pairwise(&a[..half]) + pairwise(&a[half..])
        }
    }
    match values.split_first() {
        None => 0.0,
        Some((&first, rest)) => first + pairwise(rest),
    }
}

fn check_offsets(name: &str, offsets: &[usize], end: usize) -> Result<()> {
    let ok = offsets.first() == Some(&0)
        && offsets.last() == Some(&end)
        && offsets.windows(2).all(|w| w[0] <= w[1]);
    if ok {
        Ok(())
    } else {
        Err(Error::InvalidUsage(format!(
            "invalid {name} offsets {offsets:?}: they must rise from 0 to {end}"
        )))
    }
}

/// Per entity of `traffic`, the smallest quota of `quota_type` (enforced per broker with
/// `window`, as Kafka `release` throttles) that throttles at most `target` of its
/// requests, and the fraction it throttles.
///
/// Errors name the bad value: a target outside `[0, 1)`, arrays of different lengths,
/// offsets that do not cover the rows, usage that is not a finite number `>= 0`, or
/// `unrecord_if` for a quota type other than fetch.
pub fn recommend(
    quota_type: QuotaType,
    window: &WindowConfig,
    release: KafkaRelease,
    target: f64,
    traffic: &RecommendTraffic<'_>,
) -> Result<Vec<Recommendation>> {
    if !(0.0..1.0).contains(&target) {
        return Err(Error::InvalidUsage(format!(
            "invalid target {target:?}: expected a fraction in [0, 1)"
        )));
    }
    let n = traffic.times.len();
    if traffic.usage.len() != n || traffic.unrecord_if.is_some_and(|u| u.len() != n) {
        return Err(Error::InvalidUsage(format!(
            "traffic arrays differ in length: times {n}, usage {}{}",
            traffic.usage.len(),
            traffic
                .unrecord_if
                .map(|u| format!(", unrecord_if {}", u.len()))
                .unwrap_or_default()
        )));
    }
    if traffic.unrecord_if.is_some() && quota_type != QuotaType::Fetch {
        return Err(Error::InvalidUsage(format!(
            "unrecord_if given for a {} quota: only fetch usage is unrecorded; pass None",
            quota_type.as_str()
        )));
    }
    check_offsets("run", traffic.runs, n)?;
    check_offsets("entity", traffic.entities, traffic.runs.len() - 1)?;
    let mut units = Vec::with_capacity(n);
    for (i, &v) in traffic.usage.iter().enumerate() {
        let v = check_usage(v).map_err(|e| Error::InvalidUsage(format!("row {i}: {e}")))?;
        units.push(rate_units(quota_type, v));
    }
    let mut out = Vec::with_capacity(traffic.entities.len() - 1);
    for runs in traffic.entities.windows(2) {
        let mut entity = Entity {
            quota_type,
            window,
            release,
            runs: Vec::with_capacity(runs[1] - runs[0]),
            total: 0,
        };
        for rows in traffic.runs[runs[0]..=runs[1]].windows(2) {
            let (a, b) = (rows[0], rows[1]);
            if a == b {
                continue;
            }
            if let Some(i) = (a + 1..b).find(|&i| traffic.times[i] < traffic.times[i - 1]) {
                return Err(Error::InvalidUsage(format!(
                    "times out of order at row {i}: {} after {} (sort each run by time)",
                    traffic.times[i],
                    traffic.times[i - 1]
                )));
            }
            entity.runs.push((
                &traffic.times[a..b],
                units[a..b].to_vec(),
                traffic.unrecord_if.map(|u| &u[a..b]),
            ));
            entity.total += b - a;
        }
        out.push(entity.search(target));
    }
    Ok(out)
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::{QuotaEntity, QuotaManager, DEFAULT_SENSOR_EXPIRY_MS};

    /// A small deterministic generator (fixed seed: the same traces every run).
    struct Lcg(u64);

    impl Lcg {
        fn next(&mut self, bound: u64) -> u64 {
            self.0 = self
                .0
                .wrapping_mul(6_364_136_223_846_793_005)
                .wrapping_add(1_442_695_040_888_963_407);
            (self.0 >> 33) % bound
        }
    }

    fn trace(rng: &mut Lcg, n: usize) -> (Vec<i64>, Vec<f64>, Vec<bool>) {
        let mut t = 1_700_000_000_000_i64;
        let (mut times, mut usage, mut drops) = (vec![], vec![], vec![]);
        for _ in 0..n {
            t += rng.next(700) as i64;
            times.push(t);
            usage.push(rng.next(50_000) as f64);
            drops.push(rng.next(10) == 0);
        }
        (times, usage, drops)
    }

    #[test]
    fn one_candidate_equals_a_manager_with_only_that_quota() {
        let mut rng = Lcg(14);
        for quota_type in [QuotaType::Produce, QuotaType::Fetch, QuotaType::Request] {
            for window in [
                WindowConfig::QUOTA_DEFAULT,
                WindowConfig::new(2, 2000).unwrap(),
                WindowConfig::new(1, 1000).unwrap(),
            ] {
                let (times, usage, drops) = trace(&mut rng, 600);
                let fetch = quota_type == QuotaType::Fetch;
                let entity = Entity {
                    quota_type,
                    window: &window,
                    release: KafkaRelease::DEFAULT,
                    runs: vec![(
                        &times[..],
                        usage.iter().map(|&v| rate_units(quota_type, v)).collect(),
                        fetch.then_some(&drops[..]),
                    )],
                    total: times.len(),
                };
                for quota in [1.0, 500.0, 20_000.0, 60_000.0, 1e9] {
                    let m =
                        QuotaManager::new(quota_type, window, DEFAULT_SENSOR_EXPIRY_MS).unwrap();
                    m.set_quota(&QuotaEntity::parse(None, Some("<default>")).unwrap(), quota)
                        .unwrap();
                    let keys = vec![(String::new(), "probe".to_owned())];
                    let index = vec![0_i64; times.len()];
                    let expected = m
                        .record_batch(&times, &index, &usage, &keys, fetch.then_some(&drops[..]))
                        .unwrap()
                        .iter()
                        .filter(|&&t| t > 0)
                        .count();
                    assert_eq!(entity.throttled(quota), expected, "{quota_type:?} {quota}");
                }
            }
        }
    }

    #[test]
    fn the_recommendation_meets_the_target_and_a_lower_quota_does_not() {
        let mut rng = Lcg(7);
        let (times, usage, _) = trace(&mut rng, 2_000);
        let traffic = RecommendTraffic {
            times: &times,
            usage: &usage,
            unrecord_if: None,
            runs: &[0, 1_000, 2_000],
            entities: &[0, 1, 2],
        };
        let window = WindowConfig::QUOTA_DEFAULT;
        let out = recommend(
            QuotaType::Produce,
            &window,
            KafkaRelease::DEFAULT,
            0.01,
            &traffic,
        )
        .unwrap();
        assert_eq!(out.len(), 2);
        for (k, rec) in out.iter().enumerate() {
            assert!(rec.throttled_fraction <= 0.01, "{rec:?}");
            let rows = k * 1_000..(k + 1) * 1_000;
            let entity = Entity {
                quota_type: QuotaType::Produce,
                window: &window,
                release: KafkaRelease::DEFAULT,
                runs: vec![(&times[rows.clone()], usage[rows].to_vec(), None)],
                total: 1_000,
            };
            assert_eq!(entity.fraction(rec.quota), rec.throttled_fraction);
            assert!(entity.fraction(rec.quota / 1.01) > 0.01, "{rec:?}");
        }
    }

    #[test]
    fn bad_input_is_named() {
        let window = WindowConfig::QUOTA_DEFAULT;
        let traffic = RecommendTraffic {
            times: &[1, 2],
            usage: &[1.0, -3.0],
            unrecord_if: None,
            runs: &[0, 2],
            entities: &[0, 1],
        };
        let refused = |target: f64, traffic: &RecommendTraffic<'_>| {
            recommend(
                QuotaType::Produce,
                &window,
                KafkaRelease::DEFAULT,
                target,
                traffic,
            )
            .unwrap_err()
            .to_string()
        };
        let e = refused(0.1, &traffic);
        assert!(e.contains("-3.0"), "{e}");
        let e = refused(1.0, &traffic);
        assert!(e.contains("target 1.0"), "{e}");
        let bad_runs = RecommendTraffic {
            usage: &[1.0, 3.0],
            runs: &[0, 1],
            ..traffic
        };
        let e = refused(0.1, &bad_runs);
        assert!(e.contains("[0, 1]"), "{e}");
        let unordered = RecommendTraffic {
            times: &[5, 2],
            usage: &[1.0, 3.0],
            ..traffic
        };
        let e = refused(0.1, &unordered);
        assert!(e.contains("2 after 5"), "{e}");
    }
}
