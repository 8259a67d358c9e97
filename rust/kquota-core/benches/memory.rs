//! Bytes per live sensor with 10^6 entities, and what is left after they expire; and
//! bytes per sensor when every ring is full (a busy client).
//!
//! Counts the heap bytes the allocator hands out (a counting global allocator), for
//! kquota's manager and, in the same run, for the locked-map baseline of the record
//! benchmark (`HashMap<(user, client id), Samples>`, which keeps no throttle-time sensor,
//! no resolution cache and no expiry bookkeeping). Writes
//! `target/kquota-bench/memory.json` for `benches/report.py`.

use std::alloc::{GlobalAlloc, Layout, System};
use std::collections::HashMap;
use std::sync::atomic::{AtomicIsize, Ordering::Relaxed};

use kquota_core::kafka::samples::{Samples, WindowConfig};
use kquota_core::{QuotaEntity, QuotaManager, QuotaType};

struct Counting;

static LIVE: AtomicIsize = AtomicIsize::new(0);

// SAFETY: forwards to the system allocator and only counts.
unsafe impl GlobalAlloc for Counting {
    unsafe fn alloc(&self, layout: Layout) -> *mut u8 {
        LIVE.fetch_add(layout.size() as isize, Relaxed);
        unsafe { System.alloc(layout) }
    }

    unsafe fn dealloc(&self, ptr: *mut u8, layout: Layout) {
        LIVE.fetch_sub(layout.size() as isize, Relaxed);
        unsafe { System.dealloc(ptr, layout) }
    }

    unsafe fn realloc(&self, ptr: *mut u8, layout: Layout, new_size: usize) -> *mut u8 {
        LIVE.fetch_add(new_size as isize - layout.size() as isize, Relaxed);
        unsafe { System.realloc(ptr, layout, new_size) }
    }
}

#[global_allocator]
static ALLOCATOR: Counting = Counting;

const ENTITIES: usize = 1_000_000;

/// Lets deferred frees (epoch-based reclamation) run.
fn settle() {
    for _ in 0..1024 {
        crossbeam_epoch::pin().flush();
    }
}

fn main() {
    let ids: Vec<String> = (0..ENTITIES).map(|i| format!("client-{i:07}")).collect();
    let cfg = WindowConfig::QUOTA_DEFAULT;

    let before = LIVE.load(Relaxed);
    let m = QuotaManager::with_defaults(QuotaType::Produce);
    m.set_quota(&QuotaEntity::parse(None, Some("<default>")).unwrap(), 1e6)
        .unwrap();
    for (i, id) in ids.iter().enumerate() {
        m.record("alice", id, 100.0, (i / 1000) as i64).unwrap();
    }
    settle();
    let live = (LIVE.load(Relaxed) - before) as f64 / ENTITIES as f64;
    assert_eq!(m.sensor_count(), ENTITIES);
    m.expire_sensors(i64::MAX / 2);
    settle();
    let expired = (LIVE.load(Relaxed) - before) as f64;
    drop(m);

    // The same with every sensor's ring full (12 windows of traffic each): a busy
    // client's footprint. Fewer entities, the same per-sensor arithmetic.
    let busy = ENTITIES / 10;
    let before = LIVE.load(Relaxed);
    let m = QuotaManager::with_defaults(QuotaType::Produce);
    m.set_quota(&QuotaEntity::parse(None, Some("<default>")).unwrap(), 1e6)
        .unwrap();
    for window in 0..12i64 {
        for id in &ids[..busy] {
            m.record("alice", id, 100.0, window * 1000).unwrap();
        }
    }
    settle();
    let full = (LIVE.load(Relaxed) - before) as f64 / busy as f64;
    drop(m);
    settle();

    let before = LIVE.load(Relaxed);
    let mut locked: HashMap<(String, String), Samples> = HashMap::new();
    for (i, id) in ids.iter().enumerate() {
        let s = locked.entry(("alice".to_owned(), id.clone())).or_default();
        s.record(&cfg, 100.0, (i / 1000) as i64);
    }
    let baseline = (LIVE.load(Relaxed) - before) as f64 / ENTITIES as f64;
    drop(locked);

    println!(
        "bytes per live sensor, {ENTITIES} entities: kquota {live:.0}, locked map {baseline:.0}"
    );
    println!("bytes left after every sensor expired: {expired:.0}");
    println!(
        "bytes per live sensor with a full ring (12 windows recorded), {busy} entities: {full:.0}"
    );
    let dir = std::path::Path::new(env!("CARGO_MANIFEST_DIR")).join("../../target/kquota-bench");
    std::fs::create_dir_all(&dir).unwrap();
    let json = format!(
        "{{\"entities\": {ENTITIES}, \"bytes_per_sensor\": {live:.1}, \
         \"baseline_bytes_per_sensor\": {baseline:.1}, \"bytes_after_expiry\": {expired:.0}, \
         \"full_ring_entities\": {busy}, \"bytes_per_sensor_full\": {full:.1}}}\n"
    );
    std::fs::write(dir.join("memory.json"), json).unwrap();
}
