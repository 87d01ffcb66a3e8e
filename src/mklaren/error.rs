//! The error type of the mklaren module.

/// mklaren's error: an alias of the library's one [`Error`](crate::Error).
pub type MklarenError = crate::error::Error;
