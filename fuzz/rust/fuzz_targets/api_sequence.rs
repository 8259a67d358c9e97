//! Fuzz target `api_sequence`: arbitrary sequences of `QuotaManager` and `SampledRate`
//! calls, checked against a sequential model written from the spec.
//!
//! The input decodes to a manager (type, window, expiry) and a list of operations:
//! quotas set and removed on any entity (defaults, `<default>` as a literal name, any
//! Unicode), records, unrecords, records without a check, throttles, batches, expiry,
//! reads and scrapes, with values that include NaN, the infinities, negatives, huge and
//! subnormal numbers, at times that go backwards, jump by 2^62 or sit at `i64::MIN/MAX`.
//!
//! Invariants checked after every operation:
//! * nothing panics (overflow checks and debug assertions are on);
//! * a call that returns `Err` names the rejected value and changes nothing observable:
//!   overrides, sensor names, enabled levels, the delay queue, and (through the model)
//!   every later rate, bound, throttle and expiry;
//! * every successful call returns what the model says, bit for bit: the model keeps
//!   each sensor as the plain sequential sample ring (`samples::Samples`) and
//!   re-implements the precedence rules, the throttle conversion, the fetch-size cap,
//!   the delay queue and sensor expiry from `shared/docs/kafka-quota-semantics.md`;
//! * measured rates are finite while every value recorded is below 1e290 in magnitude;
//! * a bare `SampledRate` gives exactly what the sequential ring gives.
#![no_main]

use std::collections::BTreeMap;

use arbitrary::Arbitrary;
use kquota_core::error::Error;
use kquota_core::kafka::javamath::long_to_int;
use kquota_core::kafka::quota::{check_bound, Check};
use kquota_core::kafka::samples::Samples;
use kquota_core::{
    sanitize_user, EntityName, QuotaEntity, QuotaManager, QuotaType, SampledRate, SensorSnapshot,
    WindowConfig, UNLIMITED,
};
use libfuzzer_sys::fuzz_target;

// -- the input -------------------------------------------------------------------------

#[derive(Debug, Arbitrary)]
struct Input {
    quota_type: u8,
    num_samples: u8,
    window_seconds: u8,
    expiry: Expiry,
    rate_window: (u8, u16),
    rate_bound: Option<Val>,
    ops: Vec<Op>,
}

#[derive(Debug, Arbitrary)]
enum Expiry {
    Kafka,
    Zero,
    Short(u16),
    Raw(i64),
}

/// A user, client id or entity name: mostly from a pool of interesting names.
#[derive(Debug, Arbitrary)]
enum Name {
    Pool(u8),
    Text(String),
}

const NAMES: [&str; 14] = [
    "",
    "alice",
    "bob",
    "<default>",
    "app-1",
    "User:CN=a b,O=x",
    "a+b*c",
    "%3Cdefault%3E",
    "é",
    "🦀",
    "\0",
    "<default> ",
    "a:b",
    "a b",
];

impl Name {
    fn get(&self) -> &str {
        match self {
            Name::Pool(i) => NAMES[usize::from(*i) % NAMES.len()],
            Name::Text(s) => s,
        }
    }
}

/// An entity dimension: `<default>` or a name parsed as the Python API does, or a name
/// that is literally `<default>` (only reachable from Rust).
#[derive(Debug, Arbitrary)]
enum Dim {
    Parsed(Name),
    Literal(Name),
}

fn entity_name(dim: &Dim) -> EntityName {
    match dim {
        Dim::Parsed(name) => EntityName::parse(name.get()),
        Dim::Literal(name) => EntityName::Named(name.get().to_owned()),
    }
}

/// A recorded value or a quota: small integers, raw bit patterns, or special values.
#[derive(Debug, Arbitrary)]
enum Val {
    Int(u32),
    Raw(f64),
    Special(u8),
}

const SPECIALS: [f64; 19] = [
    0.0,
    -0.0,
    1.0,
    -1.0,
    0.5,
    f64::NAN,
    f64::INFINITY,
    f64::NEG_INFINITY,
    f64::MAX,
    f64::MIN,
    f64::MIN_POSITIVE,
    5e-324,
    1e300,
    -1e300,
    1e-300,
    9_007_199_254_740_993.0,
    1e15,
    UNLIMITED,
    1_048_576.0,
];

impl Val {
    fn get(&self) -> f64 {
        match *self {
            Val::Int(v) => f64::from(v),
            Val::Raw(v) => v,
            Val::Special(i) => SPECIALS[usize::from(i) % SPECIALS.len()],
        }
    }
}

/// How far the clock moves: a little, about a window or a horizon, backwards, far.
#[derive(Debug, Arbitrary)]
enum Step {
    Ms(u16),
    Back(u16),
    Windows(i8),
    Horizon(i8, i8),
    Jump(i64),
    To(i64),
    Edge(u8),
}

#[derive(Debug, Arbitrary)]
enum ThrottleMs {
    Small(u16),
    Raw(i64),
    Edge(u8),
}

impl ThrottleMs {
    fn get(&self) -> i64 {
        const EDGES: [i64; 6] = [0, -1, 1, i64::MAX, i64::MIN, i32::MAX as i64 + 1];
        match *self {
            ThrottleMs::Small(v) => i64::from(v),
            ThrottleMs::Raw(v) => v,
            ThrottleMs::Edge(i) => EDGES[usize::from(i) % EDGES.len()],
        }
    }
}

#[derive(Debug, Arbitrary)]
struct Client {
    user: Name,
    client: Name,
}

#[derive(Debug, Arbitrary)]
struct Event {
    key: i8,
    value: Val,
    dt: i16,
}

#[derive(Debug, Arbitrary)]
enum Op {
    Tick(Step),
    SetQuota(Option<Dim>, Option<Dim>, Val),
    RemoveQuota(Option<Dim>, Option<Dim>),
    Record(Client, Val),
    Unrecord(Client, Val),
    RecordNoThrottle(Client, Val),
    Throttle(Client, ThrottleMs, u8),
    ExpiredChannels,
    ExpireSensors,
    Measure(Client),
    Read(Client),
    MaxValue(Client),
    Snapshot,
    Batch {
        keys: Vec<Client>,
        events: Vec<Event>,
        unrecord_if: Option<Vec<bool>>,
        drop_value: bool,
    },
    RateRecord(Val, bool),
    RateMeasure,
    RateSetQuota(Option<Val>),
}

// -- the model ---------------------------------------------------------------------------

/// One dimension of an override's key: users sanitized, client ids raw (section 6.1).
#[derive(Debug, Clone, PartialEq, Eq, PartialOrd, Ord)]
enum Level {
    Absent,
    Default,
    Named(String),
}

fn user_level(dim: Option<&EntityName>) -> Level {
    match dim {
        None => Level::Absent,
        Some(EntityName::Default) => Level::Default,
        Some(EntityName::Named(n)) => Level::Named(sanitize_user(n).into_owned()),
    }
}

fn client_level(dim: Option<&EntityName>) -> Level {
    match dim {
        None => Level::Absent,
        Some(EntityName::Default) => Level::Default,
        Some(EntityName::Named(n)) => Level::Named(n.clone()),
    }
}

type Tags = (String, String);

struct SensorModel {
    samples: Samples,
    last_record: i64,
}

impl SensorModel {
    fn new(now: i64) -> Self {
        SensorModel {
            samples: Samples::new(),
            last_record: now,
        }
    }
}

struct Model {
    quota_type: QuotaType,
    window: WindowConfig,
    expiry_ms: i64,
    enabled: u8,
    overrides: BTreeMap<(Level, Level), (QuotaEntity, f64)>,
    quota_sensors: BTreeMap<Tags, SensorModel>,
    throttle_sensors: BTreeMap<Tags, SensorModel>,
    /// (end of the mute, insertion sequence) -> channel.
    queue: BTreeMap<(i64, u64), u64>,
    queued: u64,
    /// Whether a value of magnitude > 1e290 was ever recorded (rates may overflow).
    huge: bool,
}

const NANOS_TO_PERCENT: f64 = 100.0 / 1_000_000_000.0;
const THROTTLE_WINDOW: WindowConfig = WindowConfig::METRICS_DEFAULT;

impl Model {
    fn apply(&mut self, entity: &QuotaEntity, value: Option<f64>) {
        self.enabled |= match (entity.user().is_some(), entity.client_id().is_some()) {
            (true, true) => 4,
            (true, false) => 2,
            _ => 1,
        };
        let key = (user_level(entity.user()), client_level(entity.client_id()));
        match value {
            Some(v) => {
                self.overrides.insert(key, (entity.clone(), v));
            }
            None => {
                self.overrides.remove(&key);
            }
        }
    }

    fn value(&self, user: Level, client: Level) -> Option<f64> {
        self.overrides.get(&(user, client)).map(|(_, v)| *v)
    }

    /// Section 6.3: the tags of a request from principal `user` with `client`.
    fn tags(&self, user: &str, client: &str) -> Tags {
        let u = sanitize_user(user).into_owned();
        let c = client.to_owned();
        let named = |s: &str| Level::Named(s.to_owned());
        let has = |a: Level, b: Level| self.value(a, b).is_some();
        match self.enabled {
            0 | 1 => (String::new(), c),
            2 => (u, String::new()),
            4 => (u, c),
            _ => {
                if has(named(&u), named(&c)) || has(named(&u), Level::Default) {
                    (u, c)
                } else if has(named(&u), Level::Absent) {
                    (u, String::new())
                } else if has(Level::Default, named(&c)) || has(Level::Default, Level::Default) {
                    (u, c)
                } else if has(Level::Default, Level::Absent) {
                    (u, String::new())
                } else {
                    (String::new(), c)
                }
            }
        }
    }

    /// Section 6.4: the bound of the sensor with tags `(u, c)`.
    fn quota_limit(&self, (u, c): &Tags) -> Option<f64> {
        let named = |s: &str| Level::Named(s.to_owned());
        let first =
            |keys: Vec<(Level, Level)>| keys.into_iter().find_map(|(a, b)| self.value(a, b));
        match (u.is_empty(), c.is_empty()) {
            (false, false) => first(vec![
                (named(u), named(c)),
                (named(u), Level::Default),
                (Level::Default, named(c)),
                (Level::Default, Level::Default),
            ]),
            (false, true) => first(vec![
                (named(u), Level::Absent),
                (Level::Default, Level::Absent),
            ]),
            (true, false) => first(vec![
                (Level::Absent, named(c)),
                (Level::Absent, Level::Default),
            ]),
            (true, true) => None,
        }
    }

    fn bound(&self, tags: &Tags) -> f64 {
        self.quota_limit(tags).unwrap_or(UNLIMITED)
    }

    /// The client's sensors, created at `now` when missing.
    fn resolve(&mut self, user: &str, client: &str, now: i64) -> Tags {
        let tags = self.tags(user, client);
        self.quota_sensors
            .entry(tags.clone())
            .or_insert_with(|| SensorModel::new(now));
        self.throttle_sensors
            .entry(tags.clone())
            .or_insert_with(|| SensorModel::new(now));
        tags
    }

    fn usage(&self, value: f64) -> f64 {
        match self.quota_type {
            QuotaType::Request => value * NANOS_TO_PERCENT,
            _ => value,
        }
    }

    fn throttle_int(&self, check: Check) -> i32 {
        match self.quota_type {
            QuotaType::Request => long_to_int(check.throttle_ms.min(self.window.window_ms())),
            _ => long_to_int(check.throttle_ms),
        }
    }

    /// A valid, converted usage recorded (with or without the check) at `now`.
    fn record(&mut self, user: &str, client: &str, usage: f64, now: i64, check: bool) -> i32 {
        if self.enabled == 0 {
            return 0;
        }
        if usage.abs() > 1e290 {
            self.huge = true;
        }
        let tags = self.resolve(user, client, now);
        let bound = self.bound(&tags);
        let window = self.window;
        let sensor = self.quota_sensors.get_mut(&tags).unwrap();
        sensor.last_record = now;
        sensor.samples.record(&window, usage, now);
        let outcome = if check {
            check_bound(&mut sensor.samples, &window, bound, now)
        } else {
            Check::UNCHECKED
        };
        self.throttle_int(outcome)
    }

    fn measure(&mut self, tags: &Tags, now: i64) -> Option<f64> {
        let window = self.window;
        let sensor = self.quota_sensors.get_mut(tags)?;
        Some(sensor.samples.measure_rate(&window, now).0)
    }

    fn throttle_avg(&mut self, tags: &Tags, now: i64) -> Option<f64> {
        let sensor = self.throttle_sensors.get_mut(tags)?;
        Some(sensor.samples.measure_avg(&THROTTLE_WINDOW, now))
    }

    fn sensor_name(&self, kind: &str, (u, c): &Tags) -> String {
        let group = match self.quota_type {
            QuotaType::Produce => "Produce",
            QuotaType::Fetch => "Fetch",
            QuotaType::Request => "Request",
        };
        format!("{group}{kind}-{u}:{c}")
    }

    fn sensor_names(&self) -> Vec<String> {
        let mut names: Vec<String> = self
            .quota_sensors
            .keys()
            .map(|t| self.sensor_name("", t))
            .chain(
                self.throttle_sensors
                    .keys()
                    .map(|t| self.sensor_name("ThrottleTime", t)),
            )
            .collect();
        names.sort();
        names
    }

    fn expire(&mut self, now: i64) -> Vec<String> {
        let expiry = self.expiry_ms;
        let stale = |s: &SensorModel| now.wrapping_sub(s.last_record) > expiry;
        let quota: Vec<Tags> = self
            .quota_sensors
            .iter()
            .filter(|(_, s)| stale(s))
            .map(|(t, _)| t.clone())
            .collect();
        let throttle: Vec<Tags> = self
            .throttle_sensors
            .iter()
            .filter(|(_, s)| stale(s))
            .map(|(t, _)| t.clone())
            .collect();
        let mut names = Vec::new();
        for tags in quota {
            self.quota_sensors.remove(&tags);
            names.push(self.sensor_name("", &tags));
        }
        for tags in throttle {
            self.throttle_sensors.remove(&tags);
            names.push(self.sensor_name("ThrottleTime", &tags));
        }
        names.sort();
        names
    }

    fn sorted_quotas(&self) -> Vec<(QuotaEntity, u64)> {
        let mut quotas: Vec<(QuotaEntity, u64)> = self
            .overrides
            .values()
            .map(|(e, v)| (e.clone(), v.to_bits()))
            .collect();
        quotas.sort();
        quotas
    }
}

// -- checks ------------------------------------------------------------------------------

fn same(a: f64, b: f64) -> bool {
    a.to_bits() == b.to_bits() || (a.is_nan() && b.is_nan())
}

fn same_opt(a: Option<f64>, b: Option<f64>) -> bool {
    match (a, b) {
        (Some(x), Some(y)) => same(x, y),
        (None, None) => true,
        _ => false,
    }
}

fn sorted_quotas(m: &QuotaManager) -> Vec<(QuotaEntity, u64)> {
    let mut quotas: Vec<(QuotaEntity, u64)> = m
        .quotas()
        .into_iter()
        .map(|(e, v)| (e, v.to_bits()))
        .collect();
    quotas.sort();
    quotas
}

/// What a failed call must leave as it was (read without purging anything).
#[derive(Debug, PartialEq)]
struct Observable {
    quotas: Vec<(QuotaEntity, u64)>,
    sensors: Vec<String>,
    enabled: bool,
    queue_size: usize,
    next_unmute: Option<i64>,
}

fn observe(m: &QuotaManager) -> Observable {
    Observable {
        quotas: sorted_quotas(m),
        sensors: m.sensor_names(),
        enabled: m.enabled(),
        queue_size: m.queue_size(),
        next_unmute: m.next_unmute_ms(),
    }
}

fn names_value(err: &Error, shown: &str) {
    let message = err.to_string();
    assert!(
        message.contains(shown),
        "error {err:?} does not name {shown}: {message}"
    );
}

fn check_rate(model: &Model, rate: f64, what: &str) {
    if !model.huge {
        assert!(
            rate.is_finite(),
            "{what}: rate {rate} from values below 1e290"
        );
    }
}

fn assert_state(m: &QuotaManager, model: &Model) {
    assert_eq!(sorted_quotas(m), model.sorted_quotas(), "overrides");
    assert_eq!(m.sensor_names(), model.sensor_names(), "sensor names");
    assert_eq!(m.sensor_count(), model.quota_sensors.len());
    assert_eq!(m.enabled(), model.enabled != 0);
    assert_eq!(m.queue_size(), model.queue.len());
    assert_eq!(
        m.next_unmute_ms(),
        model.queue.keys().next().map(|(end, _)| *end)
    );
}

// -- the run -----------------------------------------------------------------------------

struct Run {
    manager: QuotaManager,
    model: Model,
    rate: SampledRate,
    plain: Samples,
    plain_bound: Option<f64>,
    now: i64,
}

impl Run {
    fn new(input: &Input) -> Run {
        let quota_type = QuotaType::ALL[usize::from(input.quota_type) % 3];
        let num_samples = i64::from(input.num_samples % 16) + 1;
        let window_ms = (i64::from(input.window_seconds % 4) + 1) * 1000;
        let window = WindowConfig::new(num_samples, window_ms).unwrap();
        let expiry_ms = match input.expiry {
            Expiry::Kafka => 3_600_000,
            Expiry::Zero => 0,
            Expiry::Short(ms) => i64::from(ms),
            Expiry::Raw(ms) => ms,
        };
        let manager = match QuotaManager::new(quota_type, window, expiry_ms) {
            Ok(m) => m,
            Err(err) => {
                assert!(expiry_ms < 0, "{err}");
                names_value(&err, &expiry_ms.to_string());
                QuotaManager::new(quota_type, window, 3_600_000).unwrap()
            }
        };
        let (n, w) = input.rate_window;
        let rate_window = WindowConfig::new(i64::from(n % 24) + 1, i64::from(w) + 1).unwrap();
        let requested = input.rate_bound.as_ref().map(Val::get);
        let (rate, plain_bound) = match SampledRate::new(rate_window, requested) {
            Ok(rate) => (rate, requested),
            Err(err) => {
                let v = requested.unwrap();
                assert!(!(v.is_finite() && v > 0.0));
                names_value(&err, &format!("{v:?}"));
                (SampledRate::new(rate_window, None).unwrap(), None)
            }
        };
        Run {
            model: Model {
                quota_type,
                window,
                expiry_ms: manager.sensor_expiry_ms(),
                enabled: 0,
                overrides: BTreeMap::new(),
                quota_sensors: BTreeMap::new(),
                throttle_sensors: BTreeMap::new(),
                queue: BTreeMap::new(),
                queued: 0,
                huge: false,
            },
            manager,
            rate,
            plain: Samples::new(),
            plain_bound,
            now: 0,
        }
    }

    fn tick(&mut self, step: &Step) {
        let w = self.model.window.window_ms();
        let horizon = w * i64::from(self.model.window.num_samples());
        self.now = match *step {
            Step::Ms(ms) => self.now.wrapping_add(i64::from(ms)),
            Step::Back(ms) => self.now.wrapping_sub(i64::from(ms)),
            Step::Windows(k) => self.now.wrapping_add(i64::from(k) * w),
            Step::Horizon(k, d) => self.now.wrapping_add(i64::from(k) * horizon + i64::from(d)),
            Step::Jump(d) => self.now.wrapping_add(d),
            Step::To(t) => t,
            Step::Edge(i) => [i64::MIN, i64::MAX, 0, 1 << 62, -(1 << 62)][usize::from(i) % 5],
        };
    }

    /// A usage call (record, unrecord, record without a check) through both sides.
    fn usage_call(&mut self, client: &Client, value: f64, kind: u8) {
        let (user, cid, now) = (client.user.get(), client.client.get(), self.now);
        let before = observe(&self.manager);
        let got = match kind {
            0 => self.manager.record(user, cid, value, now),
            1 => self.manager.unrecord(user, cid, value, now).map(|()| 0),
            _ => self
                .manager
                .record_no_throttle(user, cid, value, now)
                .map(|()| 0),
        };
        match got {
            Ok(throttle) => {
                assert!(
                    value.is_finite() && value >= 0.0,
                    "accepted usage {value:?}"
                );
                let usage = self.model.usage(value);
                let want = match kind {
                    0 => self.model.record(user, cid, usage, now, true),
                    1 => self.model.record(user, cid, -usage, now, false),
                    _ => self.model.record(user, cid, usage, now, false),
                };
                assert_eq!(
                    throttle, want,
                    "throttle of {value} at {now} for {user:?}/{cid:?}"
                );
            }
            Err(err) => {
                assert!(
                    !(value.is_finite() && value >= 0.0),
                    "rejected usage {value:?}"
                );
                assert!(matches!(err, Error::InvalidUsage(_)), "{err:?}");
                names_value(&err, &format!("{value:?}"));
                assert_eq!(
                    observe(&self.manager),
                    before,
                    "a rejected usage changed state"
                );
            }
        }
    }

    fn entity(&self, user: &Option<Dim>, client: &Option<Dim>) -> Option<QuotaEntity> {
        let entity = QuotaEntity::new(
            user.as_ref().map(entity_name),
            client.as_ref().map(entity_name),
        );
        match entity {
            Ok(e) => Some(e),
            Err(err) => {
                assert!(user.is_none() && client.is_none(), "{err}");
                assert!(matches!(err, Error::InvalidConfig(_)));
                None
            }
        }
    }

    fn set_quota(&mut self, user: &Option<Dim>, client: &Option<Dim>, value: f64) {
        let Some(entity) = self.entity(user, client) else {
            return;
        };
        let before = observe(&self.manager);
        match self.manager.set_quota(&entity, value) {
            Ok(()) => {
                assert!(value.is_finite() && value > 0.0, "accepted quota {value:?}");
                self.model.apply(&entity, Some(value));
                assert_eq!(
                    self.manager.quota(&entity).map(f64::to_bits),
                    Some(value.to_bits())
                );
            }
            Err(err) => {
                assert!(
                    !(value.is_finite() && value > 0.0),
                    "rejected quota {value:?}"
                );
                assert!(matches!(err, Error::InvalidQuota(_)), "{err:?}");
                names_value(&err, &format!("{value:?}"));
                assert_eq!(
                    observe(&self.manager),
                    before,
                    "a rejected quota changed state"
                );
            }
        }
    }

    fn remove_quota(&mut self, user: &Option<Dim>, client: &Option<Dim>) {
        let Some(entity) = self.entity(user, client) else {
            return;
        };
        self.manager.remove_quota(&entity).unwrap();
        self.model.apply(&entity, None);
        assert_eq!(self.manager.quota(&entity), None);
    }

    /// `channel` 0 stands for a throttle with no channel (accounted, never queued).
    fn throttle(&mut self, client: &Client, ms: i64, channel: u64) {
        let (user, cid, now) = (client.user.get(), client.client.get(), self.now);
        let channel = (channel != 0).then_some(channel);
        let before = observe(&self.manager);
        match self.manager.throttle(user, cid, ms, now, channel) {
            Ok(end) => {
                assert!(ms > 0, "accepted throttle {ms}");
                assert_eq!(end, now.saturating_add(ms));
                let tags = self.model.resolve(user, cid, now);
                let sensor = self.model.throttle_sensors.get_mut(&tags).unwrap();
                sensor.last_record = now;
                sensor.samples.record(&THROTTLE_WINDOW, ms as f64, now);
                if let Some(channel) = channel {
                    self.model.queue.insert((end, self.model.queued), channel);
                    self.model.queued += 1;
                }
            }
            Err(err) => {
                assert!(ms <= 0, "rejected throttle {ms}: {err}");
                assert!(matches!(err, Error::InvalidUsage(_)), "{err:?}");
                names_value(&err, &ms.to_string());
                assert_eq!(
                    observe(&self.manager),
                    before,
                    "a rejected throttle changed state"
                );
            }
        }
    }

    fn expired_channels(&mut self) {
        let got = self.manager.expired_channels(self.now);
        let due: Vec<(i64, u64)> = self
            .model
            .queue
            .range(..=(self.now, u64::MAX))
            .map(|(k, _)| *k)
            .collect();
        let want: Vec<u64> = due
            .iter()
            .map(|k| self.model.queue.remove(k).unwrap())
            .collect();
        assert_eq!(got, want, "expired channels at {}", self.now);
    }

    fn read(&mut self, client: &Client) {
        let (user, cid, now) = (client.user.get(), client.client.get(), self.now);
        let tags = self.model.tags(user, cid);
        assert_eq!(
            self.manager.tags(user, cid).unwrap(),
            tags,
            "tags of {user:?}/{cid:?}"
        );
        let limit = self.model.quota_limit(&tags);
        assert!(same_opt(self.manager.quota_for(user, cid).unwrap(), limit));
        let bound = self
            .model
            .quota_sensors
            .contains_key(&tags)
            .then(|| self.model.bound(&tags));
        assert!(same_opt(self.manager.bound(user, cid), bound), "bound");
        let avg = self.manager.throttle_time_avg(user, cid, now);
        assert!(
            same_opt(avg, self.model.throttle_avg(&tags, now)),
            "throttle avg"
        );
    }

    fn measure(&mut self, client: &Client) {
        let (user, cid, now) = (client.user.get(), client.client.get(), self.now);
        let tags = self.model.tags(user, cid);
        let got = self.manager.measure(user, cid, now);
        let want = self.model.measure(&tags, now);
        assert!(same_opt(got, want), "measure {got:?} != {want:?} at {now}");
        if let Some(rate) = got {
            check_rate(&self.model, rate, "measure");
        }
    }

    fn max_value(&mut self, client: &Client) {
        let (user, cid, now) = (client.user.get(), client.client.get(), self.now);
        let got = self
            .manager
            .max_value_in_quota_window(user, cid, now)
            .unwrap();
        let want = if self.model.enabled == 0 {
            f64::MAX
        } else {
            let tags = self.model.resolve(user, cid, now);
            let window = self.model.window;
            match self.model.quota_limit(&tags) {
                Some(bound) => {
                    bound * f64::from(window.num_samples() - 1) * (window.window_ms() / 1000) as f64
                }
                None => f64::MAX,
            }
        };
        assert!(same(got, want), "max value {got} != {want}");
    }

    fn snapshot(&mut self) {
        let now = self.now;
        let mut got = self.manager.snapshot(now);
        got.sort_by(|a, b| (&a.user, &a.client_id).cmp(&(&b.user, &b.client_id)));
        let tags: Vec<Tags> = self.model.quota_sensors.keys().cloned().collect();
        let want: Vec<SensorSnapshot> = tags
            .into_iter()
            .map(|t| SensorSnapshot {
                rate: self.model.measure(&t, now).unwrap(),
                bound: self.model.bound(&t),
                throttle_time_avg: self.model.throttle_avg(&t, now),
                user: t.0,
                client_id: t.1,
            })
            .collect();
        assert_eq!(got.len(), want.len(), "snapshot size");
        for (g, w) in got.iter().zip(&want) {
            assert_eq!((&g.user, &g.client_id), (&w.user, &w.client_id));
            assert!(same(g.rate, w.rate), "snapshot rate {g:?} != {w:?}");
            assert!(same(g.bound, w.bound), "snapshot bound {g:?} != {w:?}");
            assert!(
                same_opt(g.throttle_time_avg, w.throttle_time_avg),
                "{g:?} != {w:?}"
            );
            check_rate(&self.model, g.rate, "snapshot");
        }
    }

    fn batch(
        &mut self,
        keys: &[Client],
        events: &[Event],
        unrecord_if: Option<&[bool]>,
        drop: bool,
    ) {
        let keys: Vec<(String, String)> = keys
            .iter()
            .take(8)
            .map(|c| (c.user.get().to_owned(), c.client.get().to_owned()))
            .collect();
        let events = &events[..events.len().min(64)];
        let now: Vec<i64> = events
            .iter()
            .map(|e| self.now.wrapping_add(i64::from(e.dt)))
            .collect();
        let index: Vec<i64> = events.iter().map(|e| i64::from(e.key)).collect();
        let mut values: Vec<f64> = events.iter().map(|e| e.value.get()).collect();
        if drop {
            values.pop();
        }
        let before = observe(&self.manager);
        match self
            .manager
            .record_batch(&now, &index, &values, &keys, unrecord_if)
        {
            Ok(throttles) => {
                let n = now.len();
                let fetch = self.model.quota_type == QuotaType::Fetch;
                assert!(values.len() == n && unrecord_if.is_none_or(|u| u.len() == n));
                assert!(
                    fetch || unrecord_if.is_none(),
                    "unrecord_if accepted off fetch"
                );
                for i in 0..n {
                    let (user, cid) = &keys[usize::try_from(index[i]).unwrap()];
                    assert!(values[i].is_finite() && values[i] >= 0.0);
                    let usage = self.model.usage(values[i]);
                    let t = self.model.record(user, cid, usage, now[i], true);
                    if fetch && (t > 0 || unrecord_if.is_some_and(|u| u[i])) {
                        self.model.record(user, cid, -usage, now[i], false);
                    }
                    assert_eq!(throttles[i], t, "batch event {i}");
                }
            }
            Err(err) => {
                assert!(matches!(err, Error::InvalidUsage(_)), "{err:?}");
                let n = now.len();
                let lengths_ok = values.len() == n && unrecord_if.is_none_or(|u| u.len() == n);
                if unrecord_if.is_some() && self.model.quota_type != QuotaType::Fetch {
                    names_value(&err, "unrecord_if");
                } else if lengths_ok {
                    let bad_index = index.iter().find(|&&k| k < 0 || k as usize >= keys.len());
                    match bad_index {
                        Some(k) => names_value(&err, &format!("invalid key_index {k}")),
                        None => {
                            let v = values
                                .iter()
                                .find(|v| !(v.is_finite() && **v >= 0.0))
                                .expect("a batch of valid input was rejected");
                            names_value(&err, &format!("{v:?}"));
                        }
                    }
                } else {
                    names_value(&err, &format!("values {}", values.len()));
                }
                assert_eq!(
                    observe(&self.manager),
                    before,
                    "a rejected batch changed state"
                );
            }
        }
    }

    fn rate_record(&mut self, value: f64, check: bool) {
        let now = self.now;
        let before = self.rate.samples_snapshot();
        let got = if check {
            self.rate.record(value, now)
        } else {
            self.rate
                .record_no_check(value, now)
                .map(|()| Check::UNCHECKED)
        };
        match got {
            Ok(got) => {
                assert!(value.is_finite());
                let cfg = self.rate.config();
                self.plain.record(&cfg, value, now);
                let want = match self.plain_bound {
                    Some(b) if check => check_bound(&mut self.plain, &cfg, b, now),
                    _ => Check::UNCHECKED,
                };
                assert_eq!(got.violated, want.violated, "rate record {value} at {now}");
                assert_eq!(
                    got.throttle_ms, want.throttle_ms,
                    "rate record {value} at {now}"
                );
                assert!(same_opt(got.rate, want.rate), "{got:?} != {want:?}");
            }
            Err(err) => {
                assert!(!value.is_finite());
                names_value(&err, &format!("{value:?}"));
                assert_same_samples(&self.rate.samples_snapshot(), &before);
            }
        }
    }

    fn rate_set_quota(&mut self, value: Option<f64>) {
        match self.rate.set_quota(value) {
            Ok(()) => {
                assert!(value.is_none_or(|v| v.is_finite() && v > 0.0));
                self.plain_bound = value;
            }
            Err(err) => {
                let v = value.unwrap();
                assert!(!(v.is_finite() && v > 0.0));
                names_value(&err, &format!("{v:?}"));
            }
        }
        assert!(same_opt(self.rate.quota(), self.plain_bound));
    }

    fn finish(&mut self) {
        assert_state(&self.manager, &self.model);
        self.snapshot();
        let cfg = self.rate.config();
        let got = self.rate.measure(self.now);
        let want = self.plain.measure_rate(&cfg, self.now).0;
        assert!(same(got, want));
        assert_same_samples(&self.rate.samples_snapshot(), &self.plain);
    }
}

fn assert_same_samples(a: &Samples, b: &Samples) {
    let key = |s: &Samples| -> Vec<(u64, i64, i64)> {
        s.slots()
            .iter()
            .map(|x| (x.value.to_bits(), x.start, x.last))
            .collect()
    };
    assert_eq!(a.current_index(), b.current_index());
    assert_eq!(key(a), key(b));
}

fuzz_target!(|input: Input| {
    let mut run = Run::new(&input);
    for op in input.ops.iter().take(256) {
        match op {
            Op::Tick(step) => run.tick(step),
            Op::SetQuota(u, c, v) => run.set_quota(u, c, v.get()),
            Op::RemoveQuota(u, c) => run.remove_quota(u, c),
            Op::Record(client, v) => run.usage_call(client, v.get(), 0),
            Op::Unrecord(client, v) => run.usage_call(client, v.get(), 1),
            Op::RecordNoThrottle(client, v) => run.usage_call(client, v.get(), 2),
            Op::Throttle(client, ms, channel) => {
                run.throttle(client, ms.get(), u64::from(*channel))
            }
            Op::ExpiredChannels => run.expired_channels(),
            Op::ExpireSensors => {
                let got = run.manager.expire_sensors(run.now);
                assert_eq!(got, run.model.expire(run.now), "expired at {}", run.now);
            }
            Op::Measure(client) => run.measure(client),
            Op::Read(client) => run.read(client),
            Op::MaxValue(client) => run.max_value(client),
            Op::Snapshot => run.snapshot(),
            Op::Batch {
                keys,
                events,
                unrecord_if,
                drop_value,
            } => run.batch(keys, events, unrecord_if.as_deref(), *drop_value),
            Op::RateRecord(v, check) => run.rate_record(v.get(), *check),
            Op::RateMeasure => {
                let cfg = run.rate.config();
                let got = run.rate.measure(run.now);
                let want = run.plain.measure_rate(&cfg, run.now).0;
                assert!(
                    same(got, want),
                    "rate measure {got} != {want} at {}",
                    run.now
                );
            }
            Op::RateSetQuota(v) => run.rate_set_quota(v.as_ref().map(Val::get)),
        }
        assert_state(&run.manager, &run.model);
    }
    run.finish();
});
