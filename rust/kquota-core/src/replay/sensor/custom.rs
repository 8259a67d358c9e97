//! The replay's hook for a manager built with a [`QuotaCallback`] (KIP-257): pairs are
//! resolved to tags and limits by the callback, once per pair, and again after a quota
//! change (which the callback is told about, as the manager tells it), exactly when the
//! manager would ask. Everything else in the replay is unchanged.

use std::collections::HashMap;
use std::fmt;
use std::sync::Arc;

use super::SensorTable;
use crate::error::Result;
use crate::kafka::entity::QuotaEntity;
use crate::kafka::quota::UNLIMITED;
use crate::managers::callback::{check_limit, QuotaCallback};

/// The callback of a table and the limit it gave each sensor (by sensor id).
#[derive(Clone)]
pub(crate) struct Custom {
    callback: Arc<dyn QuotaCallback>,
    limits: Vec<Option<f64>>,
}

impl fmt::Debug for Custom {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.debug_struct("Custom")
            .field("limits", &self.limits)
            .finish_non_exhaustive()
    }
}

/// Kafka's `Sanitizer.desanitize`: the principal a sanitized user name came from
/// (the callback is given principals as clients authenticate, as in the manager).
fn desanitize(name: &str) -> String {
    let bytes = name.as_bytes();
    let mut out = Vec::with_capacity(bytes.len());
    let mut i = 0;
    while i < bytes.len() {
        let hex = bytes
            .get(i + 1..i + 3)
            .and_then(|h| std::str::from_utf8(h).ok())
            .and_then(|h| u8::from_str_radix(h, 16).ok());
        match (bytes[i], hex) {
            (b'%', Some(b)) => {
                out.push(b);
                i += 3;
            }
            (b, _) => {
                out.push(b);
                i += 1;
            }
        }
    }
    String::from_utf8_lossy(&out).into_owned()
}

impl SensorTable {
    /// The table resolves through `callback` when there is one.
    pub fn with_callback(mut self, callback: Option<&Arc<dyn QuotaCallback>>) -> Self {
        self.custom = callback.map(|cb| Custom {
            callback: cb.clone(),
            limits: Vec::new(),
        });
        self
    }

    /// The limit the callback gave sensor `id` (`None`: no quota).
    pub(super) fn custom_limit(&self, id: usize) -> Option<Option<f64>> {
        self.custom.as_ref().map(|c| c.limits[id])
    }

    fn ask_limit(&self, cb: &dyn QuotaCallback, tags: &(String, String)) -> Result<Option<f64>> {
        let t = (tags.0.as_str(), tags.1.as_str());
        check_limit(t, cb.quota_limit(self.quota_type, t)?)
    }

    /// [`SensorTable::resolve`] through the callback: every pair's tags and every new
    /// sensor's limit are asked before anything changes.
    pub(super) fn resolve_custom(&mut self, pairs: &[(String, String)], from: usize) -> Result<()> {
        let Some(custom) = &self.custom else {
            return Ok(());
        };
        let cb = custom.callback.clone();
        let mut plan = Vec::with_capacity(pairs.len().saturating_sub(from));
        let mut new: HashMap<(String, String), Option<f64>> = HashMap::new();
        for (user, client) in &pairs[from..] {
            let tags = cb.quota_metric_tags(self.quota_type, &desanitize(user), client)?;
            if !self.by_tags.contains_key(&tags) && !new.contains_key(&tags) {
                let limit = self.ask_limit(cb.as_ref(), &tags)?;
                new.insert(tags.clone(), limit);
            }
            plan.push(tags);
        }
        self.pair_sensor.truncate(from);
        for tags in plan {
            let next = self.rings.len() as u32;
            let id = *self.by_tags.entry(tags.clone()).or_insert(next);
            if id == next {
                let limit = new[&tags];
                self.push_sensor(tags, limit.unwrap_or(UNLIMITED));
                if let Some(c) = &mut self.custom {
                    c.limits.push(limit);
                }
            }
            self.pair_sensor.push(id);
        }
        Ok(())
    }

    /// [`SensorTable::apply`] through the callback: tells it of the change, asks every
    /// sensor's limit again and resolves every pair again (the manager's reset).
    pub(super) fn apply_custom(
        &mut self,
        entity: &QuotaEntity,
        value: Option<f64>,
        pairs: &[(String, String)],
    ) -> Result<()> {
        let Some(custom) = &self.custom else {
            return Ok(());
        };
        let cb = custom.callback.clone();
        match value {
            Some(v) => cb.update_quota(self.quota_type, entity, v)?,
            None => cb.remove_quota(self.quota_type, entity)?,
        }
        let limits = self
            .tags
            .iter()
            .map(|t| self.ask_limit(cb.as_ref(), t))
            .collect::<Result<Vec<_>>>()?;
        self.overrides.apply(entity, value);
        for (id, limit) in limits.iter().enumerate() {
            self.rings.set_bound(id, limit.unwrap_or(UNLIMITED));
        }
        if let Some(c) = &mut self.custom {
            c.limits = limits;
        }
        self.resolve_custom(pairs, 0)
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::kafka::entity::sanitize_user;

    #[test]
    fn desanitize_inverts_sanitize() {
        for name in [
            "alice",
            "User:CN=a b",
            "a+b*c",
            "<default>",
            "é",
            "~",
            "100%",
        ] {
            assert_eq!(desanitize(&sanitize_user(name)), name, "{name}");
        }
    }
}
