//! The HTTP server: routes, handlers, listeners and shutdown.
//!
//! Routes: the container, `task`, `taskWithTags`, `stats` and `task/stats` under `/v4/<id>` and
//! `/v3/<id>` (the answers differ by [`Version`] as ECS's do).
//!
//! Each request resolves its id in the [`TaskDirectory`] (404 if unknown), takes a token from the
//! id's bucket (429 if none), reads the task's latest snapshot, and asks the runtime for the
//! dynamic details of the containers it shows. Details are cached per Docker id for a short time
//! (`details_ttl`) and re-read at once when the container's status or health changes; a container
//! whose details cannot be read is shown without them.

use crate::details::{DetailsCache, Keep};
use crate::lock;
use crate::metadata::directory::{Rendered, TaskDirectory, TaskEntry};
use crate::metadata::json::{self, TaskInfo, Version};
use crate::metadata::ratelimit::RateLimit;
use crate::metadata::{address, json::container_response};
use crate::serve::{ServerLimits, TcpServers};
use axum::Router;
use axum::body::Bytes;
use axum::extract::{FromRequestParts, Path, State};
use axum::http::request::Parts;
use axum::http::{StatusCode, header};
use axum::response::{IntoResponse, Response};
use axum::routing::get;
use berth_engine::runtime::{ContainerDetails, Runtime};
use berth_engine::spec::MetadataEndpoint;
use berth_engine::state::{Status, TaskState};
use berth_model::NetworkMode;
use serde::Serialize;
use std::collections::HashMap;
use std::net::{IpAddr, Ipv4Addr, SocketAddr};
use std::sync::{Arc, Mutex};
use std::time::{Duration, Instant};
use tokio::net::TcpListener;

/// What can go wrong starting the endpoint.
#[derive(Debug, thiserror::Error)]
pub enum MetadataError {
    // The errno is in the message and not also a `source`, so a chain printer shows it once.
    #[error("cannot listen on {addr}: {error}")]
    Listen {
        addr: SocketAddr,
        error: std::io::Error,
    },
    /// The main listener is up; the one on the Docker bridge's gateway (for bridge-mode
    /// containers) could not be opened. The agent goes on without it.
    #[error("cannot listen on the Docker bridge's gateway {addr}: {error}")]
    BridgeListen {
        addr: SocketAddr,
        error: std::io::Error,
    },
    #[error(
        "cannot find the Docker bridge's gateway address for bridge-mode containers: {0} (--metadata-advertise URL says where containers reach the endpoint instead)"
    )]
    BridgeGateway(String),
}

/// Settings of the endpoint.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct MetadataConfig {
    pub task: TaskInfo,
    /// Per metadata id.
    pub rate_limit: RateLimit,
    /// How long a container's Docker details are reused while its status and health stay the same.
    pub details_ttl: Duration,
    /// Connection bounds, each listener its own (docs/metadata.md).
    pub limits: ServerLimits,
}

impl Default for MetadataConfig {
    fn default() -> Self {
        MetadataConfig {
            task: TaskInfo::default(),
            rate_limit: RateLimit::ECS_DEFAULT,
            details_ttl: Duration::from_millis(500),
            limits: ServerLimits::METADATA,
        }
    }
}

/// Where to listen.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct Listen {
    /// The main listener, e.g. `127.0.0.1:51679` (port 0: any free port).
    pub addr: SocketAddr,
    /// The base URL containers are given instead of the listeners' addresses (no trailing `/`).
    /// When set, no bridge listener is started: the operator says where containers reach it.
    pub advertise: Option<String>,
    /// Also listen on the Docker bridge's gateway address (same port) for bridge-mode containers.
    pub bridge: bool,
}

struct NetSample {
    at: Instant,
    rx: u64,
    tx: u64,
}

struct Shared<R> {
    rt: Arc<R>,
    directory: Arc<TaskDirectory>,
    config: MetadataConfig,
    details: DetailsCache,
    net: Mutex<HashMap<String, NetSample>>,
}

/// The endpoint's routes over `directory` (for tests and for embedding in another server).
pub fn router<R: Runtime>(
    rt: Arc<R>,
    directory: Arc<TaskDirectory>,
    config: MetadataConfig,
) -> Router {
    let details = DetailsCache::new(
        Keep::WhileUnchanged {
            ttl: config.details_ttl,
        },
        "metadata",
    );
    let shared = Arc::new(Shared {
        rt,
        directory,
        config,
        details,
        net: Mutex::new(HashMap::new()),
    });
    let mut r = Router::new();
    for (v, version) in [("v4", Version::V4), ("v3", Version::V3)] {
        r = r
            .route(
                &format!("/{v}/{{id}}"),
                get(move |s, asked| container::<R>(s, asked, version)),
            )
            .route(
                &format!("/{v}/{{id}}/task"),
                get(move |s, asked| task::<R>(s, asked, version, false)),
            )
            .route(
                &format!("/{v}/{{id}}/taskWithTags"),
                get(move |s, asked| task::<R>(s, asked, version, true)),
            )
            .route(&format!("/{v}/{{id}}/stats"), get(container_stats::<R>))
            .route(&format!("/{v}/{{id}}/task/stats"), get(task_stats::<R>));
    }
    r.with_state(shared)
}

/// `body` as a JSON answer; the reason as a JSON string should it not encode.
fn json_response<T: Serialize + ?Sized>(status: StatusCode, body: &T) -> Response {
    crate::json_response(status, body, |why| why)
}

/// Why a request is refused before reading any task.
enum Refusal {
    UnknownId,
    RateLimited,
}

impl Refusal {
    fn response(&self, id: &str) -> Response {
        match self {
            Refusal::UnknownId => json_response(
                StatusCode::NOT_FOUND,
                &format!("unknown task metadata id: {id}"),
            ),
            Refusal::RateLimited => json_response(
                StatusCode::TOO_MANY_REQUESTS,
                "rate limit exceeded for this task metadata id",
            ),
        }
    }
}

/// What a request's `<id>` names: its task and container. Extracting it is the one place a
/// request is refused before any task is read: 404 for an unknown id, 429 over the id's rate
/// limit (a token is taken here).
struct Asked {
    entry: Arc<TaskEntry>,
    /// The container's index in the task.
    i: usize,
}

impl<R: Runtime> FromRequestParts<Arc<Shared<R>>> for Asked {
    type Rejection = Response;

    async fn from_request_parts(
        parts: &mut Parts,
        s: &Arc<Shared<R>>,
    ) -> Result<Self, Self::Rejection> {
        let Path(id) = Path::<String>::from_request_parts(parts, s)
            .await
            .map_err(IntoResponse::into_response)?;
        let (entry, i) = s
            .directory
            .lookup(&id)
            .ok_or_else(|| Refusal::UnknownId.response(&id))?;
        if !entry.admit(i, s.config.rate_limit) {
            return Err(Refusal::RateLimited.response(&id));
        }
        Ok(Asked { entry, i })
    }
}

async fn container<R: Runtime>(
    State(s): State<Arc<Shared<R>>>,
    Asked { entry, i }: Asked,
    version: Version,
) -> Response {
    let state = entry.snapshot();
    let d = s.details.get(&*s.rt, &state, i).await;
    let pause = match state.pause_index() {
        Some(p) if state.definition.network_mode == NetworkMode::Awsvpc => {
            s.details.get(&*s.rt, &state, p).await
        }
        _ => None,
    };
    json_response(
        StatusCode::OK,
        &container_response(
            &state,
            i,
            d.as_deref(),
            pause.as_deref(),
            &s.config.task,
            version,
        ),
    )
}

async fn task<R: Runtime>(
    State(s): State<Arc<Shared<R>>>,
    Asked { entry, .. }: Asked,
    version: Version,
    with_tags: bool,
) -> Response {
    let state = entry.snapshot();
    let all = futures_util::future::join_all(
        (0..state.containers.len()).map(|i| s.details.get(&*s.rt, &state, i)),
    )
    .await;
    // Identifies this server's rendering (another server may share the directory).
    let server = Arc::as_ptr(&s) as usize;
    let variant = (version, with_tags);
    let body = match entry.rendered_for(server, variant, &state, &all) {
        Some(body) => body,
        None => {
            let refs: Vec<Option<&ContainerDetails>> = all.iter().map(|d| d.as_deref()).collect();
            let answer = json::task_response(&state, &refs, &s.config.task, version, with_tags);
            let body = match serde_json::to_vec(&answer) {
                Ok(b) => Bytes::from(b),
                Err(e) => {
                    return json_response(
                        StatusCode::INTERNAL_SERVER_ERROR,
                        &format!("cannot encode the answer: {e}"),
                    );
                }
            };
            entry.store_rendered(Rendered {
                server,
                variant,
                state: state.clone(),
                details: all,
                body: body.clone(),
            });
            body
        }
    };
    (
        StatusCode::OK,
        [(header::CONTENT_TYPE, "application/json")],
        body,
    )
        .into_response()
}

/// Docker's stats of one running container plus `network_rate_stats`; None otherwise.
async fn stats_of<R: Runtime>(
    s: &Shared<R>,
    state: &TaskState,
    i: usize,
) -> Option<serde_json::Value> {
    let c = &state.containers[i];
    if c.known != Status::Running {
        return None;
    }
    let docker_id = c.docker_id.as_deref()?;
    match s.rt.stats(docker_id).await {
        Ok(mut v) => {
            add_network_rate(s, docker_id, &mut v);
            Some(v)
        }
        Err(e) => {
            tracing::debug!(container = %c.name, error = %e, "metadata: no stats");
            None
        }
    }
}

/// ECS's `network_rate_stats`: bytes per second received and sent on all interfaces since the
/// previous sample this endpoint read of the container (0 for the first).
fn add_network_rate<R>(s: &Shared<R>, docker_id: &str, stats: &mut serde_json::Value) {
    let Some(nets) = stats.get("networks").and_then(|n| n.as_object()) else {
        return;
    };
    let sum = |key: &str| -> u64 {
        nets.values()
            .filter_map(|n| n.get(key).and_then(serde_json::Value::as_u64))
            .sum()
    };
    let (rx, tx) = (sum("rx_bytes"), sum("tx_bytes"));
    let now = Instant::now();
    let prev = lock(&s.net).insert(docker_id.to_string(), NetSample { at: now, rx, tx });
    let (rx_rate, tx_rate) = match prev {
        Some(p) if now > p.at => {
            let dt = now.duration_since(p.at).as_secs_f64();
            #[allow(clippy::cast_precision_loss)]
            let rate = |a: u64, b: u64| a.saturating_sub(b) as f64 / dt;
            (rate(rx, p.rx), rate(tx, p.tx))
        }
        _ => (0.0, 0.0),
    };
    stats["network_rate_stats"] = serde_json::json!({
        "rx_bytes_per_sec": rx_rate,
        "tx_bytes_per_sec": tx_rate,
    });
}

async fn container_stats<R: Runtime>(
    State(s): State<Arc<Shared<R>>>,
    Asked { entry, i }: Asked,
) -> Response {
    let state = entry.snapshot();
    match stats_of(&s, &state, i).await {
        Some(v) => json_response(StatusCode::OK, &v),
        None => json_response(
            StatusCode::INTERNAL_SERVER_ERROR,
            &format!(
                "no stats for container {}: it is {}",
                state.containers[i].name, state.containers[i].known
            ),
        ),
    }
}

async fn task_stats<R: Runtime>(
    State(s): State<Arc<Shared<R>>>,
    Asked { entry, .. }: Asked,
) -> Response {
    let state = entry.snapshot();
    let created: Vec<usize> = (0..state.containers.len())
        .filter(|&i| state.containers[i].docker_id.is_some() && !state.is_pause(i))
        .collect();
    let all =
        futures_util::future::join_all(created.iter().map(|&i| stats_of(&s, &state, i))).await;
    let map: serde_json::Map<String, serde_json::Value> = created
        .iter()
        .zip(all)
        .filter_map(|(&i, v)| {
            let id = state.containers[i].docker_id.clone()?;
            Some((id, v.unwrap_or(serde_json::Value::Null)))
        })
        .collect();
    json_response(StatusCode::OK, &map)
}

/// A running endpoint: its listeners and the base URLs containers are given.
pub struct MetadataServer {
    endpoint: MetadataEndpoint,
    local_addrs: Vec<SocketAddr>,
    servers: TcpServers,
}

async fn bind(addr: SocketAddr) -> Result<TcpListener, MetadataError> {
    TcpListener::bind(addr)
        .await
        .map_err(|error| MetadataError::Listen { addr, error })
}

impl MetadataServer {
    /// Listen and serve `directory`'s tasks until [`MetadataServer::shutdown`].
    ///
    /// Base URLs: `listen.advertise` when given (for both network modes); otherwise host-mode
    /// containers get the main listener (`127.0.0.1` when it listens on all addresses), and with
    /// `listen.bridge` bridge-mode containers get the Docker bridge's gateway address on the same
    /// port — served by an additional listener unless the main one already covers it.
    pub async fn start<R: Runtime>(
        rt: Arc<R>,
        directory: Arc<TaskDirectory>,
        config: MetadataConfig,
        listen: Listen,
    ) -> Result<MetadataServer, MetadataError> {
        Self::start_with_routes(rt, directory, config, listen, Router::new()).await
    }

    /// Like [`MetadataServer::start`], also serving `extra` routes (the agent's `/metrics`) on the
    /// main listener only: the bridge listener, which every bridge-mode container can reach,
    /// serves the metadata routes alone (anything else is 404 there). When the main listener
    /// listens on all addresses, containers can reach it too, `extra` included.
    pub async fn start_with_routes<R: Runtime>(
        rt: Arc<R>,
        directory: Arc<TaskDirectory>,
        config: MetadataConfig,
        listen: Listen,
        extra: Router,
    ) -> Result<MetadataServer, MetadataError> {
        let main = bind(listen.addr).await?;
        let local = main.local_addr().map_err(|error| MetadataError::Listen {
            addr: listen.addr,
            error,
        })?;
        let host_ip = if local.ip().is_unspecified() {
            IpAddr::V4(Ipv4Addr::LOCALHOST)
        } else {
            local.ip()
        };
        let host_base = format!("http://{}", SocketAddr::new(host_ip, local.port()));
        let mut listeners = vec![main];
        let bridge_base = if listen.advertise.is_none() && listen.bridge {
            let gateway = IpAddr::V4(address::bridge_gateway(&*rt).await?);
            let addr = SocketAddr::new(gateway, local.port());
            if !local.ip().is_unspecified() && local.ip() != gateway {
                let bridge = TcpListener::bind(addr)
                    .await
                    .map_err(|error| MetadataError::BridgeListen { addr, error })?;
                listeners.push(bridge);
            }
            format!("http://{addr}")
        } else {
            host_base.clone()
        };
        let endpoint = match &listen.advertise {
            Some(url) => {
                let url = url.trim_end_matches('/').to_string();
                MetadataEndpoint {
                    bridge_base: url.clone(),
                    host_base: url,
                }
            }
            None => MetadataEndpoint {
                bridge_base,
                host_base,
            },
        };
        let limits = config.limits;
        let app = router(rt, directory, config);
        let main_app = app.clone().merge(extra);
        let mut local_addrs = Vec::new();
        let mut servers = TcpServers::new();
        for (i, l) in listeners.into_iter().enumerate() {
            if let Ok(a) = l.local_addr() {
                local_addrs.push(a);
            }
            // The main listener is first; the others (the bridge's) get no `extra` routes.
            let app = if i == 0 {
                main_app.clone()
            } else {
                app.clone()
            };
            servers.serve(l, app, limits, "metadata endpoint");
        }
        Ok(MetadataServer {
            endpoint,
            local_addrs,
            servers,
        })
    }

    /// The base URLs containers are given (`RunConfig.metadata`).
    pub fn endpoint(&self) -> &MetadataEndpoint {
        &self.endpoint
    }

    /// The addresses listened on (the main one first).
    pub fn local_addrs(&self) -> &[SocketAddr] {
        &self.local_addrs
    }

    /// Stop listening; open connections get 2 s to finish, then are dropped.
    pub async fn shutdown(self) {
        self.servers.shutdown().await;
    }
}
