//! A batch's records grouped by sensor, for the open loop: it replays a batch quota type
//! by quota type and, within one, sensor by sensor, each sensor's records in time order.
//! Sensors are independent in open loop (a request's throttles depend on its own sensors
//! only), so the decisions are the same as replaying event by event; but a sensor's
//! samples and summary are brought into cache once per batch instead of once per event,
//! in increasing sensor order (the order they lie in memory), and the records are read
//! one after the other instead of gathered from the batch's columns.

/// What one sensor records for one event.
#[derive(Debug, Clone, Copy, Default, PartialEq)]
pub(crate) struct Record {
    pub sensor: u32,
    /// The event's index in its batch.
    pub event: u32,
    pub time: i64,
    /// Usage, in the units the table records (bytes, thread nanoseconds).
    pub value: f64,
    /// What else the table reads of the event: the request quota, the request's bytes
    /// as a whole number (its summary adds them up); the fetch quota, 1 when the request
    /// quota throttled the fetch (its bytes are then taken back), else 0.
    pub aux: i64,
}

/// Records sorted by sensor, stably (a sensor's records keep the order they were added
/// in): a least-significant-digit radix sort on the sensor id, one pass per byte the
/// largest id needs, each pass reading its input in order and writing 256 runs in order.
#[derive(Debug, Clone, Default)]
pub(crate) struct Groups {
    records: Vec<Record>,
    spare: Vec<Record>,
    /// The bytes of a sensor id the sort looks at, and how many records have each value
    /// of each (counted as records are added).
    counts: Vec<[u32; 256]>,
}

impl Groups {
    /// Starts a new set of records, of sensor ids below `sensors`.
    pub fn clear(&mut self, sensors: usize) {
        self.records.clear();
        let digits = (usize::BITS - sensors.saturating_sub(1).leading_zeros()).div_ceil(8);
        self.counts.clear();
        self.counts.resize(digits as usize, [0; 256]);
    }

    #[inline]
    pub fn push(&mut self, record: Record) {
        for (d, count) in self.counts.iter_mut().enumerate() {
            count[((record.sensor >> (8 * d)) & 0xff) as usize] += 1;
        }
        self.records.push(record);
    }

    /// Sorts the records by sensor, stably.
    pub fn sort(&mut self) {
        let n = self.records.len();
        if n < 2 {
            return;
        }
        // the spare buffer only grows (it is written before it is read)
        if self.spare.len() < n {
            self.spare.resize(n, Record::default());
        }
        for (d, count) in self.counts.iter().enumerate() {
            // a digit every record shares moves nothing
            if count.iter().any(|&c| c as usize == n) {
                continue;
            }
            let mut next = [0u32; 256];
            let mut at = 0;
            for (slot, &c) in next.iter_mut().zip(count) {
                *slot = at;
                at += c;
            }
            for r in &self.records {
                let digit = ((r.sensor >> (8 * d)) & 0xff) as usize;
                self.spare[next[digit] as usize] = *r;
                next[digit] += 1;
            }
            std::mem::swap(&mut self.records, &mut self.spare);
            self.records.truncate(n);
        }
    }

    /// The records, sorted once [`Self::sort`] has run.
    pub fn records(&self) -> &[Record] {
        &self.records
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn record(sensor: u32, event: u32) -> Record {
        Record {
            sensor,
            event,
            time: i64::from(event),
            value: 1.0,
            aux: 1,
        }
    }

    /// The sort is stable and complete, for ids of one, two and three bytes, with
    /// digits every record shares.
    #[test]
    fn sort_is_stable_and_complete() {
        let mut g = Groups::default();
        let mut x: u64 = 0x2545_F491_4F6C_DD1D;
        for sensors in [1usize, 2, 255, 256, 257, 70_000, 1 << 24] {
            g.clear(sensors);
            let mut want = Vec::new();
            for event in 0..3000u32 {
                x ^= x << 13;
                x ^= x >> 7;
                x ^= x << 17;
                let sensor = (x % sensors as u64) as u32;
                g.push(record(sensor, event));
                want.push(record(sensor, event));
            }
            g.sort();
            want.sort_by_key(|r| r.sensor);
            assert_eq!(g.records(), &want[..], "{sensors} sensors");
        }
        g.clear(10);
        g.sort();
        assert!(g.records().is_empty());
    }
}
