//! Kafka's administration of client quotas (KIP-546): which entities and quota keys an
//! AlterClientQuotas request may set (Kafka's `ClientQuotaControlManager`), which entities
//! a DescribeClientQuotas filter matches (Kafka's `ClientQuotasImage.describe`), and the
//! error codes and messages Kafka answers bad input with.
//!
//! Kafka reads a request's entity into a `java.util.HashMap`: a repeated entity type keeps
//! its last name, and the entity's text in an error message lists its types in that map's
//! iteration order. [`AdminEntity`] keeps the same order, so the messages match Kafka's
//! byte for byte.

use std::fmt;

use crate::kafka::quota_config::{check_quota_value, EntityKind};

/// Kafka's `Errors.INVALID_REQUEST`.
pub const INVALID_REQUEST: i16 = 42;
/// Kafka's `Errors.UNSUPPORTED_VERSION` (a filter on an entity type Kafka does not know).
pub const UNSUPPORTED_VERSION: i16 = 35;
/// Kafka's `Errors.UNKNOWN_SERVER_ERROR`.
pub const UNKNOWN_SERVER_ERROR: i16 = -1;

/// The entity types of KIP-546.
pub const USER: &str = "user";
pub const CLIENT_ID: &str = "client-id";
pub const IP: &str = "ip";

/// DescribeClientQuotas match types: a name (or, with no name, the default entity), the
/// default entity, any entity of the type.
pub const MATCH_EXACT: i8 = 0;
pub const MATCH_DEFAULT: i8 = 1;
pub const MATCH_SPECIFIED: i8 = 2;

/// An error code and message for one entity (AlterClientQuotas) or a whole request
/// (DescribeClientQuotas).
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct ApiError {
    pub code: i16,
    pub message: String,
}

impl ApiError {
    fn invalid(message: impl Into<String>) -> Self {
        ApiError {
            code: INVALID_REQUEST,
            message: message.into(),
        }
    }
}

/// A quota entity as KIP-546 names it: entity types with their names (`None`: the
/// default entity of that type), in the order Kafka iterates them.
#[derive(Debug, Clone)]
pub struct AdminEntity {
    parts: Vec<(String, Option<String>)>,
}

impl AdminEntity {
    /// The entity of a request's entity list, read as Kafka reads it: into a map sized for
    /// the list, a repeated type keeping its place and taking its last name.
    pub fn from_request(parts: impl IntoIterator<Item = (String, Option<String>)>) -> Self {
        let parts: Vec<_> = parts.into_iter().collect();
        let capacity = parts.len();
        AdminEntity {
            parts: java_hash_map(parts, capacity),
        }
    }

    /// The entity types and names, in Kafka's order.
    pub fn parts(&self) -> &[(String, Option<String>)] {
        &self.parts
    }

    /// The name of entity type `entity_type`: `None` when the entity has no such type,
    /// `Some(None)` for the default entity of that type.
    pub fn get(&self, entity_type: &str) -> Option<Option<&str>> {
        self.parts
            .iter()
            .find(|(t, _)| t == entity_type)
            .map(|(_, name)| name.as_deref())
    }
}

/// Equal when they hold the same types and names, in any order (as Java maps compare).
impl PartialEq for AdminEntity {
    fn eq(&self, other: &Self) -> bool {
        self.parts.len() == other.parts.len()
            && self
                .parts
                .iter()
                .all(|(t, name)| other.get(t) == Some(name.as_deref()))
    }
}

/// Kafka's `ClientQuotaEntity.toString`, which its error messages contain.
impl fmt::Display for AdminEntity {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.write_str("ClientQuotaEntity(entries={")?;
        for (i, (entity_type, name)) in self.parts.iter().enumerate() {
            if i > 0 {
                f.write_str(", ")?;
            }
            write!(f, "{entity_type}={}", name.as_deref().unwrap_or("null"))?;
        }
        f.write_str("})")
    }
}

/// One entity's alteration as a request carries it: each op a key and its new value, or
/// `None` to remove the key.
#[derive(Debug, Clone)]
pub struct QuotaAlteration {
    pub entity: AdminEntity,
    pub ops: Vec<(String, Option<f64>)>,
}

/// What an AlterClientQuotas request does.
#[derive(Debug, Clone, Default)]
pub struct AlterOutcome {
    /// The alterations to apply, in the request's order, each op at most once. A removal
    /// of a key the entity does not have changes nothing (Kafka writes no record for it).
    pub changes: Vec<QuotaAlteration>,
    /// One result per distinct entity, in the order they first appear: `None` when
    /// accepted. An entity given twice is answered with an error, although its first
    /// alteration, when valid, is among the changes, as Kafka's controller applies it.
    pub results: Vec<(AdminEntity, Option<ApiError>)>,
}

/// Checks an AlterClientQuotas request's alterations as Kafka's controller does.
/// `valid_ip` says whether an IP entity's name is an address or a host name that resolves
/// (Kafka's `InetAddress.getByName`).
pub fn check_alterations(
    alterations: Vec<QuotaAlteration>,
    valid_ip: &dyn Fn(&str) -> bool,
) -> AlterOutcome {
    let mut outcome = AlterOutcome::default();
    for alteration in alterations {
        let entity = alteration.entity;
        let capacity = alteration.ops.len();
        let mut ops: Vec<(String, Option<f64>)> = Vec::with_capacity(capacity);
        let mut duplicate_key = None;
        for (key, value) in alteration.ops {
            if ops.iter().any(|(k, _)| *k == key) {
                duplicate_key = Some(ApiError::invalid(format!(
                    "Duplicate quota key {key} not updating quota for this entity {entity}"
                )));
            } else {
                ops.push((key, value));
            }
        }
        let seen = outcome.results.iter().position(|(e, _)| *e == entity);
        let result = match (seen, duplicate_key) {
            // Kafka records the duplicate-key error under the entity first, then finds the
            // entity already answered and replaces the error with this one.
            (Some(_), _) | (None, Some(_)) => Some(ApiError::invalid(format!(
                "Ignoring duplicate entity {entity}"
            ))),
            (None, None) => {
                let ops = java_hash_map(ops, capacity);
                match check_entity(&entity, &ops, valid_ip) {
                    Ok(()) => {
                        outcome.changes.push(QuotaAlteration {
                            entity: entity.clone(),
                            ops,
                        });
                        None
                    }
                    Err(err) => Some(err),
                }
            }
        };
        match seen {
            Some(i) => outcome.results[i].1 = result,
            None => outcome.results.push((entity, result)),
        }
    }
    outcome
}

fn check_entity(
    entity: &AdminEntity,
    ops: &[(String, Option<f64>)],
    valid_ip: &dyn Fn(&str) -> bool,
) -> Result<(), ApiError> {
    if entity.parts.is_empty() {
        return Err(ApiError::invalid("Invalid empty client quota entity"));
    }
    for (entity_type, name) in &entity.parts {
        if ![USER, CLIENT_ID, IP].contains(&entity_type.as_str()) {
            return Err(ApiError::invalid(format!(
                "Unhandled client quota entity type: {entity_type}"
            )));
        }
        if name.as_deref() == Some("") {
            return Err(ApiError::invalid(format!(
                "Empty {entity_type} not supported"
            )));
        }
    }
    let ip = match entity.get(IP) {
        Some(_) if entity.parts.len() > 1 => {
            // Kafka's message, its missing space included.
            return Err(ApiError::invalid(
                "Invalid quota entity combination, IP entity shouldnot be combined with User \
                 or ClientId",
            ));
        }
        Some(Some(name)) if !valid_ip(name) => {
            return Err(ApiError::invalid(format!(
                "{name} is not a valid IP or resolvable host."
            )));
        }
        Some(_) => true,
        None => false,
    };
    let kind = if ip {
        EntityKind::Ip
    } else {
        EntityKind::Client
    };
    for (key, value) in ops {
        // A removal is not checked, as in Kafka.
        let Some(value) = *value else { continue };
        check_quota_value(Some(kind), key, value)
            .map_err(|err| ApiError::invalid(err.kafka_message()))?;
    }
    Ok(())
}

/// A DescribeClientQuotas filter, checked as Kafka checks it.
#[derive(Debug, Clone)]
pub struct DescribeFilter {
    /// Entity types that must have this name (`None`: the default entity).
    exact: Vec<(String, Option<String>)>,
    /// Entity types that must be present, with any name.
    specified: Vec<String>,
    strict: bool,
}

impl DescribeFilter {
    /// The filter of a request's components (entity type, match type, match), or the
    /// error Kafka answers the request with.
    pub fn new(
        components: impl IntoIterator<Item = (String, i8, Option<String>)>,
        strict: bool,
    ) -> Result<Self, ApiError> {
        let mut filter = DescribeFilter {
            exact: Vec::new(),
            specified: Vec::new(),
            strict,
        };
        for (entity_type, match_type, name) in components {
            if entity_type.is_empty() {
                return Err(ApiError::invalid("Invalid empty entity type."));
            }
            if filter.has(&entity_type) {
                return Err(ApiError::invalid(format!(
                    "Entity type {entity_type} cannot appear more than once in the filter."
                )));
            }
            if ![USER, CLIENT_ID, IP].contains(&entity_type.as_str()) {
                return Err(ApiError {
                    code: UNSUPPORTED_VERSION,
                    message: format!("Unsupported entity type {entity_type}"),
                });
            }
            match (match_type, name) {
                (MATCH_EXACT, None) => {
                    return Err(ApiError::invalid(
                        "Request specified MATCH_TYPE_EXACT, but set match string to null.",
                    ))
                }
                (MATCH_EXACT, name) => filter.exact.push((entity_type, name)),
                (MATCH_DEFAULT, None) => filter.exact.push((entity_type, None)),
                (MATCH_DEFAULT, Some(_)) => {
                    return Err(ApiError::invalid(
                        "Request specified MATCH_TYPE_DEFAULT, but also specified a match string.",
                    ))
                }
                (MATCH_SPECIFIED, None) => filter.specified.push(entity_type),
                (MATCH_SPECIFIED, Some(_)) => {
                    return Err(ApiError::invalid(
                        "Request specified MATCH_TYPE_SPECIFIED, but also specified a match \
                         string.",
                    ))
                }
                (other, _) => return Err(ApiError::invalid(format!("Unknown match type {other}"))),
            }
        }
        if filter.has(IP) && (filter.has(USER) || filter.has(CLIENT_ID)) {
            return Err(ApiError::invalid(
                "Invalid entity filter component combination. IP filter component should not \
                 be used with user or clientId filter component.",
            ));
        }
        Ok(filter)
    }

    fn has(&self, entity_type: &str) -> bool {
        self.exact.iter().any(|(t, _)| t == entity_type)
            || self.specified.iter().any(|t| t == entity_type)
    }

    /// Whether the filter matches `entity`: every exact component names it, every
    /// specified type is present and, when strict, the entity has no other type.
    pub fn matches(&self, entity: &AdminEntity) -> bool {
        (!self.strict || entity.parts.len() == self.exact.len() + self.specified.len())
            && self
                .exact
                .iter()
                .all(|(t, name)| entity.get(t) == Some(name.as_deref()))
            && self.specified.iter().all(|t| entity.get(t).is_some())
    }
}

/// Java's `String.hashCode`, over UTF-16 code units.
fn java_string_hash(s: &str) -> i32 {
    s.encode_utf16().fold(0i32, |h, unit| {
        h.wrapping_mul(31).wrapping_add(i32::from(unit))
    })
}

/// The entries of `new HashMap<>(capacity)` after putting `entries` in turn, in the
/// map's iteration order: by bucket in the final table, then by first insertion (a put
/// on a present key replaces its value in place).
fn java_hash_map<V>(entries: Vec<(String, V)>, capacity: usize) -> Vec<(String, V)> {
    let mut map: Vec<(String, V)> = Vec::with_capacity(entries.len());
    for (key, value) in entries {
        match map.iter_mut().find(|(k, _)| *k == key) {
            Some(slot) => slot.1 = value,
            None => map.push((key, value)),
        }
    }
    // HashMap(capacity): a table of tableSizeFor(capacity) at the first put, doubled
    // whenever the size passes three quarters of it.
    let mut table = capacity.max(1).next_power_of_two();
    let mut threshold = table * 3 / 4;
    for size in 1..=map.len() {
        if size > threshold {
            let grown = table >= 16;
            table *= 2;
            threshold = if grown { threshold * 2 } else { table * 3 / 4 };
        }
    }
    let bucket = |key: &str| {
        let h = java_string_hash(key) as u32;
        ((h ^ (h >> 16)) as usize) & (table - 1)
    };
    // A stable sort keeps insertion order within a bucket.
    map.sort_by_key(|(key, _)| bucket(key));
    map
}

#[cfg(test)]
mod tests {
    use super::*;

    fn entity(parts: &[(&str, Option<&str>)]) -> AdminEntity {
        AdminEntity::from_request(
            parts
                .iter()
                .map(|(t, n)| ((*t).to_owned(), n.map(str::to_owned))),
        )
    }

    fn alter(parts: &[(&str, Option<&str>)], ops: &[(&str, Option<f64>)]) -> QuotaAlteration {
        QuotaAlteration {
            entity: entity(parts),
            ops: ops.iter().map(|(k, v)| ((*k).to_owned(), *v)).collect(),
        }
    }

    fn only_error(alterations: Vec<QuotaAlteration>) -> Option<String> {
        let outcome = check_alterations(alterations, &|ip| ip.parse::<std::net::IpAddr>().is_ok());
        assert_eq!(outcome.results.len(), 1);
        outcome.results[0].1.as_ref().map(|e| {
            assert_eq!(e.code, INVALID_REQUEST);
            e.message.clone()
        })
    }

    #[test]
    fn java_string_hash_matches_java() {
        // Values of "...".hashCode() in Java.
        assert_eq!(java_string_hash(""), 0);
        assert_eq!(java_string_hash("user"), 3_599_307);
        assert_eq!(java_string_hash("ip"), 3_367);
        assert_eq!(java_string_hash("client-id"), -1_904_137_635);
    }

    #[test]
    fn entity_text_follows_java_hash_map_order() {
        // The orders below are those Java 17's HashMap prints. Whichever order the request gives, Kafka's map lists client-id before user.
        let a = entity(&[("user", Some("alice")), ("client-id", None)]);
        let b = entity(&[("client-id", None), ("user", Some("alice"))]);
        assert_eq!(
            a.to_string(),
            "ClientQuotaEntity(entries={client-id=null, user=alice})"
        );
        assert_eq!(a.to_string(), b.to_string());
        assert_eq!(a, b);
        // A repeated type keeps its place and its last name.
        let three = entity(&[
            ("user", Some("alice")),
            ("ip", Some("x")),
            ("client-id", Some("c")),
        ]);
        assert_eq!(
            three.to_string(),
            "ClientQuotaEntity(entries={client-id=c, user=alice, ip=x})"
        );
        let keys = [
            "request_percentage",
            "producer_byte_rate",
            "consumer_byte_rate",
            "controller_mutation_rate",
        ];
        let ops: Vec<_> = java_hash_map(keys.iter().map(|k| ((*k).to_owned(), ())).collect(), 4)
            .into_iter()
            .map(|(k, ())| k)
            .collect();
        assert_eq!(
            ops,
            [
                "producer_byte_rate",
                "consumer_byte_rate",
                "controller_mutation_rate",
                "request_percentage"
            ]
        );
        let c = entity(&[("user", Some("a")), ("user", Some("b"))]);
        assert_eq!(c.parts(), &[("user".to_owned(), Some("b".to_owned()))]);
    }

    #[test]
    fn valid_alterations_are_changes() {
        let outcome = check_alterations(
            vec![
                alter(
                    &[("user", Some("alice"))],
                    &[("producer_byte_rate", Some(1024.0))],
                ),
                alter(&[("ip", None)], &[("connection_creation_rate", Some(10.0))]),
                alter(&[("client-id", Some("c"))], &[("request_percentage", None)]),
            ],
            &|_| true,
        );
        assert_eq!(outcome.changes.len(), 3);
        assert!(outcome.results.iter().all(|(_, e)| e.is_none()));
    }

    #[test]
    fn bad_entities_get_kafkas_messages() {
        let rate = [("producer_byte_rate", Some(1.0))];
        assert_eq!(
            only_error(vec![alter(&[], &rate)]).as_deref(),
            Some("Invalid empty client quota entity")
        );
        assert_eq!(
            only_error(vec![alter(&[("group", Some("g"))], &rate)]).as_deref(),
            Some("Unhandled client quota entity type: group")
        );
        assert_eq!(
            only_error(vec![alter(&[("user", Some(""))], &rate)]).as_deref(),
            Some("Empty user not supported")
        );
        assert_eq!(
            only_error(vec![alter(&[("ip", Some("1.2.3.4")), ("user", Some("u"))], &rate)])
                .as_deref(),
            Some("Invalid quota entity combination, IP entity shouldnot be combined with User or ClientId")
        );
        assert_eq!(
            only_error(vec![alter(&[("ip", Some("no such host"))], &[])]).as_deref(),
            Some("no such host is not a valid IP or resolvable host.")
        );
    }

    #[test]
    fn bad_values_get_kafkas_messages() {
        let user = [("user", Some("u"))];
        let cases: [(&str, f64, &str); 6] = [
            (
                "producer_byte_rate",
                0.0,
                "Quota producer_byte_rate must be greater than 0",
            ),
            (
                "producer_byte_rate",
                1.5,
                "producer_byte_rate cannot be a fractional value.",
            ),
            (
                "producer_byte_rate",
                1e19,
                "Proposed value for producer_byte_rate is too large for a LONG.",
            ),
            (
                "consumer_byte_rate",
                -3.0,
                "Quota consumer_byte_rate must be greater than 0",
            ),
            (
                "connection_creation_rate",
                5.0,
                "Invalid configuration key connection_creation_rate",
            ),
            ("bogus", 5.0, "Invalid configuration key bogus"),
        ];
        for (key, value, message) in cases {
            assert_eq!(
                only_error(vec![alter(&user, &[(key, Some(value))])]).as_deref(),
                Some(message),
                "{key}={value}"
            );
        }
        let ip = [("ip", Some("10.0.0.1"))];
        assert_eq!(
            only_error(vec![alter(&ip, &[("connection_creation_rate", Some(3e9))])]).as_deref(),
            Some("Proposed value for connection_creation_rate is too large for an INT.")
        );
        // Doubles take fractions. NaN passes Kafka's comparisons; kquota refuses it.
        assert_eq!(
            only_error(vec![alter(&user, &[("request_percentage", Some(2.5))])]),
            None
        );
        assert_eq!(
            only_error(vec![alter(
                &user,
                &[("producer_byte_rate", Some(f64::NAN))]
            )])
            .as_deref(),
            Some("Quota producer_byte_rate must be a finite number")
        );
        // Removing needs no valid value.
        assert_eq!(
            only_error(vec![alter(&user, &[("producer_byte_rate", None)])]),
            None
        );
    }

    #[test]
    fn duplicates_are_refused_as_kafka_refuses_them() {
        let user = [("user", Some("u"))];
        let outcome = check_alterations(
            vec![alter(
                &user,
                &[
                    ("producer_byte_rate", Some(1.0)),
                    ("producer_byte_rate", Some(2.0)),
                ],
            )],
            &|_| true,
        );
        assert!(outcome.changes.is_empty());
        let message = &outcome.results[0].1.as_ref().unwrap().message;
        assert_eq!(
            message,
            "Ignoring duplicate entity ClientQuotaEntity(entries={user=u})"
        );
        // The same entity twice: the first alteration applies, the entity is answered
        // with an error.
        let outcome = check_alterations(
            vec![
                alter(&user, &[("producer_byte_rate", Some(1.0))]),
                alter(&user, &[("consumer_byte_rate", Some(2.0))]),
            ],
            &|_| true,
        );
        assert_eq!(outcome.changes.len(), 1);
        assert_eq!(
            outcome.changes[0].ops,
            vec![("producer_byte_rate".to_owned(), Some(1.0))]
        );
        assert_eq!(outcome.results.len(), 1);
        assert!(outcome.results[0].1.is_some());
    }

    #[test]
    fn filters_match_as_kafkas() {
        let all = [
            entity(&[("user", Some("alice"))]),
            entity(&[("user", None)]),
            entity(&[("user", Some("alice")), ("client-id", Some("c"))]),
            entity(&[("client-id", Some("c"))]),
            entity(&[("ip", Some("10.0.0.1"))]),
        ];
        let matching = |components: Vec<(&str, i8, Option<&str>)>, strict| {
            let filter = DescribeFilter::new(
                components
                    .into_iter()
                    .map(|(t, m, n)| (t.to_owned(), m, n.map(str::to_owned))),
                strict,
            )
            .unwrap();
            (0..all.len())
                .filter(|&i| filter.matches(&all[i]))
                .collect::<Vec<_>>()
        };
        assert_eq!(
            matching(vec![("user", MATCH_EXACT, Some("alice"))], false),
            [0, 2]
        );
        assert_eq!(
            matching(vec![("user", MATCH_EXACT, Some("alice"))], true),
            [0]
        );
        assert_eq!(matching(vec![("user", MATCH_DEFAULT, None)], false), [1]);
        assert_eq!(
            matching(vec![("user", MATCH_SPECIFIED, None)], false),
            [0, 1, 2]
        );
        assert_eq!(matching(vec![], false), [0, 1, 2, 3, 4]);
        assert_eq!(matching(vec![], true), Vec::<usize>::new());
        assert_eq!(matching(vec![("ip", MATCH_SPECIFIED, None)], true), [4]);
    }

    #[test]
    fn bad_filters_get_kafkas_errors() {
        let error = |components: Vec<(&str, i8, Option<&str>)>| {
            DescribeFilter::new(
                components
                    .into_iter()
                    .map(|(t, m, n)| (t.to_owned(), m, n.map(str::to_owned))),
                false,
            )
            .unwrap_err()
        };
        let e = error(vec![("group", MATCH_SPECIFIED, None)]);
        assert_eq!(
            (e.code, e.message.as_str()),
            (UNSUPPORTED_VERSION, "Unsupported entity type group")
        );
        let e = error(vec![("user", MATCH_EXACT, None)]);
        assert_eq!(
            e.message,
            "Request specified MATCH_TYPE_EXACT, but set match string to null."
        );
        let e = error(vec![
            ("user", MATCH_SPECIFIED, None),
            ("user", MATCH_DEFAULT, None),
        ]);
        assert_eq!(
            e.message,
            "Entity type user cannot appear more than once in the filter."
        );
        let e = error(vec![("user", 7, None)]);
        assert_eq!(e.message, "Unknown match type 7");
        let e = error(vec![
            ("ip", MATCH_SPECIFIED, None),
            ("client-id", MATCH_SPECIFIED, None),
        ]);
        assert_eq!(e.code, INVALID_REQUEST);
        assert!(e
            .message
            .starts_with("Invalid entity filter component combination."));
        let e = error(vec![("", MATCH_SPECIFIED, None)]);
        assert_eq!(e.message, "Invalid empty entity type.");
    }
}
