//! Builders for hand-made task definitions and states in engine tests.
#![allow(dead_code)]

use berth_engine::decide::Event;
use berth_engine::state::TaskState;
use berth_model::{Condition, ContainerDefinition, Dependency, HealthCheck, TaskDefinition};

pub fn container(name: &str) -> ContainerDefinition {
    ContainerDefinition::new(name, "img")
}

pub fn depends(mut c: ContainerDefinition, on: &str, condition: Condition) -> ContainerDefinition {
    c.depends_on.push(Dependency {
        container_name: on.to_string(),
        condition,
    });
    c
}

pub fn non_essential(mut c: ContainerDefinition) -> ContainerDefinition {
    c.essential = false;
    c
}

pub fn healthy(mut c: ContainerDefinition) -> ContainerDefinition {
    c.health_check = Some(HealthCheck {
        command: vec!["CMD-SHELL".into(), "true".into()],
        interval: 5,
        timeout: 2,
        retries: 1,
        start_period: 0,
    });
    c
}

pub fn task(containers: Vec<ContainerDefinition>) -> TaskDefinition {
    TaskDefinition {
        revision: 1,
        ..TaskDefinition::new("fam", containers)
    }
}

pub fn state(containers: Vec<ContainerDefinition>) -> TaskState {
    TaskState::new(
        "0123456789abcdef0123456789abcdef".into(),
        task(containers),
        0,
    )
}

/// Docker answered the pull of container `i` (at 1 ms).
pub fn pulled(s: &mut TaskState, i: usize) {
    s.apply(&Event::Pulled {
        container: i,
        at: 1,
    });
}

/// Docker created container `i` with id `id<i>` (at 2 ms).
pub fn created(s: &mut TaskState, i: usize) {
    s.apply(&Event::Created {
        container: i,
        docker_id: format!("id{i}"),
        at: 2,
    });
}

/// Container `i` started (at 3 ms).
pub fn started(s: &mut TaskState, i: usize) {
    s.apply(&Event::Started {
        container: i,
        at: 3,
    });
}
