//! Who has quota administration (DescribeClientQuotas, AlterClientQuotas) answered by the
//! proxy from its store ([`crate::access`]): a principal not listed is refused with
//! Kafka's answer; with `ask_cluster`, the cluster is asked first and its refusal passes
//! through to the client as the broker gave it.

use bytes::BytesMut;

use crate::access::{cluster_probe, cluster_refusal, refusal, AdminAccess};
use crate::error::Closed;
use crate::header::RequestHeader;

/// A response of the proxy's making and where its body starts.
pub(crate) type Response = (BytesMut, usize);

/// What to do with a quota administration request.
#[derive(Debug)]
pub(crate) enum Access {
    /// Answer it from the store.
    Answer,
    /// Refuse it with this answer: the principal is not listed.
    Refuse(Response),
    /// Send the cluster this probe first (on the proxy's own correlation id), and decide
    /// on its answer with [`cluster_says`].
    AskCluster(BytesMut),
}

/// Whether `user` may have the request answered; `own_id` gives the correlation id of a
/// probe, taken only when one is sent.
pub(crate) fn authorize(
    access: &AdminAccess,
    user: &str,
    header: &RequestHeader<'_>,
    frame: &[u8],
    own_id: impl FnOnce() -> i32,
) -> Result<Access, Closed> {
    if !access.lists(user) {
        return refusal(frame, header)
            .map(Access::Refuse)
            .map_err(Closed::request);
    }
    if !access.ask_cluster {
        return Ok(Access::Answer);
    }
    let probe = cluster_probe(frame, header, own_id()).map_err(Closed::request)?;
    Ok(Access::AskCluster(probe))
}

/// The cluster's answer to the probe: `None` when it allows the request, else its refusal,
/// under the client's correlation id.
pub(crate) fn cluster_says(
    response: BytesMut,
    header: &RequestHeader<'_>,
) -> Result<Option<Response>, Closed> {
    cluster_refusal(response, header)
        .map_err(|err| Closed::Upstream(format!("the cluster's answer on quota access: {err}")))
}

#[cfg(test)]
mod tests {
    use std::collections::BTreeSet;

    use kafka_protocol::messages::describe_client_quotas_request::DescribeClientQuotasRequest;
    use kafka_protocol::messages::{ApiKey, DescribeClientQuotasResponse};
    use kafka_protocol::protocol::StrBytes;

    use super::*;
    use crate::access::CLUSTER_AUTHORIZATION_FAILED;
    use crate::handlers::testing::{decoded, header_of, request_frame, response_frame};
    use crate::header::parse_response_header;

    fn describe() -> (Vec<u8>, RequestHeader<'static>) {
        let body = DescribeClientQuotasRequest::default();
        let frame = request_frame(ApiKey::DescribeClientQuotas, 1, &body).to_vec();
        let header = header_of(&frame);
        (frame, header)
    }

    fn listing(ask_cluster: bool) -> AdminAccess {
        AdminAccess {
            ask_cluster,
            users: Some(BTreeSet::from(["admin".to_owned()])),
        }
    }

    fn no_probe() -> i32 {
        panic!("no probe is sent")
    }

    #[test]
    fn a_principal_not_listed_is_refused_with_kafkas_answer_and_nothing_asked() {
        let (frame, header) = describe();
        let Access::Refuse((answer, _)) =
            authorize(&listing(true), "mallory", &header, &frame, no_probe).unwrap()
        else {
            panic!("refused")
        };
        let body: DescribeClientQuotasResponse = decoded(&answer, &header);
        assert_eq!(body.error_code, CLUSTER_AUTHORIZATION_FAILED);
        assert_eq!(
            parse_response_header(&answer, 1).unwrap().correlation_id,
            77
        );
    }

    #[test]
    fn a_listed_principal_is_answered_or_the_cluster_asked_first() {
        let (frame, header) = describe();
        let access = listing(false);
        let answered = authorize(&access, "admin", &header, &frame, no_probe).unwrap();
        assert!(matches!(answered, Access::Answer));
        let Access::AskCluster(probe) =
            authorize(&listing(true), "admin", &header, &frame, || 0x7F00_0003).unwrap()
        else {
            panic!("the cluster is asked")
        };
        assert_eq!(header_of(&probe).correlation_id, 0x7F00_0003);
    }

    #[test]
    fn the_clusters_refusal_passes_through_as_the_broker_gave_it() {
        let (_, header) = describe();
        let mut refused = DescribeClientQuotasResponse::default();
        refused.error_code = CLUSTER_AUTHORIZATION_FAILED;
        refused.error_message = Some(StrBytes::from_static_str("the broker's own words"));
        let probe = header_of(&request_frame(
            ApiKey::DescribeClientQuotas,
            1,
            &DescribeClientQuotasRequest::default(),
        ));
        let (response, _) = response_frame(&probe, &refused);
        let (answer, _) = cluster_says(response, &header).unwrap().expect("refused");
        assert_eq!(
            decoded::<DescribeClientQuotasResponse>(&answer, &header),
            refused
        );
        assert_eq!(
            parse_response_header(&answer, 1).unwrap().correlation_id,
            77
        );
        // allowed: answered from the store
        let (allowed, _) = response_frame(&probe, &DescribeClientQuotasResponse::default());
        assert!(cluster_says(allowed, &header).unwrap().is_none());
    }
}
