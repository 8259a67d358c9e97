//! Per-entity summaries accumulated while replaying: what the back-test's `summarize`
//! reports for a sensor (one entity = one sensor's tags of one quota type), computed
//! from the stream in one pass.
//!
//! * Counts and sums are exact integers.
//! * The p99 throttle is the nearest-rank percentile, which needs every value: most
//!   requests are not throttled, so zeros are only counted, and the positive throttles
//!   are kept as a histogram (value -> count, [`Histogram`]). That is exact and holds one
//!   entry per *distinct* throttle value of the entity (request throttles are at most one
//!   window, so at most 1000 values with 1 s windows), not one per request; new values
//!   are appended to a short buffer first and merged in sorted batches.
//! * The peak rate is the largest usage in `num_samples - 1` consecutive whole windows
//!   (`floor(t / window_ms)`), as `summarize`'s `peak_rates`: each entity's events come in
//!   time order, so only the sums of the last `num_samples - 1` windows are kept, in a
//!   ring indexed by the window.

use crate::kafka::quota_type::QuotaType;
use crate::kafka::samples::WindowConfig;
use crate::kafka::units::NANOS_TO_PERCENT;

/// One event as an entity's summary sees it.
#[derive(Debug, Clone, Copy)]
pub(crate) struct Usage {
    /// When it was recorded (sent, in closed loop).
    pub time_ms: i64,
    /// The request's bytes, as a whole number.
    pub bytes: i64,
    /// Its usage of this quota (bytes or thread nanoseconds), as a whole number.
    pub usage: i64,
    /// Whether the usage stayed recorded (a throttled fetch is taken back).
    pub recorded: bool,
    /// This quota type's throttle (a negative, wrapped one counts as 0).
    pub throttle_ms: i32,
    /// How much later than recorded it was sent (closed loop).
    pub added_latency_ms: i64,
}

/// The whole window `floor(t / window_ms)` of the times a caller asks about, with the last
/// one's time range remembered: times that stay in it (as a replay's do, for a whole
/// window's worth of events) cost no division.
#[derive(Debug, Clone, Copy)]
pub(crate) struct WindowIndex {
    window_ms: i64,
    index: i64,
    /// The last window's range `[lo, hi)` (empty before the first call).
    lo: i64,
    hi: i64,
}

impl WindowIndex {
    pub fn new(window: &WindowConfig) -> Self {
        WindowIndex {
            window_ms: window.window_ms(),
            index: 0,
            lo: 0,
            hi: 0,
        }
    }

    /// The whole window of `t`.
    #[inline]
    pub fn of(&mut self, t: i64) -> i64 {
        if t < self.lo || t >= self.hi {
            let w = self.window_ms;
            self.index = t.div_euclid(w);
            // an empty range (always asked again) where the window's ends overflow
            (self.lo, self.hi) = self
                .index
                .checked_mul(w)
                .and_then(|lo| Some((lo, lo.checked_add(w)?)))
                .unwrap_or((0, 0));
        }
        self.index
    }
}

/// What one entity has seen so far, in a few plain words: its positive throttles
/// ([`Histogram`], touched only when it is throttled) and the usage of its last windows
/// for the peak (a ring of `span` sums, see [`EntityStats::add`]) are kept beside it by
/// the caller, so that an ordinary event reads and writes two cache lines and no heap.
#[derive(Debug, Clone, Default)]
pub(crate) struct EntityStats {
    requests: u64,
    bytes: i64,
    usage: i64,
    throttled: u64,
    total_throttle: i64,
    max_throttle: i64,
    total_latency: i64,
    max_latency: i64,
    /// The usage in the last `span` windows (up to the last event's), and its largest.
    in_span: i64,
    peak: i64,
    /// The whole window of the last event.
    window: i64,
    /// The slot of the last event's window in the ring of `span` sums.
    slot: usize,
}

impl EntityStats {
    /// The number of consecutive windows of the peak: `num_samples - 1`, at least 1.
    pub fn span(window: &WindowConfig) -> usize {
        window.num_samples().saturating_sub(1).max(1) as usize
    }

    /// Adds one event. `window` is the whole window of its time (`floor(time / window_ms)`,
    /// from the caller's [`WindowIndex`]); `spans` is this entity's ring of [`Self::span`]
    /// sums (zeros before its first event): the sum of window `k` is in slot `k mod span`
    /// while `k` is one of the last `span` windows up to the last event's, so a window that
    /// falls out of the span is taken out of `in_span` as its slot is reused. Events come
    /// in time order.
    #[inline(always)]
    pub fn add(&mut self, u: &Usage, window: i64, spans: &mut [i64], positive: &mut Histogram) {
        let first = self.requests == 0;
        self.requests += 1;
        self.bytes = self.bytes.wrapping_add(u.bytes);
        self.usage = self.usage.wrapping_add(u.usage);
        let throttle = u.throttle_ms.max(0);
        if throttle > 0 {
            self.throttled += 1;
            positive.add(throttle);
        }
        self.total_throttle += i64::from(throttle);
        self.max_throttle = self.max_throttle.max(i64::from(throttle));
        self.total_latency = self.total_latency.wrapping_add(u.added_latency_ms);
        self.max_latency = self.max_latency.max(u.added_latency_ms);
        // the peak over `span` consecutive windows
        let span = spans.len();
        if first {
            self.slot = 0;
        } else if window != self.window {
            debug_assert!(window > self.window, "events come in time order");
            let gap = window.wrapping_sub(self.window) as u64;
            if gap >= span as u64 {
                spans.fill(0);
                self.in_span = 0;
            } else {
                for _ in 0..gap {
                    self.slot = if self.slot + 1 == span {
                        0
                    } else {
                        self.slot + 1
                    };
                    self.in_span -= spans[self.slot];
                    spans[self.slot] = 0;
                }
            }
        }
        self.window = window;
        let amount = if u.recorded { u.usage } else { 0 };
        spans[self.slot] += amount;
        self.in_span += amount;
        self.peak = self.peak.max(self.in_span);
    }

    /// Nearest-rank percentile (`ceil(percent * n / 100)`-th smallest) of the throttles.
    fn percentile(&self, positive: &Histogram, percent: u64) -> i64 {
        if self.requests == 0 {
            return 0;
        }
        let rank = (percent * self.requests).div_ceil(100);
        let zeros = self.requests - self.throttled;
        if rank <= zeros {
            return 0;
        }
        let mut seen = zeros;
        for (value, count) in positive.counts() {
            seen += count;
            if seen >= rank {
                return i64::from(value);
            }
        }
        self.max_throttle
    }

    pub fn requests(&self) -> u64 {
        self.requests
    }

    #[allow(clippy::too_many_arguments)]
    pub fn summary(
        &self,
        positive: &Histogram,
        scenario: usize,
        quota_type: SummaryType,
        tags: &(String, String),
        quota: Option<f64>,
        window: &WindowConfig,
    ) -> EntitySummary {
        let unit = match quota_type {
            SummaryType::Request => NANOS_TO_PERCENT,
            _ => 1.0,
        };
        let span_s = f64::from(window.num_samples().saturating_sub(1).max(1))
            * window.window_ms() as f64
            / 1000.0;
        EntitySummary {
            scenario,
            quota_type,
            user: tags.0.clone(),
            client_id: tags.1.clone(),
            quota,
            requests: self.requests,
            bytes: self.bytes,
            usage: self.usage,
            throttled_requests: self.throttled,
            total_throttle_ms: self.total_throttle,
            p50_throttle_ms: self.percentile(positive, 50),
            p99_throttle_ms: self.percentile(positive, 99),
            max_throttle_ms: self.max_throttle,
            peak_rate: self.peak as f64 * unit / span_s,
            total_added_latency_ms: self.total_latency,
            max_added_latency_ms: self.max_latency,
        }
    }
}

/// An exact histogram of values: distinct values with their counts, sorted, plus the
/// values added since the last merge.
#[derive(Debug, Clone, Default)]
pub(crate) struct Histogram {
    counts: Vec<(i32, u64)>,
    recent: Vec<i32>,
}

impl Histogram {
    /// Values added between two merges, at least (and at least as many as there are
    /// distinct values: merging costs O(distinct values + buffer), so amortized O(log)).
    const BUFFER: usize = 256;

    #[inline]
    fn add(&mut self, value: i32) {
        self.recent.push(value);
        if self.recent.len() >= Self::BUFFER.max(self.counts.len()) {
            self.merge();
        }
    }

    #[cold]
    #[inline(never)]
    fn merge(&mut self) {
        self.counts = self.merged();
        self.recent.clear();
    }

    /// `counts` with `recent` merged in.
    fn merged(&self) -> Vec<(i32, u64)> {
        let mut recent = self.recent.clone();
        recent.sort_unstable();
        let mut out: Vec<(i32, u64)> = Vec::with_capacity(self.counts.len() + recent.len());
        let mut push = |v: i32, c: u64| match out.last_mut() {
            Some((last, n)) if *last == v => *n += c,
            _ => out.push((v, c)),
        };
        let (mut i, mut j) = (0, 0);
        while i < self.counts.len() || j < recent.len() {
            if j == recent.len() || (i < self.counts.len() && self.counts[i].0 <= recent[j]) {
                push(self.counts[i].0, self.counts[i].1);
                i += 1;
            } else {
                push(recent[j], 1);
                j += 1;
            }
        }
        out
    }

    /// (value, count) in increasing value order.
    fn counts(&self) -> Vec<(i32, u64)> {
        self.merged()
    }
}

/// The quota an [`EntitySummary`] is about: a client quota type or the controller-mutation
/// quota (ordered as the summaries are sorted).
#[derive(Debug, Clone, Copy, PartialEq, Eq, PartialOrd, Ord, Hash)]
pub enum SummaryType {
    /// `producer_byte_rate`.
    Produce,
    /// `consumer_byte_rate`.
    Fetch,
    /// `request_percentage`.
    Request,
    /// `controller_mutation_rate` (KIP-599): usage in partitions.
    ControllerMutation,
}

impl SummaryType {
    /// `"produce"`, `"fetch"`, `"request"` or `"controller_mutation"`.
    pub fn as_str(self) -> &'static str {
        match self {
            SummaryType::Produce => "produce",
            SummaryType::Fetch => "fetch",
            SummaryType::Request => "request",
            SummaryType::ControllerMutation => "controller_mutation",
        }
    }
}

impl From<QuotaType> for SummaryType {
    fn from(t: QuotaType) -> Self {
        match t {
            QuotaType::Produce => SummaryType::Produce,
            QuotaType::Fetch => SummaryType::Fetch,
            QuotaType::Request => SummaryType::Request,
        }
    }
}

impl PartialEq<QuotaType> for SummaryType {
    fn eq(&self, other: &QuotaType) -> bool {
        *self == SummaryType::from(*other)
    }
}

/// One entity's summary: a sensor of one quota type in one scenario, by its metric tags.
#[derive(Debug, Clone, PartialEq)]
pub struct EntitySummary {
    /// The scenario's index.
    pub scenario: usize,
    /// The quota of the sensor.
    pub quota_type: SummaryType,
    /// The sensor's `user` tag (sanitized; empty when not per user).
    pub user: String,
    /// The sensor's `client-id` tag (empty when not per client id).
    pub client_id: String,
    /// The bound under the configuration at the end of the replay; `None` when unlimited.
    pub quota: Option<f64>,
    /// Requests recorded by the sensor.
    pub requests: u64,
    /// Sum of those requests' bytes (whole bytes; for a controller mutation, the
    /// partitions asked).
    pub bytes: i64,
    /// Sum of their usage of this quota: bytes, thread nanoseconds for `request`,
    /// partitions recorded (refused ones count 0) for the controller-mutation quota.
    pub usage: i64,
    /// Requests this quota throttled (its throttle > 0).
    pub throttled_requests: u64,
    /// Sum of this quota's throttles (negative, wrapped ones count as 0), ms.
    pub total_throttle_ms: i64,
    /// Median throttle by nearest rank, ms.
    pub p50_throttle_ms: i64,
    /// 99th percentile throttle by nearest rank, ms.
    pub p99_throttle_ms: i64,
    /// Largest throttle, ms.
    pub max_throttle_ms: i64,
    /// Largest usage in `num_samples - 1` consecutive windows, per second (bytes/s or
    /// percent of a thread); usage of fetches taken back counts 0.
    pub peak_rate: f64,
    /// Sum of the requests' added latency (closed loop; 0 in open loop), ms.
    pub total_added_latency_ms: i64,
    /// Largest added latency, ms.
    pub max_added_latency_ms: i64,
}

impl EntitySummary {
    /// Throttled requests / requests.
    pub fn throttled_fraction(&self) -> f64 {
        self.throttled_requests as f64 / self.requests as f64
    }

    /// Total throttle / requests, ms.
    pub fn mean_throttle_ms(&self) -> f64 {
        self.total_throttle_ms as f64 / self.requests as f64
    }

    /// Total added latency / requests, ms.
    pub fn mean_added_latency_ms(&self) -> f64 {
        self.total_added_latency_ms as f64 / self.requests as f64
    }

    /// Peak rate / quota (NaN when unlimited).
    pub fn utilization(&self) -> f64 {
        self.peak_rate / self.quota.unwrap_or(f64::NAN)
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn histogram_merges_exactly() {
        let mut h = Histogram::default();
        let mut all = Vec::new();
        let mut x: u64 = 7;
        for _ in 0..3000 {
            x = x
                .wrapping_mul(6364136223846793005)
                .wrapping_add(1442695040888963407);
            let v = (x >> 33) as i32 % 97 + 1;
            h.add(v);
            all.push(v);
        }
        all.sort_unstable();
        let expanded: Vec<i32> = h
            .counts()
            .into_iter()
            .flat_map(|(v, c)| std::iter::repeat_n(v, c as usize))
            .collect();
        assert_eq!(expanded, all);
        assert!(h.counts.len() <= 97 && h.recent.len() < Histogram::BUFFER);
    }

    #[test]
    fn nearest_rank_with_zeros_counted() {
        let w = WindowConfig::QUOTA_DEFAULT;
        let mut s = EntityStats::default();
        let mut spans = vec![0; EntityStats::span(&w)];
        let mut positive = Histogram::default();
        let mut clock = WindowIndex::new(&w);
        for (i, t) in [0, 0, 5, 0, 9, 0, 0, 3, 0, 0].iter().enumerate() {
            s.add(
                &Usage {
                    time_ms: i as i64,
                    bytes: 1,
                    usage: 1,
                    recorded: true,
                    throttle_ms: *t,
                    added_latency_ms: 0,
                },
                clock.of(i as i64),
                &mut spans,
                &mut positive,
            );
        }
        // sorted: 0 0 0 0 0 0 0 3 5 9
        assert_eq!(s.percentile(&positive, 50), 0);
        assert_eq!(s.percentile(&positive, 80), 3);
        assert_eq!(s.percentile(&positive, 90), 5);
        assert_eq!(s.percentile(&positive, 99), 9);
    }

    /// The peak from the ring of window sums equals the largest usage in `span`
    /// consecutive windows ending at an event's window, computed from every event (as
    /// the back-test's `summarize` does), over events in time order with gaps of every
    /// size, repeated times, negative times and usage taken back.
    #[test]
    fn peak_equals_brute_force() {
        let mut x: u64 = 0x9E37_79B9_7F4A_7C15;
        for (n, window_ms) in [(11, 1000), (2, 30_000), (1, 7), (4, 3)] {
            let w = WindowConfig::new(n, window_ms).unwrap();
            let span = EntityStats::span(&w);
            let mut s = EntityStats::default();
            let mut spans = vec![0; span];
            let mut positive = Histogram::default();
            let mut clock = WindowIndex::new(&w);
            let mut events: Vec<(i64, i64)> = Vec::new();
            let mut t: i64 = -50 * window_ms;
            for _ in 0..5000 {
                x ^= x << 13;
                x ^= x >> 7;
                x ^= x << 17;
                t += match x % 8 {
                    0 => 0,
                    1 => (x >> 8) as i64 % (window_ms * (n + 3)),
                    _ => (x >> 8) as i64 % (window_ms + 1),
                };
                let usage = (x >> 32) as i64 % 1000;
                let recorded = x % 5 != 0;
                s.add(
                    &Usage {
                        time_ms: t,
                        bytes: usage,
                        usage,
                        recorded,
                        throttle_ms: 0,
                        added_latency_ms: 0,
                    },
                    clock.of(t),
                    &mut spans,
                    &mut positive,
                );
                events.push((t.div_euclid(window_ms), if recorded { usage } else { 0 }));
            }
            let mut peak = 0;
            for (k, &(index, _)) in events.iter().enumerate() {
                let in_span: i64 = events[..=k]
                    .iter()
                    .filter(|(i, _)| *i > index - span as i64)
                    .map(|(_, u)| u)
                    .sum();
                peak = peak.max(in_span);
            }
            assert_eq!(s.peak, peak, "n = {n}, window {window_ms}");
        }
    }
}
