//! The broker's sensor-expiry task as the replay runs it.

/// When the expiry task last ran, as seen from the replay's clock.
#[derive(Debug, Clone)]
pub(super) struct Clock {
    pub(super) task_ms: Option<i64>,
    /// The latest explicit run.
    pub(super) explicit: Option<i64>,
    /// The latest periodic run at or before the clock, and the next one after it.
    pub(super) tick: Option<i64>,
    pub(super) next_tick: i64,
}

impl Clock {
    /// The latest expiry run at or before `now` (which never goes backwards).
    #[inline]
    pub(super) fn run_at(&mut self, now: i64) -> Option<i64> {
        if let Some(period) = self.task_ms {
            if now >= self.next_tick {
                let start = now.div_euclid(period) * period;
                self.tick = Some(start);
                self.next_tick = start.saturating_add(period);
            }
        }
        self.explicit.max(self.tick)
    }
}
