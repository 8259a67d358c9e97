//! SASL: SaslHandshake and SaslAuthenticate are never throttled (Kafka handles them in the
//! network layer); the exchange gives the connection the user whose quotas apply.

use crate::error::Closed;
use crate::header::RequestHeader;
use crate::sasl::{authenticate_bytes, authenticate_error, handshake_mechanism, SaslExchange};

use super::{SASL_AUTHENTICATE, SASL_HANDSHAKE};

/// Follows a SASL request of the exchange; `true` when its principal is one the proxy
/// cannot read (its quotas then apply as [`crate::sasl::ANONYMOUS`]: worth a log line).
pub(crate) fn request(
    sasl: &mut SaslExchange,
    header: &RequestHeader<'_>,
    frame: &[u8],
) -> Result<bool, Closed> {
    match header.api_key {
        SASL_HANDSHAKE => {
            if header.api_version == 0 {
                return Err(Closed::Client(
                    "SaslHandshake v0 (raw SASL tokens) is not supported".to_owned(),
                ));
            }
            let mechanism = handshake_mechanism(frame, header).map_err(Closed::request)?;
            sasl.handshake(&mechanism);
            Ok(false)
        }
        SASL_AUTHENTICATE => {
            let auth = authenticate_bytes(frame, header).map_err(Closed::request)?;
            Ok(sasl.authenticate(&auth))
        }
        _ => Ok(false),
    }
}

/// Follows the broker's answer to a SaslAuthenticate request: the user holds only when it
/// succeeded.
pub(crate) fn authenticated(sasl: &mut SaslExchange, header: &RequestHeader<'_>, response: &[u8]) {
    sasl.result(authenticate_error(response, header));
}

#[cfg(test)]
mod tests {
    use bytes::Bytes;
    use kafka_protocol::messages::{
        ApiKey, SaslAuthenticateRequest, SaslAuthenticateResponse, SaslHandshakeRequest,
    };
    use kafka_protocol::protocol::StrBytes;

    use super::*;
    use crate::handlers::testing::{header_of, request_frame, response_frame};
    use crate::sasl::ANONYMOUS;

    fn handshake(version: i16, mechanism: &'static str) -> Vec<u8> {
        let mut body = SaslHandshakeRequest::default();
        body.mechanism = StrBytes::from_static_str(mechanism);
        request_frame(ApiKey::SaslHandshake, version, &body).to_vec()
    }

    fn authenticate(auth: &'static [u8]) -> Vec<u8> {
        let mut body = SaslAuthenticateRequest::default();
        body.auth_bytes = Bytes::from_static(auth);
        request_frame(ApiKey::SaslAuthenticate, 2, &body).to_vec()
    }

    fn answered(sasl: &mut SaslExchange, request: &[u8], error_code: i16) {
        let header = header_of(request);
        let mut body = SaslAuthenticateResponse::default();
        body.error_code = error_code;
        authenticated(sasl, &header, &response_frame(&header, &body).0);
    }

    #[test]
    fn a_plain_exchange_gives_the_connection_its_user_once_the_broker_accepts_it() {
        let mut sasl = SaslExchange::default();
        let hello = handshake(1, "PLAIN");
        assert!(!request(&mut sasl, &header_of(&hello), &hello).unwrap());
        let auth = authenticate(b"\0alice\0secret");
        assert!(!request(&mut sasl, &header_of(&auth), &auth).unwrap());
        assert_eq!(sasl.user(), ANONYMOUS); // not before the broker answers
        answered(&mut sasl, &auth, 0);
        assert_eq!(sasl.user(), "alice");
    }

    #[test]
    fn a_refused_exchange_leaves_the_connection_anonymous() {
        let mut sasl = SaslExchange::default();
        let hello = handshake(1, "PLAIN");
        request(&mut sasl, &header_of(&hello), &hello).unwrap();
        let auth = authenticate(b"\0alice\0wrong");
        request(&mut sasl, &header_of(&auth), &auth).unwrap();
        answered(&mut sasl, &auth, 58); // SASL_AUTHENTICATION_FAILED
        assert_eq!(sasl.user(), ANONYMOUS);
    }

    #[test]
    fn raw_sasl_tokens_are_refused_and_an_unreadable_principal_is_reported() {
        let mut sasl = SaslExchange::default();
        let v0 = handshake(0, "PLAIN");
        let err = request(&mut sasl, &header_of(&v0), &v0).unwrap_err();
        assert_eq!(
            err.to_string(),
            "SaslHandshake v0 (raw SASL tokens) is not supported"
        );
        let hello = handshake(1, "GSSAPI");
        request(&mut sasl, &header_of(&hello), &hello).unwrap();
        let auth = authenticate(b"kerberos token");
        assert!(request(&mut sasl, &header_of(&auth), &auth).unwrap());
    }
}
