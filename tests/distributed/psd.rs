//! Sharded psd fits against single-process fits.
