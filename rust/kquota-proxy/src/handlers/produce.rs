//! Produce: the request frame's size on the produce quota and the request's time on the
//! request quota, the larger throttle applied (the request quota's on a tie). An `acks=0`
//! request gets no response, but a throttle still mutes its channel.

use kquota_core::{Request, RequestPath};

use super::{check, throttled_reply, Client, Reply, Verdict};
use crate::error::Closed;
use crate::header::RequestHeader;

/// A produce request of `size` bytes answered with `response` (`None` for `acks=0`,
/// which has none).
#[allow(clippy::too_many_arguments)]
pub(crate) fn answer(
    path: &RequestPath<'_>,
    client: Client<'_>,
    header: &RequestHeader<'_>,
    size: usize,
    acks: i16,
    response: Option<&[u8]>,
    handled_ns: f64,
    now: i64,
) -> Result<Verdict, Closed> {
    let mut verdict = check(
        path,
        client,
        &Request::produce(size as f64, handled_ns, acks),
        now,
    )?;
    verdict.reply = match response {
        None => Reply::Nothing,
        Some(response) => throttled_reply(response, header, verdict.outcome.throttle_ms),
    };
    Ok(verdict)
}

#[cfg(test)]
mod tests {
    use kafka_protocol::messages::produce_response::{
        PartitionProduceResponse, TopicProduceResponse,
    };
    use kafka_protocol::messages::{ApiKey, ProduceRequest, ProduceResponse, TopicName};
    use kafka_protocol::protocol::StrBytes;
    use kquota_core::QuotaType;

    use super::*;
    use crate::handlers::testing::{
        decoded, header_of, request_frame, response_frame, user, Broker, CLIENT,
    };

    fn produce() -> RequestHeader<'static> {
        header_of(&request_frame(
            ApiKey::Produce,
            9,
            &ProduceRequest::default(),
        ))
    }

    #[test]
    fn a_produce_over_its_quota_is_answered_at_once_with_its_throttle_and_mutes_its_channel() {
        // 1000 B/s: 15 000 B at t=0 is 1500 B/s over Kafka's 10 s, a 5000 ms throttle
        let broker = Broker::new();
        broker.produce.set_quota(&user("u"), 1000.0).unwrap();
        let header = produce();
        let (response, _) = response_frame(&header, &ProduceResponse::default());
        let path = broker.path();
        let v = answer(&path, CLIENT, &header, 15_000, -1, Some(&response), 1e6, 0).unwrap();
        assert_eq!(v.outcome.throttle_ms, 5000);
        assert_eq!(v.outcome.throttled_by, Some(QuotaType::Produce));
        assert_eq!(v.outcome.muted_until_ms, Some(5000));
        assert_eq!((v.size, v.thread_ns), (15_000.0, 1e6));
        // the channel waits in the produce manager's delay queue, as Kafka's does
        assert_eq!(broker.produce.queue_size(), 1);
        assert_eq!(broker.produce.next_unmute_ms(), Some(5000));
        assert_eq!(broker.request.queue_size(), 0);
        let Reply::Own(out) = v.reply else {
            panic!("a throttled response carries its throttle: {:?}", v.reply)
        };
        assert_eq!(
            decoded::<ProduceResponse>(&out, &header).throttle_time_ms,
            5000
        );
    }

    #[test]
    fn an_acks_0_produce_gets_no_response_but_its_throttle_still_mutes() {
        let broker = Broker::new();
        broker.produce.set_quota(&user("u"), 1000.0).unwrap();
        let header = produce();
        let v = answer(&broker.path(), CLIENT, &header, 15_000, 0, None, 1e6, 0).unwrap();
        assert_eq!(v.reply, Reply::Nothing);
        assert_eq!(v.outcome.muted_until_ms, Some(5000));
        assert_eq!(broker.produce.queue_size(), 1);
    }

    #[test]
    fn a_produce_within_its_quota_passes_the_brokers_answer_through_errors_and_all() {
        let broker = Broker::new();
        broker.produce.set_quota(&user("u"), 1000.0).unwrap();
        let header = produce();
        let mut partition = PartitionProduceResponse::default();
        partition.error_code = 29; // TOPIC_AUTHORIZATION_FAILED: the broker's answer
        let mut topic = TopicProduceResponse::default();
        topic.name = TopicName(StrBytes::from_static_str("t"));
        topic.partition_responses = vec![partition];
        let mut refused = ProduceResponse::default();
        refused.responses = vec![topic];
        let (response, _) = response_frame(&header, &refused);
        let v = answer(
            &broker.path(),
            CLIENT,
            &header,
            100,
            -1,
            Some(&response),
            1e6,
            0,
        )
        .unwrap();
        assert_eq!(v.reply, Reply::AsIs);
        assert_eq!(v.outcome.muted_until_ms, None);
        assert_eq!(broker.produce.queue_size(), 0);
    }

    #[test]
    fn where_produce_and_request_quotas_both_throttle_the_larger_applies_through_its_manager() {
        let broker = Broker::new();
        broker.produce.set_quota(&user("u"), 1000.0).unwrap();
        broker.request.set_quota(&user("u"), 1.0).unwrap(); // 1% of a thread
        let header = produce();
        let (response, _) = response_frame(&header, &ProduceResponse::default());
        // 10 500 B is a 500 ms produce throttle; 2 s of handler time, far over 1% of a
        // thread, makes a larger one
        let path = broker.path();
        let v = answer(&path, CLIENT, &header, 10_500, -1, Some(&response), 2e9, 0).unwrap();
        let o = v.outcome;
        assert_eq!(o.produce_throttle_ms, 500);
        assert!(o.request_throttle_ms > o.produce_throttle_ms, "{o:?}");
        assert_eq!(o.throttle_ms, o.request_throttle_ms);
        assert_eq!(o.throttled_by, Some(QuotaType::Request));
        assert_eq!(o.muted_until_ms, Some(i64::from(o.request_throttle_ms)));
        assert_eq!(
            (broker.request.queue_size(), broker.produce.queue_size()),
            (1, 0)
        );
        let Reply::Own(out) = v.reply else {
            panic!("throttled: {:?}", v.reply)
        };
        let carried = decoded::<ProduceResponse>(&out, &header).throttle_time_ms;
        assert_eq!(carried, o.throttle_ms);
    }
}
