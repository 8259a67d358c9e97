//! Each reason, both fetch key sets, null records, and a row's every field.

use super::*;

const TS: &str = "[2024-06-03 17:04:05,123]";

fn object(key: i32, version: i32, request: &str, response: &str, extra: &str) -> String {
    format!(
        r#"{{"isForwarded":false,"requestHeader":{{"requestApiKey":{key},"requestApiVersion":{version},"correlationId":7,"clientId":"app","requestApiKeyName":"{}"}},"request":{request},"response":{response},"connection":"a","totalTimeMs":3.5,"requestQueueTimeMs":0.1,"localTimeMs":1.2345,"remoteTimeMs":0.0,"throttleTimeMs":0,"responseQueueTimeMs":0.05,"sendTimeMs":0.0025,"securityProtocol":"PLAINTEXT","principal":"User:alice:x","listener":"PLAINTEXT","clientInformation":{{"softwareName":"k","softwareVersion":"1"}}{extra}}}"#,
        match key {
            0 => "PRODUCE",
            1 => "FETCH",
            _ => "API_VERSIONS",
        }
    )
}

fn log_line(json: &str) -> String {
    format!("{TS} DEBUG Completed request:{json} (kafka.request.logger)")
}

fn parse(lines: &[&[u8]]) -> Columns {
    let mut offsets = vec![0i32];
    let mut data = Vec::new();
    for l in lines {
        data.extend_from_slice(l);
        offsets.push(data.len() as i32);
    }
    let out = parse_lines(
        Lines {
            offsets: &offsets,
            data: &data,
            valid: None,
        },
        Options { num_partitions: 3 },
    );
    assert_eq!(out.len(), lines.len());
    out
}

fn reason(line: &str) -> u8 {
    parse(&[line.as_bytes()]).reason[0]
}

const PRODUCE_V8: &str = r#"{"transactionalId":null,"acks":1,"timeoutMs":30000,"topicData":[{"name":"t","partitionData":[{"index":0,"recordsSizeInBytes":100}]}]}"#;
const FETCH_REQUEST: &str = r#"{"replicaId":-1,"maxWaitMs":500,"minBytes":1,"topics":[]}"#;
const FETCH_V11: &str = r#"{"throttleTimeMs":0,"errorCode":0,"sessionId":0,"responses":[{"topic":"t","partitions":[{"partitionIndex":0,"errorCode":0,"highWatermark":1,"lastStableOffset":1,"logStartOffset":0,"abortedTransactions":null,"preferredReadReplica":-1,"recordsSizeInBytes":500}]}]}"#;

#[test]
fn a_produce_row_has_every_field() {
    let out = parse(&[log_line(&object(0, 8, PRODUCE_V8, r#"{"responses":[]}"#, "")).as_bytes()]);
    assert_eq!(out.reason[0], 0);
    assert_eq!(out.example.get(0), None);
    assert_eq!(out.wall_us.get(0), Some(1_717_434_245_123_000));
    assert_eq!(out.before_us[0], 50 + 3); // 0.05 ms + 0.0025 ms rounded half up
    assert_eq!(out.user.get(0), Some("alice:x"));
    assert_eq!(out.client.get(0), Some("app"));
    assert_eq!(out.api.get(0), Some("produce"));
    assert_eq!(out.bytes[0], 13 + 2 + 2 + 4 + 4 + 3 + 4 + 108);
    // handler time, then the network threads': the send time (3 µs) and the reading of
    // the request (1 µs, then 0.3 ns for each of its 140 bytes)
    assert_eq!(out.thread_ns.get(0), Some(1_235_000 + 3_000 + 1_000 + 42));
    assert_eq!(out.acks.get(0), Some(1));
    assert_eq!(out.api_version.get(0), Some(8));
    assert_eq!(out.correlation_id.get(0), Some(7));
    assert_eq!(out.strict.get(0), None);
    assert!(!out.topics_valid[0]);
}

#[test]
fn acks_zero_has_no_thread_time() {
    let request = PRODUCE_V8.replace(r#""acks":1"#, r#""acks":0"#);
    let out = parse(&[log_line(&object(0, 8, &request, "\"\"", "")).as_bytes()]);
    assert_eq!(
        (out.reason[0], out.acks.get(0), out.thread_ns.get(0)),
        (0, Some(0), None)
    );
}

#[test]
fn fetch_rows_both_key_sets_and_throttled() {
    let v28 = FETCH_V11
        .replace("\"partitions\"", "\"partitionResponses\"")
        .replace("partitionIndex", "partition")
        .replace("recordsSizeInBytes", "recordSetSizeInBytes");
    let throttled = object(1, 11, FETCH_REQUEST, FETCH_V11, "").replace(
        r#""throttleTimeMs":0,"responseQueue"#,
        r#""throttleTimeMs":5,"responseQueue"#,
    );
    let out = parse(&[
        log_line(&object(1, 11, FETCH_REQUEST, FETCH_V11, "")).as_bytes(),
        log_line(&object(1, 11, FETCH_REQUEST, &v28, "")).as_bytes(),
        log_line(&throttled).as_bytes(),
    ]);
    let expected = 4 + 4 + 2 + 4 + 4 + 2 + 1 + 4 + (4 + 2 + 8 + 8 + 8 + 4 + 4 + 4 + 500);
    assert_eq!(out.reason, [0, 0, 0]);
    assert_eq!(out.bytes, [expected, expected, 0]);
    assert_eq!(out.kafka_throttle, [0, 0, 5]);
    assert_eq!(out.acks.get(0), None);
    // one connection, one position: the throttled fetch can take a later one's size
    let keys: Vec<_> = (0..3)
        .map(|i| (out.fetch_connection.get(i), out.fetch_position.get(i)))
        .collect();
    assert!(keys
        .iter()
        .all(|k| *k == keys[0] && k.0.is_some() && k.1.is_some()));
}

#[test]
fn request_time_adds_the_network_threads_estimate() {
    // a long send: a large fetch's is bounded by the bytes written, another request's
    // counts whole, as a short one does
    let slow = |line: String| line.replace(r#""sendTimeMs":0.0025"#, r#""sendTimeMs":2.5"#);
    let large = FETCH_V11.replace(
        r#""recordsSizeInBytes":500"#,
        r#""recordsSizeInBytes":500000"#,
    );
    let out = parse(&[
        log_line(&slow(object(1, 11, FETCH_REQUEST, &large, ""))).as_bytes(),
        log_line(&slow(object(18, 3, "{}", "{}", ""))).as_bytes(),
        log_line(&object(18, 3, "{}", "{}", "")).as_bytes(),
    ]);
    let read = request_time::READ_BASE_NS;
    let written = request_time::WRITE_BASE_NS
        + (request_time::WRITE_NS_PER_BYTE * out.bytes[0] as f64) as i64;
    assert_eq!(out.thread_ns.get(0), Some(1_235_000 + written + read));
    // a small response's slow send counts up to the base
    assert_eq!(
        out.thread_ns.get(1),
        Some(1_235_000 + request_time::WRITE_BASE_NS + read)
    );
    assert_eq!(out.thread_ns.get(2), Some(1_235_000 + 3_000 + read));
}

#[test]
fn only_consumer_fetch_rows_have_fetch_keys() {
    let out = parse(&[
        log_line(&object(0, 8, PRODUCE_V8, r#"{"responses":[]}"#, "")).as_bytes(),
        log_line(&object(18, 3, "{}", "{}", "")).as_bytes(),
        b"not a line",
        log_line(&object(1, 11, FETCH_REQUEST, FETCH_V11, "")).as_bytes(),
    ]);
    let fetch = |i| (out.fetch_connection.get(i), out.fetch_position.get(i));
    assert_eq!([fetch(0), fetch(1), fetch(2)], [(None, None); 3]);
    assert_eq!(fetch(3).0, Some(fetch::connection_key("a")));
    assert!(fetch(3).1.is_some());
}

#[test]
fn each_reason() {
    let good = object(18, 3, "{}", "{}", "");
    assert_eq!(reason(&log_line(&good)), 0);
    assert_eq!(parse(&[b"[2024-06-03 \xff"]).reason[0], NOT_UTF8);
    assert_eq!(
        reason("[2024-06-03 17:04:05,123] TRACE Sending FETCH response (kafka.network.RequestChannel$)"),
        TRACE_LINE
    );
    assert_eq!(
        reason("[2024-06-03 17:04:05,123] INFO started (kafka.server.KafkaServer)"),
        OTHER_LINE
    );
    assert_eq!(reason(""), OTHER_LINE);
    assert_eq!(
        reason("[2024-06-03 17:04:05,123] DEBUG Completed request:RequestHeader(apiKey=PRODUCE) (kafka.request.logger)"),
        OLD_FORMAT
    );
    let line = log_line(&good);
    assert_eq!(reason(&line[..line.len() / 2]), CORRUPT);
    assert_eq!(
        reason(&log_line(
            &good.replace(r#""principal":"User:alice:x","#, "")
        )),
        CORRUPT
    );
    // a required field of the wrong type reads as null
    assert_eq!(
        reason(&log_line(
            &good.replace(r#""sendTimeMs":0.0025"#, r#""sendTimeMs":"x""#)
        )),
        CORRUPT
    );
    let deep = format!("{}1{}", "[".repeat(100_000), "]".repeat(100_000));
    assert_eq!(
        reason(&log_line(
            &good.replace(r#""connection":"a""#, &format!(r#""deep":{deep}"#))
        )),
        CORRUPT
    );
    assert_eq!(
        reason(&log_line(&good).replace("2024-06-03", "2024-02-30")),
        BAD_TIME
    );
    assert_eq!(
        reason(&log_line(
            &good.replace(r#""isForwarded":false"#, r#""isForwarded":true"#)
        )),
        FORWARDED
    );
    assert_eq!(reason(&log_line(&object(4, 5, "{}", "{}", ""))), EXEMPT);
    let follower = FETCH_REQUEST.replace("-1", "2");
    assert_eq!(
        reason(&log_line(&object(1, 11, &follower, FETCH_V11, ""))),
        FOLLOWER
    );
    let state = r#"{"replicaState":{"replicaId":1,"replicaEpoch":3},"topics":[]}"#;
    assert_eq!(
        reason(&log_line(&object(1, 15, state, FETCH_V11, ""))),
        FOLLOWER
    );
    assert_eq!(
        reason(&log_line(&object(1, 11, "\"\"", FETCH_V11, ""))),
        NO_BODY
    );
    assert_eq!(
        reason(&log_line(&object(0, 8, "null", "null", ""))),
        NO_BODY
    );
    assert_eq!(
        reason(&log_line(&object(1, 19, FETCH_REQUEST, FETCH_V11, ""))),
        UNKNOWN_VERSION
    );
    assert_eq!(
        reason(&log_line(&object(0, 14, PRODUCE_V8, "{}", ""))),
        UNKNOWN_VERSION
    );
    let out = parse(&[b"x"]);
    assert_eq!(out.example.get(0), Some("x"));
}

#[test]
fn examples_are_300_characters_of_lossy_text() {
    let long = "é".repeat(400);
    let out = parse(&[long.as_bytes(), b"a\xffb"]);
    assert_eq!(out.example.get(0).unwrap().chars().count(), EXAMPLE_CHARS);
    assert_eq!(out.example.get(1), Some("a\u{fffd}b"));
}

#[test]
fn mutation_topics_and_strict_flags() {
    let create = r#"{"topics":[{"name":"a","numPartitions":-1,"assignments":[{"partitionIndex":0,"brokerIds":[1]},{"partitionIndex":1,"brokerIds":[2]}]},{"name":"b","numPartitions":4,"assignments":[]},{"name":"c","numPartitions":-1,"assignments":[]}]}"#;
    let grow = r#"{"topics":[{"name":"a","count":5,"assignments":null}]}"#;
    let delete_old = r#"{"topicNames":["a","b"]}"#;
    let delete_new = r#"{"topics":[{"name":"c","topicId":"x"}]}"#;
    let metadata = r#"{"topics":[{"errorCode":0,"name":"a","partitions":[{},{}]},{"errorCode":3,"name":"z","partitions":[]}]}"#;
    let with_name = |key: i32, version: i32, request: &str, response: &str| {
        log_line(&object(key, version, request, response, ""))
    };
    let out = parse(&[
        with_name(19, 6, create, r#"{"throttleTimeMs":20}"#).as_bytes(),
        with_name(37, 2, grow, "{}").as_bytes(),
        with_name(20, 4, delete_old, "{}").as_bytes(),
        with_name(20, 6, delete_new, "{}").as_bytes(),
        with_name(3, 12, "{}", metadata).as_bytes(),
    ]);
    assert_eq!(out.reason, [0; 5]);
    assert_eq!(out.kafka_throttle[0], 20);
    assert_eq!(out.strict.get(0), Some(true));
    assert_eq!(out.strict.get(1), Some(false));
    assert_eq!(out.strict.get(2), Some(false));
    assert_eq!(out.strict.get(3), Some(true));
    assert_eq!(out.strict.get(4), None);
    assert_eq!(out.topic_offsets, [0, 3, 4, 6, 7, 8]);
    assert_eq!(out.topic_op, [0, 0, 0, 1, 2, 2, 2, 3]);
    let names: Vec<_> = (0..8).map(|i| out.topic_name.get(i).unwrap()).collect();
    assert_eq!(names, ["a", "b", "c", "a", "a", "b", "c", "a"]);
    let counts: Vec<_> = (0..8).map(|i| out.topic_count.get(i)).collect();
    assert_eq!(
        counts,
        [
            Some(2),
            Some(4),
            Some(3),
            Some(5),
            None,
            None,
            None,
            Some(2)
        ]
    );
}

#[test]
fn null_client_ids_and_unnamed_apis() {
    let json = object(18, 3, "{}", "{}", "")
        .replace(r#""clientId":"app""#, r#""clientId":null"#)
        .replace(r#","requestApiKeyName":"API_VERSIONS""#, "");
    let out = parse(&[log_line(&json).as_bytes()]);
    assert_eq!(
        (out.reason[0], out.client.get(0), out.api.get(0)),
        (0, Some(""), Some("api_18"))
    );
}

#[test]
fn null_and_malformed_offsets_read_as_empty_lines() {
    let data = b"abc";
    let out = parse_lines(
        Lines {
            offsets: &[0, 3, 1, 9],
            data,
            valid: Some((&[0b0000_0110], 0)),
        },
        Options::default(),
    );
    assert_eq!(out.reason, [OTHER_LINE; 3]);
}

#[test]
fn a_controllers_line_of_a_forwarded_mutation_keeps_its_fields() {
    let create = r#"{"topics":[{"name":"t","numPartitions":3,"replicationFactor":1,"assignments":[],"configs":[]}],"timeoutMs":30000,"validateOnly":false}"#;
    let answered = r#"{"throttleTimeMs":250,"topics":[]}"#;
    let forwarded = object(19, 7, create, answered, "")
        .replace(r#""isForwarded":false"#, r#""isForwarded":true"#)
        .replace(r#""remoteTimeMs":0.0"#, r#""remoteTimeMs":27.5"#);
    let other =
        object(18, 3, "{}", "{}", "").replace(r#""isForwarded":false"#, r#""isForwarded":true"#);
    let out = parse(&[log_line(&forwarded).as_bytes(), log_line(&other).as_bytes()]);
    assert_eq!(out.reason, [FORWARDED, FORWARDED]);
    // queue 0.05 + send 0.0025 + remote 27.5 ms before the end
    assert_eq!(out.before_us, [50 + 3 + 27_500, 0]);
    assert_eq!(out.client.get(0), Some("app"));
    assert_eq!(out.kafka_throttle, [250, 0]);
    assert_eq!(out.correlation_id.get(0), Some(7));
    assert_eq!(out.strict.get(0), Some(true));
    assert_eq!(out.strict.get(1), None);
    // skipped lines list no topics (a controller's creates are the broker's row's)
    assert_eq!(out.topics_valid, [false, false]);
}

/// A served v16 fetch and its request, as Kafka 4 logs them for librdkafka.
const FETCH_V16_REQUEST: &str = r#"{"maxWaitMs":100,"minBytes":1,"maxBytes":1048576,"isolationLevel":1,"sessionId":0,"sessionEpoch":-1,"topics":[{"topicId":"KPo00N9gS6SX0X7bwFKFLQ","partitions":[{"partition":0,"currentLeaderEpoch":0,"fetchOffset":244,"lastFetchedEpoch":-1,"logStartOffset":-1,"partitionMaxBytes":1048576},{"partition":1,"currentLeaderEpoch":0,"fetchOffset":9,"lastFetchedEpoch":-1,"logStartOffset":-1,"partitionMaxBytes":1048576}]}],"forgottenTopicsData":[],"rackId":""}"#;
const FETCH_V16_SERVED: &str = r#"{"throttleTimeMs":0,"errorCode":0,"sessionId":0,"responses":[{"topicId":"KPo00N9gS6SX0X7bwFKFLQ","partitions":[{"partitionIndex":0,"errorCode":0,"highWatermark":1024,"lastStableOffset":1024,"logStartOffset":0,"abortedTransactions":[],"preferredReadReplica":-1,"recordsSizeInBytes":1048576},{"partitionIndex":1,"errorCode":0,"highWatermark":9,"lastStableOffset":9,"logStartOffset":0,"abortedTransactions":[],"preferredReadReplica":-1,"recordsSizeInBytes":0}]}]}"#;

fn throttled(line: &str) -> String {
    line.replace(
        r#""throttleTimeMs":0,"responseQueue"#,
        r#""throttleTimeMs":250,"responseQueue"#,
    )
}

#[test]
fn a_throttled_full_fetch_lists_what_it_asked_for() {
    let empty = r#"{"throttleTimeMs":250,"errorCode":0,"sessionId":0,"responses":[]}"#;
    let line = throttled(&log_line(&object(1, 16, FETCH_V16_REQUEST, empty, "")));
    let out = parse(&[line.as_bytes()]);
    assert_eq!(out.reason[0], 0);
    assert_eq!(out.kafka_throttle[0], 250);
    assert_eq!(out.read_offsets, [0, 2]);
    assert_eq!(out.read_kind, [ReadKind::Asked as u8; 2]);
    assert_eq!(out.read_topic.get(0), Some("KPo00N9gS6SX0X7bwFKFLQ"));
    assert_eq!(out.read_partition, [0, 1]);
    assert_eq!(out.read_offset, [244, 9]);
    assert_eq!(out.read_bytes, [1_048_576, 1_048_576]);
    assert_eq!(out.fetch_max_bytes.get(0), Some(1_048_576));
    // the served response of the same request is the empty one plus its records
    let text = format!(r#"{{"request":{FETCH_V16_REQUEST},"response":{FETCH_V16_SERVED}}}"#);
    let served: json::Line<'_> = serde_json::from_str(&text).unwrap();
    let empty_size = out.fetch_empty.get(0).unwrap();
    assert_eq!(
        empty_size,
        sizes::empty_fetch_response_size(16, served.request.get().unwrap())
    );
    assert_eq!(
        fetch_response_size_with(16, empty_size, &[1_048_576, 0]),
        fetch_response_size(16, served.response.get().unwrap())
    );
}

#[test]
fn served_and_incremental_fetches_list_nothing() {
    let served = log_line(&object(1, 16, FETCH_V16_REQUEST, FETCH_V16_SERVED, ""));
    let incremental = throttled(&log_line(&object(
        1,
        16,
        &FETCH_V16_REQUEST.replace(r#""sessionEpoch":-1"#, r#""sessionEpoch":4"#),
        r#"{"throttleTimeMs":250,"responses":[]}"#,
        "",
    )));
    let out = parse(&[served.as_bytes(), incremental.as_bytes()]);
    assert_eq!(out.read_offsets, [0, 0, 0]);
    assert_eq!(
        (out.fetch_empty.get(0), out.fetch_empty.get(1)),
        (None, None)
    );
}

#[test]
fn a_produce_lists_its_batches_where_they_went() {
    let request = r#"{"transactionalId":null,"acks":1,"timeoutMs":30000,"topicData":[{"name":"t","partitionData":[{"index":0,"recordsSizeInBytes":100},{"index":2,"recordsSizeInBytes":70}]},{"name":"u","partitionData":[{"index":1,"recordsSizeInBytes":9}]}]}"#;
    // partition 2 failed, and u's response comes first
    let response = r#"{"responses":[{"name":"u","partitionResponses":[{"index":1,"errorCode":0,"baseOffset":40}]},{"name":"t","partitionResponses":[{"index":0,"errorCode":0,"baseOffset":12,"logAppendTimeMs":-1},{"index":2,"errorCode":6,"baseOffset":-1}]}],"throttleTimeMs":0}"#;
    let out = parse(&[log_line(&object(0, 10, request, response, "")).as_bytes()]);
    assert_eq!(out.read_offsets, [0, 2]);
    assert_eq!(out.read_kind, [ReadKind::Produced as u8; 2]);
    assert_eq!(
        (out.read_topic.get(0), out.read_topic.get(1)),
        (Some("u"), Some("t"))
    );
    assert_eq!(out.read_partition, [1, 0]);
    assert_eq!(out.read_offset, [40, 12]);
    assert_eq!(out.read_bytes, [9, 100]);
    assert_eq!(out.fetch_empty.get(0), None);
    // acks=0: no response, no offsets
    let blind = log_line(&object(0, 10, request, r#""""#, ""));
    assert_eq!(parse(&[blind.as_bytes()]).read_offsets, [0, 0]);
}

#[test]
fn metadata_topics_carry_their_ids() {
    let response = r#"{"throttleTimeMs":0,"brokers":[],"clusterId":"c","controllerId":1,"topics":[{"errorCode":0,"name":"backlog","topicId":"KPo00N9gS6SX0X7bwFKFLQ","isInternal":false,"partitions":[{"partitionIndex":0}]},{"errorCode":0,"name":"old","topicId":"AAAAAAAAAAAAAAAAAAAAAA","isInternal":false,"partitions":[]}]}"#;
    let line = log_line(&object(3, 12, r#"{"topics":null}"#, response, ""))
        .replace("API_VERSIONS", "METADATA");
    let out = parse(&[line.as_bytes()]);
    assert_eq!(out.reason[0], 0);
    assert_eq!(out.topic_id.get(0), Some("KPo00N9gS6SX0X7bwFKFLQ"));
    assert_eq!(out.topic_id.get(1), None);
}

#[test]
fn kafka_reads_within_the_fetch_limits() {
    let p = |max_bytes, available, first_batch| PartitionRead {
        max_bytes,
        available,
        first_batch,
    };
    // each partition up to its own limit and what is there
    assert_eq!(
        read_sizes(16, 1000, &[p(300, 500, 100), p(300, 50, 50)]),
        [300, 50]
    );
    // the response's limit runs out
    assert_eq!(
        read_sizes(16, 400, &[p(300, 500, 100), p(300, 500, 100), p(300, 9, 9)]),
        [300, 100, 0]
    );
    // the first batch is whole even over both limits, once (KIP-74) ...
    assert_eq!(
        read_sizes(16, 400, &[p(0, 0, 0), p(300, 900, 700), p(300, 900, 700)]),
        [0, 700, 0]
    );
    // ... but not up to version 2, whose limits are hard
    assert_eq!(read_sizes(2, 400, &[p(300, 900, 700)]), [300]);
    let empty = 4 + 4 + 2 + 4 + 1 + 1 + 16 + 1 + 1 + 2 * 47;
    assert_eq!(
        throttled_fetch_size(16, empty, 1000, &[p(300, 500, 100), p(300, 0, 0)]),
        empty + 300 + 1
    );
}
