//! What a Kafka broker does around the quota arithmetic, one owner for each rule that the
//! managers, the replay, the proxy and the Python plugin all apply:
//!
//! * the throttle a response carries, from the throttles its quotas returned: the larger
//!   one, ties to the request quota ([`applied_throttle`] for produce, fetch and every
//!   other API; [`mutation_response_throttle`] for the KIP-599 APIs, whose controller
//!   mutation throttle is weighed against the request quota's);
//! * the maintenance timetable: delay queues drained as mutes end, idle sensors expired
//!   every [`EXPIRY_TASK_MS`] ([`Maintenance`]);
//! * `quota.window.size.seconds`: a quota manager's window is whole seconds
//!   ([`check_window_seconds`]).
//!
//! These are plain rules with no state of their own, so this module sits in the `kafka`
//! layer, where the sensors' and the request path's rules can use it too.

use super::quota_type::QuotaType;
use crate::error::{Error, Result};

/// The throttle Kafka applies from the three quotas' throttles and the quota that
/// applies it: the largest, ties to the request quota (then produce before fetch, which
/// never meet in one request); `(0, None)` when none is `> 0`.
pub fn applied_throttle(
    produce_ms: i32,
    fetch_ms: i32,
    request_ms: i32,
) -> (i32, Option<QuotaType>) {
    let (bytes_ms, bytes_type) = if fetch_ms > produce_ms {
        (fetch_ms, QuotaType::Fetch)
    } else {
        (produce_ms, QuotaType::Produce)
    };
    let (applied, by) = if bytes_ms > request_ms {
        (bytes_ms, bytes_type)
    } else {
        (request_ms, QuotaType::Request)
    };
    if applied > 0 {
        (applied, Some(by))
    } else {
        (0, None)
    }
}

/// The quota whose throttle a CreateTopics, CreatePartitions or DeleteTopics response
/// applies, and whose manager mutes the channel.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum MutationThrottledBy {
    /// The request quota (request time): its throttle is the larger, or they are equal.
    Request,
    /// The controller-mutation quota (KIP-599): its throttle is strictly the larger.
    ControllerMutation,
}

impl MutationThrottledBy {
    /// `"request"` or `"controller_mutation"`, the names the Python plugin reports.
    pub fn as_str(self) -> &'static str {
        match self {
            MutationThrottledBy::Request => "request",
            MutationThrottledBy::ControllerMutation => "controller_mutation",
        }
    }
}

/// The throttle of a KIP-599 response (CreateTopics, CreatePartitions, DeleteTopics) from
/// its request quota's applied throttle and the request's controller-mutation throttle:
/// the larger, ties to the request quota, as Kafka's
/// `sendResponseMaybeThrottleWithControllerQuota` decides; `(0, None)` when neither is
/// `> 0` (a throttle Kafka's int conversion wrapped negative is no throttle).
pub fn mutation_response_throttle(
    request_ms: i32,
    mutation_ms: i32,
) -> (i32, Option<MutationThrottledBy>) {
    let (applied, by) = if mutation_ms > request_ms {
        (mutation_ms, MutationThrottledBy::ControllerMutation)
    } else {
        (request_ms, MutationThrottledBy::Request)
    };
    if applied > 0 {
        (applied, Some(by))
    } else {
        (0, None)
    }
}

/// How often a broker expires idle sensors, ms: Kafka's `ExpireSensorTask` runs every
/// 30 s.
pub const EXPIRY_TASK_MS: i64 = 30_000;

/// A broker's maintenance timetable: the delay queues drained as mutes end, and idle
/// sensors expired at the first maintenance and then [`EXPIRY_TASK_MS`] after the last
/// expiry. It only tells what is due; the caller runs it on its managers.
#[derive(Debug, Clone, Copy, Default, PartialEq, Eq)]
pub struct Maintenance {
    /// When sensors are next expired; `None` before the first expiry (due at once).
    next_expiry: Option<i64>,
}

/// What is due at one time ([`Maintenance::due`]).
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct Due {
    /// Expire idle sensors (then call [`Maintenance::expired`]).
    pub expire: bool,
    /// Drain the delay queues: a mute has ended, or sensors are expired (so that entries
    /// queued on a manager directly wait one expiry period at most).
    pub drain: bool,
}

impl Maintenance {
    /// A timetable whose first expiry is due at once.
    pub const fn new() -> Self {
        Maintenance { next_expiry: None }
    }

    /// A timetable whose next expiry is `next_expiry_ms` (`None`: due at once), for a
    /// caller that keeps that time itself.
    pub const fn with_next_expiry(next_expiry_ms: Option<i64>) -> Self {
        Maintenance {
            next_expiry: next_expiry_ms,
        }
    }

    /// When sensors are next expired (`None`: at once).
    pub fn next_expiry_ms(&self) -> Option<i64> {
        self.next_expiry
    }

    /// What is due at `now`, with the earliest end of a mute still queued `next_unmute`.
    pub fn due(&self, now: i64, next_unmute: Option<i64>) -> Due {
        let expire = self.next_expiry.is_none_or(|at| now >= at);
        Due {
            expire,
            drain: expire || next_unmute.is_some_and(|end| now >= end),
        }
    }

    /// Notes sensors expired at `now` and returns the next expiry, [`EXPIRY_TASK_MS`]
    /// later.
    pub fn expired(&mut self, now: i64) -> i64 {
        let next = now.saturating_add(EXPIRY_TASK_MS);
        self.next_expiry = Some(next);
        next
    }

    /// When maintenance is next due with the earliest queued mute ending at
    /// `next_unmute`: the earlier of that end and the next expiry; `None` while the first
    /// expiry has not run (it is due at once).
    pub fn next_due_ms(&self, next_unmute: Option<i64>) -> Option<i64> {
        self.next_expiry
            .map(|at| next_unmute.map_or(at, |end| end.min(at)))
    }
}

/// Kafka's `quota.window.size.seconds`: the window of a quota manager's sensors is a whole
/// number of seconds. (A bare rate sensor takes any window in ms.)
pub fn check_window_seconds(window_ms: i64) -> Result<()> {
    if window_ms % 1000 != 0 {
        return Err(Error::InvalidConfig(format!(
            "invalid window_ms {window_ms}: a quota window is a whole number of seconds \
             (quota.window.size.seconds), e.g. 1000"
        )));
    }
    Ok(())
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn the_larger_client_quota_throttle_applies_ties_to_the_request_quota() {
        assert_eq!(
            applied_throttle(300, 0, 200),
            (300, Some(QuotaType::Produce))
        );
        assert_eq!(applied_throttle(0, 300, 200), (300, Some(QuotaType::Fetch)));
        assert_eq!(
            applied_throttle(200, 0, 300),
            (300, Some(QuotaType::Request))
        );
        // equal: the request quota's manager applies it
        assert_eq!(
            applied_throttle(250, 0, 250),
            (250, Some(QuotaType::Request))
        );
        assert_eq!(
            applied_throttle(0, 250, 250),
            (250, Some(QuotaType::Request))
        );
    }

    #[test]
    fn client_quota_throttles_wrapped_negative_are_no_throttle() {
        assert_eq!(applied_throttle(0, 0, 0), (0, None));
        assert_eq!(applied_throttle(i32::MIN, 0, -5), (0, None));
        // a wrapped produce throttle does not hide a positive request throttle
        assert_eq!(applied_throttle(-1, 0, 7), (7, Some(QuotaType::Request)));
    }

    #[test]
    fn a_mutation_response_takes_the_larger_throttle_ties_to_the_request_quota() {
        use MutationThrottledBy::{ControllerMutation, Request};
        assert_eq!(
            mutation_response_throttle(400, 8000),
            (8000, Some(ControllerMutation))
        );
        assert_eq!(mutation_response_throttle(1000, 400), (1000, Some(Request)));
        assert_eq!(mutation_response_throttle(400, 400), (400, Some(Request)));
        assert_eq!(
            mutation_response_throttle(0, 1),
            (1, Some(ControllerMutation))
        );
    }

    #[test]
    fn a_mutation_response_without_a_positive_throttle_is_not_throttled() {
        assert_eq!(mutation_response_throttle(0, 0), (0, None));
        assert_eq!(mutation_response_throttle(0, -3), (0, None));
        assert_eq!(mutation_response_throttle(-3, 0), (0, None));
        assert_eq!(
            mutation_response_throttle(-3, 2),
            (2, Some(MutationThrottledBy::ControllerMutation))
        );
    }

    #[test]
    fn throttled_by_names_are_the_plugins() {
        assert_eq!(MutationThrottledBy::Request.as_str(), "request");
        assert_eq!(
            MutationThrottledBy::ControllerMutation.as_str(),
            "controller_mutation"
        );
    }

    #[test]
    fn sensors_are_expired_at_the_first_maintenance_then_every_30_s() {
        let mut m = Maintenance::new();
        assert_eq!(m.next_due_ms(Some(5)), None); // due at once
        assert!(m.due(-1_000_000, None).expire);
        assert_eq!(m.expired(1_000), 31_000);
        assert_eq!(m.next_expiry_ms(), Some(31_000));
        assert!(!m.due(30_999, None).expire);
        assert!(m.due(31_000, None).expire);
        // the next period counts from the expiry's own time, not from the due time
        assert_eq!(m.expired(31_700), 61_700);
        assert_eq!(m.expired(i64::MAX - 1), i64::MAX);
    }

    #[test]
    fn queues_are_drained_when_a_mute_ends_or_sensors_are_expired() {
        let m = Maintenance::with_next_expiry(Some(31_000));
        let due = |now, unmute| m.due(now, unmute);
        assert_eq!(
            due(1_499, Some(1_500)),
            Due {
                expire: false,
                drain: false
            }
        );
        assert_eq!(
            due(1_500, Some(1_500)),
            Due {
                expire: false,
                drain: true
            }
        );
        assert_eq!(
            due(31_000, None),
            Due {
                expire: true,
                drain: true
            }
        );
        assert_eq!(
            due(30_000, None),
            Due {
                expire: false,
                drain: false
            }
        );
    }

    #[test]
    fn maintenance_is_next_due_at_the_earlier_of_a_mute_end_and_the_expiry() {
        let m = Maintenance::with_next_expiry(Some(31_000));
        assert_eq!(m.next_due_ms(None), Some(31_000));
        assert_eq!(m.next_due_ms(Some(2_000)), Some(2_000));
        assert_eq!(m.next_due_ms(Some(40_000)), Some(31_000));
    }

    #[test]
    fn a_quota_window_is_whole_seconds() {
        assert_eq!(check_window_seconds(1000), Ok(()));
        assert_eq!(check_window_seconds(30_000), Ok(()));
        for bad in [1, 999, 1500, 3672] {
            let err = check_window_seconds(bad).unwrap_err();
            assert_eq!(
                err.to_string(),
                format!(
                    "invalid window_ms {bad}: a quota window is a whole number of seconds \
                     (quota.window.size.seconds), e.g. 1000"
                )
            );
            assert!(matches!(err, Error::InvalidConfig(_)));
        }
    }
}
