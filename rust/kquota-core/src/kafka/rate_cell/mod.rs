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
//! whose values are whole and not negative, adding up to at most 2^51 (so every sum of them
//! is exact, in any order), when the samples its check purges (if any) are among the 12
//! after the new sample in progress (all of them in Kafka's default ring) and the times
//! fit, changes the block's words instead of replacing the block. The accumulator's
//! *parity* bit selects which of the header's two [`View`](block::View)s (the summary of
//! the ring, the index of the sample in progress, its start, and the mask of the slots the
//! open that made this state purged) is the current one; the other is spare. The opener
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

use std::sync::atomic::fence;
use std::sync::atomic::Ordering::{Acquire, Relaxed, Release};

use crate::kafka::quota::{verdict, Check};
use crate::kafka::samples::{
    small_whole, window_over, Samples, Summary, WindowConfig, EXACT_LIMIT,
};
use crate::sync::cow::{AtomicBox, AtomicWord, Guard};

mod block;
#[cfg(all(test, not(loom)))]
mod tests;

use block::{
    offset, pack, pack_times, unpack, with_flag, Block, Header, ViewData, HAS_SUMMARY, NONNEG,
    OPENED, OPENING, PURGED_BITS, PURGED_SHIFT, SEALED, WHOLE,
};

/// The bound a sensor enforces and the configuration generation it came from.
#[derive(Debug, Clone, Copy, PartialEq)]
pub struct Bound {
    /// The upper bound, if any.
    pub value: Option<f64>,
    /// The configuration generation `value` was computed for.
    pub generation: u64,
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
