//! The adversarial suites: seeded random and crafted inputs to every entry point, time-bounded, counted (no panic, hang or non-finite `Ok`).

mod cases;
mod causes;
mod limits;
mod models;
mod suite;
