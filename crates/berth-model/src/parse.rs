//! Parsing and validation: JSON text in, a [`TaskDefinition`] plus warnings, or every problem found.
//!
//! The text is read into an order-preserving JSON tree (so problems can be reported in document
//! order and duplicate keys noticed), then walked by hand: each field is checked for type and range,
//! unknown fields become warnings, and the cross-field rules (unique names, dependencies, cycles,
//! volumes, host ports) run once the whole document has been read. Nothing stops at the first
//! problem. At the end, problems are sorted by where their path sits in the document.
//!
//! Submodules: `json` (the tree), `rules` (field tables, name rules, numeric bounds), `cross`
//! (cross-field checks); the per-object walkers are here.

use crate::problem::{Invalid, Parsed, Problem};
use crate::types::{
    Condition, ContainerDefinition, Dependency, DockerVolumeConfiguration, EfsVolumeConfiguration,
    EnvVar, HealthCheck, LogConfiguration, LogDriver, MountPoint, NetworkMode, PortMapping,
    Protocol, TaskDefinition, Ulimit, Volume, VolumeFrom, VolumeKind, VolumeScope,
};
use json::{Json, describe, has_field, is_empty_value, quote};
use rules::*;
use std::collections::{BTreeMap, HashMap, HashSet};

mod cross;
mod json;
mod rules;

/// Parses and validates a task definition: either a bare definition or the
/// `{"taskDefinition": {...}}` wrapper printed by `aws ecs describe-task-definition`.
///
/// On success the warnings list fields that were ignored. On failure every problem found is
/// returned, in document order, each with the JSON path of the offending field.
pub fn parse(input: &str) -> Result<Parsed, Invalid> {
    let input = input.strip_prefix('\u{feff}').unwrap_or(input);
    if input.trim().is_empty() {
        return Err(single(
            "the input is empty; expected a JSON task definition",
        ));
    }
    let doc: Json = match serde_json::from_str(input) {
        Ok(doc) => doc,
        Err(err) => return Err(single(&json_error(&err))),
    };
    let mut checker = Checker::default();
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
    match std::str::from_utf8(input) {
        Ok(text) => parse(text),
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

/// serde_json's message, with the position written as "line L, column C".
fn json_error(err: &serde_json::Error) -> String {
    let full = err.to_string();
    let suffix = format!(" at line {} column {}", err.line(), err.column());
    let what = full.strip_suffix(&suffix).unwrap_or(&full);
    format!(
        "invalid JSON at line {}, column {}: {what}",
        err.line(),
        err.column()
    )
}

// ---------------------------------------------------------------------------------------------
// Paths.

/// `base.key`, or `base["key"]` when the key is not a plain identifier.
fn key_path(base: &str, key: &str) -> String {
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

fn index_path(base: &str, i: usize) -> String {
    format!("{base}[{i}]")
}

/// The path one level up (`a.b[2]` → `a.b` → `a` → ``). Approximate for quoted keys containing
/// brackets or dots; used only to order problems.
fn parent_path(path: &str) -> Option<&str> {
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

// ---------------------------------------------------------------------------------------------
// The checker: walks the tree, collects problems.

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

#[derive(Default)]
struct Checker {
    errors: Vec<Found>,
    warnings: Vec<Found>,
    /// Path → position in the document (indexes from the root), for sorting problems.
    positions: HashMap<String, Vec<usize>>,
}

/// One present, known field of an object.
struct Field<'j> {
    key: &'j str,
    value: &'j Json,
    path: String,
}

/// What the cross-field checks need to know about a container.
struct ContainerInfo {
    path: String,
    name: Option<String>,
    /// True when absent or not a boolean (so a type error does not also cause "no essential").
    essential: bool,
    /// A `healthCheck` field is present (valid or not).
    has_health_check: bool,
    depends_on: Vec<DependencyInfo>,
    /// (path of the mount point, sourceVolume)
    mounts: Vec<(String, String)>,
    /// (path of the entry, sourceContainer)
    volumes_from: Vec<(String, String)>,
    port_mappings_path: Option<String>,
    ports: Vec<PortInfo>,
    hostname_path: Option<String>,
}

struct DependencyInfo {
    path: String,
    container_name: Option<String>,
    condition: Option<Condition>,
}

struct PortInfo {
    path: String,
    container_port: Option<u16>,
    host_port: Option<u16>,
    protocol: Protocol,
}

struct VolumeInfo {
    path: String,
    name: Option<String>,
}

impl Checker {
    fn error(&mut self, path: impl Into<String>, message: impl Into<String>) {
        self.errors.push(Found {
            anchor: Anchor::Start,
            problem: Problem::new(path, message),
        });
    }

    /// An error about a whole object or array, listed after the problems inside it.
    fn error_after(&mut self, path: impl Into<String>, message: impl Into<String>) {
        self.errors.push(Found {
            anchor: Anchor::End,
            problem: Problem::new(path, message),
        });
    }

    fn warn(&mut self, path: impl Into<String>, message: impl Into<String>) {
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
    fn finish(self) -> (Vec<Problem>, Vec<Problem>) {
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

    fn type_error(&mut self, path: &str, expected: &str, found: &Json) {
        self.error(
            path,
            format!("expected {expected}, found {}", describe(found)),
        );
    }

    fn object<'j>(&mut self, path: &str, v: &'j Json) -> Option<&'j [(String, Json)]> {
        match v {
            Json::Object(fields) => Some(fields),
            other => {
                self.type_error(path, "an object", other);
                None
            }
        }
    }

    /// The elements of an array with their paths, each marked in the document.
    fn array<'j>(&mut self, path: &str, v: &'j Json) -> Option<Vec<(&'j Json, String)>> {
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

    /// The present, known fields of an object in document order. Reports duplicate keys, warns
    /// about unknown and ignored fields, reports unsupported ones. Null values count as absent.
    fn fields<'j>(
        &mut self,
        path: &str,
        object: &'j [(String, Json)],
        schema: &Schema,
    ) -> Vec<Field<'j>> {
        let mut seen: HashSet<&str> = HashSet::new();
        let mut out = Vec::new();
        for (index, (key, value)) in object.iter().enumerate() {
            let p = key_path(path, key);
            self.mark(path, index, &p);
            if !seen.insert(key.as_str()) {
                self.error(
                    p,
                    "duplicate field: it appears more than once in this object; keep one",
                );
                continue;
            }
            let key = key.as_str();
            if schema.known.contains(&key) {
                if !matches!(value, Json::Null) {
                    out.push(Field {
                        key,
                        value,
                        path: p,
                    });
                }
            } else if schema.unsupported.contains(&key) {
                if !is_empty_value(value) {
                    self.error(p, format!("{key} is not supported by berth"));
                }
            } else if schema.ignored.contains(&key) {
                self.warn(p, "not used by berth, ignored");
            } else if !schema.quiet.contains(&key) {
                self.warn(p, unknown_field_message(key, schema.known));
            }
        }
        out
    }

    fn string<'j>(&mut self, path: &str, v: &'j Json) -> Option<&'j str> {
        match v {
            Json::String(s) => Some(s),
            other => {
                self.type_error(path, "a string", other);
                None
            }
        }
    }

    fn non_empty_string(&mut self, path: &str, v: &Json) -> Option<String> {
        let s = self.string(path, v)?;
        if s.is_empty() {
            self.error(path, "must not be empty");
            return None;
        }
        Some(s.to_owned())
    }

    fn absolute_path(&mut self, path: &str, v: &Json) -> Option<String> {
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

    fn boolean(&mut self, path: &str, v: &Json) -> Option<bool> {
        match v {
            Json::Bool(b) => Some(*b),
            other => {
                self.type_error(path, "a boolean", other);
                None
            }
        }
    }

    /// An integer (a JSON number without a fractional part; `512.0` counts).
    fn integer(&mut self, path: &str, v: &Json) -> Option<i128> {
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

    fn bounded(&mut self, path: &str, v: &Json, b: Bounds) -> Option<u64> {
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

    fn bounded_u32(&mut self, path: &str, v: &Json, b: Bounds) -> Option<u32> {
        self.bounded(path, v, b).and_then(|n| u32::try_from(n).ok())
    }

    fn bounded_u16(&mut self, path: &str, v: &Json, b: Bounds) -> Option<u16> {
        self.bounded(path, v, b).and_then(|n| u16::try_from(n).ok())
    }

    /// An array of strings; None when it is not one (every bad element reported).
    fn string_list(&mut self, path: &str, v: &Json) -> Option<Vec<String>> {
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
    fn string_map(&mut self, path: &str, v: &Json) -> Option<BTreeMap<String, String>> {
        let object = self.object(path, v)?;
        let mut out = BTreeMap::new();
        let mut ok = true;
        for (index, (key, value)) in object.iter().enumerate() {
            let p = key_path(path, key);
            self.mark(path, index, &p);
            match value {
                _ if out.contains_key(key) => {
                    self.error(
                        p,
                        "duplicate key: it appears more than once in this object; keep one",
                    );
                    ok = false;
                }
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

    // --- the document ----------------------------------------------------------------------

    fn document(&mut self, doc: &Json) -> TaskDefinition {
        self.positions.insert(String::new(), Vec::new());
        let Json::Object(top) = doc else {
            self.error(
                "",
                format!(
                    "expected a task definition (a JSON object), found {}",
                    describe(doc)
                ),
            );
            return empty_task();
        };
        let Some((_, inner)) = top.iter().find(|(k, _)| k == "taskDefinition") else {
            return self.task("", top);
        };
        // The describe-task-definition wrapper: {"taskDefinition": {...}, "tags": [...]}.
        self.fields("", top, &WRAPPER);
        match inner {
            Json::Object(fields) => self.task("taskDefinition", fields),
            other => {
                self.type_error("taskDefinition", "a task definition object", other);
                empty_task()
            }
        }
    }

    fn task(&mut self, path: &str, object: &[(String, Json)]) -> TaskDefinition {
        let mut def = empty_task();
        let mut family_seen = false;
        let mut containers: Option<Vec<(ContainerDefinition, ContainerInfo)>> = None;
        let mut volumes: Option<Vec<(Volume, VolumeInfo)>> = Some(Vec::new());
        // None when networkMode is invalid: the checks that depend on it are skipped.
        let mut network = Some(NetworkMode::Bridge);
        for f in self.fields(path, object, &TASK) {
            let p = f.path.as_str();
            match f.key {
                "family" => {
                    family_seen = true;
                    if let Some(s) = self.string(p, f.value) {
                        if !valid_name(s) {
                            self.error(
                                p,
                                format!("{} is not a valid family name; {NAME_RULE}", quote(s)),
                            );
                        }
                        def.family = s.to_owned();
                    }
                }
                "revision" => {
                    if let Some(n) = self.bounded_u32(p, f.value, REVISION) {
                        def.revision = n;
                    }
                }
                "containerDefinitions" => {
                    containers = self.array(p, f.value).map(|items| {
                        if items.is_empty() {
                            self.error(p, "must list at least one container");
                        }
                        items
                            .iter()
                            .map(|(item, ip)| self.container(ip, item))
                            .collect()
                    });
                }
                "volumes" => {
                    volumes = self.array(p, f.value).map(|items| {
                        items
                            .iter()
                            .map(|(item, ip)| self.volume(ip, item))
                            .collect()
                    });
                }
                "networkMode" => {
                    network = self.string(p, f.value).and_then(|s| match s {
                        "bridge" => Some(NetworkMode::Bridge),
                        "host" => Some(NetworkMode::Host),
                        "none" => Some(NetworkMode::None),
                        "awsvpc" => {
                            self.error(
                                p,
                                "awsvpc network mode is not supported by berth; use bridge, host or none",
                            );
                            None
                        }
                        other => {
                            self.error(
                                p,
                                format!(
                                    "unknown network mode {}; use bridge, host or none",
                                    quote(other)
                                ),
                            );
                            None
                        }
                    });
                    if let Some(mode) = network {
                        def.network_mode = mode;
                    }
                }
                "cpu" => def.cpu = self.task_amount(p, f.value, Amount::Cpu),
                "memory" => def.memory = self.task_amount(p, f.value, Amount::Memory),
                _ => {} // `fields` only returns keys listed in TASK.known.
            }
        }
        if !family_seen {
            self.error(key_path(path, "family"), MISSING);
        }
        let containers_path = key_path(path, "containerDefinitions");
        if !has_field(object, "containerDefinitions") {
            self.error(&containers_path, MISSING);
        }
        if let Some(list) = &containers {
            self.cross_checks(&containers_path, list, volumes.as_deref(), network);
        }
        if let Some(list) = volumes {
            self.duplicate_volumes(&list);
            def.volumes = list.into_iter().map(|(v, _)| v).collect();
        }
        def.container_definitions = containers
            .unwrap_or_default()
            .into_iter()
            .map(|(c, _)| c)
            .collect();
        def
    }

    /// Task-level `cpu` / `memory`: a number or a string as ECS writes them; kept as a string.
    fn task_amount(&mut self, path: &str, v: &Json, amount: Amount) -> Option<String> {
        match v {
            Json::Number(_) => self
                .bounded(path, v, Bounds::new(0, u64::MAX, ""))
                .map(|n| n.to_string()),
            Json::String(s) => {
                let text = s.trim();
                if text.starts_with('-') {
                    self.error(path, format!("must not be negative, found {}", quote(s)));
                    return None;
                }
                let lower = text.to_ascii_lowercase();
                let ok = match amount {
                    Amount::Cpu => {
                        is_integer(text)
                            || lower
                                .strip_suffix("vcpu")
                                .is_some_and(|n| is_decimal(n.trim_end()))
                    }
                    Amount::Memory => {
                        is_integer(text)
                            || lower
                                .strip_suffix("gb")
                                .is_some_and(|n| is_decimal(n.trim_end()))
                    }
                };
                if !ok {
                    let hint = match amount {
                        Amount::Cpu => {
                            "write CPU units such as \"256\" or vCPUs such as \"0.5 vCPU\""
                        }
                        Amount::Memory => "write MiB such as \"512\" or GB such as \"1 GB\"",
                    };
                    self.error(
                        path,
                        format!("{} is not a {} amount; {hint}", quote(s), amount.as_str()),
                    );
                    return None;
                }
                Some(s.clone())
            }
            other => {
                self.type_error(path, "a string or a number", other);
                None
            }
        }
    }

    // --- containers ------------------------------------------------------------------------

    fn container(&mut self, path: &str, v: &Json) -> (ContainerDefinition, ContainerInfo) {
        let mut def = empty_container();
        let mut info = ContainerInfo {
            path: path.to_owned(),
            name: None,
            essential: true,
            has_health_check: false,
            depends_on: Vec::new(),
            mounts: Vec::new(),
            volumes_from: Vec::new(),
            port_mappings_path: None,
            ports: Vec::new(),
            hostname_path: None,
        };
        let Some(object) = self.object(path, v) else {
            return (def, info);
        };
        let (mut name_seen, mut image_seen) = (false, false);
        let mut memory: Option<(u64, String)> = None;
        let mut reservation: Option<(u64, String)> = None;
        for f in self.fields(path, object, &CONTAINER) {
            let (p, v) = (f.path.as_str(), f.value);
            match f.key {
                "name" => {
                    name_seen = true;
                    if let Some(s) = self.string(p, v) {
                        if !valid_name(s) {
                            self.error(
                                p,
                                format!("{} is not a valid container name; {NAME_RULE}", quote(s)),
                            );
                        }
                        def.name = s.to_owned();
                        info.name = Some(s.to_owned());
                    }
                }
                "image" => {
                    image_seen = true;
                    if let Some(s) = self.string(p, v) {
                        if s.is_empty() {
                            self.error(p, "must not be empty");
                        } else if s.chars().any(char::is_whitespace) {
                            self.error(
                                p,
                                format!(
                                    "{} is not an image reference: it contains whitespace",
                                    quote(s)
                                ),
                            );
                        }
                        def.image = s.to_owned();
                    }
                }
                "essential" => {
                    if let Some(b) = self.boolean(p, v) {
                        def.essential = b;
                        info.essential = b;
                    }
                }
                "command" => def.command = self.string_list(p, v),
                "entryPoint" => def.entry_point = self.string_list(p, v),
                "environment" => def.environment = self.environment(p, v),
                "workingDirectory" => def.working_directory = self.absolute_path(p, v),
                "user" => def.user = self.non_empty_string(p, v),
                "dependsOn" => def.depends_on = self.depends_on(p, v, &mut info),
                "healthCheck" => {
                    info.has_health_check = true;
                    def.health_check = self.health_check(p, v);
                }
                "mountPoints" => def.mount_points = self.mount_points(p, v, &mut info),
                "volumesFrom" => def.volumes_from = self.volumes_from(p, v, &mut info),
                "portMappings" => {
                    info.port_mappings_path = Some(p.to_owned());
                    def.port_mappings = self.port_mappings(p, v, &mut info);
                }
                "cpu" => def.cpu = self.bounded_u32(p, v, CONTAINER_CPU),
                "memory" => {
                    def.memory = self.bounded(p, v, MEMORY);
                    memory = def.memory.map(|n| (n, p.to_owned()));
                }
                "memoryReservation" => {
                    def.memory_reservation = self.bounded(p, v, MEMORY_RESERVATION);
                    reservation = def.memory_reservation.map(|n| (n, p.to_owned()));
                }
                "stopTimeout" => def.stop_timeout = self.bounded_u32(p, v, TIMEOUT),
                "startTimeout" => def.start_timeout = self.bounded_u32(p, v, TIMEOUT),
                "dockerLabels" => def.docker_labels = self.string_map(p, v).unwrap_or_default(),
                "readonlyRootFilesystem" => {
                    def.readonly_root_filesystem = self.boolean(p, v).unwrap_or(false);
                }
                "privileged" => def.privileged = self.boolean(p, v).unwrap_or(false),
                "hostname" => {
                    info.hostname_path = Some(p.to_owned());
                    if let Some(s) = self.non_empty_string(p, v) {
                        if s.chars().any(char::is_whitespace) || s.len() > 253 {
                            self.error(p, format!("{} is not a valid hostname", quote(&s)));
                        }
                        def.hostname = Some(s);
                    }
                }
                "ulimits" => def.ulimits = self.ulimits(p, v),
                "logConfiguration" => def.log_configuration = self.log_configuration(p, v),
                _ => {} // `fields` only returns keys listed in CONTAINER.known.
            }
        }
        if !name_seen {
            self.error(key_path(path, "name"), MISSING);
        }
        if !image_seen {
            self.error(key_path(path, "image"), MISSING);
        }
        if let (Some((hard, _)), Some((soft, soft_path))) = (&memory, &reservation)
            && soft > hard
        {
            self.error(
                soft_path.as_str(),
                format!("must not exceed memory ({hard} MiB), found {soft}"),
            );
        }
        (def, info)
    }

    fn environment(&mut self, path: &str, v: &Json) -> Vec<EnvVar> {
        let mut out = Vec::new();
        for (item, p) in self.array(path, v).unwrap_or_default() {
            let Some(object) = self.object(&p, item) else {
                continue;
            };
            let mut name = None;
            let mut value = String::new();
            for f in self.fields(&p, object, &ENV_VAR) {
                match f.key {
                    "name" => {
                        if let Some(s) = self.non_empty_string(&f.path, f.value) {
                            if s.contains('=') {
                                self.error(
                                    &f.path,
                                    format!("{} must not contain \"=\"", quote(&s)),
                                );
                            }
                            name = Some(s);
                        }
                    }
                    "value" => {
                        if let Some(s) = self.string(&f.path, f.value) {
                            value = s.to_owned();
                        }
                    }
                    _ => {}
                }
            }
            if !has_field(object, "name") {
                self.error(key_path(&p, "name"), MISSING);
            }
            if let Some(name) = name {
                out.push(EnvVar { name, value });
            }
        }
        out
    }

    fn depends_on(&mut self, path: &str, v: &Json, info: &mut ContainerInfo) -> Vec<Dependency> {
        let mut out = Vec::new();
        for (item, p) in self.array(path, v).unwrap_or_default() {
            let Some(object) = self.object(&p, item) else {
                continue;
            };
            let mut dep = DependencyInfo {
                path: p.clone(),
                container_name: None,
                condition: None,
            };
            let (mut name_seen, mut condition_seen) = (false, false);
            for f in self.fields(&p, object, &DEPENDENCY) {
                match f.key {
                    "containerName" => {
                        name_seen = true;
                        dep.container_name = self.string(&f.path, f.value).map(str::to_owned);
                    }
                    "condition" => {
                        condition_seen = true;
                        dep.condition = self.condition(&f.path, f.value);
                    }
                    _ => {}
                }
            }
            if !name_seen {
                self.error(key_path(&p, "containerName"), MISSING);
            }
            if !condition_seen {
                self.error(
                    key_path(&p, "condition"),
                    "missing required field; use START, COMPLETE, SUCCESS or HEALTHY",
                );
            }
            if let (Some(name), Some(condition)) = (&dep.container_name, dep.condition) {
                out.push(Dependency {
                    container_name: name.clone(),
                    condition,
                });
            }
            info.depends_on.push(dep);
        }
        out
    }

    fn condition(&mut self, path: &str, v: &Json) -> Option<Condition> {
        let s = self.string(path, v)?;
        if let Some(c) = Condition::ALL.into_iter().find(|c| c.as_str() == s) {
            return Some(c);
        }
        let upper = s.to_ascii_uppercase();
        let message = match Condition::ALL.into_iter().find(|c| c.as_str() == upper) {
            Some(c) => format!(
                "unknown condition {}; conditions are upper case: {}",
                quote(s),
                c.as_str()
            ),
            None => format!(
                "unknown condition {}; use START, COMPLETE, SUCCESS or HEALTHY",
                quote(s)
            ),
        };
        self.error(path, message);
        None
    }

    fn health_check(&mut self, path: &str, v: &Json) -> Option<HealthCheck> {
        let object = self.object(path, v)?;
        let mut hc = HealthCheck {
            command: Vec::new(),
            interval: 30,
            timeout: 5,
            retries: 3,
            start_period: 0,
        };
        let mut ok = true;
        let mut command_seen = false;
        for f in self.fields(path, object, &HEALTH_CHECK) {
            let (p, v) = (f.path.as_str(), f.value);
            let slot = match f.key {
                "command" => {
                    command_seen = true;
                    match self.string_list(p, v) {
                        Some(cmd) if self.health_command(p, &cmd) => hc.command = cmd,
                        _ => ok = false,
                    }
                    continue;
                }
                "interval" => (&mut hc.interval, HC_INTERVAL),
                "timeout" => (&mut hc.timeout, HC_TIMEOUT),
                "retries" => (&mut hc.retries, HC_RETRIES),
                "startPeriod" => (&mut hc.start_period, HC_START_PERIOD),
                _ => continue,
            };
            match self.bounded_u32(p, v, slot.1) {
                Some(n) => *slot.0 = n,
                None => ok = false,
            }
        }
        if !command_seen {
            self.error(
                key_path(path, "command"),
                "missing required field; for example [\"CMD-SHELL\", \"curl -f http://localhost/ || exit 1\"]",
            );
            ok = false;
        }
        ok.then_some(hc)
    }

    /// Checks `["CMD-SHELL", "..."]` / `["CMD", "prog", ...]`; true when fine.
    fn health_command(&mut self, path: &str, cmd: &[String]) -> bool {
        let Some((first, rest)) = cmd.split_first() else {
            self.error(
                path,
                "must not be empty; use [\"CMD-SHELL\", \"shell command\"] or [\"CMD\", \"program\", \"arg\"...]",
            );
            return false;
        };
        match first.as_str() {
            "CMD-SHELL" if rest.len() != 1 => {
                self.error(
                    path,
                    format!(
                        "\"CMD-SHELL\" must be followed by exactly one string (the shell command), found {}",
                        rest.len()
                    ),
                );
                false
            }
            "CMD" if rest.is_empty() => {
                self.error(
                    path,
                    "\"CMD\" must be followed by the program to run and its arguments",
                );
                false
            }
            "CMD" | "CMD-SHELL" => {
                if rest.iter().all(String::is_empty) {
                    self.error(index_path(path, 1), "must not be empty");
                    return false;
                }
                true
            }
            other => {
                self.error(
                    index_path(path, 0),
                    format!("must be \"CMD\" or \"CMD-SHELL\", found {}", quote(other)),
                );
                false
            }
        }
    }

    fn mount_points(&mut self, path: &str, v: &Json, info: &mut ContainerInfo) -> Vec<MountPoint> {
        let mut out = Vec::new();
        let mut targets: HashMap<String, String> = HashMap::new();
        for (item, p) in self.array(path, v).unwrap_or_default() {
            let Some(object) = self.object(&p, item) else {
                continue;
            };
            let (mut source, mut target, mut read_only) = (None, None, false);
            let (mut source_seen, mut target_seen) = (false, false);
            for f in self.fields(&p, object, &MOUNT_POINT) {
                match f.key {
                    "sourceVolume" => {
                        source_seen = true;
                        source = self.string(&f.path, f.value).map(str::to_owned);
                    }
                    "containerPath" => {
                        target_seen = true;
                        target = self.absolute_path(&f.path, f.value);
                        if let Some(t) = &target {
                            let normal = t.trim_end_matches('/').to_owned();
                            if let Some(first) = targets.get(&normal) {
                                self.error(
                                    &f.path,
                                    format!("{} is already mounted by {first}", quote(t)),
                                );
                            } else {
                                targets.insert(normal, p.clone());
                            }
                        }
                    }
                    "readOnly" => read_only = self.boolean(&f.path, f.value).unwrap_or(false),
                    _ => {}
                }
            }
            if !source_seen {
                self.error(key_path(&p, "sourceVolume"), MISSING);
            }
            if !target_seen {
                self.error(key_path(&p, "containerPath"), MISSING);
            }
            if let Some(s) = &source {
                info.mounts.push((p.clone(), s.clone()));
            }
            if let (Some(source_volume), Some(container_path)) = (source, target) {
                out.push(MountPoint {
                    source_volume,
                    container_path,
                    read_only,
                });
            }
        }
        out
    }

    fn volumes_from(&mut self, path: &str, v: &Json, info: &mut ContainerInfo) -> Vec<VolumeFrom> {
        let mut out = Vec::new();
        for (item, p) in self.array(path, v).unwrap_or_default() {
            let Some(object) = self.object(&p, item) else {
                continue;
            };
            let (mut source, mut read_only, mut source_seen) = (None, false, false);
            for f in self.fields(&p, object, &VOLUME_FROM) {
                match f.key {
                    "sourceContainer" => {
                        source_seen = true;
                        source = self.string(&f.path, f.value).map(str::to_owned);
                    }
                    "readOnly" => read_only = self.boolean(&f.path, f.value).unwrap_or(false),
                    _ => {}
                }
            }
            if !source_seen {
                self.error(key_path(&p, "sourceContainer"), MISSING);
            }
            if let Some(source_container) = source {
                info.volumes_from
                    .push((p.clone(), source_container.clone()));
                out.push(VolumeFrom {
                    source_container,
                    read_only,
                });
            }
        }
        out
    }

    fn port_mappings(
        &mut self,
        path: &str,
        v: &Json,
        info: &mut ContainerInfo,
    ) -> Vec<PortMapping> {
        let mut out = Vec::new();
        for (item, p) in self.array(path, v).unwrap_or_default() {
            let Some(object) = self.object(&p, item) else {
                continue;
            };
            let mut port = PortInfo {
                path: p.clone(),
                container_port: None,
                host_port: None,
                protocol: Protocol::Tcp,
            };
            let mut container_port_seen = false;
            for f in self.fields(&p, object, &PORT_MAPPING) {
                match f.key {
                    "containerPort" => {
                        container_port_seen = true;
                        port.container_port = self.bounded_u16(&f.path, f.value, PORT);
                    }
                    "hostPort" => port.host_port = self.bounded_u16(&f.path, f.value, HOST_PORT),
                    "protocol" => {
                        port.protocol = match self.string(&f.path, f.value) {
                            Some("tcp") | None => Protocol::Tcp,
                            Some("udp") => Protocol::Udp,
                            Some(other) => {
                                self.error(
                                    &f.path,
                                    format!("unknown protocol {}; use tcp or udp", quote(other)),
                                );
                                Protocol::Tcp
                            }
                        };
                    }
                    _ => {}
                }
            }
            if !container_port_seen {
                self.error(key_path(&p, "containerPort"), MISSING);
            }
            if let Some(container_port) = port.container_port {
                out.push(PortMapping {
                    container_port,
                    host_port: port.host_port,
                    protocol: port.protocol,
                });
            }
            info.ports.push(port);
        }
        out
    }

    fn ulimits(&mut self, path: &str, v: &Json) -> Vec<Ulimit> {
        let mut out = Vec::new();
        let mut names: HashMap<String, String> = HashMap::new();
        for (item, p) in self.array(path, v).unwrap_or_default() {
            let Some(object) = self.object(&p, item) else {
                continue;
            };
            let (mut name, mut soft, mut hard) = (None, None, None);
            let mut soft_path = key_path(&p, "softLimit");
            for f in self.fields(&p, object, &ULIMIT) {
                match f.key {
                    "name" => {
                        if let Some(s) = self.string(&f.path, f.value) {
                            if !ULIMIT_NAMES.contains(&s) {
                                self.error(
                                    &f.path,
                                    format!(
                                        "unknown ulimit {}; use one of {}",
                                        quote(s),
                                        ULIMIT_NAMES.join(", ")
                                    ),
                                );
                            } else if let Some(first) = names.get(s) {
                                self.error(
                                    &f.path,
                                    format!("duplicate ulimit {} (also {first})", quote(s)),
                                );
                            } else {
                                names.insert(s.to_owned(), p.clone());
                            }
                            name = Some(s.to_owned());
                        }
                    }
                    "softLimit" => {
                        soft = self.limit(&f.path, f.value);
                        soft_path = f.path.clone();
                    }
                    "hardLimit" => hard = self.limit(&f.path, f.value),
                    _ => {}
                }
            }
            for field in ["name", "softLimit", "hardLimit"] {
                if !has_field(object, field) {
                    self.error(key_path(&p, field), MISSING);
                }
            }
            if let (Some(s), Some(h)) = (soft, hard) {
                // -1 means unlimited.
                let above = |a: i64, b: i64| b != -1 && (a == -1 || a > b);
                if above(s, h) {
                    self.error(
                        soft_path,
                        format!("softLimit ({s}) must not exceed hardLimit ({h})"),
                    );
                }
                if let Some(name) = name {
                    out.push(Ulimit {
                        name,
                        soft_limit: s,
                        hard_limit: h,
                    });
                }
            }
        }
        out
    }

    /// A ulimit value: -1 (unlimited) or a non-negative integer.
    fn limit(&mut self, path: &str, v: &Json) -> Option<i64> {
        let n = self.integer(path, v)?;
        if n < -1 {
            self.error(
                path,
                format!("must be -1 (unlimited) or not negative, found {n}"),
            );
            return None;
        }
        match i64::try_from(n) {
            Ok(n) => Some(n),
            Err(_) => {
                self.error(path, format!("must be at most {}, found {n}", i64::MAX));
                None
            }
        }
    }

    fn log_configuration(&mut self, path: &str, v: &Json) -> Option<LogConfiguration> {
        let object = self.object(path, v)?;
        let (mut driver, mut options, mut driver_seen) = (None, Some(BTreeMap::new()), false);
        for f in self.fields(path, object, &LOG_CONFIGURATION) {
            match f.key {
                "logDriver" => {
                    driver_seen = true;
                    driver = match self.string(&f.path, f.value) {
                        Some("json-file") => Some(LogDriver::JsonFile),
                        Some("local") => Some(LogDriver::Local),
                        Some("none") => Some(LogDriver::None),
                        Some(other) => {
                            self.error(
                                &f.path,
                                format!(
                                    "log driver {} is not supported by berth; use json-file, local or none",
                                    quote(other)
                                ),
                            );
                            None
                        }
                        None => None,
                    };
                }
                "options" => options = self.string_map(&f.path, f.value),
                _ => {}
            }
        }
        if !driver_seen {
            self.error(
                key_path(path, "logDriver"),
                "missing required field; use json-file, local or none",
            );
        }
        Some(LogConfiguration {
            log_driver: driver?,
            options: options?,
        })
    }

    // --- volumes ---------------------------------------------------------------------------

    fn volume(&mut self, path: &str, v: &Json) -> (Volume, VolumeInfo) {
        let mut volume = Volume {
            name: String::new(),
            kind: VolumeKind::Scratch,
        };
        let mut info = VolumeInfo {
            path: path.to_owned(),
            name: None,
        };
        let Some(object) = self.object(path, v) else {
            return (volume, info);
        };
        let mut name_seen = false;
        let mut kind_key: Option<&str> = None;
        for f in self.fields(path, object, &VOLUME) {
            let (p, v) = (f.path.as_str(), f.value);
            if f.key == "name" {
                name_seen = true;
                if let Some(s) = self.string(p, v) {
                    if !valid_name(s) {
                        self.error(
                            p,
                            format!("{} is not a valid volume name; {NAME_RULE}", quote(s)),
                        );
                    }
                    volume.name = s.to_owned();
                    info.name = Some(s.to_owned());
                }
                continue;
            }
            if let Some(first) = kind_key {
                self.error(
                    p,
                    format!(
                        "a volume takes only one of host, dockerVolumeConfiguration or efsVolumeConfiguration; this one already has {first}"
                    ),
                );
                continue;
            }
            kind_key = Some(f.key);
            let kind = match f.key {
                "host" => self.host_volume(p, v),
                "dockerVolumeConfiguration" => self.docker_volume(p, v).map(VolumeKind::Docker),
                "efsVolumeConfiguration" => self.efs_volume(p, v).map(VolumeKind::Efs),
                _ => None,
            };
            if let Some(kind) = kind {
                volume.kind = kind;
            }
        }
        if !name_seen {
            self.error(key_path(path, "name"), MISSING);
        }
        (volume, info)
    }

    fn host_volume(&mut self, path: &str, v: &Json) -> Option<VolumeKind> {
        let object = self.object(path, v)?;
        let mut kind = VolumeKind::Scratch;
        for f in self.fields(path, object, &HOST_VOLUME) {
            if f.key == "sourcePath" {
                let source_path = self.absolute_path(&f.path, f.value)?;
                kind = VolumeKind::Host { source_path };
            }
        }
        Some(kind)
    }

    fn docker_volume(&mut self, path: &str, v: &Json) -> Option<DockerVolumeConfiguration> {
        let object = self.object(path, v)?;
        let mut config = DockerVolumeConfiguration {
            scope: VolumeScope::Task,
            autoprovision: false,
            driver: "local".to_owned(),
            driver_opts: BTreeMap::new(),
            labels: BTreeMap::new(),
        };
        let mut scope_ok = true;
        let mut autoprovision_path = None;
        for f in self.fields(path, object, &DOCKER_VOLUME) {
            let (p, v) = (f.path.as_str(), f.value);
            match f.key {
                "scope" => match self.string(p, v) {
                    Some("task") => config.scope = VolumeScope::Task,
                    Some("shared") => config.scope = VolumeScope::Shared,
                    Some(other) => {
                        self.error(
                            p,
                            format!("unknown scope {}; use task or shared", quote(other)),
                        );
                        scope_ok = false;
                    }
                    None => scope_ok = false,
                },
                "autoprovision" => {
                    config.autoprovision = self.boolean(p, v).unwrap_or(false);
                    autoprovision_path = Some(p.to_owned());
                }
                "driver" => {
                    if let Some(d) = self.non_empty_string(p, v) {
                        config.driver = d;
                    }
                }
                "driverOpts" => config.driver_opts = self.string_map(p, v).unwrap_or_default(),
                "labels" => config.labels = self.string_map(p, v).unwrap_or_default(),
                _ => {}
            }
        }
        if let Some(p) = autoprovision_path
            && config.autoprovision
            && scope_ok
            && config.scope != VolumeScope::Shared
        {
            self.error(
                p,
                "autoprovision only applies to \"scope\": \"shared\" volumes; task-scoped volumes are always created",
            );
        }
        Some(config)
    }

    fn efs_volume(&mut self, path: &str, v: &Json) -> Option<EfsVolumeConfiguration> {
        let object = self.object(path, v)?;
        let mut config = EfsVolumeConfiguration {
            file_system_id: String::new(),
            root_directory: "/".to_owned(),
            transit_encryption: false,
            access_point_id: None,
            iam: false,
        };
        let mut id_seen = false;
        let mut root_path = None;
        for f in self.fields(path, object, &EFS_VOLUME) {
            let (p, v) = (f.path.as_str(), f.value);
            match f.key {
                "fileSystemId" => {
                    id_seen = true;
                    if let Some(id) = self.non_empty_string(p, v) {
                        config.file_system_id = id;
                    }
                }
                "rootDirectory" => {
                    if let Some(root) = self.absolute_path(p, v) {
                        config.root_directory = root;
                        root_path = Some(p.to_owned());
                    }
                }
                "transitEncryption" => {
                    config.transit_encryption = self.enabled(p, v).unwrap_or(false);
                }
                "authorizationConfig" => {
                    let Some(auth) = self.object(p, v) else {
                        continue;
                    };
                    for g in self.fields(p, auth, &EFS_AUTHORIZATION) {
                        match g.key {
                            "accessPointId" => {
                                config.access_point_id = self.non_empty_string(&g.path, g.value);
                            }
                            "iam" => config.iam = self.enabled(&g.path, g.value).unwrap_or(false),
                            _ => {}
                        }
                    }
                }
                _ => {}
            }
        }
        if !id_seen {
            self.error(key_path(path, "fileSystemId"), MISSING);
        }
        if (config.access_point_id.is_some() || config.iam) && !config.transit_encryption {
            self.error(
                key_path(path, "transitEncryption"),
                "must be ENABLED when authorizationConfig uses an access point or IAM",
            );
        }
        if let Some(p) = root_path
            && config.access_point_id.is_some()
            && config.root_directory != "/"
        {
            self.error(
                p,
                "must be left out or \"/\" when authorizationConfig names an access point (the access point sets the root)",
            );
        }
        Some(config)
    }

    /// `"ENABLED"` / `"DISABLED"`.
    fn enabled(&mut self, path: &str, v: &Json) -> Option<bool> {
        match self.string(path, v)? {
            "ENABLED" => Some(true),
            "DISABLED" => Some(false),
            other => {
                self.error(
                    path,
                    format!("must be ENABLED or DISABLED, found {}", quote(other)),
                );
                None
            }
        }
    }
}

#[derive(Clone, Copy)]
enum Amount {
    Cpu,
    Memory,
}

impl Amount {
    fn as_str(self) -> &'static str {
        match self {
            Amount::Cpu => "CPU",
            Amount::Memory => "memory",
        }
    }
}

fn is_integer(s: &str) -> bool {
    !s.is_empty() && s.bytes().all(|b| b.is_ascii_digit())
}

fn is_decimal(s: &str) -> bool {
    match s.split_once('.') {
        Some((whole, fraction)) => is_integer(whole) && is_integer(fraction),
        None => is_integer(s),
    }
}

fn empty_task() -> TaskDefinition {
    TaskDefinition {
        family: String::new(),
        revision: 0,
        container_definitions: Vec::new(),
        volumes: Vec::new(),
        network_mode: NetworkMode::Bridge,
        cpu: None,
        memory: None,
    }
}

fn empty_container() -> ContainerDefinition {
    ContainerDefinition {
        name: String::new(),
        image: String::new(),
        essential: true,
        command: None,
        entry_point: None,
        environment: Vec::new(),
        working_directory: None,
        user: None,
        depends_on: Vec::new(),
        health_check: None,
        mount_points: Vec::new(),
        volumes_from: Vec::new(),
        port_mappings: Vec::new(),
        cpu: None,
        memory: None,
        memory_reservation: None,
        stop_timeout: None,
        start_timeout: None,
        docker_labels: BTreeMap::new(),
        readonly_root_filesystem: false,
        privileged: false,
        hostname: None,
        ulimits: Vec::new(),
        log_configuration: None,
    }
}

#[cfg(test)]
mod tests;
