//! Sharded eksvd fits against single-process fits.
