//! The Kafka release whose quota behaviour a manager follows, where releases differ.
//!
//! Three changes to the client-quota managers matter to exactness:
//!
//! * From 4.2 (KAFKA-19282) a level of quotas (client-id, user, user + client-id) stays
//!   enabled only while a quota of its shape exists: removing the last one turns it off,
//!   and removing a quota that does not exist changes nothing. Before, every update, set
//!   or remove, enabled its level for good.
//! * From 4.2 the throttle a controller mutation request still has to wait is cast to an
//!   int before it is clamped at 0; before, it was clamped as a long, then cast (a
//!   throttle past `i32::MAX` ms then wrapped to a negative int).
//! * From 4.4 a produce or fetch throttle longer than `i32::MAX` ms saturates at
//!   `i32::MAX`; before, the long was cast to an int (its low 32 bits, which can be
//!   negative: not throttled).
//!
//! Every other rule is the same in every release kquota follows (3.8 on, where the
//! sampled-window bookkeeping it implements arrived).

use std::fmt;

use crate::error::{Error, Result};

/// A Kafka release, `major.minor` (the patch does not change quota behaviour).
#[derive(Debug, Clone, Copy, PartialEq, Eq, PartialOrd, Ord, Hash)]
pub struct KafkaRelease {
    major: u16,
    minor: u16,
}

impl KafkaRelease {
    /// The release kquota follows unless told otherwise: 4.1, whose behaviour the
    /// conformance vectors record.
    pub const DEFAULT: KafkaRelease = KafkaRelease::new(4, 1);
    /// The first release that clears a quota level when its last quota is removed, and
    /// casts a mutation request's remaining throttle before clamping it.
    pub const TRACKS_REMOVALS: KafkaRelease = KafkaRelease::new(4, 2);
    /// The first release that saturates a produce or fetch throttle at `i32::MAX`.
    pub const SATURATES_THROTTLE: KafkaRelease = KafkaRelease::new(4, 4);
    /// The oldest release kquota follows.
    pub const OLDEST: KafkaRelease = KafkaRelease::new(3, 8);

    const fn new(major: u16, minor: u16) -> Self {
        KafkaRelease { major, minor }
    }

    /// Parses `"4.4"` or `"4.4.0"` (a patch, and a qualifier after it, are ignored).
    pub fn parse(text: &str) -> Result<Self> {
        let invalid = || {
            Error::InvalidConfig(format!(
                "invalid Kafka version {text:?}: expected major.minor or major.minor.patch, \
                 {} or later (e.g. \"4.1\" or \"4.4.0\")",
                KafkaRelease::OLDEST
            ))
        };
        let mut parts = text.trim().split('.');
        let mut number = || -> Result<u16> {
            let part = parts.next().ok_or_else(invalid)?;
            if part.is_empty() || !part.bytes().all(|b| b.is_ascii_digit()) {
                return Err(invalid());
            }
            part.parse().map_err(|_| invalid())
        };
        let release = KafkaRelease::new(number()?, number()?);
        if let Some(patch) = parts.next() {
            let digits = patch.split(['-', '+']).next().unwrap_or("");
            if digits.is_empty() || !digits.bytes().all(|b| b.is_ascii_digit()) {
                return Err(invalid());
            }
        }
        if parts.next().is_some() || release < KafkaRelease::OLDEST {
            return Err(invalid());
        }
        Ok(release)
    }

    /// Whether removing the last quota of a level turns the level off (4.2 on).
    pub fn tracks_removals(self) -> bool {
        self >= KafkaRelease::TRACKS_REMOVALS
    }

    /// Whether a mutation request's remaining throttle is cast to an int before it is
    /// clamped at 0 (4.2 on, where the mutation quotas became Java classes).
    pub fn casts_mutation_throttle_first(self) -> bool {
        self >= KafkaRelease::TRACKS_REMOVALS
    }

    /// Whether a produce or fetch throttle saturates at `i32::MAX` (4.4 on).
    pub fn saturates_throttle(self) -> bool {
        self >= KafkaRelease::SATURATES_THROTTLE
    }
}

impl Default for KafkaRelease {
    fn default() -> Self {
        KafkaRelease::DEFAULT
    }
}

impl fmt::Display for KafkaRelease {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        write!(f, "{}.{}", self.major, self.minor)
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn parses_major_minor_and_an_optional_patch() {
        assert_eq!(KafkaRelease::parse("4.4").unwrap(), KafkaRelease::new(4, 4));
        assert_eq!(
            KafkaRelease::parse("4.4.0").unwrap(),
            KafkaRelease::new(4, 4)
        );
        assert_eq!(
            KafkaRelease::parse("3.9.2").unwrap(),
            KafkaRelease::new(3, 9)
        );
        assert_eq!(
            KafkaRelease::parse("4.10.1-rc2").unwrap(),
            KafkaRelease::new(4, 10)
        );
        assert_eq!(KafkaRelease::parse(" 4.1 ").unwrap().to_string(), "4.1");
    }

    #[test]
    fn refuses_what_is_not_a_release_and_names_it() {
        for bad in [
            "", "4", "4.", ".4", "four.one", "4.1.x", "4.1.0.1", "3.7", "-4.1", "4.1.-1",
        ] {
            let err = KafkaRelease::parse(bad).unwrap_err().to_string();
            assert!(err.contains(&format!("{bad:?}")), "{bad}: {err}");
        }
    }

    #[test]
    fn behaviour_changes_at_their_releases() {
        let r = |s| KafkaRelease::parse(s).unwrap();
        assert!(!r("3.9").tracks_removals() && !r("4.1").tracks_removals());
        assert!(r("4.2").tracks_removals() && r("4.4").tracks_removals());
        assert!(!r("4.3").saturates_throttle() && r("4.4").saturates_throttle());
        assert!(r("5.0").saturates_throttle());
        assert_eq!(KafkaRelease::default(), r("4.1"));
    }
}
