//! Builders for hand-made task definitions and states in engine tests.
#![allow(dead_code)]

use berth_engine::state::TaskState;
use berth_model::{
    Condition, ContainerDefinition, Dependency, HealthCheck, NetworkMode, TaskDefinition,
};
use std::collections::BTreeMap;

pub fn container(name: &str) -> ContainerDefinition {
    ContainerDefinition {
        name: name.to_string(),
        image: "img".to_string(),
        essential: true,
        command: None,
        entry_point: None,
        environment: vec![],
        working_directory: None,
        user: None,
        depends_on: vec![],
        health_check: None,
        mount_points: vec![],
        volumes_from: vec![],
        port_mappings: vec![],
        cpu: None,
        memory: None,
        memory_reservation: None,
        stop_timeout: None,
        start_timeout: None,
        docker_labels: BTreeMap::new(),
        readonly_root_filesystem: false,
        privileged: false,
        hostname: None,
        ulimits: vec![],
        log_configuration: None,
    }
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
        family: "fam".into(),
        revision: 1,
        container_definitions: containers,
        volumes: vec![],
        network_mode: NetworkMode::Bridge,
        cpu: None,
        memory: None,
    }
}

pub fn state(containers: Vec<ContainerDefinition>) -> TaskState {
    TaskState::new(
        "0123456789abcdef0123456789abcdef".into(),
        task(containers),
        0,
    )
}
