//! Unit tests of the address rewriting: each response kind that names brokers, in every
//! version that carries them, and the frames passed on as they are.

use std::collections::BTreeMap;
use std::fmt::Debug;

use super::*;
use crate::header::parse_response_header;
use kafka_protocol::messages::{
    describe_cluster_response, fetch_response, find_coordinator_response, metadata_response,
    produce_response, share_acknowledge_response, share_fetch_response, BrokerId, ResponseHeader,
    TopicName,
};
use uuid::Uuid;

/// Where a broker is: its address for a node id.
type At = fn(i32) -> (String, i32);

/// Where the cluster's broker `id` listens.
fn inside(id: i32) -> (String, i32) {
    (format!("b{id}.cluster.internal"), 9092 + id)
}

/// Where the gateway tells its clients broker `id` is.
fn outside(id: i32) -> (String, i32) {
    ("gw.example.com".to_string(), 19000 + id)
}

/// The gateway's map, from `inside` to `outside`; it must see only real brokers.
fn gateway(b: &BrokerAddress) -> Option<(String, i32)> {
    assert!(b.node_id >= 0 && !b.host.is_empty(), "passed {b:?}");
    assert_eq!((b.host.clone(), b.port), inside(b.node_id), "passed {b:?}");
    Some(outside(b.node_id))
}

/// The brokers a response names: three real ones, one without a node id and one
/// without a host (neither ever mapped, so the same in every build).
fn cluster(at: At) -> Vec<(i32, String, i32, Option<String>)> {
    let (h1, p1) = at(1);
    let (h2, p2) = at(2);
    let (h3, p3) = at(3);
    vec![
        (1, h1, p1, Some("rack-a".to_string())),
        (2, h2, p2, Some("rack-b".to_string())),
        (3, h3, p3, None),
        (-1, "ghost.cluster.internal".to_string(), 9999, None),
        (5, String::new(), 0, None),
    ]
}

/// A tagged field the codec does not know, where `key`'s `version` has tagged fields.
fn unknown_tags(key: ApiKey, version: i16) -> BTreeMap<i32, Bytes> {
    let mut tags = BTreeMap::new();
    if key.response_header_version(version) >= 1 {
        tags.insert(77, Bytes::from_static(b"unknown to the codec"));
    }
    tags
}

fn str(s: &str) -> StrBytes {
    StrBytes::from_string(s.to_string())
}

/// Record batch bytes as a broker sends them: opaque, and here 64 KiB.
fn records(seed: u8) -> Bytes {
    (0..65536u32)
        .map(|i| (i as u8).wrapping_mul(31).wrapping_add(seed))
        .collect::<Vec<u8>>()
        .into()
}

/// The KIP-951 `node_endpoints` of `cluster(at)`, of the struct of each message.
macro_rules! endpoints {
    ($ty:ty, $key:expr, $version:expr, $at:expr) => {{
        let mut list: Vec<$ty> = cluster($at)
            .into_iter()
            .map(|(id, host, port, rack)| {
                let mut e = <$ty>::default();
                e.node_id = BrokerId(id);
                e.host = StrBytes::from_string(host);
                e.port = port;
                e.rack = rack.map(StrBytes::from_string);
                e
            })
            .collect();
        list[0].unknown_tagged_fields = unknown_tags($key, $version);
        list
    }};
}

/// `message` as a response frame of `key` v`version` (header then body, with a tagged
/// field in a flexible header), and where its body starts.
fn response<M: Encodable>(key: ApiKey, version: i16, message: &M) -> (Bytes, usize) {
    let header_version = key.response_header_version(version);
    let mut head = ResponseHeader::default();
    head.correlation_id = 4242;
    if header_version >= 1 {
        head.unknown_tagged_fields
            .insert(3, Bytes::from_static(b"header tag"));
    }
    let mut buf = BytesMut::new();
    head.encode(&mut buf, header_version).unwrap();
    let body_offset = buf.len();
    message.encode(&mut buf, version).unwrap();
    let frame = buf.freeze();
    let parsed = parse_response_header(&frame, header_version).unwrap();
    assert_eq!(parsed.body_offset, body_offset);
    (frame, body_offset)
}

/// One version's rewrite: the brokers passed to the map and the frame it gave.
struct Rewrite {
    version: i16,
    passed: Vec<BrokerAddress>,
    out: Bytes,
}

/// `with_addresses` with the gateway's map on `build(version, inside)` of `key` in every
/// version the codec reads. A version that names brokers comes back as
/// `build(version, outside)` encoded there (so the same message with only hosts and
/// ports changed), after the header bytes as they were; one that does not is
/// `Ok(None)` without the map called. Either way a map that changes nothing gives
/// `Ok(None)`, and a body cut short or too long is an error.
fn check<M>(key: ApiKey, build: fn(i16, At) -> M) -> Vec<Rewrite>
where
    M: Encodable + Decodable + PartialEq + Debug,
{
    let range = key.valid_versions();
    let mut rewrites = Vec::new();
    for version in range.min..=range.max {
        let (frame, body_offset) = response(key, version, &build(version, inside));
        let mut passed = Vec::new();
        let result = with_addresses(&frame, body_offset, key as i16, version, &mut |b| {
            passed.push(b.clone());
            gateway(b)
        });
        for unchanged in [
            with_addresses(&frame, body_offset, key as i16, version, &mut |_| None),
            with_addresses(&frame, body_offset, key as i16, version, &mut |b| {
                Some((b.host.clone(), b.port))
            }),
        ] {
            assert_eq!(unchanged, Ok(None), "{key:?} v{version}");
        }
        if !names_brokers(key as i16, version) {
            assert_eq!(result, Ok(None), "{key:?} v{version}");
            assert!(passed.is_empty(), "{key:?} v{version}: {passed:?}");
            continue;
        }
        let out = result
            .unwrap()
            .unwrap_or_else(|| panic!("{key:?} v{version}: not rewritten"))
            .freeze();
        assert_eq!(
            out[..body_offset],
            frame[..body_offset],
            "{key:?} v{version}"
        );
        let (want, _) = response(key, version, &build(version, outside));
        let got = M::decode(&mut out.slice(body_offset..), version).unwrap();
        let expected = M::decode(&mut want.slice(body_offset..), version).unwrap();
        assert_eq!(got, expected, "{key:?} v{version}");
        assert_eq!(out, want, "{key:?} v{version}");

        let unreadable = Err(HeaderError::Unreadable {
            message: match key {
                ApiKey::Metadata => "Metadata response",
                ApiKey::FindCoordinator => "FindCoordinator response",
                ApiKey::DescribeCluster => "DescribeCluster response",
                ApiKey::Produce => "Produce response",
                ApiKey::Fetch => "Fetch response",
                ApiKey::ShareFetch => "ShareFetch response",
                ApiKey::ShareAcknowledge => "ShareAcknowledge response",
                _ => unreachable!(),
            },
            version,
        });
        let mut longer = BytesMut::from(&frame[..]);
        longer.extend_from_slice(&[0]);
        for broken in [
            frame.slice(..frame.len() - 1),
            frame.slice(..body_offset),
            longer.freeze(),
        ] {
            let got = with_addresses(&broken, body_offset, key as i16, version, &mut gateway);
            assert_eq!(got, unreadable, "{key:?} v{version}");
        }
        rewrites.push(Rewrite {
            version,
            passed,
            out,
        });
    }
    rewrites
}

/// A broker as the map saw it: its node id and rack.
type Seen<'a> = (i32, Option<&'a str>);

/// The brokers the map saw in each version rewritten.
fn seen(rewrites: &[Rewrite]) -> Vec<(i16, Vec<Seen<'_>>)> {
    rewrites
        .iter()
        .map(|r| {
            let passed = r.passed.iter();
            let ids = passed.map(|b| (b.node_id, b.rack.as_deref())).collect();
            (r.version, ids)
        })
        .collect()
}

fn metadata(version: i16, at: At) -> MetadataResponse {
    let key = ApiKey::Metadata;
    let mut m = MetadataResponse::default();
    m.throttle_time_ms = 5;
    m.cluster_id = Some(str("cluster-1"));
    m.controller_id = BrokerId(2);
    m.brokers = cluster(at)
        .into_iter()
        .map(|(id, host, port, rack)| {
            let mut b = metadata_response::MetadataResponseBroker::default();
            b.node_id = BrokerId(id);
            b.host = StrBytes::from_string(host);
            b.port = port;
            b.rack = rack.map(StrBytes::from_string);
            b
        })
        .collect();
    m.brokers[1].unknown_tagged_fields = unknown_tags(key, version);
    let mut partition = metadata_response::MetadataResponsePartition::default();
    partition.partition_index = 3;
    partition.leader_id = BrokerId(2);
    partition.replica_nodes = vec![BrokerId(1), BrokerId(2)];
    partition.isr_nodes = vec![BrokerId(2)];
    let mut topic = metadata_response::MetadataResponseTopic::default();
    topic.name = Some(TopicName(str("orders")));
    topic.topic_id = Uuid::from_u128(0x1234);
    topic.partitions = vec![partition];
    if (8..=10).contains(&version) {
        m.cluster_authorized_operations = 0x0f;
    }
    if version >= 8 {
        topic.topic_authorized_operations = 0x0a;
    }
    m.topics = vec![topic];
    m.unknown_tagged_fields = unknown_tags(key, version);
    m
}

#[test]
fn metadata_brokers_are_rewritten_in_every_version() {
    let rewrites = check(ApiKey::Metadata, metadata);
    let want: Vec<_> = (0..=13)
        .map(|v| {
            let rack = |r| (v >= 1).then_some(r); // racks from v1
            (v, vec![(1, rack("rack-a")), (2, rack("rack-b")), (3, None)])
        })
        .collect();
    assert_eq!(seen(&rewrites), want);
    // the codec's unknown tagged fields are written back
    let last = rewrites.last().unwrap();
    let head = parse_response_header(&last.out, 1).unwrap();
    let got = MetadataResponse::decode(&mut last.out.slice(head.body_offset..), 13).unwrap();
    assert!(got.unknown_tagged_fields.contains_key(&77));
    assert!(got.brokers[1].unknown_tagged_fields.contains_key(&77));
    assert_eq!(got.brokers[3].host.as_str(), "ghost.cluster.internal");
    assert_eq!(got.brokers[4].host.as_str(), "");
}

fn coordinator(version: i16, at: At) -> FindCoordinatorResponse {
    let key = ApiKey::FindCoordinator;
    let mut m = FindCoordinatorResponse::default();
    m.throttle_time_ms = 9;
    m.unknown_tagged_fields = unknown_tags(key, version);
    if version < FIND_COORDINATOR_BATCHED {
        m.error_message = None;
        m.node_id = BrokerId(1);
        (m.host, m.port) = {
            let (host, port) = at(1);
            (StrBytes::from_string(host), port)
        };
        return m;
    }
    let entry = |key: &str, id: i32, (host, port): (String, i32), error: i16| {
        let mut c = find_coordinator_response::Coordinator::default();
        c.key = str(key);
        c.node_id = BrokerId(id);
        c.host = StrBytes::from_string(host);
        c.port = port;
        c.error_code = error;
        c.error_message = (error != 0).then(|| str("not available"));
        c
    };
    m.coordinators = vec![
        entry("group-a", 1, at(1), 0),
        entry("txn-b", 2, at(2), 0),
        // COORDINATOR_NOT_AVAILABLE, as Kafka answers it
        entry("group-c", -1, (String::new(), -1), 15),
        // an error with an address in it: still no coordinator
        entry("group-d", 3, ("stale.cluster.internal".into(), 9095), 15),
    ];
    m.coordinators[1].unknown_tagged_fields = unknown_tags(key, version);
    m
}

#[test]
fn coordinators_are_rewritten_in_every_version() {
    let rewrites = check(ApiKey::FindCoordinator, coordinator);
    let want: Vec<_> = (0..=6)
        .map(|v| match v {
            0..=3 => (v, vec![(1, None)]),
            _ => (v, vec![(1, None), (2, None)]),
        })
        .collect();
    assert_eq!(seen(&rewrites), want);
}

#[test]
fn a_find_coordinator_error_is_passed_as_it_is() {
    let key = ApiKey::FindCoordinator;
    for version in 0..=6 {
        let mut m = FindCoordinatorResponse::default();
        if version < FIND_COORDINATOR_BATCHED {
            // how Kafka answers with no coordinator: node -1, no host
            m.error_code = 15;
            m.node_id = BrokerId(-1);
            m.port = -1;
        } else {
            let mut c = find_coordinator_response::Coordinator::default();
            c.key = str("group-c");
            c.node_id = BrokerId(-1);
            c.port = -1;
            c.error_code = 15;
            m.coordinators = vec![c];
        }
        let (frame, body_offset) = response(key, version, &m);
        let got = with_addresses(&frame, body_offset, key as i16, version, &mut |b| {
            panic!("passed {b:?}")
        });
        assert_eq!(got, Ok(None), "v{version}");
    }
    // an error with a host still names no coordinator
    let mut m = FindCoordinatorResponse::default();
    m.error_code = 15;
    m.node_id = BrokerId(1);
    m.host = str("b1.cluster.internal");
    m.port = 9093;
    let (frame, body_offset) = response(key, 3, &m);
    let got = with_addresses(&frame, body_offset, key as i16, 3, &mut |b| {
        panic!("passed {b:?}")
    });
    assert_eq!(got, Ok(None));
}

fn describe_cluster(version: i16, at: At) -> DescribeClusterResponse {
    let key = ApiKey::DescribeCluster;
    let mut m = DescribeClusterResponse::default();
    m.throttle_time_ms = 1;
    m.cluster_id = str("cluster-1");
    m.controller_id = BrokerId(1);
    m.brokers = cluster(at)
        .into_iter()
        .map(|(id, host, port, rack)| {
            let mut b = describe_cluster_response::DescribeClusterBroker::default();
            b.broker_id = BrokerId(id);
            b.host = StrBytes::from_string(host);
            b.port = port;
            b.rack = rack.map(StrBytes::from_string);
            b.is_fenced = version >= 2 && id == 3;
            b
        })
        .collect();
    m.brokers[2].unknown_tagged_fields = unknown_tags(key, version);
    m.unknown_tagged_fields = unknown_tags(key, version);
    m
}

#[test]
fn described_brokers_are_rewritten_in_every_version() {
    let rewrites = check(ApiKey::DescribeCluster, describe_cluster);
    let brokers = vec![(1, Some("rack-a")), (2, Some("rack-b")), (3, None)];
    let want: Vec<_> = (0..=2).map(|v| (v, brokers.clone())).collect();
    assert_eq!(seen(&rewrites), want);
}

fn produce(version: i16, at: At) -> ProduceResponse {
    let key = ApiKey::Produce;
    let mut partition = produce_response::PartitionProduceResponse::default();
    partition.index = 0;
    partition.error_code = 6; // NOT_LEADER_OR_FOLLOWER: why the leader hints are there
    partition.base_offset = -1;
    if version >= 10 {
        partition.current_leader.leader_id = BrokerId(2);
        partition.current_leader.leader_epoch = 7;
    }
    let mut topic = produce_response::TopicProduceResponse::default();
    topic.name = TopicName(str("orders"));
    topic.topic_id = Uuid::from_u128(0x1234);
    topic.partition_responses = vec![partition];
    let mut m = ProduceResponse::default();
    m.responses = vec![topic];
    m.throttle_time_ms = 2;
    m.node_endpoints = endpoints!(produce_response::NodeEndpoint, key, version, at);
    m.unknown_tagged_fields = unknown_tags(key, version);
    m
}

#[test]
fn produce_leader_hints_are_rewritten_from_v10() {
    let rewrites = check(ApiKey::Produce, produce);
    let endpoints = vec![(1, Some("rack-a")), (2, Some("rack-b")), (3, None)];
    let want: Vec<_> = (10..=13).map(|v| (v, endpoints.clone())).collect();
    assert_eq!(seen(&rewrites), want);
}

fn fetch(version: i16, at: At) -> FetchResponse {
    let key = ApiKey::Fetch;
    let partitions = (0..3)
        .map(|i| {
            let mut p = fetch_response::PartitionData::default();
            p.partition_index = i;
            p.high_watermark = 1000;
            p.last_stable_offset = 1000;
            p.records = Some(records(i as u8));
            if version >= 12 {
                p.current_leader.leader_id = BrokerId(2);
                p.current_leader.leader_epoch = 7;
            }
            p
        })
        .collect();
    let mut topic = fetch_response::FetchableTopicResponse::default();
    topic.topic = TopicName(str("orders"));
    topic.topic_id = Uuid::from_u128(0x1234);
    topic.partitions = partitions;
    let mut m = FetchResponse::default();
    m.throttle_time_ms = 3;
    if version >= 7 {
        m.session_id = 99;
    }
    m.responses = vec![topic];
    m.node_endpoints = endpoints!(fetch_response::NodeEndpoint, key, version, at);
    m.unknown_tagged_fields = unknown_tags(key, version);
    m
}

#[test]
fn fetch_leader_hints_are_rewritten_from_v16_records_untouched() {
    let rewrites = check(ApiKey::Fetch, fetch);
    let endpoints = vec![(1, Some("rack-a")), (2, Some("rack-b")), (3, None)];
    let want: Vec<_> = (16..=18).map(|v| (v, endpoints.clone())).collect();
    assert_eq!(seen(&rewrites), want);
    // the codec reads records as slices of the frame: what makes reading a fetch cheap
    let (frame, body_offset) = response(ApiKey::Fetch, 18, &fetch(18, inside));
    let read = FetchResponse::decode(&mut frame.slice(body_offset..), 18).unwrap();
    let batch = read.responses[0].partitions[0].records.as_ref().unwrap();
    let (within, slice) = (frame.as_ptr_range(), batch.as_ptr_range());
    assert!(within.start <= slice.start && slice.end <= within.end);
    for r in &rewrites {
        let head = parse_response_header(&r.out, 1).unwrap();
        let mut body = r.out.slice(head.body_offset..);
        let got = FetchResponse::decode(&mut body, r.version).unwrap();
        let partitions = &got.responses[0].partitions;
        for (i, p) in partitions.iter().enumerate() {
            assert_eq!(p.records, Some(records(i as u8)), "v{}", r.version);
        }
    }
}

#[test]
fn a_fetch_without_leader_hints_is_passed_as_it_is() {
    let key = ApiKey::Fetch;
    for version in 16..=18 {
        let mut m = fetch(version, inside);
        m.node_endpoints.clear();
        let (frame, body_offset) = response(key, version, &m);
        let got = with_addresses(&frame, body_offset, key as i16, version, &mut |b| {
            panic!("passed {b:?}")
        });
        assert_eq!(got, Ok(None), "v{version}");
    }
}

fn share_fetch(version: i16, at: At) -> ShareFetchResponse {
    let key = ApiKey::ShareFetch;
    let mut acquired = share_fetch_response::AcquiredRecords::default();
    acquired.first_offset = 10;
    acquired.last_offset = 20;
    acquired.delivery_count = 1;
    let mut p = share_fetch_response::PartitionData::default();
    p.partition_index = 0;
    p.current_leader.leader_id = 2;
    p.current_leader.leader_epoch = 7;
    p.records = Some(records(9));
    p.acquired_records = vec![acquired];
    let mut topic = share_fetch_response::ShareFetchableTopicResponse::default();
    topic.topic_id = Uuid::from_u128(0x1234);
    topic.partitions = vec![p];
    let mut m = ShareFetchResponse::default();
    m.acquisition_lock_timeout_ms = 30000;
    m.responses = vec![topic];
    m.node_endpoints = endpoints!(share_fetch_response::NodeEndpoint, key, version, at);
    m.unknown_tagged_fields = unknown_tags(key, version);
    m
}

fn share_acknowledge(version: i16, at: At) -> ShareAcknowledgeResponse {
    let key = ApiKey::ShareAcknowledge;
    let mut p = share_acknowledge_response::PartitionData::default();
    p.partition_index = 0;
    p.error_code = 6;
    p.current_leader.leader_id = 2;
    p.current_leader.leader_epoch = 7;
    let mut topic = share_acknowledge_response::ShareAcknowledgeTopicResponse::default();
    topic.topic_id = Uuid::from_u128(0x1234);
    topic.partitions = vec![p];
    let mut m = ShareAcknowledgeResponse::default();
    m.responses = vec![topic];
    m.node_endpoints = endpoints!(share_acknowledge_response::NodeEndpoint, key, version, at);
    m.unknown_tagged_fields = unknown_tags(key, version);
    m
}

#[test]
fn share_group_leader_hints_are_rewritten() {
    let endpoints = vec![(1, Some("rack-a")), (2, Some("rack-b")), (3, None)];
    let rewrites = check(ApiKey::ShareFetch, share_fetch);
    assert_eq!(seen(&rewrites), vec![(1, endpoints.clone())]);
    let head = parse_response_header(&rewrites[0].out, 1).unwrap();
    let mut body = rewrites[0].out.slice(head.body_offset..);
    let got = ShareFetchResponse::decode(&mut body, 1).unwrap();
    assert_eq!(got.responses[0].partitions[0].records, Some(records(9)));
    let rewrites = check(ApiKey::ShareAcknowledge, share_acknowledge);
    assert_eq!(seen(&rewrites), vec![(1, endpoints)]);
}

#[test]
fn older_produce_and_fetch_are_not_decoded() {
    // a map that changes everything, and a body that is no response (too short for
    // any: decoded, it would be an error, not a count of billions to allocate)
    let garbage = Bytes::from_static(&[0xff; 3]);
    for (key, versions) in [(ApiKey::Produce, 0..=9), (ApiKey::Fetch, 0..=15)] {
        for version in versions {
            let got = with_addresses(&garbage, 0, key as i16, version, &mut gateway);
            assert_eq!(got, Ok(None), "{key:?} v{version}");
        }
    }
    // the versions before the hints, as a broker writes them
    for (key, version) in [(ApiKey::Produce, 9), (ApiKey::Fetch, 15)] {
        let (frame, body_offset) = match key {
            ApiKey::Produce => response(key, version, &produce(version, inside)),
            _ => response(key, version, &fetch(version, inside)),
        };
        let got = with_addresses(&frame, body_offset, key as i16, version, &mut |_| {
            Some(("anywhere.example.com".into(), 1))
        });
        assert_eq!(got, Ok(None), "{key:?} v{version}");
    }
}

#[test]
fn the_versions_with_brokers_are_the_codecs() {
    let node = |id: i32| {
        let mut e = produce_response::NodeEndpoint::default();
        e.node_id = BrokerId(id);
        e.host = str("b1.cluster.internal");
        e
    };
    let produce = ProduceResponse::default().with_node_endpoints(vec![node(1)]);
    let range = ApiKey::Produce.valid_versions();
    for version in range.min..=range.max {
        let mut buf = BytesMut::new();
        produce.encode(&mut buf, version).unwrap();
        let read = ProduceResponse::decode(&mut buf.freeze(), version).unwrap();
        let named = !read.node_endpoints.is_empty();
        assert_eq!(names_brokers(0, version), named, "Produce v{version}");
    }
    let mut fetch = FetchResponse::default();
    fetch.node_endpoints = vec![fetch_response::NodeEndpoint::default()
        .with_node_id(BrokerId(1))
        .with_host(str("b1.cluster.internal"))];
    let range = ApiKey::Fetch.valid_versions();
    for version in range.min..=range.max {
        let mut buf = BytesMut::new();
        fetch.encode(&mut buf, version).unwrap();
        let read = FetchResponse::decode(&mut buf.freeze(), version).unwrap();
        let named = !read.node_endpoints.is_empty();
        assert_eq!(names_brokers(1, version), named, "Fetch v{version}");
    }
    for (key, version, named) in [
        (3, 0, true),
        (10, 0, true),
        (10, 6, true),
        (60, 0, true),
        (78, 1, true),
        (79, 1, true),
        (3, 14, true), // newer than the codec: refused, not passed
        (3, -1, false),
        (18, 3, false), // ApiVersions
        (75, 0, false), // DescribeTopicPartitions: leader ids only
        (-1, 0, false),
        (999, 0, false),
    ] {
        assert_eq!(names_brokers(key, version), named, "key {key} v{version}");
    }
}

#[test]
fn responses_that_name_no_brokers_are_not_read() {
    // a header, then a body too short for any response
    let garbage = Bytes::from_static(&[0, 0, 0, 1, 0xff, 0xff, 0xff]);
    for key in -1..=100 {
        for version in -1..=20 {
            if names_brokers(key, version) {
                continue;
            }
            let got = with_addresses(&garbage, 4, key, version, &mut gateway);
            assert_eq!(got, Ok(None), "key {key} v{version}");
        }
    }
}

#[test]
fn frames_that_cannot_be_read_are_errors() {
    let key = ApiKey::Metadata;
    let (frame, body_offset) = response(key, 12, &metadata(12, inside));
    let got = with_addresses(&frame, frame.len() + 1, 3, 12, &mut gateway);
    let short = HeaderError::Short {
        needed: frame.len() + 1,
        len: frame.len(),
    };
    assert_eq!(got, Err(short));
    // a version newer than the codec
    let got = with_addresses(&frame, body_offset, 3, 14, &mut gateway);
    let unreadable = HeaderError::Unreadable {
        message: "Metadata response",
        version: 14,
    };
    assert_eq!(got, Err(unreadable));
    // a host the non-flexible versions cannot write
    let (frame, body_offset) = response(key, 0, &metadata(0, inside));
    let long = "h".repeat(40000);
    let got = with_addresses(&frame, body_offset, 3, 0, &mut |_| Some((long.clone(), 1)));
    let bad = HeaderError::BadLength {
        field: "broker host length",
        value: 40000,
    };
    assert_eq!(got, Err(bad));
}
