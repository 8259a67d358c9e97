//! Unit tests of [`RateCell`] and its block layout: the sizes, the packing of words and
//! times, and in-place opens checked against plain [`Samples`].

use super::block::{unpack_times, MAX_OFFSET};
use super::*;
use crate::kafka::quota::check_bound;
use crate::sync::cow::{pin, Thin};

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
