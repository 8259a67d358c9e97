//! What the property tests share: proptest configurations from a fixed seed.
// each test crate compiles this module and uses part of it
#![allow(dead_code)]

use proptest::test_runner::{Config as ProptestConfig, RngSeed};

/// The seed every property test starts from unless `PROPTEST_RNG_SEED` says otherwise.
pub const SEED: u64 = 0x6b71_756f_7461;

/// `cases` cases from a fixed seed: `make test` runs the same cases every time (a failure
/// is reproducible, never a matter of luck), after the saved failures of the test's
/// `.proptest-regressions` file. Explore other seeds with `PROPTEST_RNG_SEED=N cargo test`
/// or more cases with `PROPTEST_CASES=N`.
pub fn fixed(cases: u32) -> ProptestConfig {
    fixed_from(env("PROPTEST_RNG_SEED").unwrap_or(SEED), cases)
}

/// [`fixed`] from `seed`, whatever `PROPTEST_RNG_SEED` says (`PROPTEST_CASES` still
/// counts).
pub fn fixed_from(seed: u64, cases: u32) -> ProptestConfig {
    ProptestConfig {
        cases: env("PROPTEST_CASES").unwrap_or(cases),
        rng_seed: RngSeed::Fixed(seed),
        ..ProptestConfig::default()
    }
}

fn env<T: std::str::FromStr>(name: &str) -> Option<T> {
    std::env::var(name).ok().and_then(|s| s.parse().ok())
}
