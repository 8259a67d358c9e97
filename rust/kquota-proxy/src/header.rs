//! Request and response headers, decoded from a frame without copying it. The header
//! version of each API and version comes from the `kafka-protocol` crate, which generates
//! it from Kafka's message schemas; the fields are read here, since a relay needs only them
//! and where the body starts.

use std::borrow::Cow;

use kafka_protocol::messages::ApiKey;

use crate::error::HeaderError;

/// A request's header: what the quotas and the relay need of every request.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct RequestHeader<'a> {
    pub api_key: i16,
    pub api_version: i16,
    pub correlation_id: i32,
    /// `None` for a null client id (and in header v0, which has none). Bytes that are not
    /// UTF-8 are replaced by U+FFFD, as Kafka's `readNullableString` decodes them.
    pub client_id: Option<Cow<'a, str>>,
    /// 0, 1 or 2 (2: flexible, with tagged fields).
    pub header_version: i16,
    /// Where the request's body starts in the frame.
    pub body_offset: usize,
}

impl RequestHeader<'_> {
    /// The header without its borrow of the frame (to keep it after the frame is sent).
    pub fn into_owned(self) -> RequestHeader<'static> {
        RequestHeader {
            client_id: self.client_id.map(|id| Cow::Owned(id.into_owned())),
            ..self
        }
    }

    /// The client id as Kafka's quotas see it: a null one is the empty string.
    pub fn client_id(&self) -> &str {
        self.client_id.as_deref().unwrap_or("")
    }

    /// The header version of this request's response (0 or 1): ApiVersions answers with
    /// v0 whatever its version, so a client can read it before versions are agreed.
    pub fn response_header_version(&self) -> i16 {
        ApiKey::try_from(self.api_key)
            .map_or(0, |key| key.response_header_version(self.api_version))
    }
}

/// A response's header.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct ResponseHeader {
    pub correlation_id: i32,
    /// Where the response's body starts in the frame.
    pub body_offset: usize,
}

/// The header of the request `frame` (a frame without its size prefix).
pub fn parse_request_header(frame: &[u8]) -> Result<RequestHeader<'_>, HeaderError> {
    let mut r = Reader { buf: frame, pos: 0 };
    let api_key = r.i16()?;
    let api_version = r.i16()?;
    let correlation_id = r.i32()?;
    let key = ApiKey::try_from(api_key).map_err(|()| HeaderError::UnknownApiKey(api_key))?;
    let header_version = key.request_header_version(api_version);
    // The client id is a nullable string with an int16 length even in flexible headers.
    let client_id = if header_version >= 1 {
        r.nullable_string()?
    } else {
        None
    };
    if header_version >= 2 {
        r.tagged_fields()?;
    }
    Ok(RequestHeader {
        api_key,
        api_version,
        correlation_id,
        client_id,
        header_version,
        body_offset: r.pos,
    })
}

/// The header of the response `frame`, of `header_version` (0 or 1, from
/// [`RequestHeader::response_header_version`] of its request).
pub fn parse_response_header(
    frame: &[u8],
    header_version: i16,
) -> Result<ResponseHeader, HeaderError> {
    let mut r = Reader { buf: frame, pos: 0 };
    let correlation_id = r.i32()?;
    if header_version >= 1 {
        r.tagged_fields()?;
    }
    Ok(ResponseHeader {
        correlation_id,
        body_offset: r.pos,
    })
}

/// The `acks` of a Produce request (`header` is its header, `frame` the whole frame): a
/// Produce with `acks=0` gets no response.
pub fn produce_acks(frame: &[u8], header: &RequestHeader<'_>) -> Result<i16, HeaderError> {
    let mut r = Reader {
        buf: frame,
        pos: header.body_offset,
    };
    if header.api_version >= 9 {
        // transactional id, a compact nullable string: length + 1, 0 for null
        let len = r.uvarint("transactional id length")?;
        r.take(len.saturating_sub(1) as usize)?;
    } else if header.api_version >= 3 {
        let len = r.i16()?;
        if len >= 0 {
            r.take(len as usize)?;
        } else if len != -1 {
            return Err(HeaderError::BadLength {
                field: "transactional id length",
                value: len.into(),
            });
        }
    }
    r.i16()
}

struct Reader<'a> {
    buf: &'a [u8],
    pos: usize,
}

impl<'a> Reader<'a> {
    fn take(&mut self, n: usize) -> Result<&'a [u8], HeaderError> {
        let end = self.pos.checked_add(n).filter(|&end| end <= self.buf.len());
        let end = end.ok_or(HeaderError::Short {
            needed: self.pos.saturating_add(n),
            len: self.buf.len(),
        })?;
        let out = &self.buf[self.pos..end];
        self.pos = end;
        Ok(out)
    }

    fn i16(&mut self) -> Result<i16, HeaderError> {
        let b = self.take(2)?;
        Ok(i16::from_be_bytes([b[0], b[1]]))
    }

    fn i32(&mut self) -> Result<i32, HeaderError> {
        let b = self.take(4)?;
        Ok(i32::from_be_bytes([b[0], b[1], b[2], b[3]]))
    }

    fn nullable_string(&mut self) -> Result<Option<Cow<'a, str>>, HeaderError> {
        let len = self.i16()?;
        if len == -1 {
            return Ok(None);
        }
        let len = usize::try_from(len).map_err(|_| HeaderError::BadLength {
            field: "client id length",
            value: len.into(),
        })?;
        Ok(Some(String::from_utf8_lossy(self.take(len)?)))
    }

    /// Kafka's unsigned varint (at most 5 bytes for 32 bits).
    fn uvarint(&mut self, field: &'static str) -> Result<u32, HeaderError> {
        let mut value: u32 = 0;
        for i in 0..5 {
            let b = self.take(1)?[0];
            if i == 4 && b > 0x0f {
                return Err(HeaderError::BadLength { field, value: -1 });
            }
            value |= u32::from(b & 0x7f) << (7 * i);
            if b & 0x80 == 0 {
                return Ok(value);
            }
        }
        Err(HeaderError::BadLength { field, value: -1 })
    }

    /// Skips a tagged-field section: a count, then each field's tag, size and bytes.
    fn tagged_fields(&mut self) -> Result<(), HeaderError> {
        let count = self.uvarint("tagged field count")?;
        for _ in 0..count {
            self.uvarint("tag")?;
            let size = self.uvarint("tagged field size")?;
            self.take(size as usize)?;
        }
        Ok(())
    }
}

/// An API's name as a capture records it: Kafka's name for it in snake case
/// (`create_topics`, `api_versions`); `api_<key>` for a key the codec does not know.
pub fn api_name(api_key: i16) -> String {
    let Ok(key) = ApiKey::try_from(api_key) else {
        return format!("api_{api_key}");
    };
    let camel = format!("{key:?}");
    let mut name = String::with_capacity(camel.len() + 4);
    for (i, c) in camel.chars().enumerate() {
        if c.is_ascii_uppercase() {
            if i > 0 {
                name.push('_');
            }
            name.push(c.to_ascii_lowercase());
        } else {
            name.push(c);
        }
    }
    name
}

#[cfg(test)]
mod tests {
    use super::*;
    use bytes::BytesMut;
    use kafka_protocol::messages::{RequestHeader as KpHeader, ResponseHeader as KpResponse};
    use kafka_protocol::protocol::{Encodable, StrBytes};

    #[test]
    fn api_names_are_kafkas_in_snake_case() {
        assert_eq!(api_name(0), "produce");
        assert_eq!(api_name(18), "api_versions");
        assert_eq!(api_name(23), "offset_for_leader_epoch");
        assert_eq!(api_name(32_000), "api_32000");
    }

    /// Every API key and version of Kafka's schemas: the header as the generated encoder
    /// writes it reads back here with the same fields, and its body starts where it ends.
    #[test]
    fn every_api_and_version_reads_as_kafkas_encoder_writes_it() {
        let mut checked = 0;
        for key in ApiKey::iter() {
            let range = key.valid_versions();
            for version in range.min..=range.max {
                let header_version = key.request_header_version(version);
                for client in [None, Some("producer-1"), Some("")] {
                    let mut header = KpHeader::default();
                    header.request_api_key = key as i16;
                    header.request_api_version = version;
                    header.correlation_id = 0x0102_0304 + i32::from(version);
                    header.client_id = client.map(|c| StrBytes::from_string(c.to_owned()));
                    let mut buf = BytesMut::new();
                    header.encode(&mut buf, header_version).unwrap();
                    let end = buf.len();
                    buf.extend_from_slice(b"body");
                    let got = parse_request_header(&buf).unwrap();
                    assert_eq!(got.api_key, key as i16);
                    assert_eq!(got.api_version, version);
                    assert_eq!(got.correlation_id, header.correlation_id);
                    let expected = if header_version >= 1 { client } else { None };
                    assert_eq!(got.client_id.as_deref(), expected, "{key:?} v{version}");
                    assert_eq!(got.body_offset, end, "{key:?} v{version}");
                    assert_eq!(got.header_version, header_version);
                    checked += 1;
                }
                let mut response = KpResponse::default();
                response.correlation_id = 42;
                let response_version = key.response_header_version(version);
                let mut buf = BytesMut::new();
                response.encode(&mut buf, response_version).unwrap();
                let got = parse_response_header(&buf, response_version).unwrap();
                assert_eq!((got.correlation_id, got.body_offset), (42, buf.len()));
            }
        }
        // about 290 versions of about 90 APIs in Kafka 4.x, three client ids each
        assert!(checked > 800, "{checked}");
    }

    /// Produce requests of every version with and without a transactional id, as Kafka's
    /// generated encoder writes them: `acks` reads back.
    #[test]
    fn produce_acks_read_back_in_every_version() {
        use kafka_protocol::messages::ProduceRequest;
        use kafka_protocol::messages::TransactionalId;
        let range = ApiKey::Produce.valid_versions();
        for version in range.min..=range.max {
            for (acks, txn) in [(0i16, None), (1, Some("txn-1")), (-1, Some(""))] {
                if txn.is_some() && version < 3 {
                    continue;
                }
                let mut header = KpHeader::default();
                header.request_api_key = ApiKey::Produce as i16;
                header.request_api_version = version;
                header.client_id = Some(StrBytes::from_static_str("p"));
                let mut request = ProduceRequest::default();
                request.acks = acks;
                request.transactional_id =
                    txn.map(|t| TransactionalId(StrBytes::from_string(t.to_owned())));
                let mut buf = BytesMut::new();
                header
                    .encode(&mut buf, ApiKey::Produce.request_header_version(version))
                    .unwrap();
                request.encode(&mut buf, version).unwrap();
                let parsed = parse_request_header(&buf).unwrap();
                assert_eq!(
                    produce_acks(&buf, &parsed).unwrap(),
                    acks,
                    "v{version} {txn:?}"
                );
            }
        }
    }

    #[test]
    fn tagged_fields_in_a_flexible_header_are_skipped() {
        // Produce v9 (header v2): correlation 7, client "c", two tagged fields.
        let mut frame = vec![
            0, 0, 0, 9, 0, 0, 0, 7, 0, 1, b'c', 2, 0, 2, 0xaa, 0xbb, 5, 0,
        ];
        frame.extend_from_slice(b"rest");
        let header = parse_request_header(&frame).unwrap();
        assert_eq!(header.client_id.as_deref(), Some("c"));
        assert_eq!(&frame[header.body_offset..], b"rest");
    }

    #[test]
    fn a_client_id_that_is_not_utf8_is_read_as_kafka_reads_it() {
        let frame = [0, 3, 0, 1, 0, 0, 0, 1, 0, 2, 0xff, b'a'];
        let header = parse_request_header(&frame).unwrap();
        assert_eq!(header.client_id.as_deref(), Some("\u{fffd}a"));
    }

    #[test]
    fn bad_headers_are_errors_that_name_the_value() {
        let err = parse_request_header(&[0, 0, 0]).unwrap_err();
        assert_eq!(err, HeaderError::Short { needed: 4, len: 3 });
        let err = parse_request_header(&[0x7f, 0x00, 0, 1, 0, 0, 0, 1]).unwrap_err();
        assert_eq!(err, HeaderError::UnknownApiKey(0x7f00));
        assert!(err.to_string().contains("32512"));
        let err = parse_request_header(&[0, 3, 0, 1, 0, 0, 0, 1, 0xff, 0xfe]).unwrap_err();
        assert_eq!(
            err,
            HeaderError::BadLength {
                field: "client id length",
                value: -2
            }
        );
        // a client id longer than the frame
        let err = parse_request_header(&[0, 3, 0, 1, 0, 0, 0, 1, 0, 9, b'a']).unwrap_err();
        assert_eq!(
            err,
            HeaderError::Short {
                needed: 19,
                len: 11
            }
        );
        // a tagged field larger than the frame
        let err =
            parse_request_header(&[0, 0, 0, 9, 0, 0, 0, 1, 0xff, 0xff, 1, 0, 0x7f]).unwrap_err();
        assert!(matches!(err, HeaderError::Short { .. }), "{err:?}");
        // a varint of more than 32 bits
        let frame = [
            0, 0, 0, 9, 0, 0, 0, 1, 0xff, 0xff, 0xff, 0xff, 0xff, 0xff, 0x7f,
        ];
        let err = parse_request_header(&frame).unwrap_err();
        assert!(matches!(
            err,
            HeaderError::BadLength {
                field: "tagged field count",
                ..
            }
        ));
    }
}
