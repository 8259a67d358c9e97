//! Fuzz target `frames`: the proxy's frame reader and header decoding (rust/kquota-proxy)
//! on hostile bytes, as a client or a broker could send them.
//!
//! Invariants: nothing panics; bytes fed in chunks of any size give the same frames (or the
//! same error) as the whole input at once; no frame is longer than the bound; a header that
//! decodes ends inside its frame; a fetch's max_bytes is capped in place only when it asks
//! for more; the SASL principal readers accept any bytes; a mutation request that decodes
//! is counted, rewritten and answered by the proxy alone without a panic; so is a quota
//! administration request (KIP-546), answered from a configuration that takes every
//! change; and a hostile count in any of them (or in a fetch request) is refused before
//! memory is reserved for it. (The
//! broker's responses are trusted input and not fed here.)
#![no_main]

use arbitrary::Arbitrary;
use bytes::BytesMut;
use kquota_core::kafka::client_quota_admin::QuotaAlteration;
use kquota_proxy::admin::{answer_resolving, QuotaAdmin, StoredQuotas};
use kquota_proxy::fetch::{cap_max_bytes, read_fetch_request};
use kquota_proxy::mutation::{MutationRequest, PartitionCounts};
use kquota_proxy::sasl::{
    authenticate_bytes, authenticate_error, handshake_mechanism, principal_from_auth_bytes,
};
use kquota_proxy::{parse_request_header, parse_response_header, produce_acks, split_frame};
use libfuzzer_sys::fuzz_target;

#[derive(Debug, Arbitrary)]
struct Input {
    data: Vec<u8>,
    /// Bytes fed at a time (0 is read as 1).
    chunk: u8,
    /// The frame bound, small so that the "too large" path is reached.
    max: u16,
}

/// The frames of `data` fed `chunk` bytes at a time, and whether an error stopped them.
fn frames(data: &[u8], chunk: usize, max: usize) -> (Vec<BytesMut>, bool) {
    let mut buf = BytesMut::new();
    let mut out = Vec::new();
    for piece in data.chunks(chunk) {
        buf.extend_from_slice(piece);
        loop {
            match split_frame(&mut buf, max) {
                Ok(Some(frame)) => out.push(frame),
                Ok(None) => break,
                Err(_) => return (out, true),
            }
        }
    }
    (out, false)
}

/// A mutation request decoded, counted, every other topic refused, rewritten, and answered
/// as the proxy answers one whose every topic it refused.
fn mutation(frame: &[u8], header: &kquota_proxy::RequestHeader<'_>) {
    let Ok(mut request) = MutationRequest::parse(frame, header) else {
        return;
    };
    let mut counts = PartitionCounts::default();
    for (i, topic) in request.topics.iter().enumerate() {
        if let Some(name) = &topic.name {
            counts.by_name.insert(name.clone(), i as i64);
        }
    }
    request.count(&counts, 3);
    for (i, topic) in request.topics.iter_mut().enumerate() {
        topic.throttled = i % 2 == 1;
    }
    let _ = request.rewritten();
    for topic in &mut request.topics {
        topic.throttled = true;
    }
    let _ = request.merged_response(header, None, 11);
}

/// A configuration that holds one entity and takes every change.
struct Lenient;

impl QuotaAdmin for Lenient {
    fn describe(&self) -> Result<Vec<StoredQuotas>, String> {
        let user = vec![("user".to_owned(), Some("u".to_owned()))];
        Ok(vec![(user, vec![("producer_byte_rate".to_owned(), 1.0)])])
    }

    fn alter(
        &self,
        changes: &[QuotaAlteration],
        _validate_only: bool,
    ) -> Result<Vec<Option<String>>, String> {
        Ok(vec![None; changes.len()])
    }
}

fuzz_target!(|input: Input| {
    let max = usize::from(input.max);
    let (whole, failed) = frames(&input.data, input.data.len().max(1), max);
    let (chunked, chunked_failed) = frames(&input.data, usize::from(input.chunk.max(1)), max);
    assert_eq!(whole, chunked);
    assert_eq!(failed, chunked_failed);
    let consumed: usize = whole.iter().map(|f| 4 + f.len()).sum();
    assert!(consumed <= input.data.len());
    for frame in &whole {
        assert!(frame.len() <= max);
        if let Ok(header) = parse_request_header(frame) {
            assert!(header.body_offset <= frame.len());
            assert!((0..=2).contains(&header.header_version));
            if header.api_key == 0 {
                let _ = produce_acks(frame, &header);
            }
            if header.api_key == 1 {
                if let Ok(info) = read_fetch_request(frame, &header) {
                    let mut copy = frame.to_vec();
                    let capped = cap_max_bytes(&mut copy, &info, 1);
                    assert_eq!(capped, info.max_bytes.is_some_and(|(m, _)| m > 1));
                    assert_eq!(copy.len(), frame.len());
                }
            }
            let _ = header.response_header_version();
            match header.api_key {
                17 => drop(handshake_mechanism(frame, &header)),
                36 => {
                    let _ = authenticate_bytes(frame, &header);
                    let _ = authenticate_error(frame, &header);
                }
                19 | 20 | 37 => mutation(frame, &header),
                48 | 49 => drop(answer_resolving(&Lenient, frame, &header, &|ip| {
                    ip.len() < 16
                })),
                _ => {}
            }
        }
        for version in [0, 1] {
            if let Ok(header) = parse_response_header(frame, version) {
                assert!(header.body_offset <= frame.len());
            }
        }
        for mechanism in ["PLAIN", "SCRAM-SHA-256", "GSSAPI"] {
            let _ = principal_from_auth_bytes(mechanism, frame);
        }
    }
});
