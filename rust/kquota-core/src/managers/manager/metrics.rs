//! What a metrics reporter reads from a [`QuotaManager`]: a client's rate, bound and
//! throttle-time average, every live sensor at once, their names and counts.

use std::sync::atomic::Ordering::Relaxed;

use super::{tags_of, Maps, QuotaManager, SharedSensors};
use crate::kafka::entity::{sanitize_user, Pair, PairRef};
use crate::sync::cow::{pin, Guard};

/// One live quota sensor, as a metrics reporter sees it.
#[derive(Debug, Clone, PartialEq)]
pub struct SensorSnapshot {
    /// The `user` tag (sanitized; empty when the sensor is not per user).
    pub user: String,
    /// The `client-id` tag (empty when the sensor is not per client id).
    pub client_id: String,
    /// The measured rate (bytes/s, or percent of a thread for `request`).
    pub rate: f64,
    /// The bound the sensor enforces ([`crate::UNLIMITED`] when no quota applies).
    pub bound: f64,
    /// The throttle-time average (NaN with no throttles), if that sensor is live.
    pub throttle_time_avg: Option<f64>,
}

impl QuotaManager {
    // -- reading ---------------------------------------------------------------------

    /// The live sensors entry of the client in the current maps, or in the maps a rebuild
    /// is copying from (a read: nothing is created or moved).
    fn existing_sensors(
        &self,
        user: &str,
        client_id: &str,
        guard: &Guard,
    ) -> Option<(Pair, SharedSensors)> {
        let (u, c) = match &self.callback {
            // With a callback: the sensor the client last resolved to (a read never calls
            // the callback).
            Some(_) => {
                let maps = self.maps.load(guard);
                let cached = maps
                    .clients
                    .get(&PairRef::new(user, client_id), guard)?
                    .sensors
                    .key()
                    .clone();
                (cached.first().to_owned(), cached.second().to_owned())
            }
            None => self
                .config
                .read(guard, |c| c.overrides.tags(&sanitize_user(user), client_id)),
        };
        let key = PairRef::new(&u, &c);
        let find = |maps: &Maps| {
            maps.sensors
                .get_node(&key, guard)
                .filter(|s| !s.is_killed())
        };
        let sensors =
            find(self.maps.load(guard)).or_else(|| self.maps.prev(guard).and_then(find))?;
        Some((Pair::new(&u, &c), sensors))
    }

    /// The client's quota sensor, if it exists.
    fn existing_quota_sensor(
        &self,
        user: &str,
        client_id: &str,
        guard: &Guard,
    ) -> Option<(Pair, SharedSensors)> {
        self.existing_sensors(user, client_id, guard)
            .filter(|(_, s)| s.quota_present(guard))
    }

    /// The client's current rate, measured at `now` (purges, like a JMX read);
    /// `None` when its sensor does not exist.
    pub fn measure(&self, user: &str, client_id: &str, now: i64) -> Option<f64> {
        let guard = pin();
        let (_, sensor) = self.existing_quota_sensor(user, client_id, &guard)?;
        Some(sensor.measure(&self.window, now, &guard))
    }

    /// The bound the client's existing sensor enforces.
    pub fn bound(&self, user: &str, client_id: &str) -> Option<f64> {
        let guard = pin();
        let (tags, sensor) = self.existing_quota_sensor(user, client_id, &guard)?;
        let config = self.config.load(&guard);
        Some(sensor.bound(tags_of(&tags), config, &guard))
    }

    /// The client's throttle-time average at `now` (NaN with no throttles in the
    /// horizon); `None` when that sensor does not exist.
    pub fn throttle_time_avg(&self, user: &str, client_id: &str, now: i64) -> Option<f64> {
        let guard = pin();
        let (_, sensor) = self
            .existing_sensors(user, client_id, &guard)
            .filter(|(_, s)| s.throttle_present(&guard))?;
        Some(sensor.throttle_average(now, &guard))
    }

    /// Every live quota sensor with its rate at `now` (a metrics scrape; purges like one).
    pub fn snapshot(&self, now: i64) -> Vec<SensorSnapshot> {
        let guard = pin();
        let config = self.config.load(&guard);
        let maps = self.maps.load(&guard);
        let sensors = maps.sensors.pin();
        let all = sensors
            .iter()
            .filter(|(_, sensor)| !sensor.is_killed() && sensor.quota_present(&guard))
            .map(|(tags, sensor)| {
                let rate = sensor.measure(&self.window, now, &guard);
                let bound = sensor.bound(tags_of(tags), config, &guard);
                let throttle_time_avg = sensor
                    .throttle_present(&guard)
                    .then(|| sensor.throttle_average(now, &guard));
                SensorSnapshot {
                    user: tags.first().to_owned(),
                    client_id: tags.second().to_owned(),
                    rate,
                    bound,
                    throttle_time_avg,
                }
            })
            .collect();
        all
    }

    pub(super) fn sensor_name(&self, kind: &str, tags: &Pair) -> String {
        format!(
            "{}{}-{}:{}",
            self.quota_type.group(),
            kind,
            tags.first(),
            tags.second()
        )
    }

    /// Kafka names of the live sensors, sorted.
    pub fn sensor_names(&self) -> Vec<String> {
        let guard = pin();
        let maps = self.maps.load(&guard);
        let mut names = Vec::new();
        for (tags, s) in maps.sensors.pin().iter().filter(|(_, s)| !s.is_killed()) {
            if s.quota_present(&guard) {
                names.push(self.sensor_name("", tags));
            }
            if s.throttle_present(&guard) {
                names.push(self.sensor_name("ThrottleTime", tags));
            }
        }
        names.sort();
        names
    }

    /// Number of live quota sensors.
    pub fn sensor_count(&self) -> usize {
        let guard = pin();
        let maps = self.maps.load(&guard);
        if !self.quota_removed_alone.load(Relaxed) {
            return maps.sensors.len();
        }
        // (Some entry may hold only a throttle-time sensor: count the quota sensors.)
        let sensors = maps.sensors.pin();
        let count = sensors
            .iter()
            .filter(|(_, s)| !s.is_killed() && s.quota_present(&guard))
            .count();
        count
    }

    /// Diagnostic (for tests and memory checks, not part of Kafka's API): how many
    /// entries the current sensor maps and resolution cache are sized for, i.e. the most
    /// one of them held (a map's table grows with it and never shrinks by itself: a
    /// resize happens only when an insert finds it half full). Back to about the live count after an expiry that
    /// left the maps below an eighth of this (and it was at least 1024): then
    /// [`Self::expire_sensors`] replaced them by right-sized ones.
    pub fn table_capacity(&self) -> usize {
        let guard = pin();
        let maps = self.maps.load(&guard);
        maps.peak.load(Relaxed).max(maps.len())
    }
}
