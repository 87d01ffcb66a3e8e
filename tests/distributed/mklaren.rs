//! Sharded mklaren fits against single-process fits.
