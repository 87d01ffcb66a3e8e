//! eKSVD: solvers against the paper's identities, GPU against CPU, typed errors, Neural eKSVD, sparse sources.

mod errors;
mod gpu;
mod neural;
mod solvers;
mod sparse;
