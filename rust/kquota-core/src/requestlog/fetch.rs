//! Where a consumer fetch reads from, as two keys: its connection and its position (the
//! partitions and offsets it asks for). A throttled fetch is answered empty and its line
//! shows no bytes; a later fetch on the same connection from the same position shows what
//! the broker would have sent (`shared/docs/kafka-request-log.md`, section 8), and these
//! keys let the import find it without carrying each request's partitions.

use super::json::{Lax, Objects, Request, RequestTopic, Str};

/// The position key of an incremental fetch that changes nothing in its session (no
/// partition listed, none forgotten): it reads from where the connection's previous
/// fetch did.
pub const SAME_POSITION: i64 = 0;

/// FNV-1a, 64 bits: stable across runs and machines (the keys are only compared within
/// one import, but a fixed function keeps imports reproducible).
#[derive(Clone, Copy)]
struct Fnv(u64);

impl Fnv {
    fn new() -> Self {
        Fnv(0xcbf2_9ce4_8422_2325)
    }

    fn bytes(mut self, data: &[u8]) -> Self {
        for b in data {
            self.0 ^= u64::from(*b);
            self.0 = self.0.wrapping_mul(0x0100_0000_01b3);
        }
        self
    }

    /// A key never equal to [`SAME_POSITION`].
    fn key(self) -> i64 {
        match self.0 as i64 {
            SAME_POSITION => 1,
            k => k,
        }
    }
}

/// The key of a line's `connection` (local and remote address, processor, index).
pub fn connection_key(connection: &str) -> i64 {
    Fnv::new().bytes(connection.as_bytes()).key()
}

fn elements<T>(array: &Objects<T>) -> &[Lax<T>] {
    array.get().map_or(&[], Vec::as_slice)
}

/// A topic's name as the request gives it: `topic` (v0-12), `topicId` (v13+), or `name`.
fn topic_name<'t>(topic: Option<&'t Str<'_>>, id: Option<&'t Str<'_>>) -> &'t str {
    topic.or(id).map_or("", |t| t.as_str())
}

/// The position key of a consumer fetch request: a hash of the partitions and offsets it
/// lists in order (and, for an incremental fetch, of those it forgets), or
/// [`SAME_POSITION`] for an incremental fetch that lists and forgets nothing. A full fetch
/// (session epoch 0 or -1, or no sessions before v7) lists every partition it reads, so
/// two full fetches with one key read from the same place.
pub fn position_key(request: &Request<'_>) -> i64 {
    let incremental = request.session_epoch.value().unwrap_or(-1) > 0;
    let mut hash = Fnv::new().bytes(if incremental { b"I" } else { b"F" });
    let mut listed = 0usize;
    let empty = RequestTopic::default();
    for topic in elements(&request.topics) {
        let topic = topic.get().unwrap_or(&empty);
        let name = topic_name(topic.topic.get(), topic.topic_id.get()).as_bytes();
        hash = hash.bytes(&(name.len() as u64).to_le_bytes()).bytes(name);
        for p in elements(&topic.partitions) {
            let (index, offset) = p.get().map_or((-1, -1), |p| {
                (
                    p.partition.value().unwrap_or(-1),
                    p.fetch_offset.value().unwrap_or(-1),
                )
            });
            hash = hash
                .bytes(&index.to_le_bytes())
                .bytes(&offset.to_le_bytes());
            listed += 1;
        }
    }
    hash = hash.bytes(b"forgotten");
    for topic in elements(&request.forgotten_topics_data) {
        let Some(topic) = topic.get() else { continue };
        let name = topic_name(topic.topic.get(), topic.topic_id.get()).as_bytes();
        hash = hash.bytes(&(name.len() as u64).to_le_bytes()).bytes(name);
        for p in topic.partitions.get().map_or(&[][..], Vec::as_slice) {
            hash = hash.bytes(&p.value().unwrap_or(-1).to_le_bytes());
            listed += 1;
        }
    }
    if incremental && listed == 0 {
        SAME_POSITION
    } else {
        hash.key()
    }
}

/// What one partition of a consumer fetch could read when Kafka handled it.
#[derive(Clone, Copy, Debug, Default, PartialEq, Eq)]
pub struct PartitionRead {
    /// The request's `partitionMaxBytes`.
    pub max_bytes: i64,
    /// The bytes from the fetch offset to the end the consumer may read.
    pub available: i64,
    /// The size of the batch at the fetch offset (0 when there is none).
    pub first_batch: i64,
}

/// The record bytes Kafka's replica manager reads for each partition of a consumer fetch,
/// in request order, under the request's `maxBytes` (`max_bytes`; versions 0-2 have none:
/// pass `i64::from(i32::MAX)`, Kafka's default). Each partition reads up to the smaller of
/// its own limit and what the response has left. From version 3 the limits are soft:
/// until a partition has returned records, the first batch is returned whole even when it
/// is larger (KIP-74). A read is a byte range of the log, so it may end inside a batch.
pub fn read_sizes(version: i32, max_bytes: i64, partitions: &[PartitionRead]) -> Vec<i64> {
    let mut left = max_bytes.max(0);
    let mut min_one = version >= 3;
    partitions
        .iter()
        .map(|p| {
            let limit = p.max_bytes.max(0).min(left);
            let limit = if min_one {
                limit.max(p.first_batch)
            } else {
                limit
            };
            let read = p.available.max(0).min(limit);
            if read > 0 {
                min_one = false;
            }
            left = (left - read).max(0);
            read
        })
        .collect()
}

/// The size Kafka checked against the fetch quota for a throttled consumer fetch whose
/// response with no records is `empty` bytes ([`super::sizes::empty_fetch_response_size`])
/// and whose partitions could read `partitions`.
pub fn throttled_fetch_size(
    version: i32,
    empty: i64,
    max_bytes: i64,
    partitions: &[PartitionRead],
) -> i64 {
    let reads = read_sizes(version, max_bytes, partitions);
    super::sizes::fetch_response_size_with(version, empty, &reads)
}

#[cfg(test)]
mod tests {
    use super::super::json::Line;
    use super::*;

    fn key(request: &str) -> i64 {
        let text = format!(r#"{{"request":{request}}}"#);
        let line: Line<'_> = serde_json::from_str(&text).unwrap();
        position_key(line.request.get().unwrap())
    }

    const FULL: &str = r#"{"replicaId":-1,"maxWaitMs":500,"minBytes":1,"maxBytes":52428800,"isolationLevel":0,"sessionId":0,"sessionEpoch":-1,"topics":[{"topic":"t","partitions":[{"partition":0,"currentLeaderEpoch":0,"fetchOffset":100,"logStartOffset":-1,"partitionMaxBytes":1048576}]}],"forgottenTopicsData":[],"rackId":""}"#;

    #[test]
    fn full_fetches_from_one_position_share_a_key() {
        let other_wait = FULL.replace(r#""maxWaitMs":500"#, r#""maxWaitMs":100"#);
        assert_eq!(key(FULL), key(&other_wait));
        assert_ne!(
            key(FULL),
            key(&FULL.replace(r#""fetchOffset":100"#, r#""fetchOffset":101"#))
        );
        assert_ne!(
            key(FULL),
            key(&FULL.replace(r#""partition":0"#, r#""partition":1"#))
        );
        assert_ne!(
            key(FULL),
            key(&FULL.replace(r#""topic":"t""#, r#""topic":"u""#))
        );
        // a new session (epoch 0) lists every partition too
        assert_eq!(
            key(FULL),
            key(&FULL.replace(r#""sessionEpoch":-1"#, r#""sessionEpoch":0"#))
        );
        assert_ne!(key(FULL), SAME_POSITION);
    }

    #[test]
    fn an_incremental_fetch_that_changes_nothing_keeps_the_position() {
        let nothing = r#"{"sessionId":7,"sessionEpoch":3,"topics":[],"forgottenTopicsData":[]}"#;
        assert_eq!(key(nothing), SAME_POSITION);
        let moved = FULL.replace(r#""sessionEpoch":-1"#, r#""sessionEpoch":3"#);
        assert_ne!(key(&moved), SAME_POSITION);
        assert_ne!(
            key(&moved),
            key(FULL),
            "incremental and full fetches differ"
        );
        let forgets = r#"{"sessionId":7,"sessionEpoch":3,"topics":[],"forgottenTopicsData":[{"topicId":"AAAAAAAAAAAAAAAAAAAAAA","partitions":[0]}]}"#;
        assert_ne!(key(forgets), SAME_POSITION);
        // a full fetch that lists nothing is a position of its own, not "the same"
        assert_ne!(key(r#"{"sessionEpoch":-1,"topics":[]}"#), SAME_POSITION);
    }

    #[test]
    fn topic_ids_and_connections() {
        let by_id = r#"{"sessionEpoch":-1,"topics":[{"topicId":"AAAAAAAAAAAAAAAAAAAAAQ","partitions":[{"partition":0,"fetchOffset":5}]}]}"#;
        let other = by_id.replace("AAAAAAAAAAAAAAAAAAAAAQ", "AAAAAAAAAAAAAAAAAAAAAg");
        assert_ne!(key(by_id), key(&other));
        assert_eq!(
            connection_key("127.0.0.1:9092-127.0.0.1:5000-0-1"),
            connection_key("127.0.0.1:9092-127.0.0.1:5000-0-1")
        );
        assert_ne!(
            connection_key("127.0.0.1:9092-127.0.0.1:5000-0-1"),
            connection_key("127.0.0.1:9092-127.0.0.1:5000-0-2")
        );
    }
}
