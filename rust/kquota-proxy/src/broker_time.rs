//! An estimate of a broker's handler time on a request, from the round trips the proxy sees.
//!
//! Kafka charges `request_percentage` with the time its request-handler threads spend on a
//! request (from taking it off the request queue until its response is made) and the time
//! its network threads spend reading the request and writing the response. For an API the
//! handler answers at once, all the proxy sees is the round trip: request written to
//! response read. That also holds what Kafka does not charge: the network, the broker's
//! request and response queues, the wake-ups of its threads and of the proxy's, and any
//! wait for a CPU. On a loaded machine that is most of it: an empty Metadata request takes
//! Kafka's handler 0.005-0.02 ms and the proxy's round trip about 0.1 ms.
//!
//! The estimate is the round trip less a floor, never below zero. The floor stands for the
//! path without the broker's work: the 10th percentile of the latest round trips of the
//! cheapest kind of request the broker has answered (usually ApiVersions or Metadata, which
//! Kafka's handler answers in microseconds). A percentile of the latest round trips follows
//! the broker's load as it changes, and one fast round trip does not move it. The floor
//! also holds the little Kafka charges for the cheapest request (its network threads'
//! reading and writing): the proxy's own time on a request, charged besides, stands for it.
//!
//! A round trip far above the typical one of its kind (its API and size) has waited: in
//! the broker's queues, for a CPU, in a pause of the broker's. Kafka charges such a wait
//! only when it falls in its handler's or network threads' time, so of the part of a round
//! trip beyond twice its kind's typical excess over the floor, the estimate keeps the
//! share of a typical round trip of that kind that is the broker's (its excess over the
//! floor): what a wait falling anywhere in the request's way costs on average.

use std::time::Duration;

/// Round trips kept per kind of request: the latest ones.
pub const WINDOW: usize = 64;

/// The percentile of a kind's latest round trips taken as its floor.
pub const FLOOR_PERCENTILE: usize = 10;

/// The percentile of a kind's latest round trips taken as its typical one.
pub const TYPICAL_PERCENTILE: usize = 50;

/// A kind of request: its API and the bit length of its larger frame (request or
/// response), because the broker's work on a request of an API grows with what it reads
/// or writes (a produce's records, a Metadata response's topics).
type Kind = (i16, u32);

fn kind(api_key: i16, size: usize) -> Kind {
    (api_key, usize::BITS - size.leading_zeros())
}

/// The latest round trips of one kind, in nanoseconds, with their floor and typical one.
#[derive(Debug, Clone)]
struct Latest {
    kind: Kind,
    nanos: [u64; WINDOW],
    len: usize,
    next: usize,
    floor: u64,
    typical: u64,
}

impl Latest {
    fn new(kind: Kind) -> Self {
        Latest {
            kind,
            nanos: [0; WINDOW],
            len: 0,
            next: 0,
            floor: 0,
            typical: 0,
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
        self.typical = nearest_rank(sorted, TYPICAL_PERCENTILE);
    }
}

/// The `p`-th percentile (nearest rank) of `sorted`, which is not empty.
fn nearest_rank(sorted: &[u64], p: usize) -> u64 {
    let rank = (p * sorted.len()).div_ceil(100).max(1);
    sorted[rank - 1]
}

/// The round trips one broker answered, by kind of request: the floor of its path, and
/// each request's estimate. One per broker (each door of the proxy), shared by its
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
    /// of the broker's handler time on it (see the module's documentation); this round
    /// trip counts in the floor and the typical one it is measured against.
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
        Duration::from_nanos(charged(nanos, floor, self.by_kind[at].typical))
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

/// What is charged of a round trip of `nanos` on a path whose floor is `floor`, for a kind
/// whose typical round trip is `typical`: the excess over the floor, but of the part beyond
/// twice the typical excess only the typical share of the broker.
fn charged(nanos: u64, floor: u64, typical: u64) -> u64 {
    let excess = nanos.saturating_sub(floor);
    let typical_excess = typical.saturating_sub(floor);
    let waited_from = typical_excess.saturating_mul(2);
    if excess <= waited_from || typical == 0 {
        return excess;
    }
    // (excess - waited_from) * typical_excess / typical, in u128: no overflow, no float
    let waited = u128::from(excess - waited_from);
    let share = waited * u128::from(typical_excess) / u128::from(typical);
    waited_from + u64::try_from(share).unwrap_or(u64::MAX)
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

    #[test]
    fn the_first_round_trip_is_its_own_floor() {
        let mut times = BrokerTimes::new();
        assert_eq!(times.floor(), None);
        assert_eq!(times.estimate(METADATA, 60, us(120)), Duration::ZERO);
        assert_eq!(times.floor(), Some(us(120)));
    }

    #[test]
    fn a_round_trip_is_charged_less_the_floor_and_never_below_zero() {
        let mut times = BrokerTimes::new();
        for _ in 0..WINDOW {
            times.estimate(API_VERSIONS, 500, us(100));
        }
        assert_eq!(times.estimate(DESCRIBE_CONFIGS, 300, us(2_100)), us(2_000));
        // faster than the floor (a kind's floor is its 10th percentile, not its least)
        assert_eq!(times.estimate(API_VERSIONS, 500, us(90)), Duration::ZERO);
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
            assert_eq!(times.estimate(DESCRIBE_CONFIGS, 300, us(5_150)), us(5_000));
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
                                                // the broker slows down: once the window holds only slow round trips, so does the floor
        for _ in 0..WINDOW {
            times.estimate(METADATA, 60, us(500));
        }
        assert_eq!(times.floor(), Some(us(500)));
    }

    #[test]
    fn kinds_are_apis_and_sizes_within_a_factor_of_two() {
        assert_eq!(kind(METADATA, 100), kind(METADATA, 127));
        assert_ne!(kind(METADATA, 100), kind(METADATA, 128));
        assert_ne!(kind(METADATA, 100), kind(API_VERSIONS, 100));
        assert_eq!(kind(METADATA, 0), (METADATA, 0));
    }

    /// 64 round trips whose 10th and 50th percentiles (nearest rank) are 100 and 140 µs,
    /// and stay so when the first (180) leaves the window.
    fn typical_trips() -> Vec<u64> {
        let mut trips = vec![180];
        trips.extend([100; 7]);
        trips.extend([120; 24]);
        trips.extend([140; 32]);
        assert_eq!(trips.len(), WINDOW);
        trips
    }

    #[test]
    fn a_round_trip_within_twice_the_typical_excess_is_charged_whole() {
        let mut times = BrokerTimes::new();
        for t in typical_trips() {
            times.estimate(METADATA, 60, us(t));
        }
        assert_eq!(times.floor(), Some(us(100)));
        // the typical excess is 40 µs: up to 100 + 2 * 40, all of the excess is charged
        assert_eq!(times.estimate(METADATA, 60, us(180)), us(80));
    }

    #[test]
    fn of_a_wait_beyond_it_the_brokers_typical_share_is_charged() {
        // The floor 100 µs, the typical round trip 140 (the broker's share 40 / 140):
        // beyond 100 + 2 * 40, a 10 ms stall is charged 80 µs + 9.82 ms * 40 / 140.
        let mut times = BrokerTimes::new();
        for t in typical_trips() {
            times.estimate(METADATA, 60, us(t));
        }
        let stalled = times.estimate(METADATA, 60, us(10_000));
        assert_eq!(stalled, us(80) + Duration::from_nanos(9_820_000 * 40 / 140));
        // a kind of its own (a larger response) is its own typical: charged whole
        assert_eq!(times.estimate(METADATA, 60_000, us(10_000)), us(9_900));
    }

    #[test]
    fn charged_is_the_excess_or_the_typical_share_beyond_twice_it() {
        assert_eq!(charged(90, 100, 140), 0);
        assert_eq!(charged(180, 100, 140), 80);
        assert_eq!(charged(320, 100, 140), 80 + 140 * 40 / 140);
        assert_eq!(charged(500, 100, 100), 0); // typical at the floor: none of it is work
        assert_eq!(charged(500, 0, 0), 500);
        assert_eq!(charged(u64::MAX, 0, u64::MAX / 2), u64::MAX);
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
