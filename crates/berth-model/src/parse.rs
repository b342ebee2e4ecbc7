//! Parsing and validation: JSON text in, a [`TaskDefinition`](crate::TaskDefinition) plus
//! warnings, or every problem found.
//!
//! The text is read into an order-preserving JSON tree (so problems can be reported in document
//! order and duplicate keys noticed), then walked by hand: each field is checked for type and range,
//! unknown fields become warnings, and the cross-field rules (unique names, dependencies, cycles,
//! volumes, host ports) run once the whole document has been read. Nothing stops at the first
//! problem. At the end, problems are sorted by where their path sits in the document.
//!
//! This module owns the entry points ([`parse`], [`parse_bytes`]) and the problems that end a parse
//! before the walk (empty input, bad UTF-8, bad JSON). The walk is in the submodules:
//! - `json`: the order-preserving tree and how values are described in messages;
//! - `checker`: the machinery every walker uses (JSON paths, collecting and sorting problems, the
//!   typed readers that report wrong types and out-of-range numbers);
//! - `rules`: what each object may contain, ECS name rules, numeric bounds;
//! - `task`: the document and task level; `container`: one container definition;
//!   `relations`: the container fields that name other containers, volumes or host ports;
//!   `volume`: one volume;
//! - `linux`: a container's `linuxParameters`; `dns`: `dnsServers`, `dnsSearchDomains`,
//!   `extraHosts`;
//!   `settings`: `systemControls`, `dockerSecurityOptions`;
//! - `cross`: the cross-field checks, run on what the walkers collected.

use crate::problem::{Invalid, Parsed, Problem};
use checker::Checker;
use json::Json;

mod checker;
mod container;
mod cross;
mod dns;
mod firelens;
mod json;
mod linux;
mod position;
mod relations;
mod resources;
mod rules;
mod settings;
mod task;
mod volume;

/// Parses and validates a task definition: either a bare definition or the
/// `{"taskDefinition": {...}}` wrapper printed by `aws ecs describe-task-definition`.
///
/// On success the warnings list fields that were ignored. On failure every problem found is
/// returned, in document order, each with the JSON path of the offending field.
pub fn parse(input: &str) -> Result<Parsed, Invalid> {
    parse_with(input, &Limits::default())
}

/// Limits a caller may set on what [`parse_with`] accepts.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct Limits {
    /// The most containers a definition may list (default [`crate::MAX_CONTAINERS`], ECS's).
    pub max_containers: usize,
}

impl Default for Limits {
    fn default() -> Limits {
        Limits {
            max_containers: crate::MAX_CONTAINERS,
        }
    }
}

/// [`parse`] with the caller's [`Limits`].
pub fn parse_with(input: &str, limits: &Limits) -> Result<Parsed, Invalid> {
    let input = input.strip_prefix('\u{feff}').unwrap_or(input);
    if input.trim().is_empty() {
        return Err(single(
            "the input is empty; expected a JSON task definition",
        ));
    }
    let doc: Json = match serde_json::from_str(input) {
        Ok(doc) => doc,
        Err(err) => return Err(json_problem(input, &err)),
    };
    let mut checker = Checker::new();
    checker.max_containers = limits.max_containers;
    let definition = checker.document(&doc);
    let (errors, warnings) = checker.finish();
    if errors.is_empty() {
        Ok(Parsed {
            definition,
            warnings,
        })
    } else {
        Err(Invalid {
            problems: errors,
            warnings,
        })
    }
}

/// Like [`parse`], for raw bytes: input that is not UTF-8 is one problem, with its position.
pub fn parse_bytes(input: &[u8]) -> Result<Parsed, Invalid> {
    parse_bytes_with(input, &Limits::default())
}

/// [`parse_bytes`] with the caller's [`Limits`].
pub fn parse_bytes_with(input: &[u8], limits: &Limits) -> Result<Parsed, Invalid> {
    match std::str::from_utf8(input) {
        Ok(text) => parse_with(text, limits),
        Err(err) => {
            let good = input.get(..err.valid_up_to()).unwrap_or_default();
            let line = good.iter().filter(|&&b| b == b'\n').count() + 1;
            let line_start = good.iter().rposition(|&b| b == b'\n').map_or(0, |p| p + 1);
            let column = good.len() - line_start + 1;
            Err(single(&format!(
                "not valid UTF-8: invalid byte at line {line}, column {column} (byte offset {})",
                err.valid_up_to()
            )))
        }
    }
}

fn single(message: &str) -> Invalid {
    Invalid {
        problems: vec![Problem::new("", message)],
        warnings: Vec::new(),
    }
}

/// serde_json's error as one problem: the position written as "line L, column C"; for an error
/// inside a value (a number out of range, a bad escape) the path of that value, and a text that
/// says what is wrong where serde_json's does not.
fn json_problem(input: &str, err: &serde_json::Error) -> Invalid {
    let full = err.to_string();
    let suffix = format!(" at line {} column {}", err.line(), err.column());
    let what = full.strip_suffix(&suffix).unwrap_or(&full);
    let at = position::offset(input, err.line(), err.column());
    let (path, what) = match what {
        "number out of range" => (
            position::path_at(input, at),
            "number out of range: it does not fit in a 64-bit floating-point number; write the \
             value ECS expects (usually a whole number such as 512)"
                .to_string(),
        ),
        // serde_json says "unexpected end of hex escape" for a `\ud800` not followed by its low
        // half, "lone leading surrogate" for a `\udc00`: both are a lone UTF-16 surrogate.
        w if w.contains("surrogate")
            || (w.contains("hex escape") && lone_surrogate_before(input, at)) =>
        {
            (
                position::path_at(input, at),
                "a lone UTF-16 surrogate escape (\\uD800-\\uDFFF) in a string: it encodes no \
                 character; write the character itself or a high and low pair such as \
                 \\ud83d\\ude00"
                    .to_string(),
            )
        }
        w if w.contains("escape") || w.contains("control character") => {
            (position::path_at(input, at), w.to_string())
        }
        w => (String::new(), w.to_string()),
    };
    Invalid {
        problems: vec![Problem::new(
            path,
            format!(
                "invalid JSON at line {}, column {}: {what}",
                err.line(),
                err.column()
            ),
        )],
        warnings: Vec::new(),
    }
}

/// Whether a `\uD800`-`\uDFFF` escape ends within a few bytes before `at` (serde_json points
/// just past it, or past the escape that was expected to follow).
fn lone_surrogate_before(input: &str, at: usize) -> bool {
    let start = at.saturating_sub(14);
    let window = input
        .get(start..(at + 1).min(input.len()))
        .unwrap_or_default()
        .to_ascii_lowercase();
    window
        .match_indices("\\u")
        .any(|(i, _)| matches!(window.get(i + 2..i + 4), Some(h) if h.starts_with('d') && matches!(h.as_bytes().get(1), Some(b'8'..=b'9' | b'a'..=b'f'))))
}

#[cfg(test)]
mod fuzz;
#[cfg(test)]
mod testing;
#[cfg(test)]
mod tests;
