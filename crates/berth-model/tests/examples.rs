//! The files in the workspace's `examples/` directory: each parses cleanly, and the web-app graph
//! renders as documented.

use berth_model::{Condition, DependencyGraph, GraphFormat, NetworkMode, VolumeKind, parse};

const WEB_APP: &str = include_str!("../../../examples/web-app.json");
const MINIMAL: &str = include_str!("../../../examples/minimal.json");
const DESCRIBE: &str = include_str!("../../../examples/describe-task-definition.json");

#[test]
fn web_app_is_valid_without_warnings() {
    let parsed = parse(WEB_APP).unwrap();
    assert_eq!(parsed.warnings, vec![]);
    let def = parsed.definition;
    assert_eq!((def.family.as_str(), def.revision), ("web-app", 1));
    assert_eq!(def.network_mode, NetworkMode::Bridge);
    assert_eq!(def.volumes.len(), 1);
    assert_eq!(def.volumes[0].kind, VolumeKind::Scratch);
    let names: Vec<&str> = def
        .container_definitions
        .iter()
        .map(|c| c.name.as_str())
        .collect();
    assert_eq!(names, ["init", "sidecar", "web"]);
    let web = def.container("web").unwrap();
    assert!(web.essential);
    assert_eq!(web.depends_on[0].condition, Condition::Success);
    assert_eq!(web.depends_on[1].condition, Condition::Healthy);
    let sidecar = def.container("sidecar").unwrap();
    assert_eq!(sidecar.health_check.as_ref().unwrap().interval, 5);
    for c in &def.container_definitions {
        assert_eq!(c.image, "berth-test/busybox:latest");
    }
}

#[test]
fn web_app_start_order_and_text_graph() {
    let def = parse(WEB_APP).unwrap().definition;
    let graph = DependencyGraph::new(&def);
    assert_eq!(graph.start_order(), Ok(vec![0, 1, 2]));
    assert_eq!(graph.stop_order(), Ok(vec![2, 1, 0]));
    assert_eq!(
        graph.render(&def, GraphFormat::Text),
        "\
start order for web-app:1 (each container starts after the ones it waits for)
  1. init     (essential: no)   berth-test/busybox:latest
  2. sidecar  (essential: no)   berth-test/busybox:latest  health check: CMD-SHELL true
  3. web      (essential: yes)  berth-test/busybox:latest
     waits for init: SUCCESS (until it has exited with code 0)
     waits for sidecar: HEALTHY (until its health check passes: CMD-SHELL true)
"
    );
}

#[test]
fn web_app_dot_graph() {
    let def = parse(WEB_APP).unwrap().definition;
    let dot = DependencyGraph::new(&def).render(&def, GraphFormat::Dot);
    assert!(dot.starts_with("digraph \"web-app\" {\n"), "{dot}");
    assert!(dot.ends_with("}\n"));
    for line in [
        "  \"init\" [label=\"init\\nberth-test/busybox:latest\", style=dashed];",
        "  \"sidecar\" [label=\"sidecar\\nberth-test/busybox:latest\\n(health check)\", style=dashed];",
        "  \"web\" [label=\"web\\nberth-test/busybox:latest\", style=bold, peripheries=2];",
        "  \"web\" -> \"init\" [label=\"SUCCESS\"];",
        "  \"web\" -> \"sidecar\" [label=\"HEALTHY\"];",
    ] {
        assert!(dot.lines().any(|l| l == line), "missing {line:?} in\n{dot}");
    }
}

#[test]
fn minimal_is_valid() {
    let parsed = parse(MINIMAL).unwrap();
    assert_eq!(parsed.warnings, vec![]);
    let def = parsed.definition;
    assert_eq!(def.revision, 0);
    let c = &def.container_definitions[0];
    assert!(c.essential);
    assert_eq!(
        c.command.as_deref(),
        Some(&["echo".to_owned(), "hello".to_owned()][..])
    );
    let graph = DependencyGraph::new(&def);
    assert_eq!(
        graph.render(&def, GraphFormat::Text),
        "start order for minimal (each container starts after the ones it waits for)\n  \
         1. hello  (essential: yes)  berth-test/busybox:latest\n"
    );
}

#[test]
fn describe_output_is_valid_with_warnings_for_ecs_only_fields() {
    let parsed = parse(DESCRIBE).unwrap();
    let warnings: Vec<String> = parsed.warnings.iter().map(ToString::to_string).collect();
    assert_eq!(
        warnings,
        [
            "taskDefinition.taskDefinitionArn: not used by berth, ignored",
            "taskDefinition.status: not used by berth, ignored",
            "taskDefinition.requiresAttributes: not used by berth, ignored",
            "taskDefinition.compatibilities: not used by berth, ignored",
            "taskDefinition.requiresCompatibilities: not used by berth, ignored",
            "taskDefinition.registeredAt: not used by berth, ignored",
            "taskDefinition.registeredBy: not used by berth, ignored",
        ]
    );
    let def = parsed.definition;
    assert_eq!((def.family.as_str(), def.revision), ("greeter", 3));
    assert_eq!(def.cpu.as_deref(), Some("256"));
    assert_eq!(def.memory.as_deref(), Some("512"));
}

#[test]
fn definitions_round_trip_through_serde() {
    for text in [WEB_APP, MINIMAL, DESCRIBE] {
        let def = parse(text).unwrap().definition;
        let json = serde_json::to_string(&def).unwrap();
        let back: berth_model::TaskDefinition = serde_json::from_str(&json).unwrap();
        assert_eq!(back, def);
    }
}
