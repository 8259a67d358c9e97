//! Who may administer the quotas a gateway keeps (KIP-546's DescribeClientQuotas and
//! AlterClientQuotas, answered from its store).
//!
//! A Kafka cluster lets a principal alter client quotas when its authorizer grants
//! ALTER_CONFIGS on the cluster resource, and describe them with DESCRIBE_CONFIGS; others
//! get `CLUSTER_AUTHORIZATION_FAILED`. A gateway that answered these requests for anyone
//! who reaches it would let a client lift its own quota, so before it touches its store it
//! applies an [`AdminAccess`]:
//!
//! * **ask the cluster**: the same request goes to the cluster first, on the client's own
//!   upstream connection (authenticated as the client, since the gateway relays SASL), an
//!   alteration with `validate_only` set. Where the cluster refuses it, the client gets
//!   the cluster's own answer; otherwise the gateway answers from its store. A cluster
//!   without an authorizer allows everyone, as it would allow them its own quotas.
//! * **listed principals**: only connections whose principal (`User:NAME`, adopted once
//!   the broker accepted the SASL exchange) is in the list; others get Kafka's refusal,
//!   built by the gateway.
//!
//! Both may apply at once (a principal must then pass both); neither lets anyone in.

use std::collections::BTreeSet;

use bytes::{Bytes, BytesMut};
use kafka_protocol::messages::{
    alter_client_quotas_response, AlterClientQuotasRequest, AlterClientQuotasResponse,
    DescribeClientQuotasResponse,
};
use kafka_protocol::protocol::{Decodable, Encodable, StrBytes};

use crate::admin::{response_head, unreadable, ALTER_CLIENT_QUOTAS, DESCRIBE_CLIENT_QUOTAS};
use crate::error::HeaderError;
use crate::header::{parse_response_header, RequestHeader};

/// Kafka's error code for a principal the cluster's authorizer refuses.
pub const CLUSTER_AUTHORIZATION_FAILED: i16 = 31;

/// The message of Kafka's `ClusterAuthorizationException` when none is given.
pub const CLUSTER_AUTHORIZATION_MESSAGE: &str = "Cluster authorization failed.";

/// Who may administer a gateway's quotas.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct AdminAccess {
    /// Ask the cluster on the client's own connection first.
    pub ask_cluster: bool,
    /// The user names (of principals `User:NAME`) allowed; `None`: any principal.
    pub users: Option<BTreeSet<String>>,
}

impl Default for AdminAccess {
    /// Whoever the cluster allows.
    fn default() -> Self {
        AdminAccess {
            ask_cluster: true,
            users: None,
        }
    }
}

impl AdminAccess {
    /// Everyone (nothing asked, no list): the behaviour of a gateway without an access
    /// policy, for tests and closed networks.
    pub fn anyone() -> Self {
        AdminAccess {
            ask_cluster: false,
            users: None,
        }
    }

    /// Whether the list (if any) admits `user`.
    pub fn lists(&self, user: &str) -> bool {
        self.users.as_ref().is_none_or(|users| users.contains(user))
    }
}

/// The request the gateway sends the cluster to learn whether it allows the client's
/// `frame` (whose header is `header`): the same frame with `correlation_id`, and an
/// AlterClientQuotas with `validate_only` set, so that the cluster changes nothing.
pub fn cluster_probe(
    frame: &[u8],
    header: &RequestHeader<'_>,
    correlation_id: i32,
) -> Result<BytesMut, HeaderError> {
    if frame.len() < 8 || header.body_offset > frame.len() {
        return Err(HeaderError::Unreadable {
            message: "quota administration request",
            version: header.api_version,
        });
    }
    let mut out = BytesMut::with_capacity(frame.len());
    out.extend_from_slice(&frame[..header.body_offset]);
    out[4..8].copy_from_slice(&correlation_id.to_be_bytes());
    match header.api_key {
        DESCRIBE_CLIENT_QUOTAS => out.extend_from_slice(&frame[header.body_offset..]),
        ALTER_CLIENT_QUOTAS => {
            let mut body = Bytes::copy_from_slice(&frame[header.body_offset..]);
            let mut request = AlterClientQuotasRequest::decode(&mut body, header.api_version)
                .map_err(|_| unreadable("AlterClientQuotas request", header.api_version))?;
            request.validate_only = true;
            request
                .encode(&mut out, header.api_version)
                .map_err(|_| unreadable("AlterClientQuotas request", header.api_version))?;
        }
        key => return Err(HeaderError::UnknownApiKey(key)),
    }
    Ok(out)
}

/// The cluster's answer to a [`cluster_probe`] of the client's request `header`: `None`
/// when it allows the client, else the answer for the client (the cluster's refusal with
/// the client's correlation id) and its body's offset.
pub fn cluster_refusal(
    response: BytesMut,
    header: &RequestHeader<'_>,
) -> Result<Option<(BytesMut, usize)>, HeaderError> {
    let at = parse_response_header(&response, header.response_header_version())?;
    let mut body = Bytes::copy_from_slice(&response[at.body_offset..]);
    let version = header.api_version;
    let refused = match header.api_key {
        DESCRIBE_CLIENT_QUOTAS => {
            DescribeClientQuotasResponse::decode(&mut body, version)
                .map_err(|_| unreadable("DescribeClientQuotas response", version))?
                .error_code
                == CLUSTER_AUTHORIZATION_FAILED
        }
        ALTER_CLIENT_QUOTAS => AlterClientQuotasResponse::decode(&mut body, version)
            .map_err(|_| unreadable("AlterClientQuotas response", version))?
            .entries
            .iter()
            .any(|e| e.error_code == CLUSTER_AUTHORIZATION_FAILED),
        key => return Err(HeaderError::UnknownApiKey(key)),
    };
    if !refused {
        return Ok(None);
    }
    let mut answer = response;
    answer[..4].copy_from_slice(&header.correlation_id.to_be_bytes());
    Ok(Some((answer, at.body_offset)))
}

/// Kafka's refusal of the quota administration `frame` (whose header is `header`) to a
/// principal without the right, and its body's offset: `CLUSTER_AUTHORIZATION_FAILED` for
/// the describe (without a message, as Kafka's broker sends it), and for each entity of an
/// alteration, with the error's own message (Kafka's controller adds the request it
/// refused, which a gateway does not have).
pub fn refusal(frame: &[u8], header: &RequestHeader<'_>) -> Result<(BytesMut, usize), HeaderError> {
    let version = header.api_version;
    let mut out = response_head(header)?;
    let body_offset = out.len();
    let message = Some(StrBytes::from_static_str(CLUSTER_AUTHORIZATION_MESSAGE));
    match header.api_key {
        DESCRIBE_CLIENT_QUOTAS => {
            // Kafka's broker sends the code alone (no message) for a describe it refuses.
            let mut response = DescribeClientQuotasResponse::default();
            response.error_code = CLUSTER_AUTHORIZATION_FAILED;
            response.error_message = None; // the codec's default is an empty string
            response.entries = None;
            response
                .encode(&mut out, version)
                .map_err(|_| unreadable("DescribeClientQuotas response", version))?;
        }
        ALTER_CLIENT_QUOTAS => {
            crate::precheck::check_client_quotas_request(
                &frame[header.body_offset..],
                header.api_key,
                version,
            )?;
            let mut body = Bytes::copy_from_slice(&frame[header.body_offset..]);
            let request = AlterClientQuotasRequest::decode(&mut body, version)
                .map_err(|_| unreadable("AlterClientQuotas request", version))?;
            let mut response = AlterClientQuotasResponse::default();
            response.entries = request
                .entries
                .iter()
                .map(|entry| {
                    let mut out = alter_client_quotas_response::EntryData::default();
                    out.entity = entry
                        .entity
                        .iter()
                        .map(|e| {
                            let mut data = alter_client_quotas_response::EntityData::default();
                            data.entity_type = e.entity_type.clone();
                            data.entity_name = e.entity_name.clone();
                            data
                        })
                        .collect();
                    out.error_code = CLUSTER_AUTHORIZATION_FAILED;
                    out.error_message = message.clone();
                    out
                })
                .collect();
            response
                .encode(&mut out, version)
                .map_err(|_| unreadable("AlterClientQuotas response", version))?;
        }
        key => return Err(HeaderError::UnknownApiKey(key)),
    }
    Ok((out, body_offset))
}

#[cfg(test)]
mod tests {
    use kafka_protocol::messages::{
        alter_client_quotas_request, describe_client_quotas_request, RequestHeader as KpHeader,
        ResponseHeader as KpResponseHeader,
    };

    use super::*;
    use crate::header::parse_request_header;

    fn request_frame(api_key: i16, version: i16, body: &impl Encodable) -> BytesMut {
        let mut header = KpHeader::default();
        header.request_api_key = api_key;
        header.request_api_version = version;
        header.correlation_id = 77;
        header.client_id = Some(StrBytes::from_static_str("admin-tool"));
        let flexible = version >= 1;
        let mut out = BytesMut::new();
        header
            .encode(&mut out, if flexible { 2 } else { 1 })
            .unwrap();
        body.encode(&mut out, version).unwrap();
        out
    }

    fn alteration(validate_only: bool) -> AlterClientQuotasRequest {
        let mut entity = alter_client_quotas_request::EntityData::default();
        entity.entity_type = StrBytes::from_static_str("user");
        entity.entity_name = Some(StrBytes::from_static_str("mallory"));
        let mut op = alter_client_quotas_request::OpData::default();
        op.key = StrBytes::from_static_str("producer_byte_rate");
        op.value = 1e12;
        let mut entry = alter_client_quotas_request::EntryData::default();
        entry.entity = vec![entity];
        entry.ops = vec![op];
        let mut request = AlterClientQuotasRequest::default();
        request.entries = vec![entry];
        request.validate_only = validate_only;
        request
    }

    fn response_frame(correlation_id: i32, version: i16, body: &impl Encodable) -> BytesMut {
        let mut head = KpResponseHeader::default();
        head.correlation_id = correlation_id;
        let mut out = BytesMut::new();
        head.encode(&mut out, if version >= 1 { 1 } else { 0 })
            .unwrap();
        body.encode(&mut out, version).unwrap();
        out
    }

    #[test]
    fn the_probe_of_an_alteration_only_validates_under_its_own_id() {
        for version in [0, 1] {
            let frame = request_frame(ALTER_CLIENT_QUOTAS, version, &alteration(false));
            let header = parse_request_header(&frame).unwrap();
            let probe = cluster_probe(&frame, &header, 0x7F00_0005).unwrap();
            let probed = parse_request_header(&probe).unwrap();
            assert_eq!(probed.correlation_id, 0x7F00_0005);
            assert_eq!(probed.client_id(), "admin-tool");
            let mut body = Bytes::copy_from_slice(&probe[probed.body_offset..]);
            let sent = AlterClientQuotasRequest::decode(&mut body, version).unwrap();
            assert!(sent.validate_only);
            assert_eq!(sent.entries, alteration(false).entries);
        }
    }

    #[test]
    fn the_probe_of_a_describe_is_the_same_request() {
        let mut request = describe_client_quotas_request::DescribeClientQuotasRequest::default();
        request.strict = true;
        let frame = request_frame(DESCRIBE_CLIENT_QUOTAS, 1, &request);
        let header = parse_request_header(&frame).unwrap();
        let probe = cluster_probe(&frame, &header, 9).unwrap();
        assert_eq!(probe[..4], frame[..4]);
        assert_eq!(probe[8..], frame[8..]);
        assert_eq!(parse_request_header(&probe).unwrap().correlation_id, 9);
    }

    #[test]
    fn a_cluster_refusal_reaches_the_client_under_its_id_and_an_allowance_does_not() {
        let frame = request_frame(ALTER_CLIENT_QUOTAS, 1, &alteration(false));
        let header = parse_request_header(&frame).unwrap();
        let mut refused = AlterClientQuotasResponse::default();
        let mut entry = alter_client_quotas_response::EntryData::default();
        entry.error_code = CLUSTER_AUTHORIZATION_FAILED;
        entry.error_message = Some(StrBytes::from_static_str("Request ... is not authorized."));
        refused.entries = vec![entry.clone()];
        let answer = cluster_refusal(response_frame(0x7F00_0001, 1, &refused), &header)
            .unwrap()
            .expect("refused");
        let at = parse_response_header(&answer.0, 1).unwrap();
        assert_eq!((at.correlation_id, at.body_offset), (77, answer.1));
        let mut body = Bytes::copy_from_slice(&answer.0[answer.1..]);
        assert_eq!(
            AlterClientQuotasResponse::decode(&mut body, 1).unwrap(),
            refused
        );
        // an invalid value is the cluster's validation, not its authorizer: allowed
        entry.error_code = 42;
        let mut invalid = AlterClientQuotasResponse::default();
        invalid.entries = vec![entry];
        assert!(cluster_refusal(response_frame(5, 1, &invalid), &header)
            .unwrap()
            .is_none());
    }

    #[test]
    fn a_describe_refused_by_the_cluster_is_its_top_level_error() {
        let request = describe_client_quotas_request::DescribeClientQuotasRequest::default();
        let frame = request_frame(DESCRIBE_CLIENT_QUOTAS, 0, &request);
        let header = parse_request_header(&frame).unwrap();
        let mut allowed = DescribeClientQuotasResponse::default();
        allowed.entries = Some(vec![]);
        assert!(cluster_refusal(response_frame(1, 0, &allowed), &header)
            .unwrap()
            .is_none());
        let mut refused = DescribeClientQuotasResponse::default();
        refused.error_code = CLUSTER_AUTHORIZATION_FAILED;
        assert!(cluster_refusal(response_frame(1, 0, &refused), &header)
            .unwrap()
            .is_some());
    }

    #[test]
    fn the_gateways_own_refusal_names_every_entity_with_kafkas_error() {
        let frame = request_frame(ALTER_CLIENT_QUOTAS, 1, &alteration(false));
        let header = parse_request_header(&frame).unwrap();
        let (answer, offset) = refusal(&frame, &header).unwrap();
        assert_eq!(
            parse_response_header(&answer, 1).unwrap().correlation_id,
            77
        );
        let mut body = Bytes::copy_from_slice(&answer[offset..]);
        let response = AlterClientQuotasResponse::decode(&mut body, 1).unwrap();
        assert_eq!(response.entries.len(), 1);
        let entry = &response.entries[0];
        assert_eq!(entry.error_code, CLUSTER_AUTHORIZATION_FAILED);
        assert_eq!(entry.entity[0].entity_name.as_deref(), Some("mallory"));

        let request = describe_client_quotas_request::DescribeClientQuotasRequest::default();
        let frame = request_frame(DESCRIBE_CLIENT_QUOTAS, 0, &request);
        let header = parse_request_header(&frame).unwrap();
        let (answer, offset) = refusal(&frame, &header).unwrap();
        let mut body = Bytes::copy_from_slice(&answer[offset..]);
        let response = DescribeClientQuotasResponse::decode(&mut body, 0).unwrap();
        assert_eq!(response.error_code, CLUSTER_AUTHORIZATION_FAILED);
        assert_eq!(response.error_message, None);
        assert_eq!(response.entries, None);
    }

    #[test]
    fn a_list_admits_only_its_users_and_no_list_admits_all() {
        let listed = AdminAccess {
            ask_cluster: false,
            users: Some(["ops".to_owned()].into()),
        };
        assert!(listed.lists("ops"));
        assert!(!listed.lists("mallory"));
        assert!(!listed.lists(crate::sasl::ANONYMOUS));
        assert!(AdminAccess::default().lists("mallory"));
        assert!(AdminAccess::default().ask_cluster);
    }
}
