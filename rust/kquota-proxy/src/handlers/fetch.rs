//! Fetch: a consumer's `max_bytes` is capped by its fetch quota as it stands, and its
//! response's size is recorded on the fetch quota; a throttled one has its bytes taken
//! back and is answered with an empty fetch response. A follower's fetch is outside client
//! quotas but held to the request quota ([`super::request`]).

use kquota_core::{Request, RequestPath};

use super::{check, throttled_reply, Client, Reply, Verdict};
use crate::error::Closed;
use crate::fetch::FetchRequestInfo;
use crate::header::RequestHeader;
use crate::rewrite::throttled_fetch_response;

/// The `max_bytes` a consumer's fetch goes to the broker with, as Kafka caps it by the
/// client's fetch quota; `None` when it is not capped (a follower, or a version without
/// `max_bytes`).
pub(crate) fn max_bytes(
    path: &RequestPath<'_>,
    user: &str,
    client_id: &str,
    info: &FetchRequestInfo,
    now: i64,
) -> Result<Option<i32>, Closed> {
    let (true, Some((requested, _))) = (info.is_consumer(), info.max_bytes) else {
        return Ok(None);
    };
    let cap = path.fetch_max_bytes(user, client_id, i64::from(requested), now)?;
    Ok(Some(i32::try_from(cap).unwrap_or(i32::MAX)))
}

/// A consumer's fetch answered with `response` (its body from `body_offset`): the
/// response's size (Kafka's `FetchResponse.sizeOf`: the body and the 4-byte correlation
/// id) recorded; when throttled, an empty response in its place, in the fetch session of
/// the request.
#[allow(clippy::too_many_arguments)]
pub(crate) fn answer(
    path: &RequestPath<'_>,
    client: Client<'_>,
    header: &RequestHeader<'_>,
    info: &FetchRequestInfo,
    response: &[u8],
    body_offset: usize,
    handled_ns: f64,
    now: i64,
) -> Result<Verdict, Closed> {
    let size = (4 + response.len() - body_offset) as f64;
    let mut verdict = check(path, client, &Request::fetch(size, handled_ns), now)?;
    let throttle_ms = verdict.outcome.throttle_ms;
    verdict.reply = if verdict.outcome.unrecorded {
        let session = if info.session_epoch > 0 {
            info.session_id
        } else {
            0
        };
        let empty = throttled_fetch_response(header, throttle_ms, session).ok_or_else(|| {
            Closed::Client(format!(
                "fetch v{} has no throttled response",
                header.api_version
            ))
        })?;
        Reply::Own(empty)
    } else {
        throttled_reply(response, header, throttle_ms)
    };
    Ok(verdict)
}

#[cfg(test)]
mod tests {
    use bytes::Bytes;
    use kafka_protocol::messages::fetch_response::{FetchableTopicResponse, PartitionData};
    use kafka_protocol::messages::{ApiKey, FetchRequest, FetchResponse};
    use kquota_core::{QuotaManager, QuotaType};

    use super::*;
    use crate::handlers::testing::{
        decoded, header_of, request_frame, response_frame, user, Broker, CLIENT,
    };

    const CONSUMER: FetchRequestInfo = FetchRequestInfo {
        replica_id: -1,
        max_bytes: Some((52_428_800, 0)),
        session_id: 42,
        session_epoch: 3,
    };

    fn fetch() -> RequestHeader<'static> {
        header_of(&request_frame(ApiKey::Fetch, 12, &FetchRequest::default()))
    }

    /// A fetch response carrying `bytes` bytes of records.
    fn response(header: &RequestHeader<'_>, bytes: usize) -> (bytes::BytesMut, usize) {
        let mut partition = PartitionData::default();
        partition.records = Some(Bytes::from(vec![0u8; bytes]));
        let mut topic = FetchableTopicResponse::default();
        topic.partitions = vec![partition];
        let mut body = FetchResponse::default();
        body.session_id = 42;
        body.responses = vec![topic];
        response_frame(header, &body)
    }

    #[test]
    fn a_consumers_max_bytes_is_capped_by_its_fetch_quota_and_a_followers_is_not() {
        let broker = Broker::new();
        let path = broker.path();
        // no quota: as asked
        assert_eq!(
            max_bytes(&path, "u", "c", &CONSUMER, 0).unwrap(),
            Some(52_428_800)
        );
        broker.fetch.set_quota(&user("u"), 1000.0).unwrap();
        let cap = max_bytes(&path, "u", "c", &CONSUMER, 0).unwrap().unwrap();
        assert!(cap > 0 && cap < 52_428_800, "{cap}");
        let follower = FetchRequestInfo {
            replica_id: 2,
            ..CONSUMER
        };
        assert_eq!(max_bytes(&path, "u", "c", &follower, 0).unwrap(), None);
        let v2 = FetchRequestInfo {
            max_bytes: None,
            ..CONSUMER
        };
        assert_eq!(max_bytes(&path, "u", "c", &v2, 0).unwrap(), None);
    }

    #[test]
    fn a_fetchs_throttle_is_computed_on_its_response_size() {
        let broker = Broker::new();
        broker.fetch.set_quota(&user("u"), 1000.0).unwrap();
        let header = fetch();
        let (frame, offset) = response(&header, 500);
        let path = broker.path();
        let v = answer(&path, CLIENT, &header, &CONSUMER, &frame, offset, 1e6, 0).unwrap();
        // Kafka's FetchResponse.sizeOf: the body and the 4-byte correlation id
        let size = 4 + frame.len() - offset;
        assert_eq!(v.size, size as f64);
        assert_eq!((v.outcome.throttle_ms, v.reply), (0, Reply::AsIs));
        // a second, larger response goes over: its throttle is the core's for its size
        let (frame, offset) = response(&header, 20_000);
        let v = answer(&path, CLIENT, &header, &CONSUMER, &frame, offset, 1e6, 0).unwrap();
        let alone = QuotaManager::with_defaults(QuotaType::Fetch);
        alone.set_quota(&user("u"), 1000.0).unwrap();
        alone.record("u", "c", size as f64, 0).unwrap();
        let second = (4 + frame.len() - offset) as f64;
        let expected = alone.record("u", "c", second, 0).unwrap();
        assert!(expected > 0);
        assert_eq!(v.outcome.fetch_throttle_ms, expected);
        assert_eq!(v.outcome.throttle_ms, expected);
        assert_eq!(v.outcome.muted_until_ms, Some(i64::from(expected)));
        assert_eq!(broker.fetch.queue_size(), 1);
    }

    #[test]
    fn a_throttled_fetch_is_answered_empty_in_its_session_with_its_bytes_taken_back() {
        let broker = Broker::new();
        broker.fetch.set_quota(&user("u"), 1000.0).unwrap();
        let header = fetch();
        let (frame, offset) = response(&header, 20_000);
        let path = broker.path();
        let v = answer(&path, CLIENT, &header, &CONSUMER, &frame, offset, 1e6, 0).unwrap();
        assert!(v.outcome.unrecorded && v.outcome.throttled());
        let Reply::Own(empty) = v.reply else {
            panic!("a throttled fetch is answered empty: {:?}", v.reply)
        };
        let body: FetchResponse = decoded(&empty, &header);
        assert_eq!(body.throttle_time_ms, v.outcome.throttle_ms);
        assert_eq!(body.session_id, 42);
        assert!(body.responses.is_empty());
        // the bytes were taken back: the same fetch again is throttled the same
        let again = answer(&path, CLIENT, &header, &CONSUMER, &frame, offset, 1e6, 0).unwrap();
        assert_eq!(again.outcome.throttle_ms, v.outcome.throttle_ms);
        // outside a session (epoch 0 or less) the empty response names none
        let sessionless = FetchRequestInfo {
            session_epoch: 0,
            ..CONSUMER
        };
        let v = answer(&path, CLIENT, &header, &sessionless, &frame, offset, 1e6, 0).unwrap();
        let Reply::Own(empty) = v.reply else {
            panic!("throttled: {:?}", v.reply)
        };
        assert_eq!(decoded::<FetchResponse>(&empty, &header).session_id, 0);
    }
}
