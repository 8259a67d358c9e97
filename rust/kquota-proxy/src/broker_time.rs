//! An estimate of a broker's handler time on a request, from the round trips the proxy sees.
//!
//! Kafka charges `request_percentage` with the time its request-handler threads spend on a
//! request (from taking it off the request queue until its response is made) and the time
//! its network threads spend reading the request and writing the response. For an API the
//! handler answers at once, all the proxy sees is the round trip: request written to
//! response read. That also holds what Kafka does not charge: the network, the broker's
//! request and response queues, the wake-ups of its threads and of the proxy's, and any
//! wait for a CPU. On a loaded machine that is most of it, and it grows with the load: an
//! empty Metadata request takes Kafka's handler 0.005-0.02 ms and the proxy's round trip
//! about 0.1 ms, more on a busy machine.
//!
//! So the estimate is not taken from each round trip. For each kind of request (its API
//! and size) it is the kind's low percentile over the path's, plus a constant:
//!
//! * **the path's floor**: the 10th percentile of the latest round trips of the cheapest
//!   kind the broker has answered (usually ApiVersions or a small Metadata, which Kafka's
//!   handler answers in microseconds), the path without the broker's work;
//! * **the kind's work**: its own 10th percentile less the floor, never below zero: what
//!   the broker's work adds to a round trip that did not wait. A low percentile of the
//!   latest round trips follows the broker as it changes, and the waits of a busy machine,
//!   which lengthen some round trips and not others, barely move it;
//! * **[`NETWORK_NS`]**: Kafka's network threads' time on a small request and its
//!   response, which lies in the floor.
//!
//! Every request of a kind is charged the same, as Kafka's handler takes about the same
//! time on each; the proxy's own time on the request is charged besides.

use std::time::Duration;

/// Round trips kept per kind of request: the latest ones.
pub const WINDOW: usize = 64;

/// The percentile of a kind's latest round trips taken as its floor.
pub const FLOOR_PERCENTILE: usize = 10;

/// Kafka's network threads' time on a small request and its response, charged on every
/// estimate: the `sendTimeMs` of small responses in Kafka's request log, on loopback, is
/// 17-104 µs (`kquota_core::requestlog::request_time`), about 20 µs on a warm broker.
pub const NETWORK_NS: u64 = 20_000;

/// A kind of request: its API and the bit length of its larger frame (request or
/// response), because the broker's work on a request of an API grows with what it reads
/// or writes (a produce's records, a Metadata response's topics).
type Kind = (i16, u32);

fn kind(api_key: i16, size: usize) -> Kind {
    (api_key, usize::BITS - size.leading_zeros())
}

/// The latest round trips of one kind, in nanoseconds, with their floor.
#[derive(Debug, Clone)]
struct Latest {
    kind: Kind,
    nanos: [u64; WINDOW],
    len: usize,
    next: usize,
    floor: u64,
}

impl Latest {
    fn new(kind: Kind) -> Self {
        Latest {
            kind,
            nanos: [0; WINDOW],
            len: 0,
            next: 0,
            floor: 0,
        }
    }

    fn add(&mut self, nanos: u64) {
        self.nanos[self.next] = nanos;
        self.next = (self.next + 1) % WINDOW;
        self.len = (self.len + 1).min(WINDOW);
        let mut sorted = self.nanos;
        let sorted = &mut sorted[..self.len];
        sorted.sort_unstable();
        self.floor = nearest_rank(sorted, FLOOR_PERCENTILE);
    }
}

/// The `p`-th percentile (nearest rank) of `sorted`, which is not empty.
fn nearest_rank(sorted: &[u64], p: usize) -> u64 {
    let rank = (p * sorted.len()).div_ceil(100).max(1);
    sorted[rank - 1]
}

/// The round trips one broker answered, by kind of request: the floor of its path, and
/// each kind's estimate. One per broker (each door of the proxy), shared by its
/// connections.
#[derive(Debug, Clone, Default)]
pub struct BrokerTimes {
    by_kind: Vec<Latest>,
}

impl BrokerTimes {
    pub fn new() -> Self {
        Self::default()
    }

    /// Notes the round trip of a request of `api_key` (request written to response read)
    /// whose larger frame, request or response, was `size` bytes, and returns the estimate
    /// of the broker's time on a request of its kind (see the module's documentation); this
    /// round trip counts in the percentiles it is taken from.
    pub fn estimate(&mut self, api_key: i16, size: usize, round_trip: Duration) -> Duration {
        let nanos = u64::try_from(round_trip.as_nanos()).unwrap_or(u64::MAX);
        let kind = kind(api_key, size);
        let at = match self.by_kind.iter().position(|l| l.kind == kind) {
            Some(at) => at,
            None => {
                self.by_kind.push(Latest::new(kind));
                self.by_kind.len() - 1
            }
        };
        self.by_kind[at].add(nanos);
        let floor = self.floor_nanos().unwrap_or(nanos);
        let work = self.by_kind[at].floor.saturating_sub(floor);
        Duration::from_nanos(work.saturating_add(NETWORK_NS))
    }

    /// The path's floor: the lowest of the kinds' floors (each the 10th percentile of its
    /// latest round trips); `None` before any round trip.
    pub fn floor(&self) -> Option<Duration> {
        self.floor_nanos().map(Duration::from_nanos)
    }

    fn floor_nanos(&self) -> Option<u64> {
        self.by_kind.iter().map(|l| l.floor).min()
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    const METADATA: i16 = 3;
    const API_VERSIONS: i16 = 18;
    const DESCRIBE_CONFIGS: i16 = 32;

    fn us(n: u64) -> Duration {
        Duration::from_micros(n)
    }

    const NETWORK: Duration = Duration::from_nanos(NETWORK_NS);

    #[test]
    fn the_first_round_trip_is_its_own_floor() {
        let mut times = BrokerTimes::new();
        assert_eq!(times.floor(), None);
        assert_eq!(times.estimate(METADATA, 60, us(120)), NETWORK);
        assert_eq!(times.floor(), Some(us(120)));
    }

    #[test]
    fn a_kind_is_charged_its_floor_less_the_paths() {
        let mut times = BrokerTimes::new();
        for _ in 0..WINDOW {
            times.estimate(API_VERSIONS, 500, us(100));
        }
        assert_eq!(
            times.estimate(DESCRIBE_CONFIGS, 300, us(2_100)),
            us(2_000) + NETWORK
        );
        // a faster round trip of the cheapest kind: still its floor's, never below it
        assert_eq!(times.estimate(API_VERSIONS, 500, us(90)), NETWORK);
        assert_eq!(times.floor(), Some(us(100)));
    }

    #[test]
    fn the_floor_is_the_cheapest_kinds() {
        // A storm of expensive requests on a broker that answered cheap ones too: their
        // round trips, not the storm's, are the path without the broker's work, and the
        // storm is charged its whole work.
        let mut times = BrokerTimes::new();
        times.estimate(API_VERSIONS, 500, us(150));
        for _ in 0..(3 * WINDOW) {
            let charged = times.estimate(DESCRIBE_CONFIGS, 300, us(5_150));
            assert_eq!(charged, us(5_000) + NETWORK);
        }
        assert_eq!(times.floor(), Some(us(150)));
    }

    #[test]
    fn the_floor_is_the_tenth_percentile_of_the_latest_round_trips() {
        let mut times = BrokerTimes::new();
        // 64 round trips 1..=64 µs: the 7th smallest (nearest rank of 10 % of 64)
        for n in 1..=WINDOW as u64 {
            times.estimate(METADATA, 60, us(n));
        }
        assert_eq!(times.floor(), Some(us(7)));
        // one very fast round trip moves it by one rank at most
        times.estimate(METADATA, 60, us(0));
        assert_eq!(times.floor(), Some(us(7))); // 1 µs left the window, 0 came in
                                                // the broker slows down: once the window holds only slow round trips, so does
                                                // the floor
        for _ in 0..WINDOW {
            times.estimate(METADATA, 60, us(500));
        }
        assert_eq!(times.floor(), Some(us(500)));
    }

    #[test]
    fn waits_on_a_busy_machine_are_not_charged() {
        // The broker's work on a kind is 400 µs over a 100 µs path; then one round trip
        // in three waits 10 ms for a CPU. The kind's charge does not move.
        let mut times = BrokerTimes::new();
        for _ in 0..WINDOW {
            times.estimate(API_VERSIONS, 500, us(100));
            times.estimate(DESCRIBE_CONFIGS, 300, us(500));
        }
        for i in 0..(3 * WINDOW) {
            let trip = if i % 3 == 0 { us(10_500) } else { us(500) };
            assert_eq!(
                times.estimate(DESCRIBE_CONFIGS, 300, trip),
                us(400) + NETWORK
            );
        }
    }

    #[test]
    fn kinds_are_apis_and_sizes_within_a_factor_of_two() {
        assert_eq!(kind(METADATA, 100), kind(METADATA, 127));
        assert_ne!(kind(METADATA, 100), kind(METADATA, 128));
        assert_ne!(kind(METADATA, 100), kind(API_VERSIONS, 100));
        assert_eq!(kind(METADATA, 0), (METADATA, 0));
    }

    #[test]
    fn nearest_rank_is_the_percentile() {
        assert_eq!(nearest_rank(&[5], 10), 5);
        assert_eq!(nearest_rank(&[1, 2, 3], 10), 1);
        assert_eq!(nearest_rank(&[1, 2, 3], 50), 2);
        assert_eq!(nearest_rank(&[1, 2, 3], 100), 3);
        let many: Vec<u64> = (1..=20).collect();
        assert_eq!(nearest_rank(&many, 10), 2);
    }
}
