//! The arithmetic and the record/unrecord protocol of Kafka's connection-creation-rate
//! quotas (KIP-612, `ConnectionQuotas` in `core/src/main/scala/kafka/network/SocketServer.scala`
//! at the pinned commit), over any rate sensor; [`crate::managers::connection_quota`] holds the
//! broker's sensors and configuration.
//!
//! Every sensor here is Kafka's sampled `Rate` (spec section 2) with an upper bound, and
//! each new connection records `1.0` with a quota check. A violation gives Kafka's
//! throttle (spec section 4) *capped at one quota window* (`QuotaUtils.boundedThrottleTime`
//! with `quota.window.size.seconds`), then converted to an int.
//!
//! * Broker-wide and per-listener `max.connection.creation.rate`: the acceptor records
//!   the connection in the broker sensor (skipped for the inter-broker listener while
//!   there are several listeners) and then in the listener's sensor; it waits the larger
//!   of the two throttles before it accepts ([`accept_delay`]).
//! * Per IP (`connection_creation_rate`): after that wait, the connection is recorded in
//!   its IP's sensor; if that violates the IP's quota, the connection is taken back out
//!   of the IP, broker (unless protected) and listener sensors (records of `-1.0` without
//!   a check) and the socket is accepted and closed after the throttle ([`admit_ip`]).
//!
//! Kafka runs both steps under one lock; here each record-and-check is atomic on its own
//! sensor, and a connection refused by its IP is visible in the three sensors between its
//! record and its take-back: a concurrent connection may measure one connection more
//! than under Kafka's lock (at most one per connection being refused at that instant).
//! The loom model in `tests/loom.rs` checks that nothing is lost or counted twice.

use crate::kafka::javamath::long_to_int;
use crate::kafka::quota::Check;
use crate::kafka::rate::SampledRate;

/// `Integer.MAX_VALUE`: the "no limit" value of every connection-rate setting
/// (`IP_CONNECTION_RATE_DEFAULT`, `MAX_CONNECTION_CREATION_RATE_DEFAULT`). An IP whose
/// quota is this value is not measured at all.
pub const UNLIMITED_CONNECTION_RATE: i32 = i32::MAX;

/// A rate sensor a connection can be recorded in.
pub trait ConnectionRateSensor {
    /// Records `value` at `t` and checks the bound.
    fn record_checked(&self, value: f64, t: i64) -> Check;
    /// Records `value` at `t` without a check.
    fn record_unchecked(&self, value: f64, t: i64);
}

impl ConnectionRateSensor for SampledRate {
    fn record_checked(&self, value: f64, t: i64) -> Check {
        self.record(value, t).expect("a finite value")
    }

    fn record_unchecked(&self, value: f64, t: i64) {
        self.record_no_check(value, t).expect("a finite value");
    }
}

/// `QuotaUtils.boundedThrottleTime(...).toInt`: the throttle of a violation, at most
/// `max_throttle_ms` (one quota window), as an int; 0 without a violation.
pub fn bounded_throttle(check: Check, max_throttle_ms: i64) -> i32 {
    if check.violated {
        long_to_int(check.throttle_ms.min(max_throttle_ms))
    } else {
        0
    }
}

/// Records one connection in `sensor` at `t`; the bounded throttle.
pub fn record_connection<S: ConnectionRateSensor + ?Sized>(
    sensor: &S,
    t: i64,
    max_throttle_ms: i64,
) -> i32 {
    bounded_throttle(sensor.record_checked(1.0, t), max_throttle_ms)
}

/// The acceptor's delay for a new connection on a listener at `t`: records it in the
/// `broker` sensor (`None` for a protected inter-broker listener) and then in the
/// `listener` sensor, and returns the larger throttle, at least 0.
pub fn accept_delay<B, L>(broker: Option<&B>, listener: &L, t: i64, max_throttle_ms: i64) -> i32
where
    B: ConnectionRateSensor + ?Sized,
    L: ConnectionRateSensor + ?Sized,
{
    let broker = broker.map_or(0, |b| record_connection(b, t, max_throttle_ms));
    let listener = record_connection(listener, t, max_throttle_ms);
    broker.max(listener).max(0)
}

/// The IP check of a connection at `t` (after the acceptor's delay): records it in the
/// `ip` sensor; when that gives a throttle > 0 the connection is taken back out of the
/// `ip`, `broker` (`None` when protected) and `listener` sensors and the throttle is
/// returned: Kafka accepts the socket and closes it after that many ms. 0 = admitted.
pub fn admit_ip<I, B, L>(
    ip: &I,
    broker: Option<&B>,
    listener: &L,
    t: i64,
    max_throttle_ms: i64,
) -> i32
where
    I: ConnectionRateSensor + ?Sized,
    B: ConnectionRateSensor + ?Sized,
    L: ConnectionRateSensor + ?Sized,
{
    let throttle = record_connection(ip, t, max_throttle_ms);
    if throttle > 0 {
        ip.record_unchecked(-1.0, t);
        if let Some(b) = broker {
            b.record_unchecked(-1.0, t);
        }
        listener.record_unchecked(-1.0, t);
    }
    throttle
}

#[cfg(all(test, not(loom)))]
mod tests {
    use super::*;
    use crate::kafka::samples::WindowConfig;

    #[test]
    fn bounded_by_one_window() {
        // 2 samples of 1 s (ConnectionQuotasTest's config), IP quota 20: the 21st
        // connection at the same instant measures 21/s: (21-20)/20 * 1000 = 50 ms.
        let cfg = WindowConfig::new(2, 1000).unwrap();
        let ip = SampledRate::new(cfg, Some(20.0)).unwrap();
        let other = SampledRate::new(cfg, None).unwrap();
        for _ in 0..20 {
            assert_eq!(admit_ip(&ip, Some(&other), &other, 0, 1000), 0);
        }
        assert_eq!(admit_ip(&ip, Some(&other), &other, 0, 1000), 50);
        assert_eq!(ip.measure(0), 20.0);
        let tiny = SampledRate::new(cfg, Some(1e-9)).unwrap();
        assert_eq!(record_connection(&tiny, 0, 1000), 1000);
    }
}
