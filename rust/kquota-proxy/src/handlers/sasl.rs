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
