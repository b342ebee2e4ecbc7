//! berth-model: ECS-style task definitions — parsing, validation with JSON paths, dependency graph.
//!
//! The entry point is [`parse()`]: JSON text in, a [`Parsed`] task definition (plus warnings for fields
//! berth ignores) or [`Invalid`] with *every* problem found, each carrying the JSON path of the bad
//! field. Nothing in this crate does I/O.

pub mod firelens;
pub mod graph;
pub mod linux;
pub mod logging;
mod parse;
pub mod policy;
mod problem;
pub mod role;
pub mod secret;
pub mod tags;
pub mod types;

pub use firelens::{FirelensConfiguration, FirelensType};
pub use graph::{DependencyGraph, GraphFormat};
pub use linux::{Device, LinuxParameters, Tmpfs};
pub use parse::{Limits, parse, parse_bytes, parse_bytes_with, parse_with};

/// The most containers one task definition may list, as ECS allows (a quota of 10 per task
/// definition); callers may set another limit ([`Limits`]).
pub const MAX_CONTAINERS: usize = 10;
pub use problem::{Invalid, Parsed, Problem};
pub use tags::Tag;
pub use types::*;
