//! What the proxy writes into the responses it passes on: the applied throttle in a
//! response's `throttle_time_ms` (the broker's own value kept when it is larger), and the
//! empty fetch response a throttled consumer gets. Only throttled responses are rewritten,
//! so they are decoded and encoded whole with the `kafka-protocol` crate's codec (Kafka's
//! schemas), and every other response passes through as bytes.

use bytes::{Bytes, BytesMut};
use kafka_protocol::messages::{
    ApiKey, ApiVersionsResponse, FetchResponse, ResponseHeader, ResponseKind,
};
use kafka_protocol::protocol::{Decodable, Encodable};

use crate::header::{parse_response_header, RequestHeader};

/// The response frame `response` (without its size prefix) to `request`, with
/// `throttle_ms` in its `throttle_time_ms`; `None` when it needs no change: its own
/// throttle is at least as large, its version has no `throttle_time_ms`, or the crate
/// cannot read it (the response then passes unchanged, as the broker wrote it).
pub fn with_throttle(
    response: &[u8],
    request: &RequestHeader<'_>,
    throttle_ms: i32,
) -> Option<BytesMut> {
    let key = ApiKey::try_from(request.api_key).ok()?;
    let header = parse_response_header(response, request.response_header_version()).ok()?;
    let mut body = Bytes::copy_from_slice(&response[header.body_offset..]);
    let mut message = ResponseKind::decode(key, &mut body, request.api_version).ok()?;
    if !body.is_empty() {
        return None; // bytes the codec does not know: keep the broker's response
    }
    let field = throttle_field(&mut message)?;
    if *field >= throttle_ms {
        return None;
    }
    *field = throttle_ms;
    let mut out = BytesMut::with_capacity(response.len());
    out.extend_from_slice(&response[..header.body_offset]);
    message.encode(&mut out, request.api_version).ok()?;
    // A version without the field encodes without it (or refuses to): read it back.
    let mut written = Bytes::copy_from_slice(&out[header.body_offset..]);
    let mut check = ResponseKind::decode(key, &mut written, request.api_version).ok()?;
    (throttle_field(&mut check).copied() == Some(throttle_ms)).then_some(out)
}

/// The ApiVersions response `response` to `request` with each API's versions capped to
/// those the proxy reads (the `kafka-protocol` crate's, generated from Kafka's schemas)
/// and APIs it does not know left out, so that a client never picks a version the proxy
/// cannot follow; `throttle_ms` > 0 goes into its `throttle_time_ms`. `None` when nothing
/// changes or the response cannot be read (an error answer, e.g. to an unsupported version,
/// then passes unchanged).
pub fn capped_api_versions(
    response: &[u8],
    request: &RequestHeader<'_>,
    throttle_ms: i32,
) -> Option<BytesMut> {
    let header = parse_response_header(response, request.response_header_version()).ok()?;
    let mut body = Bytes::copy_from_slice(&response[header.body_offset..]);
    let mut message = ApiVersionsResponse::decode(&mut body, request.api_version).ok()?;
    if !body.is_empty() || message.error_code != 0 {
        return None;
    }
    let before = message.api_keys.len();
    let mut changed = false;
    message.api_keys.retain_mut(|api| {
        let Ok(key) = ApiKey::try_from(api.api_key) else {
            return false;
        };
        let known = key.valid_versions();
        if api.min_version > known.max || api.max_version < known.min {
            return false;
        }
        if api.max_version > known.max {
            api.max_version = known.max;
            changed = true;
        }
        true
    });
    changed |= message.api_keys.len() != before;
    if throttle_ms > message.throttle_time_ms {
        message.throttle_time_ms = throttle_ms;
        changed = true;
    }
    if !changed {
        return None;
    }
    let mut out = BytesMut::with_capacity(response.len());
    out.extend_from_slice(&response[..header.body_offset]);
    message.encode(&mut out, request.api_version).ok()?;
    Some(out)
}

/// The `throttle_time_ms` of a response that has one.
fn throttle_field(message: &mut ResponseKind) -> Option<&mut i32> {
    macro_rules! throttled {
        ($($variant:ident,)*) => {
            match message {
                $(ResponseKind::$variant(m) => Some(&mut m.throttle_time_ms),)*
                _ => None,
            }
        };
    }
    throttled!(
        Produce,
        Fetch,
        ListOffsets,
        Metadata,
        OffsetCommit,
        OffsetFetch,
        FindCoordinator,
        JoinGroup,
        Heartbeat,
        LeaveGroup,
        SyncGroup,
        DescribeGroups,
        ListGroups,
        ApiVersions,
        CreateTopics,
        DeleteTopics,
        DeleteRecords,
        InitProducerId,
        OffsetForLeaderEpoch,
        AddPartitionsToTxn,
        AddOffsetsToTxn,
        EndTxn,
        TxnOffsetCommit,
        DescribeAcls,
        CreateAcls,
        DeleteAcls,
        DescribeConfigs,
        AlterConfigs,
        AlterReplicaLogDirs,
        DescribeLogDirs,
        CreatePartitions,
        CreateDelegationToken,
        RenewDelegationToken,
        ExpireDelegationToken,
        DescribeDelegationToken,
        DeleteGroups,
        ElectLeaders,
        IncrementalAlterConfigs,
        AlterPartitionReassignments,
        ListPartitionReassignments,
        OffsetDelete,
        DescribeClientQuotas,
        AlterClientQuotas,
        DescribeUserScramCredentials,
        AlterUserScramCredentials,
        AlterPartition,
        UpdateFeatures,
        FetchSnapshot,
        DescribeCluster,
        DescribeProducers,
        BrokerRegistration,
        BrokerHeartbeat,
        UnregisterBroker,
        DescribeTransactions,
        ListTransactions,
        AllocateProducerIds,
        ConsumerGroupHeartbeat,
        ConsumerGroupDescribe,
        ControllerRegistration,
        GetTelemetrySubscriptions,
        PushTelemetry,
        AssignReplicasToDirs,
        ListConfigResources,
        DescribeTopicPartitions,
        ShareGroupHeartbeat,
        ShareGroupDescribe,
        ShareFetch,
        ShareAcknowledge,
        AddRaftVoter,
        RemoveRaftVoter,
        UpdateRaftVoter,
        DescribeShareGroupOffsets,
        AlterShareGroupOffsets,
        DeleteShareGroupOffsets,
    )
}

/// The empty fetch response Kafka sends a throttled consumer (its fetch bytes taken back),
/// for the fetch `request` of an incremental session `session_id` (0 for none), as a frame
/// without its size prefix; `None` for a fetch version Kafka does not define.
pub fn throttled_fetch_response(
    request: &RequestHeader<'_>,
    throttle_ms: i32,
    session_id: i32,
) -> Option<BytesMut> {
    let version = request.api_version;
    let mut out = BytesMut::new();
    let mut header = ResponseHeader::default();
    header.correlation_id = request.correlation_id;
    header
        .encode(&mut out, request.response_header_version())
        .ok()?;
    match version {
        // versions Kafka 4 no longer serves (nor the codec): v0 is an empty topic array;
        // v1-3 put the throttle before it
        0 => out.extend_from_slice(&0i32.to_be_bytes()),
        1..=3 => {
            out.extend_from_slice(&throttle_ms.to_be_bytes());
            out.extend_from_slice(&0i32.to_be_bytes());
        }
        _ => {
            let mut response = FetchResponse::default();
            response.throttle_time_ms = throttle_ms;
            if version >= 7 {
                response.session_id = session_id; // fetch sessions (KIP-227) from v7
            }
            response.encode(&mut out, version).ok()?;
        }
    }
    Some(out)
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::header::parse_request_header;
    use kafka_protocol::messages::{
        ApiVersionsResponse, CreateTopicsResponse, MetadataResponse, ProduceResponse,
        RequestHeader as KpRequest, TopicName,
    };
    use kafka_protocol::protocol::{Decodable, StrBytes};

    /// A request header frame of `key` v`version` (what `with_throttle` needs of the request).
    fn request(key: ApiKey, version: i16) -> Vec<u8> {
        let mut header = KpRequest::default();
        header.request_api_key = key as i16;
        header.request_api_version = version;
        header.correlation_id = 77;
        header.client_id = Some(StrBytes::from_static_str("c"));
        let mut buf = BytesMut::new();
        header
            .encode(&mut buf, key.request_header_version(version))
            .unwrap();
        buf.to_vec()
    }

    /// `message` as a response frame to `request` (header then body); `None` when a field
    /// set in it is not in that version.
    fn response<M: Encodable>(request: &RequestHeader<'_>, message: &M) -> Option<Vec<u8>> {
        let mut head = ResponseHeader::default();
        head.correlation_id = request.correlation_id;
        let mut buf = BytesMut::new();
        head.encode(&mut buf, request.response_header_version())
            .unwrap();
        message.encode(&mut buf, request.api_version).ok()?;
        Some(buf.to_vec())
    }

    /// Rewrites `message` to a 250 ms throttle in every version of `key`; the versions
    /// with the field read back with it and nothing else changed, the others are left.
    fn check<M>(key: ApiKey, message: M, throttle: fn(&mut M) -> &mut i32) -> usize
    where
        M: Encodable + Decodable + Clone + PartialEq + std::fmt::Debug,
    {
        let range = key.valid_versions();
        let mut rewritten = 0;
        for version in range.min..=range.max {
            let frame = request(key, version);
            let header = parse_request_header(&frame).unwrap();
            let Some(original) = response(&header, &message) else {
                continue;
            };
            let Some(out) = with_throttle(&original, &header, 250) else {
                continue; // a version without the field: counted by the caller
            };
            let head = parse_response_header(&out, header.response_header_version()).unwrap();
            assert_eq!(head.correlation_id, 77);
            assert_eq!(&out[..head.body_offset], &original[..head.body_offset]);
            let mut body = Bytes::copy_from_slice(&out[head.body_offset..]);
            let mut got = M::decode(&mut body, version).unwrap();
            assert_eq!(*throttle(&mut got), 250, "{key:?} v{version}");
            *throttle(&mut got) = *throttle(&mut message.clone());
            let mut body = Bytes::copy_from_slice(&original[head.body_offset..]);
            assert_eq!(
                got,
                M::decode(&mut body, version).unwrap(),
                "{key:?} v{version}"
            );
            // a broker's own larger throttle is kept
            assert!(with_throttle(&out, &header, 100).is_none());
            rewritten += 1;
        }
        rewritten
    }

    #[test]
    fn the_throttle_is_written_into_responses_of_every_version_that_has_it() {
        let mut produce = ProduceResponse::default();
        produce.responses.push(Default::default());
        produce.responses[0].name = TopicName(StrBytes::from_static_str("orders"));
        produce.responses[0]
            .partition_responses
            .push(Default::default());
        assert_eq!(
            check(ApiKey::Produce, produce, |m| &mut m.throttle_time_ms),
            11
        );

        let mut fetch = FetchResponse::default();
        fetch.responses.push(Default::default());
        fetch.responses[0].topic = TopicName(StrBytes::from_static_str("orders"));
        let mut partition = kafka_protocol::messages::fetch_response::PartitionData::default();
        partition.records = Some(Bytes::from_static(b"record batch bytes"));
        fetch.responses[0].partitions.push(partition);
        assert_eq!(check(ApiKey::Fetch, fetch, |m| &mut m.throttle_time_ms), 15);

        let mut versions = ApiVersionsResponse::default();
        versions.api_keys.push(Default::default());
        // the throttle comes after the API keys, and only from v1
        let n = check(ApiKey::ApiVersions, versions, |m| &mut m.throttle_time_ms);
        assert_eq!(n, ApiKey::ApiVersions.valid_versions().max as usize);

        let metadata = MetadataResponse::default();
        let n = check(ApiKey::Metadata, metadata, |m| &mut m.throttle_time_ms);
        assert_eq!(n, ApiKey::Metadata.valid_versions().max as usize - 2); // from v3
        let created = CreateTopicsResponse::default();
        assert!(check(ApiKey::CreateTopics, created, |m| &mut m.throttle_time_ms) > 0);
    }

    #[test]
    fn api_versions_offer_only_what_the_codec_reads() {
        use kafka_protocol::messages::api_versions_response::ApiVersion;
        let frame = request(ApiKey::ApiVersions, 3);
        let header = parse_request_header(&frame).unwrap();
        let version = |key: i16, min: i16, max: i16| {
            let mut v = ApiVersion::default();
            v.api_key = key;
            v.min_version = min;
            v.max_version = max;
            v
        };
        let produce = ApiKey::Produce.valid_versions();
        let mut offered = ApiVersionsResponse::default();
        offered.api_keys = vec![
            version(0, produce.min, produce.max + 5), // newer than the codec
            version(1, 4, 12),                        // within it: kept as it is
            version(999, 0, 3),                       // unknown to it
        ];
        let bytes = response(&header, &offered).unwrap();
        let capped = capped_api_versions(&bytes, &header, 0).unwrap();
        let body_offset = parse_response_header(&capped, 0).unwrap().body_offset;
        let mut body = Bytes::copy_from_slice(&capped[body_offset..]);
        let read = ApiVersionsResponse::decode(&mut body, 3).unwrap();
        let keys: Vec<_> = read
            .api_keys
            .iter()
            .map(|v| (v.api_key, v.min_version, v.max_version))
            .collect();
        assert_eq!(keys, vec![(0, produce.min, produce.max), (1, 4, 12)]);
        assert_eq!(read.throttle_time_ms, 0);
        // nothing to change: passed as it is; a throttle alone is written
        offered.api_keys = vec![version(1, 4, 12)];
        let bytes = response(&header, &offered).unwrap();
        assert!(capped_api_versions(&bytes, &header, 0).is_none());
        let throttled = capped_api_versions(&bytes, &header, 250).unwrap();
        let mut body = Bytes::copy_from_slice(&throttled[body_offset..]);
        assert_eq!(
            ApiVersionsResponse::decode(&mut body, 3)
                .unwrap()
                .throttle_time_ms,
            250
        );
    }

    #[test]
    fn a_response_the_codec_cannot_read_passes_unchanged() {
        let frame = request(ApiKey::Metadata, 12);
        let header = parse_request_header(&frame).unwrap();
        let mut broken = response(&header, &MetadataResponse::default()).unwrap();
        broken.truncate(broken.len() - 2);
        assert!(with_throttle(&broken, &header, 250).is_none());
        let mut longer = response(&header, &MetadataResponse::default()).unwrap();
        longer.push(0);
        assert!(with_throttle(&longer, &header, 250).is_none());
    }

    #[test]
    fn a_throttled_fetch_is_answered_empty_in_every_version() {
        for version in 0..=18 {
            let frame = request(ApiKey::Fetch, version);
            let header = parse_request_header(&frame).unwrap();
            let out = throttled_fetch_response(&header, 1234, 99).unwrap();
            let head = parse_response_header(&out, header.response_header_version()).unwrap();
            assert_eq!(head.correlation_id, 77);
            let body = &out[head.body_offset..];
            match version {
                0 => assert_eq!(body, [0, 0, 0, 0]),
                1..=3 => assert_eq!(body, [0, 0, 4, 210, 0, 0, 0, 0]),
                _ => {
                    let got =
                        FetchResponse::decode(&mut Bytes::copy_from_slice(body), version).unwrap();
                    assert_eq!(got.throttle_time_ms, 1234);
                    assert!(got.responses.is_empty());
                    assert_eq!(
                        got.session_id,
                        if version >= 7 { 99 } else { 0 },
                        "v{version}"
                    );
                }
            }
        }
        let frame = request(ApiKey::Fetch, 19);
        let header = parse_request_header(&frame).unwrap();
        assert!(throttled_fetch_response(&header, 1, 0).is_none());
    }
}
