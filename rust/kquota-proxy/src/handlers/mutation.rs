//! The controller-mutation quota (KIP-599) of CreateTopics, CreatePartitions and
//! DeleteTopics: each topic's partitions recorded in request order, a strict quota
//! refusing the topics once its bucket is overdrawn; the answer throttled as the core's
//! [`mutation_response_throttle`] decides.

use std::sync::Arc;

use kquota_core::{
    mutation_response_throttle, ControllerMutationQuotaManager, MutationRequestQuota,
    MutationThrottledBy, QuotaType, Request, RequestPath,
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
/// forwarded): the request quota recorded as for any request, and the response's throttle
/// ([`mutation_response_throttle`]: the larger of the request and mutation throttles, ties
/// to the request quota) applied through that quota's manager; the broker's results
/// merged with the refused topics' errors. The outcome is the
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
    let (throttle, by) = mutation_response_throttle(request_ms, mutation_ms);
    outcome.throttle_ms = throttle;
    outcome.throttled_by = None;
    if let Some(by) = by {
        let channel = Some(client.channel);
        let end = match (by, mutation) {
            (MutationThrottledBy::ControllerMutation, Some(manager)) => {
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

#[cfg(test)]
mod tests {
    use kafka_protocol::messages::create_topics_request::CreatableTopic;
    use kafka_protocol::messages::create_topics_response::CreatableTopicResult;
    use kafka_protocol::messages::{ApiKey, CreateTopicsRequest, CreateTopicsResponse, TopicName};
    use kafka_protocol::protocol::StrBytes;

    use super::*;
    use crate::handlers::testing::{
        decoded, header_of, request_frame, response_frame, user, Broker, CLIENT,
    };

    /// 5 partitions/s.
    fn mutation_manager() -> Arc<ControllerMutationQuotaManager> {
        let manager = ControllerMutationQuotaManager::with_defaults();
        manager.set_quota(&user("u"), 5.0).unwrap();
        Arc::new(manager)
    }

    fn name(n: &str) -> TopicName {
        TopicName(StrBytes::from_string(n.to_owned()))
    }

    /// A CreateTopics request v`version` of topics of 40 partitions each.
    fn create(version: i16, names: &[&str]) -> (Vec<u8>, RequestHeader<'static>) {
        let mut body = CreateTopicsRequest::default();
        body.topics = names
            .iter()
            .map(|n| {
                let mut t = CreatableTopic::default();
                t.name = name(n);
                t.num_partitions = 40;
                t
            })
            .collect();
        let frame = request_frame(ApiKey::CreateTopics, version, &body).to_vec();
        let header = header_of(&frame);
        (frame, header)
    }

    fn recorded(
        manager: &Arc<ControllerMutationQuotaManager>,
        version: i16,
        names: &[&str],
    ) -> (RecordedMutation, RequestHeader<'static>) {
        let (frame, header) = create(version, names);
        let request = MutationRequest::parse(&frame, &header).unwrap();
        let counts = PartitionCounts::default();
        (
            record(manager, "u", &header, request, &counts, 1, 0).unwrap(),
            header,
        )
    }

    /// The broker's answer to the forwarded topics.
    fn created(header: &RequestHeader<'_>, names: &[&str]) -> Vec<u8> {
        let mut body = CreateTopicsResponse::default();
        body.topics = names
            .iter()
            .map(|n| {
                let mut t = CreatableTopicResult::default();
                t.name = name(n);
                t
            })
            .collect();
        response_frame(header, &body).0.to_vec()
    }

    #[test]
    fn a_strict_quota_refuses_the_topics_once_its_bucket_is_overdrawn() {
        let manager = mutation_manager();
        let (recorded, header) = recorded(&manager, 6, &["a", "b", "c"]);
        // a (40) is taken while the bucket is not overdrawn; then b and c are refused
        assert_eq!(recorded.permits, 40);
        let refused: Vec<_> = recorded
            .request
            .topics
            .iter()
            .map(|t| t.throttled)
            .collect();
        assert_eq!(refused, vec![false, true, true]);
        assert!(!recorded.local());
        let forwarded = recorded.forwarded().unwrap().expect("b and c taken out");
        let sent = MutationRequest::parse(&forwarded, &header_of(&forwarded)).unwrap();
        assert_eq!(sent.names().unwrap(), vec!["a"]);

        let broker = Broker::new();
        let response = created(&header, &["a"]);
        let path = broker.path();
        let v = answer(
            &path,
            Some(&manager),
            CLIENT,
            &header,
            &recorded,
            Some(&response),
            1e6,
            0,
        )
        .unwrap();
        let mutation_ms = v.mutation_throttle_ms.unwrap();
        // 40 partitions over at 5/s
        assert_eq!(mutation_ms, 8000);
        assert_eq!(v.outcome.throttle_ms, mutation_ms);
        assert_eq!(v.outcome.throttled_by, None); // the mutation manager's, not a request path's
        assert_eq!(v.outcome.muted_until_ms, Some(8000));
        assert_eq!((manager.queue_size(), broker.request.queue_size()), (1, 0));
        assert_eq!(v.size, 40.0);
        let Reply::Own(merged) = v.reply else {
            panic!("merged: {:?}", v.reply)
        };
        let body: CreateTopicsResponse = decoded(&merged, &header);
        assert_eq!(body.throttle_time_ms, 8000);
        let codes: Vec<_> = body
            .topics
            .iter()
            .map(|t| (t.name.0.to_string(), t.error_code))
            .collect();
        // THROTTLING_QUOTA_EXCEEDED for the refused one, in the request's order
        assert_eq!(codes, [("a".into(), 0), ("b".into(), 89), ("c".into(), 89)]);
    }

    #[test]
    fn a_request_all_refused_is_answered_by_the_proxy_alone() {
        let manager = mutation_manager();
        recorded(&manager, 6, &["a", "b"]); // overdrawn
        let (recorded, header) = recorded(&manager, 6, &["c"]);
        assert!(recorded.local());
        assert_eq!(recorded.forwarded().unwrap(), None);
        let broker = Broker::new();
        let path = broker.path();
        let v = answer(
            &path,
            Some(&manager),
            CLIENT,
            &header,
            &recorded,
            None,
            1e6,
            0,
        )
        .unwrap();
        let Reply::Own(answer) = v.reply else {
            panic!("the proxy's own answer: {:?}", v.reply)
        };
        let body: CreateTopicsResponse = decoded(&answer, &header);
        assert_eq!(body.topics[0].error_code, 89);
        assert_eq!(body.throttle_time_ms, v.outcome.throttle_ms);
    }

    #[test]
    fn a_lenient_quota_accepts_every_topic_and_throttles_the_answer() {
        let manager = mutation_manager();
        let (recorded, header) = recorded(&manager, 5, &["a", "b", "c"]);
        assert_eq!(recorded.permits, 120);
        assert_eq!(recorded.forwarded().unwrap(), None); // sent as the client wrote it
        let broker = Broker::new();
        let response = created(&header, &["a", "b", "c"]);
        let path = broker.path();
        let v = answer(
            &path,
            Some(&manager),
            CLIENT,
            &header,
            &recorded,
            Some(&response),
            1e6,
            0,
        )
        .unwrap();
        assert_eq!(v.mutation_throttle_ms, Some(24_000)); // 120 / 5
        let Reply::Own(out) = v.reply else {
            panic!("throttled: {:?}", v.reply)
        };
        assert_eq!(
            decoded::<CreateTopicsResponse>(&out, &header).throttle_time_ms,
            24_000
        );
    }

    #[test]
    fn the_larger_of_the_request_and_mutation_throttles_applies_through_its_manager() {
        let manager = mutation_manager();
        manager.set_quota(&user("u"), 100.0).unwrap(); // 40 partitions: a 400 ms throttle
        let (recorded, header) = recorded(&manager, 6, &["a", "b"]);
        let broker = Broker::new();
        broker.request.set_quota(&user("u"), 0.01).unwrap();
        let response = created(&header, &["a", "b"]);
        let path = broker.path();
        // 100 s of handler time against 0.01% of a thread: the request quota's largest
        // throttle (its 1 s window), above the mutation's
        let v = answer(
            &path,
            Some(&manager),
            CLIENT,
            &header,
            &recorded,
            Some(&response),
            1e11,
            0,
        )
        .unwrap();
        assert_eq!(v.mutation_throttle_ms, Some(400));
        let o = v.outcome;
        assert_eq!(
            (o.throttle_ms, o.request_throttle_ms),
            (1000, 1000),
            "{o:?}"
        );
        assert_eq!(o.throttled_by, Some(QuotaType::Request));
        assert_eq!(o.muted_until_ms, Some(i64::from(o.throttle_ms)));
        assert_eq!((manager.queue_size(), broker.request.queue_size()), (0, 1));
    }
}
