//! The words of a [`RateCell`](super::RateCell)'s state: the packed accumulator word
//! (the sample in progress's value and last-event offset, and the seal, claim and parity
//! flags) and the block it lives in (the header with its two views, then the ring's
//! columns in the same allocation). See the parent module for the protocol on them.

use std::alloc::{alloc, handle_alloc_error, Layout};
use std::ptr::NonNull;
use std::sync::atomic::Ordering::Relaxed;
use std::sync::atomic::{AtomicI32, AtomicI64, AtomicU32, AtomicU64};

use super::Bound;
use crate::kafka::samples::{exact_others_sum, small_whole, Samples, Summary};
use crate::sync::cow::{AtomicWord, Thin};

/// The accumulator's high half: the seal bit, the claim bit, the parity (the view in
/// force), then the last-event offset.
pub(super) const SEALED: u64 = 1;
pub(super) const OPENING: u64 = 2;
const PARITY: u64 = 4;
const FLAG_BITS: u32 = 3;
/// Times are stored relative to the block's base in 61 bits; an in-place open keeps every
/// time it compares within this range of the base, so no difference of two wraps.
pub(super) const MAX_OFFSET: i64 = 1 << 59;

#[derive(Debug, Clone, Copy, PartialEq)]
pub(super) struct Acc {
    pub(super) value: f64,
    pub(super) offset: i64,
    pub(super) sealed: bool,
    pub(super) opening: bool,
    pub(super) parity: usize,
}

pub(super) fn pack(value: f64, offset: i64, parity: usize) -> u128 {
    let high = ((offset as u64) << FLAG_BITS) | if parity == 1 { PARITY } else { 0 };
    (u128::from(high) << 64) | u128::from(value.to_bits())
}

pub(super) fn unpack(word: u128) -> Acc {
    let high = (word >> 64) as u64;
    Acc {
        value: f64::from_bits(word as u64),
        offset: (high as i64) >> FLAG_BITS,
        sealed: high & SEALED != 0,
        opening: high & OPENING != 0,
        parity: usize::from(high & PARITY != 0),
    }
}

pub(super) fn with_flag(word: u128, flag: u64) -> u128 {
    word | (u128::from(flag) << 64)
}

pub(super) fn offset(t: i64, base: i64) -> Option<i64> {
    t.checked_sub(base)
        .filter(|o| (-MAX_OFFSET..MAX_OFFSET).contains(o))
}

/// [`View::cur`]: the index in the low 16 bits (a ring has at most 65536 slots), four
/// flags, then the mask of the slots the state holds as purged.
const INDEX: u32 = 0xffff;
pub(super) const HAS_SUMMARY: u32 = 1 << 16;
pub(super) const WHOLE: u32 = 1 << 17;
pub(super) const OPENED: u32 = 1 << 18;
pub(super) const NONNEG: u32 = 1 << 19;
pub(super) const PURGED_SHIFT: u32 = 20;
/// The purged mask's width: bit `k` is the slot `k + 1` places after the sample in
/// progress, so a ring of up to 13 slots (Kafka's default is 12) has a bit for every other
/// slot.
pub(super) const PURGED_BITS: usize = (32 - PURGED_SHIFT) as usize;

/// What the hot path reads of one state of the ring: the summary (its times as 32-bit
/// offsets, [`Summary::to_offsets`]; none is kept when they do not fit) and the index of
/// the sample in progress. Atomics, all accessed `Relaxed`, because an opener rewrites the
/// spare view while a reader that loaded an older accumulator may still read it (and then
/// discards what it read; see the parent module's documentation).
#[repr(C)]
pub(super) struct View {
    cur_start: AtomicI64,
    /// The bits of the summary's prefix, or (when `WHOLE`) of the sum of every sample but
    /// the one in progress ([`exact_others_sum`]).
    prefix: AtomicU64,
    offsets: [AtomicI32; 3],
    /// The sample in progress's index, the `HAS_SUMMARY`, `WHOLE`, `OPENED` and `NONNEG`
    /// flags and the purged mask: `NONNEG` when, besides, no other sample's value is
    /// negative (then the prefix is also the sum of the others' magnitudes). `WHOLE` when
    /// the prefix is the others' exact sum and the accumulator's value is [`small_whole`]
    /// (an in-place record keeps it so): then a record or a measurement reads no slot of
    /// the ring. `OPENED` when this state was reached by an in-place open (then an in-place
    /// record's time is at or after the start; see the parent module's documentation). The
    /// purged mask: the slots that open's check purged (bit `k` for the slot `k + 1` places
    /// after the sample in progress); this state holds them as re-initialised at its start,
    /// whatever their words in the ring say (the next open writes them).
    cur: AtomicU32,
}

/// A [`View`]'s contents.
#[derive(Debug, Clone, Copy, PartialEq)]
pub(super) struct ViewData {
    pub(super) cur_start: i64,
    pub(super) prefix: f64,
    pub(super) offsets: [i32; 3],
    pub(super) cur: u32,
}

impl ViewData {
    const EMPTY: ViewData = ViewData {
        cur_start: 0,
        prefix: 0.0,
        offsets: [0; 3],
        cur: 0,
    };

    #[inline]
    pub(super) fn index(&self) -> usize {
        (self.cur & INDEX) as usize
    }

    #[inline]
    pub(super) fn flag(&self, flag: u32) -> bool {
        self.cur & flag != 0
    }

    /// The purged mask (see [`View::cur`]).
    #[inline]
    pub(super) fn purged(&self) -> u32 {
        self.cur >> PURGED_SHIFT
    }

    #[inline]
    pub(super) fn summary(&self) -> Option<Summary> {
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
    pub(super) fn load(&self) -> ViewData {
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

    pub(super) fn store(&self, data: &ViewData) {
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
pub(super) struct Header {
    pub(super) acc: AtomicWord,
    /// The time the accumulator's last-event offsets are relative to.
    pub(super) base: i64,
    /// [`Bound`]'s value (when `has_bound`) and generation.
    bound_value: f64,
    pub(super) bound_generation: u64,
    /// The current view (the accumulator's parity) and the spare one.
    pub(super) views: [View; 2],
    /// The ring's length in slots ([`Samples::raw`]).
    pub(super) len: u32,
    /// The ring's times are two words per slot, absolute ([`Block::times`]); otherwise
    /// one word per slot, two 32-bit offsets from `base`.
    pub(super) wide: bool,
    pub(super) has_bound: bool,
    /// Removed by expiry (see [`RateCell::remove_if`](super::RateCell::remove_if)): the
    /// ring is empty and the sensor does not exist for readers until a record or
    /// [`RateCell::revive`](super::RateCell::revive) brings it back.
    pub(super) absent: bool,
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
/// parent module's documentation).
#[repr(C)]
pub(super) struct Block {
    pub(super) head: Header,
    pub(super) columns: [AtomicU64],
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
pub(super) fn pack_times(start: i64, last: i64, base: i64) -> Option<u64> {
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
pub(super) fn unpack_times(word: u64, base: i64) -> (i64, i64) {
    (
        base + i64::from(word as u32 as i32),
        base + i64::from((word >> 32) as u32 as i32),
    )
}

impl Block {
    pub(super) fn new(samples: Samples, bound: Bound, absent: bool) -> Box<Block> {
        let summary = samples.summary();
        Block::with_summary(samples, summary, bound, absent)
    }

    /// [`Block::new`] with the ring's summary already computed (`summary` must be
    /// `samples.summary()`).
    pub(super) fn with_summary(
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
    pub(super) fn bound(&self) -> Bound {
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
    pub(super) fn set_slot(&self, i: usize, value: f64, times: u64) {
        debug_assert!(!self.wide);
        self.columns[i].store(value.to_bits(), Relaxed);
        self.columns[self.len as usize + i].store(times, Relaxed);
    }

    /// The values of the samples after the one at `cur` ([`Samples::tail`]).
    #[inline]
    pub(super) fn tail(&self, cur: usize) -> impl Iterator<Item = f64> + '_ {
        (cur + 1..self.len as usize).map(|i| self.value(i))
    }

    /// Asks the CPU to bring the ring's columns into cache (a hint).
    #[inline]
    pub(super) fn prefetch_ring(&self) {
        for line in self.columns.chunks(8) {
            crate::sync::prefetch(line.as_ptr());
        }
    }

    /// The ring in the state of accumulator word `word`: its view's sample in progress,
    /// with the accumulator's value and last event and the view's start (every event count
    /// zero: a block keeps none). Exact when no opener can write the words it reads: `word`
    /// is sealed, or still current after.
    pub(super) fn folded(&self, word: u128) -> Samples {
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
