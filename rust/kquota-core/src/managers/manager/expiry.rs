//! Sensor expiry of a [`QuotaManager`]: idle sensors removed and freed, and the maps
//! replaced by right-sized copies once expiry has left them mostly empty.

use std::sync::atomic::{
    AtomicBool, AtomicI64,
    Ordering::{Relaxed, Release},
};

use super::{sensor_map, Maps, QuotaManager};
use crate::kafka::entity::Pair;
use crate::kafka::sensor::sensor_expired;
use crate::sync::cow::{collect_garbage, pin, Guard};
use crate::sync::table_swap::{copy_again, unlink_dead, Tables};

/// The maps are rebuilt right-sized once they reached at least this many entries and
/// hold fewer than an eighth of that.
const SHRINK_FLOOR: usize = 1024;
const SHRINK_RATIO: usize = 8;

/// Removes the sensors idle for longer than `expiry_ms` in `maps`, killing and unlinking
/// the entries left with neither sensor (and unlinking any killed entry found there);
/// yields the Kafka names of the sensors this call removed. An entry is marked before it
/// is unlinked: an entry missing from a map it was in is dead, which a rebuild's second
/// copy relies on.
fn remove_expired(
    tables: &Tables<Maps>,
    maps: &Maps,
    now: i64,
    expiry_ms: i64,
    name: impl Fn(&str, &Pair) -> String,
    quota_removed_alone: &AtomicBool,
    guard: &Guard,
) -> Vec<String> {
    let idle = |last: &AtomicI64| sensor_expired(last.load(Relaxed), now, expiry_ms);
    let stale = maps.sensors.nodes(guard, |_, s| {
        s.is_killed()
            || (s.quota_present(guard) && idle(&s.quota_last))
            || (s.throttle_present(guard) && idle(&s.throttle_last))
            || (!s.quota_present(guard) && !s.throttle_present(guard))
    });
    let mut names = Vec::new();
    for sensors in stale {
        let tags = sensors.key();
        if !sensors.is_killed() {
            let (quota, throttle) = (
                sensors.quota_present(guard),
                sensors.throttle_present(guard),
            );
            if (!quota || idle(&sensors.quota_last)) && (!throttle || idle(&sensors.throttle_last))
            {
                // Both sensors gone: the entry is killed whole (nothing is copied or
                // retired per sensor).
                if sensors.kill() {
                    if quota {
                        names.push(name("", tags));
                    }
                    if throttle {
                        names.push(name("ThrottleTime", tags));
                    }
                }
            } else {
                // One of them expired: it is removed in place.
                if sensors.expire_quota(now, expiry_ms, guard) {
                    names.push(name("", tags));
                    quota_removed_alone.store(true, Relaxed);
                    sensors.mark_partial();
                }
                if sensors.expire_throttle(now, expiry_ms, guard) {
                    names.push(name("ThrottleTime", tags));
                    sensors.mark_partial();
                }
                continue;
            }
        }
        tables.unlink(sensor_map, maps, tags, &sensors, guard);
    }
    names
}

impl QuotaManager {
    /// Removes the sensors idle for longer than the expiry (strictly) and frees them;
    /// returns their Kafka names, sorted. Kafka runs this every 30 s. Then, if the maps
    /// hold less than an eighth of what they once did, replaces them by right-sized
    /// copies (unless another call is doing that already).
    pub fn expire_sensors(&self, now: i64) -> Vec<String> {
        let expiry = self.sensor_expiry_ms;
        let guard = pin();
        let maps = self.maps.load(&guard);
        // The maps grow only between expiries: their size now is the most they held.
        maps.peak.fetch_max(maps.len(), Relaxed);
        let name = |kind: &str, tags: &Pair| self.sensor_name(kind, tags);
        let alone = &self.quota_removed_alone;
        let mut names = remove_expired(&self.maps, maps, now, expiry, name, alone, &guard);
        if !names.is_empty() {
            self.expiry_round.fetch_add(1, Release);
            let current = self.maps.load(&guard);
            current
                .clients
                .retain(|_, r| r.sensors.complete(&guard), &guard);
            self.shrink(current, &guard);
            drop(guard);
            // The removed entries (at most one per name, and as many cached
            // resolutions) and any replaced tables are retired: free them now, not
            // over the next pins.
            collect_garbage(2 * names.len());
        }
        names.sort();
        names
    }

    /// Replaces `maps` (the current maps) by right-sized copies if they hold less than
    /// an eighth of what they once did.
    /// Whether it replaced them.
    fn shrink(&self, maps: &Maps, guard: &Guard) -> bool {
        let peak = maps.peak.load(Relaxed);
        if peak < SHRINK_FLOOR || maps.len().saturating_mul(SHRINK_RATIO) >= peak {
            return false;
        }
        self.maps.rebuild(
            Maps::copy_of,
            |old, new| {
                copy_again(&old.sensors, &new.sensors);
            },
            |new| {
                unlink_dead(&new.sensors);
            },
            guard,
        )
    }
}

#[cfg(test)]
mod tests {
    use super::super::tests::user;
    use super::*;
    use crate::kafka::entity::QuotaEntity;
    use crate::kafka::quota_type::QuotaType;
    use crate::kafka::sensor::DEFAULT_SENSOR_EXPIRY_MS;

    #[test]
    fn quota_and_throttle_time_sensors_expire_separately() {
        let e = DEFAULT_SENSOR_EXPIRY_MS;
        let m = QuotaManager::with_defaults(QuotaType::Produce);
        m.set_quota(&user("u"), 100.0).unwrap();
        // The throttle-time sensor outlives the quota sensor.
        m.record("u", "c", 1e6, 0).unwrap();
        m.throttle("u", "c", 50, 1000, None).unwrap();
        assert_eq!(m.expire_sensors(e + 1), vec!["Produce-u:"]);
        assert_eq!(m.sensor_names(), vec!["ProduceThrottleTime-u:"]);
        assert_eq!(m.sensor_count(), 0);
        assert_eq!(m.measure("u", "c", e + 1), None);
        assert_eq!(m.bound("u", "c"), None);
        assert_eq!(m.throttle_time_avg("u", "c", 1000), Some(50.0));
        assert!(m.snapshot(e + 1).is_empty());
        // The next request makes a brand-new quota sensor; the throttle one is kept.
        m.record("u", "c", 10.0, e + 2).unwrap();
        assert_eq!(m.sensor_count(), 1);
        assert_eq!(m.measure("u", "c", e + 2), Some(1.0));
        assert_eq!(m.throttle_time_avg("u", "c", 1000), Some(50.0));
        assert_eq!(
            m.sensor_names(),
            vec!["Produce-u:", "ProduceThrottleTime-u:"]
        );
        // Then the throttle-time sensor expires alone, and a request makes it anew.
        assert_eq!(m.expire_sensors(e + 1001), vec!["ProduceThrottleTime-u:"]);
        assert_eq!(m.sensor_names(), vec!["Produce-u:"]);
        assert_eq!(m.throttle_time_avg("u", "c", e + 1001), None);
        m.record("u", "c", 10.0, e + 1002).unwrap();
        assert!(m.throttle_time_avg("u", "c", e + 1002).unwrap().is_nan());
        // Both expire: the entry goes.
        let mut gone = m.expire_sensors(3 * e);
        gone.sort();
        assert_eq!(gone, vec!["Produce-u:", "ProduceThrottleTime-u:"]);
        assert_eq!(m.maps.load(&pin()).sensors.len(), 0);
        assert_eq!(m.sensor_count(), 0);
        // A throttle alone also makes both sensors anew.
        m.throttle("u", "c", 5, 4 * e, None).unwrap();
        assert_eq!(
            m.sensor_names(),
            vec!["Produce-u:", "ProduceThrottleTime-u:"]
        );
    }

    #[test]
    fn expiry_frees_sensors_and_cached_resolutions() {
        let m = QuotaManager::with_defaults(QuotaType::Produce);
        m.set_quota(&QuotaEntity::parse(None, Some("<default>")).unwrap(), 100.0)
            .unwrap();
        for i in 0..100 {
            m.record("u", &format!("c{i}"), 1.0, 0).unwrap();
        }
        assert_eq!(m.sensor_count(), 100);
        // One level enabled: the tags follow from the client, nothing is cached.
        assert_eq!(m.maps.load(&pin()).sensors.len(), 100);
        assert_eq!(m.maps.load(&pin()).clients.len(), 0);
        assert!(m.expire_sensors(DEFAULT_SENSOR_EXPIRY_MS).is_empty());
        assert_eq!(m.expire_sensors(DEFAULT_SENSOR_EXPIRY_MS + 1).len(), 200);
        assert_eq!(m.sensor_count(), 0);
        assert_eq!(m.maps.load(&pin()).sensors.len(), 0);
        // Two levels: resolutions are cached per client, and expiry drops them.
        m.set_quota(&user("v"), 100.0).unwrap();
        for i in 0..100 {
            m.record("u", &format!("c{i}"), 1.0, 0).unwrap();
        }
        m.record("v", "c0", 1.0, 0).unwrap();
        assert_eq!(m.sensor_count(), 101);
        assert_eq!(m.maps.load(&pin()).clients.len(), 101);
        assert_eq!(m.expire_sensors(DEFAULT_SENSOR_EXPIRY_MS + 1).len(), 202);
        assert_eq!(m.sensor_count(), 0);
        assert_eq!(m.maps.load(&pin()).clients.len(), 0);
    }

    #[test]
    fn an_expired_burst_gives_its_table_capacity_back() {
        let m = QuotaManager::with_defaults(QuotaType::Produce);
        m.set_quota(&QuotaEntity::parse(None, Some("<default>")).unwrap(), 1e9)
            .unwrap();
        for i in 0..100_000 {
            m.record("u", &format!("burst-{i}"), 1.0, 0).unwrap();
        }
        // Ten clients still active at the expiry: they survive the rebuild.
        for i in 0..10 {
            m.record("u", &format!("steady-{i}"), 7.0, 0).unwrap();
            m.record("u", &format!("steady-{i}"), 3.0, DEFAULT_SENSOR_EXPIRY_MS)
                .unwrap();
        }
        assert!(m.table_capacity() >= 100_010);
        // Every burst sensor, and the steady clients' throttle-time sensors (idle).
        let expired = m.expire_sensors(DEFAULT_SENSOR_EXPIRY_MS + 1);
        assert_eq!(expired.len(), 200_010);
        assert_eq!(m.sensor_count(), 10);
        assert!(m.table_capacity() <= 16, "{}", m.table_capacity());
        // Measured where the steady clients' one sample starts: the rate is over 10 s.
        let now = DEFAULT_SENSOR_EXPIRY_MS;
        let total = |client: &str| m.measure("u", client, now).map(|r| r * 10.0);
        for i in 0..10 {
            assert_eq!(total(&format!("steady-{i}")), Some(3.0), "steady-{i}");
        }
        // Records keep working on old and new clients.
        m.record("u", "steady-0", 1.0, now).unwrap();
        m.record("u", "new", 5.0, now).unwrap();
        assert_eq!(total("steady-0"), Some(4.0));
        assert_eq!(total("new"), Some(5.0));
        assert_eq!(m.sensor_count(), 11);
        // (The two clients resolved again have a throttle-time sensor again.)
        assert_eq!(m.sensor_names().len(), 13);
        // Below the floor nothing is rebuilt.
        assert!(m.expire_sensors(now).is_empty());
        assert_eq!(m.table_capacity(), 11);
    }
}
