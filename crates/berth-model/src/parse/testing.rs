//! What the walkers' unit tests share (test builds only): a task of one container with extra
//! fields, and the problems a definition that must be invalid gets.

use crate::parse;

/// A task whose one container (`c`, image `busybox`) has these extra fields.
pub(super) fn one_container(extra: &str) -> String {
    format!(
        r#"{{"family": "t", "containerDefinitions": [{{"name": "c", "image": "busybox", {extra}}}]}}"#
    )
}

/// Every problem of a definition that must be invalid, as `PATH: message`.
///
/// # Panics
///
/// When the definition is valid.
pub(super) fn problems_of(text: &str) -> Vec<String> {
    match parse(text) {
        Ok(p) => panic!("expected problems, got {p:#?}"),
        Err(e) => e.problems.iter().map(ToString::to_string).collect(),
    }
}
