//! mklaren and its low-rank baselines.

mod model;
mod sparse;
mod sparse_device;
