//! The request path of a [`QuotaManager`]: resolving a client to its sensors, recording
//! usage (one request or a batch), and accounting throttles in the delay queue.

use std::sync::atomic::Ordering::Acquire;

use super::{sensor_map, tags_of, Maps, QuotaConfig, QuotaManager, Resolved, Sensors};
use super::{SharedSensors, Tags};
use crate::error::{check_usage, Error, Result};
use crate::kafka::entity::{sanitize_user, Pair, PairRef};
use crate::kafka::quota::{Check, UNLIMITED};
use crate::kafka::quota_type::QuotaType;
use crate::kafka::rate_cell::Bound;
use crate::kafka::sensor::{max_value_in_quota_window, throttle_int};
use crate::kafka::units::rate_units;
use crate::managers::callback::QuotaCallback;
use crate::sync::cow::{pin, Guard};
use crate::sync::hash_map::Node;

impl QuotaManager {
    // -- resolution ------------------------------------------------------------------

    /// The live quota sensor with `tags` of a manager with a callback, created with the
    /// callback's limit if there is none; an existing sensor whose bound is older than
    /// `config` (a reset raced with its creation) gets the limit asked again.
    fn custom_sensor(
        &self,
        cb: &dyn QuotaCallback,
        config: &QuotaConfig,
        tags: &Pair,
        now: i64,
        guard: &Guard,
    ) -> Result<SharedSensors> {
        // (A sensor made below without an asked limit has none: it is not current; nor
        // is one that expiry removed.)
        let current = |s: &Sensors| {
            let b = s.cell.bound(guard);
            b.value.is_some() && b.generation >= config.generation
        };
        let existing = sensor_map(self.maps.load(guard))
            .get(tags, guard)
            .filter(|s| !s.is_killed());
        let mut asked = match &existing {
            Some(s) if current(s) => None,
            _ => Some(self.ask_limit(cb, tags)?),
        };
        let bound = Bound {
            value: asked,
            generation: config.generation,
        };
        let sensor = self.maps.live(
            sensor_map,
            tags,
            || Node::new(tags.clone(), Sensors::with_bound(bound, now)),
            guard,
        );
        sensor.settle_done();
        sensor.make_present(now, guard);
        if !current(&sensor) {
            let value = match asked.take() {
                Some(v) => v,
                None => self.ask_limit(cb, tags)?,
            };
            sensor.cell.set_bound(
                Bound {
                    value: Some(value),
                    generation: config.generation,
                },
                guard,
            );
        }
        Ok(sensor)
    }

    /// The client's sensors, created at `now` if they do not exist.
    /// `maps` are the maps loaded under `guard` and `clients` a guard of their cache.
    #[allow(clippy::too_many_arguments)]
    fn resolve<'g>(
        &self,
        config: &QuotaConfig,
        maps: &'g Maps,
        user: &str,
        client_id: &str,
        now: i64,
        guard: &'g Guard,
    ) -> Result<&'g Resolved>
    where
        Self: 'g,
    {
        loop {
            let round = self.expiry_round.load(Acquire);
            if let Some(resolved) = maps.clients.get(&PairRef::new(user, client_id), guard) {
                if resolved.generation == config.generation
                    && (resolved.expiry_round == round || resolved.sensors.complete(guard))
                {
                    return Ok(resolved);
                }
            }
            // Kafka's `SensorAccess.getOrCreate`, settled against a concurrent rebuild (the
            // sensors may come from newer maps than `maps`: caching them in `maps` is
            // still right, their users loaded `maps` before the rebuild).
            let sensors = match &self.callback {
                None => {
                    let (u, c) = config.overrides.tags(&sanitize_user(user), client_id);
                    let tags = Pair::new(&u, &c);
                    let sensors = self.maps.live(
                        sensor_map,
                        &tags,
                        || Node::new(tags.clone(), Sensors::new((&u, &c), config, now)),
                        guard,
                    );
                    sensors.settle_done();
                    sensors.make_present(now, guard);
                    sensors
                }
                Some(cb) => {
                    // (A reset here makes this resolution stale: the next request
                    // resolves again under the new limits.)
                    self.reset_if_required()?;
                    let tags = self.ask_tags(cb.as_ref(), user, client_id)?;
                    self.custom_sensor(cb.as_ref(), config, &tags, now, guard)?
                }
            };
            let resolved = Resolved {
                generation: config.generation,
                expiry_round: round,
                sensors,
            };
            // An expiry may remove the entry before we read it back: then resolve again.
            maps.clients
                .insert(Pair::new(user, client_id), resolved, guard);
        }
    }

    /// Calls `f` on the client's sensors (created at `now` if they do not exist).
    ///
    /// With one level of quotas enabled (or none) and no callback, the tags follow from
    /// the client without allocating, and the entry is looked up by them: one lookup, no
    /// resolution cache. Otherwise (several levels enabled, whose precedence asks the
    /// overrides, or a callback) resolutions are cached per client ([`Self::resolve`]).
    #[inline]
    fn with_sensors<R>(
        &self,
        config: &QuotaConfig,
        user: &str,
        client_id: &str,
        now: i64,
        guard: &Guard,
        f: impl FnOnce(Tags<'_>, &Sensors) -> R,
    ) -> Result<R> {
        let maps = self.maps.load(guard);
        if !config.custom {
            if let Some((u, c)) = config.overrides.simple_tags(user, client_id) {
                let u: &str = &u;
                if let Some(sensors) = maps
                    .sensors
                    .get(&PairRef::new(u, c), guard)
                    .filter(|s| s.ready())
                {
                    return Ok(f((u, c), sensors));
                }
                // Kafka's `SensorAccess.getOrCreate`, settled against a concurrent rebuild.
                let tags = Pair::new(u, c);
                let sensors = self.maps.live(
                    sensor_map,
                    &tags,
                    || Node::new(tags.clone(), Sensors::new((u, c), config, now)),
                    guard,
                );
                sensors.settle_done();
                sensors.make_present(now, guard);
                return Ok(f((u, c), &sensors));
            }
        }
        let resolved = self.resolve(config, maps, user, client_id, now, guard)?;
        Ok(f(tags_of(resolved.sensors.key()), &resolved.sensors))
    }

    /// Resolves the client's sensors (creating them at `now`), recording nothing.
    fn resolve_only(&self, user: &str, client_id: &str, now: i64) -> Result<()> {
        let guard = pin();
        let config = self.config.load(&guard);
        self.with_sensors(config, user, client_id, now, &guard, |_, _| ())
    }

    // -- the request path ------------------------------------------------------------

    /// Checks a usage value and converts it to the unit of the rate (nanoseconds to
    /// percent of a thread for `request`).
    fn usage(&self, value: f64) -> Result<f64> {
        Ok(rate_units(self.quota_type, check_usage(value)?))
    }

    /// Kafka's throttle as the manager returns it: the int of the long (wrapping), and
    /// for `request` first capped at one window.
    fn throttle_int(&self, check: Check) -> i32 {
        throttle_int(self.quota_type, &self.window, self.release, check)
    }

    /// Records usage with a quota check and returns Kafka's throttle time in ms
    /// (`maybeRecordAndGetThrottleTimeMs`); `<= 0` means not throttled.
    pub fn record(&self, user: &str, client_id: &str, value: f64, now: i64) -> Result<i32> {
        let value = self.usage(value)?;
        self.record_usage(user, client_id, value, now, true)
    }

    /// Takes back usage recorded earlier (a throttled fetch), without a check.
    pub fn unrecord(&self, user: &str, client_id: &str, value: f64, now: i64) -> Result<()> {
        let value = self.usage(value)?;
        self.record_usage(user, client_id, -value, now, false)?;
        Ok(())
    }

    /// Records usage without a check (network-thread time after the response is sent).
    pub fn record_no_throttle(
        &self,
        user: &str,
        client_id: &str,
        value: f64,
        now: i64,
    ) -> Result<()> {
        let value = self.usage(value)?;
        self.record_usage(user, client_id, value, now, false)?;
        Ok(())
    }

    /// Records a converted, valid value; does nothing while no quota level is enabled.
    #[inline]
    fn record_usage(
        &self,
        user: &str,
        client_id: &str,
        value: f64,
        now: i64,
        check: bool,
    ) -> Result<i32> {
        let guard = pin();
        let config = self.config.load(&guard);
        if config.overrides.enabled == 0 {
            return Ok(0);
        }
        match self.record_ready(config, user, client_id, value, now, check, &guard) {
            Some(outcome) => Ok(self.throttle_int(outcome)),
            None => self.record_resolving(config, user, client_id, value, now, check, &guard),
        }
    }

    /// [`Self::record_usage`]'s common case, inline: no callback, one level of quotas
    /// (the tags follow from the client, [`Overrides::simple_tags`]), and the entry of
    /// those tags in the current maps and ready (what [`Self::with_sensors`] checks
    /// first). `None` otherwise, having recorded nothing.
    ///
    /// [`Overrides::simple_tags`]: crate::kafka::entity::Overrides::simple_tags
    #[inline(always)]
    #[allow(clippy::too_many_arguments)]
    fn record_ready(
        &self,
        config: &QuotaConfig,
        user: &str,
        client_id: &str,
        value: f64,
        now: i64,
        check: bool,
        guard: &Guard,
    ) -> Option<Check> {
        if config.custom {
            return None;
        }
        let (u, c) = config.overrides.simple_tags(user, client_id)?;
        let u: &str = &u;
        let sensors = self
            .maps
            .load(guard)
            .sensors
            .get(&PairRef::new(u, c), guard)
            .filter(|s| s.ready())?;
        Some(sensors.record((u, c), config, &self.window, value, now, check, guard))
    }

    /// [`Self::record_usage`] in every case: resolving the client's sensors (creating
    /// them if need be) and recording in any way.
    #[inline(never)]
    #[allow(clippy::too_many_arguments)]
    fn record_resolving(
        &self,
        config: &QuotaConfig,
        user: &str,
        client_id: &str,
        value: f64,
        now: i64,
        check: bool,
        guard: &Guard,
    ) -> Result<i32> {
        // (The closure returns the throttle, not the check: copying the check out of the
        // closure's result makes a load wait on two stores.)
        self.with_sensors(config, user, client_id, now, guard, |tags, s| {
            self.throttle_int(s.record(tags, config, &self.window, value, now, check, guard))
        })
    }

    /// Accounts a throttle of `throttle_ms` > 0 applied to a client: records it in the
    /// throttle-time sensor and, when the response went out on a `channel`, queues that
    /// channel until `now + throttle_ms` (Kafka's delay queue). A throttle with no channel
    /// is only accounted: nothing would ever drain its queue entry. Returns the end of
    /// the mute.
    pub fn throttle(
        &self,
        user: &str,
        client_id: &str,
        throttle_ms: i64,
        now: i64,
        channel: Option<u64>,
    ) -> Result<i64> {
        if throttle_ms <= 0 {
            return Err(Error::InvalidUsage(format!(
                "invalid throttle_ms {throttle_ms}: only a throttle > 0 mutes a channel"
            )));
        }
        let guard = pin();
        let config = self.config.load(&guard);
        self.with_sensors(config, user, client_id, now, &guard, |_, s| {
            s.record_throttle(throttle_ms as f64, now, &guard)
        })?;
        let end = now.saturating_add(throttle_ms);
        if let Some(channel) = channel {
            self.delay_queue.push(end, channel);
        }
        Ok(end)
    }

    /// Removes the delay-queue entries that end at or before `now`; returns their channels.
    pub fn expired_channels(&self, now: i64) -> Vec<u64> {
        self.delay_queue.expire(now)
    }

    /// Channels waiting in the delay queue (Kafka's `queue-size`).
    pub fn queue_size(&self) -> usize {
        self.delay_queue.len()
    }

    /// The earliest end of a mute still queued.
    pub fn next_unmute_ms(&self) -> Option<i64> {
        self.delay_queue.next_end_ms()
    }

    /// The fetch-size cap `bound * (num_samples - 1) * window_seconds`, or `f64::MAX`
    /// when no quota applies; creates the client's sensors when quotas are enabled. (With
    /// a callback the limit is the one its sensor holds, asked at resolution or reset.)
    pub fn max_value_in_quota_window(&self, user: &str, client_id: &str, now: i64) -> Result<f64> {
        let guard = pin();
        let config = self.config.load(&guard);
        if config.overrides.enabled == 0 {
            return Ok(f64::MAX);
        }
        let limit = self.with_sensors(config, user, client_id, now, &guard, |tags, quota| {
            if config.custom {
                Some(quota.bound(tags, config, &guard)).filter(|&b| b != UNLIMITED)
            } else {
                config.overrides.quota_limit(tags.0, tags.1)
            }
        })?;
        Ok(max_value_in_quota_window(limit, &self.window))
    }

    // -- batch -----------------------------------------------------------------------

    /// Records many requests in order: event `i` is `record(keys[key_index[i]], values[i],
    /// now[i])`, and for a `fetch` manager a throttled fetch (throttle > 0, or
    /// `unrecord_if[i]`: another quota throttled the same request) is then unrecorded, as
    /// Kafka takes back the bytes of a fetch it answers empty. So on a fetch manager a batch
    /// equals `record` followed by `unrecord` for each throttled event, not `record` alone.
    /// `unrecord_if` is refused on produce and request managers, where Kafka unrecords
    /// nothing. Every input is checked before anything is recorded. Returns the throttle
    /// of each event.
    pub fn record_batch(
        &self,
        now: &[i64],
        key_index: &[i64],
        values: &[f64],
        keys: &[(String, String)],
        unrecord_if: Option<&[bool]>,
    ) -> Result<Vec<i32>> {
        let fetch = self.quota_type == QuotaType::Fetch;
        if unrecord_if.is_some() && !fetch {
            return Err(Error::InvalidUsage(format!(
                "unrecord_if given to a {} manager: only a fetch manager unrecords \
                 (a throttled fetch is answered empty); pass None",
                self.quota_type.as_str()
            )));
        }
        let n = now.len();
        if key_index.len() != n || values.len() != n || unrecord_if.is_some_and(|u| u.len() != n) {
            return Err(Error::InvalidUsage(format!(
                "batch arrays differ in length: now_ms {n}, key_index {}, values {}{}",
                key_index.len(),
                values.len(),
                unrecord_if
                    .map(|u| format!(", unrecord_if {}", u.len()))
                    .unwrap_or_default()
            )));
        }
        if let Some((i, k)) = key_index
            .iter()
            .enumerate()
            .find(|(_, &k)| k < 0 || k as usize >= keys.len())
        {
            return Err(Error::InvalidUsage(format!(
                "invalid key_index {k} at event {i}: it must index the {} keys",
                keys.len()
            )));
        }
        let mut usage = Vec::with_capacity(n);
        for (i, &v) in values.iter().enumerate() {
            usage.push(
                self.usage(v)
                    .map_err(|e| Error::InvalidUsage(format!("event {i}: {e}")))?,
            );
        }
        if self.callback.is_some() {
            // Resolve every key first: a callback that fails does so before anything is
            // recorded.
            let mut used = vec![None; keys.len()];
            for (&k, &t) in key_index.iter().zip(now) {
                used[k as usize].get_or_insert(t);
            }
            for ((user, client_id), t) in keys.iter().zip(used) {
                if let Some(t) = t {
                    self.resolve_only(user, client_id, t)?;
                }
            }
        }
        let mut throttles = Vec::with_capacity(n);
        for i in 0..n {
            let (user, client_id) = &keys[key_index[i] as usize];
            let throttle = self.record_usage(user, client_id, usage[i], now[i], true)?;
            if fetch && (throttle > 0 || unrecord_if.is_some_and(|u| u[i])) {
                self.record_usage(user, client_id, -usage[i], now[i], false)?;
            }
            throttles.push(throttle);
        }
        Ok(throttles)
    }
}

#[cfg(test)]
mod tests {
    use super::super::tests::user;
    use super::*;
    use crate::kafka::entity::QuotaEntity;
    use crate::kafka::samples::WindowConfig;

    #[test]
    fn nothing_is_measured_before_any_quota() {
        let m = QuotaManager::with_defaults(QuotaType::Produce);
        assert_eq!(m.record("alice", "app", 1e12, 0).unwrap(), 0);
        assert_eq!(m.sensor_count(), 0);
        assert_eq!(
            m.max_value_in_quota_window("alice", "app", 0).unwrap(),
            f64::MAX
        );
    }

    #[test]
    fn first_request_on_a_user_quota() {
        let m = QuotaManager::with_defaults(QuotaType::Produce);
        m.set_quota(&user("alice"), 1024.0).unwrap();
        assert_eq!(m.record("alice", "app1", 600.0, 0).unwrap(), 0);
        assert_eq!(m.measure("alice", "app1", 0), Some(60.0));
        assert_eq!(m.record("alice", "app1", 10_000.0, 0).unwrap(), 352);
        assert_eq!(
            m.tags("alice", "app2").unwrap(),
            ("alice".to_owned(), String::new())
        );
        assert_eq!(
            m.sensor_names(),
            vec!["Produce-alice:", "ProduceThrottleTime-alice:"]
        );
    }

    #[test]
    fn bad_input_changes_nothing() {
        let m = QuotaManager::with_defaults(QuotaType::Fetch);
        for bad in [0.0, -1.0, f64::NAN, f64::INFINITY] {
            assert!(matches!(
                m.set_quota(&user("a"), bad),
                Err(Error::InvalidQuota(_))
            ));
        }
        assert!(!m.enabled());
        m.set_quota(&user("a"), 100.0).unwrap();
        m.record("a", "c", 500.0, 0).unwrap();
        for bad in [-1.0, f64::NAN, f64::NEG_INFINITY] {
            assert!(m.record("a", "c", bad, 0).is_err());
            assert!(m.unrecord("a", "c", bad, 0).is_err());
        }
        assert_eq!(m.measure("a", "c", 0), Some(50.0));
        assert!(m.throttle("a", "c", 0, 0, Some(1)).is_err());
        assert_eq!(m.queue_size(), 0);
        let keys = vec![("a".to_owned(), "c".to_owned())];
        assert!(m
            .record_batch(&[0, 0], &[0, 1], &[1.0, 1.0], &keys, None)
            .is_err());
        assert!(m
            .record_batch(&[0, 0], &[0, 0], &[1.0, f64::NAN], &keys, None)
            .is_err());
        assert_eq!(m.measure("a", "c", 0), Some(50.0));
        assert!(
            QuotaManager::new(QuotaType::Produce, WindowConfig::new(11, 1500).unwrap(), 1).is_err()
        );
        assert!("bytes".parse::<QuotaType>().is_err());
    }

    #[test]
    fn a_throttle_without_a_channel_is_accounted_but_not_queued() {
        let m = QuotaManager::with_defaults(QuotaType::Produce);
        m.set_quota(&user("a"), 100.0).unwrap();
        assert_eq!(m.throttle("a", "c", 500, 0, None).unwrap(), 500);
        assert_eq!(m.queue_size(), 0);
        assert_eq!(m.throttle_time_avg("a", "c", 0), Some(500.0));
        assert_eq!(m.throttle("a", "c", 300, 0, Some(7)).unwrap(), 300);
        assert_eq!(m.queue_size(), 1);
        assert_eq!(m.throttle_time_avg("a", "c", 0), Some(400.0));
        assert_eq!(m.expired_channels(300), vec![7]);
    }

    #[test]
    fn unrecord_if_only_on_fetch_managers() {
        let keys = vec![("a".to_owned(), "c".to_owned())];
        for quota_type in [QuotaType::Produce, QuotaType::Request] {
            let m = QuotaManager::with_defaults(quota_type);
            m.set_quota(&user("a"), 100.0).unwrap();
            let err = m
                .record_batch(&[0], &[0], &[1.0], &keys, Some(&[true]))
                .unwrap_err();
            assert!(matches!(err, Error::InvalidUsage(_)), "{err:?}");
            assert!(err.to_string().contains(quota_type.as_str()), "{err}");
            assert_eq!(m.sensor_count(), 0, "a refused batch recorded something");
        }
        let m = QuotaManager::with_defaults(QuotaType::Fetch);
        m.set_quota(&user("a"), 100.0).unwrap();
        m.record_batch(&[0], &[0], &[1.0], &keys, Some(&[true]))
            .unwrap();
        assert_eq!(m.measure("a", "c", 0), Some(0.0));
    }

    #[test]
    fn batch_equals_one_at_a_time() {
        let a = QuotaManager::with_defaults(QuotaType::Fetch);
        let b = QuotaManager::with_defaults(QuotaType::Fetch);
        for m in [&a, &b] {
            m.set_quota(
                &QuotaEntity::parse(None, Some("<default>")).unwrap(),
                5000.0,
            )
            .unwrap();
        }
        let keys: Vec<(String, String)> =
            (0..3).map(|i| ("u".to_owned(), format!("c{i}"))).collect();
        let now: Vec<i64> = (0..600).map(|i| i * 7).collect();
        let idx: Vec<i64> = (0..600).map(|i| i % 3).collect();
        let values: Vec<f64> = (0..600).map(|i| f64::from((i * 37) % 4000)).collect();
        let batch = a.record_batch(&now, &idx, &values, &keys, None).unwrap();
        for i in 0..600 {
            let (u, c) = &keys[idx[i] as usize];
            let t = b.record(u, c, values[i], now[i]).unwrap();
            if t > 0 {
                b.unrecord(u, c, values[i], now[i]).unwrap();
            }
            assert_eq!(batch[i], t, "event {i}");
        }
        assert!(batch.iter().any(|&t| t > 0), "the trace must throttle");
    }
}
