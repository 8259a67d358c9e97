//! The broker's clock as quota sensors read it.

/// The clock the callers use when they pass no time: Kafka's clock without its jumps.
///
/// A broker reads `Time.SYSTEM.milliseconds()`, wall-clock milliseconds since the epoch,
/// and one rule depends on that origin: a new token bucket (the controller-mutation quota)
/// starts with no tokens *last updated at time 0*, so on a broker it is full at its first
/// use. This clock starts at the wall-clock time of its first call in the process and then
/// advances by a monotonic clock, so it has Kafka's values and never goes back when the
/// wall clock is set back (a broker's would). A wall clock before the epoch counts as 0.
pub fn monotonic_ms() -> i64 {
    use std::sync::OnceLock;
    use std::time::{Instant, SystemTime, UNIX_EPOCH};
    static ORIGIN: OnceLock<(Instant, i64)> = OnceLock::new();
    let (start, epoch_ms) = ORIGIN.get_or_init(|| {
        let wall = SystemTime::now()
            .duration_since(UNIX_EPOCH)
            .map_or(0, |d| i64::try_from(d.as_millis()).unwrap_or(i64::MAX / 2));
        (Instant::now(), wall)
    });
    epoch_ms.saturating_add(i64::try_from(start.elapsed().as_millis()).unwrap_or(i64::MAX / 2))
}

#[cfg(all(test, not(loom)))]
mod clock_tests {
    use super::monotonic_ms;
    use std::time::{SystemTime, UNIX_EPOCH};

    fn wall_ms() -> i64 {
        let since = SystemTime::now().duration_since(UNIX_EPOCH).unwrap();
        i64::try_from(since.as_millis()).unwrap()
    }

    #[test]
    fn the_default_clock_reads_epoch_milliseconds_and_never_goes_back() {
        let first = monotonic_ms();
        // Its origin is the epoch, as a broker's clock, not the process start: the two
        // agree to within the wall clock's own drift since the first call (a minute is
        // far more than a test run takes).
        assert!(
            (first - wall_ms()).abs() < 60_000,
            "{first} vs {}",
            wall_ms()
        );
        let mut last = first;
        for _ in 0..1000 {
            let now = monotonic_ms();
            assert!(now >= last, "{now} after {last}");
            last = now;
        }
    }
}
