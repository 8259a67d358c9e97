//! CreateTopics, CreatePartitions and DeleteTopics under the controller-mutation quota
//! (KIP-599): the topics of a request and the partitions each one creates or deletes, as
//! Kafka's controller counts them; the request rewritten without the topics a strict quota
//! refused; and the response merged back in the request's topic order, with
//! `THROTTLING_QUOTA_EXCEEDED` for those topics.
//!
//! How Kafka counts (`ReplicationControlManager`):
//!
//! * CreateTopics: the number of replica assignments when there are any, else
//!   `num_partitions`, or the broker's `num.partitions` when it is -1. A topic with an
//!   invalid count (0, or below -1), or one that exists already, fails before the quota:
//!   not counted.
//! * CreatePartitions: the partitions added, `count` minus the topic's partitions now; a
//!   topic that does not exist or does not grow fails before the quota: not counted.
//! * DeleteTopics: the topic's partitions now; an unknown topic is not counted.
//!
//! The partitions a topic has now come from a Metadata request the proxy sends to the
//! broker ([`metadata_request`]) before the mutation request, on the same connection.
//! Validate-only requests count as the others: Kafka's controller records them too.
//! The three messages are decoded and encoded whole with the `kafka-protocol` crate's
//! codec (Kafka's schemas): they are rare and small.

use std::collections::HashMap;

use bytes::{Bytes, BytesMut};
use kafka_protocol::messages::create_partitions_response::CreatePartitionsTopicResult;
use kafka_protocol::messages::create_topics_response::CreatableTopicResult;
use kafka_protocol::messages::delete_topics_response::DeletableTopicResult;
use kafka_protocol::messages::metadata_request::MetadataRequestTopic;
use kafka_protocol::messages::{
    ApiKey, CreatePartitionsRequest, CreatePartitionsResponse, CreateTopicsRequest,
    CreateTopicsResponse, DeleteTopicsRequest, DeleteTopicsResponse, MetadataRequest,
    MetadataResponse, RequestHeader as KpRequestHeader, ResponseHeader as KpResponseHeader,
    TopicName,
};
use kafka_protocol::protocol::{Decodable, Encodable, StrBytes};
use kquota_core::MutationApi;
use uuid::Uuid;

use crate::error::HeaderError;
use crate::header::{parse_response_header, RequestHeader};

/// API keys of the three mutation requests.
pub const CREATE_TOPICS: i16 = 19;
pub const DELETE_TOPICS: i16 = 20;
pub const CREATE_PARTITIONS: i16 = 37;

/// Kafka's `Errors.THROTTLING_QUOTA_EXCEEDED` and its message, which its strict quota puts
/// in a refused topic's result.
pub const THROTTLING_QUOTA_EXCEEDED: i16 = 89;
pub const THROTTLED_MESSAGE: &str = "The throttling quota has been exceeded.";

/// The Metadata version partition counts are asked with (topic ids in the response;
/// Kafka 3.1 and later).
pub const METADATA_VERSION: i16 = 12;

const METADATA: i16 = 3;

/// The mutation API of `api_key`, if it is one.
pub fn mutation_api(api_key: i16) -> Option<MutationApi> {
    match api_key {
        CREATE_TOPICS => Some(MutationApi::CreateTopics),
        DELETE_TOPICS => Some(MutationApi::DeleteTopics),
        CREATE_PARTITIONS => Some(MutationApi::CreatePartitions),
        _ => None,
    }
}

/// One topic of a mutation request.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct Topic {
    pub name: Option<String>,
    /// The nil id when the request names the topic only.
    pub id: Uuid,
    /// Partitions it creates or deletes; `None`: the controller refuses it before the
    /// quota (or it is unknown), so it is not counted.
    pub permits: Option<i64>,
    /// Refused by a strict quota: not forwarded, answered with error 89.
    pub throttled: bool,
}

#[derive(Debug, Clone)]
enum Body {
    Create(CreateTopicsRequest),
    Delete(DeleteTopicsRequest),
    Partitions(CreatePartitionsRequest),
}

/// A decoded CreateTopics, CreatePartitions or DeleteTopics request.
#[derive(Debug, Clone)]
pub struct MutationRequest {
    pub api: MutationApi,
    pub version: i16,
    /// The request's header bytes, kept as the client sent them.
    head: Bytes,
    body: Body,
    pub topics: Vec<Topic>,
}

/// Partitions per topic now, by name and by id.
#[derive(Debug, Clone, Default, PartialEq, Eq)]
pub struct PartitionCounts {
    pub by_name: HashMap<String, i64>,
    pub by_id: HashMap<Uuid, i64>,
}

fn unreadable(message: &'static str, version: i16) -> HeaderError {
    HeaderError::Unreadable { message, version }
}

fn topic(name: Option<&TopicName>, id: Uuid) -> Topic {
    Topic {
        name: name.map(|n| n.0.to_string()),
        id,
        permits: None,
        throttled: false,
    }
}

/// DeleteTopics names its topics in `topic_names` before v6.
fn delete_by_names(version: i16) -> bool {
    version < 6
}

impl MutationRequest {
    /// The mutation request `frame` whose header is `header`.
    pub fn parse(frame: &[u8], header: &RequestHeader<'_>) -> Result<Self, HeaderError> {
        let version = header.api_version;
        // a client's counts are checked against its bytes before anything is reserved
        crate::precheck::check_mutation_request(
            &frame[header.body_offset..],
            header.api_key,
            version,
        )?;
        let mut rest = Bytes::copy_from_slice(&frame[header.body_offset..]);
        let (api, body, topics) = match header.api_key {
            CREATE_TOPICS => {
                let body = CreateTopicsRequest::decode(&mut rest, version)
                    .map_err(|_| unreadable("CreateTopics request", version))?;
                let topics = body
                    .topics
                    .iter()
                    .map(|t| topic(Some(&t.name), Uuid::nil()))
                    .collect();
                (MutationApi::CreateTopics, Body::Create(body), topics)
            }
            DELETE_TOPICS => {
                let body = DeleteTopicsRequest::decode(&mut rest, version)
                    .map_err(|_| unreadable("DeleteTopics request", version))?;
                let topics = if delete_by_names(version) {
                    body.topic_names
                        .iter()
                        .map(|n| topic(Some(n), Uuid::nil()))
                        .collect()
                } else {
                    body.topics
                        .iter()
                        .map(|t| topic(t.name.as_ref(), t.topic_id))
                        .collect()
                };
                (MutationApi::DeleteTopics, Body::Delete(body), topics)
            }
            CREATE_PARTITIONS => {
                let body = CreatePartitionsRequest::decode(&mut rest, version)
                    .map_err(|_| unreadable("CreatePartitions request", version))?;
                let topics = body
                    .topics
                    .iter()
                    .map(|t| topic(Some(&t.name), Uuid::nil()))
                    .collect();
                (
                    MutationApi::CreatePartitions,
                    Body::Partitions(body),
                    topics,
                )
            }
            key => return Err(HeaderError::UnknownApiKey(key)),
        };
        if !rest.is_empty() {
            return Err(unreadable("mutation request", version));
        }
        Ok(MutationRequest {
            api,
            version,
            head: Bytes::copy_from_slice(&frame[..header.body_offset]),
            body,
            topics,
        })
    }

    /// The named topics, or `None` when some topic is named only by its id (then every
    /// topic's partitions are asked for).
    pub fn names(&self) -> Option<Vec<String>> {
        self.topics.iter().map(|t| t.name.clone()).collect()
    }

    /// Sets each topic's permits from `current` (partitions per topic now);
    /// `default_num_partitions` is the broker's `num.partitions`.
    pub fn count(&mut self, current: &PartitionCounts, default_num_partitions: i32) {
        let now = |t: &Topic| {
            t.name
                .as_ref()
                .and_then(|n| current.by_name.get(n))
                .or_else(|| (!t.id.is_nil()).then(|| current.by_id.get(&t.id)).flatten())
                .copied()
        };
        match &self.body {
            Body::Create(body) => {
                for (t, entry) in self.topics.iter_mut().zip(&body.topics) {
                    t.permits = if now(t).is_some() {
                        None // TOPIC_ALREADY_EXISTS, before the quota
                    } else if !entry.assignments.is_empty() {
                        Some(entry.assignments.len() as i64)
                    } else if entry.num_partitions == -1 {
                        Some(i64::from(default_num_partitions))
                    } else if entry.num_partitions > 0 {
                        Some(i64::from(entry.num_partitions))
                    } else {
                        None
                    };
                }
            }
            Body::Delete(_) => {
                for t in &mut self.topics {
                    t.permits = now(t);
                }
            }
            Body::Partitions(body) => {
                for (t, entry) in self.topics.iter_mut().zip(&body.topics) {
                    t.permits = now(t)
                        .map(|n| i64::from(entry.count) - n)
                        .filter(|added| *added > 0);
                }
            }
        }
    }

    /// Whether a strict quota refused some topic (the response is then merged here).
    pub fn any_refused(&self) -> bool {
        self.topics.iter().any(|t| t.throttled)
    }

    /// Whether every topic was refused (nothing goes to the broker).
    pub fn all_refused(&self) -> bool {
        self.topics.iter().all(|t| t.throttled)
    }

    /// The request frame (without its size) with only the topics not refused.
    pub fn rewritten(&self) -> Result<BytesMut, HeaderError> {
        let kept = |i: usize| !self.topics[i].throttled;
        let mut out = BytesMut::from(&self.head[..]);
        let written = match &self.body {
            Body::Create(body) => {
                let mut body = body.clone();
                body.topics = keep(body.topics, kept);
                body.encode(&mut out, self.version)
            }
            Body::Delete(body) => {
                let mut body = body.clone();
                if delete_by_names(self.version) {
                    body.topic_names = keep(body.topic_names, kept);
                } else {
                    body.topics = keep(body.topics, kept);
                }
                body.encode(&mut out, self.version)
            }
            Body::Partitions(body) => {
                let mut body = body.clone();
                body.topics = keep(body.topics, kept);
                body.encode(&mut out, self.version)
            }
        };
        written.map_err(|_| unreadable("rewritten mutation request", self.version))?;
        Ok(out)
    }

    /// The response frame (without its size) the client gets: the broker's results for
    /// the forwarded topics (`upstream`, `None` when nothing was forwarded) and error 89
    /// for the refused ones, in the request's order, with `throttle_time_ms` the larger of
    /// `throttle_ms` and the broker's.
    pub fn merged_response(
        &self,
        request: &RequestHeader<'_>,
        upstream: Option<&[u8]>,
        throttle_ms: i32,
    ) -> Result<BytesMut, HeaderError> {
        let header_version = request.response_header_version();
        let mut out = BytesMut::new();
        let body = match upstream {
            Some(frame) => {
                let header = parse_response_header(frame, header_version)?;
                out.extend_from_slice(&frame[..header.body_offset]);
                Some(Bytes::copy_from_slice(&frame[header.body_offset..]))
            }
            None => {
                let mut header = KpResponseHeader::default();
                header.correlation_id = request.correlation_id;
                header
                    .encode(&mut out, header_version)
                    .map_err(|_| unreadable("response header", header_version))?;
                None
            }
        };
        let message = || StrBytes::from_static_str(THROTTLED_MESSAGE);
        let name = |t: &Topic| TopicName(StrBytes::from_string(t.name.clone().unwrap_or_default()));
        match &self.body {
            Body::Create(_) => self.merge_into::<CreateTopicsResponse, _>(
                body,
                &mut out,
                "CreateTopics response",
                throttle_ms,
                |m| (&mut m.topics, &mut m.throttle_time_ms),
                |r| (Some(r.name.0.to_string()), r.topic_id),
                |t| {
                    let mut r = CreatableTopicResult::default();
                    (r.name, r.topic_id) = (name(t), t.id);
                    (r.error_code, r.error_message) = (THROTTLING_QUOTA_EXCEEDED, Some(message()));
                    r
                },
            )?,
            Body::Delete(_) => self.merge_into::<DeleteTopicsResponse, _>(
                body,
                &mut out,
                "DeleteTopics response",
                throttle_ms,
                |m| (&mut m.responses, &mut m.throttle_time_ms),
                |r| (r.name.as_ref().map(|n| n.0.to_string()), r.topic_id),
                |t| {
                    let mut r = DeletableTopicResult::default();
                    r.name = t.name.is_some().then(|| name(t));
                    r.topic_id = t.id;
                    (r.error_code, r.error_message) = (THROTTLING_QUOTA_EXCEEDED, Some(message()));
                    r
                },
            )?,
            Body::Partitions(_) => self.merge_into::<CreatePartitionsResponse, _>(
                body,
                &mut out,
                "CreatePartitions response",
                throttle_ms,
                |m| (&mut m.results, &mut m.throttle_time_ms),
                |r| (Some(r.name.0.to_string()), Uuid::nil()),
                |t| {
                    let mut r = CreatePartitionsTopicResult::default();
                    r.name = name(t);
                    (r.error_code, r.error_message) = (THROTTLING_QUOTA_EXCEEDED, Some(message()));
                    r
                },
            )?,
        }
        Ok(out)
    }

    /// The response `body` (`None`: an empty one) of type `M` with its results (`parts`)
    /// merged as [`Self::merge`] does and the larger throttle, written to `out`.
    #[allow(clippy::too_many_arguments)]
    fn merge_into<M: Decodable + Encodable + Default, R>(
        &self,
        body: Option<Bytes>,
        out: &mut BytesMut,
        what: &'static str,
        throttle_ms: i32,
        parts: impl Fn(&mut M) -> (&mut Vec<R>, &mut i32),
        key: impl Fn(&R) -> (Option<String>, Uuid),
        refused: impl Fn(&Topic) -> R,
    ) -> Result<(), HeaderError> {
        let bad = |()| unreadable(what, self.version);
        let mut response = decode_or_default::<M>(body, self.version).map_err(bad)?;
        let (results, throttle) = parts(&mut response);
        *results = self.merge(std::mem::take(results), key, refused);
        *throttle = (*throttle).max(throttle_ms);
        response
            .encode(out, self.version)
            .map_err(|_| unreadable(what, self.version))
    }

    /// The broker's results matched to the forwarded topics by name (else id), a refused
    /// topic's result in its place; results matching no topic go last (nothing is dropped).
    fn merge<R>(
        &self,
        results: Vec<R>,
        key: impl Fn(&R) -> (Option<String>, Uuid),
        refused: impl Fn(&Topic) -> R,
    ) -> Vec<R> {
        let mut left: Vec<Option<R>> = results.into_iter().map(Some).collect();
        let mut merged = Vec::with_capacity(self.topics.len() + left.len());
        for t in &self.topics {
            if t.throttled {
                merged.push(refused(t));
                continue;
            }
            let wanted = match &t.name {
                Some(name) => (Some(name.clone()), None),
                None => (None, Some(t.id)),
            };
            let found = left.iter_mut().find(|slot| {
                slot.as_ref().is_some_and(|r| {
                    let (name, id) = key(r);
                    match &wanted {
                        (Some(n), _) => name.as_deref() == Some(n.as_str()),
                        (None, Some(wanted_id)) => name.is_none() && id == *wanted_id,
                        (None, None) => false,
                    }
                })
            });
            if let Some(slot) = found {
                merged.extend(slot.take());
            }
        }
        merged.extend(left.into_iter().flatten());
        merged
    }
}

fn keep<T>(items: Vec<T>, kept: impl Fn(usize) -> bool) -> Vec<T> {
    items
        .into_iter()
        .enumerate()
        .filter(|(i, _)| kept(*i))
        .map(|(_, item)| item)
        .collect()
}

fn decode_or_default<M: Decodable + Default>(body: Option<Bytes>, version: i16) -> Result<M, ()> {
    match body {
        None => Ok(M::default()),
        Some(mut bytes) => {
            let message = M::decode(&mut bytes, version).map_err(|_| ())?;
            if bytes.is_empty() {
                Ok(message)
            } else {
                Err(())
            }
        }
    }
}

/// A Metadata request frame (without its size) for `names` (`None`: every topic), never
/// creating a topic.
pub fn metadata_request(
    correlation_id: i32,
    client_id: &str,
    names: Option<&[String]>,
) -> BytesMut {
    let mut header = KpRequestHeader::default();
    header.request_api_key = METADATA;
    header.request_api_version = METADATA_VERSION;
    header.correlation_id = correlation_id;
    header.client_id = Some(StrBytes::from_string(client_id.to_owned()));
    let mut body = MetadataRequest::default();
    body.topics = names.map(|names| {
        names
            .iter()
            .map(|n| {
                let mut t = MetadataRequestTopic::default();
                t.name = Some(TopicName(StrBytes::from_string(n.clone())));
                t
            })
            .collect()
    });
    body.allow_auto_topic_creation = false;
    let mut out = BytesMut::new();
    let header_version = ApiKey::Metadata.request_header_version(METADATA_VERSION);
    header
        .encode(&mut out, header_version)
        .expect("a Metadata v12 header encodes");
    body.encode(&mut out, METADATA_VERSION)
        .expect("a Metadata v12 request encodes");
    out
}

/// Partitions per topic in a Metadata response frame (without its size) of
/// [`METADATA_VERSION`]; topics with an error are left out.
pub fn partition_counts(response: &[u8]) -> Result<PartitionCounts, HeaderError> {
    let header_version = ApiKey::Metadata.response_header_version(METADATA_VERSION);
    let header = parse_response_header(response, header_version)?;
    let mut body = Bytes::copy_from_slice(&response[header.body_offset..]);
    let metadata = MetadataResponse::decode(&mut body, METADATA_VERSION)
        .map_err(|_| unreadable("Metadata response", METADATA_VERSION))?;
    let mut counts = PartitionCounts::default();
    for t in metadata.topics.iter().filter(|t| t.error_code == 0) {
        let n = t.partitions.len() as i64;
        if let Some(name) = &t.name {
            counts.by_name.insert(name.0.to_string(), n);
        }
        if !t.topic_id.is_nil() {
            counts.by_id.insert(t.topic_id, n);
        }
    }
    Ok(counts)
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::header::parse_request_header;
    use kafka_protocol::messages::create_partitions_request::CreatePartitionsTopic;
    use kafka_protocol::messages::create_topics_request::{
        CreatableReplicaAssignment, CreatableTopic,
    };
    use kafka_protocol::messages::delete_topics_request::DeleteTopicState;

    fn frame<M: Encodable>(key: ApiKey, version: i16, body: &M) -> Vec<u8> {
        let mut header = KpRequestHeader::default();
        header.request_api_key = key as i16;
        header.request_api_version = version;
        header.correlation_id = 5;
        header.client_id = Some(StrBytes::from_static_str("admin"));
        let mut out = BytesMut::new();
        header
            .encode(&mut out, key.request_header_version(version))
            .unwrap();
        body.encode(&mut out, version).unwrap();
        out.to_vec()
    }

    fn name(n: &str) -> TopicName {
        TopicName(StrBytes::from_string(n.to_owned()))
    }

    fn parsed(bytes: &[u8]) -> MutationRequest {
        MutationRequest::parse(bytes, &parse_request_header(bytes).unwrap()).unwrap()
    }

    fn counts(pairs: &[(&str, i64)]) -> PartitionCounts {
        PartitionCounts {
            by_name: pairs.iter().map(|(n, c)| ((*n).to_owned(), *c)).collect(),
            by_id: HashMap::new(),
        }
    }

    #[test]
    fn create_topics_count_assignments_num_partitions_and_the_default() {
        let topic = |n: &str, partitions: i32, assigned: usize| {
            let mut t = CreatableTopic::default();
            t.name = name(n);
            t.num_partitions = partitions;
            t.assignments = (0..assigned)
                .map(|i| {
                    let mut a = CreatableReplicaAssignment::default();
                    a.partition_index = i as i32;
                    a
                })
                .collect();
            t
        };
        let mut body = CreateTopicsRequest::default();
        body.topics = vec![
            topic("assigned", -1, 4),
            topic("default", -1, 0),
            topic("three", 3, 0),
            topic("zero", 0, 0),
            topic("exists", 5, 0),
        ];
        let bytes = frame(ApiKey::CreateTopics, 7, &body);
        let mut request = parsed(&bytes);
        request.count(&counts(&[("exists", 2)]), 6);
        let permits: Vec<_> = request.topics.iter().map(|t| t.permits).collect();
        assert_eq!(permits, vec![Some(4), Some(6), Some(3), None, None]);
        assert_eq!(request.names().unwrap().len(), 5);
    }

    #[test]
    fn delete_topics_by_name_and_by_id_count_the_partitions_they_have() {
        let mut old = DeleteTopicsRequest::default();
        old.topic_names = vec![name("a"), name("gone")];
        let bytes = frame(ApiKey::DeleteTopics, 5, &old);
        let mut request = parsed(&bytes);
        request.count(&counts(&[("a", 7)]), 1);
        let permits: Vec<_> = request.topics.iter().map(|t| t.permits).collect();
        assert_eq!(permits, vec![Some(7), None]);

        let id = Uuid::from_u128(42);
        let mut by_id = DeleteTopicState::default();
        by_id.topic_id = id;
        let mut new = DeleteTopicsRequest::default();
        new.topics = vec![by_id];
        let bytes = frame(ApiKey::DeleteTopics, 6, &new);
        let mut request = parsed(&bytes);
        assert_eq!(request.names(), None); // asks Metadata for every topic
        let mut current = counts(&[]);
        current.by_id.insert(id, 3);
        request.count(&current, 1);
        assert_eq!(request.topics[0].permits, Some(3));
    }

    #[test]
    fn a_strict_refusal_is_taken_out_and_merged_back_in_order() {
        let topic = |n: &str, count: i32| {
            let mut t = CreatePartitionsTopic::default();
            t.name = name(n);
            t.count = count;
            t
        };
        let mut body = CreatePartitionsRequest::default();
        body.topics = vec![topic("a", 40), topic("b", 40), topic("c", 5), topic("d", 1)];
        let bytes = frame(ApiKey::CreatePartitions, 3, &body);
        let header = parse_request_header(&bytes).unwrap();
        let mut request = parsed(&bytes);
        request.count(&counts(&[("a", 1), ("b", 1), ("c", 1), ("d", 1)]), 1);
        let permits: Vec<_> = request.topics.iter().map(|t| t.permits).collect();
        assert_eq!(permits, vec![Some(39), Some(39), Some(4), None]); // d does not grow
        request.topics[1].throttled = true;
        assert!(request.any_refused() && !request.all_refused());

        // the broker gets a, c and d, in that order
        let rewritten = request.rewritten().unwrap();
        let sent = parse_request_header(&rewritten).unwrap();
        let mut rest = Bytes::copy_from_slice(&rewritten[sent.body_offset..]);
        let forwarded = CreatePartitionsRequest::decode(&mut rest, 3).unwrap();
        let names: Vec<_> = forwarded
            .topics
            .iter()
            .map(|t| t.name.0.to_string())
            .collect();
        assert_eq!(names, ["a", "c", "d"]);

        // it answers them in another order, throttled 7 ms; b goes back in its place
        let result = |n: &str, code: i16| {
            let mut r = CreatePartitionsTopicResult::default();
            r.name = name(n);
            r.error_code = code;
            r
        };
        let mut answer = CreatePartitionsResponse::default();
        answer.throttle_time_ms = 7;
        answer.results = vec![result("d", 37), result("a", 0), result("c", 0)];
        let mut head = KpResponseHeader::default();
        head.correlation_id = header.correlation_id;
        let mut upstream = BytesMut::new();
        head.encode(&mut upstream, header.response_header_version())
            .unwrap();
        answer.encode(&mut upstream, 3).unwrap();
        let merged = request
            .merged_response(&header, Some(&upstream), 250)
            .unwrap();
        let at = parse_response_header(&merged, header.response_header_version()).unwrap();
        assert_eq!(at.correlation_id, 5);
        let mut rest = Bytes::copy_from_slice(&merged[at.body_offset..]);
        let read = CreatePartitionsResponse::decode(&mut rest, 3).unwrap();
        let got: Vec<_> = read
            .results
            .iter()
            .map(|r| (r.name.0.to_string(), r.error_code))
            .collect();
        let expected = [
            ("a", 0),
            ("b", THROTTLING_QUOTA_EXCEEDED),
            ("c", 0),
            ("d", 37),
        ];
        let expected: Vec<_> = expected
            .iter()
            .map(|(n, c)| ((*n).to_owned(), *c))
            .collect();
        assert_eq!(got, expected);
        assert_eq!(
            read.results[1].error_message.as_deref(),
            Some(THROTTLED_MESSAGE)
        );
        assert_eq!(read.throttle_time_ms, 250);

        // every topic refused: answered with no broker response at all
        for t in &mut request.topics {
            t.throttled = true;
        }
        let alone = request.merged_response(&header, None, 100).unwrap();
        let at = parse_response_header(&alone, header.response_header_version()).unwrap();
        let mut rest = Bytes::copy_from_slice(&alone[at.body_offset..]);
        let read = CreatePartitionsResponse::decode(&mut rest, 3).unwrap();
        assert_eq!(read.results.len(), 4);
        assert!(read
            .results
            .iter()
            .all(|r| r.error_code == THROTTLING_QUOTA_EXCEEDED));
        assert_eq!(read.throttle_time_ms, 100);
    }

    #[test]
    fn partition_counts_come_from_a_metadata_answer_without_errored_topics() {
        use kafka_protocol::messages::metadata_response::{
            MetadataResponsePartition, MetadataResponseTopic,
        };
        let request = metadata_request(OWN, "admin", Some(&["a".to_owned()]));
        let header = parse_request_header(&request).unwrap();
        assert_eq!((header.api_key, header.api_version), (3, METADATA_VERSION));
        let topic = |n: &str, partitions: usize, error: i16| {
            let mut t = MetadataResponseTopic::default();
            t.name = Some(name(n));
            t.topic_id = Uuid::from_u128(partitions as u128 + 1);
            t.error_code = error;
            t.partitions = vec![MetadataResponsePartition::default(); partitions];
            t
        };
        let mut answer = MetadataResponse::default();
        answer.topics = vec![topic("a", 3, 0), topic("deleting", 2, 3)];
        let mut out = BytesMut::new();
        let mut head = KpResponseHeader::default();
        head.correlation_id = OWN;
        head.encode(&mut out, 1).unwrap();
        answer.encode(&mut out, METADATA_VERSION).unwrap();
        let counts = partition_counts(&out).unwrap();
        assert_eq!(counts.by_name, HashMap::from([("a".to_owned(), 3)]));
        assert_eq!(counts.by_id, HashMap::from([(Uuid::from_u128(4), 3)]));
    }

    const OWN: i32 = 0x7F00_0001;
}
