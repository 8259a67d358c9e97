//! The three client-quota types and their names.

use std::fmt;
use std::str::FromStr;

use crate::error::{Error, Result};

/// The quota types' names in Kafka's order (produce, fetch, request), as the
/// configuration, the metrics and every binding spell them.
pub const QUOTA_TYPE_NAMES: [&str; 3] = ["produce", "fetch", "request"];

/// The three client-quota types.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Hash)]
pub enum QuotaType {
    /// Produce bytes per second (`producer_byte_rate`).
    Produce = 0,
    /// Fetch bytes per second (`consumer_byte_rate`).
    Fetch = 1,
    /// Request-handler time, percent of one thread (`request_percentage`).
    Request = 2,
}

impl QuotaType {
    /// All types, in Kafka's order.
    pub const ALL: [QuotaType; 3] = [QuotaType::Produce, QuotaType::Fetch, QuotaType::Request];

    /// `"produce"`, `"fetch"` or `"request"`: its entry in [`QUOTA_TYPE_NAMES`].
    pub fn as_str(self) -> &'static str {
        QUOTA_TYPE_NAMES[self as usize]
    }

    /// Kafka's metric group and sensor-name prefix: `Produce`, `Fetch`, `Request`.
    pub fn group(self) -> &'static str {
        match self {
            QuotaType::Produce => "Produce",
            QuotaType::Fetch => "Fetch",
            QuotaType::Request => "Request",
        }
    }
}

impl FromStr for QuotaType {
    type Err = Error;

    fn from_str(s: &str) -> Result<Self> {
        QuotaType::ALL
            .into_iter()
            .find(|t| t.as_str() == s)
            .ok_or_else(|| {
                let [p, f, r] = QUOTA_TYPE_NAMES;
                Error::InvalidConfig(format!(
                    "unknown quota type {s:?}: expected {p:?}, {f:?} or {r:?}"
                ))
            })
    }
}

impl fmt::Display for QuotaType {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.write_str(self.as_str())
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn names_follow_kafkas_order_and_parse_back() {
        assert_eq!(QuotaType::ALL.map(QuotaType::as_str), QUOTA_TYPE_NAMES);
        for t in QuotaType::ALL {
            assert_eq!(t.as_str().parse::<QuotaType>().unwrap(), t);
        }
        let err = "bytes".parse::<QuotaType>().unwrap_err().to_string();
        assert!(
            err.contains(r#"expected "produce", "fetch" or "request""#),
            "{err}"
        );
    }
}
