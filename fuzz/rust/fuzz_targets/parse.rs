//! Fuzz target `parse`: every place where kquota-core takes text or an unchecked number
//! from outside (quota type names, entity names, principal sanitization, window and
//! expiry settings, quota and usage values).
//!
//! Invariants: nothing panics; each parser accepts exactly what its documentation says;
//! accepted text round-trips; a rejection is an `Err` whose message names the rejected
//! value; `sanitize_user` agrees with an independent encoder written from the spec
//! (section 6.1: Java's URLEncoder, then `+` as `%20` and `*` as `%2A`) and can be
//! decoded back to the principal, so distinct principals never share a sensor.
#![no_main]

use std::borrow::Cow;
use std::str::FromStr;

use arbitrary::Arbitrary;
use kquota_core::error::{check_finite, check_quota, check_usage, Error};
use kquota_core::{
    sanitize_user, EntityName, QuotaEntity, QuotaManager, QuotaType, SampledRate, WindowConfig,
    DEFAULT_MARKER,
};
use libfuzzer_sys::fuzz_target;

#[derive(Debug, Arbitrary)]
struct Input {
    text: String,
    other: Option<String>,
    raw: Vec<u8>,
    num_samples: Int,
    window_ms: Int,
    expiry_ms: Int,
    value: f64,
    quota_type: u8,
}

/// An i64 that is often near the limits the parsers check.
#[derive(Debug, Arbitrary)]
enum Int {
    Small(i16),
    Seconds(i8),
    Raw(i64),
    Edge(u8),
}

impl Int {
    fn get(&self) -> i64 {
        const EDGES: [i64; 10] = [
            0,
            1,
            -1,
            65_535,
            65_536,
            i64::MAX,
            i64::MIN,
            i64::MAX / 65_536,
            i64::MAX / 65_536 + 1,
            3_600_000,
        ];
        match *self {
            Int::Small(v) => i64::from(v),
            Int::Seconds(v) => i64::from(v) * 1000,
            Int::Raw(v) => v,
            Int::Edge(i) => EDGES[usize::from(i) % EDGES.len()],
        }
    }
}

/// The sanitized form of a principal, from the spec rather than from the core.
fn spec_sanitize(name: &str) -> String {
    let mut out = String::new();
    for b in name.bytes() {
        match b {
            b'a'..=b'z' | b'A'..=b'Z' | b'0'..=b'9' | b'.' | b'-' | b'_' => out.push(char::from(b)),
            b' ' => out.push_str("%20"),
            b'*' => out.push_str("%2A"),
            _ => out.push_str(&format!("%{b:02X}")),
        }
    }
    out
}

/// Percent-decoding: the inverse of the sanitization.
fn percent_decode(text: &str) -> Vec<u8> {
    let bytes = text.as_bytes();
    let mut out = Vec::with_capacity(bytes.len());
    let mut i = 0;
    while i < bytes.len() {
        if bytes[i] == b'%' {
            let hex = std::str::from_utf8(&bytes[i + 1..i + 3]).expect("two ASCII hex digits");
            out.push(u8::from_str_radix(hex, 16).expect("hex escape"));
            i += 3;
        } else {
            out.push(bytes[i]);
            i += 1;
        }
    }
    out
}

fn names_value(err: &Error, shown: &str) {
    let message = err.to_string();
    assert!(
        message.contains(shown),
        "error {err:?} does not name the value {shown}: {message}"
    );
}

fn check_quota_type(text: &str) {
    let known = ["produce", "fetch", "request"];
    match QuotaType::from_str(text) {
        Ok(t) => {
            assert!(known.contains(&text), "accepted quota type {text:?}");
            assert_eq!(t.as_str(), text);
            assert_eq!(t.to_string(), text);
            assert_eq!(QuotaType::from_str(t.as_str()), Ok(t));
        }
        Err(err) => {
            assert!(!known.contains(&text), "rejected quota type {text:?}");
            assert!(matches!(err, Error::InvalidConfig(_)), "{err:?}");
            names_value(&err, &format!("{text:?}"));
        }
    }
}

fn check_entity(user: &str, client: Option<&str>) {
    let name = EntityName::parse(user);
    assert_eq!(name.as_str(), user);
    assert_eq!(name == EntityName::Default, user == DEFAULT_MARKER);

    let entity = QuotaEntity::parse(Some(user), client).expect("an entity with a user");
    assert_eq!(entity.user().map(EntityName::as_str), Some(user));
    assert_eq!(entity.client_id().map(EntityName::as_str), client);
    let shown = entity.to_string();
    assert!(shown.contains(&format!("{user:?}")), "{shown}");
    if let Some(c) = client {
        assert!(shown.contains(&format!("{c:?}")), "{shown}");
    }
    assert_eq!(
        entity.involves_default(),
        user == DEFAULT_MARKER || client == Some(DEFAULT_MARKER)
    );
    let only_client = QuotaEntity::parse(None, Some(user)).expect("an entity with a client id");
    assert_eq!(only_client.client_id().map(EntityName::as_str), Some(user));
    assert!(QuotaEntity::parse(None, None).is_err());
    // A principal literally named "<default>" is not the default entity.
    let named = QuotaEntity::new(Some(EntityName::Named(user.to_owned())), None).unwrap();
    assert!(!named.involves_default());
}

fn check_sanitize(name: &str) {
    let sanitized = sanitize_user(name);
    assert_eq!(sanitized, spec_sanitize(name), "sanitize_user({name:?})");
    assert!(sanitized
        .bytes()
        .all(|b| b.is_ascii_alphanumeric() || matches!(b, b'.' | b'-' | b'_' | b'%')));
    assert_eq!(matches!(sanitized, Cow::Borrowed(_)), sanitized == name);
    assert_eq!(percent_decode(&sanitized), name.as_bytes());
}

fn check_window(input: &Input) {
    let (n, w) = (input.num_samples.get(), input.window_ms.get());
    let valid = (1..=65_535).contains(&n) && w >= 1 && w <= i64::MAX / (n + 1);
    let window = match WindowConfig::new(n, w) {
        Ok(window) => {
            assert!(valid, "accepted window {n} x {w}");
            assert_eq!(
                (i64::from(window.num_samples()), window.window_ms()),
                (n, w)
            );
            window
        }
        Err(err) => {
            assert!(!valid, "rejected window {n} x {w}: {err}");
            assert!(matches!(err, Error::InvalidConfig(_)), "{err:?}");
            let bad = if (1..=65_535).contains(&n) { w } else { n };
            names_value(&err, &bad.to_string());
            return;
        }
    };
    let quota_type = QuotaType::ALL[usize::from(input.quota_type) % 3];
    let expiry = input.expiry_ms.get();
    match QuotaManager::new(quota_type, window, expiry) {
        Ok(manager) => {
            assert!(
                w % 1000 == 0 && expiry >= 0,
                "accepted {w} ms, expiry {expiry}"
            );
            assert_eq!(manager.window(), window);
            assert_eq!(manager.sensor_expiry_ms(), expiry);
            assert_eq!(manager.quota_type(), quota_type);
            assert!(!manager.enabled());
        }
        Err(err) => {
            assert!(
                w % 1000 != 0 || expiry < 0,
                "rejected {w} ms, expiry {expiry}"
            );
            let bad = if w % 1000 != 0 { w } else { expiry };
            names_value(&err, &bad.to_string());
        }
    }
    let v = input.value;
    match SampledRate::new(window, Some(v)) {
        Ok(rate) => assert_eq!(rate.quota().map(f64::to_bits), Some(v.to_bits())),
        Err(err) => {
            assert!(!(v.is_finite() && v > 0.0));
            assert!(matches!(err, Error::InvalidQuota(_)), "{err:?}");
            names_value(&err, &format!("{v:?}"));
        }
    }
}

fn check_values(v: f64) {
    let shown = format!("{v:?}");
    match check_quota(v) {
        Ok(q) => assert!(q.is_finite() && q > 0.0 && q.to_bits() == v.to_bits()),
        Err(err) => {
            assert!(!(v.is_finite() && v > 0.0), "{v:?} rejected as a quota");
            names_value(&err, &shown);
        }
    }
    match check_usage(v) {
        Ok(u) => assert!(u.is_finite() && u >= 0.0 && u.to_bits() == v.to_bits()),
        Err(err) => {
            assert!(!(v.is_finite() && v >= 0.0), "{v:?} rejected as usage");
            assert!(matches!(err, Error::InvalidUsage(_)), "{err:?}");
            names_value(&err, &shown);
        }
    }
    match check_finite(v) {
        Ok(f) => assert_eq!(f.to_bits(), v.to_bits()),
        Err(err) => {
            assert!(!v.is_finite());
            names_value(&err, &shown);
        }
    }
}

fuzz_target!(|input: Input| {
    check_quota_type(&input.text);
    check_entity(&input.text, input.other.as_deref());
    check_sanitize(&input.text);
    if let Some(other) = &input.other {
        check_sanitize(other);
        // Sanitization is injective: different principals, different sensors.
        assert_eq!(
            sanitize_user(&input.text) == sanitize_user(other),
            input.text == *other
        );
    }
    if let Ok(text) = std::str::from_utf8(&input.raw) {
        check_quota_type(text);
        check_sanitize(text);
    }
    check_window(&input);
    check_values(input.value);
});
