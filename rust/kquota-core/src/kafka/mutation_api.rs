//! The requests that mutate partitions (KIP-599) and the request versions from which
//! Kafka enforces the controller-mutation quota strictly (`strictSinceVersion` in
//! `ControllerApis` / `KafkaApis`); older versions are throttled permissively.

use crate::error::{Error, Result};

/// The first CreateTopics version enforced strictly.
pub const CREATE_TOPICS_STRICT_SINCE: i16 = 6;
/// The first CreatePartitions version enforced strictly.
pub const CREATE_PARTITIONS_STRICT_SINCE: i16 = 3;
/// The first DeleteTopics version enforced strictly.
pub const DELETE_TOPICS_STRICT_SINCE: i16 = 5;

/// The requests that mutate partitions and the first version of each that Kafka
/// enforces strictly (`ControllerApis` / `KafkaApis`: `strictSinceVersion`).
#[derive(Debug, Clone, Copy, PartialEq, Eq, Hash)]
pub enum MutationApi {
    /// CreateTopics: strict since v6.
    CreateTopics,
    /// CreatePartitions: strict since v3.
    CreatePartitions,
    /// DeleteTopics: strict since v5.
    DeleteTopics,
}

impl MutationApi {
    /// Every mutation API.
    pub const ALL: [MutationApi; 3] = [
        MutationApi::CreateTopics,
        MutationApi::CreatePartitions,
        MutationApi::DeleteTopics,
    ];

    /// The first request version on which the quota is strict.
    pub fn strict_since_version(self) -> i16 {
        match self {
            MutationApi::CreateTopics => CREATE_TOPICS_STRICT_SINCE,
            MutationApi::CreatePartitions => CREATE_PARTITIONS_STRICT_SINCE,
            MutationApi::DeleteTopics => DELETE_TOPICS_STRICT_SINCE,
        }
    }

    /// Whether a request of `version` is enforced strictly (else permissively).
    pub fn is_strict(self, version: i16) -> bool {
        version >= self.strict_since_version()
    }

    /// `"create_topics"`, `"create_partitions"` or `"delete_topics"`.
    pub fn as_str(self) -> &'static str {
        match self {
            MutationApi::CreateTopics => "create_topics",
            MutationApi::CreatePartitions => "create_partitions",
            MutationApi::DeleteTopics => "delete_topics",
        }
    }
}

impl std::str::FromStr for MutationApi {
    type Err = Error;

    fn from_str(s: &str) -> Result<Self> {
        MutationApi::ALL
            .into_iter()
            .find(|a| a.as_str() == s)
            .ok_or_else(|| {
                Error::InvalidUsage(format!(
                    "unknown mutation api {s:?}: expected \"create_topics\", \
                     \"create_partitions\" or \"delete_topics\""
                ))
            })
    }
}

/// Every mutation API's name ([`MutationApi::as_str`]) and first strict version, in
/// [`MutationApi::ALL`]'s order.
pub fn strict_since_versions() -> [(&'static str, i16); 3] {
    MutationApi::ALL.map(|api| (api.as_str(), api.strict_since_version()))
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn strict_since_versions_are_kafkas() {
        assert_eq!(
            strict_since_versions(),
            [
                ("create_topics", 6),
                ("create_partitions", 3),
                ("delete_topics", 5)
            ]
        );
        for (name, since) in strict_since_versions() {
            let api: MutationApi = name.parse().unwrap();
            assert!(!api.is_strict(since - 1));
            assert!(api.is_strict(since));
        }
    }
}
