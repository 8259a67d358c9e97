//! Unit tests of quota entities: the packed name pairs, sanitizing, and the precedence
//! walk.

use super::*;

#[test]
fn a_pair_keeps_its_halves_and_hashes_as_its_borrowed_form() {
    use std::hash::BuildHasher;
    let h = foldhash::fast::FixedState::with_seed(7);
    for (a, b) in [
        ("", ""),
        ("", "c"),
        ("u", ""),
        ("ab", "c"),
        ("a", "bc"),
        ("é", "ß"),
    ] {
        let p = Pair::new(a, b);
        assert_eq!((p.first(), p.second()), (a, b));
        assert_eq!(h.hash_one(&p), h.hash_one(PairRef::new(a, b)));
        assert!(crate::sync::hash_map::Equivalent::equivalent(
            &PairRef::new(a, b),
            &p
        ));
        assert_eq!(p, p.clone());
        assert!(p.is_inline());
    }
    assert_eq!(std::mem::size_of::<Pair>(), 24);
    let long = "x".repeat(Pair::INLINE);
    for (a, b) in [
        (long.as_str(), ""),
        ("", long.as_str()),
        ("y", long.as_str()),
    ] {
        let p = Pair::new(a, b);
        assert_eq!((p.first(), p.second()), (a, b));
        assert_eq!(h.hash_one(&p), h.hash_one(PairRef::new(a, b)));
        assert!(crate::sync::hash_map::Equivalent::equivalent(
            &PairRef::new(a, b),
            &p
        ));
        assert_eq!(p, p.clone());
        assert_eq!(p.is_inline(), a.len() + b.len() <= Pair::INLINE);
    }
    assert!(Pair::new(&long, "").is_inline());
    assert!(!Pair::new(&long, "z").is_inline());
    assert_ne!(Pair::new("ab", "c"), Pair::new("a", "bc"));
    assert_ne!(
        h.hash_one(Pair::new("ab", "c")),
        h.hash_one(Pair::new("a", "bc"))
    );
}

#[test]
fn every_length_and_split_packs_hashes_and_compares_as_its_strings() {
    use crate::sync::hash_map::Equivalent;
    use std::hash::BuildHasher;
    let h = foldhash::fast::FixedState::with_seed(3);
    let text: String = (0..Pair::INLINE + 3)
        .map(|i| char::from(b'a' + i as u8))
        .collect();
    for len in 0..=text.len() {
        for split in 0..=len {
            let (a, b) = (&text[..split], &text[split..len]);
            let p = Pair::new(a, b);
            assert_eq!((p.first(), p.second()), (a, b));
            assert_eq!(p.is_inline(), len <= Pair::INLINE);
            assert_eq!(h.hash_one(&p), h.hash_one(PairRef::new(a, b)));
            assert!(PairRef::new(a, b).equivalent(&p));
            assert_eq!(p.clone(), p);
            // Every byte counts, and so does the split.
            for i in 0..len {
                let mut other = text[..len].to_owned().into_bytes();
                other[i] = b'Z';
                let other = String::from_utf8(other).unwrap();
                let (c, d) = other.split_at(split);
                assert!(!PairRef::new(c, d).equivalent(&p), "{a:?} {b:?} byte {i}");
                assert_ne!(Pair::new(c, d), p);
            }
            if split > 0 {
                let (c, d) = text[..len].split_at(split - 1);
                assert!(!PairRef::new(c, d).equivalent(&p));
                assert_ne!(Pair::new(c, d), p);
            }
        }
    }
}

#[test]
fn words_of_a_string_are_its_bytes_zero_padded() {
    let text: Vec<u8> = (0..Pair::INLINE as u8).map(|i| 200 - i).collect();
    for n in 0..=text.len() {
        let mut raw = [0u8; 24];
        put(&mut raw, 0, &text[..n]);
        raw[..n].copy_from_slice(&text[..n]);
        let word = |i: usize| u64::from_le_bytes(raw[8 * i..8 * i + 8].try_into().unwrap());
        assert_eq!(words_of(&text[..n]), [word(0), word(1), word(2)], "{n}");
        for at in 0..=Pair::INLINE - n {
            let mut moved = [0u8; 24];
            moved[at..at + n].copy_from_slice(&text[..n]);
            let word = |i: usize| u64::from_le_bytes(moved[8 * i..8 * i + 8].try_into().unwrap());
            assert_eq!(
                shifted(words_of(&text[..n]), at),
                [word(0), word(1), word(2)],
                "{n} at {at}"
            );
        }
    }
}

#[test]
fn short_strings_compare_as_strings() {
    let words: Vec<String> = (0..=20)
        .flat_map(|n| {
            let base: String = (0..n).map(|i| char::from(b'a' + (i % 26) as u8)).collect();
            let mut v = vec![base.clone()];
            for i in 0..n {
                let mut b = base.clone().into_bytes();
                b[i] = b'Z';
                v.push(String::from_utf8(b).unwrap());
            }
            v
        })
        .collect();
    for a in &words {
        for b in &words {
            assert_eq!(str_eq(a, b), a == b, "{a:?} {b:?}");
        }
    }
}

#[test]
fn sanitizes_like_java_url_encoder() {
    assert_eq!(sanitize_user("alice"), "alice");
    assert_eq!(sanitize_user("User:CN=a b"), "User%3ACN%3Da%20b");
    assert_eq!(sanitize_user("a+b*c"), "a%2Bb%2Ac");
    assert_eq!(sanitize_user("<default>"), "%3Cdefault%3E");
    assert_eq!(sanitize_user("é"), "%C3%A9");
    assert_eq!(sanitize_user("~"), "%7E");
    for b in 0..=255u8 {
        let kept = b.is_ascii_alphanumeric() || matches!(b, b'.' | b'-' | b'_');
        assert_eq!(KEPT[usize::from(b)], kept, "{b}");
    }
}

#[test]
fn entity_needs_a_dimension() {
    assert!(QuotaEntity::parse(None, None).is_err());
    let e = QuotaEntity::parse(Some("<default>"), Some("app")).unwrap();
    assert_eq!(e.user(), Some(&EntityName::Default));
    assert!(e.involves_default());
    assert_eq!(e.level_bit(), USER_CLIENT_LEVEL);
}

#[test]
fn precedence_walk() {
    let mut o = Overrides::default();
    let set = |o: &mut Overrides, u: Option<&str>, c: Option<&str>, v: f64| {
        o.apply(&QuotaEntity::parse(u, c).unwrap(), Some(v))
    };
    set(&mut o, Some("<default>"), None, 6000.0);
    set(&mut o, None, Some("app1"), 7000.0);
    assert_eq!(o.tags("bob", "app1"), ("bob".to_owned(), String::new()));
    assert_eq!(o.quota_limit("bob", ""), Some(6000.0));
    set(&mut o, Some("<default>"), Some("<default>"), 5000.0);
    assert_eq!(o.tags("bob", "app1"), ("bob".to_owned(), "app1".to_owned()));
    assert_eq!(o.quota_limit("bob", "app1"), Some(5000.0));
    assert_eq!(o.quota_limit("", ""), None);
}
