//! The checker: the machinery every walker of the task definition uses.
//!
//! It owns JSON paths (`containerDefinitions[1].dependsOn[0].containerName`, `labels["a.b"]`), the
//! list of problems found so far, and the typed readers (`object`, `array`, `fields`, `string`,
//! `bounded`, ...) that report a wrong type or an out-of-range number at the value's path and hand
//! back `None`, so a walker reports and carries on. What each object may contain comes from
//! `rules`; what a field means is up to the walkers (`task`, `container`, `relations`, `volume`).
//!
//! Invariants: every path a reader visits is marked with its position in the document, and
//! [`Checker::finish`] sorts problems by those positions (a problem at a path that is not in the
//! document, such as a missing field, sorts where its nearest present parent starts; an
//! [`Checker::error_after`] problem sorts after everything inside its path); ties keep the order in
//! which they were found. Limits: the position of a quoted key holding brackets or dots is found
//! approximately (see `parent_path`), which only affects the order of problems.

use super::json::{Json, describe, is_empty_value, quote};
use super::rules::{Bounds, Schema, unknown_field_message};
use crate::problem::Problem;
use std::collections::{BTreeMap, HashMap};

/// `base.key`, or `base["key"]` when the key is not a plain identifier.
pub(super) fn key_path(base: &str, key: &str) -> String {
    let plain = !key.is_empty()
        && key
            .bytes()
            .all(|b| b.is_ascii_alphanumeric() || b == b'_' || b == b'-');
    match (base.is_empty(), plain) {
        (true, true) => key.to_owned(),
        (false, true) => format!("{base}.{key}"),
        (_, false) => format!("{base}[{key:?}]"),
    }
}

pub(super) fn index_path(base: &str, i: usize) -> String {
    format!("{base}[{i}]")
}

/// The path one level up (`a.b[2]` → `a.b` → `a` → ``). Approximate for quoted keys containing
/// brackets or dots; used only to order problems.
pub(super) fn parent_path(path: &str) -> Option<&str> {
    if path.is_empty() {
        return None;
    }
    let cut = if path.ends_with(']') {
        path.rfind('[')
    } else {
        path.rfind(['.', '['])
    };
    Some(cut.map_or("", |i| &path[..i]))
}

#[derive(Clone, Copy)]
enum Anchor {
    /// Sorted where the path starts in the document.
    Start,
    /// Sorted after everything inside the path.
    End,
}

struct Found {
    anchor: Anchor,
    problem: Problem,
}

/// Walks the tree and collects problems; one per parse.
#[derive(Default)]
pub(super) struct Checker {
    errors: Vec<Found>,
    warnings: Vec<Found>,
    /// Path → position in the document (indexes from the root), for sorting problems.
    positions: HashMap<String, Vec<usize>>,
    /// The most containers a definition may list ([`crate::MAX_CONTAINERS`] unless the caller's
    /// limit says otherwise).
    pub(super) max_containers: usize,
}

/// One present, known field of an object.
pub(super) struct Field<'j> {
    pub(super) key: &'j str,
    pub(super) value: &'j Json,
    pub(super) path: String,
}

impl Checker {
    /// A checker for one document; the document itself (path "") sits at the root position.
    pub(super) fn new() -> Self {
        let mut checker = Checker {
            max_containers: crate::MAX_CONTAINERS,
            ..Checker::default()
        };
        checker.positions.insert(String::new(), Vec::new());
        checker
    }

    pub(super) fn error(&mut self, path: impl Into<String>, message: impl Into<String>) {
        self.errors.push(Found {
            anchor: Anchor::Start,
            problem: Problem::new(path, message),
        });
    }

    /// An error about a whole object or array, listed after the problems inside it.
    pub(super) fn error_after(&mut self, path: impl Into<String>, message: impl Into<String>) {
        self.errors.push(Found {
            anchor: Anchor::End,
            problem: Problem::new(path, message),
        });
    }

    pub(super) fn warn(&mut self, path: impl Into<String>, message: impl Into<String>) {
        self.warnings.push(Found {
            anchor: Anchor::Start,
            problem: Problem::new(path, message),
        });
    }

    /// Records where `path` (child number `index` of `parent`) sits in the document.
    fn mark(&mut self, parent: &str, index: usize, path: &str) {
        if self.positions.contains_key(path) {
            return;
        }
        let mut position = self.positions.get(parent).cloned().unwrap_or_default();
        position.push(index);
        self.positions.insert(path.to_owned(), position);
    }

    /// Where a problem sorts: at its path's place in the document; a path that is not in the
    /// document (a missing field) sorts at the start of the nearest enclosing path that is; an
    /// [`Anchor::End`] problem sorts after everything inside its path.
    fn sort_key(&self, found: &Found) -> Vec<usize> {
        let mut current = Some(found.problem.path.as_str());
        while let Some(p) = current {
            if let Some(position) = self.positions.get(p) {
                let mut key = position.clone();
                if let Anchor::End = found.anchor {
                    key.push(usize::MAX);
                }
                return key;
            }
            current = parent_path(p);
        }
        vec![usize::MAX]
    }

    /// Errors and warnings, each in document order (ties keep the order they were found in).
    pub(super) fn finish(self) -> (Vec<Problem>, Vec<Problem>) {
        let sorted = |list: &Vec<Found>| {
            let mut keyed: Vec<(Vec<usize>, &Found)> =
                list.iter().map(|f| (self.sort_key(f), f)).collect();
            keyed.sort_by(|a, b| a.0.cmp(&b.0));
            keyed
                .into_iter()
                .map(|(_, f)| f.problem.clone())
                .collect::<Vec<_>>()
        };
        (sorted(&self.errors), sorted(&self.warnings))
    }

    // --- generic readers -------------------------------------------------------------------

    pub(super) fn type_error(&mut self, path: &str, expected: &str, found: &Json) {
        self.error(
            path,
            format!("expected {expected}, found {}", describe(found)),
        );
    }

    pub(super) fn object<'j>(&mut self, path: &str, v: &'j Json) -> Option<&'j [(String, Json)]> {
        match v {
            Json::Object(fields) => Some(fields),
            other => {
                self.type_error(path, "an object", other);
                None
            }
        }
    }

    /// The elements of an array with their paths, each marked in the document.
    pub(super) fn array<'j>(&mut self, path: &str, v: &'j Json) -> Option<Vec<(&'j Json, String)>> {
        match v {
            Json::Array(items) => Some(
                items
                    .iter()
                    .enumerate()
                    .map(|(i, item)| {
                        let p = index_path(path, i);
                        self.mark(path, i, &p);
                        (item, p)
                    })
                    .collect(),
            ),
            other => {
                self.type_error(path, "an array", other);
                None
            }
        }
    }

    /// The present, known fields of an object in document order. Reports duplicate keys (a
    /// repeat of the same value is only a warning), warns about unknown fields and about ignored
    /// ECS fields that carry a value, reports unsupported ones that do. Null values count as
    /// absent; `[]` and `{}` count as absent for ignored and unsupported ECS fields.
    pub(super) fn fields<'j>(
        &mut self,
        path: &str,
        object: &'j [(String, Json)],
        schema: &Schema,
    ) -> Vec<Field<'j>> {
        let mut seen: HashMap<&str, &Json> = HashMap::new();
        let mut out = Vec::new();
        for (index, (key, value)) in object.iter().enumerate() {
            let p = key_path(path, key);
            self.mark(path, index, &p);
            if let Some(first) = seen.get(key.as_str()) {
                self.duplicate(p, "field", first, value);
                continue;
            }
            seen.insert(key.as_str(), value);
            let key = key.as_str();
            if matches!(value, Json::Null) {
                // Null counts as absent, whatever the field.
            } else if schema.known.contains(&key) {
                out.push(Field {
                    key,
                    value,
                    path: p,
                });
            } else if schema.unsupported.contains(&key) {
                if !is_empty_value(value) {
                    self.error(p, format!("{key} is not supported by berth"));
                }
            } else if let Some((_, instead)) = schema.aws_only.iter().find(|(k, _)| *k == key) {
                if !is_empty_value(value) {
                    self.warn(p, *instead);
                }
            } else if schema.ignored.contains(&key) {
                // An empty ECS field (console exports are full of them) has nothing to ignore.
                if !is_empty_value(value) {
                    self.warn(p, "not used by berth, ignored");
                }
            } else if !schema.quiet.contains(&key) {
                self.warn(p, unknown_field_message(key, schema.known));
            }
        }
        out
    }

    /// A key seen a second time in one object (`what` is "field" or "key"): a warning when it
    /// repeats the first value (the first is used), an error naming both values otherwise.
    fn duplicate(&mut self, path: String, what: &str, first: &Json, again: &Json) {
        if first == again {
            self.warn(
                path,
                format!(
                    "duplicate {what} with the same value as before; the first is used, delete this one"
                ),
            );
        } else {
            self.error(
                path,
                format!(
                    "duplicate {what} with a different value: first {}, here {}; keep one",
                    describe(first),
                    describe(again)
                ),
            );
        }
    }

    pub(super) fn string<'j>(&mut self, path: &str, v: &'j Json) -> Option<&'j str> {
        match v {
            Json::String(s) => Some(s),
            other => {
                self.type_error(path, "a string", other);
                None
            }
        }
    }

    pub(super) fn non_empty_string(&mut self, path: &str, v: &Json) -> Option<String> {
        let s = self.string(path, v)?;
        if s.is_empty() {
            self.error(path, "must not be empty");
            return None;
        }
        Some(s.to_owned())
    }

    pub(super) fn absolute_path(&mut self, path: &str, v: &Json) -> Option<String> {
        let s = self.string(path, v)?;
        if !s.starts_with('/') {
            self.error(
                path,
                format!(
                    "must be an absolute path (starting with /), found {}",
                    quote(s)
                ),
            );
            return None;
        }
        if s.contains('\0') {
            self.error(path, "must not contain a NUL character");
            return None;
        }
        Some(s.to_owned())
    }

    pub(super) fn boolean(&mut self, path: &str, v: &Json) -> Option<bool> {
        match v {
            Json::Bool(b) => Some(*b),
            other => {
                self.type_error(path, "a boolean", other);
                None
            }
        }
    }

    /// An integer (a JSON number without a fractional part; `512.0` counts).
    pub(super) fn integer(&mut self, path: &str, v: &Json) -> Option<i128> {
        if let Json::Number(n) = v {
            if let Some(u) = n.as_u64() {
                return Some(i128::from(u));
            }
            if let Some(i) = n.as_i64() {
                return Some(i128::from(i));
            }
            if let Some(f) = n.as_f64()
                && f.is_finite()
                && f.fract() == 0.0
            {
                // `as` saturates; the range checks that follow reject huge values.
                return Some(f as i128);
            }
        }
        self.type_error(path, "an integer", v);
        None
    }

    pub(super) fn bounded(&mut self, path: &str, v: &Json, b: Bounds) -> Option<u64> {
        let n = self.integer(path, v)?;
        let unit = b.unit;
        // As written (so 1e300 is not shown as a saturated integer).
        let shown = match v {
            Json::Number(number) => number.to_string(),
            _ => n.to_string(),
        };
        if n < 0 {
            self.error(path, format!("must not be negative, found {shown}"));
            return None;
        }
        if n < i128::from(b.min) {
            self.error(
                path,
                format!(
                    "must be at least {}{unit}{}, found {shown}",
                    b.min, b.min_reason
                ),
            );
            return None;
        }
        if n > i128::from(b.max) {
            let message = match b.absurd {
                Some(human) => format!(
                    "{shown}{unit} is absurd; must be at most {}{unit} ({human})",
                    b.max
                ),
                None => format!("must be at most {}{unit}, found {shown}", b.max),
            };
            self.error(path, message);
            return None;
        }
        u64::try_from(n).ok()
    }

    pub(super) fn bounded_u32(&mut self, path: &str, v: &Json, b: Bounds) -> Option<u32> {
        self.bounded(path, v, b).and_then(|n| u32::try_from(n).ok())
    }

    pub(super) fn bounded_u16(&mut self, path: &str, v: &Json, b: Bounds) -> Option<u16> {
        self.bounded(path, v, b).and_then(|n| u16::try_from(n).ok())
    }

    /// An array of strings; None when it is not one (every bad element reported).
    pub(super) fn string_list(&mut self, path: &str, v: &Json) -> Option<Vec<String>> {
        let items = self.array(path, v)?;
        let mut out = Vec::with_capacity(items.len());
        let mut ok = true;
        for (item, p) in items {
            match item {
                Json::String(s) => out.push(s.clone()),
                other => {
                    self.type_error(&p, "a string", other);
                    ok = false;
                }
            }
        }
        ok.then_some(out)
    }

    /// An object of string values (labels, options).
    pub(super) fn string_map(&mut self, path: &str, v: &Json) -> Option<BTreeMap<String, String>> {
        let object = self.object(path, v)?;
        let mut out = BTreeMap::new();
        let mut firsts: HashMap<&str, &Json> = HashMap::new();
        let mut ok = true;
        for (index, (key, value)) in object.iter().enumerate() {
            let p = key_path(path, key);
            self.mark(path, index, &p);
            if let Some(first) = firsts.get(key.as_str()) {
                if *first != value {
                    ok = false;
                }
                self.duplicate(p, "key", first, value);
                continue;
            }
            firsts.insert(key.as_str(), value);
            match value {
                Json::String(s) => {
                    out.insert(key.clone(), s.clone());
                }
                other => {
                    self.type_error(&p, "a string", other);
                    ok = false;
                }
            }
        }
        ok.then_some(out)
    }
}
