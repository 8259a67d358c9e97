//! The principal of a SASL authentication passing through the proxy.
//!
//! Kafka's quotas use the authenticated principal's name as the user. The proxy
//! authenticates no one (the broker does): it reads the user name from the client's first
//! SaslAuthenticate message and adopts it once the broker answers that exchange without an
//! error. Without SASL the principal is `ANONYMOUS`, as in Kafka.
//!
//! * PLAIN (RFC 4616): `[authzid] NUL authcid NUL passwd`; Kafka's principal is the
//!   `authcid` (it refuses an `authzid` that differs from it).
//! * SCRAM-SHA-256/512 (RFC 5802): the client-first message `gs2-header n=USER,r=NONCE`,
//!   `USER` with `=2C` and `=3D` unescaped.
//!
//! GSSAPI and OAUTHBEARER derive the principal inside the broker from credentials the
//! proxy cannot verify: their connections keep `ANONYMOUS`.

use bytes::Bytes;
use kafka_protocol::messages::{
    SaslAuthenticateRequest, SaslAuthenticateResponse, SaslHandshakeRequest,
};
use kafka_protocol::protocol::Decodable;

use crate::error::HeaderError;
use crate::header::{parse_response_header, RequestHeader};

/// Kafka's principal name of an unauthenticated connection.
pub const ANONYMOUS: &str = "ANONYMOUS";

/// The SASL mechanisms whose principal the proxy can read.
pub const PRINCIPAL_MECHANISMS: [&str; 3] = ["PLAIN", "SCRAM-SHA-256", "SCRAM-SHA-512"];

/// One connection's SASL exchange as the proxy follows it.
#[derive(Debug, Clone, Default, PartialEq, Eq)]
pub struct SaslExchange {
    /// The user the connection's quotas apply to (`None`: [`ANONYMOUS`]).
    user: Option<String>,
    /// The mechanism its SaslHandshake named.
    mechanism: Option<String>,
    /// The user name its first SaslAuthenticate message gave.
    pending_user: Option<String>,
}

impl SaslExchange {
    /// The user the connection's quotas apply to.
    pub fn user(&self) -> &str {
        self.user.as_deref().unwrap_or(ANONYMOUS)
    }

    /// The mechanism of the connection's SaslHandshake, if it had one.
    pub fn mechanism(&self) -> Option<&str> {
        self.mechanism.as_deref()
    }

    /// A SaslHandshake named `mechanism`.
    pub fn handshake(&mut self, mechanism: &str) {
        self.mechanism = Some(mechanism.to_owned());
    }

    /// Takes the user name from a SaslAuthenticate message's `auth_bytes` (the first that
    /// has one); `true` when the mechanism is one whose principal the proxy cannot read
    /// (the connection's quotas then apply to [`ANONYMOUS`]).
    pub fn authenticate(&mut self, auth_bytes: &[u8]) -> bool {
        let Some(mechanism) = self.mechanism.as_deref() else {
            return false;
        };
        if self.pending_user.is_some() {
            return false;
        }
        self.pending_user = principal_from_auth_bytes(mechanism, auth_bytes);
        self.pending_user.is_none() && !PRINCIPAL_MECHANISMS.contains(&mechanism)
    }

    /// The broker's answer to a SaslAuthenticate: the user name is adopted once it answers
    /// without an error, and forgotten when it refuses.
    pub fn result(&mut self, error_code: i16) {
        if error_code == 0 {
            // kept as pending too: later messages (SCRAM's client-final, a re-authentication,
            // whose principal Kafka does not let change) are not read again
            if let Some(user) = &self.pending_user {
                self.user = Some(user.clone());
            }
        } else {
            self.pending_user = None;
        }
    }
}

/// The user name in a client's first SASL message of `mechanism`; `None` when the
/// mechanism is not one of [`PRINCIPAL_MECHANISMS`] or the message is not of its format
/// (the broker will then refuse it).
pub fn principal_from_auth_bytes(mechanism: &str, auth_bytes: &[u8]) -> Option<String> {
    match mechanism {
        "PLAIN" => plain(auth_bytes),
        "SCRAM-SHA-256" | "SCRAM-SHA-512" => scram(auth_bytes),
        _ => None,
    }
}

/// The mechanism a SaslHandshake request `frame` (whose header is `header`) names.
pub fn handshake_mechanism(
    frame: &[u8],
    header: &RequestHeader<'_>,
) -> Result<String, HeaderError> {
    let mut body = Bytes::copy_from_slice(&frame[header.body_offset..]);
    SaslHandshakeRequest::decode(&mut body, header.api_version)
        .map(|request| request.mechanism.to_string())
        .map_err(|_| HeaderError::Unreadable {
            message: "SaslHandshake request",
            version: header.api_version,
        })
}

/// The `auth_bytes` of a SaslAuthenticate request `frame` (whose header is `header`).
pub fn authenticate_bytes(frame: &[u8], header: &RequestHeader<'_>) -> Result<Bytes, HeaderError> {
    let mut body = Bytes::copy_from_slice(&frame[header.body_offset..]);
    SaslAuthenticateRequest::decode(&mut body, header.api_version)
        .map(|request| request.auth_bytes)
        .map_err(|_| HeaderError::Unreadable {
            message: "SaslAuthenticate request",
            version: header.api_version,
        })
}

/// The `error_code` of the SaslAuthenticate response `response` to `request`; a response
/// that cannot be read counts as a refusal.
pub fn authenticate_error(response: &[u8], request: &RequestHeader<'_>) -> i16 {
    let Ok(header) = parse_response_header(response, request.response_header_version()) else {
        return -1;
    };
    let mut body = Bytes::copy_from_slice(&response[header.body_offset..]);
    SaslAuthenticateResponse::decode(&mut body, request.api_version)
        .map_or(-1, |response| response.error_code)
}

fn plain(message: &[u8]) -> Option<String> {
    let mut parts = message.split(|&b| b == 0);
    let (_authzid, authcid, _password) = (parts.next()?, parts.next()?, parts.next()?);
    if parts.next().is_some() || authcid.is_empty() {
        return None;
    }
    String::from_utf8(authcid.to_vec()).ok()
}

fn scram(message: &[u8]) -> Option<String> {
    let text = std::str::from_utf8(message).ok()?;
    // gs2-header: "n," / "y," / "p=...," then "[a=authzid]," ; then the bare message
    let mut parts = text.splitn(3, ',');
    let (_, _, bare) = (parts.next()?, parts.next()?, parts.next()?);
    let name = bare
        .split(',')
        .find_map(|attribute| attribute.strip_prefix("n="))?;
    let name = name.replace("=2C", ",").replace("=3D", "=");
    (!name.is_empty()).then_some(name)
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn plain_gives_the_authentication_identity() {
        assert_eq!(
            principal_from_auth_bytes("PLAIN", b"\0alice\0secret").as_deref(),
            Some("alice")
        );
        assert_eq!(
            principal_from_auth_bytes("PLAIN", b"alice\0alice\0pw").as_deref(),
            Some("alice")
        );
        for bad in [&b"alice"[..], b"\0\0pw", b"a\0b\0c\0d", b"\0\xff\0pw"] {
            assert_eq!(principal_from_auth_bytes("PLAIN", bad), None, "{bad:?}");
        }
    }

    #[test]
    fn scram_gives_the_unescaped_user_name() {
        let first = b"n,,n=bob=2Cthe=3Dbuilder,r=fyko+d2lbbFgONRv9qkxdawL";
        for mechanism in ["SCRAM-SHA-256", "SCRAM-SHA-512"] {
            let user = principal_from_auth_bytes(mechanism, first);
            assert_eq!(user.as_deref(), Some("bob,the=builder"));
        }
        let with_authzid = b"n,a=bob,n=bob,r=abc";
        assert_eq!(
            principal_from_auth_bytes("SCRAM-SHA-256", with_authzid).as_deref(),
            Some("bob")
        );
        for bad in [&b"n,,r=abc"[..], b"n,,n=,r=abc", b"n,n=bob", b"\xff,,n=x"] {
            assert_eq!(
                principal_from_auth_bytes("SCRAM-SHA-256", bad),
                None,
                "{bad:?}"
            );
        }
    }

    #[test]
    fn other_mechanisms_keep_anonymous() {
        let mut sasl = SaslExchange::default();
        sasl.handshake("GSSAPI");
        assert!(sasl.authenticate(b"\x60\x82token"));
        sasl.result(0);
        assert_eq!(sasl.user(), ANONYMOUS);
    }

    #[test]
    fn the_user_is_adopted_when_the_broker_accepts_and_only_then() {
        let mut sasl = SaslExchange::default();
        assert!(
            !sasl.authenticate(b"\0alice\0pw"),
            "no handshake yet: nothing read"
        );
        assert_eq!(sasl.user(), ANONYMOUS);
        sasl.handshake("PLAIN");
        assert!(!sasl.authenticate(b"\0alice\0pw"));
        assert_eq!(sasl.user(), ANONYMOUS, "not before the broker answers");
        sasl.result(58); // SASL_AUTHENTICATION_FAILED
        assert_eq!(sasl.user(), ANONYMOUS);
        assert!(!sasl.authenticate(b"\0bob\0pw"));
        sasl.result(0);
        assert_eq!(sasl.user(), "bob");
        // a later exchange's message (SCRAM's client-final) does not change the user
        assert!(!sasl.authenticate(b"\0carol\0pw"));
        sasl.result(0);
        assert_eq!(sasl.user(), "bob");
    }
}
