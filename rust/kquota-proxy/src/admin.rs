//! DescribeClientQuotas and AlterClientQuotas (KIP-546) answered by the proxy itself, from
//! and into the quota configuration it enforces, so that `kafka-configs.sh
//! --bootstrap-server` and the Admin API's `describeClientQuotas` / `alterClientQuotas`
//! administer the proxy's quotas.
//!
//! Kafka's rules (which entities and keys are valid, how filters match, its error codes
//! and messages) are the core's [`kquota_core::kafka::client_quota_admin`]; where the
//! configuration lives is a [`QuotaAdmin`]'s business (the Python binding's calls the
//! store). The two messages are decoded and encoded whole with the `kafka-protocol`
//! crate's codec, after a walk over the request's counts ([`crate::precheck`]).

use std::net::{IpAddr, ToSocketAddrs};

use bytes::{Bytes, BytesMut};
use kafka_protocol::messages::{
    alter_client_quotas_response, describe_client_quotas_response, AlterClientQuotasRequest,
    AlterClientQuotasResponse, DescribeClientQuotasRequest, DescribeClientQuotasResponse,
    ResponseHeader as KpResponseHeader,
};
use kafka_protocol::protocol::{Decodable, Encodable, StrBytes};
use kquota_core::kafka::client_quota_admin::{
    check_alterations, AdminEntity, ApiError, DescribeFilter, QuotaAlteration, INVALID_REQUEST,
    UNKNOWN_SERVER_ERROR,
};

use crate::error::HeaderError;
use crate::header::RequestHeader;

/// API keys of the two requests.
pub const DESCRIBE_CLIENT_QUOTAS: i16 = 48;
pub const ALTER_CLIENT_QUOTAS: i16 = 49;

/// Whether `api_key` is one of the two requests a [`QuotaAdmin`] answers.
pub fn is_admin_api(api_key: i16) -> bool {
    matches!(api_key, DESCRIBE_CLIENT_QUOTAS | ALTER_CLIENT_QUOTAS)
}

/// A [`QuotaAdmin`] shared by the proxy's connections.
#[derive(Clone)]
pub struct SharedAdmin(pub std::sync::Arc<dyn QuotaAdmin>);

impl std::fmt::Debug for SharedAdmin {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.write_str("SharedAdmin(..)")
    }
}

/// An entity's types and names (`None`: the default entity of the type).
pub type EntityParts = Vec<(String, Option<String>)>;

/// An entity and its quotas (key, value), as a configuration holds them.
pub type StoredQuotas = (EntityParts, Vec<(String, f64)>);

/// Where the quota configuration is read and written. Called on a blocking thread: it
/// may take its time (a store's lock, a file).
pub trait QuotaAdmin: Send + Sync {
    /// Every entity with a quota, with its quotas.
    fn describe(&self) -> Result<Vec<StoredQuotas>, String>;

    /// Applies `changes` (already checked by Kafka's rules) as one write, or with
    /// `validate_only` only checks them. A removal of a key the entity lacks changes
    /// nothing. One entry per change: `None`, or why the configuration cannot take it
    /// (the other changes are still applied). `Err`: nothing was written.
    fn alter(
        &self,
        changes: &[QuotaAlteration],
        validate_only: bool,
    ) -> Result<Vec<Option<String>>, String>;
}

/// The response frame (without its size) to a DescribeClientQuotas or AlterClientQuotas
/// request, answered by `admin`, with `throttle_time_ms` 0. A request that does not follow
/// its schema is an error: the connection closes, as Kafka closes it.
pub fn answer(
    admin: &dyn QuotaAdmin,
    frame: &[u8],
    header: &RequestHeader<'_>,
) -> Result<BytesMut, HeaderError> {
    answer_resolving(admin, frame, header, &resolves)
}

/// [`answer`], with `valid_ip` in place of a name lookup for IP entities (Kafka's
/// `InetAddress.getByName` succeeding).
pub fn answer_resolving(
    admin: &dyn QuotaAdmin,
    frame: &[u8],
    header: &RequestHeader<'_>,
    valid_ip: &dyn Fn(&str) -> bool,
) -> Result<BytesMut, HeaderError> {
    let version = header.api_version;
    let body = &frame[header.body_offset..];
    crate::precheck::check_client_quotas_request(body, header.api_key, version)?;
    let mut rest = Bytes::copy_from_slice(body);
    let mut out = response_head(header)?;
    match header.api_key {
        DESCRIBE_CLIENT_QUOTAS => {
            let request = DescribeClientQuotasRequest::decode(&mut rest, version)
                .map_err(|_| unreadable("DescribeClientQuotas request", version))?;
            describe(admin, &request)
                .encode(&mut out, version)
                .map_err(|_| unreadable("DescribeClientQuotas response", version))?;
        }
        ALTER_CLIENT_QUOTAS => {
            let request = AlterClientQuotasRequest::decode(&mut rest, version)
                .map_err(|_| unreadable("AlterClientQuotas request", version))?;
            alter(admin, request, valid_ip)
                .encode(&mut out, version)
                .map_err(|_| unreadable("AlterClientQuotas response", version))?;
        }
        key => return Err(HeaderError::UnknownApiKey(key)),
    }
    Ok(out)
}

/// A response's header to the request of `header`, ready for its body.
pub(crate) fn response_head(header: &RequestHeader<'_>) -> Result<BytesMut, HeaderError> {
    let mut out = BytesMut::new();
    let mut head = KpResponseHeader::default();
    head.correlation_id = header.correlation_id;
    let version = header.response_header_version();
    head.encode(&mut out, version)
        .map_err(|_| unreadable("response header", version))?;
    Ok(out)
}

pub(crate) fn unreadable(message: &'static str, version: i16) -> HeaderError {
    HeaderError::Unreadable { message, version }
}

fn text(s: &StrBytes) -> String {
    s.to_string()
}

fn str_bytes(s: &str) -> StrBytes {
    StrBytes::from_string(s.to_owned())
}

fn describe(
    admin: &dyn QuotaAdmin,
    request: &DescribeClientQuotasRequest,
) -> DescribeClientQuotasResponse {
    let components = request.components.iter().map(|c| {
        (
            text(&c.entity_type),
            c.match_type,
            c._match.as_ref().map(text),
        )
    });
    let mut response = DescribeClientQuotasResponse::default();
    let entries = DescribeFilter::new(components, request.strict).and_then(|filter| {
        let stored = admin.describe().map_err(|message| ApiError {
            code: UNKNOWN_SERVER_ERROR,
            message,
        })?;
        Ok(stored
            .into_iter()
            .filter(|(parts, _)| filter.matches(&AdminEntity::from_request(parts.clone())))
            .map(|(parts, values)| describe_entry(parts, values))
            .collect())
    });
    match entries {
        Ok(entries) => response.entries = Some(entries),
        Err(err) => {
            response.error_code = err.code;
            response.error_message = Some(StrBytes::from_string(err.message));
            response.entries = None;
        }
    }
    response
}

fn describe_entry(
    parts: EntityParts,
    values: Vec<(String, f64)>,
) -> describe_client_quotas_response::EntryData {
    let mut entry = describe_client_quotas_response::EntryData::default();
    entry.entity = parts
        .iter()
        .map(|(entity_type, name)| {
            let mut data = describe_client_quotas_response::EntityData::default();
            data.entity_type = str_bytes(entity_type);
            data.entity_name = name.as_deref().map(str_bytes);
            data
        })
        .collect();
    entry.values = values
        .iter()
        .map(|(key, value)| {
            let mut data = describe_client_quotas_response::ValueData::default();
            data.key = str_bytes(key);
            data.value = *value;
            data
        })
        .collect();
    entry
}

fn alter(
    admin: &dyn QuotaAdmin,
    request: AlterClientQuotasRequest,
    valid_ip: &dyn Fn(&str) -> bool,
) -> AlterClientQuotasResponse {
    let alterations = request
        .entries
        .iter()
        .map(|entry| QuotaAlteration {
            entity: AdminEntity::from_request(
                entry
                    .entity
                    .iter()
                    .map(|e| (text(&e.entity_type), e.entity_name.as_ref().map(text))),
            ),
            ops: entry
                .ops
                .iter()
                .map(|op| (text(&op.key), (!op.remove).then_some(op.value)))
                .collect(),
        })
        .collect();
    let mut outcome = check_alterations(alterations, valid_ip);
    if !outcome.changes.is_empty() {
        let refusals = admin
            .alter(&outcome.changes, request.validate_only)
            .and_then(|refusals| {
                if refusals.len() == outcome.changes.len() {
                    Ok(refusals)
                } else {
                    Err(format!(
                        "the quota store answered {} results for {} changes",
                        refusals.len(),
                        outcome.changes.len()
                    ))
                }
            });
        let refusals: Vec<Option<ApiError>> = match refusals {
            Ok(refusals) => refusals
                .into_iter()
                .map(|r| {
                    r.map(|message| ApiError {
                        code: INVALID_REQUEST,
                        message,
                    })
                })
                .collect(),
            Err(message) => vec![
                Some(ApiError {
                    code: UNKNOWN_SERVER_ERROR,
                    message
                });
                outcome.changes.len()
            ],
        };
        for (change, refusal) in outcome.changes.iter().zip(refusals) {
            let Some(refusal) = refusal else { continue };
            if let Some((_, result)) = outcome
                .results
                .iter_mut()
                .find(|(e, _)| *e == change.entity)
            {
                result.get_or_insert(refusal);
            }
        }
    }
    let mut response = AlterClientQuotasResponse::default();
    response.entries = outcome
        .results
        .into_iter()
        .map(|(entity, result)| {
            let mut entry = alter_client_quotas_response::EntryData::default();
            entry.entity = entity
                .parts()
                .iter()
                .map(|(entity_type, name)| {
                    let mut data = alter_client_quotas_response::EntityData::default();
                    data.entity_type = str_bytes(entity_type);
                    data.entity_name = name.as_deref().map(str_bytes);
                    data
                })
                .collect();
            // Kafka's `ApiError.NONE` has no message.
            (entry.error_code, entry.error_message) = match result {
                Some(err) => (err.code, Some(StrBytes::from_string(err.message))),
                None => (0, None),
            };
            entry
        })
        .collect();
    response
}

/// Kafka's `InetAddress.getByName` succeeding: an address, or a host name that resolves.
fn resolves(name: &str) -> bool {
    name.parse::<IpAddr>().is_ok()
        || (name, 0)
            .to_socket_addrs()
            .is_ok_and(|mut addresses| addresses.next().is_some())
}

#[cfg(test)]
mod tests {
    use std::sync::Mutex;

    use kafka_protocol::messages::{
        alter_client_quotas_request, describe_client_quotas_request, RequestHeader as KpHeader,
    };

    use super::*;
    use crate::header::{parse_request_header, parse_response_header};

    /// A configuration in memory, as a store would keep it.
    #[derive(Default)]
    struct Memory {
        quotas: Mutex<Vec<StoredQuotas>>,
    }

    impl QuotaAdmin for Memory {
        fn describe(&self) -> Result<Vec<StoredQuotas>, String> {
            Ok(self.quotas.lock().unwrap().clone())
        }

        fn alter(
            &self,
            changes: &[QuotaAlteration],
            validate_only: bool,
        ) -> Result<Vec<Option<String>>, String> {
            let mut quotas = self.quotas.lock().unwrap();
            let mut refusals = Vec::new();
            for change in changes {
                if change.ops.iter().any(|(_, v)| *v == Some(666.0)) {
                    refusals.push(Some("this configuration cannot keep 666".to_owned()));
                    continue;
                }
                refusals.push(None);
                if validate_only {
                    continue;
                }
                let parts = change.entity.parts().to_vec();
                let at = match quotas.iter().position(|(p, _)| *p == parts) {
                    Some(at) => at,
                    None => {
                        quotas.push((parts, Vec::new()));
                        quotas.len() - 1
                    }
                };
                let values = &mut quotas[at].1;
                for (key, value) in &change.ops {
                    values.retain(|(k, _)| k != key);
                    if let Some(value) = value {
                        values.push((key.clone(), *value));
                    }
                }
            }
            quotas.retain(|(_, values)| !values.is_empty());
            Ok(refusals)
        }
    }

    fn frame(api_key: i16, version: i16, body: &impl Encodable) -> BytesMut {
        let mut head = KpHeader::default();
        head.request_api_key = api_key;
        head.request_api_version = version;
        head.correlation_id = 9;
        head.client_id = Some(StrBytes::from_static_str("admin"));
        let header_version = if version >= 1 { 2 } else { 1 };
        let mut out = BytesMut::new();
        head.encode(&mut out, header_version).unwrap();
        body.encode(&mut out, version).unwrap();
        out
    }

    fn ask<R: Decodable>(admin: &Memory, request: &BytesMut) -> R {
        let header = parse_request_header(request).unwrap();
        let response = answer(admin, request, &header).unwrap();
        let at = parse_response_header(&response, header.response_header_version()).unwrap();
        assert_eq!(at.correlation_id, 9);
        R::decode(
            &mut Bytes::copy_from_slice(&response[at.body_offset..]),
            header.api_version,
        )
        .unwrap()
    }

    fn alteration(
        entity: &[(&str, Option<&str>)],
        ops: &[(&str, Option<f64>)],
    ) -> alter_client_quotas_request::EntryData {
        let mut entry = alter_client_quotas_request::EntryData::default();
        entry.entity = entity
            .iter()
            .map(|(t, n)| {
                let mut e = alter_client_quotas_request::EntityData::default();
                e.entity_type = str_bytes(t);
                e.entity_name = n.map(str_bytes);
                e
            })
            .collect();
        entry.ops = ops
            .iter()
            .map(|(k, v)| {
                let mut op = alter_client_quotas_request::OpData::default();
                op.key = str_bytes(k);
                op.value = v.unwrap_or(0.0);
                op.remove = v.is_none();
                op
            })
            .collect();
        entry
    }

    fn alter_request(
        version: i16,
        validate_only: bool,
        entries: Vec<alter_client_quotas_request::EntryData>,
    ) -> BytesMut {
        let mut request = AlterClientQuotasRequest::default();
        request.entries = entries;
        request.validate_only = validate_only;
        frame(ALTER_CLIENT_QUOTAS, version, &request)
    }

    fn describe_request(version: i16, components: &[(&str, i8, Option<&str>)]) -> BytesMut {
        let mut request = DescribeClientQuotasRequest::default();
        request.components = components
            .iter()
            .map(|(t, m, n)| {
                let mut c = describe_client_quotas_request::ComponentData::default();
                c.entity_type = str_bytes(t);
                c.match_type = *m;
                c._match = n.map(str_bytes);
                c
            })
            .collect();
        frame(DESCRIBE_CLIENT_QUOTAS, version, &request)
    }

    fn errors(response: &AlterClientQuotasResponse) -> Vec<(i16, Option<String>)> {
        response
            .entries
            .iter()
            .map(|e| (e.error_code, e.error_message.as_ref().map(text)))
            .collect()
    }

    #[test]
    fn altered_quotas_are_described_in_both_versions() {
        let admin = Memory::default();
        for version in [0, 1] {
            let set = alter_request(
                version,
                false,
                vec![alteration(
                    &[("user", Some("alice")), ("client-id", None)],
                    &[("producer_byte_rate", Some(1024.0))],
                )],
            );
            let response: AlterClientQuotasResponse = ask(&admin, &set);
            assert_eq!(errors(&response), [(0, None)]);
            let described: DescribeClientQuotasResponse = ask(
                &admin,
                &describe_request(version, &[("client-id", 1, None)]),
            );
            assert_eq!(described.error_code, 0);
            let entries = described.entries.unwrap();
            assert_eq!(entries.len(), 1);
            assert_eq!(text(&entries[0].values[0].key), "producer_byte_rate");
            assert_eq!(entries[0].values[0].value, 1024.0);
            let none: DescribeClientQuotasResponse = ask(
                &admin,
                &describe_request(version, &[("user", 0, Some("bob"))]),
            );
            assert_eq!(none.entries.map(|e| e.len()), Some(0));
        }
    }

    #[test]
    fn validate_only_and_refusals_leave_the_configuration_as_it_was() {
        let admin = Memory::default();
        let check = alter_request(
            1,
            true,
            vec![alteration(
                &[("user", Some("u"))],
                &[("consumer_byte_rate", Some(5.0))],
            )],
        );
        let response: AlterClientQuotasResponse = ask(&admin, &check);
        assert_eq!(errors(&response), [(0, None)]);
        assert!(admin.quotas.lock().unwrap().is_empty());

        // Kafka's rules first (with kquota's refusal of NaN), then the configuration's;
        // each entity answered alone.
        let mixed = alter_request(
            1,
            false,
            vec![
                alteration(&[("user", Some("a"))], &[("producer_byte_rate", Some(1.5))]),
                alteration(
                    &[("user", Some("b"))],
                    &[("request_percentage", Some(f64::NAN))],
                ),
                alteration(
                    &[("user", Some("d"))],
                    &[("request_percentage", Some(666.0))],
                ),
                alteration(
                    &[("user", Some("c"))],
                    &[("request_percentage", Some(25.0))],
                ),
            ],
        );
        let response: AlterClientQuotasResponse = ask(&admin, &mixed);
        assert_eq!(
            errors(&response),
            [
                (
                    42,
                    Some("producer_byte_rate cannot be a fractional value.".to_owned())
                ),
                (
                    42,
                    Some("Quota request_percentage must be a finite number".to_owned())
                ),
                (42, Some("this configuration cannot keep 666".to_owned())),
                (0, None),
            ]
        );
        let stored = admin.quotas.lock().unwrap().clone();
        assert_eq!(stored.len(), 1);
        assert_eq!(stored[0].0, [("user".to_owned(), Some("c".to_owned()))]);
    }

    #[test]
    fn a_bad_filter_is_answered_with_kafkas_error() {
        let admin = Memory::default();
        let response: DescribeClientQuotasResponse =
            ask(&admin, &describe_request(1, &[("group", 2, None)]));
        assert_eq!(response.error_code, 35);
        assert_eq!(
            response.error_message.as_ref().map(text).as_deref(),
            Some("Unsupported entity type group")
        );
        assert!(response.entries.is_none());
    }

    #[test]
    fn a_hostile_count_is_refused_before_decoding() {
        let admin = Memory::default();
        let mut request = alter_request(0, false, vec![]);
        let header = parse_request_header(&request).unwrap();
        // the entries array (int32 count, then validate_only) claims 2^31 - 1 entries
        let at = header.body_offset;
        request[at..at + 4].copy_from_slice(&i32::MAX.to_be_bytes());
        let header = parse_request_header(&request).unwrap();
        let err = answer(&admin, &request, &header).unwrap_err();
        assert!(matches!(err, HeaderError::BadLength { .. }), "{err:?}");
    }
}
