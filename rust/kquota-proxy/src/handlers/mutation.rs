//! The controller-mutation quota (KIP-599) of CreateTopics, CreatePartitions and
//! DeleteTopics: each topic's partitions recorded in request order, a strict quota
//! refusing the topics once its bucket is overdrawn; the answer throttled by the larger of
//! the request quota's throttle and the mutation throttle.

use std::sync::Arc;

use kquota_core::{
    ControllerMutationQuotaManager, MutationRequestQuota, QuotaType, Request, RequestPath,
};

use super::{Client, Reply, Verdict};
use crate::error::Closed;
use crate::header::RequestHeader;
use crate::mutation::{MutationRequest, PartitionCounts};
use crate::rewrite::with_throttle;

/// A mutation request under the controller-mutation quota, as recorded.
pub(crate) struct RecordedMutation {
    pub request: MutationRequest,
    quota: MutationRequestQuota,
    /// Partitions recorded (accepted).
    pub permits: i64,
}

impl RecordedMutation {
    /// Every topic refused: answered by the proxy, nothing goes to the broker.
    pub(crate) fn local(&self) -> bool {
        self.request.all_refused()
    }

    /// The request to forward in place of the client's when some of its topics were
    /// refused (and not all: then nothing is forwarded).
    pub(crate) fn forwarded(&self) -> Result<Option<bytes::BytesMut>, Closed> {
        if self.request.any_refused() && !self.local() {
            return self.request.rewritten().map(Some).map_err(Closed::request);
        }
        Ok(None)
    }
}

/// Counts `request`'s partitions per topic (`counts`: the topics' partitions now; a
/// CreateTopics topic asking for -1 gets `default_num_partitions`) and records them in the
/// client's controller-mutation quota in request order; a strict quota (CreateTopics v6+,
/// CreatePartitions v3+, DeleteTopics v5+) refuses the topics once the bucket is overdrawn
/// (Kafka's `StrictControllerMutationQuota`).
pub(crate) fn record(
    manager: &Arc<ControllerMutationQuotaManager>,
    user: &str,
    header: &RequestHeader<'_>,
    mut request: MutationRequest,
    counts: &PartitionCounts,
    default_num_partitions: i32,
    now: i64,
) -> Result<RecordedMutation, Closed> {
    request.count(counts, default_num_partitions);
    let strict = request.api.is_strict(header.api_version);
    let quota =
        MutationRequestQuota::new(Arc::clone(manager), user, header.client_id(), strict, now);
    let mut permits = 0;
    for topic in &mut request.topics {
        let Some(n) = topic.permits else { continue };
        if quota.record(n as f64, now)?.accepted {
            permits += n;
        } else {
            topic.throttled = true;
        }
    }
    Ok(RecordedMutation {
        request,
        quota,
        permits,
    })
}

/// Answers a mutation request (`response`: the broker's, `None` when nothing was
/// forwarded): the request quota recorded as for any request, and the larger of its
/// throttle and the mutation throttle applied through the manager of the larger one (the
/// request manager when equal), as Kafka's `sendResponseMaybeThrottleWithControllerQuota`
/// does; the broker's results merged with the refused topics' errors. The outcome is the
/// request quota's, with the applied throttle.
#[allow(clippy::too_many_arguments)]
pub(crate) fn answer(
    path: &RequestPath<'_>,
    mutation: Option<&Arc<ControllerMutationQuotaManager>>,
    client: Client<'_>,
    header: &RequestHeader<'_>,
    recorded: &RecordedMutation,
    response: Option<&[u8]>,
    handled_ns: f64,
    now: i64,
) -> Result<Verdict, Closed> {
    let (user, client_id) = (client.user, client.client_id);
    let mut outcome = path.record(user, client_id, &Request::other(handled_ns), now)?;
    let request_ms = if outcome.throttled_by.is_some() {
        outcome.throttle_ms
    } else {
        0
    };
    let mutation_ms = recorded.quota.throttle_time(now);
    let throttle = mutation_ms.max(request_ms);
    outcome.throttle_ms = throttle.max(0);
    outcome.throttled_by = None;
    if throttle > 0 {
        let channel = Some(client.channel);
        let end = match mutation {
            Some(manager) if mutation_ms > request_ms => {
                manager.throttle(user, client_id, i64::from(throttle), now, channel)?
            }
            _ => {
                outcome.throttled_by = Some(QuotaType::Request);
                path.manager(QuotaType::Request).throttle(
                    user,
                    client_id,
                    i64::from(throttle),
                    now,
                    channel,
                )?
            }
        };
        outcome.muted_until_ms = Some(end);
    }
    let rewritten = if recorded.request.any_refused() {
        let merged = recorded
            .request
            .merged_response(header, response, outcome.throttle_ms);
        Some(merged.map_err(|err| Closed::Upstream(format!("response: {err}")))?)
    } else if throttle > 0 {
        response.and_then(|f| with_throttle(f, header, throttle))
    } else {
        None
    };
    let reply = match (rewritten, response) {
        (Some(rewritten), _) => Reply::Own(rewritten),
        (None, Some(_)) => Reply::AsIs,
        (None, None) => return Err(Closed::Client("a mutation answered by no one".to_owned())),
    };
    Ok(Verdict {
        outcome,
        size: recorded.permits as f64,
        thread_ns: handled_ns,
        mutation_throttle_ms: Some(mutation_ms),
        reply,
    })
}
