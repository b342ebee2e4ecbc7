//! What the binary's integration tests share (each test crate that needs it declares `mod common;`).

pub mod agent;
