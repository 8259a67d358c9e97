//! What the proxy reads of a Fetch request, and the one field it may change: a consumer
//! fetch's `max_bytes`, capped as Kafka caps it by the fetch quota. The fields read sit at
//! fixed offsets at the start of the body, so they are read and patched in place; only
//! from v15, where a follower's id moved to a tagged field at the end, is the request
//! decoded whole (by the `kafka-protocol` crate) to tell a follower from a consumer.

use crate::error::HeaderError;
use crate::header::RequestHeader;

/// The fields of a Fetch request the proxy needs.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct FetchRequestInfo {
    /// -1 for a consumer; a broker id for a follower (outside client quotas).
    pub replica_id: i32,
    /// `max_bytes` (v3+) and its offset in the frame.
    pub max_bytes: Option<(i32, usize)>,
    /// The fetch session (KIP-227, v7+): 0 and -1 without one.
    pub session_id: i32,
    pub session_epoch: i32,
}

impl FetchRequestInfo {
    /// A consumer's fetch (not a follower's).
    pub fn is_consumer(&self) -> bool {
        self.replica_id < 0
    }
}

/// The fields of the Fetch request `frame` whose header is `header`.
pub fn read_fetch_request(
    frame: &[u8],
    header: &RequestHeader<'_>,
) -> Result<FetchRequestInfo, HeaderError> {
    let version = header.api_version;
    let body = header.body_offset;
    let int32 = |at: usize| -> Result<i32, HeaderError> {
        let bytes = frame
            .get(body + at..body + at + 4)
            .ok_or(HeaderError::Short {
                needed: body + at + 4,
                len: frame.len(),
            })?;
        Ok(i32::from_be_bytes([bytes[0], bytes[1], bytes[2], bytes[3]]))
    };
    // v0-14 start with replica_id; from v15 the body starts at max_wait_ms
    let (replica_id, start) = if version <= 14 {
        (int32(0)?, 4)
    } else {
        (
            crate::precheck::fetch_replica_id(&frame[body..], version)?,
            0,
        )
    };
    // max_wait_ms, min_bytes, then max_bytes (v3+), isolation_level (v4+, one byte),
    // session_id and session_epoch (v7+)
    let max_bytes = if version >= 3 {
        let at = start + 8;
        Some((int32(at)?, body + at))
    } else {
        None
    };
    let (session_id, session_epoch) = if version >= 7 {
        let at = start + 13;
        (int32(at)?, int32(at + 4)?)
    } else {
        (0, -1)
    };
    Ok(FetchRequestInfo {
        replica_id,
        max_bytes,
        session_id,
        session_epoch,
    })
}

/// Caps the `max_bytes` of the fetch `frame` (read into `info`) to `cap` in place;
/// `true` when it changed (a request without the field, or asking for less, is left).
pub fn cap_max_bytes(frame: &mut [u8], info: &FetchRequestInfo, cap: i32) -> bool {
    match info.max_bytes {
        Some((requested, at)) if cap < requested && at + 4 <= frame.len() => {
            frame[at..at + 4].copy_from_slice(&cap.to_be_bytes());
            true
        }
        _ => false,
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::header::parse_request_header;
    use bytes::Bytes;
    use bytes::BytesMut;
    use kafka_protocol::messages::FetchRequest;
    use kafka_protocol::messages::{ApiKey, BrokerId, RequestHeader as KpRequest, TopicName};
    use kafka_protocol::protocol::Decodable;
    use kafka_protocol::protocol::{Encodable, StrBytes};

    fn frame(version: i16, request: &FetchRequest) -> Option<Vec<u8>> {
        let mut header = KpRequest::default();
        header.request_api_key = ApiKey::Fetch as i16;
        header.request_api_version = version;
        header.client_id = Some(StrBytes::from_static_str("consumer-1"));
        let mut buf = BytesMut::new();
        header
            .encode(&mut buf, ApiKey::Fetch.request_header_version(version))
            .unwrap();
        request.encode(&mut buf, version).ok()?;
        Some(buf.to_vec())
    }

    fn request(replica: i32) -> FetchRequest {
        let mut r = FetchRequest::default();
        r.replica_id = BrokerId(replica);
        r.replica_state.replica_id = BrokerId(replica);
        r.max_wait_ms = 500;
        r.min_bytes = 1;
        r.max_bytes = 52_428_800;
        r.session_id = 1234;
        r.session_epoch = 5;
        r.topics.push(Default::default());
        r.topics[0].topic = TopicName(StrBytes::from_static_str("orders"));
        r.topics[0].partitions.push(Default::default());
        r
    }

    /// Every version the crate encodes, consumer and follower: the fields read back as
    /// the crate wrote them, and a capped request decodes with the cap and nothing else
    /// changed.
    #[test]
    fn fields_read_and_cap_in_every_version() {
        let range = ApiKey::Fetch.valid_versions();
        for version in range.min..=range.max {
            for replica in [-1, 3] {
                let mut sent = request(replica);
                if version <= 14 {
                    sent.replica_state = Default::default();
                } else {
                    sent.replica_id = BrokerId(-1);
                }
                if version < 7 {
                    (sent.session_id, sent.session_epoch) = (0, -1);
                }
                let mut bytes = frame(version, &sent).unwrap();
                let header = parse_request_header(&bytes).unwrap();
                let info = read_fetch_request(&bytes, &header).unwrap();
                assert_eq!(info.replica_id, replica, "v{version}");
                assert_eq!(info.is_consumer(), replica < 0);
                assert_eq!(info.max_bytes.unwrap().0, 52_428_800);
                assert_eq!(
                    (info.session_id, info.session_epoch),
                    (sent.session_id, sent.session_epoch)
                );

                let decoded = |bytes: &[u8]| {
                    let mut body = Bytes::copy_from_slice(&bytes[header.body_offset..]);
                    FetchRequest::decode(&mut body, version).unwrap()
                };
                let mut expected = decoded(&bytes);
                assert!(
                    !cap_max_bytes(&mut bytes, &info, 60_000_000),
                    "a larger cap changes nothing"
                );
                assert!(cap_max_bytes(&mut bytes, &info, 1_048_576));
                expected.max_bytes = 1_048_576;
                assert_eq!(decoded(&bytes), expected, "v{version}");
            }
        }
    }

    #[test]
    fn the_versions_kafka_4_dropped_are_read_by_offset() {
        // v0-3: replica_id, max_wait_ms, min_bytes, max_bytes (v3) then the topics
        let mut v3 = vec![0, 1, 0, 3, 0, 0, 0, 9, 0, 1, b'c'];
        for field in [-1i32, 500, 1, 4096, 0] {
            v3.extend_from_slice(&field.to_be_bytes());
        }
        let header = parse_request_header(&v3).unwrap();
        let info = read_fetch_request(&v3, &header).unwrap();
        assert_eq!(
            (info.replica_id, info.max_bytes.map(|m| m.0)),
            (-1, Some(4096))
        );
        assert_eq!((info.session_id, info.session_epoch), (0, -1));
        let mut v0 = vec![0, 1, 0, 0, 0, 0, 0, 9, 0, 1, b'c'];
        for field in [2i32, 500, 1, 0] {
            v0.extend_from_slice(&field.to_be_bytes());
        }
        let header = parse_request_header(&v0).unwrap();
        let info = read_fetch_request(&v0, &header).unwrap();
        assert_eq!((info.replica_id, info.max_bytes), (2, None));
        assert!(!cap_max_bytes(&mut v0, &info, 1));
    }

    #[test]
    fn a_short_request_is_an_error() {
        let bytes = frame(12, &request(-1)).unwrap();
        let header = parse_request_header(&bytes).unwrap();
        let cut = &bytes[..header.body_offset + 10];
        let err = read_fetch_request(cut, &header).unwrap_err();
        assert!(matches!(err, HeaderError::Short { .. }), "{err:?}");
        let bytes = frame(17, &request(-1)).unwrap();
        let header = parse_request_header(&bytes).unwrap();
        let err = read_fetch_request(&bytes[..bytes.len() - 3], &header).unwrap_err();
        assert!(matches!(err, HeaderError::Short { .. }), "{err:?}");
        // a byte after the last field: not a fetch request of that version
        let mut longer = bytes.clone();
        longer.push(0);
        let err = read_fetch_request(&longer, &header).unwrap_err();
        let unreadable = HeaderError::Unreadable {
            message: "fetch request",
            version: 17,
        };
        assert_eq!(err, unreadable);
        // a topics array claiming 2^32 - 2 topics: refused, nothing reserved for them
        let mut hostile = bytes[..header.body_offset + 21].to_vec();
        hostile.extend_from_slice(&[0xff, 0xff, 0xff, 0xff, 0x0f]);
        let err = read_fetch_request(&hostile, &header).unwrap_err();
        assert!(matches!(err, HeaderError::BadLength { .. }), "{err:?}");
    }
}
