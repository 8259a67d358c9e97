//! The sample rings of every sensor of one quota type in one scenario, in one flat block
//! of words per sensor: the replay's compact, sequential copy of [`crate::kafka::samples::Samples`]
//! for the rates (no event counts: a rate never reads them), with the same rules
//! ([`window_over`], [`slot_obsolete`], [`window_from_oldest`], [`per_second`]) and the same
//! numbers bit for bit (a property test below checks it against `Samples`).
//!
//! One sensor's block is `META` words, then the ring's values, starts and last-event times
//! (`num_samples + 1` each), then nothing else: recording touches one contiguous block, and
//! a caller that knows which sensor comes next prefetches it ([`Rings::prefetch`]).
//!
//! **Why it is fast and still exact.** A record with a quota check is Kafka's record, then
//! a purge of the obsolete samples, then the sum of the values *in slot order* (floating
//! point addition is not associative, so that order is kept) and the oldest start. The
//! block remembers what the last full pass found: the oldest start, the sum of the values
//! before the sample in progress, and bounds on every last-event time. A record that stays
//! in the sample in progress, at a time no earlier than any the ring saw, with no sample
//! old enough to purge (known from the bounds, without reading the samples), changes only
//! that sample's value: the sum is the remembered prefix plus the values from the sample in
//! progress on, added in slot order, which is the same sequence of additions as the full
//! pass. Anything else (a new sample, a purge, a time earlier than one seen, Java's
//! wrapping arithmetic) takes the full pass, which is `Samples`' arithmetic.

use crate::kafka::quota::{certainly_within, verdict};
use crate::kafka::quota_type::QuotaType;
use crate::kafka::release::KafkaRelease;
use crate::kafka::samples::{
    per_second, slot_obsolete, window_from_oldest, window_over, WindowConfig,
};
use crate::kafka::sensor::throttle_int;

/// A ring's measurement: the sum of its values (in slot order) and the window in ms it is
/// divided by (Kafka's `Rate`).
#[derive(Debug, Clone, Copy, PartialEq)]
pub(crate) struct Measured {
    pub sum: f64,
    pub window: i64,
}

impl Measured {
    /// The rate per second.
    pub fn rate(&self) -> f64 {
        per_second(self.sum, self.window)
    }

    /// A `quota_type` manager's throttle (Kafka's int, as `release` makes it) for this
    /// measurement checked against `bound` ([`throttle_int`] of [`verdict`]), without the
    /// rate's division when the sum is clearly within the bound ([`certainly_within`]).
    #[inline]
    pub fn throttle(
        &self,
        quota_type: QuotaType,
        window: &WindowConfig,
        release: KafkaRelease,
        bound: f64,
    ) -> i32 {
        if certainly_within(self.sum, bound, self.window) {
            return 0;
        }
        let check = verdict(self.rate(), bound, self.window);
        throttle_int(quota_type, window, release, check)
    }
}

/// `cur | len << 32`: the sample in progress and the number of samples created.
const CUR_LEN: usize = 0;
/// The oldest start, as the last full pass found it (valid while `EXACT`).
const MIN_START: usize = 1;
/// Sum of the values before the sample in progress (`f64` bits; valid while `EXACT`).
const PREFIX: usize = 2;
/// 1 while `MIN_START` and `PREFIX` describe the ring: no sample started or was reset,
/// and the sample in progress did not move, since the last full pass.
const EXACT: usize = 3;
/// At most every sample's last-event time (numerically).
const LOW_LAST: usize = 4;
/// At least every time the ring saw (numerically).
const NEWEST: usize = 5;
/// The owner's words: the sensor's bound (`f64` bits), its last record time, whether it
/// is live.
const BOUND: usize = 6;
const LAST_RECORD: usize = 7;
const LIVE: usize = 8;
const META: usize = 9;
/// The slots of a ring of Kafka's default quota window (`quota.window.num` 11).
const QUOTA_DEFAULT_SLOTS: usize = 12;

/// The rings of many sensors of one window configuration.
#[derive(Debug, Clone)]
pub(crate) struct Rings {
    cfg: WindowConfig,
    /// Slots per ring: `num_samples + 1`.
    slots: usize,
    /// Words per sensor.
    stride: usize,
    words: Vec<u64>,
    /// Whether full passes over a 12-slot ring use AVX2 (the CPU has it).
    avx2: bool,
}

impl Rings {
    pub fn new(cfg: WindowConfig) -> Self {
        let slots = cfg.ring_len();
        #[cfg(target_arch = "x86_64")]
        let avx2 = std::arch::is_x86_feature_detected!("avx2");
        #[cfg(not(target_arch = "x86_64"))]
        let avx2 = false;
        Rings {
            cfg,
            slots,
            stride: META + 3 * slots,
            words: Vec::new(),
            avx2,
        }
    }

    /// Number of sensors.
    pub fn len(&self) -> usize {
        self.words.len() / self.stride
    }

    /// Adds a sensor with an empty ring, not live, bound `bound`; returns its id.
    pub fn push(&mut self, bound: f64) -> usize {
        let id = self.len();
        self.words.resize(self.words.len() + self.stride, 0);
        self.set_bound(id, bound);
        id
    }

    #[inline]
    fn block(&self, s: usize) -> &[u64] {
        &self.words[s * self.stride..(s + 1) * self.stride]
    }

    #[inline]
    fn block_mut(&mut self, s: usize) -> &mut [u64] {
        &mut self.words[s * self.stride..(s + 1) * self.stride]
    }

    /// Asks the CPU to bring sensor `s`'s block into cache (a hint).
    #[inline]
    pub fn prefetch(&self, s: usize) {
        let base = self.words.as_ptr().wrapping_add(s * self.stride);
        let mut offset = 0;
        while offset < self.stride {
            crate::sync::prefetch(base.wrapping_add(offset));
            offset += 8;
        }
        crate::sync::prefetch(base.wrapping_add(self.stride - 1));
    }

    pub fn set_bound(&mut self, s: usize, bound: f64) {
        self.block_mut(s)[BOUND] = bound.to_bits();
    }

    /// Sensor `s`'s block, to work on.
    #[inline]
    pub fn ring(&mut self, s: usize) -> Ring<'_> {
        let (cfg, avx2, slots) = (self.cfg, self.avx2, self.slots);
        Ring {
            cfg,
            avx2,
            slots,
            block: self.block_mut(s),
        }
    }

    /// Kafka's `Sensor.lastRecordTime` and whether the sensor exists (created, and not
    /// removed by expiry as seen at that time).
    #[inline]
    pub fn life(&self, s: usize) -> (i64, bool) {
        let b = self.block(s);
        (b[LAST_RECORD] as i64, b[LIVE] != 0)
    }

    /// (Re)creates sensor `s` live with an empty ring (its bound stays).
    #[cfg(test)]
    pub fn revive(&mut self, s: usize) {
        self.ring(s).revive();
    }

    /// Records `value` at `t` in sensor `s`'s ring ([`Ring::record`]).
    #[inline]
    pub fn record(&mut self, s: usize, value: f64, t: i64, check: bool) -> Measured {
        self.ring(s).record(value, t, check)
    }

    /// Measures sensor `s`'s rate at `t` ([`Ring::measure`]).
    pub fn measure(&mut self, s: usize, t: i64) -> Measured {
        self.ring(s).measure(t)
    }
}

/// One sensor's block of a [`Rings`], borrowed to record into.
pub(crate) struct Ring<'a> {
    cfg: WindowConfig,
    avx2: bool,
    slots: usize,
    block: &'a mut [u64],
}

impl Ring<'_> {
    /// The sensor's bound.
    #[inline]
    pub fn bound(&self) -> f64 {
        f64::from_bits(self.block[BOUND])
    }

    /// Kafka's `Sensor.lastRecordTime` and whether the sensor exists (created, and not
    /// removed by expiry as seen at that time).
    #[inline]
    pub fn life(&self) -> (i64, bool) {
        (self.block[LAST_RECORD] as i64, self.block[LIVE] != 0)
    }

    /// (Re)creates the sensor live with an empty ring (its bound stays). The values of
    /// the slots not created are 0 (the full pass adds them up).
    #[inline]
    pub fn revive(&mut self) {
        self.block[CUR_LEN] = 0;
        self.block[EXACT] = 0;
        self.block[LIVE] = 1;
        self.block[META..META + self.slots].fill(0);
    }

    #[inline]
    pub fn set_last_record(&mut self, t: i64) {
        self.block[LAST_RECORD] = t as u64;
    }

    /// Records `value` at `t`, as [`crate::kafka::samples::Samples::record`]; with `check`, then
    /// measures at `t` as [`crate::kafka::samples::Samples::measure_rate`] and returns the
    /// measurement (else a sum of 0 over 1 ms).
    #[inline]
    pub fn record(&mut self, value: f64, t: i64, check: bool) -> Measured {
        let (cfg, avx2, slots) = (self.cfg, self.avx2, self.slots);
        // Kafka's default ring (11 samples, 12 slots) with its length known to the compiler
        if slots == QUOTA_DEFAULT_SLOTS {
            Self::record_in(&cfg, avx2, QUOTA_DEFAULT_SLOTS, self.block, value, t, check)
        } else {
            Self::record_in(&cfg, avx2, slots, self.block, value, t, check)
        }
    }

    #[inline(always)]
    #[allow(clippy::too_many_arguments)]
    fn record_in(
        cfg: &WindowConfig,
        avx2: bool,
        slots: usize,
        block: &mut [u64],
        value: f64,
        t: i64,
        check: bool,
    ) -> Measured {
        let (meta, rest) = block.split_at_mut(META);
        let (values, rest) = rest.split_at_mut(slots);
        let (starts, lasts) = rest.split_at_mut(slots);
        let mut cur = (meta[CUR_LEN] as u32) as usize;
        let mut len = (meta[CUR_LEN] >> 32) as usize;
        let mut exact = meta[EXACT] != 0;
        let (mut low, mut newest) = (meta[LOW_LAST] as i64, meta[NEWEST] as i64);
        if len == 0 {
            (cur, len, exact) = (0, 1, false);
            values[0] = 0f64.to_bits();
            starts[0] = t as u64;
            lasts[0] = t as u64;
            (low, newest) = (t, t);
        }
        if window_over(cfg, starts[cur] as i64, t) {
            cur = if cur + 1 >= slots { 0 } else { cur + 1 };
            if cur >= len {
                len += 1;
            }
            values[cur] = 0f64.to_bits();
            starts[cur] = t as u64;
            exact = false;
        }
        values[cur] = (f64::from_bits(values[cur]) + value).to_bits();
        lasts[cur] = t as u64;
        // every last-event time stays within [low, newest]
        let ordered = t >= newest;
        low = low.min(t);
        newest = newest.max(t);
        meta[CUR_LEN] = cur as u64 | (len as u64) << 32;
        meta[LOW_LAST] = low as u64;
        meta[NEWEST] = newest as u64;
        if !check {
            meta[EXACT] = u64::from(exact);
            return Measured {
                sum: 0.0,
                window: 1,
            };
        }
        // No purge when the oldest possible last-event time is younger than the horizon
        // and no age wraps: every age is then in [0, t - low].
        let no_purge = ordered && t.checked_sub(low).is_some_and(|age| age < cfg.horizon_ms());
        if exact && no_purge {
            let mut sum = f64::from_bits(meta[PREFIX]);
            for v in &values[cur..len] {
                sum += f64::from_bits(*v);
            }
            let window = window_from_oldest(cfg, meta[MIN_START] as i64, t);
            return Measured { sum, window };
        }
        Self::full_pass(cfg, avx2, meta, values, starts, lasts, cur, len, t)
    }

    /// Measures the rate at `t` (purging, and creating the first sample if the ring is
    /// empty), as [`crate::kafka::samples::Samples::measure_rate`].
    pub fn measure(&mut self, t: i64) -> Measured {
        let (cfg, avx2, slots) = (self.cfg, self.avx2, self.slots);
        let block = &mut *self.block;
        let (meta, rest) = block.split_at_mut(META);
        let (values, rest) = rest.split_at_mut(slots);
        let (starts, lasts) = rest.split_at_mut(slots);
        let cur = (meta[CUR_LEN] as u32) as usize;
        let len = (meta[CUR_LEN] >> 32) as usize;
        if len == 0 {
            // a purge of nothing, then the first sample
            values[0] = 0f64.to_bits();
            starts[0] = t as u64;
            lasts[0] = t as u64;
            meta[CUR_LEN] = 1 << 32;
            meta[LOW_LAST] = t as u64;
            meta[NEWEST] = t as u64;
            return Self::full_pass(&cfg, avx2, meta, values, starts, lasts, 0, 1, t);
        }
        let (low, newest) = (meta[LOW_LAST] as i64, meta[NEWEST] as i64);
        meta[LOW_LAST] = low.min(t) as u64;
        meta[NEWEST] = newest.max(t) as u64;
        Self::full_pass(&cfg, avx2, meta, values, starts, lasts, cur, len, t)
    }

    /// Purges the obsolete samples at `t`, then adds the values in slot order and finds
    /// the oldest start: `Samples`' measurement. Remembers what the fast path needs.
    #[allow(clippy::too_many_arguments)]
    #[inline(always)]
    fn full_pass(
        cfg: &WindowConfig,
        avx2: bool,
        meta: &mut [u64],
        values: &mut [u64],
        starts: &mut [u64],
        lasts: &mut [u64],
        cur: usize,
        len: usize,
        t: i64,
    ) -> Measured {
        #[cfg(target_arch = "x86_64")]
        if let (Ok(values), Ok(starts), Ok(lasts)) = (
            <&mut [u64; 12]>::try_from(&mut *values),
            <&mut [u64; 12]>::try_from(&mut *starts),
            <&mut [u64; 12]>::try_from(&mut *lasts),
        ) {
            if avx2 {
                // SAFETY: the CPU has AVX2 (`Rings::new` asked it).
                let pass =
                    unsafe { avx2::pass_12(values, starts, lasts, cur, len, t, cfg.horizon_ms()) };
                return Self::remember(cfg, meta, pass, t);
            }
        }
        let values = &mut values[..len];
        let starts = &mut starts[..len];
        let lasts = &mut lasts[..len];
        // the purge and the oldest times in one loop (Kafka resets an obsolete slot: value
        // 0, start and last at t), then the sums in slot order
        let (mut min_start, mut low) = (i64::MAX, i64::MAX);
        for i in 0..len {
            let obsolete = slot_obsolete(cfg, lasts[i] as i64, t);
            let start = if obsolete { t } else { starts[i] as i64 };
            let last = if obsolete { t } else { lasts[i] as i64 };
            values[i] = if obsolete { 0 } else { values[i] };
            starts[i] = start as u64;
            lasts[i] = last as u64;
            min_start = min_start.min(start);
            low = low.min(last);
        }
        let (before, from) = values.split_at(cur);
        let prefix = before.iter().fold(0.0, |acc, v| acc + f64::from_bits(*v));
        let sum = from.iter().fold(prefix, |acc, v| acc + f64::from_bits(*v));
        Self::remember(
            cfg,
            meta,
            Pass {
                min_start,
                low,
                prefix,
                sum,
            },
            t,
        )
    }

    /// Keeps what a full pass found for the fast path, and measures.
    #[inline(always)]
    fn remember(cfg: &WindowConfig, meta: &mut [u64], pass: Pass, t: i64) -> Measured {
        meta[MIN_START] = pass.min_start as u64;
        meta[PREFIX] = f64::to_bits(pass.prefix);
        meta[LOW_LAST] = pass.low as u64;
        meta[EXACT] = 1;
        let window = window_from_oldest(cfg, pass.min_start, t);
        Measured {
            sum: pass.sum,
            window,
        }
    }
}

/// What a full pass over a ring finds: the oldest start and last-event time, the sum of
/// the values before the sample in progress and the sum of them all (in slot order).
struct Pass {
    min_start: i64,
    low: i64,
    prefix: f64,
    sum: f64,
}

/// The full pass of a ring of Kafka's default length (12 slots) with AVX2, three slots of
/// four at a time: the same purge (`slot_obsolete`: the wrapping age at least the
/// horizon) and the same sums in slot order.
#[cfg(target_arch = "x86_64")]
mod avx2 {
    use super::Pass;
    use std::arch::x86_64::*;

    /// The lane-wise minimum of signed 64-bit integers.
    #[inline]
    #[target_feature(enable = "avx2")]
    fn min64(a: __m256i, b: __m256i) -> __m256i {
        _mm256_blendv_epi8(a, b, _mm256_cmpgt_epi64(a, b))
    }

    #[inline]
    #[target_feature(enable = "avx2")]
    fn horizontal_min(v: __m256i) -> i64 {
        let mut lanes = [0i64; 4];
        // SAFETY: `lanes` is 32 writable bytes.
        unsafe { _mm256_storeu_si256(lanes.as_mut_ptr().cast(), v) };
        lanes.into_iter().fold(i64::MAX, i64::min)
    }

    /// The purge at `t` of the `len` slots created (the others are left as they are),
    /// and what the pass finds ([`Pass`]).
    #[target_feature(enable = "avx2")]
    pub(super) fn pass_12(
        values: &mut [u64; 12],
        starts: &mut [u64; 12],
        lasts: &mut [u64; 12],
        cur: usize,
        len: usize,
        t: i64,
        horizon: i64,
    ) -> Pass {
        let now = _mm256_set1_epi64x(t);
        let younger = _mm256_set1_epi64x(horizon - 1);
        let created_below = _mm256_set1_epi64x(len as i64);
        let max = _mm256_set1_epi64x(i64::MAX);
        let (mut min_start, mut low) = (max, max);
        for k in 0..3 {
            let at = 4 * k;
            let first = at as i64;
            let index = _mm256_setr_epi64x(first, first + 1, first + 2, first + 3);
            // SAFETY: each array has 12 words, so words at..at + 4 are in bounds.
            let (value, start, last) = unsafe {
                (
                    _mm256_loadu_si256(values.as_ptr().add(at).cast()),
                    _mm256_loadu_si256(starts.as_ptr().add(at).cast()),
                    _mm256_loadu_si256(lasts.as_ptr().add(at).cast()),
                )
            };
            let created = _mm256_cmpgt_epi64(created_below, index);
            let age = _mm256_sub_epi64(now, last);
            let obsolete = _mm256_and_si256(created, _mm256_cmpgt_epi64(age, younger));
            let value = _mm256_andnot_si256(obsolete, value);
            let start = _mm256_blendv_epi8(start, now, obsolete);
            let last = _mm256_blendv_epi8(last, now, obsolete);
            // SAFETY: as for the loads; the three arrays do not overlap (three &mut).
            unsafe {
                _mm256_storeu_si256(values.as_mut_ptr().add(at).cast(), value);
                _mm256_storeu_si256(starts.as_mut_ptr().add(at).cast(), start);
                _mm256_storeu_si256(lasts.as_mut_ptr().add(at).cast(), last);
            }
            min_start = min64(min_start, _mm256_blendv_epi8(max, start, created));
            low = min64(low, _mm256_blendv_epi8(max, last, created));
        }
        // the values in slot order (a slot not created holds 0, which changes no sum of
        // values: none is -0), and the sum before the sample in progress
        let (mut sum, mut partial) = (0.0, [0.0; 12]);
        for (v, p) in values.iter().zip(&mut partial) {
            sum += f64::from_bits(*v);
            *p = sum;
        }
        let prefix = if cur == 0 { 0.0 } else { partial[cur - 1] };
        Pass {
            min_start: horizontal_min(min_start),
            low: horizontal_min(low),
            prefix,
            sum,
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::kafka::samples::Samples;

    /// A fixed pseudo-random sequence (xorshift), the same on every run.
    struct Seq(u64);

    impl Seq {
        fn next(&mut self) -> u64 {
            self.0 ^= self.0 << 13;
            self.0 ^= self.0 >> 7;
            self.0 ^= self.0 << 17;
            self.0
        }
    }

    #[test]
    fn the_default_ring_length_is_kafkas() {
        assert_eq!(QUOTA_DEFAULT_SLOTS, WindowConfig::QUOTA_DEFAULT.ring_len());
    }

    /// What the block remembers holds: the bounds on the last-event times always, the
    /// oldest start and the prefix while `EXACT`.
    fn check_memory(rings: &Rings, s: usize, step: usize) {
        let b = rings.block(s);
        let (cur, len) = ((b[CUR_LEN] as u32) as usize, (b[CUR_LEN] >> 32) as usize);
        let at = |column: usize, i: usize| b[META + column * rings.slots + i];
        for i in 0..len {
            let last = at(2, i) as i64;
            assert!(
                b[LOW_LAST] as i64 <= last && last <= b[NEWEST] as i64,
                "step {step}"
            );
        }
        if b[EXACT] != 0 {
            let min_start = (0..len).map(|i| at(1, i) as i64).min().unwrap();
            let prefix = (0..cur).fold(0.0, |acc, i| acc + f64::from_bits(at(0, i)));
            assert_eq!(b[MIN_START] as i64, min_start, "oldest start, step {step}");
            assert_eq!(b[PREFIX], prefix.to_bits(), "prefix, step {step}");
        }
    }

    /// Records (checked or not), measurements and re-creations at times that mostly move
    /// forward, sometimes repeat, jump, go back or sit near the ends of the i64 range:
    /// every rate, window and final ring equals `Samples`' bit for bit.
    #[test]
    fn rings_equal_samples_bit_for_bit() {
        let mut seq = Seq(0x2545_F491_4F6C_DD1D);
        let simd = [false, Rings::new(WindowConfig::QUOTA_DEFAULT).avx2];
        for ((n, w), avx2) in [(11, 1000), (2, 30_000), (1, 1), (3, 7), (11, 1)]
            .into_iter()
            .flat_map(|c| simd.map(|a| (c, a)))
        {
            let cfg = WindowConfig::new(n, w).unwrap();
            let mut rings = Rings::new(cfg);
            // both full passes: AVX2's (where the CPU has it) and the scalar one
            rings.avx2 = avx2;
            let sensors = 3;
            let mut reference: Vec<Samples> = (0..sensors).map(|_| Samples::new()).collect();
            for _ in 0..sensors {
                rings.push(1.0);
            }
            let mut t: i64 = 0;
            for step in 0..40_000 {
                let r = seq.next();
                t = match r % 64 {
                    0 => t.wrapping_sub((r >> 8) as i64 % (3 * w)),
                    1 => i64::MAX - (r >> 8) as i64 % (4 * w),
                    2 => i64::MIN + (r >> 8) as i64 % (4 * w),
                    3 => t.wrapping_add((r >> 8) as i64 % (40 * w)),
                    4..=30 => t,
                    _ => t.wrapping_add((r >> 8) as i64 % (w + 1)),
                };
                let s = (r >> 40) as usize % sensors;
                let value = match (r >> 48) % 8 {
                    0 => -(((r >> 20) % 5000) as f64),
                    1 => 0.0,
                    2 => ((r >> 20) % 1_000_000) as f64 * 1e-7,
                    _ => ((r >> 20) % 20_000) as f64,
                };
                match (r >> 56) % 16 {
                    0 => {
                        let got = rings.measure(s, t);
                        let got = (got.rate(), got.window);
                        let want = reference[s].measure_rate(&cfg, t);
                        assert_eq!(got.1, want.1, "window, step {step}");
                        assert_eq!(got.0.to_bits(), want.0.to_bits(), "rate, step {step}");
                    }
                    1 => {
                        rings.revive(s);
                        reference[s] = Samples::new();
                    }
                    2..=4 => {
                        rings.record(s, value, t, false);
                        reference[s].record(&cfg, value, t);
                    }
                    _ => {
                        let got = rings.record(s, value, t, true);
                        let got = (got.rate(), got.window);
                        reference[s].record(&cfg, value, t);
                        let want = reference[s].measure_rate(&cfg, t);
                        assert_eq!(got.1, want.1, "window, step {step}");
                        assert_eq!(got.0.to_bits(), want.0.to_bits(), "rate, step {step}");
                    }
                }
                check_memory(&rings, s, step);
            }
            for (s, samples) in reference.iter().enumerate() {
                let b = rings.block(s);
                let len = (b[CUR_LEN] >> 32) as usize;
                let slots: Vec<(u64, i64, i64)> = (0..len)
                    .map(|i| {
                        let at = META + i;
                        (
                            b[at],
                            b[at + rings.slots] as i64,
                            b[at + 2 * rings.slots] as i64,
                        )
                    })
                    .collect();
                let want: Vec<(u64, i64, i64)> = samples
                    .slots()
                    .iter()
                    .map(|x| (x.value.to_bits(), x.start, x.last))
                    .collect();
                assert_eq!(slots, want);
                assert_eq!(
                    (b[CUR_LEN] as u32) as usize,
                    samples.current_index().unwrap_or(0)
                );
            }
        }
    }
}
