//! The fake Hub of `src/testing.rs`, compiled into each test binary here:
//! the crate's own tests cannot turn on its `testing` feature, which is how
//! the app's tests reach the same server.
#[path = "../../src/testing.rs"]
mod testing;
// some test binaries use only part of it (tests/fit.rs none of it)
#[allow(unused_imports)]
pub use testing::*;
