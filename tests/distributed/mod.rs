//! Sharded fits on ranks that are threads of this process, against the
//! single-process fits.

mod core;
mod eksvd;
mod mklaren;
mod psd;
