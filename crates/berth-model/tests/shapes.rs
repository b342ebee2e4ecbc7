//! The shape fixtures: task definitions written by us in the shapes real ones take (see
//! `tests/fixtures/shapes/README.md` for where each shape was seen and what ECS does with it).
//! Every `tests/fixtures/shapes/NAME.json` must give exactly the outcome in `NAME.expected`: a
//! first line `valid` or `invalid`, then one `error: PATH: message` or `warning: PATH: message`
//! line per problem, errors first, each group in document order.
//!
//! After changing a message on purpose, run with `BERTH_BLESS=1` to rewrite the expected files
//! from the current output, and review the diff.

use berth_model::{Problem, logging, parse_bytes};
use std::fs;
use std::path::{Path, PathBuf};

mod common;

use common::check_expected;

fn fixtures() -> Vec<PathBuf> {
    common::fixtures("shapes")
}

fn outcome(bytes: &[u8]) -> String {
    let lines = |kind: &str, list: &[Problem]| -> String {
        list.iter().map(|p| format!("{kind}: {p}\n")).collect()
    };
    // As `berth validate` says it with the default log policy (awslogs replaced by json-file).
    match parse_bytes(bytes) {
        Ok(mut parsed) => {
            logging::apply_to_parsed(&mut parsed, &logging::LogPolicy::default());
            format!("valid\n{}", lines("warning", &parsed.warnings))
        }
        Err(invalid) => format!(
            "invalid\n{}{}",
            lines("error", &invalid.problems),
            lines("warning", &invalid.warnings)
        ),
    }
}

#[test]
fn every_shape_fixture_gives_the_expected_outcome() {
    let files = fixtures();
    assert!(files.len() >= 10, "only {} fixtures found", files.len());
    check_expected(&files, |file| Ok(outcome(&fs::read(file).unwrap())));
}

#[test]
fn every_shape_fixture_is_described_in_the_readme() {
    let dir = Path::new(env!("CARGO_MANIFEST_DIR")).join("tests/fixtures/shapes");
    let readme = fs::read_to_string(dir.join("README.md")).unwrap();
    for file in fixtures() {
        let name = file.file_name().unwrap().to_string_lossy().into_owned();
        assert!(
            readme.contains(&format!("`{name}`")),
            "{name} is not described in tests/fixtures/shapes/README.md"
        );
    }
}

/// Every field of the ECS task-definition reference (task, container, and the objects inside
/// them) is used by at least one shape fixture.
#[test]
fn the_shape_fixtures_use_every_field_of_the_ecs_reference() {
    const FIELDS: &[&str] = &[
        // task
        "family",
        "revision",
        "taskRoleArn",
        "executionRoleArn",
        "networkMode",
        "containerDefinitions",
        "volumes",
        "placementConstraints",
        "requiresCompatibilities",
        "cpu",
        "memory",
        "tags",
        "pidMode",
        "ipcMode",
        "proxyConfiguration",
        "inferenceAccelerators",
        "ephemeralStorage",
        "runtimePlatform",
        "enableFaultInjection",
        // container
        "name",
        "image",
        "repositoryCredentials",
        "memoryReservation",
        "portMappings",
        "healthCheck",
        "environment",
        "environmentFiles",
        "secrets",
        "essential",
        "entryPoint",
        "command",
        "workingDirectory",
        "resourceRequirements",
        "linuxParameters",
        "mountPoints",
        "volumesFrom",
        "dependsOn",
        "startTimeout",
        "stopTimeout",
        "versionConsistency",
        "restartPolicy",
        "disableNetworking",
        "links",
        "hostname",
        "dnsServers",
        "dnsSearchDomains",
        "extraHosts",
        "readonlyRootFilesystem",
        "dockerLabels",
        "dockerSecurityOptions",
        "interactive",
        "pseudoTerminal",
        "ulimits",
        "logConfiguration",
        "firelensConfiguration",
        "credentialSpecs",
        "privileged",
        "user",
        "systemControls",
        // inside containers
        "containerPort",
        "hostPort",
        "protocol",
        "appProtocol",
        "containerPortRange",
        "interval",
        "timeout",
        "retries",
        "startPeriod",
        "capabilities",
        "initProcessEnabled",
        "devices",
        "tmpfs",
        "sharedMemorySize",
        "maxSwap",
        "swappiness",
        "sourceVolume",
        "containerPath",
        "readOnly",
        "sourceContainer",
        "containerName",
        "condition",
        "softLimit",
        "hardLimit",
        "logDriver",
        "options",
        "secretOptions",
        "valueFrom",
        // volumes
        "host",
        "sourcePath",
        "dockerVolumeConfiguration",
        "scope",
        "autoprovision",
        "driver",
        "driverOpts",
        "labels",
        "efsVolumeConfiguration",
        "fileSystemId",
        "rootDirectory",
        "transitEncryption",
        "transitEncryptionPort",
        "authorizationConfig",
        "accessPointId",
        "iam",
        "fsxWindowsFileServerVolumeConfiguration",
        "configuredAtLaunch",
    ];
    let all: String = fixtures()
        .iter()
        .map(|f| fs::read_to_string(f).unwrap())
        .collect();
    let missing: Vec<&str> = FIELDS
        .iter()
        .copied()
        .filter(|field| !all.contains(&format!("\"{field}\":")))
        .collect();
    assert!(missing.is_empty(), "no shape fixture uses {missing:?}");
}
