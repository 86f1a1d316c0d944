//! The load generator's integration tests, one binary: each file beside
//! this one is a module; `cargo test -p npamp-loadgen --test integration
//! MODULE::` runs one.

mod capacity;
mod charts;
mod compare;
mod deploy;
mod flood;
mod html;
mod merge;
mod pages;
mod runs;
