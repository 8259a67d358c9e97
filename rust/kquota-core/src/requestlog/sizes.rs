//! The sizes Kafka records for a Produce request and a Fetch response, rebuilt from a
//! line's logged fields by re-encoding them with the message schema of the logged version
//! (`shared/docs/kafka-request-log.md`, section 5). Records are never logged, only their
//! byte lengths, which is all the encoding needs. Arithmetic wraps, as Spark's long did.

use super::json::{
    FetchPartition, FetchTopic, Lax, Objects, ProducePartition, ProduceTopic, Request,
    RequestTopic, Response, Str,
};

/// Bytes of `n` as Kafka's unsigned varint (compact lengths and counts are `n + 1`);
/// a negative `n` (never in a valid line) takes one byte.
pub fn uvarint_size(n: i64) -> i64 {
    match n {
        _ if n < 1 << 7 => 1,
        _ if n < 1 << 14 => 2,
        _ if n < 1 << 21 => 3,
        _ if n < 1 << 28 => 4,
        _ => 5,
    }
}

/// A nullable string: compact (uvarint of length + 1, 0 for null) when `flexible`, else
/// an int16 length (-1 for null) and the bytes.
fn string_size(text: Option<&Str<'_>>, flexible: bool) -> i64 {
    let n = text.map_or(0, |t| t.as_str().len() as i64);
    match (flexible, text) {
        (true, None) => 1,
        (true, Some(_)) => uvarint_size(n + 1).wrapping_add(n),
        (false, _) => 2 + n,
    }
}

/// An array's count: compact (uvarint of count + 1) when `flexible`, else an int32.
fn count_size(n: usize, flexible: bool) -> i64 {
    if flexible {
        uvarint_size(n as i64 + 1)
    } else {
        4
    }
}

fn elements<T>(array: &Objects<T>) -> &[Lax<T>] {
    array.get().map_or(&[], Vec::as_slice)
}

/// The sum of `size` over an array's elements; an element that is not an object reads
/// as one of absent fields.
fn sum<T: Default>(array: &Objects<T>, size: impl Fn(&T) -> i64) -> i64 {
    let empty = T::default();
    elements(array).iter().fold(0i64, |acc, e| {
        acc.wrapping_add(size(e.get().unwrap_or(&empty)))
    })
}

fn flag(on: bool, bytes: i64) -> i64 {
    if on {
        bytes
    } else {
        0
    }
}

/// Kafka's `request.sizeInBytes` of a Produce request: request header + body, without
/// the 4-byte length prefix (`KafkaApis.handleProduceRequest`).
pub fn produce_request_size(
    version: i32,
    client_id: Option<&Str<'_>>,
    request: &Request<'_>,
) -> i64 {
    let flexible = version >= 9;
    let client = client_id.map_or(0, |c| c.as_str().len() as i64);
    // api key, version, correlation id, client id's int16 length (+ tag buffer)
    let header = flag(flexible, 11 + client) + flag(!flexible, 10 + client);
    let partition = |p: &ProducePartition| {
        let r = p.records_size_in_bytes.value();
        let records = match (flexible, r) {
            (true, None) => 1,
            (true, Some(r)) => uvarint_size(r.wrapping_add(1)).wrapping_add(r),
            (false, r) => 4i64.wrapping_add(r.unwrap_or(0)),
        };
        (4 + flag(flexible, 1)).wrapping_add(records)
    };
    let topic = |t: &ProduceTopic<'_>| {
        // v13+ name topics by their 16-byte id
        let name = if version >= 13 {
            16
        } else {
            string_size(t.name.get(), flexible)
        };
        let parts = &t.partition_data;
        (name + count_size(elements(parts).len(), flexible) + flag(flexible, 1))
            .wrapping_add(sum(parts, partition))
    };
    let txn = flag(
        version >= 3,
        string_size(request.transactional_id.get(), flexible),
    );
    let topics = &request.topic_data;
    let body = (txn + 2 + 4 + count_size(elements(topics).len(), flexible) + flag(flexible, 1))
        .wrapping_add(sum(topics, topic));
    header.wrapping_add(body)
}

/// 4 + the Fetch response body as `FetchResponse.sizeOf` counts it for the quota.
///
/// Topics' partitions are read under 3.0's keys (`partitions`, `recordsSizeInBytes`) or
/// 2.8's (`partitionResponses`, `recordSetSizeInBytes`). A partition whose records are
/// `null` has no size key and counts as an empty record set (same bytes). `nodeEndpoints`
/// is not counted: Kafka sizes the response with an empty node list.
pub fn fetch_response_size(version: i32, response: &Response<'_>) -> i64 {
    let flexible = version >= 12;
    // tag (1) + length (1) + the struct's fields + its own empty tag buffer (1)
    let tagged = |present: bool, size: i64| flag(present, 2 + size + 1);
    let partition = |p: &FetchPartition| {
        let aborted = match (version >= 4, flexible, p.aborted_transactions.value()) {
            (false, _, _) => 0,
            (true, true, None) => 1,
            (true, true, Some(n)) => uvarint_size(n.0 + 1) + 17 * n.0,
            (true, false, n) => 4 + 16 * n.map_or(0, |n| n.0),
        };
        let r = p
            .records_size_in_bytes
            .value()
            .or(p.record_set_size_in_bytes.value())
            .unwrap_or(0);
        let records = if flexible {
            uvarint_size(r.wrapping_add(1)).wrapping_add(r)
        } else {
            4i64.wrapping_add(r)
        };
        let (diverging, leader, snapshot) = (
            p.diverging_epoch.get().is_some(),
            p.current_leader.get().is_some(),
            p.snapshot_id.get().is_some(),
        );
        let tags = tagged(diverging, 12) + tagged(leader, 8) + tagged(snapshot, 12);
        let tag_count = i64::from(diverging) + i64::from(leader) + i64::from(snapshot);
        // partition index, error code, high watermark, last stable offset (v4+), log
        // start offset (v5+), aborted transactions, preferred read replica (v11+)
        let fixed = 4 + 2 + 8 + flag(version >= 4, 8) + flag(version >= 5, 8) + aborted;
        (fixed + flag(version >= 11, 4) + flag(flexible, uvarint_size(tag_count) + tags))
            .wrapping_add(records)
    };
    let topic = |t: &FetchTopic<'_>| {
        let parts = if t.partitions.get().is_some() {
            &t.partitions
        } else {
            &t.partition_responses
        };
        let name = if version >= 13 {
            16
        } else {
            string_size(t.topic.get(), flexible)
        };
        (name + count_size(elements(parts).len(), flexible) + flag(flexible, 1))
            .wrapping_add(sum(parts, partition))
    };
    let topics = &response.responses;
    fetch_frame(version, elements(topics).len(), sum(topics, topic))
}

/// A fetch response's size from its topics' count and size: its length (4 bytes), then
/// the throttle (v1+), error code and session id (v7+), the topics and the tag buffer
/// (v12+).
fn fetch_frame(version: i32, count: usize, topics: i64) -> i64 {
    let flexible = version >= 12;
    let body = (flag(version >= 1, 4)
        + flag(version >= 7, 2 + 4)
        + count_size(count, flexible)
        + flag(flexible, 1))
    .wrapping_add(topics);
    4i64.wrapping_add(body)
}

/// The size Kafka would record for a response to the consumer fetch `request` (version
/// `version`) in which every partition it asks for has no records: the frame
/// [`fetch_response_size`] counts, with each partition's fixed fields, a null
/// `abortedTransactions` (the same size as an empty one) and no tagged field. A throttled
/// fetch's line shows an empty response instead; with the records each partition would
/// have read, [`fetch_response_size_with`] gives what Kafka checked against the quota.
pub fn empty_fetch_response_size(version: i32, request: &Request<'_>) -> i64 {
    let flexible = version >= 12;
    let partition = {
        let aborted = match (version >= 4, flexible) {
            (false, _) => 0,
            (true, true) => 1,
            (true, false) => 4,
        };
        let records = if flexible { 1 } else { 4 };
        let fixed = 4 + 2 + 8 + flag(version >= 4, 8) + flag(version >= 5, 8) + aborted;
        fixed + flag(version >= 11, 4) + flag(flexible, 1) + records
    };
    let topic = |t: &RequestTopic<'_>| {
        let name = if version >= 13 {
            16
        } else {
            string_size(t.topic.get(), flexible)
        };
        let count = elements(&t.partitions).len();
        (name + count_size(count, flexible) + flag(flexible, 1))
            .wrapping_add(partition.wrapping_mul(count as i64))
    };
    let topics = &request.topics;
    fetch_frame(version, elements(topics).len(), sum(topics, topic))
}

/// [`empty_fetch_response_size`]'s `empty` with each partition's `records` bytes added.
pub fn fetch_response_size_with(version: i32, empty: i64, records: &[i64]) -> i64 {
    let flexible = version >= 12;
    records.iter().fold(empty, |size, &r| {
        // a flexible version writes the length as a varint, 1 byte when empty
        let length = if flexible {
            uvarint_size(r.wrapping_add(1)) - 1
        } else {
            0
        };
        size.wrapping_add(r).wrapping_add(length)
    })
}

#[cfg(test)]
mod tests {
    use super::super::json::Line;
    use super::*;

    fn line(text: &str) -> Line<'_> {
        serde_json::from_str(text).unwrap()
    }

    #[test]
    fn uvarints() {
        let sizes: Vec<i64> = [0, 127, 128, 16_383, 16_384, 1 << 21, 1 << 28, -5]
            .iter()
            .map(|&n| uvarint_size(n))
            .collect();
        assert_eq!(sizes, [1, 1, 2, 2, 3, 4, 5, 1]);
    }

    #[test]
    fn produce_by_hand() {
        // v8: header 10 + 3 ("app"); body: txn null (2) + acks 2 + timeout 4 + topics 4
        // + topic "t" (2 + 1 + partitions 4 + partition (4 + 4 + 100))
        let l = line(
            r#"{"request":{"transactionalId":null,"acks":1,"timeoutMs":30000,"topicData":[{"name":"t","partitionData":[{"index":0,"recordsSizeInBytes":100}]}]}}"#,
        );
        let request = l.request.get().unwrap();
        let client = Str("app".into());
        assert_eq!(
            produce_request_size(8, Some(&client), request),
            13 + 2 + 2 + 4 + 4 + 3 + 4 + 108
        );
        // v9 (flexible): header 11 + 3; txn null 1; acks 2; timeout 4; topics uv(2)=1;
        // name uv(2)+1 = 2; partitions 1; partition 4 + uv(101) + 100 + 1 = 106; topic tags 1; body tags 1
        assert_eq!(
            produce_request_size(9, Some(&client), request),
            14 + 1 + 2 + 4 + 1 + 2 + 1 + 106 + 1 + 1
        );
        // v2: no transactional id field
        assert_eq!(
            produce_request_size(2, Some(&client), request),
            13 + 2 + 4 + 4 + 3 + 4 + 108
        );
        // v13: the topic is its 16-byte id
        assert_eq!(
            produce_request_size(13, None, request),
            11 + 1 + 2 + 4 + 1 + 16 + 1 + 106 + 1 + 1
        );
    }

    #[test]
    fn fetch_by_hand_both_key_sets_and_null_records() {
        // v11 with 3.0 names: 4 + throttle 4 + error 2 + session 4 + topics 4 + topic
        // (2 + 1 + 4 + partition (4 + 2 + 8 + 8 + 8 + aborted 4 + replica 4 + 4 + 500))
        let v30 = line(
            r#"{"response":{"throttleTimeMs":0,"errorCode":0,"sessionId":0,"responses":[{"topic":"t","partitions":[{"partitionIndex":0,"errorCode":0,"highWatermark":1,"lastStableOffset":1,"logStartOffset":0,"abortedTransactions":null,"preferredReadReplica":-1,"recordsSizeInBytes":500}]}]}}"#,
        );
        let expected = 4 + 4 + 2 + 4 + 4 + 2 + 1 + 4 + (4 + 2 + 8 + 8 + 8 + 4 + 4 + 4 + 500);
        assert_eq!(
            fetch_response_size(11, v30.response.get().unwrap()),
            expected
        );
        // 2.8 names, the same partition
        let v28 = line(
            r#"{"response":{"throttleTimeMs":0,"errorCode":0,"sessionId":0,"responses":[{"topic":"t","partitionResponses":[{"partition":0,"errorCode":0,"highWatermark":1,"lastStableOffset":1,"logStartOffset":0,"abortedTransactions":null,"preferredReadReplica":-1,"recordSetSizeInBytes":500}]}]}}"#,
        );
        assert_eq!(
            fetch_response_size(11, v28.response.get().unwrap()),
            expected
        );
        // v16, records null and a size-0 partition are the same bytes; nodeEndpoints ignored
        let null = line(
            r#"{"response":{"throttleTimeMs":0,"errorCode":0,"sessionId":0,"responses":[{"topicId":"AAAAAAAAAAAAAAAAAAAAAA","partitions":[{"partitionIndex":0,"errorCode":3,"highWatermark":-1,"lastStableOffset":-1,"logStartOffset":-1,"abortedTransactions":null,"preferredReadReplica":-1,"records":null}]}],"nodeEndpoints":[{"nodeId":1,"host":"h","port":9092,"rack":null}]}}"#,
        );
        let zero = line(
            r#"{"response":{"throttleTimeMs":0,"errorCode":0,"sessionId":0,"responses":[{"topicId":"AAAAAAAAAAAAAAAAAAAAAA","partitions":[{"partitionIndex":0,"errorCode":3,"highWatermark":-1,"lastStableOffset":-1,"logStartOffset":-1,"abortedTransactions":null,"preferredReadReplica":-1,"recordsSizeInBytes":0}]}]}}"#,
        );
        // 4 + 4 + 2 + 4 + uv(2) + topic (16 + uv(2) + partition (4+2+8+8+8 + 1 + 4 + 1 + 0 + tags 1) + 1) + 1
        let v16 = 4 + 4 + 2 + 4 + 1 + (16 + 1 + (4 + 2 + 8 + 8 + 8 + 1 + 4 + 1 + 1) + 1) + 1;
        assert_eq!(fetch_response_size(16, null.response.get().unwrap()), v16);
        assert_eq!(fetch_response_size(16, zero.response.get().unwrap()), v16);
    }

    #[test]
    fn empty_fetches() {
        let empty =
            line(r#"{"response":{"throttleTimeMs":0,"errorCode":0,"sessionId":1,"responses":[]}}"#);
        let r = empty.response.get().unwrap();
        let sizes: Vec<i64> = [0, 1, 7, 12]
            .iter()
            .map(|&v| fetch_response_size(v, r) - 4)
            .collect();
        assert_eq!(sizes, [4, 8, 14, 12]);
        // the spec's 18 B (v7-11) and 16 B (v12+) count the 4-byte prefix
        assert_eq!(fetch_response_size(7, r), 18);
        assert_eq!(fetch_response_size(12, r), 16);
    }
}
