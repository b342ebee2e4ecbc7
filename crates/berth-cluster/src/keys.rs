//! The etcd key layout: every key berth writes, built and parsed in this one place (docs/cluster.md
//! lists them with their writers and leases).
//!
//! ```text
//! /berth/nodes/<node>            NodeRecord      the node agent, under the node's lease
//! /berth/drain/<node>            DrainRecord     `berth cluster drain` (no lease: outlives a restart)
//! /berth/tasks/<id>              TaskRecord      submit; the controller (placement, stop)
//! /berth/assign/<node>/<id>      Assignment      the controller, in the same transaction as the task
//! /berth/status/<node>/<id>      StatusRecord    the node agent, under the node's lease
//! /berth/services/<name>         ServiceRecord   `berth cluster service`
//! /berth/controller/             the controllers' election (etcd's election API)
//! ```
//!
//! Names (nodes, services) are checked by [`check_name`] before a key is built from them, so no
//! name can contain a `/` and reach another node's prefix. A node's own attributes (stored in its
//! record, matched by `memberOf` and `spread`) are checked by [`check_attribute`] with ECS's rules.

/// The root of every berth key.
pub const ROOT: &str = "/berth/";
/// Node records.
pub const NODES: &str = "/berth/nodes/";
/// Drain requests.
pub const DRAIN: &str = "/berth/drain/";
/// Desired tasks.
pub const TASKS: &str = "/berth/tasks/";
/// Assignments, by node.
pub const ASSIGN: &str = "/berth/assign/";
/// Reported statuses, by node.
pub const STATUS: &str = "/berth/status/";
/// Services.
pub const SERVICES: &str = "/berth/services/";
/// The controllers' election name.
pub const ELECTION: &str = "/berth/controller/";

/// The longest node or service name (ECS service names: up to 255 characters).
pub const MAX_NAME: usize = 255;

/// Checks a node or service name: 1 to 255 letters, digits, `-`, `_` or `.` (ECS's service name
/// rule with `.` added for host names), not `.` or `..`. `what` names it in the message.
pub fn check_name(what: &str, name: &str) -> Result<(), String> {
    if name.is_empty() || name.len() > MAX_NAME {
        return Err(format!(
            "{what} {name:?} must be 1 to {MAX_NAME} characters long"
        ));
    }
    if name == "." || name == ".." {
        return Err(format!("{what} {name:?} is not a name"));
    }
    if let Some(c) = name
        .chars()
        .find(|c| !(c.is_ascii_alphanumeric() || matches!(c, '-' | '_' | '.')))
    {
        return Err(format!(
            "{what} {name:?} contains {c:?}: use letters, digits, '-', '_' and '.' only"
        ));
    }
    Ok(())
}

/// The longest attribute name or value (ECS's limit).
pub const MAX_ATTRIBUTE: usize = 128;

/// Checks a node attribute a user gives (`--node-attribute KEY=VALUE`) with ECS's rules: the name
/// 1 to 128 letters, digits, `-`, `_`, `/`, `\` or `.`, not starting with `ecs.` (kept for the
/// built-in attributes, [`crate::node::builtin_attributes`]); the value 1 to 128 letters,
/// digits, `-`, `_`, `.`, `@`, `/`, `\`, `:` or inner spaces.
pub fn check_attribute(key: &str, value: &str) -> Result<(), String> {
    if key.is_empty()
        || key.len() > MAX_ATTRIBUTE
        || !key
            .chars()
            .all(|c| c.is_ascii_alphanumeric() || matches!(c, '-' | '_' | '/' | '\\' | '.'))
    {
        return Err(format!(
            "{key:?} is not an attribute name: 1 to 128 letters, digits, '-', '_', '/', '\\' or '.'"
        ));
    }
    if key.starts_with("ecs.") {
        return Err(format!(
            "{key:?}: the ecs. prefix is kept for the attributes berth sets itself"
        ));
    }
    if value.is_empty()
        || value.len() > MAX_ATTRIBUTE
        || value.starts_with(' ')
        || value.ends_with(' ')
        || !value.chars().all(|c| {
            c.is_ascii_alphanumeric() || matches!(c, '-' | '_' | '.' | '@' | '/' | '\\' | ':' | ' ')
        })
    {
        return Err(format!(
            "{value:?} is not an attribute value: 1 to 128 letters, digits, '-', '_', '.', '@', '/', '\\', ':' or inner spaces"
        ));
    }
    Ok(())
}

pub fn node(name: &str) -> String {
    format!("{NODES}{name}")
}
pub fn drain(name: &str) -> String {
    format!("{DRAIN}{name}")
}
pub fn task(id: &str) -> String {
    format!("{TASKS}{id}")
}
/// The assignment prefix of one node (what its agent watches), with the trailing `/`.
pub fn assign_prefix(node: &str) -> String {
    format!("{ASSIGN}{node}/")
}
pub fn assign(node: &str, id: &str) -> String {
    format!("{ASSIGN}{node}/{id}")
}
/// The status prefix of one node, with the trailing `/`.
pub fn status_prefix(node: &str) -> String {
    format!("{STATUS}{node}/")
}
pub fn status(node: &str, id: &str) -> String {
    format!("{STATUS}{node}/{id}")
}
pub fn service(name: &str) -> String {
    format!("{SERVICES}{name}")
}

/// The last segment of a key under `prefix` (a node name, task id or service name), None when the
/// key is not directly under it.
pub fn leaf<'a>(prefix: &str, key: &'a str) -> Option<&'a str> {
    let rest = key.strip_prefix(prefix)?;
    (!rest.is_empty() && !rest.contains('/')).then_some(rest)
}

/// `(node, task id)` of an `/berth/assign/<node>/<id>` or `/berth/status/<node>/<id>` key.
pub fn node_and_task<'a>(prefix: &str, key: &'a str) -> Option<(&'a str, &'a str)> {
    let rest = key.strip_prefix(prefix)?;
    let (node, id) = rest.split_once('/')?;
    (!node.is_empty() && !id.is_empty() && !id.contains('/')).then_some((node, id))
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn keys_round_trip() {
        assert_eq!(leaf(NODES, &node("n-1")), Some("n-1"));
        assert_eq!(leaf(TASKS, &task("abc")), Some("abc"));
        assert_eq!(
            node_and_task(ASSIGN, &assign("n-1", "abc")),
            Some(("n-1", "abc"))
        );
        assert_eq!(
            node_and_task(STATUS, &status("n.2", "x")),
            Some(("n.2", "x"))
        );
        assert_eq!(leaf(NODES, "/berth/nodes/a/b"), None);
        assert_eq!(leaf(NODES, "/berth/tasks/a"), None);
        assert_eq!(node_and_task(ASSIGN, "/berth/assign/n"), None);
        assert!(assign_prefix("n").ends_with('/'));
        // A node named like the prefix of another does not see its assignments.
        assert!(!assign("node-10", "t").starts_with(&assign_prefix("node-1")));
    }

    #[test]
    fn names_are_checked() {
        assert!(check_name("node", "ip-10-0-0-1.ec2").is_ok());
        for bad in ["", ".", "..", "a/b", "a b", "ü"] {
            let err = check_name("node", bad).unwrap_err();
            assert!(err.starts_with("node "), "{err}");
        }
        assert!(check_name("service", &"a".repeat(256)).is_err());
    }

    #[test]
    fn attributes_follow_ecs_rules() {
        for (k, v) in [
            ("zone", "eu-1a"),
            ("team/owner", "ops@example"),
            ("a.b_c-d\\e", "x:y/z w"),
            (&"k".repeat(128) as &str, &"v".repeat(128) as &str),
        ] {
            assert_eq!(check_attribute(k, v), Ok(()), "{k}={v}");
        }
        for (k, v, wanted) in [
            ("", "a", "\"\" is not an attribute name: 1 to 128 letters"),
            ("a b", "a", "\"a b\" is not an attribute name"),
            (&"k".repeat(129) as &str, "a", "is not an attribute name"),
            (
                "ecs.os-type",
                "linux",
                "\"ecs.os-type\": the ecs. prefix is kept for the attributes berth sets itself",
            ),
            (
                "zone",
                "",
                "\"\" is not an attribute value: 1 to 128 letters",
            ),
            ("zone", " a", "is not an attribute value"),
            ("zone", "a ", "is not an attribute value"),
            ("zone", "a=b", "\"a=b\" is not an attribute value"),
            (
                "zone",
                &"v".repeat(129) as &str,
                "is not an attribute value",
            ),
        ] {
            let err = check_attribute(k, v).unwrap_err();
            assert!(err.contains(wanted), "{k}={v}: {err}");
        }
    }
}
