//! The CLI client of `berth agent`: `submit`, `ps`, `inspect`, `stop`, `rm`, `events`, talking
//! HTTP/JSON to the agent's control socket (hyper's HTTP/1 client over a Unix stream).

use crate::output::{Output, table};
use anyhow::{Context as _, anyhow, bail};
use bytes::Bytes;
use http_body_util::{BodyExt, Full};
use hyper::{Method, Request, StatusCode};
use hyper_util::rt::TokioIo;
use serde_json::Value;
use std::path::{Path, PathBuf};
use std::process::ExitCode;

#[derive(clap::Args, Debug, Clone)]
pub struct AgentArgs {
    /// The agent's control socket.
    #[arg(long, env = "BERTH_API_SOCKET", value_name = "SOCKET", default_value = crate::agent::DEFAULT_API_SOCKET)]
    pub agent: PathBuf,
    /// `text` for people (tables), `json` for tools.
    #[arg(long, value_enum, default_value_t = Output::Text)]
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
        task: String,
        #[command(flatten)]
        agent: AgentArgs,
    },
    /// Stop a task (reverse dependency order, stop timeouts).
    Stop {
        task: String,
        #[command(flatten)]
        agent: AgentArgs,
    },
    /// Stop a task if needed and clean it up now (containers, volumes, task directory).
    Rm {
        task: String,
        #[command(flatten)]
        agent: AgentArgs,
    },
    /// Print a task container's output (from the Docker Engine); -f follows it.
    Logs {
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
    /// Follow the agent's events (the same JSON objects as `berth run --output json`).
    Events {
        #[command(flatten)]
        agent: AgentArgs,
    },
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

/// One request, the whole answer.
async fn call(
    socket: &Path,
    method: Method,
    path: &str,
    body: Vec<u8>,
) -> anyhow::Result<(StatusCode, Value)> {
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
    let value = serde_json::from_slice(&bytes).unwrap_or(Value::Null);
    Ok((status, value))
}

/// The agent's error message, or a generic one.
fn error_of(status: StatusCode, v: &Value) -> anyhow::Error {
    match v["error"].as_str() {
        Some(e) => anyhow!("{e}"),
        None => anyhow!("the agent answered {status}"),
    }
}

pub fn run(cmd: ClientCommand) -> anyhow::Result<ExitCode> {
    let runtime = tokio::runtime::Builder::new_current_thread()
        .enable_all()
        .build()
        .context("starting the async runtime")?;
    runtime.block_on(run_async(cmd))
}

fn print_json(v: &Value) {
    println!("{}", serde_json::to_string(v).unwrap_or_default());
}

fn print_tasks(tasks: &[Value]) {
    let rows: Vec<[String; 6]> = tasks
        .iter()
        .map(|t| {
            let s = |k: &str| t[k].as_str().unwrap_or("-").to_string();
            [
                s("task").chars().take(12).collect(),
                format!("{}:{}", s("family"), t["revision"]),
                s("known"),
                t["exitCode"].as_i64().map_or("-".into(), |c| c.to_string()),
                t["containers"].as_array().map_or(0, Vec::len).to_string(),
                s("stoppedReason"),
            ]
        })
        .collect();
    print!(
        "{}",
        table(
            &["TASK", "FAMILY", "STATUS", "EXIT", "CONTAINERS", "REASON"],
            &rows
        )
    );
}

fn print_task(t: &Value) {
    let s = |v: &Value| v.as_str().unwrap_or("-").to_string();
    println!(
        "task {} {}:{} {} (desired {}) — {}",
        s(&t["task"]),
        s(&t["family"]),
        t["revision"],
        s(&t["known"]),
        s(&t["desired"]),
        s(&t["stoppedReason"])
    );
    let rows: Vec<[String; 5]> = t["containers"]
        .as_array()
        .map(|cs| {
            cs.iter()
                .map(|c| {
                    [
                        s(&c["name"]),
                        s(&c["known"]),
                        c["exitCode"].as_i64().map_or("-".into(), |e| e.to_string()),
                        c["dockerId"]
                            .as_str()
                            .map_or("-".into(), |d| d.chars().take(12).collect()),
                        s(&c["reason"]),
                    ]
                })
                .collect()
        })
        .unwrap_or_default();
    print!(
        "{}",
        table(
            &["CONTAINER", "STATUS", "EXIT", "DOCKER ID", "REASON"],
            &rows
        )
    );
    if let Some(r) = t["cleanup"]["refused"].as_str() {
        println!("{r}");
    }
}

async fn run_async(cmd: ClientCommand) -> anyhow::Result<ExitCode> {
    match cmd {
        ClientCommand::Submit { file, wait, agent } => {
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
            let (status, v) = call(&agent.agent, Method::POST, "/v1/tasks", body).await?;
            if status == StatusCode::BAD_REQUEST {
                for p in v["problems"].as_array().into_iter().flatten() {
                    eprintln!("{}", p.as_str().unwrap_or_default());
                }
                return Ok(ExitCode::from(crate::input::EXIT_INVALID));
            }
            if status != StatusCode::CREATED {
                return Err(error_of(status, &v));
            }
            for w in v["warnings"].as_array().into_iter().flatten() {
                eprintln!("warning: {}", w.as_str().unwrap_or_default());
            }
            let id = v["task"].as_str().unwrap_or_default().to_string();
            match agent.output {
                Output::Json => print_json(&v),
                Output::Text => println!("{id}"),
            }
            if let Some(events) = events.as_mut() {
                wait_stopped(events, &id, agent.output).await?;
                let t = get_task(&agent, &id).await?;
                if agent.output == Output::Text {
                    print_task(&t);
                }
                let code = t["exitCode"].as_i64().unwrap_or(125);
                return Ok(ExitCode::from(u8::try_from(code).unwrap_or(125)));
            }
            Ok(ExitCode::SUCCESS)
        }
        ClientCommand::Ps { all, family, agent } => {
            let mut path = String::from("/v1/tasks");
            if let Some(f) = family {
                path.push_str(&format!("?family={f}"));
            }
            let (status, v) = call(&agent.agent, Method::GET, &path, vec![]).await?;
            if !status.is_success() {
                return Err(error_of(status, &v));
            }
            let tasks: Vec<Value> = v
                .as_array()
                .cloned()
                .unwrap_or_default()
                .into_iter()
                .filter(|t| all || t["known"] != "STOPPED")
                .collect();
            match agent.output {
                Output::Json => print_json(&Value::Array(tasks)),
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
            act(&agent, Method::POST, &path, &format!("stopping {task}")).await
        }
        ClientCommand::Rm { task, agent } => {
            let path = format!("/v1/tasks/{task}");
            act(&agent, Method::DELETE, &path, &format!("removing {task}")).await
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
            let c = v["containers"]
                .as_array()
                .and_then(|cs| cs.iter().find(|c| c["name"] == container.as_str()))
                .ok_or_else(|| anyhow!("task {task} has no container named {container}"))?;
            let id = c["dockerId"]
                .as_str()
                .ok_or_else(|| anyhow!("container {container} was never created: no logs"))?;
            let docker = berth_docker::connect(docker_host.as_deref())
                .await
                .context("connecting to the Docker Engine")?;
            let rt = berth_docker::DockerRuntime::new(docker);
            let mut logs = rt.logs(id, follow);
            while let Some(chunk) = logs.next().await {
                let (is_err, bytes) = chunk.context("reading the container's logs")?;
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
    }
}

/// One task as the agent shows it, or the agent's error.
async fn get_task(agent: &AgentArgs, task: &str) -> anyhow::Result<Value> {
    let (status, v) = call(
        &agent.agent,
        Method::GET,
        &format!("/v1/tasks/{task}"),
        vec![],
    )
    .await?;
    if !status.is_success() {
        return Err(error_of(status, &v));
    }
    Ok(v)
}

/// A request that changes something: print `done` on success, the agent's error otherwise.
async fn act(
    agent: &AgentArgs,
    method: Method,
    path: &str,
    done: &str,
) -> anyhow::Result<ExitCode> {
    let (status, v) = call(&agent.agent, method, path, vec![]).await?;
    if !status.is_success() {
        return Err(error_of(status, &v));
    }
    println!("{done}");
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
        let v: Value = serde_json::from_str(&line).unwrap_or(Value::Null);
        if v["task"] != id {
            continue;
        }
        if out == Output::Json {
            println!("{line}");
        }
        if v["event"] == "task" && v["known"] == "STOPPED" {
            return Ok(());
        }
    }
    bail!("the agent's event stream ended before task {id} stopped")
}
