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
