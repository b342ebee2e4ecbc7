//! The CLI client of `berth agent`: `submit`, `ps`, `inspect`, `stop`, `rm`, `events`, `images`
//! (`images prune [--dry-run]`), talking
//! HTTP/JSON to the agent's control socket (hyper's HTTP/1 client over a Unix stream).
//!
//! Every answer is read into the control API's own types (`berth_api::control::types`, the ones the
//! server writes): a field the agent renamed or dropped is an error naming it, never an empty
//! column. Event lines are passed through as the agent sent them; only their head is read.

use crate::output::{Output, table};
use anyhow::{Context as _, anyhow, bail};
use berth_api::control::{
    Accepted, ErrorBody, EventHead, ImagesView, ListQuery, PruneResponse, SubmitResponse, TaskView,
};
use berth_engine::Status;
use bytes::Bytes;
use http_body_util::{BodyExt, Full};
use hyper::{Method, Request, StatusCode};
use hyper_util::rt::TokioIo;
use serde::de::DeserializeOwned;
use std::path::{Path, PathBuf};
use std::process::ExitCode;

/// The options every client command takes (global, so `berth images prune` takes them too); the
/// configuration file's `api-socket` is their `--agent`.
#[derive(clap::Args, Debug, Clone)]
pub struct AgentArgs {
    /// The agent's control socket.
    #[arg(
        long,
        global = true,
        env = "BERTH_API_SOCKET",
        value_name = "SOCKET",
        default_value = crate::agent::DEFAULT_API_SOCKET,
        add = crate::config::Key::new().named("api-socket")
    )]
    pub agent: PathBuf,
    /// `text` for people (tables), `json` for tools.
    #[arg(long, global = true, value_enum, default_value_t = Output::Text)]
    pub output: Output,
}

#[derive(clap::Subcommand, Debug)]
pub enum ClientCommand {
    /// Submit a task definition to the agent (prints the task id; --wait follows it to the end).
    Submit {
        /// The task definition; `-` reads standard input.
        file: PathBuf,
        /// Wait until the task has stopped; exit with its exit status.
        #[arg(long)]
        wait: bool,
        /// A token of your choice (1-64 printable ASCII characters, ECS RunTask's `clientToken`)
        /// that makes the submit idempotent: a retry with the same token, while the agent keeps
        /// the task, answers that task's id instead of creating a second task. Use it when a
        /// submit got no id (503, a timeout, a lost connection) and must be retried.
        #[arg(long, value_name = "TOKEN")]
        client_token: Option<String>,
        #[command(flatten)]
        tags: crate::tags::TaskTagArgs,
        #[command(flatten)]
        agent: AgentArgs,
    },
    /// List tasks (running ones; -a for all the agent still keeps).
    Ps {
        /// Also show stopped tasks.
        #[arg(short, long)]
        all: bool,
        /// Only tasks of this family.
        #[arg(long)]
        family: Option<String>,
        #[command(flatten)]
        agent: AgentArgs,
    },
    /// Show one task with its containers, exit codes, reasons and cleanup state.
    Inspect {
        /// The task's id, or any prefix of it that no other task's id starts with (the 12
        /// characters `berth ps` prints).
        task: String,
        #[command(flatten)]
        agent: AgentArgs,
    },
    /// Stop a task (reverse dependency order, stop timeouts).
    Stop {
        /// The task's id, or any prefix of it that no other task's id starts with (the 12
        /// characters `berth ps` prints).
        task: String,
        #[command(flatten)]
        agent: AgentArgs,
    },
    /// Stop a task if needed and clean it up now (containers, volumes, task directory).
    Rm {
        /// The task's id, or any prefix of it that no other task's id starts with (the 12
        /// characters `berth ps` prints).
        task: String,
        #[command(flatten)]
        agent: AgentArgs,
    },
    /// Print a task container's output (from the Docker Engine); -f follows it.
    Logs {
        /// The task's id or a unique prefix of it.
        task: String,
        container: String,
        /// Keep printing until the container exits.
        #[arg(short, long)]
        follow: bool,
        /// The Docker Engine to read from. Default: DOCKER_HOST, else the local socket.
        #[arg(long, value_name = "URI")]
        docker_host: Option<String>,
        #[command(flatten)]
        agent: AgentArgs,
    },
    /// Follow the agent's events (the same JSON objects as `berth run --output json`, and
    /// `image-removed` for every image cleanup removes).
    Events {
        #[command(flatten)]
        agent: AgentArgs,
    },
    /// List Docker's images with image cleanup's verdict: size, last use, the tasks that used
    /// each, and whether it is a candidate now or why it stays (candidates first, in removal order).
    Images {
        #[command(subcommand)]
        action: Option<ImagesAction>,
        #[command(flatten)]
        agent: AgentArgs,
    },
}

#[derive(clap::Subcommand, Debug)]
pub enum ImagesAction {
    /// Remove every image that is a cleanup candidate now (each removal is an `image-removed`
    /// event); exit 1 when one could not be removed.
    Prune {
        /// Only list what would be removed.
        #[arg(long)]
        dry_run: bool,
    },
}

/// Bytes for people: `1.5 MB` (decimal units, as Docker shows sizes).
fn human_bytes(n: u64) -> String {
    const UNITS: [&str; 5] = ["B", "kB", "MB", "GB", "TB"];
    let mut v = n as f64;
    let mut unit = 0;
    while v >= 1000.0 && unit < UNITS.len() - 1 {
        v /= 1000.0;
        unit += 1;
    }
    if unit == 0 {
        format!("{n} B")
    } else {
        format!("{v:.1} {}", UNITS[unit])
    }
}

fn short_id(id: &str) -> String {
    id.trim_start_matches("sha256:").chars().take(12).collect()
}

fn print_images(view: &ImagesView) {
    let rows: Vec<[String; 6]> = view
        .images
        .iter()
        .map(|i| {
            [
                i.names.first().cloned().unwrap_or_else(|| "<none>".into()),
                short_id(&i.image_id),
                human_bytes(i.size),
                if i.tracked {
                    or_dash(i.last_used.as_deref())
                } else {
                    "-".into()
                },
                if i.tasks.is_empty() {
                    "-".into()
                } else {
                    i.tasks
                        .iter()
                        .map(|t| t.chars().take(12).collect::<String>())
                        .collect::<Vec<_>>()
                        .join(",")
                },
                if i.candidate {
                    "candidate".into()
                } else {
                    or_dash(i.reason.as_deref())
                },
            ]
        })
        .collect();
    print!(
        "{}",
        table(
            &["IMAGE", "ID", "SIZE", "LAST USED", "TASKS", "CLEANUP"],
            &rows
        )
    );
    for a in &view.absent {
        println!("tracked but no longer in Docker: {a}");
    }
}

fn print_prune(p: &PruneResponse) {
    for i in &p.images {
        let name = i
            .names
            .first()
            .cloned()
            .unwrap_or_else(|| short_id(&i.image_id));
        match (&i.error, p.dry_run) {
            (Some(e), _) => println!("not removed {name} ({}): {e}", short_id(&i.image_id)),
            (None, true) => println!(
                "would remove {name} ({}, {})",
                short_id(&i.image_id),
                human_bytes(i.bytes)
            ),
            (None, false) => println!(
                "removed {name} ({}, {})",
                short_id(&i.image_id),
                human_bytes(i.bytes)
            ),
        }
    }
    if !p.dry_run {
        println!("freed {}", human_bytes(p.bytes_freed));
    } else if p.images.is_empty() {
        println!("no image is a candidate now");
    }
}

type Sender = hyper::client::conn::http1::SendRequest<Full<Bytes>>;

async fn connect(socket: &Path) -> anyhow::Result<Sender> {
    let stream = tokio::net::UnixStream::connect(socket).await.with_context(|| {
        format!(
            "cannot reach the agent at {} (is `berth agent` running? --agent chooses the socket)",
            socket.display()
        )
    })?;
    let (sender, conn) = hyper::client::conn::http1::handshake(TokioIo::new(stream))
        .await
        .context("talking to the agent")?;
    tokio::spawn(conn);
    Ok(sender)
}

fn request(method: Method, path: &str, body: Vec<u8>) -> anyhow::Result<Request<Full<Bytes>>> {
    Request::builder()
        .method(method)
        .uri(path)
        .header("host", "berth")
        .header("content-type", "application/json")
        .body(Full::new(Bytes::from(body)))
        .context("building the request")
}

/// One request, the whole answer (status and body bytes).
async fn call(
    socket: &Path,
    method: Method,
    path: &str,
    body: Vec<u8>,
) -> anyhow::Result<(StatusCode, Bytes)> {
    let mut sender = connect(socket).await?;
    let resp = sender
        .send_request(request(method, path, body)?)
        .await
        .context("talking to the agent")?;
    let status = resp.status();
    let bytes = resp
        .into_body()
        .collect()
        .await
        .context("reading the agent's answer")?
        .to_bytes();
    Ok((status, bytes))
}

/// The agent's error body, when its answer is one.
fn error_body(body: &[u8]) -> Option<ErrorBody> {
    serde_json::from_slice(body).ok()
}

/// The agent's error message, or a generic one.
fn error_of(status: StatusCode, body: &[u8]) -> anyhow::Error {
    match error_body(body) {
        Some(e) => anyhow!("{}", e.error),
        None => anyhow!("the agent answered {status}"),
    }
}

/// A successful answer read as `T`, or the agent's error.
fn decode<T: DeserializeOwned>(status: StatusCode, body: &[u8]) -> anyhow::Result<T> {
    if !status.is_success() {
        return Err(error_of(status, body));
    }
    serde_json::from_slice(body).with_context(|| {
        format!(
            "the agent's answer is not what this berth expects (a different version?): {}",
            String::from_utf8_lossy(body)
        )
    })
}

pub fn run(cmd: ClientCommand) -> anyhow::Result<ExitCode> {
    let runtime = tokio::runtime::Builder::new_current_thread()
        .enable_all()
        .build()
        .context("starting the async runtime")?;
    runtime.block_on(run_async(cmd))
}

fn print_json(v: &impl serde::Serialize) {
    println!("{}", serde_json::to_string(v).unwrap_or_default());
}

fn or_dash(v: Option<&str>) -> String {
    v.unwrap_or("-").to_string()
}

/// The exit status of `berth stop` when the task is still running because Docker refused (or did
/// not answer) its last stop: EX_TEMPFAIL, the stop was sent again and is being retried.
pub const EXIT_STILL_STOPPING: u8 = 75;

/// A task's STATUS column: its known status, or `STOPPING` while it is to stop and Docker still
/// runs some of it.
fn task_status(t: &TaskView) -> String {
    if t.desired == Status::Stopped && t.known != Status::Stopped {
        "STOPPING".to_string()
    } else {
        t.known.to_string()
    }
}

/// The containers whose stop failed and is retried: (name, failures in a row, error).
fn failed_stops(t: &TaskView) -> Vec<(&str, u32, &str)> {
    t.containers
        .iter()
        .filter(|c| c.stopping())
        .filter_map(|c| {
            c.stop_error
                .as_deref()
                .map(|e| (c.name.as_str(), c.stop_failures, e))
        })
        .collect()
}

/// The REASON column: the stop reason, and why the task is still running when a stop failed.
fn task_reason(t: &TaskView) -> String {
    let mut reason = or_dash(t.stopped_reason.as_deref());
    for (name, failures, error) in failed_stops(t) {
        reason.push_str(&format!("; stop of {name} failed ({failures}x): {error}"));
    }
    reason
}

fn print_tasks(tasks: &[TaskView]) {
    let rows: Vec<[String; 7]> = tasks
        .iter()
        .map(|t| {
            [
                t.task.chars().take(12).collect(),
                format!("{}:{}", t.family, t.revision),
                task_status(t),
                t.exit_code.map_or("-".into(), |c| c.to_string()),
                t.containers.len().to_string(),
                t.containers
                    .iter()
                    .map(|c| u64::from(c.restart_count))
                    .sum::<u64>()
                    .to_string(),
                task_reason(t),
            ]
        })
        .collect();
    print!(
        "{}",
        table(
            &[
                "TASK",
                "FAMILY",
                "STATUS",
                "EXIT",
                "CONTAINERS",
                "RESTARTS",
                "REASON"
            ],
            &rows
        )
    );
}

fn print_task(t: &TaskView) {
    println!(
        "task {} {}:{} {} (desired {}) — {}",
        t.task,
        t.family,
        t.revision,
        task_status(t),
        t.desired,
        or_dash(t.stopped_reason.as_deref())
    );
    let rows: Vec<[String; 7]> = t
        .containers
        .iter()
        .map(|c| {
            [
                c.name.clone(),
                if c.stopping() {
                    "STOPPING".to_string()
                } else {
                    c.known.to_string()
                },
                c.exit_code.map_or("-".into(), |e| e.to_string()),
                c.docker_id
                    .as_deref()
                    .map_or("-".into(), |d| d.chars().take(12).collect()),
                c.restart_count.to_string(),
                or_dash(c.last_restart_at.as_deref()),
                or_dash(c.reason.as_deref()),
            ]
        })
        .collect();
    print!(
        "{}",
        table(
            &[
                "CONTAINER",
                "STATUS",
                "EXIT",
                "DOCKER ID",
                "RESTARTS",
                "LAST RESTART",
                "REASON"
            ],
            &rows
        )
    );
    for c in t.containers.iter().filter(|c| c.stopping()) {
        if let Some(error) = &c.stop_error {
            println!(
                "{}: still running: {} failed stop(s) in a row, next attempt {}: {error}",
                c.name,
                c.stop_failures,
                c.stop_retry_at.as_deref().unwrap_or("now")
            );
        }
    }
    if let Some(r) = t.cleanup.as_ref().and_then(|c| c.refused.as_deref()) {
        println!("{r}");
    }
}

async fn run_async(cmd: ClientCommand) -> anyhow::Result<ExitCode> {
    match cmd {
        ClientCommand::Submit {
            file,
            wait,
            client_token,
            tags,
            agent,
        } => {
            let body = if file == Path::new("-") {
                let mut b = Vec::new();
                std::io::Read::read_to_end(&mut std::io::stdin(), &mut b)
                    .context("reading standard input")?;
                b
            } else {
                std::fs::read(&file).with_context(|| format!("cannot read {}", file.display()))?
            };
            // Follow events from before the submission, so the end of a fast task is not missed.
            let mut events = if wait {
                Some(open_events(&agent.agent).await?)
            } else {
                None
            };
            // The agent checks the tags (ECS's rules) as it checks the definition.
            let mut query: Vec<(&str, String)> = tags
                .tags
                .iter()
                .map(|t| ("tag", format!("{}={}", t.key, t.value)))
                .collect();
            // The agent checks the token (ECS's rule) too.
            query.extend(client_token.map(|t| ("clientToken", t)));
            let path = if query.is_empty() {
                "/v1/tasks".to_string()
            } else {
                format!("/v1/tasks?{}", serde_urlencoded::to_string(&query)?)
            };
            let (status, answer) = call(&agent.agent, Method::POST, &path, body).await?;
            if status == StatusCode::BAD_REQUEST
                && let Some(ErrorBody {
                    problems: Some(problems),
                    ..
                }) = error_body(&answer)
            {
                for p in problems {
                    eprintln!("{p}");
                }
                return Ok(ExitCode::from(crate::input::EXIT_INVALID));
            }
            if status != StatusCode::CREATED {
                return Err(error_of(status, &answer));
            }
            let submitted: SubmitResponse = decode(status, &answer)?;
            for w in &submitted.warnings {
                eprintln!("warning: {w}");
            }
            let id = submitted.task.clone();
            match agent.output {
                Output::Json => print_json(&submitted),
                Output::Text => println!("{id}"),
            }
            if let Some(events) = events.as_mut() {
                wait_stopped(events, &id, agent.output).await?;
                let t = get_task(&agent, &id).await?;
                if agent.output == Output::Text {
                    print_task(&t);
                }
                let code = t.exit_code.unwrap_or(125);
                return Ok(ExitCode::from(u8::try_from(code).unwrap_or(125)));
            }
            Ok(ExitCode::SUCCESS)
        }
        ClientCommand::Ps { all, family, agent } => {
            let query = ListQuery {
                status: None,
                family,
            };
            let mut path = String::from("/v1/tasks");
            if query != ListQuery::default() {
                path.push('?');
                path.push_str(&serde_urlencoded::to_string(&query).context("the query")?);
            }
            let (status, answer) = call(&agent.agent, Method::GET, &path, vec![]).await?;
            let mut tasks: Vec<TaskView> = decode(status, &answer)?;
            tasks.retain(|t| all || t.known != Status::Stopped);
            match agent.output {
                Output::Json => print_json(&tasks),
                Output::Text => print_tasks(&tasks),
            }
            Ok(ExitCode::SUCCESS)
        }
        ClientCommand::Inspect { task, agent } => {
            let v = get_task(&agent, &task).await?;
            match agent.output {
                Output::Json => print_json(&v),
                Output::Text => print_task(&v),
            }
            Ok(ExitCode::SUCCESS)
        }
        ClientCommand::Stop { task, agent } => {
            let path = format!("/v1/tasks/{task}/stop");
            let (status, answer) = call(&agent.agent, Method::POST, &path, vec![]).await?;
            let accepted: Accepted = decode(status, &answer)?;
            println!("stopping {}", accepted.task);
            // A task whose stop Docker keeps refusing is still running: say so, and why, rather
            // than exiting 0 as if it were done.
            let t = get_task(&agent, &accepted.task).await?;
            let failed = failed_stops(&t);
            if failed.is_empty() {
                return Ok(ExitCode::SUCCESS);
            }
            for (name, failures, error) in failed {
                eprintln!(
                    "berth: task {} is still stopping: Docker still runs container {name}, whose last stop failed ({failures} in a row): {error}; the agent sent the stop again now and keeps retrying",
                    t.task
                );
            }
            Ok(ExitCode::from(EXIT_STILL_STOPPING))
        }
        ClientCommand::Rm { task, agent } => {
            let path = format!("/v1/tasks/{task}");
            act(&agent, Method::DELETE, &path, "removing").await
        }
        ClientCommand::Logs {
            task,
            container,
            follow,
            docker_host,
            agent,
        } => {
            use futures_util::StreamExt as _;
            use std::io::Write as _;
            let v = get_task(&agent, &task).await?;
            let c = v
                .container(&container)
                .ok_or_else(|| anyhow!("task {task} has no container named {container}"))?;
            let id = c
                .docker_id
                .as_deref()
                .ok_or_else(|| anyhow!("container {container} was never created: no logs"))?;
            let docker = berth_docker::connect(docker_host.as_deref()).await?;
            let rt = berth_docker::DockerRuntime::new(docker)
                .with_engine(berth_docker::engine_address(docker_host.as_deref()));
            // Whether Docker keeps this container's logs where its logs API reads them depends on
            // the driver it has (the definition's as resolved for the host, or the daemon's).
            use crate::log_policy::{Explain, explain, is_not_readable, not_kept};
            use berth_engine::Runtime as _;
            let details = rt
                .inspect_details(id)
                .await
                .with_context(|| format!("inspecting container {container}"))?;
            // Docker always reports one; if it did not, just try reading.
            let driver = details.log_driver.unwrap_or_default();
            let said = (!driver.is_empty())
                .then(|| explain(&container, &driver, &details.log_options))
                .flatten();
            match said {
                Some(Explain::Refuse(why)) => bail!("{why}"),
                Some(Explain::Note(note)) => eprintln!("berth: note: {note}"),
                None => {}
            }
            let mut logs = rt.logs(id, follow);
            while let Some(chunk) = logs.next().await {
                let (is_err, bytes) = match chunk {
                    Ok(chunk) => chunk,
                    // The daemon disables dual logging (`cache-disabled` in its log-opts).
                    Err(e) if is_not_readable(&e.to_string()) => {
                        bail!("{}", not_kept(&container, &driver))
                    }
                    Err(e) => return Err(e).context("reading the container's logs"),
                };
                if is_err {
                    let _ = std::io::stderr().write_all(&bytes);
                } else {
                    let _ = std::io::stdout().write_all(&bytes);
                }
            }
            Ok(ExitCode::SUCCESS)
        }
        ClientCommand::Events { agent } => {
            let mut events = open_events(&agent.agent).await?;
            while let Some(line) = next_line(&mut events).await? {
                println!("{line}");
            }
            Ok(ExitCode::SUCCESS)
        }
        ClientCommand::Images {
            action: None,
            agent,
        } => {
            let (status, answer) = call(&agent.agent, Method::GET, "/v1/images", vec![]).await?;
            let view: ImagesView = decode(status, &answer)?;
            match agent.output {
                Output::Json => print_json(&view),
                Output::Text => print_images(&view),
            }
            Ok(ExitCode::SUCCESS)
        }
        ClientCommand::Images {
            action: Some(ImagesAction::Prune { dry_run }),
            agent,
        } => {
            let path = format!("/v1/images/prune?dryRun={dry_run}");
            let (status, answer) = call(&agent.agent, Method::POST, &path, vec![]).await?;
            let pruned: PruneResponse = decode(status, &answer)?;
            match agent.output {
                Output::Json => print_json(&pruned),
                Output::Text => print_prune(&pruned),
            }
            if pruned.images.iter().any(|i| i.error.is_some()) {
                return Ok(ExitCode::FAILURE);
            }
            Ok(ExitCode::SUCCESS)
        }
    }
}

/// One task as the agent shows it, or the agent's error.
async fn get_task(agent: &AgentArgs, task: &str) -> anyhow::Result<TaskView> {
    let (status, answer) = call(
        &agent.agent,
        Method::GET,
        &format!("/v1/tasks/{task}"),
        vec![],
    )
    .await?;
    decode(status, &answer)
}

/// A request that changes something: print `doing <full task id>` on success (the id given may be
/// a prefix), the agent's error otherwise.
async fn act(
    agent: &AgentArgs,
    method: Method,
    path: &str,
    doing: &str,
) -> anyhow::Result<ExitCode> {
    let (status, answer) = call(&agent.agent, method, path, vec![]).await?;
    let accepted: Accepted = decode(status, &answer)?;
    println!("{doing} {}", accepted.task);
    Ok(ExitCode::SUCCESS)
}

/// The event stream: the response body and what has been read of it but not yet returned.
struct Events {
    body: hyper::body::Incoming,
    buf: Vec<u8>,
}

async fn open_events(socket: &Path) -> anyhow::Result<Events> {
    let mut sender = connect(socket).await?;
    let resp = sender
        .send_request(request(Method::GET, "/v1/events", vec![])?)
        .await
        .context("subscribing to the agent's events")?;
    if !resp.status().is_success() {
        bail!("the agent answered {} to /v1/events", resp.status());
    }
    Ok(Events {
        body: resp.into_body(),
        buf: Vec::new(),
    })
}

async fn next_line(ev: &mut Events) -> anyhow::Result<Option<String>> {
    loop {
        if let Some(pos) = ev.buf.iter().position(|b| *b == b'\n') {
            let line: Vec<u8> = ev.buf.drain(..=pos).collect();
            return Ok(Some(String::from_utf8_lossy(&line[..pos]).into_owned()));
        }
        match ev.body.frame().await {
            Some(Ok(frame)) => {
                if let Ok(data) = frame.into_data() {
                    ev.buf.extend_from_slice(&data);
                }
            }
            Some(Err(e)) => return Err(anyhow!("the agent's event stream broke: {e}")),
            None => return Ok(None),
        }
    }
}

async fn wait_stopped(ev: &mut Events, id: &str, out: Output) -> anyhow::Result<()> {
    while let Some(line) = next_line(ev).await? {
        // Lines of other tasks, or of kinds this berth does not know, are not ours to read.
        let Ok(head) = serde_json::from_str::<EventHead>(&line) else {
            continue;
        };
        if head.task != id {
            continue;
        }
        if out == Output::Json {
            println!("{line}");
        }
        if head.is_task_stopped(id) {
            return Ok(());
        }
    }
    bail!("the agent's event stream ended before task {id} stopped")
}
