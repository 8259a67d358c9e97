//! The delay queue of throttled channels (KIP-219; Kafka's `DelayQueue<ThrottledChannel>`
//! and its `queue-size` sensor), lock-free.

use std::sync::atomic::{AtomicI64, AtomicU64, Ordering::Relaxed};

use crossbeam_skiplist::SkipMap;

/// Throttled channels ordered by the end of their mute.
#[derive(Default)]
pub struct DelayQueue {
    /// (end ms, insertion sequence) -> channel id.
    entries: SkipMap<(i64, u64), u64>,
    sequence: AtomicU64,
    size: AtomicI64,
}

impl DelayQueue {
    /// An empty queue.
    pub fn new() -> Self {
        Self::default()
    }

    /// Adds `channel`, muted until `end_ms`.
    pub fn push(&self, end_ms: i64, channel: u64) {
        let seq = self.sequence.fetch_add(1, Relaxed);
        self.entries.insert((end_ms, seq), channel);
        self.size.fetch_add(1, Relaxed);
    }

    /// Removes every entry that ends at or before `now_ms` and returns their channels,
    /// earliest first (ties in the order they were added).
    pub fn expire(&self, now_ms: i64) -> Vec<u64> {
        let mut expired = Vec::new();
        while let Some(entry) = self.entries.front() {
            if entry.key().0 > now_ms {
                break;
            }
            // Another thread may have taken this entry first; only the remover reports it.
            if entry.remove() {
                self.size.fetch_sub(1, Relaxed);
                expired.push(*entry.value());
            }
        }
        expired
    }

    /// The number of channels still waiting (Kafka's `queue-size`).
    pub fn len(&self) -> usize {
        self.size.load(Relaxed).max(0) as usize
    }

    /// Whether no channel is waiting.
    pub fn is_empty(&self) -> bool {
        self.len() == 0
    }

    /// The earliest end time still queued.
    pub fn next_end_ms(&self) -> Option<i64> {
        self.entries.front().map(|e| e.key().0)
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn expires_in_end_order() {
        let q = DelayQueue::new();
        q.push(30, 3);
        q.push(10, 1);
        q.push(10, 2);
        assert_eq!(q.len(), 3);
        assert_eq!(q.next_end_ms(), Some(10));
        assert_eq!(q.expire(9), Vec::<u64>::new());
        assert_eq!(q.expire(10), vec![1, 2]);
        assert_eq!(q.len(), 1);
        assert_eq!(q.expire(100), vec![3]);
        assert!(q.is_empty());
    }

    #[test]
    fn concurrent_expiry_reports_each_channel_once() {
        let q = std::sync::Arc::new(DelayQueue::new());
        for i in 0..10_000 {
            q.push(i % 100, i as u64);
        }
        let handles: Vec<_> = (0..4)
            .map(|_| {
                let q = q.clone();
                std::thread::spawn(move || q.expire(1000))
            })
            .collect();
        let mut all: Vec<u64> = handles
            .into_iter()
            .flat_map(|h| h.join().unwrap())
            .collect();
        all.sort_unstable();
        assert_eq!(all, (0..10_000).collect::<Vec<u64>>());
        assert!(q.is_empty());
    }
}
