//! [`RateCell`]: the lock-free state of one rate sensor, with an allocation-free hot path.
//!
//! The sample ring lives in a [`Block`] behind an [`AtomicBox`]. Only two numbers change
//! on an ordinary record: the value and the last-event time of the sample in progress.
//! They live outside the ring, in one 128-bit atomic word of the block (the
//! *accumulator*), so an ordinary record is one compare-and-swap on that word, and the
//! quota check after it reads the ring's summary plus the value it just installed: the
//! record and its check are one atomic step, as under Kafka's `synchronized` sensor.
//!
//! **Opening the next sample in place.** A record that starts a new sample in a full ring
//! whose values are whole and not negative, adding up to at most 2^51 (so every sum of
//! them is exact, in any order), when the samples its check purges (if any) are among the
//! 12 after the new sample in progress (all of them in Kafka's default ring) and the times
//! fit, changes the block's words instead of replacing the block. The accumulator's
//! *parity* bit selects which of the header's two [`View`]s (the summary of the ring, the
//! index of the sample in progress, its start, and the mask of the slots the open that
//! made this state purged) is the current one; the other is spare. The opener
//!
//! 1. computes the next state from the current one (the closed sample's value and last
//!    event from the accumulator, the slots the current state holds as purged, the
//!    others' times from the ring; the others' sum changes by the values that leave and
//!    the one that joins);
//! 2. *claims* the accumulator: a compare-and-swap setting its OPENING bit (no record
//!    lands on a claimed word; the claim fails if anything changed since step 1);
//! 3. writes only words no reader of the current state uses: the closed slot's value,
//!    start and last event in the ring (the current state takes them from the
//!    accumulator and the view), the words of the slots the current state holds as
//!    purged (it takes them from its view), and the spare view;
//! 4. *publishes*: a compare-and-swap from the claimed word to the new sample's
//!    accumulator with the parity flipped.
//!
//! A thread that finds a claimed word does not wait: it seals it (below) and goes the
//! structural way, and the opener's publication then fails. So a claim is a lock that any
//! thread can break, and the protocol stays lock-free. Readers that load the accumulator,
//! read a view or ring words and then act validate afterwards (the record by its
//! compare-and-swap, a measurement by loading the accumulator again, after an acquire
//! fence that pairs with the opener's release fence after its claim): a read that saw an
//! opener's write implies the claim came first, so the validation fails. An accumulator
//! word is never repeated within a block (no ABA): states alternate views, and the last
//! events of a state reached by an in-place open are at or after its start, which is at
//! least one window after the previous state's start, while every last event of that
//! state lies before its start plus one window.
//!
//! Under `--cfg loom` the accumulator is a loom mutex, so the models explore every
//! interleaving of the claims, publications, seals and records on it (where every decision
//! is made); the view and ring words stay plain atomics there, whose ordering rests on the
//! fences above rather than on the model.
//!
//! Everything else (a record that starts a new sample otherwise, a measurement that
//! purges, a bound that changes, a time too far from the block's base) is a structural
//! change: the changer first *seals* the accumulator (a bit in the same word, so no record
//! nor claim can land after the seal), folds the sealed accumulator and its view into a
//! copy of the ring, applies its change and publishes the new block with a
//! compare-and-swap on the box. A thread that finds a sealed accumulator does not wait for
//! the sealer: it applies its own operation the same structural way, on the same sealed
//! block. Every published block therefore completes some operation, so a sealing thread
//! that stalls stops nobody (lock-free), and every operation takes effect exactly once on a
//! consistent state (linearizable; model-checked in `tests/loom.rs`). A helper that only
//! folded the sealed block, without applying its own operation, could livelock.
//!
//! Event counts are not kept for the sample in progress, nor for a sample opened in
//! place (its slot keeps the count it had): Kafka's `Rate` never reads them.

use std::alloc::{alloc, handle_alloc_error, Layout};
use std::ptr::NonNull;
use std::sync::atomic::Ordering::{Acquire, Relaxed, Release};
use std::sync::atomic::{fence, AtomicI32, AtomicI64, AtomicU32, AtomicU64};

use crate::kafka::quota::{verdict, Check};
use crate::kafka::samples::{
    exact_others_sum, small_whole, window_over, Samples, Summary, WindowConfig, EXACT_LIMIT,
};
use crate::sync::cow::{AtomicBox, AtomicWord, Guard, Thin};

/// The accumulator's high half: the seal bit, the claim bit, the parity (the view in
/// force), then the last-event offset.
const SEALED: u64 = 1;
const OPENING: u64 = 2;
const PARITY: u64 = 4;
const FLAG_BITS: u32 = 3;
/// Times are stored relative to the block's base in 61 bits; an in-place open keeps every
/// time it compares within this range of the base, so no difference of two wraps.
const MAX_OFFSET: i64 = 1 << 59;

#[derive(Debug, Clone, Copy, PartialEq)]
struct Acc {
    value: f64,
    offset: i64,
    sealed: bool,
    opening: bool,
    parity: usize,
}

fn pack(value: f64, offset: i64, parity: usize) -> u128 {
    let high = ((offset as u64) << FLAG_BITS) | if parity == 1 { PARITY } else { 0 };
    (u128::from(high) << 64) | u128::from(value.to_bits())
}

fn unpack(word: u128) -> Acc {
    let high = (word >> 64) as u64;
    Acc {
        value: f64::from_bits(word as u64),
        offset: (high as i64) >> FLAG_BITS,
        sealed: high & SEALED != 0,
        opening: high & OPENING != 0,
        parity: usize::from(high & PARITY != 0),
    }
}

fn with_flag(word: u128, flag: u64) -> u128 {
    word | (u128::from(flag) << 64)
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

/// [`View::cur`]: the index in the low 16 bits (a ring has at most 65536 slots), four
/// flags, then the mask of the slots the state holds as purged.
const INDEX: u32 = 0xffff;
const HAS_SUMMARY: u32 = 1 << 16;
const WHOLE: u32 = 1 << 17;
const OPENED: u32 = 1 << 18;
const NONNEG: u32 = 1 << 19;
const PURGED_SHIFT: u32 = 20;
/// The purged mask's width: bit `k` is the slot `k + 1` places after the sample in
/// progress, so a ring of up to 13 slots (Kafka's default is 12) has a bit for every other
/// slot.
const PURGED_BITS: usize = (32 - PURGED_SHIFT) as usize;

/// What the hot path reads of one state of the ring: the summary (its times as 32-bit
/// offsets, [`Summary::to_offsets`]; none is kept when they do not fit) and the index of
/// the sample in progress. Atomics, all accessed `Relaxed`, because an opener rewrites the
/// spare view while a reader that loaded an older accumulator may still read it (and then
/// discards what it read; see the module documentation).
#[repr(C)]
struct View {
    cur_start: AtomicI64,
    /// The bits of the summary's prefix, or (when `WHOLE`) of the sum of every sample but
    /// the one in progress ([`exact_others_sum`]).
    prefix: AtomicU64,
    offsets: [AtomicI32; 3],
    /// The sample in progress's index, the `HAS_SUMMARY`, `WHOLE`, `OPENED` and `NONNEG`
    /// flags and the purged mask: `NONNEG` when, besides, no other sample's value is
    /// negative (then the prefix is also the sum of the others' magnitudes). `WHOLE` when the prefix is the others' exact sum and the
    /// accumulator's value is [`small_whole`] (an in-place record keeps it so): then a
    /// record or a measurement reads no slot of the ring. `OPENED` when this state was
    /// reached by an in-place open (then an in-place record's time is at or after the
    /// start; see the module documentation). The purged mask: the slots that open's check
    /// purged (bit `k` for the slot `k + 1` places after the sample in progress); this
    /// state holds them as re-initialised at its start, whatever their words in the ring
    /// say (the next open writes them).
    cur: AtomicU32,
}

/// A [`View`]'s contents.
#[derive(Debug, Clone, Copy, PartialEq)]
struct ViewData {
    cur_start: i64,
    prefix: f64,
    offsets: [i32; 3],
    cur: u32,
}

impl ViewData {
    const EMPTY: ViewData = ViewData {
        cur_start: 0,
        prefix: 0.0,
        offsets: [0; 3],
        cur: 0,
    };

    #[inline]
    fn index(&self) -> usize {
        (self.cur & INDEX) as usize
    }

    #[inline]
    fn flag(&self, flag: u32) -> bool {
        self.cur & flag != 0
    }

    /// The purged mask (see [`View::cur`]).
    #[inline]
    fn purged(&self) -> u32 {
        self.cur >> PURGED_SHIFT
    }

    #[inline]
    fn summary(&self) -> Option<Summary> {
        self.flag(HAS_SUMMARY)
            .then(|| Summary::from_offsets(self.cur_start, self.prefix, self.offsets))
    }
}

impl View {
    fn new(data: ViewData) -> View {
        View {
            cur_start: AtomicI64::new(data.cur_start),
            prefix: AtomicU64::new(data.prefix.to_bits()),
            offsets: data.offsets.map(AtomicI32::new),
            cur: AtomicU32::new(data.cur),
        }
    }

    #[inline]
    fn load(&self) -> ViewData {
        ViewData {
            cur_start: self.cur_start.load(Relaxed),
            prefix: f64::from_bits(self.prefix.load(Relaxed)),
            offsets: [
                self.offsets[0].load(Relaxed),
                self.offsets[1].load(Relaxed),
                self.offsets[2].load(Relaxed),
            ],
            cur: self.cur.load(Relaxed),
        }
    }

    fn store(&self, data: &ViewData) {
        self.cur_start.store(data.cur_start, Relaxed);
        self.prefix.store(data.prefix.to_bits(), Relaxed);
        for (o, v) in self.offsets.iter().zip(data.offsets) {
            o.store(v, Relaxed);
        }
        self.cur.store(data.cur, Relaxed);
    }
}

/// Hot fields first, in declaration order: an in-place record reads `acc`, `base`, the
/// bound and one view (a few cache lines) and, for whole values, never the ring itself.
/// 112 bytes: the bound is stored without `Option`'s padding, and each view's times as
/// 32-bit offsets. The ring's columns follow in the same allocation (see [`Block`]).
#[repr(C)]
struct Header {
    acc: AtomicWord,
    /// The time the accumulator's last-event offsets are relative to.
    base: i64,
    /// [`Bound`]'s value (when `has_bound`) and generation.
    bound_value: f64,
    bound_generation: u64,
    /// The current view (the accumulator's parity) and the spare one.
    views: [View; 2],
    /// The ring's length in slots ([`Samples::raw`]).
    len: u32,
    /// The ring's times are two words per slot, absolute ([`Block::times`]); otherwise
    /// one word per slot, two 32-bit offsets from `base`.
    wide: bool,
    has_bound: bool,
    /// Removed by expiry (see [`RateCell::remove_if`]): the ring is empty and the sensor
    /// does not exist for readers until a record or [`RateCell::revive`] brings it back.
    absent: bool,
}

/// One state of a sensor: the header, then the ring's columns (the sample in progress's
/// value and last-event time are in `acc`, its start in the current view), in one
/// allocation: a new block costs one allocation, and a record that needs the ring finds it
/// right after the header. The columns are the `len` values (as bits), then each slot's
/// start and last-event time: as offsets from the header's `base` in 32 bits each, packed
/// in one word (16 bytes a slot in all), or, when some time is too far from the base for
/// that (`wide`), as two absolute words. Event counts are not kept: Kafka's `Rate` never
/// reads them (a folded ring's counts are zero). The columns are atomics (all accessed
/// `Relaxed`) because an in-place open writes the words of the slot it closes (see the
/// module documentation).
#[repr(C)]
struct Block {
    head: Header,
    columns: [AtomicU64],
}

/// Where a block's columns start: right after the header (a multiple of 8 bytes, so no
/// padding comes between).
const COLUMNS_AT: usize = std::mem::size_of::<Header>();
const _: () = assert!(COLUMNS_AT % std::mem::align_of::<AtomicU64>() == 0);

impl std::ops::Deref for Block {
    type Target = Header;

    #[inline]
    fn deref(&self) -> &Header {
        &self.head
    }
}

// SAFETY: a block's allocation starts with its header, whose `len` (never changed after
// `Block::alloc` wrote it) gives the number of columns: `from_thin` rebuilds the pointer
// `alloc` made, metadata included, from the same address (same provenance); `wide`, never
// changed either, gives the layout of the times.
unsafe impl Thin for Block {
    #[inline]
    fn into_thin(value: Box<Block>) -> NonNull<u8> {
        NonNull::from(Box::leak(value)).cast()
    }

    #[inline]
    unsafe fn from_thin(thin: NonNull<u8>) -> NonNull<Block> {
        // SAFETY: the caller's contract: `thin` is a live block, which starts with its
        // header; only the plain `len` field is read (no reference to the header made).
        let (len, wide) = unsafe {
            let head = thin.as_ptr().cast::<Header>();
            ((*head).len as usize, (*head).wide)
        };
        // SAFETY: derived from a non-null pointer.
        unsafe { NonNull::new_unchecked(Block::fat(thin.as_ptr(), column_words(len, wide))) }
    }
}

/// The columns of starts and of last events in [`Samples::raw`] (after the values and the
/// event counts).
const RAW_START: usize = 2;
const RAW_LAST: usize = 3;

/// The words of a block's columns for a ring of `len` slots.
fn column_words(len: usize, wide: bool) -> usize {
    if wide {
        3 * len
    } else {
        2 * len
    }
}

/// A slot's start and last-event time as one word of two 32-bit offsets from `base`, if
/// both fit.
#[inline]
fn pack_times(start: i64, last: i64, base: i64) -> Option<u64> {
    let start = i32::try_from(start.checked_sub(base)?).ok()?;
    let last = i32::try_from(last.checked_sub(base)?).ok()?;
    Some(u64::from(start as u32) | u64::from(last as u32) << 32)
}

/// Whether every time in `times` ([`Samples::raw`]'s starts and last events, as bits)
/// fits [`pack_times`] from `base`.
fn times_fit(times: &[f64], base: i64) -> bool {
    let (mut min, mut max) = (i64::MAX, i64::MIN);
    for t in times {
        let t = t.to_bits() as i64;
        min = min.min(t);
        max = max.max(t);
    }
    times.is_empty() || pack_times(min, max, base).is_some()
}

/// The times [`pack_times`] packed.
#[inline]
fn unpack_times(word: u64, base: i64) -> (i64, i64) {
    (
        base + i64::from(word as u32 as i32),
        base + i64::from((word >> 32) as u32 as i32),
    )
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
        let len = columns.len() / 4;
        let nonneg = others.is_some()
            && (0..len)
                .filter(|&i| i != cur as usize)
                .all(|i| columns[i] >= 0.0);
        let wide = !times_fit(&columns[RAW_START * len..], base);
        let flags = if summary.is_some() { HAS_SUMMARY } else { 0 }
            | if others.is_some() { WHOLE } else { 0 }
            | if nonneg { NONNEG } else { 0 };
        let view = ViewData {
            cur_start,
            prefix: others.unwrap_or(prefix),
            offsets,
            cur: cur | flags,
        };
        let head = Header {
            acc: AtomicWord::new(pack(value, 0, 0)),
            base,
            bound_value: bound.value.unwrap_or(0.0),
            bound_generation: bound.generation,
            views: [View::new(view), View::new(ViewData::EMPTY)],
            len: len as u32,
            wide,
            has_bound: bound.value.is_some(),
            absent,
        };
        Block::alloc(head, columns)
    }

    /// The layout of a block of `n` column words: the header's, then `n` words, rounded
    /// up to the alignment (as the compiler lays out `Block`).
    fn layout(n: usize) -> Layout {
        let columns = Layout::array::<AtomicU64>(n).expect("a ring of at most 65536 slots");
        let (layout, at) = Layout::new::<Header>()
            .extend(columns)
            .expect("a ring of at most 65536 slots");
        debug_assert_eq!(at, COLUMNS_AT);
        layout.pad_to_align()
    }

    /// The block pointer for the allocation at `p` with `n` column words.
    fn fat(p: *mut u8, n: usize) -> *mut Block {
        std::ptr::slice_from_raw_parts_mut(p.cast::<AtomicU64>(), n) as *mut Block
    }

    /// A block of `head` and the ring `raw` ([`Samples::raw`]'s columns, `head.len` slots)
    /// in the layout `head.wide` says, in one allocation.
    fn alloc(head: Header, raw: &[f64]) -> Box<Block> {
        let len = head.len as usize;
        debug_assert_eq!(raw.len(), 4 * len);
        let (base, wide) = (head.base, head.wide);
        let (values, starts, lasts) = (
            &raw[..len],
            &raw[RAW_START * len..RAW_LAST * len],
            &raw[RAW_LAST * len..],
        );
        debug_assert_eq!(wide, !times_fit(&raw[RAW_START * len..], base));
        let n = column_words(len, wide);
        let layout = Block::layout(n);
        // SAFETY: `layout` has a non-zero size (the header's at least). The allocation is
        // written in full before the box is made: the header at offset 0 (its layout's
        // alignment is the allocation's) and the `n` column words at `COLUMNS_AT`, where
        // `repr(C)` puts `Block::columns` (an `AtomicU64` has the size and bit validity of
        // a `u64`, and the allocation is not shared yet, so plain writes initialize it):
        // `len` values, then `len` starts and `len` last events (`wide`) or `len` words of
        // both, packed. `layout` is the one `Box` frees it with (`Layout::for_value` of
        // the block: header, `n` words, padded to the alignment).
        let block = unsafe {
            let p = alloc(layout);
            if p.is_null() {
                handle_alloc_error(layout);
            }
            p.cast::<Header>().write(head);
            let words = p.add(COLUMNS_AT).cast::<u64>();
            let copy = |from: &[f64], at: usize| {
                std::ptr::copy_nonoverlapping(from.as_ptr().cast::<u64>(), words.add(at), len);
            };
            copy(values, 0);
            if wide {
                copy(starts, len);
                copy(lasts, 2 * len);
            } else {
                // Every time fits ([`times_fit`]): the offsets are exact.
                let offset = |t: &f64| (t.to_bits() as i64).wrapping_sub(base) as u32;
                for (i, (start, last)) in starts.iter().zip(lasts).enumerate() {
                    let packed = u64::from(offset(start)) | u64::from(offset(last)) << 32;
                    words.add(len + i).write(packed);
                }
            }
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
    fn value(&self, i: usize) -> f64 {
        f64::from_bits(self.columns[i].load(Relaxed))
    }

    /// Slot `i`'s start and last-event time.
    #[inline]
    fn times(&self, i: usize) -> (i64, i64) {
        let len = self.len as usize;
        let word = |k: usize| self.columns[k].load(Relaxed);
        if self.wide {
            (word(len + i) as i64, word(2 * len + i) as i64)
        } else {
            unpack_times(word(len + i), self.base)
        }
    }

    /// Writes slot `i` of a block that is not `wide`, whose times fit
    /// ([`pack_times`]).
    #[inline(always)]
    fn set_slot(&self, i: usize, value: f64, times: u64) {
        debug_assert!(!self.wide);
        self.columns[i].store(value.to_bits(), Relaxed);
        self.columns[self.len as usize + i].store(times, Relaxed);
    }

    /// The values of the samples after the one at `cur` ([`Samples::tail`]).
    #[inline]
    fn tail(&self, cur: usize) -> impl Iterator<Item = f64> + '_ {
        (cur + 1..self.len as usize).map(|i| self.value(i))
    }

    /// Asks the CPU to bring the ring's columns into cache (a hint).
    #[inline]
    fn prefetch_ring(&self) {
        for line in self.columns.chunks(8) {
            crate::sync::prefetch(line.as_ptr());
        }
    }

    /// The ring in the state of accumulator word `word`: its view's sample in progress,
    /// with the accumulator's value and last event and the view's start (every event count
    /// zero: a block keeps none). Exact when no opener can write the words it reads: `word`
    /// is sealed, or still current after.
    fn folded(&self, word: u128) -> Samples {
        let acc = unpack(word);
        let view = self.views[acc.parity].load();
        let len = self.len as usize;
        let mut columns = Vec::with_capacity(4 * len);
        columns.extend((0..len).map(|i| self.value(i)));
        columns.extend((0..len).map(|_| 0.0));
        for column in [0, 1] {
            let time = |i| {
                let times = self.times(i);
                f64::from_bits((if column == 0 { times.0 } else { times.1 }) as u64)
            };
            columns.extend((0..len).map(time));
        }
        let columns = columns.into_boxed_slice();
        let cur = view.index();
        let mut samples = Samples::from_columns(cur as u32, columns);
        samples.set_current(acc.value, self.base + acc.offset);
        if view.flag(HAS_SUMMARY) {
            samples.set_current_start(view.cur_start);
        }
        let purged = view.purged();
        for k in (0..PURGED_BITS.min(len.saturating_sub(1))).filter(|k| purged >> k & 1 != 0) {
            samples.purge_slot((cur + 1 + k) % len, view.cur_start);
        }
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
        loop {
            let block = self.block.load(guard).get();
            let word = block.acc.load();
            let samples = block.folded(word);
            // A sealed word is frozen (and so is the state of a claimed one while it is
            // claimed); otherwise the copy is exact if the word is still current after it.
            if unpack(word).sealed {
                return samples;
            }
            fence(Acquire);
            if block.acc.load() == word {
                return samples;
            }
        }
    }

    /// Records `value` at `t`; with `check`, measures and checks the bound as Kafka's
    /// `Sensor.record` does (one atomic step).
    #[inline]
    pub fn record<F: Fn() -> Option<f64>>(
        &self,
        cfg: &WindowConfig,
        value: f64,
        t: i64,
        check: bool,
        source: &BoundSource<F>,
        guard: &Guard,
    ) -> Check {
        match self.attempt(cfg, value, t, check, source, guard) {
            Attempt::Done(result) => result,
            _ => self.record_any(cfg, value, t, check, source, guard),
        }
    }

    /// One pass of [`Self::record`] without the structural path: the record when it
    /// changes only the accumulator (the state is not sealed nor claimed, has a summary,
    /// its bound is current, the record stays in the sample in progress, and the
    /// accumulator's compare-and-swap succeeds) or opens the sample it starts in place
    /// ([`Self::open`]); otherwise whether to try again or record structurally. The
    /// common case is this pass alone, inline, with no call.
    #[inline(always)]
    fn attempt<F: Fn() -> Option<f64>>(
        &self,
        cfg: &WindowConfig,
        value: f64,
        t: i64,
        check: bool,
        source: &BoundSource<F>,
        guard: &Guard,
    ) -> Attempt {
        let block = self.block.load(guard).get();
        // Which view to read depends on the accumulator: ask for the header's lines
        // together rather than one after the other.
        let head: *const Header = &block.head;
        crate::sync::prefetch(head);
        crate::sync::prefetch(head.cast::<u8>().wrapping_add(64));
        let word = block.acc.load();
        let acc = unpack(word);
        let view = block.views[acc.parity].load();
        let bound_current = match source {
            BoundSource::Keep => true,
            BoundSource::Generation { generation, .. } => block.bound_generation == *generation,
        };
        let Some(summary) = view.summary() else {
            return Attempt::Structural;
        };
        let Some(off) = offset(t, block.base) else {
            return Attempt::Structural;
        };
        if acc.sealed || acc.opening || !bound_current {
            return Attempt::Structural;
        }
        if !summary.record_in_place(cfg, t, check) {
            return match self.open(block, cfg, word, &view, value, t, off, check) {
                Opened::Done(result) => Attempt::Done(result),
                Opened::Retry => Attempt::Retry,
                Opened::No => Attempt::Structural,
            };
        }
        let whole = view.flag(WHOLE);
        let updated = acc.value + value;
        if (whole && !small_whole(updated)) || (view.flag(OPENED) && t < view.cur_start) {
            return Attempt::Structural;
        }
        // Pairs with an opener's release fence after its claim: if a read above saw an
        // opener's write, the exchange below sees its claim and fails.
        fence(Acquire);
        if block
            .acc
            .compare_exchange(word, pack(updated, off, acc.parity))
            .is_err()
        {
            return Attempt::Retry;
        }
        Attempt::Done(match block.bound().value {
            Some(bound) if check => {
                let (rate, window) = if whole {
                    summary.rate_of_whole(cfg, t, updated)
                } else {
                    // A state that is not whole is never opened in place: until the
                    // block is replaced, no word of its ring changes.
                    summary.rate(cfg, t, updated, block.tail(view.index()))
                };
                verdict(rate, bound, window)
            }
            _ => Check::UNCHECKED,
        })
    }

    /// [`Self::record`], every case: in place, opening the next sample in place, or
    /// structural.
    #[inline(never)]
    fn record_any<F: Fn() -> Option<f64>>(
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
            match self.attempt(cfg, value, t, check, source, guard) {
                Attempt::Done(result) => return result,
                Attempt::Retry => continue,
                Attempt::Structural => return structural(),
            }
        }
    }

    /// Opens the next sample in place (see the module documentation) for a record of
    /// `value` at `t` (offset `off` from the base) that starts a new sample in the state
    /// of accumulator word `word` and view `view`, if the ring is full and whole, the
    /// slots the check purges have a bit in the purged mask, and the times fit.
    #[allow(clippy::too_many_arguments)]
    #[inline(never)]
    fn open(
        &self,
        block: &Block,
        cfg: &WindowConfig,
        word: u128,
        view: &ViewData,
        value: f64,
        t: i64,
        off: i64,
        check: bool,
    ) -> Opened {
        // Kafka measures (and so purges) after a record only when it checks a bound.
        let check = check && block.has_bound;
        let len = block.len as usize;
        if !view.flag(NONNEG)
            || block.wide
            || len != cfg.ring_len()
            || len > 64
            || !window_over(cfg, view.cur_start, t)
        {
            return Opened::No;
        }
        let acc = unpack(word);
        let (cur, closed_last) = (view.index(), block.base + acc.offset);
        // The ring's words this open writes: the closed slot's times, and the start (at
        // once its last event) of the slots the current state holds as purged.
        let (Some(closed_times), Some(purged_times)) = (
            pack_times(view.cur_start, closed_last, block.base),
            pack_times(view.cur_start, view.cur_start, block.base),
        ) else {
            return Opened::No;
        };
        // The mask's bit `k` is the slot `k + 1` after `cur`; none is `cur` itself.
        let held = view.purged();
        if cur >= len || (len <= PURGED_BITS && held >> (len - 1) != 0) {
            return Opened::Retry; // a torn view: the state changed
        }
        // Samples::record in a full ring: the next slot is reset at `t` and takes `value`;
        // then (with `check`) the measurement purges every obsolete slot. The new state
        // holds those as purged (a bit each in its mask), so none of their words is
        // written before the state that reads them is gone.
        let next = if cur + 1 >= len { 0 } else { cur + 1 };
        let updated = 0.0 + value;
        // The state after the open: the others' sum changes by the closed sample's value,
        // less the next slot's and those of the slots the check purges (every value is
        // whole, not negative and adds up to at most `EXACT_LIMIT` (`NONNEG`), so each
        // step is exact); the summary's times, slot by slot from the oldest (right after
        // the next slot) to the closed one. A slot this state holds as purged holds
        // nothing, started and last recorded at this state's start.
        let cs = view.cur_start;
        let (values, times) = block.columns.split_at(len);
        let mut others = view.prefix;
        if held & 1 == 0 {
            others -= f64::from_bits(values[next].load(Relaxed));
        }
        // Times as offsets from the base (every ring time fits 32 bits; so do `cs` and
        // the closed sample's, checked above): from the new state's start `t`, the oldest
        // start and the range of the others' last events. A slot the check purges counts
        // as re-initialised at `t`; the new mask gets its bit.
        let base = block.base;
        let (t_off, cs_off) = (t - base, cs - base);
        let horizon = if check { cfg.horizon_ms() } else { i64::MAX };
        let (mut min_start, mut min_last, mut max_last) = (t_off, i64::MAX, i64::MIN);
        let mut purged = 0u64;
        // The others, from the oldest: the slot `k + 1` after `next` has bit `k` in the
        // new mask and bit `k + 1` in this state's (a ring of at most 64 slots, so every
        // position has a bit here).
        let held = u64::from(held);
        let (values, times) = (&values[..len], &times[..len]);
        let mut i = next;
        for k in 0..len - 2 {
            i = if i + 1 == len { 0 } else { i + 1 };
            let was_held = held >> (k + 1) & 1 != 0;
            let w = times[i].load(Relaxed);
            let (start, last) = if was_held {
                (cs_off, cs_off)
            } else {
                (
                    i64::from(w as u32 as i32),
                    i64::from((w >> 32) as u32 as i32),
                )
            };
            let purge = t_off - last >= horizon;
            let (start, last) = if purge {
                purged |= 1 << k;
                if !was_held {
                    others -= f64::from_bits(values[i].load(Relaxed));
                }
                (t_off, t_off)
            } else {
                (start, last)
            };
            min_start = min_start.min(start);
            min_last = min_last.min(last);
            max_last = max_last.max(last);
        }
        let k = len - 2;
        // The closed sample last.
        let closed = acc.value;
        let closed_last_off = closed_last - base;
        if t_off - closed_last_off >= horizon {
            purged |= 1 << k;
            min_start = min_start.min(t_off);
            min_last = min_last.min(t_off);
            max_last = max_last.max(t_off);
        } else {
            others += closed;
            min_start = min_start.min(cs_off);
            min_last = min_last.min(closed_last_off);
            max_last = max_last.max(closed_last_off);
        }
        if purged >> PURGED_BITS != 0 {
            return Opened::No; // a purged slot has no bit in the mask
        }
        let purged = purged as u32;
        let (min_start, min_last, max_last) = (base + min_start, base + min_last, base + max_last);
        let summary = Summary::of_parts(t, min_start, min_last, max_last, others);
        let Some((_, _, offsets)) = summary.to_offsets() else {
            return Opened::No;
        };
        let fits = closed >= 0.0
            && small_whole(closed)
            && others <= EXACT_LIMIT
            && small_whole(updated)
            && summary.record_in_place(cfg, t, check);
        if !fits {
            return Opened::No;
        }
        // Claim. Pairs with the release fence of the opener of the state read above, if
        // the reads saw a later opener's writes (then this exchange fails).
        fence(Acquire);
        let claimed = with_flag(word, OPENING);
        if block.acc.compare_exchange(word, claimed).is_err() {
            return Opened::Retry;
        }
        // A reader of an older state that reads what follows sees this claim first.
        fence(Release);
        // The words the current state does not read from the ring: the sample in
        // progress's (closed now) and those of the slots it holds as purged.
        block.set_slot(cur, acc.value, closed_times);
        let mut mask = held;
        while mask != 0 {
            let k = mask.trailing_zeros() as usize;
            mask &= mask - 1;
            block.set_slot((cur + 1 + k) % len, 0.0, purged_times);
        }
        let parity = 1 - acc.parity;
        block.views[parity].store(&ViewData {
            cur_start: t,
            prefix: others,
            offsets,
            cur: next as u32 | HAS_SUMMARY | WHOLE | OPENED | NONNEG | purged << PURGED_SHIFT,
        });
        // Publish; fails only if another thread sealed the claimed word.
        if block
            .acc
            .compare_exchange(claimed, pack(updated, off, parity))
            .is_err()
        {
            return Opened::Retry;
        }
        Opened::Done(match block.bound().value {
            Some(bound) if check => {
                let (rate, window) = summary.rate_of_whole(cfg, t, updated);
                verdict(rate, bound, window)
            }
            _ => Check::UNCHECKED,
        })
    }

    /// The rate per second at `t`; purges obsolete samples as Kafka's measurement does.
    pub fn measure(&self, cfg: &WindowConfig, t: i64, guard: &Guard) -> f64 {
        loop {
            let block = self.block.load(guard).get();
            let word = block.acc.load();
            let acc = unpack(word);
            let view = block.views[acc.parity].load();
            let pure = view
                .summary()
                .filter(|s| {
                    !acc.sealed
                        && !acc.opening
                        && s.measure_is_pure(cfg, t, block.base + acc.offset)
                })
                .map(|summary| {
                    if view.flag(WHOLE) {
                        summary.rate_of_whole(cfg, t, acc.value).0
                    } else {
                        summary.rate(cfg, t, acc.value, block.tail(view.index())).0
                    }
                });
            let Some(rate) = pure else {
                return self.structural(guard, |samples, _| samples.measure_rate(cfg, t).0);
            };
            // As in `record`: what was read is the state of `word` if it is still current.
            fence(Acquire);
            if block.acc.load() == word {
                return rate;
            }
        }
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

/// What one pass of [`RateCell::record`] came to.
enum Attempt {
    /// Recorded (and checked).
    Done(Check),
    /// Another thread changed the state first: try again.
    Retry,
    /// Only the structural path can record this.
    Structural,
}

/// How an in-place open ended.
enum Opened {
    /// Opened; the record's check.
    Done(Check),
    /// The state changed meanwhile: start over.
    Retry,
    /// Not possible in place: take the structural way.
    No,
}

/// Seals the accumulator (if not sealed yet) and returns the sealed word; `None` if the
/// word kept changing under us (retry from a fresh load).
fn seal(acc: &AtomicWord) -> Option<u128> {
    let mut word = acc.load();
    for _ in 0..64 {
        if unpack(word).sealed {
            return Some(word);
        }
        let sealed = with_flag(word, SEALED);
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
    use crate::kafka::quota::check_bound;
    use crate::sync::cow::pin;

    /// A ring's values, starts and last events (what a block keeps of it).
    fn observe(s: &Samples) -> Vec<(u64, i64, i64)> {
        s.slots()
            .iter()
            .map(|x| (x.value.to_bits(), x.start, x.last))
            .collect()
    }

    fn three_samples(times: [i64; 3]) -> Samples {
        let mut samples = Samples::new();
        let cfg = WindowConfig::new(3, 100).unwrap();
        for t in times {
            samples.record(&cfg, 1.5, t);
        }
        samples
    }

    #[test]
    fn a_header_is_112_bytes_and_a_block_adds_16_bytes_a_slot() {
        assert_eq!(std::mem::size_of::<Header>(), 112);
        let samples = three_samples([0, 100, 200]);
        let bound = Bound {
            value: None,
            generation: 7,
        };
        let block = Block::new(samples.clone(), bound, false);
        assert_eq!(std::mem::size_of_val(&*block), 112 + 3 * 16);
        assert!(!block.wide);
        let view = block.views[0].load();
        assert!(block.tail(view.index()).eq(samples.tail().iter().copied()));
        let thin = Block::into_thin(block);
        // SAFETY: `thin` came from `into_thin` just above and is freed once, here.
        let block = unsafe { Box::from_raw(Block::from_thin(thin).as_ptr()) };
        let view = block.views[0].load();
        assert_eq!((view.index(), block.len, block.columns.len()), (2, 3, 6));
        let folded = block.folded(block.acc.load());
        assert_eq!(observe(&folded), observe(&samples));
        assert_eq!(folded.current_index(), samples.current_index());
        assert!(folded.slots().iter().all(|slot| slot.count == 0));
    }

    #[test]
    fn times_too_far_from_the_base_for_32_bits_are_kept_whole() {
        // 2^31 ms is about 24.9 days: the first slot's times are further than that from
        // the base (the last event), so the block keeps each time in a word of its own.
        let far = 1i64 << 31;
        for (times, wide) in [
            ([-far + 100, 0, 100], false),
            ([-far + 99, 0, 100], true),
            ([i64::MIN / 2, 0, i64::MAX / 2], true),
        ] {
            let samples = three_samples(times);
            let block = Block::new(
                samples.clone(),
                Bound {
                    value: None,
                    generation: 0,
                },
                false,
            );
            assert_eq!(block.wide, wide, "{times:?}");
            let words: usize = if wide { 3 * 3 } else { 2 * 3 };
            // Padded to the accumulator's 16-byte alignment.
            let bytes = (112 + words * 8).next_multiple_of(16);
            assert_eq!(std::mem::size_of_val(&*block), bytes);
            let thin = Block::into_thin(block);
            // SAFETY: as above.
            let block = unsafe { Box::from_raw(Block::from_thin(thin).as_ptr()) };
            assert_eq!(block.columns.len(), words);
            assert_eq!(observe(&block.folded(block.acc.load())), observe(&samples));
        }
        assert_eq!(pack_times(i64::MIN, 0, 1), None);
        assert_eq!(pack_times(0, i64::MAX, -1), None);
        for (start, last, base) in [(-5, 7, 3), (0, 0, 0), (i64::MAX - 9, i64::MAX, i64::MAX)] {
            let packed = pack_times(start, last, base).unwrap();
            assert_eq!(unpack_times(packed, base), (start, last));
        }
    }

    #[test]
    fn pack_round_trips() {
        for (v, o, p) in [
            (0.0, 0, 0),
            (-1.5, -5, 1),
            (f64::MAX, MAX_OFFSET - 1, 0),
            (1.0, -MAX_OFFSET, 1),
        ] {
            let acc = unpack(pack(v, o, p));
            assert_eq!((acc.value, acc.offset, acc.parity), (v, o, p));
            assert!(!acc.sealed && !acc.opening);
            let flagged = unpack(with_flag(with_flag(pack(v, o, p), OPENING), SEALED));
            assert_eq!((flagged.offset, flagged.parity), (o, p));
            assert!(flagged.sealed && flagged.opening);
        }
        assert_eq!(offset(i64::MAX, i64::MIN), None);
        assert_eq!(offset(10, 4), Some(6));
    }

    /// The address of the current block (to tell an in-place change from a new block).
    fn block_address(cell: &RateCell, guard: &Guard) -> *const Header {
        &**cell.block.load(guard).get()
    }

    /// Records `n` whole values every `step` ms with checks, comparing every check, the
    /// samples and a later measurement with plain samples; returns how many new samples
    /// were opened in place and how many took a new block.
    fn opens(cfg: WindowConfig, step: i64, n: i64) -> (usize, usize) {
        let cell = RateCell::new(Bound {
            value: Some(1e9),
            generation: 0,
        });
        let mut plain = Samples::new();
        let keep = BoundSource::<fn() -> Option<f64>>::Keep;
        let guard = pin();
        let (mut in_place, mut new_block) = (0, 0);
        for i in 0..n {
            let t = i * step;
            let v = (i % 7 * 100) as f64;
            let before = block_address(&cell, &guard);
            let starts_sample = plain
                .current_index()
                .is_some_and(|c| t - plain.slots()[c].start >= cfg.window_ms());
            plain.record(&cfg, v, t);
            let expected = check_bound(&mut plain, &cfg, 1e9, t);
            let got = cell.record(&cfg, v, t, true, &keep, &guard);
            assert_eq!(got, expected, "t={t}");
            assert_eq!(got.rate.map(f64::to_bits), expected.rate.map(f64::to_bits));
            if starts_sample {
                if before == block_address(&cell, &guard) {
                    in_place += 1;
                } else {
                    new_block += 1;
                }
            }
            let snapshot = cell.samples(&guard);
            assert_eq!(snapshot.current_index(), plain.current_index(), "t={t}");
            assert_eq!(observe(&snapshot), observe(&plain), "t={t}");
            if i % 3 == 0 {
                let later = t + step / 4;
                assert_eq!(
                    cell.measure(&cfg, later, &guard).to_bits(),
                    plain.measure_rate(&cfg, later).0.to_bits(),
                    "t={later}"
                );
            }
        }
        (in_place, new_block)
    }

    #[test]
    fn a_new_sample_in_a_full_whole_ring_opens_in_place() {
        // A record every 30 ms, windows of 100: a new sample every 4 records (at 0, 120,
        // 240, ...); the ring (4 slots) is full from 360 ms on. Every new sample from
        // then on opens in place; the three that grow the ring take a new block.
        assert_eq!(opens(WindowConfig::new(3, 100).unwrap(), 30, 200), (46, 3));
    }

    #[test]
    fn an_open_in_place_purges_the_oldest_samples() {
        // Kafka's defaults and a record every 156 ms (the record benchmark's 10^4 keys):
        // windows of 1092 ms, so at each new sample the oldest other one is obsolete and
        // the check purges it. Still in place, but for the 11 new samples that grow the
        // ring.
        assert_eq!(opens(WindowConfig::QUOTA_DEFAULT, 156, 3000), (417, 11));
    }

    #[test]
    fn opens_in_place_until_the_times_are_too_far_from_the_base() {
        // Windows of 2^28 ms (about 3.1 days) and a record at the start of each (a step):
        // every record after the first starts a sample; the 4-slot ring is full from the
        // fourth on (3 new blocks grow it), and from then on each open's check purges the
        // oldest sample (its last event 3 windows old), in place. Nothing else changes the
        // block. Its times are 32-bit offsets from its base (the last event when it was
        // made), and 2^31 ms is 8 steps: the block made at step k takes the opens at
        // k+1 .. k+8 in place (the last one writes the closed sample's times, 7 steps after
        // the base), and the one at k+9 (8 steps) takes a new block. From step 3 on: new
        // blocks at 12, 21, ..., 399 (44 of them), the other 352 opens in place.
        let (in_place, new_block) = opens(WindowConfig::new(3, 1 << 28).unwrap(), 1 << 28, 400);
        assert_eq!((in_place, new_block), (352, 3 + 44));
    }

    #[test]
    fn sparse_records_open_in_place() {
        // Kafka's defaults (11 windows of 1 s, a 12-slot ring) and a client that records
        // less than once a window: every record after the first starts a sample (399),
        // the first 11 of them grow the ring, and each open's check purges the slots whose
        // last event is 11 s old or more, wherever they are in the ring (slots purged by
        // an earlier open were re-initialised then, so they are younger than the ones
        // after them): the new state holds each in its purged mask, and every open is in
        // place, up to records 30 s apart.
        for step in [1001, 1562, 2000, 5000, 10999, 11000, 12000, 30000] {
            let got = opens(WindowConfig::QUOTA_DEFAULT, step, 400);
            assert_eq!(got, (388, 11), "a record every {step} ms");
        }
        // 13 windows (a 14-slot ring): the mask has a bit for the 12 slots after the
        // sample in progress, not for the 13th, the oldest. A record every 1562 ms never
        // purges it (its samples are 20 s old or younger), so every open is in place. With
        // 20 windows and a record every 3 s, an open purges up to 14 slots, the last ones
        // further than 12 places on, which the mask cannot hold: every open takes a new
        // block.
        assert_eq!(
            opens(WindowConfig::new(13, 1000).unwrap(), 1562, 400),
            (386, 13)
        );
        assert_eq!(
            opens(WindowConfig::new(20, 1000).unwrap(), 3000, 400),
            (0, 399)
        );
    }

    /// Records 1.0 at each of `times` with checks (2 samples of 10 ms, a bound of 1e9),
    /// comparing every check and the samples with plain samples; returns the times whose
    /// record left the block in place.
    fn in_place_times(times: &[i64]) -> Vec<i64> {
        let cfg = WindowConfig::new(2, 10).unwrap();
        let cell = RateCell::new(Bound {
            value: Some(1e9),
            generation: 0,
        });
        let mut plain = Samples::new();
        let keep = BoundSource::<fn() -> Option<f64>>::Keep;
        let guard = pin();
        let mut same_block = Vec::new();
        for &t in times {
            let before = block_address(&cell, &guard);
            plain.record(&cfg, 1.0, t);
            let expected = check_bound(&mut plain, &cfg, 1e9, t);
            assert_eq!(cell.record(&cfg, 1.0, t, true, &keep, &guard), expected);
            assert_eq!(observe(&cell.samples(&guard)), observe(&plain), "t={t}");
            if before == block_address(&cell, &guard) {
                same_block.push(t);
            }
        }
        same_block
    }

    #[test]
    fn an_open_purges_the_sample_it_closes_in_place() {
        // The loom model `an_open_purging_the_closed_sample_racing_a_record`, on one
        // thread: the open at 55 purges both other samples, the one it closes (last
        // recorded at 29) included, and stays in the block, as do the record at 58 and the
        // open at 66, which writes the slots the state at 55 held as purged.
        let same_block = in_place_times(&[0, 10, 19, 20, 29, 55, 58, 66]);
        assert_eq!(same_block, [19, 29, 55, 58, 66]);
    }

    #[test]
    fn purging_opens_stay_in_place() {
        // The loom model `purging_opens_racing_a_record`, on one thread: the record at 39
        // purges the sample last recorded at 19 (a new block); the opens at 50 and 60
        // each purge one sample and stay in the block, as do the records in between.
        let same_block = in_place_times(&[0, 10, 19, 20, 29, 30, 39, 50, 52, 60]);
        assert_eq!(same_block, [19, 29, 30, 50, 52, 60]);
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
