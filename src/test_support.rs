//! What the library's unit tests share: the seed of a randomized test.
//! (It imports nothing of the crate, so any module's tests may use it.)

/// The seed of a randomized test: `GRAMIAN_TEST_SEED`, else random
/// (printed, to replay a failure).
pub(crate) fn seed() -> u64 {
    let seed = std::env::var("GRAMIAN_TEST_SEED").ok().and_then(|s| s.parse().ok()).unwrap_or_else(rand::random);
    eprintln!("test seed: {seed} (replay with GRAMIAN_TEST_SEED={seed})");
    seed
}
