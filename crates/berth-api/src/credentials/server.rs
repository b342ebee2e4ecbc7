//! The endpoint's HTTP server: the credentials route (`/v2/credentials/<id>`) and ECS's task
//! metadata v2 (`/v2/metadata`, `/v2/stats`, each also `/<docker id>`), on one listener with the
//! bounds every berth listener has ([`crate::serve`]). Each request carries its peer's address
//! (the caller rule and v2's "which task is asking" both read it).
//!
//! v2 finds the caller's task by its source address, as ECS's v2 handlers do: the task one of
//! whose containers (or whose pause container) has that address. Host-mode tasks share the
//! host's addresses and are never found this way. The answers are berth's v3 renderings
//! ([`crate::metadata::json`]), which is what ECS's v2 and v3 share.

use super::audit::{AuditLog, Entry};
use super::caller;
use super::json::{CredentialsBody, DEFAULT_LIFETIME_MS, ErrorBody};
use crate::metadata::TaskDirectory;
use crate::metadata::json::{self as md, TaskInfo, Version};
use crate::serve::{ServerLimits, TcpServers};
use axum::Router;
use axum::extract::{ConnectInfo, FromRequestParts, Path, State};
use axum::http::request::Parts;
use axum::http::{StatusCode, header};
use axum::response::Response;
use axum::routing::get;
use berth_engine::roles::{RoleKind, RoleRequest, RoleSource, session_name};
use berth_engine::runtime::{ContainerDetails, Runtime};
use berth_engine::state::TaskState;
use berth_model::NetworkMode;
use berth_model::role::RoleArn;
use std::net::{IpAddr, SocketAddr};
use std::path::PathBuf;
use std::sync::Arc;
use tokio::net::TcpListener;

/// How long a request waits for the role source (a slow STS); then 500 saying so.
pub const SOURCE_TIMEOUT: std::time::Duration = std::time::Duration::from_secs(10);

/// Settings of the endpoint.
#[derive(Debug, Clone)]
pub struct CredentialsConfig {
    /// Cluster and ARNs (audit lines, v2 answers), and the partition and account a role *name*
    /// is completed with.
    pub task: TaskInfo,
    /// The audit log; None: off.
    pub audit_log: Option<PathBuf>,
    pub limits: ServerLimits,
}

/// What can go wrong starting the endpoint.
#[derive(Debug, thiserror::Error)]
pub enum CredentialsError {
    #[error("cannot listen on {addr} for the credentials endpoint: {error}")]
    Listen {
        addr: SocketAddr,
        error: std::io::Error,
    },
}

struct Shared<R> {
    rt: Arc<R>,
    directory: Arc<TaskDirectory>,
    source: Option<Arc<dyn RoleSource>>,
    task: TaskInfo,
    audit: AuditLog,
}

/// The endpoint's routes (for tests and embedding). A request without a peer address (not
/// served through [`crate::serve::serve_tcp_with_peers`]) counts as an unknown caller.
pub fn router<R: Runtime>(
    rt: Arc<R>,
    directory: Arc<TaskDirectory>,
    source: Option<Arc<dyn RoleSource>>,
    config: CredentialsConfig,
) -> Router {
    let audit = AuditLog::new(
        config.audit_log.clone(),
        config.task.identity.cluster.clone(),
        config.task.identity.container_instance_arn(),
    );
    let shared = Arc::new(Shared {
        rt,
        directory,
        source,
        task: config.task,
        audit,
    });
    Router::new()
        .route("/v2/credentials", get(no_id::<R>))
        .route("/v2/credentials/", get(no_id::<R>))
        .route("/v2/credentials/{*id}", get(credentials::<R>))
        .route("/v2/metadata", get(v2_task::<R>))
        .route("/v2/metadata/{id}", get(v2_container::<R>))
        .route("/v2/stats", get(v2_task_stats::<R>))
        .route("/v2/stats/{id}", get(v2_container_stats::<R>))
        .with_state(shared)
}

fn json<T: serde::Serialize + ?Sized>(status: StatusCode, body: &T) -> Response {
    crate::json_response(status, body, |why| ErrorBody::internal(&why))
}

/// Who is asking: the peer's address and user agent.
struct Caller {
    addr: Option<SocketAddr>,
    user_agent: Option<String>,
    path: String,
}

impl Caller {
    fn ip(&self) -> Option<IpAddr> {
        self.addr.map(|a| a.ip().to_canonical())
    }
}

impl<S: Send + Sync> FromRequestParts<S> for Caller {
    type Rejection = std::convert::Infallible;

    async fn from_request_parts(parts: &mut Parts, _: &S) -> Result<Self, Self::Rejection> {
        Ok(Caller {
            addr: parts
                .extensions
                .get::<ConnectInfo<SocketAddr>>()
                .map(|c| c.0),
            user_agent: parts
                .headers
                .get(header::USER_AGENT)
                .and_then(|v| v.to_str().ok())
                .map(str::to_string),
            path: parts.uri.path().to_string(),
        })
    }
}

impl<R> Shared<R> {
    fn audit(
        &self,
        caller: &Caller,
        status: StatusCode,
        task: Option<(&TaskState, RoleKind)>,
        refused: Option<&str>,
    ) {
        let arn = task.map(|(t, _)| self.task.identity.task_arn(&t.id));
        self.audit.record(&Entry {
            status: status.as_u16(),
            source: caller.addr,
            path: &caller.path,
            user_agent: caller.user_agent.as_deref(),
            task_arn: arn.as_deref(),
            kind: task.map(|(_, k)| k),
            refused,
        });
    }
}

async fn no_id<R: Runtime>(State(s): State<Arc<Shared<R>>>, caller: Caller) -> Response {
    s.audit(&caller, StatusCode::BAD_REQUEST, None, None);
    json(StatusCode::BAD_REQUEST, &ErrorBody::no_id())
}

/// Every IPv4 address Docker gives the task's containers (the pause container's included).
async fn addresses_of<R: Runtime>(rt: &R, state: &TaskState) -> Vec<IpAddr> {
    let details = futures_util::future::join_all(
        state
            .containers
            .iter()
            .filter_map(|c| c.docker_id.as_deref())
            .map(|id| rt.inspect_details(id)),
    )
    .await;
    details
        .into_iter()
        .filter_map(Result::ok)
        .flat_map(|d| d.networks)
        .flat_map(|n| n.ipv4_addresses)
        .filter_map(|a| a.parse::<IpAddr>().ok())
        .collect()
}

/// The registered task (not in host mode) one of whose containers has address `ip`.
async fn task_at<R: Runtime>(s: &Shared<R>, ip: IpAddr) -> Option<Arc<TaskState>> {
    for state in s.directory.snapshots() {
        if state.definition.network_mode == NetworkMode::Host {
            continue;
        }
        if addresses_of(&*s.rt, &state).await.contains(&ip) {
            return Some(state);
        }
    }
    None
}

async fn credentials<R: Runtime>(
    State(s): State<Arc<Shared<R>>>,
    caller: Caller,
    Path(id): Path<String>,
) -> Response {
    if id.is_empty() {
        return no_id(State(s), caller).await;
    }
    let Some((entry, kind)) = s.directory.lookup_credentials(&id) else {
        s.audit(&caller, StatusCode::BAD_REQUEST, None, None);
        return json(StatusCode::BAD_REQUEST, &ErrorBody::not_found());
    };
    let state = entry.snapshot();
    let mode = state.definition.network_mode;
    let ip = caller.ip();
    let own = match (kind, mode) {
        (RoleKind::Task, NetworkMode::Host) => Vec::new(),
        _ => addresses_of(&*s.rt, &state).await,
    };
    let is_container = match (kind, ip) {
        (RoleKind::Execution, Some(ip)) => task_at(&s, ip).await.is_some(),
        _ => false,
    };
    if let Err(why) = caller::judge(kind, mode, ip, &own, is_container) {
        s.audit(
            &caller,
            StatusCode::BAD_REQUEST,
            Some((&state, kind)),
            Some(&why),
        );
        return json(StatusCode::BAD_REQUEST, &ErrorBody::not_found());
    }
    let given = match kind {
        RoleKind::Task => state.definition.task_role_arn.as_deref(),
        RoleKind::Execution => state.definition.execution_role_arn.as_deref(),
    };
    let identity = &s.task.identity;
    let resolved = given
        .ok_or_else(|| "the task names no such role".to_string())
        .and_then(|g| RoleArn::resolve(g, &identity.partition, &identity.account));
    let answer = match (resolved, &s.source) {
        (Err(why), _) => Err(format!("role {}: {why}", given.unwrap_or("-"))),
        (Ok(arn), None) => Err(format!(
            "no credentials for role {arn}: this host has no role source (--task-role-dir, or AWS access)"
        )),
        (Ok(arn), Some(source)) => {
            let request = RoleRequest {
                role_arn: arn.to_string(),
                session_name: session_name(&state.definition.family, &state.id),
            };
            match tokio::time::timeout(SOURCE_TIMEOUT, source.credentials(&request)).await {
                Ok(answer) => answer.map_err(|e| e.to_string()),
                Err(_) => Err(format!(
                    "no credentials for role {arn}: {} did not answer within {} s",
                    source.describe(),
                    SOURCE_TIMEOUT.as_secs()
                )),
            }
        }
    };
    match answer {
        Ok(mut c) => {
            if c.expiration_ms <= 0 {
                c.expiration_ms = now_ms() + DEFAULT_LIFETIME_MS;
            }
            s.audit(&caller, StatusCode::OK, Some((&state, kind)), None);
            json(StatusCode::OK, &CredentialsBody::new(&c))
        }
        Err(why) => {
            tracing::warn!(task = %state.id, error = %why, "credentials endpoint: no credentials");
            s.audit(
                &caller,
                StatusCode::INTERNAL_SERVER_ERROR,
                Some((&state, kind)),
                None,
            );
            json(
                StatusCode::INTERNAL_SERVER_ERROR,
                &ErrorBody::internal(&why),
            )
        }
    }
}

fn now_ms() -> i64 {
    i64::try_from(
        std::time::SystemTime::now()
            .duration_since(std::time::UNIX_EPOCH)
            .map(|d| d.as_millis())
            .unwrap_or(0),
    )
    .unwrap_or(0)
}

/// The caller's task, or ECS's v2 error (400, a JSON string).
async fn caller_task<R: Runtime>(
    s: &Shared<R>,
    caller: &Caller,
) -> Result<Arc<TaskState>, Response> {
    let ip = caller.ip();
    let found = match ip {
        Some(ip) => task_at(s, ip).await,
        None => None,
    };
    found.ok_or_else(|| {
        let shown = ip.map_or_else(|| "-".to_string(), |i| i.to_string());
        json(
            StatusCode::BAD_REQUEST,
            &format!(
                "Unable to get task arn from request: unable to associate '{shown}' with task"
            ),
        )
    })
}

async fn all_details<R: Runtime>(rt: &R, state: &TaskState) -> Vec<Option<ContainerDetails>> {
    futures_util::future::join_all(state.containers.iter().map(|c| async move {
        match c.docker_id.as_deref() {
            Some(id) => rt.inspect_details(id).await.ok(),
            None => None,
        }
    }))
    .await
}

async fn v2_task<R: Runtime>(State(s): State<Arc<Shared<R>>>, caller: Caller) -> Response {
    let state = match caller_task(&s, &caller).await {
        Ok(t) => t,
        Err(r) => return r,
    };
    let details = all_details(&*s.rt, &state).await;
    let refs: Vec<Option<&ContainerDetails>> = details.iter().map(Option::as_ref).collect();
    json(
        StatusCode::OK,
        &md::task_response(&state, &refs, &s.task, Version::V3, false),
    )
}

/// The index of the task's (non-pause) container whose Docker id is `id`.
fn container_index(state: &TaskState, id: &str) -> Option<usize> {
    (0..state.containers.len())
        .find(|&i| !state.is_pause(i) && state.containers[i].docker_id.as_deref() == Some(id))
}

async fn v2_container<R: Runtime>(
    State(s): State<Arc<Shared<R>>>,
    caller: Caller,
    Path(id): Path<String>,
) -> Response {
    let state = match caller_task(&s, &caller).await {
        Ok(t) => t,
        Err(r) => return r,
    };
    let Some(i) = container_index(&state, &id) else {
        return json(
            StatusCode::BAD_REQUEST,
            &format!("Unable to generate metadata for container '{id}'"),
        );
    };
    let details = all_details(&*s.rt, &state).await;
    let pause = state
        .pause_index()
        .filter(|_| state.definition.network_mode == NetworkMode::Awsvpc)
        .and_then(|p| details[p].as_ref());
    json(
        StatusCode::OK,
        &md::container_response(&state, i, details[i].as_ref(), pause, &s.task, Version::V3),
    )
}

async fn v2_task_stats<R: Runtime>(State(s): State<Arc<Shared<R>>>, caller: Caller) -> Response {
    let state = match caller_task(&s, &caller).await {
        Ok(t) => t,
        Err(r) => return r,
    };
    let ids: Vec<String> = (0..state.containers.len())
        .filter(|&i| !state.is_pause(i))
        .filter_map(|i| state.containers[i].docker_id.clone())
        .collect();
    let all = futures_util::future::join_all(ids.iter().map(|id| s.rt.stats(id))).await;
    let map: serde_json::Map<String, serde_json::Value> = ids
        .into_iter()
        .zip(all)
        .map(|(id, v)| (id, v.unwrap_or(serde_json::Value::Null)))
        .collect();
    json(StatusCode::OK, &map)
}

async fn v2_container_stats<R: Runtime>(
    State(s): State<Arc<Shared<R>>>,
    caller: Caller,
    Path(id): Path<String>,
) -> Response {
    let state = match caller_task(&s, &caller).await {
        Ok(t) => t,
        Err(r) => return r,
    };
    let stats = match container_index(&state, &id) {
        Some(_) => s.rt.stats(&id).await.ok(),
        None => None,
    };
    match stats {
        Some(v) => json(StatusCode::OK, &v),
        None => json(
            StatusCode::BAD_REQUEST,
            &format!("Unable to get container stats for: {id}"),
        ),
    }
}

/// A running endpoint.
pub struct CredentialsServer {
    local_addr: SocketAddr,
    servers: TcpServers,
}

impl CredentialsServer {
    /// Listen on `addr` and serve `directory`'s tasks until [`CredentialsServer::shutdown`].
    pub async fn start<R: Runtime>(
        rt: Arc<R>,
        directory: Arc<TaskDirectory>,
        source: Option<Arc<dyn RoleSource>>,
        config: CredentialsConfig,
        addr: SocketAddr,
    ) -> Result<CredentialsServer, CredentialsError> {
        let listener = TcpListener::bind(addr)
            .await
            .map_err(|error| CredentialsError::Listen { addr, error })?;
        let local_addr = listener
            .local_addr()
            .map_err(|error| CredentialsError::Listen { addr, error })?;
        let limits = config.limits;
        let app = router(rt, directory, source, config);
        let mut servers = TcpServers::new();
        servers.serve_with_peers(listener, app, limits, "credentials endpoint");
        Ok(CredentialsServer {
            local_addr,
            servers,
        })
    }

    pub fn local_addr(&self) -> SocketAddr {
        self.local_addr
    }

    /// Stop listening; open connections get 2 s to finish, then are dropped.
    pub async fn shutdown(self) {
        self.servers.shutdown().await;
    }
}
