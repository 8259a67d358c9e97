//! Sampled windows, as Kafka's `SampledStat` keeps them (spec section 2).
//!
//! [`Samples`] is plain sequential state; the thread-safe sensors wrap it in a
//! copy-on-write cell (see [`crate::sync::cow`]). Every rule that decides a number lives here.

use crate::error::{Error, Result};

/// How a sampled statistic is windowed: `num_samples` windows of `window_ms`.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct WindowConfig {
    num_samples: u32,
    window_ms: i64,
}

impl WindowConfig {
    /// Kafka's quota defaults: `quota.window.num = 11`, `quota.window.size.seconds = 1`.
    pub const QUOTA_DEFAULT: WindowConfig = WindowConfig {
        num_samples: 11,
        window_ms: 1000,
    };
    /// Kafka's broker-wide metric defaults (2 x 30 s), used by the throttle-time average.
    pub const METRICS_DEFAULT: WindowConfig = WindowConfig {
        num_samples: 2,
        window_ms: 30_000,
    };

    /// A window configuration; `num_samples >= 1` and `window_ms >= 1`.
    pub fn new(num_samples: i64, window_ms: i64) -> Result<Self> {
        if !(1..=i64::from(u16::MAX)).contains(&num_samples) {
            return Err(Error::InvalidConfig(format!(
                "invalid num_samples {num_samples}: it must be a whole number from 1 to {}",
                u16::MAX
            )));
        }
        // The horizon num_samples * window_ms must fit in an i64 of milliseconds.
        let max_window = i64::MAX / (num_samples + 1);
        if !(1..=max_window).contains(&window_ms) {
            return Err(Error::InvalidConfig(format!(
                "invalid window_ms {window_ms}: it must be a whole number of milliseconds \
                 from 1 to {max_window}"
            )));
        }
        Ok(WindowConfig {
            num_samples: num_samples as u32,
            window_ms,
        })
    }

    /// N, the number of samples.
    pub fn num_samples(&self) -> u32 {
        self.num_samples
    }

    /// W, the length of one sample window in ms.
    pub fn window_ms(&self) -> i64 {
        self.window_ms
    }

    /// The ring holds one slot more than N.
    pub(crate) fn ring_len(&self) -> usize {
        self.num_samples as usize + 1
    }

    /// N * W: a slot whose last event is this old is obsolete.
    pub(crate) fn horizon_ms(&self) -> i64 {
        i64::from(self.num_samples) * self.window_ms
    }
}

/// One sample slot, as [`Samples::slots`] reports it.
#[derive(Debug, Clone, Copy, PartialEq)]
pub struct Slot {
    /// Sum of the values recorded in this window.
    pub value: f64,
    /// Number of events recorded in this window.
    pub count: u64,
    /// When the window started (ms).
    pub start: i64,
    /// When the last event (or the slot's (re)initialisation) happened (ms).
    pub last: i64,
}

/// The ring of samples of one statistic.
///
/// Slots are created as windows are first used (Kafka's `SampledStat` grows its list the
/// same way), and the ring's one allocation is exactly as long as the ring is, so a sensor
/// that saw one window holds one slot. The allocation holds four columns of `len` words:
/// the values first (the hot path adds them up and reads nothing else), then each slot's
/// event count, start and last-event time, stored as the bits of an `f64` word.
#[derive(Debug, Clone, Default)]
pub struct Samples {
    cur: u32,
    len: u32,
    columns: Box<[f64]>,
}

/// Values compare as `f64` numbers (`-0.0 == 0.0`, NaN equals nothing); the other columns
/// by their bits, since they hold integers.
impl PartialEq for Samples {
    fn eq(&self, other: &Samples) -> bool {
        let n = self.n();
        self.cur == other.cur
            && self.len == other.len
            && self.values() == other.values()
            && self.columns[n..]
                .iter()
                .zip(&other.columns[n..])
                .all(|(a, b)| a.to_bits() == b.to_bits())
    }
}

const COUNT: usize = 1;
const START: usize = 2;
const LAST: usize = 3;

impl Samples {
    /// An empty ring (slots are created lazily; no allocation until the first record).
    pub fn new() -> Self {
        Samples::default()
    }

    fn n(&self) -> usize {
        self.len as usize
    }

    fn word(&self, column: usize, i: usize) -> u64 {
        self.columns[column * self.n() + i].to_bits()
    }

    fn set_word(&mut self, column: usize, i: usize, w: u64) {
        let n = self.n();
        self.columns[column * n + i] = f64::from_bits(w);
    }

    fn values(&self) -> &[f64] {
        &self.columns[..self.n()]
    }

    fn count(&self, i: usize) -> u64 {
        self.word(COUNT, i)
    }

    fn start(&self, i: usize) -> i64 {
        self.word(START, i) as i64
    }

    fn last(&self, i: usize) -> i64 {
        self.word(LAST, i) as i64
    }

    fn starts(&self) -> impl Iterator<Item = i64> + '_ {
        (0..self.n()).map(|i| self.start(i))
    }

    /// The slots in index order (a copy, for inspection and tests).
    pub fn slots(&self) -> Vec<Slot> {
        (0..self.n())
            .map(|i| Slot {
                value: self.values()[i],
                count: self.count(i),
                start: self.start(i),
                last: self.last(i),
            })
            .collect()
    }

    /// Asks the CPU to bring the ring's slots into cache (a hint; does nothing else): a
    /// sequential caller that knows which sensor comes next hides the memory latency.
    #[inline]
    pub fn prefetch(&self) {
        for line in self.columns.chunks(8) {
            crate::sync::prefetch(line.as_ptr());
        }
    }

    /// The index of the sample in progress and the ring's columns (see the type's
    /// documentation), for a caller that keeps them in its own allocation.
    pub(crate) fn raw(&self) -> (u32, &[f64]) {
        (self.cur, &self.columns)
    }

    /// The ring [`Self::raw`] gave these parts of, taking the columns as they are.
    pub(crate) fn from_columns(cur: u32, columns: Box<[f64]>) -> Samples {
        debug_assert_eq!(columns.len() % 4, 0);
        Samples {
            cur,
            len: (columns.len() / 4) as u32,
            columns,
        }
    }

    /// Heap bytes this ring holds (its slots), for memory accounting.
    pub fn heap_bytes(&self) -> usize {
        std::mem::size_of_val(&*self.columns)
    }

    /// Appends a fresh slot started at `t` (a new allocation one slot longer: a ring
    /// reaches its full length once).
    fn push(&mut self, t: i64) {
        let old = self.slots();
        self.len += 1;
        self.columns = vec![0.0; 4 * self.n()].into_boxed_slice();
        for (i, slot) in old.iter().enumerate() {
            self.write(i, slot);
        }
        self.reset(self.n() - 1, t);
    }

    fn write(&mut self, i: usize, slot: &Slot) {
        let n = self.n();
        self.columns[i] = slot.value;
        self.set_word(COUNT, i, slot.count);
        self.set_word(START, i, slot.start as u64);
        self.set_word(LAST, i, slot.last as u64);
        debug_assert_eq!(n, self.n());
    }

    fn reset(&mut self, i: usize, t: i64) {
        self.write(
            i,
            &Slot {
                value: 0.0,
                count: 0,
                start: t,
                last: t,
            },
        );
    }

    fn cur(&self) -> usize {
        self.cur as usize
    }

    /// Records `value` at `t` (section 2.2). Never purges.
    pub fn record(&mut self, cfg: &WindowConfig, value: f64, t: i64) {
        if self.len == 0 {
            self.push(t);
            self.cur = 0;
        }
        if window_over(cfg, self.start(self.cur()), t) {
            // (cur + 1) mod ring length, without a division
            let next = if self.cur() + 1 >= cfg.ring_len() {
                0
            } else {
                self.cur() + 1
            };
            self.cur = next as u32;
            if next >= self.n() {
                self.push(t);
            } else {
                self.reset(next, t);
            }
        }
        let i = self.cur();
        self.columns[i] += value;
        let count = self.count(i) + 1;
        self.set_word(COUNT, i, count);
        self.set_word(LAST, i, t as u64);
    }

    /// [`Self::record`] of `value` at `t`, then [`Self::measure_rate`] at `t`, and the
    /// [`Summary`] of the ring after both, in one pass over the ring: the same numbers
    /// bit for bit (every obsolete slot is purged, then the values are added in slot
    /// order). For a sequential caller that records with a quota check.
    pub fn record_and_measure(
        &mut self,
        cfg: &WindowConfig,
        value: f64,
        t: i64,
    ) -> ((f64, i64), Summary) {
        self.record(cfg, value, t);
        let n = self.n();
        let cur = self.cur();
        let (values, rest) = self.columns.split_at_mut(n);
        let (counts, rest) = rest.split_at_mut(n);
        let (starts, lasts) = rest.split_at_mut(n);
        let (mut sum, mut prefix) = (0.0, 0.0);
        let mut min_start = i64::MAX;
        let (mut min_other_last, mut max_other_last) = (i64::MAX, i64::MIN);
        for i in 0..n {
            let mut last = lasts[i].to_bits() as i64;
            if Self::obsolete(cfg, last, t) {
                values[i] = 0.0;
                counts[i] = f64::from_bits(0);
                starts[i] = f64::from_bits(t as u64);
                lasts[i] = f64::from_bits(t as u64);
                last = t;
            }
            if i == cur {
                prefix = sum;
            } else {
                min_other_last = min_other_last.min(last);
                max_other_last = max_other_last.max(last);
            }
            sum += values[i];
            min_start = min_start.min(starts[i].to_bits() as i64);
        }
        let window = window_from_oldest(cfg, min_start, t);
        let summary = Summary {
            cur_start: starts[cur].to_bits() as i64,
            min_start,
            min_other_last,
            max_other_last,
            prefix,
        };
        ((per_second(sum, window), window), summary)
    }

    /// Whether measuring at `t` would change the state (a purge, or an empty ring).
    pub fn measure_mutates(&self, cfg: &WindowConfig, t: i64) -> bool {
        self.len == 0 || (0..self.n()).any(|i| Self::obsolete(cfg, self.last(i), t))
    }

    fn obsolete(cfg: &WindowConfig, last: i64, t: i64) -> bool {
        slot_obsolete(cfg, last, t)
    }

    /// Re-initialises every obsolete slot at `t` (section 2.3).
    pub fn purge(&mut self, cfg: &WindowConfig, t: i64) {
        for i in 0..self.n() {
            if Self::obsolete(cfg, self.last(i), t) {
                self.reset(i, t);
            }
        }
    }

    /// Sum of the values, in slot-index order (the order Kafka adds them in).
    fn sum(&self) -> f64 {
        self.values().iter().fold(0.0, |acc, v| acc + v)
    }

    /// The elapsed window of section 2.4, on a purged, non-empty ring. Java's arithmetic
    /// exactly: long subtraction, the count of whole windows narrowed to an int, int
    /// subtraction, all wrapping as Java's do.
    fn window_ms(&self, cfg: &WindowConfig, t: i64) -> i64 {
        let oldest = self.starts().min().unwrap_or(t);
        window_from_oldest(cfg, oldest, t)
    }

    /// Measures the rate per second at `t` (Kafka's `Rate.measure`), mutating as Kafka does.
    /// Returns the rate and the window in ms it was divided by.
    pub fn measure_rate(&mut self, cfg: &WindowConfig, t: i64) -> (f64, i64) {
        self.purge(cfg, t);
        if self.len == 0 {
            self.push(t);
            self.cur = 0;
        }
        self.rate_unchanged(cfg, t)
    }

    /// The rate at `t` when measuring would change nothing (see [`Self::measure_mutates`]):
    /// the same number [`Self::measure_rate`] gives, without writing.
    pub fn rate_unchanged(&self, cfg: &WindowConfig, t: i64) -> (f64, i64) {
        debug_assert!(!self.measure_mutates(cfg, t));
        let sum = self.sum();
        let window = self.window_ms(cfg, t);
        (per_second(sum, window), window)
    }

    /// The index of the sample in progress, if any.
    pub fn current_index(&self) -> Option<usize> {
        (self.len != 0).then_some(self.cur())
    }

    /// The value and last-event time of the sample in progress, if any.
    pub fn current(&self) -> Option<(f64, i64)> {
        let i = self.current_index()?;
        Some((self.values()[i], self.last(i)))
    }

    /// Replaces the value and last-event time of the sample in progress (no-op when empty).
    pub fn set_current(&mut self, value: f64, last: i64) {
        if let Some(i) = self.current_index() {
            self.columns[i] = value;
            self.set_word(LAST, i, last as u64);
        }
    }

    /// Re-initialises slot `i` at `t`, as a purge does.
    pub(crate) fn purge_slot(&mut self, i: usize, t: i64) {
        self.reset(i, t);
    }

    /// Replaces the start of the sample in progress (no-op when empty).
    pub(crate) fn set_current_start(&mut self, start: i64) {
        if let Some(i) = self.current_index() {
            self.set_word(START, i, start as u64);
        }
    }

    /// The values of the samples after the one in progress, in index order (see
    /// [`Summary::rate`]).
    pub fn tail(&self) -> &[f64] {
        self.values().get(self.cur() + 1..).unwrap_or(&[])
    }

    /// What an in-place record or a pure measurement needs to know of this ring, in a
    /// few contiguous words; `None` for an empty ring.
    pub fn summary(&self) -> Option<Summary> {
        let cur = self.current_index()?;
        let prefix = self.values()[..cur].iter().fold(0.0, |acc, v| acc + v);
        let (mut min_other_last, mut max_other_last) = (i64::MAX, i64::MIN);
        for i in (0..self.n()).filter(|&i| i != cur) {
            min_other_last = min_other_last.min(self.last(i));
            max_other_last = max_other_last.max(self.last(i));
        }
        Some(Summary {
            cur_start: self.start(cur),
            min_start: self.starts().min().unwrap_or(i64::MAX),
            min_other_last,
            max_other_last,
            prefix,
        })
    }

    /// Measures the average of the recorded values (Kafka's `Avg`): NaN with no events.
    pub fn measure_avg(&mut self, cfg: &WindowConfig, t: i64) -> f64 {
        self.purge(cfg, t);
        let total = self.sum();
        let count: u64 = (0..self.n()).map(|i| self.count(i)).sum();
        if count == 0 {
            f64::NAN
        } else {
            total / count as f64
        }
    }
}

/// A ring reduced to what the hot path reads: the sample in progress's start, the oldest
/// start, the range of the other samples' last-event times and the sum of the values
/// before the sample in progress. The values after it are read from the ring
/// ([`Samples::tail`]) and added one by one: Kafka adds the values in slot order, and
/// floating-point addition is not associative.
#[derive(Debug, Clone, PartialEq)]
pub struct Summary {
    cur_start: i64,
    min_start: i64,
    min_other_last: i64,
    max_other_last: i64,
    prefix: f64,
}

/// A time as a 32-bit offset from `origin`, for [`Summary::to_offsets`]: `i64::MAX` and
/// `i64::MIN` (the "no other sample" bounds) as `i32::MAX` and `i32::MIN`, any other time
/// only if its offset lies strictly between them.
#[inline(always)]
fn offset32(t: i64, origin: i64) -> Option<i32> {
    match t {
        i64::MAX => Some(i32::MAX),
        i64::MIN => Some(i32::MIN),
        _ => t
            .checked_sub(origin)
            .and_then(|o| i32::try_from(o).ok())
            .filter(|&o| o != i32::MAX && o != i32::MIN),
    }
}

fn from_offset32(o: i32, origin: i64) -> i64 {
    match o {
        i32::MAX => i64::MAX,
        i32::MIN => i64::MIN,
        // Wrapping: a torn read of a summary (which the reader then discards, see
        // `rate_cell`) must not panic; an offset `to_offsets` made never wraps.
        _ => origin.wrapping_add(i64::from(o)),
    }
}

impl Summary {
    /// The summary in fewer bytes: the start of the sample in progress, the prefix, and
    /// the other three times as 32-bit offsets from that start; `None` when one does not
    /// fit (then a caller keeps no summary and takes the exact path).
    /// [`Summary::from_offsets`] gives back the same summary, bit for bit.
    #[inline(always)]
    pub fn to_offsets(&self) -> Option<(i64, f64, [i32; 3])> {
        let origin = self.cur_start;
        Some((
            origin,
            self.prefix,
            [
                offset32(self.min_start, origin)?,
                offset32(self.min_other_last, origin)?,
                offset32(self.max_other_last, origin)?,
            ],
        ))
    }

    /// The summary [`Summary::to_offsets`] gave these parts of.
    #[inline]
    pub fn from_offsets(cur_start: i64, prefix: f64, offsets: [i32; 3]) -> Summary {
        Summary {
            cur_start,
            min_start: from_offset32(offsets[0], cur_start),
            min_other_last: from_offset32(offsets[1], cur_start),
            max_other_last: from_offset32(offsets[2], cur_start),
            prefix,
        }
    }
}

impl Summary {
    /// A summary of its parts (see the type's documentation): for a caller that computes
    /// them for a ring it keeps in its own form.
    pub(crate) fn of_parts(
        cur_start: i64,
        min_start: i64,
        min_other_last: i64,
        max_other_last: i64,
        prefix: f64,
    ) -> Summary {
        Summary {
            cur_start,
            min_start,
            min_other_last,
            max_other_last,
            prefix,
        }
    }

    /// Whether no sample but the one in progress is obsolete at `t`, and no other
    /// sample's age at `t` wraps around (then the exact path decides).
    fn others_live(&self, cfg: &WindowConfig, t: i64, cur_last: Option<i64>) -> bool {
        let (mut lo, mut hi) = (self.min_other_last, self.max_other_last);
        if let Some(last) = cur_last {
            lo = lo.min(last);
            hi = hi.max(last);
        }
        if lo > hi {
            return true; // no sample to check
        }
        match (t.checked_sub(lo), t.checked_sub(hi)) {
            (Some(oldest_age), Some(_)) => oldest_age < cfg.horizon_ms(),
            _ => false,
        }
    }

    /// Whether recording at `t` (and, with `check`, measuring at `t` after it) changes
    /// only the sample in progress's value and last-event time.
    pub fn record_in_place(&self, cfg: &WindowConfig, t: i64, check: bool) -> bool {
        t.wrapping_sub(self.cur_start) < cfg.window_ms && (!check || self.others_live(cfg, t, None))
    }

    /// Whether measuring at `t` changes nothing, the sample in progress having last
    /// recorded at `cur_last`.
    pub fn measure_is_pure(&self, cfg: &WindowConfig, t: i64, cur_last: i64) -> bool {
        self.others_live(cfg, t, Some(cur_last))
    }

    /// The rate at `t` (and its window) with the sample in progress holding `current`
    /// and `tail` the ring's [`Samples::tail`]: what [`Samples::measure_rate`] gives when
    /// measuring is pure, bit for bit.
    pub fn rate(
        &self,
        cfg: &WindowConfig,
        t: i64,
        current: f64,
        tail: impl IntoIterator<Item = f64>,
    ) -> (f64, i64) {
        let mut sum = self.prefix + current;
        for v in tail {
            sum += v;
        }
        let window = window_from_oldest(cfg, self.min_start, t);
        (per_second(sum, window), window)
    }

    /// [`Self::rate`] when this summary's prefix holds instead the sum of every sample
    /// but the one in progress, as [`exact_others_sum`] gives it, and `current` is
    /// [`small_whole`]: the same number, bit for bit.
    #[inline]
    pub fn rate_of_whole(&self, cfg: &WindowConfig, t: i64, current: f64) -> (f64, i64) {
        let sum = self.prefix + current;
        let window = window_from_oldest(cfg, self.min_start, t);
        (per_second(sum, window), window)
    }
}

/// Every value at most this large in magnitude, and whole: a sum of two such numbers (or
/// of sums of them) never leaves the integers a double holds exactly (2^53).
pub(crate) const EXACT_LIMIT: f64 = (1u64 << 51) as f64;

/// Whether `v` is a whole number of magnitude at most [`EXACT_LIMIT`].
#[inline]
pub fn small_whole(v: f64) -> bool {
    v.abs() <= EXACT_LIMIT && (v as i64) as f64 == v
}

/// The sum of every sample but the one in progress, when it can stand for adding them
/// in slot order: the prefix (before the sample in progress) and every value of the
/// `tail` (after it) whole, and their magnitudes adding up to at most [`EXACT_LIMIT`].
/// Then, for a [`small_whole`] sample in progress, every partial sum Kafka's slot-order
/// loop makes is a whole number below 2^53, so every addition is exact and the order
/// does not matter: the sum of the others plus the sample in progress is the loop's
/// number, bit for bit. (Neither gives -0.0: the loop starts from +0.0, and an exact
/// sum that is zero is +0.0.)
pub fn exact_others_sum(prefix: f64, tail: &[f64]) -> Option<f64> {
    if !small_whole(prefix) {
        return None;
    }
    let mut magnitude = prefix.abs();
    let mut sum = prefix;
    for &v in tail {
        if !small_whole(v) {
            return None;
        }
        magnitude += v.abs();
        sum += v;
    }
    (magnitude <= EXACT_LIMIT).then_some(sum)
}

/// Kafka's `Rate`: a window's sum per second, `sum / (window_ms / 1000.0)` (a division
/// by the seconds, as Java computes it; not a multiplication, which rounds differently).
#[inline]
pub(crate) fn per_second(sum: f64, window_ms: i64) -> f64 {
    sum / (window_ms as f64 / 1000.0)
}

/// Whether a record at `t` goes to a new sample rather than the one started at `start`
/// (section 2.2; Java's wrapping long subtraction).
#[inline]
pub(crate) fn window_over(cfg: &WindowConfig, start: i64, t: i64) -> bool {
    t.wrapping_sub(start) >= cfg.window_ms
}

/// Whether a sample whose last event was at `last` is obsolete at `t` and is purged
/// (section 2.3; Java's wrapping long subtraction).
#[inline]
pub(crate) fn slot_obsolete(cfg: &WindowConfig, last: i64, t: i64) -> bool {
    t.wrapping_sub(last) >= cfg.horizon_ms()
}

/// Section 2.4's window for the oldest sample start `oldest`, with Java's wrapping
/// long and int arithmetic.
#[inline]
pub(crate) fn window_from_oldest(cfg: &WindowConfig, oldest: i64, t: i64) -> i64 {
    let mut elapsed = t.wrapping_sub(oldest);
    // The usual case without the division: at least N - 1 whole windows elapsed, and
    // few enough that their count fits an int (then it is not below N - 1 either).
    let min_elapsed = i64::from(cfg.num_samples - 1) * cfg.window_ms;
    if elapsed >= min_elapsed && elapsed < cfg.window_ms.saturating_mul(1 << 31) {
        return elapsed.max(1);
    }
    // Java's long division truncates toward zero, as Rust's does; `as i32` wraps.
    let full = (elapsed / cfg.window_ms) as i32;
    let min_full = cfg.num_samples as i32 - 1;
    if full < min_full {
        let missing = i64::from(min_full.wrapping_sub(full));
        elapsed = elapsed.wrapping_add(missing.wrapping_mul(cfg.window_ms));
    }
    elapsed.max(1)
}

#[cfg(test)]
mod tests;
