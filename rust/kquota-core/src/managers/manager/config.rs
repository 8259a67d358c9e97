//! Quota configuration of a [`QuotaManager`]: setting and removing quotas, telling the
//! callbacks and resetting their limits, and looking up which quota applies to a client.

use std::sync::{Arc, Weak};

use super::QuotaManager;
use crate::error::{check_quota, Result};
use crate::kafka::entity::{sanitize_user, Overrides, Pair, QuotaEntity};
use crate::kafka::quota::UNLIMITED;
use crate::kafka::rate_cell::Bound;
use crate::managers::callback::{check_limit, ClusterMetadata, QuotaCallback};
use crate::sync::cow::pin;

impl QuotaManager {
    // -- configuration ---------------------------------------------------------------

    /// Sets the override of `entity` (a finite value > 0), effective on the next record.
    /// With a callback: tells it (`update_quota`), then the siblings' callbacks, then
    /// resets the limits.
    pub fn set_quota(&self, entity: &QuotaEntity, value: f64) -> Result<()> {
        let value = check_quota(value)?;
        self.change(entity, Some(value))
    }

    /// Removes the override of `entity`. With a callback: tells it (`remove_quota`), then
    /// the siblings' callbacks, then resets the limits.
    pub fn remove_quota(&self, entity: &QuotaEntity) -> Result<()> {
        self.change(entity, None)
    }

    /// Applies a quota change. With a callback, its own callback is told first (failing,
    /// it changes nothing); the siblings' callbacks are told after the change is applied,
    /// each one even if another fails (as each Kafka broker takes a change on its own),
    /// and the first of their errors is returned.
    fn change(&self, entity: &QuotaEntity, value: Option<f64>) -> Result<()> {
        let Some(own) = &self.callback else {
            self.apply(entity, value);
            return Ok(());
        };
        let tell = |cb: &dyn QuotaCallback| match value {
            Some(v) => cb.update_quota(self.quota_type, entity, v),
            None => cb.remove_quota(self.quota_type, entity),
        };
        let family = self.lock_family();
        tell(own.as_ref())?;
        self.apply(entity, value);
        let mut failed = None;
        for cb in family.iter().filter_map(Weak::upgrade) {
            // (The same allocation: `own` itself, already told.)
            if Arc::as_ptr(&cb).cast::<()>() != Arc::as_ptr(own).cast::<()>() {
                if let Err(err) = tell(cb.as_ref()) {
                    failed.get_or_insert(err);
                }
            }
        }
        drop(family);
        self.reset_limits()?;
        failed.map_or(Ok(()), Err)
    }

    /// Kafka's `updateQuotaMetricConfigs` for a manager with a callback: asks the limit of
    /// every live sensor again and installs it, and makes every client resolve again (its
    /// tags are asked again) on its next request. Every limit is asked before anything
    /// changes, so a failing callback leaves the manager as it was. Without a callback it
    /// does nothing (the built-in precedence refreshes bounds by itself).
    pub fn reset_limits(&self) -> Result<()> {
        let Some(cb) = &self.callback else {
            return Ok(());
        };
        let guard = pin();
        let maps = self.maps.load(&guard);
        let sensors = maps
            .sensors
            .nodes(&guard, |_, s| !s.is_killed() && s.quota_present(&guard));
        let mut limits = Vec::with_capacity(sensors.len());
        for sensor in &sensors {
            limits.push(self.ask_limit(cb.as_ref(), sensor.key())?);
        }
        let mut generation = 0;
        self.config.update(&guard, |c| {
            c.generation += 1;
            generation = c.generation;
        });
        for (sensor, value) in sensors.iter().zip(limits) {
            sensor.cell.set_bound(
                Bound {
                    value: Some(value),
                    generation,
                },
                &guard,
            );
        }
        Ok(())
    }

    /// Asks the callback whether a reset is required (Kafka asks on every request; kquota
    /// when a client is resolved and when this is called, e.g. by a periodic task) and
    /// resets if so. Returns whether it reset.
    pub fn reset_if_required(&self) -> Result<bool> {
        let Some(cb) = &self.callback else {
            return Ok(false);
        };
        if cb.quota_reset_required(self.quota_type)? {
            self.reset_limits()?;
            return Ok(true);
        }
        Ok(false)
    }

    /// The bound of a sensor with `tags` from the callback: its checked limit, or
    /// [`UNLIMITED`] for `None`, as Kafka's `quotaLimit` gives `Long.MAX_VALUE`.
    pub(super) fn ask_limit(&self, cb: &dyn QuotaCallback, tags: &Pair) -> Result<f64> {
        let t = (tags.first(), tags.second());
        let limit = check_limit(t, cb.quota_limit(self.quota_type, t)?)?;
        Ok(limit.unwrap_or(UNLIMITED))
    }

    /// The tags the callback gives a client.
    pub(super) fn ask_tags(
        &self,
        cb: &dyn QuotaCallback,
        user: &str,
        client_id: &str,
    ) -> Result<Pair> {
        let (u, c) = cb.quota_metric_tags(self.quota_type, user, client_id)?;
        Ok(Pair::new(&u, &c))
    }

    fn apply(&self, entity: &QuotaEntity, value: Option<f64>) {
        self.config.update(&pin(), |c| {
            c.overrides.apply(entity, value);
            c.generation += 1;
        });
    }

    /// The override of exactly `entity`.
    pub fn quota(&self, entity: &QuotaEntity) -> Option<f64> {
        self.config.read(&pin(), |c| c.overrides.get(entity))
    }

    /// A copy of the overrides and enabled levels (what a replay starts from).
    pub(crate) fn overrides(&self) -> Overrides {
        self.config.read(&pin(), |c| c.overrides.clone())
    }

    /// Every override.
    pub fn quotas(&self) -> Vec<(QuotaEntity, f64)> {
        self.config.read(&pin(), |c| {
            c.overrides.iter().map(|(e, v)| (e.clone(), v)).collect()
        })
    }

    // -- entity lookup ---------------------------------------------------------------

    /// The metric tags `(user, client-id)` a request from `user` with `client_id` records
    /// under (with a callback: as the callback gives them now).
    pub fn tags(&self, user: &str, client_id: &str) -> Result<(String, String)> {
        if let Some(cb) = &self.callback {
            return cb.quota_metric_tags(self.quota_type, user, client_id);
        }
        Ok(self.config.read(&pin(), |c| {
            c.overrides.tags(&sanitize_user(user), client_id)
        }))
    }

    /// The quota that applies to the client now (`None` when none does; with a callback:
    /// as the callback gives it now).
    pub fn quota_for(&self, user: &str, client_id: &str) -> Result<Option<f64>> {
        if let Some(cb) = &self.callback {
            let tags = self.ask_tags(cb.as_ref(), user, client_id)?;
            let t = (tags.first(), tags.second());
            return check_limit(t, cb.quota_limit(self.quota_type, t)?);
        }
        Ok(self.config.read(&pin(), |c| {
            let (u, ci) = c.overrides.tags(&sanitize_user(user), client_id);
            c.overrides.quota_limit(&u, &ci)
        }))
    }
}

/// Tells every distinct callback of `managers` (by identity: three managers usually share
/// one) about `metadata` once, then resets the limits of the managers whose callback
/// answered true, as Kafka's broker does for its three quota managers. Managers without a
/// callback are skipped. Returns whether any callback answered true.
pub fn update_cluster_metadata(
    managers: &[&QuotaManager],
    metadata: &ClusterMetadata,
) -> Result<bool> {
    let mut answers: Vec<(usize, bool)> = Vec::new();
    let mut any = false;
    for m in managers {
        let Some(cb) = m.callback() else { continue };
        let id = cb.identity();
        let changed = match answers.iter().find(|(p, _)| *p == id) {
            Some(&(_, changed)) => changed,
            None => {
                let changed = cb.update_cluster_metadata(metadata)?;
                answers.push((id, changed));
                changed
            }
        };
        if changed {
            m.reset_limits()?;
            any = true;
        }
    }
    Ok(any)
}
