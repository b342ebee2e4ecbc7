//! The introspection API's routes, lookups and listener.
//!
//! Every request reads the directory's task snapshots (no lock the engine uses) and, for the
//! containers it shows, their Docker details. Details are kept per Docker id once the container
//! has reached RUNNING (what the API shows of it — image id, mounts, the ports bound at start,
//! the task's address — does not change after that, and ECS too keeps the bindings it saw when a
//! container stops) and dropped when the container is no longer in any task; before RUNNING, or
//! when Docker cannot be asked, they are read again on the next request. At most
//! [`DETAIL_READS`] inspects run at once for one request.

use crate::details::{DetailsCache, Keep};
use crate::introspection::json::{self, AgentMetadataResponse, ErrorResponse, TasksResponse};
use crate::metadata::TaskDirectory;
use crate::serve::{ServerLimits, TcpServers};
use axum::Router;
use axum::extract::rejection::QueryRejection;
use axum::extract::{Query, State};
use axum::http::{StatusCode, Uri, header};
use axum::response::{IntoResponse, Response};
use axum::routing::get;
use berth_engine::Identity;
use berth_engine::retry::RetryPolicy;
use berth_engine::runtime::{ContainerDetails, Runtime};
use berth_engine::state::TaskState;
use berth_model::NetworkMode;
use futures_util::StreamExt as _;
use serde::Serialize;
use std::net::SocketAddr;
use std::sync::Arc;
use std::time::Duration;
use tokio::net::TcpListener;

/// Inspects one request runs at once (a listing of many new containers does not flood Docker).
pub const DETAIL_READS: usize = 16;

/// ECS's threshold: a `dockerid` longer than this is a full id, else a prefix.
const SHORT_ID_LEN: usize = 12;

/// The routes, as `GET /` lists them (ECS's `AvailableCommands`).
const COMMANDS: [&str; 3] = ["/v1/metadata", "/v1/tasks", "/license"];

/// Settings of the introspection API.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct IntrospectionConfig {
    /// `Cluster`, `ContainerInstanceArn`, and every task's `Arn`.
    pub identity: Identity,
    /// `Version`, in ECS's layout (`<name> - v<version> (<commit>)`): the binary decides it.
    pub version: String,
    /// The body of `GET /license`.
    pub license: String,
    /// Connection bounds of the listener.
    pub limits: ServerLimits,
}

impl Default for IntrospectionConfig {
    fn default() -> Self {
        IntrospectionConfig {
            identity: Identity::default(),
            version: String::new(),
            license: String::new(),
            limits: ServerLimits::METADATA,
        }
    }
}

struct Shared<R> {
    rt: Arc<R>,
    directory: Arc<TaskDirectory>,
    config: IntrospectionConfig,
    /// Details read once the container was RUNNING.
    details: DetailsCache,
}

/// The API's routes over `directory` (for tests, and for [`IntrospectionServer::start`]).
/// GET (and HEAD) only: another method is 405.
pub fn router<R: Runtime>(
    rt: Arc<R>,
    directory: Arc<TaskDirectory>,
    config: IntrospectionConfig,
) -> Router {
    let shared = Arc::new(Shared {
        rt,
        directory,
        config,
        details: DetailsCache::new(Keep::OnceRunning, "introspection"),
    });
    Router::new()
        .route("/", get(root))
        .route("/v1/metadata", get(metadata::<R>))
        .route("/v1/tasks", get(tasks::<R>))
        .route("/license", get(license::<R>))
        .fallback(unknown_path)
        .with_state(shared)
}

/// `body` as a JSON answer; ECS's empty task with the reason should it not encode.
fn json_response<T: Serialize + ?Sized>(status: StatusCode, body: &T) -> Response {
    crate::json_response(status, body, ErrorResponse::new)
}

#[derive(Serialize)]
struct Commands {
    #[serde(rename = "AvailableCommands")]
    available_commands: [&'static str; 3],
}

async fn root() -> Response {
    json_response(
        StatusCode::OK,
        &Commands {
            available_commands: COMMANDS,
        },
    )
}

/// ECS answers every other path with the list and 200; berth says 404 (the body is the same), so
/// a mistyped path is not taken for an answer.
async fn unknown_path(uri: Uri) -> Response {
    tracing::debug!(path = %uri.path(), "introspection: unknown path");
    json_response(
        StatusCode::NOT_FOUND,
        &Commands {
            available_commands: COMMANDS,
        },
    )
}

async fn metadata<R: Runtime>(State(s): State<Arc<Shared<R>>>) -> Response {
    json_response(
        StatusCode::OK,
        &AgentMetadataResponse::new(&s.config.identity, &s.config.version),
    )
}

async fn license<R: Runtime>(State(s): State<Arc<Shared<R>>>) -> Response {
    (
        StatusCode::OK,
        [(header::CONTENT_TYPE, "text/plain")],
        s.config.license.clone(),
    )
        .into_response()
}

/// What `/v1/tasks` was asked for.
enum Lookup {
    All,
    DockerId(String),
    TaskArn(String),
}

/// Why a lookup answers no task.
enum Miss {
    /// 400: both query parameters, or a prefix of containers of several tasks.
    BadRequest(String),
    /// 404.
    NotFound(String),
}

impl Miss {
    fn response(self) -> Response {
        match self {
            Miss::BadRequest(why) => {
                json_response(StatusCode::BAD_REQUEST, &ErrorResponse::new(why))
            }
            Miss::NotFound(why) => json_response(StatusCode::NOT_FOUND, &ErrorResponse::new(why)),
        }
    }
}

/// The lookup a query asks for. As ECS (Go's `url.Values`): a parameter counts when its name is
/// there, even without a value; the first value is taken; other parameters are ignored.
fn lookup(query: &[(String, String)]) -> Result<Lookup, Miss> {
    let first = |name: &str| {
        query
            .iter()
            .find(|(k, _)| k == name)
            .map(|(_, v)| v.clone())
    };
    match (first("dockerid"), first("taskarn")) {
        (Some(_), Some(_)) => Err(Miss::BadRequest(
            "request contains both dockerid and taskarn but expect at most one of these: ask for one"
                .to_string(),
        )),
        (Some(id), None) => Ok(Lookup::DockerId(id)),
        (None, Some(arn)) => Ok(Lookup::TaskArn(arn)),
        (None, None) => Ok(Lookup::All),
    }
}

/// The task a Docker id (more than 12 characters: the whole id) or prefix (12 or fewer) belongs
/// to. Every container with a Docker id counts, the pause container's too (as in ECS).
fn by_docker_id(tasks: &[Arc<TaskState>], key: &str) -> Result<Arc<TaskState>, Miss> {
    let full = key.len() > SHORT_ID_LEN;
    let matches = |id: &str| if full { id == key } else { id.starts_with(key) };
    let found: Vec<&Arc<TaskState>> = tasks
        .iter()
        .filter(|t| {
            t.containers
                .iter()
                .any(|c| c.docker_id.as_deref().is_some_and(matches))
        })
        .collect();
    match found.as_slice() {
        [one] => Ok((*one).clone()),
        [] if full => Err(Miss::NotFound(format!(
            "no task found with docker id {key}"
        ))),
        [] => Err(Miss::NotFound(format!(
            "no task found with a container whose docker id starts with {key}"
        ))),
        many => Err(Miss::BadRequest(format!(
            "multiple tasks found with short docker id {key} ({} tasks): give more characters, or the full id",
            many.len()
        ))),
    }
}

fn by_task_arn(
    tasks: &[Arc<TaskState>],
    identity: &Identity,
    arn: &str,
) -> Result<Arc<TaskState>, Miss> {
    tasks
        .iter()
        .find(|t| identity.task_arn(&t.id) == arn)
        .cloned()
        .ok_or_else(|| Miss::NotFound(format!("no task found with arn {arn}")))
}

async fn tasks<R: Runtime>(
    State(s): State<Arc<Shared<R>>>,
    query: Result<Query<Vec<(String, String)>>, QueryRejection>,
) -> Response {
    // A query that is not `application/x-www-form-urlencoded` has no parameter ECS knows.
    let query = query.map(|Query(q)| q).unwrap_or_default();
    let all = s.directory.snapshots();
    s.details.retain_live(&all);
    let wanted = match lookup(&query) {
        Ok(Lookup::All) => None,
        Ok(Lookup::DockerId(id)) => Some(by_docker_id(&all, &id)),
        Ok(Lookup::TaskArn(arn)) => Some(by_task_arn(&all, &s.config.identity, &arn)),
        Err(miss) => Some(Err(miss)),
    };
    match wanted {
        None => {
            let mut tasks = Vec::with_capacity(all.len());
            let details = details_of(&s, &all).await;
            for (state, d) in all.iter().zip(&details) {
                tasks.push(render(state, d, &s.config.identity));
            }
            json_response(StatusCode::OK, &TasksResponse { tasks })
        }
        Some(Ok(state)) => {
            let one = std::slice::from_ref(&state);
            let details = details_of(&s, one).await;
            let d = details.first().map(Vec::as_slice).unwrap_or_default();
            json_response(StatusCode::OK, &render(&state, d, &s.config.identity))
        }
        Some(Err(miss)) => miss.response(),
    }
}

fn render(
    state: &TaskState,
    details: &[Option<Arc<ContainerDetails>>],
    identity: &Identity,
) -> json::TaskResponse {
    let refs: Vec<Option<&ContainerDetails>> = details.iter().map(|d| d.as_deref()).collect();
    json::task_response(state, &refs, identity)
}

/// Whether container `i`'s details are needed: it is listed, or it is the pause container of an
/// `awsvpc` task (whose address every container shows).
fn wants_details(state: &TaskState, i: usize) -> bool {
    json::listed(state, i)
        || (state.is_pause(i) && state.definition.network_mode == NetworkMode::Awsvpc)
}

/// One task's details, by container index (None where not needed or not known).
type TaskDetails = Vec<Option<Arc<ContainerDetails>>>;

/// Each task's containers' details, `DETAIL_READS` reads at a time.
async fn details_of<R: Runtime>(s: &Shared<R>, tasks: &[Arc<TaskState>]) -> Vec<TaskDetails> {
    let wanted: Vec<(usize, usize)> = tasks
        .iter()
        .enumerate()
        .flat_map(|(t, state)| {
            (0..state.containers.len())
                .filter(move |&i| wants_details(state, i))
                .map(move |i| (t, i))
        })
        .collect();
    let read: Vec<(usize, usize, Option<Arc<ContainerDetails>>)> =
        futures_util::stream::iter(wanted)
            .map(|(t, i)| async move { (t, i, s.details.get(&*s.rt, &tasks[t], i).await) })
            .buffer_unordered(DETAIL_READS)
            .collect()
            .await;
    let mut out: Vec<TaskDetails> = tasks
        .iter()
        .map(|t| vec![None; t.containers.len()])
        .collect();
    for (t, i, d) in read {
        out[t][i] = d;
    }
    out
}

/// The running API. Dropping it leaves the listener running until the runtime ends; call
/// [`IntrospectionServer::shutdown`] to stop it.
pub struct IntrospectionServer {
    local_addr: Option<SocketAddr>,
    servers: TcpServers,
}

/// The waits between binds after a failed one (ECS: 1 s doubling to 1 min).
const BIND_RETRY: RetryPolicy = RetryPolicy {
    first: Duration::from_secs(1),
    max: Duration::from_secs(60),
};

impl IntrospectionServer {
    /// Listen on `addr` and serve `directory`'s tasks until [`IntrospectionServer::shutdown`].
    /// When `addr` cannot be bound (in use, not an address of this host), a warning says so and
    /// the bind is retried in the background, 1 s doubling to 1 min, as the ECS agent does: the
    /// API is a convenience for monitoring, never a reason not to run tasks.
    pub async fn start<R: Runtime>(
        rt: Arc<R>,
        directory: Arc<TaskDirectory>,
        config: IntrospectionConfig,
        addr: SocketAddr,
    ) -> IntrospectionServer {
        let limits = config.limits;
        let app = router(rt, directory, config);
        let first = TcpListener::bind(addr).await;
        let local_addr = first.as_ref().ok().and_then(|l| l.local_addr().ok());
        let mut servers = TcpServers::new();
        let stopped = servers.stopped();
        servers.spawn(async move {
            tokio::pin!(stopped);
            let mut attempt = first;
            let mut backoff = BIND_RETRY.backoff();
            let listener = loop {
                match attempt {
                    Ok(l) => break l,
                    Err(e) => {
                        let delay = backoff.next_delay();
                        tracing::warn!(
                            "cannot listen on {addr} for the introspection API: {e}; retrying in {}s \
                             (--introspection-addr ADDR chooses another address, off serves none)",
                            delay.as_secs()
                        );
                        tokio::select! {
                            () = tokio::time::sleep(delay) => {}
                            () = &mut stopped => return,
                        }
                        attempt = TcpListener::bind(addr).await;
                        if attempt.is_ok() {
                            tracing::info!(%addr, "introspection API listening");
                        }
                    }
                }
            };
            crate::serve::serve_tcp(listener, app, limits, stopped, "introspection API").await;
        });
        IntrospectionServer {
            local_addr,
            servers,
        }
    }

    /// The address listened on, when the first bind succeeded (None while retrying).
    pub fn local_addr(&self) -> Option<SocketAddr> {
        self.local_addr
    }

    /// Stop listening (or retrying); open connections get 2 s to finish, then are dropped.
    pub async fn shutdown(self) {
        self.servers.shutdown().await;
    }
}
