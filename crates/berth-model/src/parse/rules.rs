//! What the validator knows about each object: its fields (read, ignored with a warning, or not
//! supported), ECS name rules, and the bounds of every number.

/// What an object may contain.
pub(super) struct Schema {
    /// Fields berth reads (null counts as absent).
    pub(super) known: &'static [&'static str],
    /// ECS fields berth does not use: warned about, then ignored.
    pub(super) ignored: &'static [&'static str],
    /// ECS fields berth cannot honour: an error when they carry a value.
    pub(super) unsupported: &'static [&'static str],
    /// Fields ignored without a word.
    pub(super) quiet: &'static [&'static str],
    /// ECS fields that only mean something on AWS: accepted, with a warning that says what berth
    /// does instead (field, what berth does).
    pub(super) aws_only: &'static [(&'static str, &'static str)],
}

pub(super) const WRAPPER: Schema = Schema {
    known: &["taskDefinition", "tags"],
    ignored: &[],
    unsupported: &[],
    quiet: &[],
    aws_only: &[],
};

/// One element of `tags`.
pub(super) const TAG: Schema = Schema {
    known: &["key", "value"],
    ignored: &[],
    unsupported: &[],
    quiet: &[],
    aws_only: &[],
};

pub(super) const TASK: Schema = Schema {
    known: &[
        "family",
        "revision",
        "containerDefinitions",
        "volumes",
        "networkMode",
        "cpu",
        "memory",
        "pidMode",
        "ipcMode",
        "tags",
        "taskRoleArn",
        "executionRoleArn",
    ],
    ignored: &[
        "taskDefinitionArn",
        "requiresCompatibilities",
        "compatibilities",
        "status",
        "registeredAt",
        "registeredBy",
        "deregisteredAt",
        "requiresAttributes",
        "runtimePlatform",
        "ephemeralStorage",
        "enableFaultInjection",
    ],
    unsupported: &[],
    quiet: &[],
    aws_only: &[
        (
            "proxyConfiguration",
            "App Mesh's proxy configuration is an AWS feature: berth starts the proxy container as an ordinary container of the task and redirects no traffic through it",
        ),
        (
            "inferenceAccelerators",
            "Elastic Inference accelerators exist only on AWS: berth runs the task without them",
        ),
        (
            "placementConstraints",
            "placement constraints choose among ECS's container instances: berth runs the task on this host",
        ),
    ],
};

pub(super) const CONTAINER: Schema = Schema {
    known: &[
        "name",
        "image",
        "essential",
        "command",
        "entryPoint",
        "environment",
        "secrets",
        "environmentFiles",
        "workingDirectory",
        "user",
        "dependsOn",
        "healthCheck",
        "mountPoints",
        "volumesFrom",
        "links",
        "portMappings",
        "cpu",
        "memory",
        "memoryReservation",
        "stopTimeout",
        "startTimeout",
        "dockerLabels",
        "readonlyRootFilesystem",
        "privileged",
        "hostname",
        "ulimits",
        "logConfiguration",
        "linuxParameters",
        "dnsServers",
        "dnsSearchDomains",
        "extraHosts",
        "systemControls",
        "dockerSecurityOptions",
        "interactive",
        "pseudoTerminal",
        "disableNetworking",
        "resourceRequirements",
        "repositoryCredentials",
        "firelensConfiguration",
        "restartPolicy",
    ],
    ignored: &["credentialSpecs", "versionConsistency"],
    unsupported: &[],
    quiet: &[],
    aws_only: &[],
};

pub(super) const ENV_VAR: Schema = Schema {
    known: &["name", "value"],
    ignored: &[],
    unsupported: &[],
    quiet: &[],
    aws_only: &[],
};

pub(super) const RESTART_POLICY: Schema = Schema {
    known: &["enabled", "ignoredExitCodes", "restartAttemptPeriod"],
    ignored: &[],
    unsupported: &[],
    quiet: &[],
    aws_only: &[],
};

/// ECS: at most 50 entries in `restartPolicy.ignoredExitCodes`.
pub(super) const MAX_IGNORED_EXIT_CODES: usize = 50;

pub(super) const REPOSITORY_CREDENTIALS: Schema = Schema {
    known: &["credentialsParameter"],
    ignored: &[],
    unsupported: &[],
    quiet: &[],
    aws_only: &[],
};

/// A `secrets` or `secretOptions` entry.
pub(super) const SECRET: Schema = Schema {
    known: &["name", "valueFrom"],
    ignored: &[],
    unsupported: &[],
    quiet: &[],
    aws_only: &[],
};

pub(super) const ENVIRONMENT_FILE: Schema = Schema {
    known: &["value", "type"],
    ignored: &[],
    unsupported: &[],
    quiet: &[],
    aws_only: &[],
};

/// ECS takes at most ten environment files per container.
pub(super) const MAX_ENVIRONMENT_FILES: usize = 10;

pub(super) const DEPENDENCY: Schema = Schema {
    known: &["containerName", "condition"],
    ignored: &[],
    unsupported: &[],
    quiet: &[],
    aws_only: &[],
};

pub(super) const HEALTH_CHECK: Schema = Schema {
    known: &["command", "interval", "timeout", "retries", "startPeriod"],
    ignored: &[],
    unsupported: &[],
    quiet: &[],
    aws_only: &[],
};

pub(super) const MOUNT_POINT: Schema = Schema {
    known: &["sourceVolume", "containerPath", "readOnly"],
    ignored: &[],
    unsupported: &[],
    quiet: &[],
    aws_only: &[],
};

pub(super) const VOLUME_FROM: Schema = Schema {
    known: &["sourceContainer", "readOnly"],
    ignored: &[],
    unsupported: &[],
    quiet: &[],
    aws_only: &[],
};

pub(super) const PORT_MAPPING: Schema = Schema {
    known: &["containerPort", "hostPort", "protocol"],
    ignored: &["name", "appProtocol", "containerPortRange", "hostPortRange"],
    unsupported: &[],
    quiet: &[],
    aws_only: &[],
};

pub(super) const ULIMIT: Schema = Schema {
    known: &["name", "softLimit", "hardLimit"],
    ignored: &[],
    unsupported: &[],
    quiet: &[],
    aws_only: &[],
};

pub(super) const LOG_CONFIGURATION: Schema = Schema {
    known: &["logDriver", "options", "secretOptions"],
    ignored: &[],
    unsupported: &[],
    quiet: &[],
    aws_only: &[],
};

pub(super) const FIRELENS_CONFIGURATION: Schema = Schema {
    known: &["type", "options"],
    ignored: &[],
    unsupported: &[],
    quiet: &[],
    aws_only: &[],
};

pub(super) const LINUX_PARAMETERS: Schema = Schema {
    known: &[
        "initProcessEnabled",
        "capabilities",
        "devices",
        "tmpfs",
        "sharedMemorySize",
        "maxSwap",
        "swappiness",
    ],
    ignored: &[],
    unsupported: &[],
    quiet: &[],
    aws_only: &[],
};

pub(super) const CAPABILITIES: Schema = Schema {
    known: &["add", "drop"],
    ignored: &[],
    unsupported: &[],
    quiet: &[],
    aws_only: &[],
};

pub(super) const DEVICE: Schema = Schema {
    known: &["hostPath", "containerPath", "permissions"],
    ignored: &[],
    unsupported: &[],
    quiet: &[],
    aws_only: &[],
};

pub(super) const TMPFS: Schema = Schema {
    known: &["containerPath", "size", "mountOptions"],
    ignored: &[],
    unsupported: &[],
    quiet: &[],
    aws_only: &[],
};

pub(super) const EXTRA_HOST: Schema = Schema {
    known: &["hostname", "ipAddress"],
    ignored: &[],
    unsupported: &[],
    quiet: &[],
    aws_only: &[],
};

pub(super) const SYSTEM_CONTROL: Schema = Schema {
    known: &["namespace", "value"],
    ignored: &[],
    unsupported: &[],
    quiet: &[],
    aws_only: &[],
};

pub(super) const RESOURCE_REQUIREMENT: Schema = Schema {
    known: &["type", "value"],
    ignored: &[],
    unsupported: &["sharingStrategy"],
    quiet: &[],
    aws_only: &[],
};

/// The `resourceRequirements` types ECS knows.
pub(super) const RESOURCE_TYPES: &[&str] = &["GPU", "InferenceAccelerator", "NeuronDevice"];

pub(super) const VOLUME: Schema = Schema {
    known: &[
        "name",
        "host",
        "dockerVolumeConfiguration",
        "efsVolumeConfiguration",
    ],
    ignored: &["configuredAtLaunch"],
    unsupported: &["fsxWindowsFileServerVolumeConfiguration"],
    quiet: &[],
    aws_only: &[],
};

pub(super) const HOST_VOLUME: Schema = Schema {
    known: &["sourcePath"],
    ignored: &[],
    unsupported: &[],
    quiet: &[],
    aws_only: &[],
};

pub(super) const DOCKER_VOLUME: Schema = Schema {
    known: &["scope", "autoprovision", "driver", "driverOpts", "labels"],
    ignored: &[],
    unsupported: &[],
    quiet: &[],
    aws_only: &[],
};

pub(super) const EFS_VOLUME: Schema = Schema {
    known: &[
        "fileSystemId",
        "rootDirectory",
        "transitEncryption",
        "authorizationConfig",
    ],
    ignored: &["transitEncryptionPort"],
    unsupported: &[],
    quiet: &[],
    aws_only: &[],
};

pub(super) const EFS_AUTHORIZATION: Schema = Schema {
    known: &["accessPointId", "iam"],
    ignored: &[],
    unsupported: &[],
    quiet: &[],
    aws_only: &[],
};

/// Every object's schema, for the tests that need every field name berth knows.
#[cfg(test)]
pub(super) const SCHEMAS: &[&Schema] = &[
    &WRAPPER,
    &TASK,
    &CONTAINER,
    &ENV_VAR,
    &SECRET,
    &ENVIRONMENT_FILE,
    &REPOSITORY_CREDENTIALS,
    &DEPENDENCY,
    &HEALTH_CHECK,
    &MOUNT_POINT,
    &VOLUME_FROM,
    &PORT_MAPPING,
    &ULIMIT,
    &LOG_CONFIGURATION,
    &FIRELENS_CONFIGURATION,
    &LINUX_PARAMETERS,
    &CAPABILITIES,
    &DEVICE,
    &TMPFS,
    &EXTRA_HOST,
    &SYSTEM_CONTROL,
    &RESOURCE_REQUIREMENT,
    &VOLUME,
    &HOST_VOLUME,
    &DOCKER_VOLUME,
    &EFS_VOLUME,
    &EFS_AUTHORIZATION,
];

/// Ulimit names Docker accepts.
pub(super) const ULIMIT_NAMES: &[&str] = &[
    "core",
    "cpu",
    "data",
    "fsize",
    "locks",
    "memlock",
    "msgqueue",
    "nice",
    "nofile",
    "nproc",
    "rss",
    "rtprio",
    "rttime",
    "sigpending",
    "stack",
];

/// Capability names ECS accepts in `linuxParameters.capabilities` (upper case, no `CAP_`).
pub(super) const CAPABILITY_NAMES: &[&str] = &[
    "ALL",
    "AUDIT_CONTROL",
    "AUDIT_WRITE",
    "BLOCK_SUSPEND",
    "CHOWN",
    "DAC_OVERRIDE",
    "DAC_READ_SEARCH",
    "FOWNER",
    "FSETID",
    "IPC_LOCK",
    "IPC_OWNER",
    "KILL",
    "LEASE",
    "LINUX_IMMUTABLE",
    "MAC_ADMIN",
    "MAC_OVERRIDE",
    "MKNOD",
    "NET_ADMIN",
    "NET_BIND_SERVICE",
    "NET_BROADCAST",
    "NET_RAW",
    "SETFCAP",
    "SETGID",
    "SETPCAP",
    "SETUID",
    "SYS_ADMIN",
    "SYS_BOOT",
    "SYS_CHROOT",
    "SYS_MODULE",
    "SYS_NICE",
    "SYS_PACCT",
    "SYS_PTRACE",
    "SYS_RAWIO",
    "SYS_RESOURCE",
    "SYS_TIME",
    "SYS_TTY_CONFIG",
    "SYSLOG",
    "WAKE_ALARM",
];

/// tmpfs mount option names ECS accepts (`mode`, `uid`, `gid`, `nr_inodes`, `nr_blocks` and
/// `mpol` take a value: `mode=1777`).
pub(super) const TMPFS_OPTIONS: &[&str] = &[
    "defaults",
    "ro",
    "rw",
    "suid",
    "nosuid",
    "dev",
    "nodev",
    "exec",
    "noexec",
    "sync",
    "async",
    "dirsync",
    "remount",
    "mand",
    "nomand",
    "atime",
    "noatime",
    "diratime",
    "nodiratime",
    "bind",
    "rbind",
    "unbindable",
    "runbindable",
    "private",
    "rprivate",
    "shared",
    "rshared",
    "slave",
    "rslave",
    "relatime",
    "norelatime",
    "strictatime",
    "nostrictatime",
    "mode",
    "uid",
    "gid",
    "nr_inodes",
    "nr_blocks",
    "mpol",
];

pub(super) const MISSING: &str = "missing required field";
pub(super) const NAME_RULE: &str = "use 1 to 255 letters, digits, hyphens and underscores";

/// ECS names (family, container, volume): 1 to 255 of letters, digits, hyphens, underscores.
pub(super) fn valid_name(s: &str) -> bool {
    !s.is_empty()
        && s.len() <= 255
        && s.bytes()
            .all(|b| b.is_ascii_alphanumeric() || b == b'-' || b == b'_')
}

pub(super) fn unknown_field_message(key: &str, known: &[&str]) -> String {
    let suggestion = known
        .iter()
        .map(|k| {
            (
                edit_distance(&key.to_ascii_lowercase(), &k.to_ascii_lowercase()),
                *k,
            )
        })
        .filter(|&(d, k)| d == 0 || (d <= 2 && key.len() >= 4 && k.len() >= 4))
        .min_by_key(|&(d, _)| d);
    match suggestion {
        Some((_, k)) => format!("unknown field, ignored (did you mean {k:?}?)"),
        None => "unknown field, ignored".to_owned(),
    }
}

pub(super) fn edit_distance(a: &str, b: &str) -> usize {
    let b: Vec<char> = b.chars().collect();
    let mut row: Vec<usize> = (0..=b.len()).collect();
    for (i, ca) in a.chars().enumerate() {
        let mut previous = row[0];
        row[0] = i + 1;
        for (j, &cb) in b.iter().enumerate() {
            let substitute = previous + usize::from(ca != cb);
            previous = row[j + 1];
            row[j + 1] = substitute.min(row[j] + 1).min(previous + 1);
        }
    }
    row[b.len()]
}

/// Inclusive bounds for an integer field, and how to talk about it.
#[derive(Clone, Copy)]
pub(super) struct Bounds {
    pub(super) min: u64,
    pub(super) max: u64,
    /// Appended to numbers: " seconds", " MiB", "".
    pub(super) unit: &'static str,
    /// When set, values above `max` are called absurd and the maximum explained with this.
    pub(super) absurd: Option<&'static str>,
    /// Why the minimum is what it is, appended to "must be at least" messages.
    pub(super) min_reason: &'static str,
}

impl Bounds {
    pub(super) const fn new(min: u64, max: u64, unit: &'static str) -> Self {
        Bounds {
            min,
            max,
            unit,
            absurd: None,
            min_reason: "",
        }
    }
}

pub(super) const PORT: Bounds = Bounds::new(1, 65535, "");
pub(super) const HOST_PORT: Bounds = Bounds::new(0, 65535, "");
pub(super) const REVISION: Bounds = Bounds::new(1, u32::MAX as u64, "");
pub(super) const CONTAINER_CPU: Bounds = Bounds {
    absurd: Some("256 vCPUs"),
    ..Bounds::new(0, 262_144, " CPU units")
};
pub(super) const MEMORY: Bounds = Bounds {
    absurd: Some("4 TiB"),
    min_reason: " (Docker's minimum)",
    ..Bounds::new(6, 4_194_304, " MiB")
};
pub(super) const MEMORY_RESERVATION: Bounds = Bounds {
    absurd: Some("4 TiB"),
    ..Bounds::new(4, 4_194_304, " MiB")
};
pub(super) const TIMEOUT: Bounds = Bounds {
    absurd: Some("24 hours"),
    ..Bounds::new(0, 86_400, " seconds")
};
/// ECS's range for `restartPolicy.restartAttemptPeriod`.
pub(super) const RESTART_ATTEMPT_PERIOD: Bounds = Bounds::new(60, 1800, " seconds");
pub(super) const HC_INTERVAL: Bounds = Bounds::new(5, 300, " seconds");
pub(super) const HC_TIMEOUT: Bounds = Bounds::new(2, 60, " seconds");
pub(super) const HC_RETRIES: Bounds = Bounds::new(1, 10, "");
pub(super) const HC_START_PERIOD: Bounds = Bounds::new(0, 300, " seconds");
pub(super) const TMPFS_SIZE: Bounds = Bounds {
    absurd: Some("4 TiB"),
    ..Bounds::new(1, 4_194_304, " MiB")
};
pub(super) const SHM_SIZE: Bounds = Bounds {
    absurd: Some("4 TiB"),
    ..Bounds::new(1, 4_194_304, " MiB")
};
pub(super) const MAX_SWAP: Bounds = Bounds {
    absurd: Some("4 TiB"),
    ..Bounds::new(0, 4_194_304, " MiB")
};
pub(super) const SWAPPINESS: Bounds = Bounds::new(0, 100, "");
