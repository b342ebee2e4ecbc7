//! Fuzzing the validator: the parser never panics on arbitrary bytes, on arbitrary JSON built
//! from the field names berth knows, and on random mutations (field removed, value of another
//! type, duplicated key, emptied, ...) of valid definitions. `parse_bytes` must return `Ok` or `Err` with at least one problem, and
//! give the same answer twice.

use super::parse_bytes;
use super::rules::SCHEMAS;
use proptest::prelude::*;
use proptest::sample::Index;

/// The field names berth reads, refuses, passes over quietly or accepts as AWS-only, from the validator's own tables,
/// plus one it ignores with a warning: random objects then reach the validation code, not just
/// "unknown field".
fn keys() -> Vec<&'static str> {
    let mut keys: Vec<&'static str> = Vec::new();
    for schema in SCHEMAS {
        for &key in schema
            .known
            .iter()
            .chain(schema.unsupported)
            .chain(schema.quiet)
        {
            if !keys.contains(&key) {
                keys.push(key);
            }
        }
        for &(key, _) in schema.aws_only {
            if !keys.contains(&key) {
                keys.push(key);
            }
        }
    }
    keys.push("taskRoleArn");
    keys
}

/// Values that mean something somewhere.
const WORDS: &[&str] = &[
    "",
    "web",
    "db",
    "a",
    "START",
    "COMPLETE",
    "SUCCESS",
    "HEALTHY",
    "healthy",
    "CMD",
    "CMD-SHELL",
    "bridge",
    "host",
    "none",
    "awsvpc",
    "tcp",
    "udp",
    "json-file",
    "local",
    "awslogs",
    "task",
    "shared",
    "ENABLED",
    "DISABLED",
    "/data",
    "data",
    "nofile",
    "1 GB",
    "0.5 vCPU",
    "-1",
    "256",
    "é\u{0}\u{1b}",
    "a.b[\"c\"]",
];

/// A JSON value whose objects may repeat keys (serde_json's own Value cannot).
#[derive(Debug, Clone)]
enum J {
    Null,
    Bool(bool),
    Int(i64),
    UInt(u64),
    Float(f64),
    Str(String),
    Array(Vec<J>),
    Object(Vec<(String, J)>),
}

impl J {
    fn from_value(v: &serde_json::Value) -> J {
        use serde_json::Value;
        match v {
            Value::Null => J::Null,
            Value::Bool(b) => J::Bool(*b),
            Value::Number(n) => match (n.as_i64(), n.as_u64(), n.as_f64()) {
                (Some(i), _, _) => J::Int(i),
                (_, Some(u), _) => J::UInt(u),
                (_, _, f) => J::Float(f.unwrap_or(0.0)),
            },
            Value::String(s) => J::Str(s.clone()),
            Value::Array(a) => J::Array(a.iter().map(J::from_value).collect()),
            Value::Object(o) => J::Object(
                o.iter()
                    .map(|(k, v)| (k.clone(), J::from_value(v)))
                    .collect(),
            ),
        }
    }

    fn write(&self, out: &mut String) {
        let quote = |s: &str| serde_json::to_string(s).unwrap();
        match self {
            J::Null => out.push_str("null"),
            J::Bool(b) => out.push_str(&b.to_string()),
            J::Int(i) => out.push_str(&i.to_string()),
            J::UInt(u) => out.push_str(&u.to_string()),
            J::Float(f) => out.push_str(&serde_json::to_string(f).unwrap()),
            J::Str(s) => out.push_str(&quote(s)),
            J::Array(items) => {
                out.push('[');
                for (i, item) in items.iter().enumerate() {
                    if i > 0 {
                        out.push(',');
                    }
                    item.write(out);
                }
                out.push(']');
            }
            J::Object(fields) => {
                out.push('{');
                for (i, (k, v)) in fields.iter().enumerate() {
                    if i > 0 {
                        out.push(',');
                    }
                    out.push_str(&quote(k));
                    out.push(':');
                    v.write(out);
                }
                out.push('}');
            }
        }
    }

    fn text(&self) -> String {
        let mut out = String::new();
        self.write(&mut out);
        out
    }

    /// Paths to every value: each path is the list of child indexes from the root.
    fn paths(&self, prefix: &mut Vec<usize>, out: &mut Vec<Vec<usize>>) {
        out.push(prefix.clone());
        let children: Vec<&J> = match self {
            J::Array(items) => items.iter().collect(),
            J::Object(fields) => fields.iter().map(|(_, v)| v).collect(),
            _ => return,
        };
        for (i, child) in children.into_iter().enumerate() {
            prefix.push(i);
            child.paths(prefix, out);
            prefix.pop();
        }
    }

    /// The container holding the value at `path` (which must be non-empty) and its index there.
    fn parent_mut(&mut self, path: &[usize]) -> Option<(&mut J, usize)> {
        let (&last, init) = path.split_last()?;
        let mut node = self;
        for &i in init {
            node = match node {
                J::Array(items) => items.get_mut(i)?,
                J::Object(fields) => &mut fields.get_mut(i)?.1,
                _ => return None,
            };
        }
        Some((node, last))
    }
}

fn leaf() -> impl Strategy<Value = J> {
    prop_oneof![
        Just(J::Null),
        any::<bool>().prop_map(J::Bool),
        prop_oneof![
            -3i64..70_000,
            Just(i64::MIN),
            Just(i64::MAX),
            Just(-1),
            Just(0),
            Just(86_401),
            Just(4_194_305),
        ]
        .prop_map(J::Int),
        Just(J::UInt(u64::MAX)),
        prop_oneof![Just(0.5), Just(-0.0), Just(1e300), Just(512.0), Just(-1e20)]
            .prop_map(J::Float),
        prop::sample::select(WORDS).prop_map(|s| J::Str(s.to_owned())),
        "\\PC{0,12}".prop_map(J::Str),
    ]
}

fn key() -> impl Strategy<Value = String> {
    prop_oneof![
        4 => prop::sample::select(keys()).prop_map(str::to_owned),
        1 => "[a-zA-Z.\\[\\]\"]{0,8}",
    ]
}

fn json() -> impl Strategy<Value = J> {
    leaf().prop_recursive(6, 96, 8, |inner| {
        prop_oneof![
            prop::collection::vec(inner.clone(), 0..6).prop_map(J::Array),
            prop::collection::vec((key(), inner), 0..8).prop_map(J::Object),
        ]
    })
}

/// What to do to one value of a valid definition.
#[derive(Debug, Clone)]
enum Mutation {
    Remove,
    Replace(J),
    DuplicateKey,
    Empty,
}

fn mutation() -> impl Strategy<Value = Mutation> {
    prop_oneof![
        3 => Just(Mutation::Remove),
        4 => leaf().prop_map(Mutation::Replace),
        1 => json().prop_map(Mutation::Replace),
        1 => Just(Mutation::DuplicateKey),
        1 => Just(Mutation::Empty),
    ]
}

fn apply(doc: &mut J, path: &[usize], m: &Mutation) {
    let Some((parent, i)) = doc.parent_mut(path) else {
        return;
    };
    match (parent, m) {
        (J::Array(items), Mutation::Remove) if i < items.len() => {
            items.remove(i);
        }
        (J::Object(fields), Mutation::Remove) if i < fields.len() => {
            fields.remove(i);
        }
        (J::Array(items), Mutation::DuplicateKey) if i < items.len() => {
            let copy = items[i].clone();
            items.insert(i, copy);
        }
        (J::Object(fields), Mutation::DuplicateKey) if i < fields.len() => {
            let copy = fields[i].clone();
            fields.push(copy);
        }
        (parent, Mutation::Replace(_) | Mutation::Empty) => {
            let slot = match parent {
                J::Array(items) => items.get_mut(i),
                J::Object(fields) => fields.get_mut(i).map(|f| &mut f.1),
                _ => None,
            };
            if let Some(slot) = slot {
                *slot = match m {
                    Mutation::Replace(v) => v.clone(),
                    _ => match slot {
                        J::Array(_) => J::Array(Vec::new()),
                        J::Object(_) => J::Object(Vec::new()),
                        _ => J::Str(String::new()),
                    },
                };
            }
        }
        _ => {}
    }
}

const WEB_APP: &str = include_str!("../../../../examples/web-app.json");

/// A valid definition using nearly every field, so mutations reach every rule.
const KITCHEN_SINK: &str = r#"{
  "taskDefinition": {
    "family": "sink", "revision": 2, "networkMode": "bridge", "cpu": "1 vCPU", "memory": 512,
    "volumes": [
      {"name": "scratch", "host": {}},
      {"name": "hostdir", "host": {"sourcePath": "/srv/data"}},
      {"name": "dv", "dockerVolumeConfiguration": {"scope": "shared", "autoprovision": true,
        "driver": "local", "driverOpts": {"type": "tmpfs"}, "labels": {"a": "b"}}},
      {"name": "efs", "efsVolumeConfiguration": {"fileSystemId": "fs-1", "rootDirectory": "/",
        "transitEncryption": "ENABLED", "authorizationConfig": {"accessPointId": "fsap-1", "iam": "ENABLED"}}}
    ],
    "containerDefinitions": [
      {"name": "db", "image": "berth-test/busybox:latest", "essential": false,
       "healthCheck": {"command": ["CMD", "true"], "interval": 5, "timeout": 2, "retries": 1, "startPeriod": 0},
       "portMappings": [{"containerPort": 5432, "hostPort": 5432, "protocol": "tcp"}],
       "ulimits": [{"name": "nofile", "softLimit": 1024, "hardLimit": 2048}]},
      {"name": "init", "image": "berth-test/busybox:latest", "essential": false, "command": ["true"],
       "mountPoints": [{"sourceVolume": "scratch", "containerPath": "/scratch"}]},
      {"name": "web", "image": "berth-test/busybox:latest", "essential": true,
       "command": ["httpd", "-f"], "entryPoint": ["/bin/sh", "-c"],
       "environment": [{"name": "A", "value": "1"}], "workingDirectory": "/", "user": "root",
       "dependsOn": [{"containerName": "db", "condition": "HEALTHY"},
                     {"containerName": "init", "condition": "SUCCESS"}],
       "mountPoints": [{"sourceVolume": "hostdir", "containerPath": "/data", "readOnly": true},
                       {"sourceVolume": "dv", "containerPath": "/dv"},
                       {"sourceVolume": "efs", "containerPath": "/efs"}],
       "volumesFrom": [{"sourceContainer": "init", "readOnly": true}],
       "portMappings": [{"containerPort": 80, "hostPort": 8080}, {"containerPort": 53, "protocol": "udp"}],
       "cpu": 256, "memory": 128, "memoryReservation": 64, "stopTimeout": 10, "startTimeout": 30,
       "dockerLabels": {"com.example": "x"}, "readonlyRootFilesystem": true, "privileged": false,
       "hostname": "web", "logConfiguration": {"logDriver": "local", "options": {"max-size": "1m"}}}
    ]
  },
  "tags": []
}"#;

fn valid_documents() -> Vec<J> {
    [WEB_APP, KITCHEN_SINK]
        .iter()
        .map(|text| J::from_value(&serde_json::from_str(text).unwrap()))
        .collect()
}

/// Parses twice: never panics, problems are never empty, and the answer is deterministic.
fn check(bytes: &[u8]) {
    let first = parse_bytes(bytes);
    if let Err(invalid) = &first {
        assert!(!invalid.problems.is_empty());
        for p in &invalid.problems {
            assert!(!p.message.is_empty(), "empty message at {:?}", p.path);
        }
    }
    assert_eq!(parse_bytes(bytes), first);
}

#[test]
fn the_mutation_bases_are_valid() {
    for doc in valid_documents() {
        let text = doc.text();
        if let Err(invalid) = parse_bytes(text.as_bytes()) {
            panic!("{:#?}", invalid.problems);
        }
    }
}

proptest! {
    #![proptest_config(ProptestConfig::with_cases(400))]

    #[test]
    fn arbitrary_bytes(bytes in prop::collection::vec(any::<u8>(), 0..256)) {
        check(&bytes);
    }

    #[test]
    fn arbitrary_text(text in "\\PC{0,200}") {
        check(text.as_bytes());
    }

    #[test]
    fn arbitrary_json(doc in json()) {
        check(doc.text().as_bytes());
    }

    #[test]
    fn arbitrary_json_in_a_definition_shape(
        containers in prop::collection::vec(json(), 0..4),
        volumes in json(),
        wrap in any::<bool>(),
    ) {
        let def = J::Object(vec![
            ("family".into(), J::Str("f".into())),
            ("containerDefinitions".into(), J::Array(containers)),
            ("volumes".into(), volumes),
        ]);
        let doc = if wrap { J::Object(vec![("taskDefinition".into(), def)]) } else { def };
        check(doc.text().as_bytes());
    }

    #[test]
    fn mutated_valid_definitions(
        which in any::<bool>(),
        mutations in prop::collection::vec((any::<Index>(), mutation()), 1..5),
        cut in any::<Option<Index>>(),
    ) {
        let mut doc = valid_documents().swap_remove(usize::from(which));
        for (index, m) in &mutations {
            let mut paths = Vec::new();
            doc.paths(&mut Vec::new(), &mut paths);
            let path = index.get(&paths).clone();
            apply(&mut doc, &path, m);
        }
        let mut text = doc.text().into_bytes();
        // Sometimes also truncate the text, to exercise syntax errors at every position.
        if let Some(cut) = cut {
            let at = cut.index(text.len() + 1);
            text.truncate(at);
        }
        check(&text);
    }
}
