//! Which client-quota keys an entity may have and which values they take: Kafka's
//! `QuotaConfig` key declarations and the controller's checks of a value
//! (`ClientQuotaControlManager`), with Kafka's messages. The one place kquota decides
//! whether a quota key and value are valid: AlterClientQuotas through the proxy, the
//! quota file, `kquota configs` and the Python API all call it.
//!
//! Kafka declares the byte rates as LONGs, `request_percentage` and
//! `controller_mutation_rate` as DOUBLEs (on users and client ids) and
//! `connection_creation_rate` as an INT (on IPs alone). Every value must be greater than
//! 0; a LONG or INT must also fit its type and be whole (a fraction up to 1e-6 is
//! tolerated). Kafka lets NaN and an infinite DOUBLE through; kquota refuses them after
//! Kafka's checks, so that wherever Kafka refuses a value its message is the answer.

use std::fmt;

/// The kind of entity a quota key belongs on.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Hash)]
pub enum EntityKind {
    /// A user, a client id or both (Kafka's `userAndClientQuotaConfigs`).
    Client,
    /// An IP (Kafka's `ipConfigs`); never combined with a user or client id.
    Ip,
}

/// The type Kafka declares a quota key with, which decides the values it takes.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Hash)]
pub enum ValueType {
    Long,
    Int,
    Double,
}

/// Every client-quota key: the kind of entity it belongs on and its declared type.
pub const QUOTA_KEYS: [(&str, EntityKind, ValueType); 5] = [
    ("producer_byte_rate", EntityKind::Client, ValueType::Long),
    ("consumer_byte_rate", EntityKind::Client, ValueType::Long),
    ("request_percentage", EntityKind::Client, ValueType::Double),
    (
        "controller_mutation_rate",
        EntityKind::Client,
        ValueType::Double,
    ),
    ("connection_creation_rate", EntityKind::Ip, ValueType::Int),
];

/// The kind and type of `key`, or `None` for a key Kafka does not know.
pub fn quota_key(key: &str) -> Option<(EntityKind, ValueType)> {
    QUOTA_KEYS
        .iter()
        .find(|(k, _, _)| *k == key)
        .map(|&(_, kind, value_type)| (kind, value_type))
}

/// Why a quota key or value is refused.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Refusal {
    /// Not a key of the entity's kind (or of any kind).
    UnknownKey,
    /// Zero or negative.
    NotPositive,
    /// Beyond the largest value of its INT or LONG type.
    TooLarge,
    /// An INT or LONG with a fraction.
    Fractional,
    /// NaN or infinite where Kafka's checks let it through (kquota's own rule).
    NotFinite,
}

/// A refused quota key or value: the key, the value (none when the key alone was
/// checked), the kind of entity it was checked for (none: any kind) and why.
#[derive(Debug, Clone, PartialEq)]
pub struct QuotaConfigError {
    pub key: String,
    pub value: Option<f64>,
    pub kind: Option<EntityKind>,
    pub refusal: Refusal,
}

impl QuotaConfigError {
    /// The message Kafka's controller answers an AlterClientQuotas request with (for
    /// [`Refusal::NotFinite`], which Kafka has no message for, kquota's in its style).
    pub fn kafka_message(&self) -> String {
        let key = &self.key;
        match self.refusal {
            Refusal::UnknownKey => format!("Invalid configuration key {key}"),
            Refusal::NotPositive => format!("Quota {key} must be greater than 0"),
            Refusal::TooLarge => {
                let name = match quota_key(key).map(|(_, t)| t) {
                    Some(ValueType::Int) => "an INT",
                    _ => "a LONG",
                };
                format!("Proposed value for {key} is too large for {name}.")
            }
            Refusal::Fractional => format!("{key} cannot be a fractional value."),
            Refusal::NotFinite => format!("Quota {key} must be a finite number"),
        }
    }

    /// What would have been accepted, for the message.
    fn accepted(&self) -> String {
        if self.refusal == Refusal::UnknownKey {
            let keys_of = |kind: EntityKind| {
                let keys: Vec<&str> = QUOTA_KEYS
                    .iter()
                    .filter(|(_, k, _)| *k == kind)
                    .map(|(name, _, _)| *name)
                    .collect();
                keys.join(", ")
            };
            return match self.kind {
                Some(EntityKind::Ip) => {
                    format!("an ip entity takes only {}", keys_of(EntityKind::Ip))
                }
                Some(EntityKind::Client) => format!(
                    "user and client-id entities take {}",
                    keys_of(EntityKind::Client)
                ),
                None => format!(
                    "expected one of {}, {}",
                    keys_of(EntityKind::Client),
                    keys_of(EntityKind::Ip)
                ),
            };
        }
        match quota_key(&self.key).map(|(_, t)| t) {
            Some(ValueType::Long) => "a LONG: a whole number greater than 0".to_owned(),
            Some(ValueType::Int) => format!("an INT: a whole number from 1 to {}", i32::MAX),
            _ => "a finite number greater than 0".to_owned(),
        }
    }
}

/// Kafka's message, then the value given and what would have been accepted, e.g.
/// `consumer_byte_rate cannot be a fractional value. (got 2.5; expected a LONG: a whole
/// number greater than 0)`.
impl fmt::Display for QuotaConfigError {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        let message = self.kafka_message();
        match self.value {
            Some(value) if self.refusal != Refusal::UnknownKey => {
                write!(f, "{message} (got {value:?}; expected {})", self.accepted())
            }
            _ => write!(f, "{message} ({})", self.accepted()),
        }
    }
}

impl std::error::Error for QuotaConfigError {}

/// Checks that `key` belongs on an entity of `kind` (`None`: on some kind of entity).
pub fn check_quota_key(kind: Option<EntityKind>, key: &str) -> Result<(), QuotaConfigError> {
    match (quota_key(key), kind) {
        (Some((key_kind, _)), Some(kind)) if key_kind == kind => Ok(()),
        (Some(_), None) => Ok(()),
        _ => Err(QuotaConfigError {
            key: key.to_owned(),
            value: None,
            kind,
            refusal: Refusal::UnknownKey,
        }),
    }
}

/// Checks `value` for `key` on an entity of `kind` (`None`: the kind `key` belongs on)
/// as Kafka's controller does (`validateQuotaKeyValue`), then refuses NaN and infinities.
/// Returns the value unchanged.
pub fn check_quota_value(
    kind: Option<EntityKind>,
    key: &str,
    value: f64,
) -> Result<f64, QuotaConfigError> {
    let refuse = |refusal| QuotaConfigError {
        key: key.to_owned(),
        value: Some(value),
        kind,
        refusal,
    };
    check_quota_key(kind, key).map_err(|err| QuotaConfigError {
        value: Some(value),
        ..err
    })?;
    let (_, value_type) = quota_key(key).ok_or_else(|| refuse(Refusal::UnknownKey))?;
    // Each comparison is false for NaN, as in Java, so NaN passes Kafka's checks.
    if value <= 0.0 {
        return Err(refuse(Refusal::NotPositive));
    }
    let max = match value_type {
        ValueType::Double => None,
        ValueType::Int => Some(f64::from(i32::MAX)),
        // Java compares with Long.MAX_VALUE promoted to a double: 2^63.
        ValueType::Long => Some(i64::MAX as f64),
    };
    if let Some(max) = max {
        if value > max {
            return Err(refuse(Refusal::TooLarge));
        }
        // Java's `%` on doubles is Rust's: the remainder with the dividend's sign.
        if (value % 1.0).abs() > 1e-6 {
            return Err(refuse(Refusal::Fractional));
        }
    }
    if !value.is_finite() {
        return Err(refuse(Refusal::NotFinite));
    }
    Ok(value)
}

#[cfg(test)]
mod tests {
    use super::*;
    use EntityKind::{Client, Ip};

    const CLIENT_KEYS: [&str; 4] = [
        "producer_byte_rate",
        "consumer_byte_rate",
        "request_percentage",
        "controller_mutation_rate",
    ];

    /// Kafka's message for `value` of `key` on `kind`, or `None` when accepted.
    fn kafka(kind: EntityKind, key: &str, value: f64) -> Option<String> {
        check_quota_value(Some(kind), key, value)
            .err()
            .map(|e| e.kafka_message())
    }

    #[test]
    fn every_key_on_every_kind_with_valid_and_invalid_values() {
        let long_max = i64::MAX as f64;
        // (key, value, Kafka's message or None) on the key's own kind.
        let cases: Vec<(&str, f64, Option<String>)> = vec![
            ("producer_byte_rate", 1.0, None),
            ("producer_byte_rate", 1_048_576.0, None),
            ("producer_byte_rate", 2.000_000_5, None), // within Kafka's 1e-6 tolerance
            ("producer_byte_rate", long_max, None),    // 2^63: not > Long.MAX_VALUE in Java
            (
                "producer_byte_rate",
                2.5,
                Some("producer_byte_rate cannot be a fractional value.".into()),
            ),
            (
                "producer_byte_rate",
                0.0,
                Some("Quota producer_byte_rate must be greater than 0".into()),
            ),
            (
                "producer_byte_rate",
                -1.0,
                Some("Quota producer_byte_rate must be greater than 0".into()),
            ),
            (
                "producer_byte_rate",
                1e19,
                Some("Proposed value for producer_byte_rate is too large for a LONG.".into()),
            ),
            (
                "producer_byte_rate",
                f64::INFINITY,
                Some("Proposed value for producer_byte_rate is too large for a LONG.".into()),
            ),
            (
                "producer_byte_rate",
                f64::NEG_INFINITY,
                Some("Quota producer_byte_rate must be greater than 0".into()),
            ),
            (
                "producer_byte_rate",
                f64::NAN,
                Some("Quota producer_byte_rate must be a finite number".into()),
            ),
            ("consumer_byte_rate", 2_097_152.0, None),
            (
                "consumer_byte_rate",
                2.5,
                Some("consumer_byte_rate cannot be a fractional value.".into()),
            ),
            (
                "consumer_byte_rate",
                0.5,
                Some("consumer_byte_rate cannot be a fractional value.".into()),
            ),
            (
                "consumer_byte_rate",
                -0.0,
                Some("Quota consumer_byte_rate must be greater than 0".into()),
            ),
            (
                "consumer_byte_rate",
                1e300,
                Some("Proposed value for consumer_byte_rate is too large for a LONG.".into()),
            ),
            ("request_percentage", 2.5, None),
            ("request_percentage", 250.0, None),
            ("request_percentage", 1e-9, None),
            (
                "request_percentage",
                0.0,
                Some("Quota request_percentage must be greater than 0".into()),
            ),
            (
                "request_percentage",
                -0.5,
                Some("Quota request_percentage must be greater than 0".into()),
            ),
            (
                "request_percentage",
                f64::INFINITY,
                Some("Quota request_percentage must be a finite number".into()),
            ),
            (
                "request_percentage",
                f64::NAN,
                Some("Quota request_percentage must be a finite number".into()),
            ),
            ("controller_mutation_rate", 0.5, None),
            ("controller_mutation_rate", 12.5, None),
            (
                "controller_mutation_rate",
                -3.0,
                Some("Quota controller_mutation_rate must be greater than 0".into()),
            ),
            (
                "controller_mutation_rate",
                f64::INFINITY,
                Some("Quota controller_mutation_rate must be a finite number".into()),
            ),
            ("connection_creation_rate", 1.0, None),
            ("connection_creation_rate", f64::from(i32::MAX), None),
            ("connection_creation_rate", 20.000_000_1, None),
            (
                "connection_creation_rate",
                2.25,
                Some("connection_creation_rate cannot be a fractional value.".into()),
            ),
            (
                "connection_creation_rate",
                0.0,
                Some("Quota connection_creation_rate must be greater than 0".into()),
            ),
            (
                "connection_creation_rate",
                2_147_483_648.0,
                Some("Proposed value for connection_creation_rate is too large for an INT.".into()),
            ),
            (
                "connection_creation_rate",
                3e9,
                Some("Proposed value for connection_creation_rate is too large for an INT.".into()),
            ),
            (
                "connection_creation_rate",
                f64::NAN,
                Some("Quota connection_creation_rate must be a finite number".into()),
            ),
        ];
        for (key, value, expected) in cases {
            let (kind, _) = quota_key(key).unwrap();
            assert_eq!(
                kafka(kind, key, value),
                expected,
                "{key}={value} on {kind:?}"
            );
            // The key's own kind is the one taken when none is given.
            assert_eq!(
                check_quota_value(None, key, value)
                    .err()
                    .map(|e| e.kafka_message()),
                expected,
                "{key}={value}"
            );
            // On the other kind, the key itself is refused, whatever the value.
            let other = if kind == Client { Ip } else { Client };
            assert_eq!(
                kafka(other, key, value),
                Some(format!("Invalid configuration key {key}")),
                "{key}={value} on {other:?}"
            );
        }
        for kind in [Client, Ip] {
            for key in ["bogus", "", "Producer_Byte_Rate", "quota.producer.default"] {
                assert_eq!(
                    kafka(kind, key, 1.0),
                    Some(format!("Invalid configuration key {key}"))
                );
            }
        }
    }

    #[test]
    fn keys_belong_on_one_kind() {
        for key in CLIENT_KEYS {
            assert_eq!(check_quota_key(Some(Client), key), Ok(()));
            assert_eq!(check_quota_key(None, key), Ok(()));
            assert!(check_quota_key(Some(Ip), key).is_err());
        }
        assert_eq!(
            check_quota_key(Some(Ip), "connection_creation_rate"),
            Ok(())
        );
        assert!(check_quota_key(Some(Client), "connection_creation_rate").is_err());
        assert!(check_quota_key(None, "bogus").is_err());
        assert_eq!(QUOTA_KEYS.len(), CLIENT_KEYS.len() + 1);
    }

    #[test]
    fn messages_name_the_value_and_what_is_accepted() {
        let text = |kind, key, value| check_quota_value(kind, key, value).unwrap_err().to_string();
        assert_eq!(
            text(Some(Client), "consumer_byte_rate", 2.5),
            "consumer_byte_rate cannot be a fractional value. \
             (got 2.5; expected a LONG: a whole number greater than 0)"
        );
        assert_eq!(
            text(None, "connection_creation_rate", 3e9),
            "Proposed value for connection_creation_rate is too large for an INT. \
             (got 3000000000.0; expected an INT: a whole number from 1 to 2147483647)"
        );
        assert_eq!(
            text(None, "request_percentage", f64::NAN),
            "Quota request_percentage must be a finite number \
             (got NaN; expected a finite number greater than 0)"
        );
        assert_eq!(
            text(Some(Ip), "producer_byte_rate", 5.0),
            "Invalid configuration key producer_byte_rate \
             (an ip entity takes only connection_creation_rate)"
        );
        assert_eq!(
            text(Some(Client), "connection_creation_rate", 5.0),
            "Invalid configuration key connection_creation_rate (user and client-id entities \
             take producer_byte_rate, consumer_byte_rate, request_percentage, \
             controller_mutation_rate)"
        );
        assert_eq!(
            check_quota_key(None, "bogus").unwrap_err().to_string(),
            "Invalid configuration key bogus (expected one of producer_byte_rate, \
             consumer_byte_rate, request_percentage, controller_mutation_rate, \
             connection_creation_rate)"
        );
    }
}
