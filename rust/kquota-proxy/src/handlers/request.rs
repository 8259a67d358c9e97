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
