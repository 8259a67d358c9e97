//! [`RateCell`]: the lock-free state of one rate sensor, with an allocation-free hot path.
//!
//! The sample ring lives in an immutable [`Block`] behind an [`AtomicBox`]. Only two
//! numbers change on an ordinary record: the value and the last-event time of the sample
//! in progress. They live outside the ring, in one 128-bit atomic word of the block (the
//! *accumulator*), so an ordinary record is one compare-and-swap on that word, and the
//! quota check after it reads the immutable ring plus the value it just installed: the
//! record and its check are one atomic step, as under Kafka's `synchronized` sensor.
//!
//! Everything else (a record that starts a new sample, a measurement that purges, a bound
//! that changes, a time too far from the block's base) is a structural change: the
//! changer first *seals* the accumulator (a bit in the same word, so no record can land
//! after the seal), folds the sealed accumulator into a copy of the ring, applies its
//! change and publishes the new block with a compare-and-swap on the box. A thread that
//! finds a sealed accumulator does not wait for the sealer: it applies its own operation
//! the same structural way, on the same sealed block. Every published block therefore
//! completes some operation, so a sealing thread that stalls stops nobody (lock-free),
//! and every operation takes effect exactly once on a consistent state (linearizable;
//! model-checked in `tests/loom.rs`, which found the livelock an earlier "fold only"
//! helper had).
//!
//! Event counts are not kept for the sample in progress: Kafka's `Rate` never reads them.

use std::alloc::{alloc, handle_alloc_error, Layout};
use std::ptr::NonNull;

use crate::cow::{AtomicBox, AtomicWord, Guard, Thin};
use crate::quota::{verdict, Check};
use crate::samples::{exact_others_sum, small_whole, Samples, Summary, WindowConfig};

/// The seal bit of the accumulator's high half.
const SEALED: u64 = 1;
/// Last-event times are stored relative to the block's base in 63 bits.
const MAX_OFFSET: i64 = 1 << 62;

fn pack(value: f64, offset: i64, sealed: bool) -> u128 {
    let high = ((offset as u64) << 1) | u64::from(sealed);
    (u128::from(high) << 64) | u128::from(value.to_bits())
}

fn unpack(word: u128) -> (f64, i64, bool) {
    let high = (word >> 64) as u64;
    (
        f64::from_bits(word as u64),
        (high as i64) >> 1,
        high & SEALED != 0,
    )
}

fn offset(t: i64, base: i64) -> Option<i64> {
    t.checked_sub(base)
        .filter(|o| (-MAX_OFFSET..MAX_OFFSET).contains(o))
}

/// The bound a sensor enforces and the configuration generation it came from.
#[derive(Debug, Clone, Copy, PartialEq)]
pub struct Bound {
    /// The upper bound, if any.
    pub value: Option<f64>,
    /// The configuration generation `value` was computed for.
    pub generation: u64,
}

/// Hot fields first, in declaration order: an in-place record reads `acc`, `base`, the
/// bound and the summary (a few cache lines) and never the ring itself. 80 bytes: the
/// bound is stored without `Option`'s padding, and the summary with its times as 32-bit
/// offsets ([`Summary::to_offsets`]; none is kept when they do not fit). The ring's
/// columns follow in the same allocation (see [`Block`]).
#[repr(C)]
struct Header {
    acc: AtomicWord,
    /// The time the accumulator's last-event offsets are relative to.
    base: i64,
    /// [`Bound`]'s value (when `has_bound`) and generation.
    bound_value: f64,
    bound_generation: u64,
    /// The summary's start of the sample in progress, prefix and offsets (when
    /// `has_summary`).
    cur_start: i64,
    prefix: f64,
    offsets: [i32; 3],
    /// The ring's sample in progress and its length in slots ([`Samples::raw`]).
    cur: u32,
    len: u32,
    has_bound: bool,
    has_summary: bool,
    /// Whether `prefix` holds instead the sum of every sample but the one in progress
    /// ([`exact_others_sum`]), and the accumulator's value is [`small_whole`] (an
    /// in-place record keeps it so): then a record or a measurement reads no slot of
    /// the ring.
    whole: bool,
    /// Removed by expiry (see [`RateCell::remove_if`]): the ring is empty and the sensor
    /// does not exist for readers until a record or [`RateCell::revive`] brings it back.
    absent: bool,
}

/// One immutable state of a sensor: the header, then the ring's columns (`4 * len`
/// words, [`Samples::raw`]; the sample in progress's value and last-event time are in
/// `acc`), in one allocation: a new block costs one allocation, and a record that needs
/// the ring finds it right after the header.
#[repr(C)]
struct Block {
    head: Header,
    columns: [f64],
}

/// Where a block's columns start: right after the header (a multiple of 8 bytes, so no
/// padding comes between).
const COLUMNS_AT: usize = std::mem::size_of::<Header>();
const _: () = assert!(COLUMNS_AT % std::mem::align_of::<f64>() == 0);

impl std::ops::Deref for Block {
    type Target = Header;

    #[inline]
    fn deref(&self) -> &Header {
        &self.head
    }
}

// SAFETY: a block's allocation starts with its header, whose `len` (never changed after
// `Block::alloc` wrote it) gives the number of columns: `from_thin` rebuilds the pointer
// `alloc` made, metadata included, from the same address (same provenance).
unsafe impl Thin for Block {
    #[inline]
    fn into_thin(value: Box<Block>) -> NonNull<u8> {
        NonNull::from(Box::leak(value)).cast()
    }

    #[inline]
    unsafe fn from_thin(thin: NonNull<u8>) -> NonNull<Block> {
        // SAFETY: the caller's contract: `thin` is a live block, which starts with its
        // header; only the plain `len` field is read (no reference to the header made).
        let len = unsafe { (*thin.as_ptr().cast::<Header>()).len } as usize;
        // SAFETY: derived from a non-null pointer.
        unsafe { NonNull::new_unchecked(Block::fat(thin.as_ptr(), 4 * len)) }
    }
}

impl Block {
    fn new(samples: Samples, bound: Bound, absent: bool) -> Box<Block> {
        let summary = samples.summary();
        Block::with_summary(samples, summary, bound, absent)
    }

    /// [`Block::new`] with the ring's summary already computed (`summary` must be
    /// `samples.summary()`).
    fn with_summary(
        samples: Samples,
        summary: Option<Summary>,
        bound: Bound,
        absent: bool,
    ) -> Box<Block> {
        let (value, base) = samples.current().unwrap_or((0.0, 0));
        let summary = summary.and_then(|s| s.to_offsets());
        let (cur_start, prefix, offsets) = summary.unwrap_or((0, 0.0, [0; 3]));
        let others = exact_others_sum(prefix, samples.tail())
            .filter(|_| summary.is_some() && small_whole(value));
        let (cur, columns) = samples.raw();
        let head = Header {
            acc: AtomicWord::new(pack(value, 0, false)),
            base,
            bound_value: bound.value.unwrap_or(0.0),
            bound_generation: bound.generation,
            cur_start,
            prefix: others.unwrap_or(prefix),
            offsets,
            cur,
            len: (columns.len() / 4) as u32,
            has_bound: bound.value.is_some(),
            has_summary: summary.is_some(),
            whole: others.is_some(),
            absent,
        };
        Block::alloc(head, columns)
    }

    /// The layout of a block of `n` columns: the header's, then `n` words, rounded up to
    /// the alignment (as the compiler lays out `Block`).
    fn layout(n: usize) -> Layout {
        let columns = Layout::array::<f64>(n).expect("a ring of at most 65536 slots");
        let (layout, at) = Layout::new::<Header>()
            .extend(columns)
            .expect("a ring of at most 65536 slots");
        debug_assert_eq!(at, COLUMNS_AT);
        layout.pad_to_align()
    }

    /// The block pointer for the allocation at `p` with `n` columns.
    fn fat(p: *mut u8, n: usize) -> *mut Block {
        std::ptr::slice_from_raw_parts_mut(p.cast::<f64>(), n) as *mut Block
    }

    /// A block of `head` and a copy of `columns`, in one allocation.
    fn alloc(head: Header, columns: &[f64]) -> Box<Block> {
        let n = columns.len();
        let layout = Block::layout(n);
        // SAFETY: `layout` has a non-zero size (the header's at least). The allocation is
        // written in full before the box is made: the header at offset 0 (its layout's
        // alignment is the allocation's) and the `n` columns at `COLUMNS_AT`, where
        // `repr(C)` puts `Block::columns`; `layout` is the one `Box` frees it with
        // (`Layout::for_value` of the block: header, `n` words, padded to the alignment).
        let block = unsafe {
            let p = alloc(layout);
            if p.is_null() {
                handle_alloc_error(layout);
            }
            p.cast::<Header>().write(head);
            std::ptr::copy_nonoverlapping(columns.as_ptr(), p.add(COLUMNS_AT).cast(), n);
            Box::from_raw(Block::fat(p, n))
        };
        debug_assert_eq!(Layout::for_value(&*block), layout);
        block
    }

    #[inline]
    fn bound(&self) -> Bound {
        Bound {
            value: self.has_bound.then_some(self.bound_value),
            generation: self.bound_generation,
        }
    }

    #[inline]
    fn summary(&self) -> Option<Summary> {
        self.has_summary
            .then(|| Summary::from_offsets(self.cur_start, self.prefix, self.offsets))
    }

    /// The values of the samples after the one in progress ([`Samples::tail`]).
    #[inline]
    fn tail(&self) -> &[f64] {
        self.columns[..self.len as usize]
            .get(self.cur as usize + 1..)
            .unwrap_or(&[])
    }

    /// Asks the CPU to bring the ring's columns into cache (a hint).
    #[inline]
    fn prefetch_ring(&self) {
        for line in self.columns.chunks(8) {
            crate::prefetch(line.as_ptr());
        }
    }

    /// The ring with the accumulator word `word` folded into the sample in progress.
    fn folded(&self, word: u128) -> Samples {
        let (value, offset, _) = unpack(word);
        let mut samples = Samples::from_raw(self.cur, &self.columns);
        samples.set_current(value, self.base + offset);
        samples
    }
}

/// The state of one rate sensor. See the module documentation.
pub struct RateCell {
    block: AtomicBox<Block>,
}

/// How a record learns whether its sensor's bound is current.
pub enum BoundSource<F: Fn() -> Option<f64>> {
    /// Keep the bound the cell holds.
    Keep,
    /// The bound must be for configuration `generation`; `compute` gives it otherwise.
    Generation { generation: u64, compute: F },
}

impl RateCell {
    /// An empty sensor with `bound`.
    pub fn new(bound: Bound) -> Self {
        RateCell {
            block: AtomicBox::from_box(Block::new(Samples::new(), bound, false)),
        }
    }

    /// Whether the sensor exists (was not removed by [`Self::remove_if`], or was brought
    /// back since).
    pub fn present(&self, guard: &Guard) -> bool {
        !self.block.load(guard).get().absent
    }

    /// Removes the sensor if it is present and `expired()` holds when the removal takes
    /// effect: empties its ring and forgets its bound (a sensor made anew reads the current
    /// one). Returns whether this call removed it. A record always brings a removed sensor
    /// back, as a brand-new one (an absent block holds no ring, so no record is in place).
    pub fn remove_if(&self, expired: impl Fn() -> bool, guard: &Guard) -> bool {
        self.structural_with(guard, |samples, bound, absent| {
            if *absent || !expired() {
                return false;
            }
            *samples = Samples::new();
            *bound = Bound {
                value: None,
                generation: u64::MAX,
            };
            *absent = true;
            true
        })
    }

    /// Brings a removed sensor back, empty (a no-op on a present one).
    pub fn revive(&self, guard: &Guard) {
        if self.present(guard) {
            return;
        }
        self.structural_with(guard, |_, _, absent| *absent = false);
    }

    /// The bound currently held.
    pub fn bound(&self, guard: &Guard) -> Bound {
        self.block.load(guard).get().bound()
    }

    /// A copy of the samples, with the sample in progress up to date.
    pub fn samples(&self, guard: &Guard) -> Samples {
        // A sealed word is frozen, so folding it gives the current state either way.
        let block = self.block.load(guard).get();
        block.folded(block.acc.load())
    }

    /// Records `value` at `t`; with `check`, measures and checks the bound as Kafka's
    /// `Sensor.record` does (one atomic step).
    pub fn record<F: Fn() -> Option<f64>>(
        &self,
        cfg: &WindowConfig,
        value: f64,
        t: i64,
        check: bool,
        source: &BoundSource<F>,
        guard: &Guard,
    ) -> Check {
        let structural = || {
            self.structural_summarized(guard, |samples, bound, absent| {
                *absent = false;
                if let BoundSource::Generation {
                    generation,
                    compute,
                } = source
                {
                    if bound.generation != *generation {
                        *bound = Bound {
                            value: compute(),
                            generation: *generation,
                        };
                    }
                }
                match bound.value {
                    Some(b) if check => {
                        // Record, measure and summarize in one pass over the ring.
                        let ((rate, window), summary) = samples.record_and_measure(cfg, value, t);
                        (verdict(rate, b, window), Some(summary))
                    }
                    _ => {
                        samples.record(cfg, value, t);
                        let summary = samples.summary();
                        (Check::UNCHECKED, summary)
                    }
                }
            })
        };
        loop {
            let block = self.block.load(guard).get();
            let word = block.acc.load();
            let (current, _, sealed) = unpack(word);
            let bound_current = match source {
                BoundSource::Keep => true,
                BoundSource::Generation { generation, .. } => block.bound_generation == *generation,
            };
            let Some(summary) = block.summary() else {
                return structural();
            };
            let updated = current + value;
            let in_place = !sealed
                && bound_current
                && summary.record_in_place(cfg, t, check)
                && (!block.whole || small_whole(updated));
            let Some(off) = offset(t, block.base).filter(|_| in_place) else {
                return structural();
            };
            if block
                .acc
                .compare_exchange(word, pack(updated, off, false))
                .is_err()
            {
                continue;
            }
            return match block.bound().value {
                Some(bound) if check => {
                    let (rate, window) = if block.whole {
                        summary.rate_of_whole(cfg, t, updated)
                    } else {
                        summary.rate(cfg, t, updated, block.tail())
                    };
                    verdict(rate, bound, window)
                }
                _ => Check::UNCHECKED,
            };
        }
    }

    /// The rate per second at `t`; purges obsolete samples as Kafka's measurement does.
    pub fn measure(&self, cfg: &WindowConfig, t: i64, guard: &Guard) -> f64 {
        let block = self.block.load(guard).get();
        let (current, off, sealed) = unpack(block.acc.load());
        if let Some(summary) = block.summary().filter(|_| !sealed) {
            if summary.measure_is_pure(cfg, t, block.base + off) {
                return if block.whole {
                    summary.rate_of_whole(cfg, t, current).0
                } else {
                    summary.rate(cfg, t, current, block.tail()).0
                };
            }
        }
        self.structural(guard, |samples, _| samples.measure_rate(cfg, t).0)
    }

    /// Replaces the bound; the samples are kept.
    pub fn set_bound(&self, bound: Bound, guard: &Guard) {
        self.structural(guard, |_, b| *b = bound);
    }

    /// Seals the current block, applies `change` to a folded copy and publishes it; the
    /// sensor stays present or absent. `change` may run more than once (on a fresher
    /// block each time).
    fn structural<R>(
        &self,
        guard: &Guard,
        mut change: impl FnMut(&mut Samples, &mut Bound) -> R,
    ) -> R {
        self.structural_with(guard, |samples, bound, _| change(samples, bound))
    }

    /// [`Self::structural`], with the block's absent flag to change as well.
    fn structural_with<R>(
        &self,
        guard: &Guard,
        mut change: impl FnMut(&mut Samples, &mut Bound, &mut bool) -> R,
    ) -> R {
        self.structural_summarized(guard, |samples, bound, absent| {
            let result = change(samples, bound, absent);
            (result, samples.summary())
        })
    }

    /// [`Self::structural_with`], where `change` also gives the summary of the ring it
    /// leaves (`samples.summary()`, computed along the way).
    fn structural_summarized<R>(
        &self,
        guard: &Guard,
        mut change: impl FnMut(&mut Samples, &mut Bound, &mut bool) -> (R, Option<Summary>),
    ) -> R {
        loop {
            let loaded = self.block.load(guard);
            let block = loaded.get();
            // The copy below reads the whole ring, which in-place records do not touch
            // (often not in cache): start bringing it in before the seal's atomic.
            block.prefetch_ring();
            let Some(word) = seal(&block.acc) else {
                continue;
            };
            let mut samples = block.folded(word);
            let mut bound = block.bound();
            let mut absent = block.absent;
            let (result, summary) = change(&mut samples, &mut bound, &mut absent);
            let next = Block::with_summary(samples, summary, bound, absent);
            if self.block.replace(loaded, next, guard).is_ok() {
                return result;
            }
        }
    }
}

/// Seals the accumulator (if not sealed yet) and returns the sealed word; `None` if the
/// word kept changing under us (retry from a fresh load).
fn seal(acc: &AtomicWord) -> Option<u128> {
    let mut word = acc.load();
    for _ in 0..64 {
        if unpack(word).2 {
            return Some(word);
        }
        let sealed = word | (u128::from(SEALED) << 64);
        match acc.compare_exchange(word, sealed) {
            Ok(_) => return Some(sealed),
            Err(now) => word = now,
        }
    }
    None
}

#[cfg(all(test, not(loom)))]
mod tests {
    use super::*;
    use crate::cow::pin;
    use crate::quota::check_bound;

    #[test]
    fn a_header_is_80_bytes_and_a_block_adds_its_columns() {
        assert_eq!(std::mem::size_of::<Header>(), 80);
        let mut samples = Samples::new();
        let cfg = WindowConfig::new(3, 100).unwrap();
        for t in [0, 100, 200] {
            samples.record(&cfg, 1.5, t);
        }
        let block = Block::new(
            samples.clone(),
            Bound {
                value: None,
                generation: 7,
            },
            false,
        );
        assert_eq!(std::mem::size_of_val(&*block), 80 + 3 * 4 * 8);
        assert_eq!(&block.columns, samples.raw().1);
        assert_eq!(block.tail(), samples.tail());
        let thin = Block::into_thin(block);
        // SAFETY: `thin` came from `into_thin` just above and is freed once, here.
        let block = unsafe { Box::from_raw(Block::from_thin(thin).as_ptr()) };
        assert_eq!((block.cur, block.len, block.columns.len()), (2, 3, 12));
        assert_eq!(block.folded(block.acc.load()), samples);
    }

    #[test]
    fn pack_round_trips() {
        for (v, o, s) in [
            (0.0, 0, false),
            (-1.5, -5, true),
            (f64::MAX, MAX_OFFSET - 1, false),
        ] {
            assert_eq!(unpack(pack(v, o, s)), (v, o, s));
        }
        assert_eq!(offset(i64::MAX, i64::MIN), None);
        assert_eq!(offset(10, 4), Some(6));
    }

    #[test]
    fn in_place_and_structural_records_agree_with_plain_samples() {
        let cfg = WindowConfig::new(3, 100).unwrap();
        let cell = RateCell::new(Bound {
            value: Some(50.0),
            generation: 0,
        });
        let mut plain = Samples::new();
        let keep = BoundSource::<fn() -> Option<f64>>::Keep;
        let guard = pin();
        for (i, t) in [0i64, 5, 99, 100, 150, 420, 421, 300, 900, 901, 1500]
            .iter()
            .enumerate()
        {
            let v = (i as f64) * 7.5 - 10.0;
            plain.record(&cfg, v, *t);
            let expected = check_bound(&mut plain, &cfg, 50.0, *t);
            assert_eq!(
                cell.record(&cfg, v, *t, true, &keep, &guard),
                expected,
                "t={t}"
            );
            let mut a = cell.samples(&guard);
            let mut b = plain.clone();
            assert_eq!(a.measure_rate(&cfg, *t), b.measure_rate(&cfg, *t));
        }
    }

    #[test]
    fn records_of_whole_values_give_the_slot_order_sum() {
        // Whole values near the exactness limit, negative ones and fractions: every rate
        // must be the one of adding the slots in order, bit for bit.
        let big = (1u64 << 51) as f64;
        let mixes: [&[f64]; 3] = [
            &[
                100.0,
                big,
                -big,
                3.0,
                0.5,
                big - 1.0,
                1e15,
                -0.0,
                7.0,
                big,
                big,
                1.0,
                2.0,
            ],
            &[100.0, 3.0, 1e15, 7.0, 0.0, 2.0, 1e6, 0.25, 9.0, 5.0, 1e12],
            &[1.0, 2.0, 3.0, big / 4.0, big / 8.0, -5.0],
        ];
        let cfg = WindowConfig::new(4, 10).unwrap();
        let keep = BoundSource::<fn() -> Option<f64>>::Keep;
        let guard = pin();
        for values in mixes {
            let cell = RateCell::new(Bound {
                value: Some(1e300),
                generation: 0,
            });
            let mut plain = Samples::new();
            for i in 0..600i64 {
                let v = values[(i as usize * 7) % values.len()];
                let t = i * 3;
                plain.record(&cfg, v, t);
                let (rate, window) = plain.measure_rate(&cfg, t);
                let got = cell.record(&cfg, v, t, true, &keep, &guard);
                assert_eq!(got.rate.map(f64::to_bits), Some(rate.to_bits()), "i={i}");
                assert_eq!(got, verdict(rate, 1e300, window), "i={i}");
                if i % 5 == 0 {
                    let later = t + 4;
                    let expected = plain.measure_rate(&cfg, later).0;
                    assert_eq!(
                        cell.measure(&cfg, later, &guard).to_bits(),
                        expected.to_bits()
                    );
                }
            }
        }
    }
}
