//! Kafka's `TokenBucket` stat (KIP-599), the measure of the controller-mutation quota.
//!
//! The bucket holds `tokens` (a double, possibly negative) and the time of its last
//! update. At the pinned commit (`apache/kafka@1eb7644349cb07139d6a3c1ad1986979647cac99`,
//! `clients/.../metrics/stats/TokenBucket.java`) the arithmetic is, with quota Q (the
//! metric config's bound, mutations per second), N samples and windows of W ms:
//!
//! * burst `B = (N * (W / 1000.0)) * Q` — all `quota.window.num` samples, so with
//!   Kafka's defaults (11 x 1 s) a bucket holds 11 seconds of quota (the sampled rate's
//!   padded window is 10 s). `TokenBucket.java` has computed it this way since it was
//!   added (apache/kafka b5f90daf, KAFKA-10162, first released in 2.7.0) and the pinned
//!   commit still does; its quota updates reach the sensor since KAFKA-10458 (also
//!   2.7.0). This crate follows the pinned commit.
//! * refill at `t`: `tokens = min(B, tokens + Q * ((t - last) / 1000.0))`, `last = t`;
//!   a measurement refills, so *measuring changes the state*, as in Kafka.
//! * record `v` at `t`: refill, then `tokens = min(B, tokens - v)` (a negative `v` gives
//!   tokens back, never above the burst).
//! * the quota is violated when the measured tokens are `< 0` (not the bound check of
//!   the sampled rate); the throttle is `Math.round(-tokens / Q * 1000)` ms, the time
//!   the refill needs to bring the bucket back to zero.
//!
//! A new bucket starts with 0 tokens *last updated at time 0*: on a broker clock (epoch
//! milliseconds) its first refill fills it to the burst; in a test that starts its clock
//! at 0 it starts empty.
//!
//! Kafka enforces it two ways (`ControllerMutationQuotaManager.scala`):
//!
//! * **strict** (new request versions): check first (a measurement), refuse the mutation
//!   with the throttle if the tokens are already below zero, otherwise record it without a
//!   check (so one request may overdraw the bucket);
//! * **permissive** (old versions): record, then check: the mutation is always accepted
//!   and throttled if it overdrew the bucket.
//!
//! [`BucketCell`] keeps one bucket in one 128-bit atomic word: every operation (refill,
//! record, check-then-record) is one compare-and-swap, so it is atomic, as Kafka's
//! `synchronized` sensor makes it, and lock-free.

use crate::error::{Error, Result};
use crate::kafka::javamath;
use crate::kafka::release::KafkaRelease;
use crate::kafka::samples::WindowConfig;
use crate::sync::cow::AtomicWord;

/// Java's `Math.min(double, double)`: NaN if either is NaN, and -0.0 below 0.0.
pub fn java_min(a: f64, b: f64) -> f64 {
    if a.is_nan() || b.is_nan() {
        f64::NAN
    } else if a == 0.0 && b == 0.0 {
        if a.is_sign_negative() {
            a
        } else {
            b
        }
    } else if a <= b {
        a
    } else {
        b
    }
}

/// `MetricsUtils.convert(ms, SECONDS)`: `ms / 1000.0`.
fn seconds(ms: i64) -> f64 {
    ms as f64 / 1000.0
}

/// The most tokens a bucket holds: `samples * window_seconds * quota`, evaluated left to
/// right in double precision as Kafka does.
pub fn burst(cfg: &WindowConfig, quota: f64) -> f64 {
    f64::from(cfg.num_samples()) * seconds(cfg.window_ms()) * quota
}

/// The throttle of a bucket measured at `tokens` (< 0) against `quota`:
/// `Math.round(-tokens / quota * 1000)` (`ControllerMutationQuotaManager.throttleTimeMs`).
pub fn throttle_time(tokens: f64, quota: f64) -> i64 {
    javamath::round(-tokens / quota * 1000.0)
}

/// The throttle still to wait `now`, of a throttle of `throttle_ms` computed at
/// `recorded_at`: `max(0, throttle - (now - recorded_at))` as an int, clamped before the
/// cast, or from 4.2 after it (Kafka's `AbstractControllerMutationQuota.throttleTime`, for
/// a response sent after the request waited).
pub fn remaining_throttle(
    throttle_ms: i64,
    recorded_at: i64,
    now: i64,
    release: KafkaRelease,
) -> i32 {
    let left = throttle_ms.wrapping_sub(now.wrapping_sub(recorded_at));
    if release.casts_mutation_throttle_first() {
        // (4.2 answers 0 for a quota that never throttled, without the subtraction.)
        if throttle_ms == 0 {
            return 0;
        }
        javamath::long_to_int(left).max(0)
    } else {
        javamath::long_to_int(left.max(0))
    }
}

/// The plain state of one bucket (Kafka's `TokenBucket` fields).
#[derive(Debug, Clone, Copy, PartialEq)]
pub struct Bucket {
    /// Remaining tokens; negative when overdrawn.
    pub tokens: f64,
    /// The time of the last refill.
    pub last_update_ms: i64,
}

impl Default for Bucket {
    fn default() -> Self {
        Bucket::NEW
    }
}

/// How a strict or permissive record ended.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct MutationCheck {
    /// Whether the mutation was recorded (a strict check refuses it when the bucket was
    /// already overdrawn; a permissive one always records).
    pub accepted: bool,
    /// Whether the check found the bucket overdrawn (tokens < 0): Kafka's
    /// `QuotaViolationException`.
    pub violated: bool,
    /// Kafka's throttle time as a long (0 when the quota is not violated).
    pub throttle_ms: i64,
}

impl MutationCheck {
    /// Accepted, not throttled.
    pub const FREE: MutationCheck = MutationCheck {
        accepted: true,
        violated: false,
        throttle_ms: 0,
    };
}

impl Bucket {
    /// A new bucket: no tokens, last updated at time 0 (as Kafka constructs it).
    pub const NEW: Bucket = Bucket {
        tokens: 0.0,
        last_update_ms: 0,
    };

    /// Refills at `t` (the measurement); returns the tokens.
    pub fn measure(&mut self, cfg: &WindowConfig, quota: f64, t: i64) -> f64 {
        let burst = burst(cfg, quota);
        self.refill(quota, burst, t);
        self.tokens
    }

    fn refill(&mut self, quota: f64, burst: f64, t: i64) {
        let elapsed = seconds(t.wrapping_sub(self.last_update_ms));
        self.tokens = java_min(burst, self.tokens + quota * elapsed);
        self.last_update_ms = t;
    }

    /// Records `value` at `t` without a check (`TokenBucket.record`).
    pub fn record(&mut self, cfg: &WindowConfig, quota: f64, value: f64, t: i64) {
        let burst = burst(cfg, quota);
        self.refill(quota, burst, t);
        self.tokens = java_min(burst, self.tokens - value);
    }

    /// The quota check of a sensor holding this bucket (`Sensor.checkQuotas`): measures at
    /// `t` and gives the throttle when the tokens are below zero.
    pub fn check(&mut self, cfg: &WindowConfig, quota: f64, t: i64) -> Option<i64> {
        let tokens = self.measure(cfg, quota, t);
        (tokens < 0.0).then(|| throttle_time(tokens, quota))
    }

    /// Strict enforcement: check, then record `value` only if the bucket was not overdrawn.
    pub fn record_strict(
        &mut self,
        cfg: &WindowConfig,
        quota: f64,
        value: f64,
        t: i64,
    ) -> MutationCheck {
        match self.check(cfg, quota, t) {
            Some(throttle_ms) => MutationCheck {
                accepted: false,
                violated: true,
                throttle_ms,
            },
            None => {
                self.record(cfg, quota, value, t);
                MutationCheck::FREE
            }
        }
    }

    /// Permissive enforcement: record `value`, then check.
    pub fn record_permissive(
        &mut self,
        cfg: &WindowConfig,
        quota: f64,
        value: f64,
        t: i64,
    ) -> MutationCheck {
        self.record(cfg, quota, value, t);
        let throttle = self.check(cfg, quota, t);
        MutationCheck {
            accepted: true,
            violated: throttle.is_some(),
            throttle_ms: throttle.unwrap_or(0),
        }
    }
}

fn pack(b: Bucket) -> u128 {
    (u128::from(b.last_update_ms as u64) << 64) | u128::from(b.tokens.to_bits())
}

fn unpack(word: u128) -> Bucket {
    Bucket {
        tokens: f64::from_bits(word as u64),
        last_update_ms: (word >> 64) as u64 as i64,
    }
}

/// One bucket shared between threads: each operation is one compare-and-swap of the
/// whole state, so operations are atomic and no thread ever waits for another.
pub struct BucketCell {
    word: AtomicWord,
}

impl Default for BucketCell {
    fn default() -> Self {
        BucketCell::new()
    }
}

impl BucketCell {
    /// A new bucket ([`Bucket::NEW`]).
    pub fn new() -> Self {
        BucketCell {
            word: AtomicWord::new(pack(Bucket::NEW)),
        }
    }

    /// The state now (no refill).
    pub fn get(&self) -> Bucket {
        unpack(self.word.load())
    }

    /// Applies `op` to the current state atomically; `op` may run more than once.
    pub fn update<R>(&self, mut op: impl FnMut(&mut Bucket) -> R) -> R {
        let mut word = self.word.load();
        loop {
            let mut bucket = unpack(word);
            let result = op(&mut bucket);
            let new = pack(bucket);
            if new == word {
                return result;
            }
            match self.word.compare_exchange(word, new) {
                Ok(_) => return result,
                Err(now) => word = now,
            }
        }
    }

    /// [`Bucket::measure`], atomically.
    pub fn measure(&self, cfg: &WindowConfig, quota: f64, t: i64) -> f64 {
        self.update(|b| b.measure(cfg, quota, t))
    }

    /// [`Bucket::record`], atomically.
    pub fn record(&self, cfg: &WindowConfig, quota: f64, value: f64, t: i64) {
        self.update(|b| b.record(cfg, quota, value, t))
    }

    /// [`Bucket::record_strict`], atomically.
    pub fn record_strict(
        &self,
        cfg: &WindowConfig,
        quota: f64,
        value: f64,
        t: i64,
    ) -> MutationCheck {
        self.update(|b| b.record_strict(cfg, quota, value, t))
    }

    /// [`Bucket::record_permissive`], atomically.
    pub fn record_permissive(
        &self,
        cfg: &WindowConfig,
        quota: f64,
        value: f64,
        t: i64,
    ) -> MutationCheck {
        self.update(|b| b.record_permissive(cfg, quota, value, t))
    }
}

/// Checks a number of permits (partitions created or deleted): finite and `>= 0`.
pub fn check_permits(value: f64) -> Result<f64> {
    if value.is_finite() && value >= 0.0 {
        Ok(value)
    } else {
        Err(Error::InvalidUsage(format!(
            "invalid permits {value:?}: the number of partitions mutated must be a finite \
             number >= 0"
        )))
    }
}

#[cfg(all(test, not(loom)))]
mod tests {
    use super::*;

    fn cfg(samples: i64, window_ms: i64) -> WindowConfig {
        WindowConfig::new(samples, window_ms).unwrap()
    }

    #[test]
    fn kafka_token_bucket_test_record() {
        // TokenBucketTest.testRecord: quota 5, 10 samples of 2 s: burst 100.
        let c = cfg(10, 2000);
        let t0 = 1_700_000_000_000;
        let mut b = Bucket::NEW;
        assert_eq!(b.measure(&c, 5.0, t0), 100.0);
        b.record(&c, 5.0, 60.0, t0);
        assert_eq!(b.measure(&c, 5.0, t0), 40.0);
        b.record(&c, 5.0, 5.0, t0 + 2000);
        assert_eq!(b.measure(&c, 5.0, t0 + 2000), 45.0);
        b.record(&c, 5.0, 60.0, t0 + 4000);
        assert_eq!(b.measure(&c, 5.0, t0 + 4000), -5.0);
    }

    #[test]
    fn kafka_strict_and_permissive_quota_tests() {
        // StrictControllerMutationQuotaTest / PermissiveControllerMutationQuotaTest:
        // quota 10, 10 samples of 1 s, three records of 90 at T.
        let c = cfg(10, 1000);
        let t0 = 1_700_000_000_000;
        let mut b = Bucket::NEW;
        assert_eq!(b.record_strict(&c, 10.0, 90.0, t0), MutationCheck::FREE);
        assert_eq!(b.record_strict(&c, 10.0, 90.0, t0), MutationCheck::FREE);
        let refused = b.record_strict(&c, 10.0, 90.0, t0);
        assert_eq!((refused.accepted, refused.throttle_ms), (false, 8000));
        assert_eq!(
            remaining_throttle(8000, t0, t0 + 5000, KafkaRelease::DEFAULT),
            3000
        );

        let mut b = Bucket::NEW;
        assert_eq!(b.record_permissive(&c, 10.0, 90.0, t0).throttle_ms, 0);
        assert_eq!(b.record_permissive(&c, 10.0, 90.0, t0).throttle_ms, 8000);
        assert_eq!(b.record_permissive(&c, 10.0, 90.0, t0).throttle_ms, 17000);
        assert_eq!(
            remaining_throttle(17000, t0, t0 + 5000, KafkaRelease::DEFAULT),
            12000
        );
    }

    #[test]
    fn a_remaining_throttle_past_the_int_range_wraps_before_4_2_and_is_0_from_4_2() {
        let r = |v| KafkaRelease::parse(v).unwrap();
        assert_eq!(remaining_throttle(i64::MAX, 0, 0, r("4.1")), -1);
        assert_eq!(remaining_throttle(i64::MAX, 0, 0, r("4.2")), 0);
        assert_eq!(
            remaining_throttle(3_000_000_000, 0, 0, r("4.1")),
            -1_294_967_296
        );
        assert_eq!(remaining_throttle(3_000_000_000, 0, 0, r("4.4")), 0);
        // never throttled (recorded at 0), asked much later: 0 (4.2's guard; 4.1 clamps)
        for v in ["4.1", "4.2"] {
            assert_eq!(remaining_throttle(0, 0, 1_700_000_030_189, r(v)), 0);
        }
        // within the int range, and once fully waited, every release agrees
        for v in ["3.9", "4.1", "4.2", "4.4"] {
            assert_eq!(remaining_throttle(8000, 10, 5010, r(v)), 3000);
            assert_eq!(remaining_throttle(100, 0, 500, r(v)), 0);
        }
    }

    #[test]
    fn throttle_formula() {
        // ControllerMutationQuotaManagerTest.testThrottleTime.
        assert_eq!(throttle_time(0.0, 10.0), 0);
        assert_eq!(throttle_time(-5.0, 10.0), 500);
        assert_eq!(throttle_time(-10.0, 10.0), 1000);
        assert_eq!(remaining_throttle(100, 0, 500, KafkaRelease::DEFAULT), 0);
    }

    #[test]
    fn a_new_bucket_on_a_zero_clock_starts_empty() {
        let c = cfg(11, 1000);
        let mut b = Bucket::NEW;
        assert_eq!(b.measure(&c, 10.0, 0), 0.0);
        assert_eq!(b.measure(&c, 10.0, 500), 5.0);
    }

    #[test]
    fn cell_matches_plain_bucket_and_packs_exactly() {
        let c = cfg(3, 1000);
        let cell = BucketCell::new();
        let mut plain = Bucket::NEW;
        for (i, t) in [5i64, 5, 900, 4000, 3999, -20, 10_000]
            .into_iter()
            .enumerate()
        {
            let v = i as f64 * 3.5;
            if i % 2 == 0 {
                assert_eq!(
                    cell.record_strict(&c, 2.5, v, t),
                    plain.record_strict(&c, 2.5, v, t)
                );
            } else {
                assert_eq!(
                    cell.record_permissive(&c, 2.5, v, t),
                    plain.record_permissive(&c, 2.5, v, t)
                );
            }
            assert_eq!(cell.get(), plain);
        }
        assert_eq!(java_min(-0.0, 0.0).to_bits(), (-0.0f64).to_bits());
        assert!(java_min(f64::NAN, 1.0).is_nan());
        assert!(check_permits(-1.0).is_err());
        assert!(check_permits(f64::NAN).is_err());
    }
}
