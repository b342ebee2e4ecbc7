//! `berth validate`: check a task definition file and report every problem at once, or draw its
//! container dependency graph. Exit status follows sysexits(3): 0 valid, 65 invalid data, 66
//! input not readable.

use anyhow::Context as _;
use berth_model::{DependencyGraph, GraphFormat, Parsed, TaskDefinition};
use std::io::{self, Write as _};
use std::path::PathBuf;
use std::process::ExitCode;

/// Arguments of `berth validate`: it takes the log driver keys from the configuration file, its
/// secret checks from its command line only (the file's secret keys are the agent's and `run`'s).
#[derive(clap::Args, Debug)]
#[command(add = crate::config::CommandLineOnly::of::<crate::secrets::SecretArgs>())]
#[command(after_help = "\
Output:
  valid       a one-line summary on standard output (or the graph, with --graph);
              ignored fields, and log drivers this host does not have (replaced by
              --log-driver-fallback), are listed on standard error as
              `warning: PATH: message`; exit status 0
  invalid     every problem on standard error, one per line, as `PATH: message`,
              where PATH is the JSON path of the field, for example
              containerDefinitions[1].dependsOn[0].containerName; exit status 65
  unreadable  an error naming the file; exit status 66
  secrets     with --secrets-dir, --secrets-from-env or --environment-files-dir: a
              secret or environment file that cannot be read is reported with the reason
              `berth run` would stop the task with; exit status 65

Examples:
  berth validate examples/web-app.json
  berth validate examples/web-app.json --graph text
  berth validate examples/web-app.json --graph dot | dot -Tsvg > web-app.svg
  aws ecs describe-task-definition --task-definition web-app | berth validate -")]
pub struct Args {
    /// The task definition to check: ECS task definition JSON, either bare (as given to
    /// `aws ecs register-task-definition --cli-input-json`) or wrapped as printed by
    /// `aws ecs describe-task-definition`. Use `-` to read standard input.
    #[arg(value_name = "FILE")]
    pub file: PathBuf,

    /// Print the container dependency graph instead of the summary (only when the definition is
    /// valid).
    #[arg(long, value_name = "FORMAT", value_enum)]
    pub graph: Option<GraphArg>,

    #[command(flatten)]
    pub logs: crate::log_policy::LogArgs,

    /// With any of these, also read every secret and environment file the definition names, as
    /// `berth run` and the agent would with the same options: one that cannot be read is reported
    /// with the reason the task would stop with (exit status 65). Values are never printed.
    #[command(flatten)]
    pub secrets: crate::secrets::SecretArgs,

    /// Which source would serve the definition's taskRoleArn (said on standard error).
    #[command(flatten)]
    pub roles: crate::task_roles::TaskRoleArgs,

    /// With AWS access, which of the definition's roles, secrets, environment files, ECR images
    /// and awslogs containers AWS would serve (said on standard error; nothing is fetched).
    #[command(flatten)]
    pub aws: crate::aws_access::AwsArgs,
}

/// `--graph` formats.
#[derive(clap::ValueEnum, Debug, Clone, Copy, PartialEq, Eq)]
pub enum GraphArg {
    /// Graphviz DOT: edges point from a container to what it waits for, labelled with the
    /// condition; essential containers are bold (render with `dot -Tsvg`).
    Dot,
    /// The start order as a numbered list, with each container's image, whether it is essential,
    /// and what it waits for.
    Text,
}

impl From<GraphArg> for GraphFormat {
    fn from(arg: GraphArg) -> Self {
        match arg {
            GraphArg::Dot => GraphFormat::Dot,
            GraphArg::Text => GraphFormat::Text,
        }
    }
}

/// Runs `berth validate`; the exit code says valid (0), invalid (65) or unreadable (66).
pub fn run(args: Args) -> anyhow::Result<ExitCode> {
    let runtime = tokio::runtime::Builder::new_current_thread()
        .enable_all()
        .build()
        .context("starting the async runtime")?;
    let aws = runtime.block_on(args.aws.load())?;
    let policy = args.logs.policy_with_aws(aws.is_some())?;
    let parsed = match crate::input::load(&args.file, &policy) {
        Ok(parsed) => parsed,
        Err(code) => return Ok(code),
    };
    if let Some(reason) = unreadable_secrets(&args.secrets, &parsed.definition)? {
        eprintln!("the task would stop before any container is created: {reason}");
        return Ok(ExitCode::from(65));
    }
    let roles = crate::task_roles::role_source(aws.as_ref().map(|a| a.roles.clone()), &args.roles);
    for line in crate::aws_access::sources(
        &parsed.definition,
        &*args.secrets.provider()?,
        args.secrets.environment_files_dir.as_deref(),
        aws.as_ref(),
        roles.as_ref(),
        &args.roles,
    ) {
        eprintln!("note: {line}");
    }
    let output = match args.graph {
        Some(format) => {
            DependencyGraph::new(&parsed.definition).render(&parsed.definition, format.into())
        }
        None => format!("{}\n", summary(&parsed)),
    };
    write_stdout(&output)?;
    Ok(ExitCode::SUCCESS)
}

/// With a secret source or an environment files directory given: the reason the task would stop
/// with when one of its secrets or environment files cannot be read (the same resolution as the
/// actor's, so validate and run agree); None when all can, or when no option asks for the check.
fn unreadable_secrets(
    args: &crate::secrets::SecretArgs,
    definition: &TaskDefinition,
) -> anyhow::Result<Option<String>> {
    if args.secrets_dir.is_none() && !args.secrets_from_env && args.environment_files_dir.is_none()
    {
        return Ok(None);
    }
    let provider = args.provider()?;
    let state = berth_engine::TaskState::new(String::new(), definition.clone(), 0);
    Ok(berth_engine::secrets::resolve_task(
        &state,
        &*provider,
        &berth_engine::secrets::EnvironmentFileRules {
            s3_dir: args.environment_files_dir.as_deref(),
            allowed: &args.environment_files_allow(),
            fetched: None,
        },
    )
    .err()
    .map(|e| e.to_string()))
}

/// Writes to standard output; a closed pipe (`berth validate ... | head -1`) is not an error.
fn write_stdout(text: &str) -> anyhow::Result<()> {
    let mut stdout = io::stdout().lock();
    match stdout
        .write_all(text.as_bytes())
        .and_then(|()| stdout.flush())
    {
        Err(err) if err.kind() != io::ErrorKind::BrokenPipe => {
            Err(err).context("writing to standard output")
        }
        _ => Ok(()),
    }
}

/// `web-app:1 is valid: 3 containers (1 essential), 1 volume, network mode bridge`
fn summary(parsed: &Parsed) -> String {
    let def: &TaskDefinition = &parsed.definition;
    let name = if def.revision == 0 {
        def.family.clone()
    } else {
        format!("{}:{}", def.family, def.revision)
    };
    let containers = def.container_definitions.len();
    let essential = def
        .container_definitions
        .iter()
        .filter(|c| c.essential)
        .count();
    let mut line = format!(
        "{name} is valid: {} ({essential} essential), {}, network mode {}",
        plural(containers, "container"),
        plural(def.volumes.len(), "volume"),
        def.network_mode.as_str()
    );
    if !parsed.warnings.is_empty() {
        let warned = plural(parsed.warnings.len(), "warning");
        line.push_str(&format!("; {warned} (see standard error)"));
    }
    line
}

fn plural(n: usize, word: &str) -> String {
    if n == 1 {
        format!("1 {word}")
    } else {
        format!("{n} {word}s")
    }
}
