//! What the handlers' tests share: a broker's managers from the core, and request and
//! response frames encoded with the codec.

use bytes::BytesMut;
use kafka_protocol::messages::{ApiKey, RequestHeader as KpRequest, ResponseHeader as KpResponse};
use kafka_protocol::protocol::{Decodable, Encodable, StrBytes};
use kquota_core::{QuotaEntity, QuotaManager, QuotaType, RequestPath};

use super::Client;
use crate::header::{parse_request_header, RequestHeader};

/// A broker's produce, fetch and request quota managers, with the core's defaults.
pub(crate) struct Broker {
    pub produce: QuotaManager,
    pub fetch: QuotaManager,
    pub request: QuotaManager,
}

impl Broker {
    pub(crate) fn new() -> Self {
        Broker {
            produce: QuotaManager::with_defaults(QuotaType::Produce),
            fetch: QuotaManager::with_defaults(QuotaType::Fetch),
            request: QuotaManager::with_defaults(QuotaType::Request),
        }
    }

    pub(crate) fn path(&self) -> RequestPath<'_> {
        RequestPath::new(&self.produce, &self.fetch, &self.request).unwrap()
    }
}

/// User `u`'s quota entity.
pub(crate) fn user(name: &str) -> QuotaEntity {
    QuotaEntity::parse(Some(name), None).unwrap()
}

/// User `u`, client id `c`, on channel 7.
pub(crate) const CLIENT: Client<'static> = Client {
    user: "u",
    client_id: "c",
    channel: 7,
};

/// The frame of `body` as a request of `key` v`version` (correlation id 77, client id `c`).
pub(crate) fn request_frame<M: Encodable>(key: ApiKey, version: i16, body: &M) -> BytesMut {
    let mut header = KpRequest::default();
    header.request_api_key = key as i16;
    header.request_api_version = version;
    header.correlation_id = 77;
    header.client_id = Some(StrBytes::from_static_str("c"));
    let mut out = BytesMut::new();
    header
        .encode(&mut out, key.request_header_version(version))
        .unwrap();
    body.encode(&mut out, version).unwrap();
    out
}

/// The header of a request frame.
pub(crate) fn header_of(frame: &[u8]) -> RequestHeader<'static> {
    parse_request_header(frame).unwrap().into_owned()
}

/// `body` as the response frame to `request`, and where its body starts.
pub(crate) fn response_frame<M: Encodable>(
    request: &RequestHeader<'_>,
    body: &M,
) -> (BytesMut, usize) {
    let mut head = KpResponse::default();
    head.correlation_id = request.correlation_id;
    let mut out = BytesMut::new();
    head.encode(&mut out, request.response_header_version())
        .unwrap();
    let offset = out.len();
    body.encode(&mut out, request.api_version).unwrap();
    (out, offset)
}

/// The body of the response frame `frame` to `request`, decoded.
pub(crate) fn decoded<M: Decodable>(frame: &[u8], request: &RequestHeader<'_>) -> M {
    let at =
        crate::header::parse_response_header(frame, request.response_header_version()).unwrap();
    let mut body = bytes::Bytes::copy_from_slice(&frame[at.body_offset..]);
    M::decode(&mut body, request.api_version).unwrap()
}
