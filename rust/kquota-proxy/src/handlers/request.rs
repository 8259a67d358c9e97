//! The request quota: every API without a handler of its own (a follower's fetch too) is
//! held to it, with the time the proxy spent on the request, and the broker's where Kafka
//! charges it; ApiVersions answers are capped to the versions the proxy reads, and
//! versions it cannot read are refused before anything else.

use kafka_protocol::messages::ApiKey;
use kquota_core::{Request, RequestPath};

use super::{check, throttled_reply, Client, Reply, Verdict, API_VERSIONS, PRODUCE};
use crate::error::Closed;
use crate::header::RequestHeader;
use crate::rewrite::capped_api_versions;

/// Refuses a version of an API the proxy cannot read (the codec's versions are those of
/// Kafka's schemas it was generated from; ApiVersions answers offer no others).
/// Checked before the rest of the header, whose layout depends on the version.
pub(crate) fn check_version(frame: &[u8]) -> Result<(), Closed> {
    let [k0, k1, v0, v1, ..] = *frame else {
        return Ok(()); // too short for a header: parsing it says so
    };
    let (api_key, api_version) = (i16::from_be_bytes([k0, k1]), i16::from_be_bytes([v0, v1]));
    let Ok(key) = ApiKey::try_from(api_key) else {
        return Ok(()); // parsing the header names the unknown key
    };
    let known = key.valid_versions();
    // ApiVersions of any version is answered (with v0 when the broker lacks it).
    if api_key != API_VERSIONS && !(known.min..=known.max).contains(&api_version) {
        return Err(Closed::Client(format!(
            "unsupported version {api_version} of API {api_key} ({key:?}): expected {} to {}",
            known.min, known.max
        )));
    }
    Ok(())
}

/// A request held to the request quota only, answered with `response`: its handling time
/// recorded and checked, the throttle in the response; ApiVersions capped to what the
/// proxy reads, throttled or not.
pub(crate) fn answer(
    path: &RequestPath<'_>,
    client: Client<'_>,
    header: &RequestHeader<'_>,
    response: &[u8],
    handled_ns: f64,
    now: i64,
) -> Result<Verdict, Closed> {
    let mut verdict = check(path, client, &Request::other(handled_ns), now)?;
    let throttle_ms = verdict.outcome.throttle_ms;
    verdict.reply = if header.api_key == API_VERSIONS {
        capped_api_versions(response, header, throttle_ms).map_or(Reply::AsIs, Reply::Own)
    } else {
        throttled_reply(response, header, throttle_ms)
    };
    Ok(verdict)
}

/// The APIs whose whole time Kafka charges to the request quota, because its handler
/// answers them before it returns: the proxy charges an estimate of the broker's handler
/// time on them from their round trips ([`crate::broker_time`]). Kafka charges the others
/// (a fetch or an `acks=all` produce parked until its data or replicas are there, the group
/// coordinator's APIs, the ones it forwards to the controller) only up to its handler's
/// return, which the proxy cannot see: those are charged with the proxy's own time.
pub(crate) fn answered_at_once(api_key: i16, acks: i16) -> bool {
    match api_key {
        PRODUCE => acks == 1,
        // ListOffsets, Metadata, OffsetForLeaderEpoch, FindCoordinator, ApiVersions,
        // DescribeAcls, DescribeConfigs, DescribeLogDirs, DescribeClientQuotas,
        // DescribeUserScramCredentials, DescribeCluster, DescribeProducers,
        // DescribeTransactions, ListTransactions, DescribeTopicPartitions
        2 | 3 | 23 | 10 | 18 | 29 | 32 | 35 | 48 | 50 | 60 | 61 | 65 | 66 | 75 => true,
        _ => false,
    }
}

#[cfg(test)]
mod tests {
    use kafka_protocol::messages::api_versions_response::ApiVersion;
    use kafka_protocol::messages::{
        ApiVersionsRequest, ApiVersionsResponse, MetadataRequest, MetadataResponse,
    };
    use kquota_core::QuotaType;

    use super::*;
    use crate::handlers::testing::{
        decoded, header_of, request_frame, response_frame, user, Broker, CLIENT,
    };

    #[test]
    fn another_api_is_charged_its_handling_time_on_the_request_quota() {
        let broker = Broker::new();
        broker.request.set_quota(&user("u"), 1.0).unwrap(); // 1% of a thread
        let header = header_of(&request_frame(
            ApiKey::Metadata,
            12,
            &MetadataRequest::default(),
        ));
        let (response, _) = response_frame(&header, &MetadataResponse::default());
        let path = broker.path();
        // 1 ms of a thread is within 1%
        let v = answer(&path, CLIENT, &header, &response, 1e6, 0).unwrap();
        assert_eq!((v.outcome.throttle_ms, v.reply), (0, Reply::AsIs));
        assert_eq!((v.size, v.thread_ns), (0.0, 1e6));
        // 2 s is not: throttled by the request quota, the channel muted through it
        let v = answer(&path, CLIENT, &header, &response, 2e9, 0).unwrap();
        let o = v.outcome;
        assert!(o.throttled());
        assert_eq!(
            (o.throttled_by, o.produce_throttle_ms, o.fetch_throttle_ms),
            (Some(QuotaType::Request), 0, 0)
        );
        assert_eq!(o.throttle_ms, o.request_throttle_ms);
        assert_eq!(o.muted_until_ms, Some(i64::from(o.throttle_ms)));
        assert_eq!(broker.request.queue_size(), 1);
        let Reply::Own(out) = v.reply else {
            panic!("throttled: {:?}", v.reply)
        };
        assert_eq!(
            decoded::<MetadataResponse>(&out, &header).throttle_time_ms,
            o.throttle_ms
        );
    }

    #[test]
    fn api_versions_are_capped_to_those_the_proxy_reads() {
        let broker = Broker::new();
        let header = header_of(&request_frame(
            ApiKey::ApiVersions,
            3,
            &ApiVersionsRequest::default(),
        ));
        let mut produce = ApiVersion::default();
        produce.api_key = ApiKey::Produce as i16;
        produce.max_version = i16::MAX;
        let mut body = ApiVersionsResponse::default();
        body.api_keys = vec![produce];
        let (response, _) = response_frame(&header, &body);
        let v = answer(&broker.path(), CLIENT, &header, &response, 1e6, 0).unwrap();
        let Reply::Own(out) = v.reply else {
            panic!("capped: {:?}", v.reply)
        };
        let capped: ApiVersionsResponse = decoded(&out, &header);
        assert_eq!(
            capped.api_keys[0].max_version,
            ApiKey::Produce.valid_versions().max
        );
    }

    #[test]
    fn a_version_the_proxy_cannot_read_is_refused_but_api_versions_is_always_answered() {
        let frame = |key: i16, version: i16| {
            let mut f = key.to_be_bytes().to_vec();
            f.extend_from_slice(&version.to_be_bytes());
            f.extend_from_slice(&[0; 8]);
            f
        };
        let err = check_version(&frame(0, 99)).unwrap_err().to_string();
        assert!(
            err.starts_with("unsupported version 99 of API 0 (Produce): expected"),
            "{err}"
        );
        assert!(check_version(&frame(0, 9)).is_ok());
        assert!(check_version(&frame(API_VERSIONS, 99)).is_ok());
        assert!(check_version(&frame(9999, 0)).is_ok()); // the header parser names it
        assert!(check_version(&[0, 0]).is_ok());
    }

    #[test]
    fn the_broker_time_is_charged_on_apis_kafka_answers_at_once() {
        assert!(answered_at_once(PRODUCE, 1));
        assert!(!answered_at_once(PRODUCE, -1)); // parked until the replicas have it
        assert!(answered_at_once(3, -1)); // Metadata
        assert!(!answered_at_once(1, -1)); // Fetch
    }
}
