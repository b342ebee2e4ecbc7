//! Problems (errors and warnings) found in a task definition, each tied to a JSON path.

use crate::types::TaskDefinition;
use std::fmt;

/// One problem in a task definition: where it is (a JSON path such as
/// `containerDefinitions[1].dependsOn[0].containerName`, empty for the document itself) and what is
/// wrong, phrased so the reader knows how to fix it.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct Problem {
    pub path: String,
    pub message: String,
}

impl Problem {
    pub fn new(path: impl Into<String>, message: impl Into<String>) -> Self {
        Problem {
            path: path.into(),
            message: message.into(),
        }
    }
}

impl fmt::Display for Problem {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        if self.path.is_empty() {
            write!(f, "{}", self.message)
        } else {
            write!(f, "{}: {}", self.path, self.message)
        }
    }
}

/// A valid task definition and the warnings met on the way (ignored fields).
#[derive(Debug, Clone, PartialEq)]
pub struct Parsed {
    pub definition: TaskDefinition,
    pub warnings: Vec<Problem>,
}

/// The task definition is invalid; `problems` lists every problem found (never empty).
#[derive(Debug, Clone, PartialEq, Eq, thiserror::Error)]
#[error("invalid task definition: {} problem(s), first: {}", problems.len(), problems.first().map(|p| p.to_string()).unwrap_or_default())]
pub struct Invalid {
    pub problems: Vec<Problem>,
    /// Fields ignored on the way: often the explanation of a problem (a misspelt `healthcheck`
    /// makes a HEALTHY dependency invalid).
    pub warnings: Vec<Problem>,
}
