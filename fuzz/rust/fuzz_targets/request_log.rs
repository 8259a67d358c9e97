//! Fuzz target `request_log`: the request-log reader (`kquota_core::requestlog`) over
//! arbitrary bytes, split into lines as an Arrow string column (some lines null).
//!
//! Invariants: nothing panics; every line gives exactly one outcome, a row (reason 0)
//! or one of the reasons; a row has a valid end time and version and no example; a
//! skipped line has an example of at most `EXAMPLE_CHARS` characters; every column has
//! one entry per line and every string column's offsets slice its bytes as UTF-8.
#![no_main]

use kquota_core::requestlog::{parse_lines, Lines, Options, Strings, EXAMPLE_CHARS, REASONS};
use libfuzzer_sys::fuzz_target;

fn check_strings(s: &Strings, rows: usize) {
    assert_eq!(s.offsets.len(), rows + 1);
    assert!(s.offsets.windows(2).all(|w| w[0] <= w[1]));
    assert_eq!(*s.offsets.last().unwrap() as usize, s.data.len());
    if let Some(v) = &s.valid {
        assert_eq!(v.len(), rows);
    }
    for i in 0..rows {
        let (a, b) = (s.offsets[i] as usize, s.offsets[i + 1] as usize);
        assert!(std::str::from_utf8(&s.data[a..b]).is_ok());
    }
}

fuzz_target!(|data: &[u8]| {
    let mut column = Vec::new();
    let mut column_offsets = vec![0i32];
    for line in data.split(|&b| b == b'\n') {
        column.extend_from_slice(line);
        column_offsets.push(column.len() as i32);
    }
    let rows = column_offsets.len() - 1;
    // every seventh line null
    let valid: Vec<u8> = (0..rows.div_ceil(8))
        .map(|byte| {
            (0..8)
                .filter(|bit| (byte * 8 + bit) % 7 != 6)
                .fold(0u8, |acc, bit| acc | (1 << bit))
        })
        .collect();
    let lines = Lines {
        offsets: &column_offsets,
        data: &column,
        valid: Some((&valid, 0)),
    };
    let out = parse_lines(
        lines,
        Options {
            num_partitions: 1 + (data.len() % 5) as i32,
        },
    );
    assert_eq!(out.len(), rows);
    for i in 0..rows {
        let reason = out.reason[i];
        assert!(usize::from(reason) <= REASONS.len(), "reason code {reason}");
        if reason == 0 {
            assert!(out.wall_us.get(i).is_some());
            assert!(out.api_version.get(i).is_some());
            assert!(out.example.get(i).is_none());
        } else {
            let example = out.example.get(i).expect("a skipped line has an example");
            assert!(example.chars().count() <= EXAMPLE_CHARS);
            assert!(!out.topics_valid[i]);
        }
    }
    for s in [&out.example, &out.user, &out.client, &out.api] {
        check_strings(s, rows);
    }
    let topics = out.topic_op.len();
    check_strings(&out.topic_name, topics);
    assert_eq!(out.topic_count.values.len(), topics);
    assert_eq!(out.topic_offsets.len(), rows + 1);
    assert!(out.topic_offsets.windows(2).all(|w| w[0] <= w[1]));
    assert_eq!(*out.topic_offsets.last().unwrap() as usize, topics);
    check_strings(&out.topic_id, topics);
    let reads = out.read_kind.len();
    check_strings(&out.read_topic, reads);
    for v in [
        out.read_partition.len(),
        out.read_offset.len(),
        out.read_bytes.len(),
    ] {
        assert_eq!(v, reads);
    }
    assert_eq!(out.read_offsets.len(), rows + 1);
    assert!(out.read_offsets.windows(2).all(|w| w[0] <= w[1]));
    assert_eq!(*out.read_offsets.last().unwrap() as usize, reads);
    for i in 0..rows {
        // only a row lists reads, and only a throttled full fetch has an empty size
        let listed = out.read_offsets[i] < out.read_offsets[i + 1];
        assert!(out.reason[i] == 0 || !listed);
        assert_eq!(
            out.fetch_empty.get(i).is_some(),
            out.fetch_max_bytes.get(i).is_some()
        );
    }
    for v in [
        out.before_us.len(),
        out.bytes.len(),
        out.kafka_throttle.len(),
        out.share_fetch.len(),
    ] {
        assert_eq!(v, rows);
    }
    for v in [
        out.thread_ns.valid.len(),
        out.wall_us.valid.len(),
        out.correlation_id.valid.len(),
    ] {
        assert_eq!(v, rows);
    }
    assert_eq!(out.acks.valid.len(), rows);
    assert_eq!(out.strict.valid.len(), rows);
    assert_eq!(out.fetch_empty.valid.len(), rows);
    assert_eq!(out.fetch_max_bytes.valid.len(), rows);
});
