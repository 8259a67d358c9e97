//! Unit tests of [`HashMap`]: single-threaded operations across resizes and tombstones,
//! and threads racing on inserts and resizes.

use super::*;
use std::sync::Arc;

type Map = HashMap<String, usize, foldhash::fast::RandomState>;

fn map() -> Map {
    HashMap::with_capacity_and_hasher(0, Default::default())
}

#[test]
fn inserts_finds_replaces_and_removes_across_resizes() {
    let m = map();
    let g = crossbeam_epoch::pin();
    for i in 0..10_000 {
        assert_eq!(*m.get_or_insert_with(i.to_string(), || i, &g), i);
    }
    assert_eq!(m.len(), 10_000);
    for i in 0..10_000 {
        assert_eq!(m.get(&i.to_string(), &g), Some(&i));
        assert_eq!(*m.get_or_insert_with(i.to_string(), || 0, &g), i);
    }
    for i in (0..10_000).step_by(2) {
        assert!(m.remove_if(&i.to_string(), |_, _| true, &g));
        assert!(!m.remove_if(&i.to_string(), |_, _| true, &g));
    }
    assert!(!m.remove_if(&"1".to_owned(), |_, v| *v == 0, &g));
    assert_eq!(m.len(), 5_000);
    m.insert("1".to_owned(), 7, &g);
    assert_eq!(m.get(&"1".to_owned(), &g), Some(&7));
    m.retain(|_, v| *v % 3 != 0, &g);
    let mut seen: Vec<usize> = m.iter(&g).map(|(_, v)| *v).collect();
    seen.sort();
    let mut expected: Vec<usize> = (0..10_000)
        .map(|i| if i == 1 { 7 } else { i })
        .filter(|v| v % 2 == 1 || *v == 7)
        .filter(|v| v % 3 != 0)
        .collect();
    expected.sort();
    assert!(
        seen == expected,
        "{} vs {} values",
        seen.len(),
        expected.len()
    );
    assert_eq!(m.len(), expected.len());
}

#[test]
fn churn_through_tombstones_keeps_the_table_small() {
    let m = map();
    let g = crossbeam_epoch::pin();
    for i in 0..100_000 {
        m.get_or_insert_with(i.to_string(), || i, &g);
        assert!(m.remove_if(&i.to_string(), |_, _| true, &g));
    }
    assert!(m.is_empty());
    // SAFETY: the guard is held.
    let slots = unsafe { m.newest(&g).deref() }.slots.len();
    assert!(slots <= 64, "{slots}");
}

#[test]
fn each_thread_sees_its_own_writes_while_others_force_resizes() {
    // Every thread owns its keys (their state is known exactly) and shares a few keys
    // that are never removed (every thread must get the same value for each); the
    // inserts and removals of all fill tables with tombstones, so tables are
    // replaced over and over while the others read and write.
    let m = Arc::new(map());
    let shared: Vec<String> = (0..64).map(|i| format!("shared-{i}")).collect();
    let handles: Vec<_> = (0..4usize)
        .map(|t| {
            let (m, shared) = (m.clone(), shared.clone());
            std::thread::spawn(move || {
                let mut mine = std::collections::HashMap::new();
                let mut got = Vec::new();
                for i in 0..30_000usize {
                    let g = crossbeam_epoch::pin();
                    let key = format!("{t}-{}", i % 300);
                    match i % 3 {
                        0 => {
                            let v = *m.get_or_insert_with(key.clone(), || i, &g);
                            assert_eq!(v, *mine.entry(key).or_insert(i), "thread {t}");
                        }
                        1 => {
                            let removed = m.remove_if(&key, |_, _| true, &g);
                            assert_eq!(removed, mine.remove(&key).is_some(), "thread {t}");
                        }
                        _ => assert_eq!(m.get(&key, &g), mine.get(&key), "thread {t}"),
                    }
                    let s = &shared[i % shared.len()];
                    got.push((s.clone(), *m.get_or_insert_with(s.clone(), || t, &g)));
                }
                (mine, got)
            })
        })
        .collect();
    let results: Vec<_> = handles.into_iter().map(|h| h.join().unwrap()).collect();
    let g = crossbeam_epoch::pin();
    for (mine, got) in &results {
        for (k, v) in mine {
            assert_eq!(m.get(k, &g), Some(v));
        }
        for (s, v) in got {
            assert_eq!(m.get(s, &g), Some(v), "{s}");
        }
    }
    let owned: usize = results.iter().map(|(mine, _)| mine.len()).sum();
    assert_eq!(m.len(), owned + shared.len());
    assert_eq!(m.iter(&g).count(), m.len());
}

#[test]
fn threads_inserting_the_same_keys_agree_on_one_value_each() {
    let m = Arc::new(map());
    let handles: Vec<_> = (0..4)
        .map(|t| {
            let m = m.clone();
            std::thread::spawn(move || {
                let mut got = Vec::new();
                for i in 0..20_000usize {
                    let g = crossbeam_epoch::pin();
                    let v = *m.get_or_insert_with((i % 5_000).to_string(), || t * 100_000 + i, &g);
                    got.push(v);
                    if i % 7 == t {
                        m.remove_if(&((i + 13) % 5_000).to_string(), |_, _| true, &g);
                    }
                }
                got
            })
        })
        .collect();
    for h in handles {
        h.join().unwrap();
    }
    let g = crossbeam_epoch::pin();
    let mut keys: Vec<&String> = m.iter(&g).map(|(k, _)| k).collect();
    let n = keys.len();
    keys.sort();
    keys.dedup();
    assert_eq!(keys.len(), n, "a key twice");
    assert_eq!(m.len(), n);
}
