//! A request's network-thread time, estimated from its request-log line.
//!
//! Kafka charges `request_percentage` twice per request: the handler thread's time, with a
//! quota check (in the line as `localTimeMs`), and, once the response is sent, the time the
//! network threads spent on the request's connection reading the request and writing the
//! response, without a check (`recordNetworkThreadTimeCallback`). No field of the line
//! holds the second; without it the replay's request-quota usage is a lower bound that,
//! near the quota, decides the throttle.
//!
//! How it was measured: Kafka 3.9.2, 4.1.2 and 4.4.0 brokers (PLAINTEXT on loopback, two
//! cores), one client id per API and size sending requests one at a time
//! (`tests/support/request_time_support.py`); each client's `request-time` sensor read
//! over JMX and turned back into its total, less the sum of its lines' `localTimeMs`, per
//! request (three rounds on each version, the first on a cold broker: nine runs a row):
//!
//! | requests | request, response bytes | `sendTimeMs` | network-thread time |
//! |---|---|---|---|
//! | ApiVersions, Metadata, Produce 100 B, Fetch 100 B | < 1 KiB | 17-104 µs | about the same: warm, 0.1-1.3 µs more; cold, up to 70 µs more |
//! | Fetch 64 KiB | 70, 65,662 | 22-124 µs | the same, within 2 µs |
//! | Produce 64 KiB | 65,658, 53 | 21-37 µs | 2-46 µs more (median 12: 0.18 ns per request byte) |
//! | Produce 900 KiB | 921,722, 52 | 41-182 µs | 292-442 µs more (median 342: 0.37 ns per request byte; 0.27 in another nine runs) |
//! | Fetch 900 KiB | 70, 921,725 | 180-1200 µs | 112-375 µs (median about 150) |
//! | Produce 29 KiB, 5 or 50 in flight (4.1.2, four runs) | 29,820, 52 | 23-33 µs | 29-72 µs |
//! | librdkafka producer at full speed, 29 KiB requests | 0.1-1 KiB, ~29 KiB | 13-25 µs | 26-48 µs |
//!
//! So: writing a response takes the network thread about its `sendTimeMs` (which starts
//! when the thread takes the response and ends when it has written it) up to about
//! 100 µs, slow ones included: Kafka times the thread by the wall clock, so a thread kept
//! off its core briefly is charged as `sendTimeMs` shows. Beyond that, `sendTimeMs` is
//! mostly the thread serving other connections: a fetch response larger than the socket's
//! send buffer is written over several polls, and a small response's send can wait
//! milliseconds behind other work (a Metadata answer sent in 8.3 ms among six busy
//! clients, where Kafka's throttles show it charged far less). A base and a small cost
//! per byte bound it. Reading a request costs about a µs, and a large one about 0.3 ns
//! per byte, before the handler ever sees it. The estimate is
//!
//! `sendTimeMs + READ_BASE_NS + READ_NS_PER_BYTE * request bytes`, with `sendTimeMs` at
//! most `WRITE_BASE_NS + WRITE_NS_PER_BYTE * response bytes` (a fetch's size; 0 for the
//! other responses, which are small),
//!
//! the response bytes being the fetch's size (0 for a throttled one: Kafka sends it empty)
//! and the request bytes a produce's (the size Kafka records); other requests count 0
//! bytes read. A producer with requests in flight (librdkafka at full speed; raw requests
//! 5 or 50 deep) is charged up to 1.9 times this in most runs; and TLS and SASL
//! connections cost the network threads more (encryption; no zero-copy send), unmeasured:
//! there the estimate stays low.

/// The network thread's cost of reading any request (small requests' network time less
/// their `sendTimeMs` on a warm broker: 0.1-1.3 µs).
pub const READ_BASE_NS: i64 = 1_000;
/// The network thread's cost of reading a request, per byte (between the 900 KiB
/// produces' medians, 0.27-0.37; the 64 KiB ones' is lower, 0.18).
pub const READ_NS_PER_BYTE: f64 = 0.3;
/// With [`WRITE_BASE_NS`], the most a fetch response's `sendTimeMs` counts: the 900 KiB
/// fetches' median network time (about 145 µs) at their size.
pub const WRITE_NS_PER_BYTE: f64 = 0.05;
/// With [`WRITE_NS_PER_BYTE`], the most a response's `sendTimeMs` counts: about the
/// slowest small responses' network time (ApiVersions and Metadata: up to 104 µs).
pub const WRITE_BASE_NS: i64 = 100_000;

/// The estimated network-thread time of a request, ns (>= 0): `send_us` its line's
/// `sendTimeMs` in µs, `request_bytes` what it is known to hold (0 when not), and
/// `fetch_bytes` a fetch's response size (`None` for other requests, whose responses are
/// small).
pub fn network_thread_ns(send_us: i64, request_bytes: i64, fetch_bytes: Option<i64>) -> i64 {
    let most = WRITE_BASE_NS.saturating_add(per_byte(WRITE_NS_PER_BYTE, fetch_bytes.unwrap_or(0)));
    let written = send_us.max(0).saturating_mul(1000).min(most);
    written
        .saturating_add(READ_BASE_NS)
        .saturating_add(per_byte(READ_NS_PER_BYTE, request_bytes))
}

fn per_byte(ns: f64, bytes: i64) -> i64 {
    // truncated (f64 to i64 saturates); a negative size counts as none
    (ns * bytes.max(0) as f64) as i64
}

/// The estimate in one sentence, for a back-test's notes.
pub fn describe() -> String {
    format!(
        "request time is the handler time (localTimeMs) plus an estimate of the network \
         threads' time, which Kafka also charges and the log does not show: sendTimeMs \
         (at most {} µs + {} ns per byte of a fetch response) plus {} µs + \
         {} ns per request byte (produce); measured on PLAINTEXT listeners, it is low for \
         TLS and for producers with many requests in flight",
        WRITE_BASE_NS / 1000,
        WRITE_NS_PER_BYTE,
        READ_BASE_NS / 1000,
        READ_NS_PER_BYTE
    )
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn a_small_request_costs_its_send_time_up_to_the_base() {
        // ApiVersions as measured: 20 µs sent, ~21 µs charged
        assert_eq!(network_thread_ns(20, 0, None), 20_000 + READ_BASE_NS);
        assert_eq!(network_thread_ns(0, 0, None), READ_BASE_NS);
        // a slow one counts whole up to the base: Kafka's thread time is wall time too
        assert_eq!(network_thread_ns(90, 0, None), 90_000 + READ_BASE_NS);
        // a send of milliseconds is the thread serving other connections meanwhile
        assert_eq!(
            network_thread_ns(8_349, 0, None),
            WRITE_BASE_NS + READ_BASE_NS
        );
    }

    #[test]
    fn a_long_send_is_bounded_by_the_bytes_written() {
        // a 900 KiB fetch sent over 740 µs: the thread's share is ~145 µs
        let ns = network_thread_ns(740, 0, Some(921_725));
        assert_eq!(ns, 100_000 + 46_086 + READ_BASE_NS);
        // a 64 KiB fetch sent at once: its send time
        assert_eq!(
            network_thread_ns(40, 0, Some(65_662)),
            40_000 + READ_BASE_NS
        );
        // any fetch's send counts at most the base and its bytes
        assert_eq!(
            network_thread_ns(5_000, 0, Some(0)),
            WRITE_BASE_NS + READ_BASE_NS
        );
        assert_eq!(
            network_thread_ns(5_000, 0, Some(102_420)),
            WRITE_BASE_NS + 5_121 + READ_BASE_NS
        );
    }

    #[test]
    fn a_large_request_adds_its_reading() {
        // a 900 KiB produce: ~277 µs of reading on top of its send time
        assert_eq!(
            network_thread_ns(25, 921_722, None),
            25_000 + 1_000 + 276_516
        );
    }

    #[test]
    fn odd_values_neither_wrap_nor_go_negative() {
        assert_eq!(network_thread_ns(-5, -1, Some(-1)), READ_BASE_NS);
        assert_eq!(network_thread_ns(-5, 0, Some(1 << 20)), READ_BASE_NS);
        assert_eq!(
            network_thread_ns(i64::MAX, i64::MAX, None),
            WRITE_BASE_NS + READ_BASE_NS + (0.3 * i64::MAX as f64) as i64
        );
        let written = network_thread_ns(i64::MAX, 0, Some(i64::MAX));
        assert_eq!(
            written,
            WRITE_BASE_NS + (0.05 * i64::MAX as f64) as i64 + READ_BASE_NS
        );
        assert!(network_thread_ns(i64::MAX, i64::MAX, Some(i64::MAX)) > written);
    }

    #[test]
    fn the_description_names_the_constants() {
        let text = describe();
        let written = "at most 100 µs + 0.05 ns per byte of a fetch response";
        assert!(text.contains(written), "{text}");
        assert!(text.contains("1 µs + 0.3 ns per request byte"), "{text}");
    }
}
