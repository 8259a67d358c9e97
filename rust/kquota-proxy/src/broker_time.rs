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
//!
//! The floor must be the path's *now*: a kind the clients sent only when they connected
//! (ApiVersions, on an idle broker) would otherwise hold it down while the broker gets
//! busy, and every kind would be charged the path's growth as work (a Metadata poller
//! among busy producers was charged 4 times what Kafka charged it). So while clients use
//! a broker, the proxy sends it a cheap request of its own every [`PROBE_INTERVAL`]
//! ([`probe_request`], ApiVersions v0 as client `kquota-probe`, on a connection of its
//! own), whose round trips keep the cheapest kind's percentile current.

use std::time::Instant;

use std::time::Duration;

/// Round trips kept per kind of request: the latest ones.
pub const WINDOW: usize = 64;

/// The percentile of a kind's latest round trips taken as its floor.
pub const FLOOR_PERCENTILE: usize = 10;

/// Kafka's network threads' time on a small request and its response, charged on every
/// estimate: the `sendTimeMs` of small responses in Kafka's request log, on loopback, is
/// 17-104 µs (`kquota_core::requestlog::request_time`), about 20 µs on a warm broker.
pub const NETWORK_NS: u64 = 20_000;

/// How often the proxy sends its own cheap request to a broker its clients use.
pub const PROBE_INTERVAL: Duration = Duration::from_millis(100);

/// How long after a client's last round trip to a broker the proxy keeps probing it.
pub const PROBE_IDLE: Duration = Duration::from_secs(10);

/// The client id of the proxy's own cheap requests (Kafka logs them under it).
pub const PROBE_CLIENT_ID: &str = "kquota-probe";

/// ApiVersions: the probe's API.
pub const PROBE_API_KEY: i16 = 18;

/// The proxy's cheap request to a broker (without its size prefix): ApiVersions v0, which
/// every broker answers at once, before any authentication and whatever its version,
/// with request header v1 and client id [`PROBE_CLIENT_ID`].
pub fn probe_request(correlation_id: i32) -> Vec<u8> {
    let id = PROBE_CLIENT_ID.as_bytes();
    let mut frame = Vec::with_capacity(10 + id.len());
    frame.extend_from_slice(&PROBE_API_KEY.to_be_bytes());
    frame.extend_from_slice(&0i16.to_be_bytes()); // version 0
    frame.extend_from_slice(&correlation_id.to_be_bytes());
    frame.extend_from_slice(&(id.len() as i16).to_be_bytes());
    frame.extend_from_slice(id);
    frame // v0 has no body
}

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
    /// When its latest round trip was noted.
    last: Instant,
}

impl Latest {
    fn new(kind: Kind, now: Instant) -> Self {
        Latest {
            kind,
            nanos: [0; WINDOW],
            len: 0,
            next: 0,
            floor: 0,
            last: now,
        }
    }

    fn add(&mut self, nanos: u64, now: Instant) {
        self.last = now;
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
/// each kind's estimate. One per broker (each route of the proxy), shared by its
/// connections.
#[derive(Debug, Clone, Default)]
pub struct BrokerTimes {
    by_kind: Vec<Latest>,
    /// When a client's round trip was last noted (the proxy's probes do not count).
    last_client: Option<Instant>,
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
        let now = Instant::now();
        self.last_client = Some(now);
        self.note(api_key, size, round_trip, now)
    }

    /// The estimate for a request of `api_key` whose larger frame was `size` bytes,
    /// without a round trip of its own to note (one that waited for an earlier answer):
    /// its kind's, or [`NETWORK_NS`] alone for a kind not seen yet.
    pub fn charge(&mut self, api_key: i16, size: usize) -> Duration {
        let now = Instant::now();
        self.last_client = Some(now);
        let kind = kind(api_key, size);
        let work = match self.by_kind.iter().find(|l| l.kind == kind) {
            Some(latest) => latest
                .floor
                .saturating_sub(self.floor_nanos(now).unwrap_or(latest.floor)),
            None => 0,
        };
        Duration::from_nanos(work.saturating_add(NETWORK_NS))
    }

    /// Notes the round trip of the proxy's own probe ([`probe_request`]), whose response
    /// was `size` bytes: it counts in the percentiles as a client's would, but not as a
    /// client's use of the broker ([`BrokerTimes::in_use`]).
    pub fn probed(&mut self, size: usize, round_trip: Duration) {
        self.note(PROBE_API_KEY, size, round_trip, Instant::now());
    }

    /// Whether a client's round trip was noted within [`PROBE_IDLE`] of `now`: whether the
    /// proxy keeps probing the broker.
    pub fn in_use(&self, now: Instant) -> bool {
        self.last_client
            .is_some_and(|last| now.saturating_duration_since(last) < PROBE_IDLE)
    }

    fn note(&mut self, api_key: i16, size: usize, round_trip: Duration, now: Instant) -> Duration {
        let nanos = u64::try_from(round_trip.as_nanos()).unwrap_or(u64::MAX);
        let kind = kind(api_key, size);
        let at = match self.by_kind.iter().position(|l| l.kind == kind) {
            Some(at) => at,
            None => {
                self.by_kind.push(Latest::new(kind, now));
                self.by_kind.len() - 1
            }
        };
        self.by_kind[at].add(nanos, now);
        let floor = self.floor_nanos(now).unwrap_or(nanos);
        let work = self.by_kind[at].floor.saturating_sub(floor);
        Duration::from_nanos(work.saturating_add(NETWORK_NS))
    }

    /// The path's floor: the lowest of the floors (each the 10th percentile of its latest
    /// round trips) of the kinds noted within [`PROBE_IDLE`], or of all kinds when none
    /// was; `None` before any round trip.
    pub fn floor(&self) -> Option<Duration> {
        self.floor_nanos(Instant::now()).map(Duration::from_nanos)
    }

    fn floor_nanos(&self, now: Instant) -> Option<u64> {
        let recent = |l: &&Latest| now.saturating_duration_since(l.last) < PROBE_IDLE;
        let current = self.by_kind.iter().filter(recent).map(|l| l.floor).min();
        current.or_else(|| self.by_kind.iter().map(|l| l.floor).min())
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
    fn a_kind_not_seen_lately_leaves_the_floor() {
        // ApiVersions, seen only when the clients connected to an idle broker, holds the
        // floor down while the path is slower for everyone: a poller's Metadata is charged
        // the path's growth as work ...
        let start = Instant::now();
        let later = start + PROBE_IDLE;
        let mut times = BrokerTimes::new();
        times.note(API_VERSIONS, 400, us(60), start);
        for _ in 0..WINDOW {
            times.note(METADATA, 60, us(160), start);
        }
        assert_eq!(times.note(METADATA, 60, us(160), start), us(100) + NETWORK);
        // ... until it has not been seen for PROBE_IDLE; then a probe of the path as it is
        // now is the floor, and the poller is charged what its Metadata adds to it
        times.note(PROBE_API_KEY, 600, us(150), later);
        assert_eq!(times.floor_nanos(later), Some(150_000));
        assert_eq!(times.note(METADATA, 60, us(160), later), us(10) + NETWORK);
        // with no kind seen lately, all of them count
        let much_later = later + PROBE_IDLE;
        assert_eq!(times.floor_nanos(much_later), Some(60_000));
    }

    #[test]
    fn a_charge_without_a_round_trip_is_the_kinds_and_notes_nothing() {
        let mut times = BrokerTimes::new();
        assert_eq!(times.charge(DESCRIBE_CONFIGS, 300), NETWORK);
        assert!(times.in_use(Instant::now()));
        times.estimate(API_VERSIONS, 500, us(100));
        times.estimate(DESCRIBE_CONFIGS, 300, us(2_100));
        assert_eq!(times.charge(DESCRIBE_CONFIGS, 300), us(2_000) + NETWORK);
        // nothing noted: the floor and the kind's percentile stay
        for _ in 0..WINDOW {
            times.charge(DESCRIBE_CONFIGS, 300);
        }
        assert_eq!(times.floor(), Some(us(100)));
        assert_eq!(
            times.estimate(DESCRIBE_CONFIGS, 300, us(2_100)),
            us(2_000) + NETWORK
        );
    }

    #[test]
    fn probes_are_not_a_clients_use_of_the_broker() {
        let mut times = BrokerTimes::new();
        times.probed(300, us(150));
        assert!(!times.in_use(Instant::now()));
        assert_eq!(times.floor(), Some(us(150)));
        times.estimate(METADATA, 60, us(160));
        assert!(times.in_use(Instant::now()));
        assert!(!times.in_use(Instant::now() + PROBE_IDLE));
    }

    #[test]
    fn the_probe_is_an_api_versions_v0_request() {
        let frame = probe_request(7);
        let header = crate::header::parse_request_header(&frame).unwrap();
        assert_eq!(header.api_key, PROBE_API_KEY);
        assert_eq!(header.api_version, 0);
        assert_eq!(header.correlation_id, 7);
        assert_eq!(header.client_id(), PROBE_CLIENT_ID);
        assert_eq!(header.response_header_version(), 0);
        assert_eq!(frame.len(), 10 + PROBE_CLIENT_ID.len());
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
