//! The plugin process: the instance lock, loading and recovering the state, the Unix socket
//! (replacing a stale one, refusing a live one), the HTTP/1 server, and a clean stop.
//!
//! Every call is `POST /<Method>` with a JSON body of at most [`MAX_BODY`] bytes. Answers are JSON
//! with content type `application/vnd.docker.plugins.v1.2+json`; a failure is `{"Err": "…"}` —
//! status 200 for an operation that failed (as dockerd expects), 400 for a malformed request, 404
//! for an unknown endpoint, 405 for a method other than POST, 413 for a body too large. A mutating
//! operation runs in its own task, so a client that hangs up mid-call cannot leave it half done.
//!
//! Stopping (the `shutdown` future resolves, e.g. on SIGTERM): stop accepting, remove the socket
//! (if it is still ours), let calls in flight finish (up to the grace period), return. Nothing is
//! unmounted: references held by running containers stay valid for the next start.

use std::collections::BTreeMap;
use std::convert::Infallible;
use std::ffi::OsString;
use std::fs::File;
use std::future::Future;
use std::os::unix::fs::PermissionsExt;
use std::path::{Path, PathBuf};
use std::sync::Arc;
use std::time::Duration;

use bytes::Bytes;
use http_body_util::{BodyExt, Full, Limited};
use hyper::body::Incoming;
use hyper::{Method, Request, Response, StatusCode};
use hyper_util::rt::TokioIo;
use rustix::fs::FlockOperation;
use serde::Serialize;
use tokio::net::UnixListener;

use crate::mounter::{Mounter, SystemMounter};
use crate::persist::{FileStore, Persister};
use crate::protocol;
use crate::recovery::RecoveryReport;
use crate::registry::Registry;
use crate::state::{self, Format};
use crate::{Error, Result};

/// The largest request body accepted (dockerd's are a few hundred bytes).
pub const MAX_BODY: usize = 1024 * 1024;

/// Everything `berth volume-plugin` is configured with.
#[derive(Debug, Clone)]
pub struct ServeConfig {
    pub socket: PathBuf,
    pub state_file: PathBuf,
    pub mount_root: PathBuf,
    pub mount_helper: OsString,
    /// How long the mount helper may run.
    pub mount_timeout: Duration,
    /// How long calls in flight may take to finish at stop.
    pub shutdown_grace: Duration,
}

impl ServeConfig {
    /// The defaults, with `socket`, `state_file` and `mount_root` given.
    pub fn new(socket: &Path, state_file: &Path, mount_root: &Path) -> ServeConfig {
        ServeConfig {
            socket: socket.to_path_buf(),
            state_file: state_file.to_path_buf(),
            mount_root: mount_root.to_path_buf(),
            mount_helper: crate::DEFAULT_MOUNT_HELPER.into(),
            mount_timeout: Duration::from_secs(90),
            shutdown_grace: Duration::from_secs(10),
        }
    }

    /// The lock file: the state file's path plus `.lock`.
    pub fn lock_file(&self) -> PathBuf {
        let mut p = self.state_file.clone().into_os_string();
        p.push(".lock");
        PathBuf::from(p)
    }
}

/// An exclusive `flock` on the lock file, held for the process's life.
#[derive(Debug)]
pub struct InstanceLock {
    _file: File,
}

impl InstanceLock {
    /// Take the lock or fail with [`Error::Locked`] at once.
    pub fn acquire(config: &ServeConfig) -> Result<InstanceLock> {
        let path = config.lock_file();
        let io = |op, source| Error::Io {
            op,
            path: path.clone(),
            source,
        };
        // Opened read-only (flock does not need more): a lock file open for writing would keep
        // the state directory's filesystem from being remounted read-only.
        let file = match File::open(&path) {
            Ok(file) => file,
            Err(e) if e.kind() == std::io::ErrorKind::NotFound => {
                File::create(&path).map_err(|e| io("creating lock file", e))?;
                File::open(&path).map_err(|e| io("opening lock file", e))?
            }
            Err(e) => return Err(io("opening lock file", e)),
        };
        match rustix::fs::flock(&file, FlockOperation::NonBlockingLockExclusive) {
            Ok(()) => Ok(InstanceLock { _file: file }),
            Err(rustix::io::Errno::WOULDBLOCK) => Err(Error::Locked {
                state: config.state_file.clone(),
                lock: path,
            }),
            Err(e) => Err(io("locking", e.into())),
        }
    }
}

/// A started plugin: locked, loaded, recovered and listening; [`Server::run`] serves.
pub struct Server {
    registry: Arc<Registry>,
    listener: UnixListener,
    socket: PathBuf,
    socket_id: berth_fs::socket::SocketId,
    grace: Duration,
    report: RecoveryReport,
    format: Format,
    _lock: InstanceLock,
}

impl std::fmt::Debug for Server {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("Server")
            .field("socket", &self.socket)
            .finish_non_exhaustive()
    }
}

impl Server {
    /// Start with the system mounter.
    pub async fn start(config: &ServeConfig) -> Result<Server> {
        let mounter = SystemMounter::new(config.mount_helper.clone(), config.mount_timeout);
        Server::start_with(config, Arc::new(mounter)).await
    }

    /// Start with a given mounter (tests).
    pub async fn start_with(config: &ServeConfig, mounter: Arc<dyn Mounter>) -> Result<Server> {
        if let Some(dir) = config
            .state_file
            .parent()
            .filter(|d| !d.as_os_str().is_empty())
        {
            std::fs::create_dir_all(dir).map_err(|source| Error::Io {
                op: "creating state directory",
                path: dir.to_path_buf(),
                source,
            })?;
        }
        let lock = InstanceLock::acquire(config)?;
        let loaded = state::load(&config.state_file, &config.mount_root)?;
        for warning in &loaded.warnings {
            tracing::warn!(state = %config.state_file.display(), "{warning}");
        }
        if !matches!(loaded.format, Format::Berth | Format::Missing) {
            tracing::warn!(state = %config.state_file.display(), format = ?loaded.format,
                "loaded the ECS volume plugin's state file; it will be rewritten in berth's format at the next change");
        }
        let persister: Arc<dyn Persister> = Arc::new(FileStore::new(&config.state_file));
        let registry = Arc::new(Registry::new(
            loaded.volumes,
            &config.mount_root,
            mounter,
            persister,
        )?);
        let report = registry.recover().await;
        let (listener, socket_id) = bind_socket(&config.socket)?;
        tracing::info!(socket = %config.socket.display(), state = %config.state_file.display(),
            mount_root = %config.mount_root.display(), "volume plugin listening");
        Ok(Server {
            registry,
            listener,
            socket: config.socket.clone(),
            socket_id,
            grace: config.shutdown_grace,
            report,
            format: loaded.format,
            _lock: lock,
        })
    }

    /// The registry being served.
    pub fn registry(&self) -> &Arc<Registry> {
        &self.registry
    }

    /// What recovery found at start.
    pub fn recovery(&self) -> &RecoveryReport {
        &self.report
    }

    /// The format the state file was loaded from.
    pub fn format(&self) -> Format {
        self.format
    }

    /// Serve until `shutdown` resolves; see the module documentation.
    pub async fn run(self, shutdown: impl Future<Output = ()>) -> Result<()> {
        let graceful = hyper_util::server::graceful::GracefulShutdown::new();
        tokio::pin!(shutdown);
        loop {
            let stream = tokio::select! {
                () = &mut shutdown => break,
                accepted = self.listener.accept() => match accepted {
                    Ok((stream, _)) => stream,
                    Err(e) => {
                        tracing::warn!(error = %e, "accept failed");
                        tokio::time::sleep(Duration::from_millis(50)).await;
                        continue;
                    }
                },
            };
            let registry = Arc::clone(&self.registry);
            let service = hyper::service::service_fn(move |req| {
                let registry = Arc::clone(&registry);
                async move { Ok::<_, Infallible>(respond(registry, req).await) }
            });
            let conn = hyper::server::conn::http1::Builder::new()
                .serve_connection(TokioIo::new(stream), service);
            let conn = graceful.watch(conn);
            tokio::spawn(async move {
                if let Err(e) = conn.await {
                    tracing::debug!(error = %e, "connection ended with an error");
                }
            });
        }
        tracing::info!("stopping: no longer accepting calls; nothing is unmounted");
        remove_own_socket(&self.socket, self.socket_id);
        if tokio::time::timeout(self.grace, graceful.shutdown())
            .await
            .is_err()
        {
            tracing::warn!("calls still in flight after the grace period; stopping anyway");
        }
        Ok(())
    }
}

/// Start and serve until `shutdown`.
pub async fn serve(config: &ServeConfig, shutdown: impl Future<Output = ()>) -> Result<()> {
    Server::start(config).await?.run(shutdown).await
}

/// Bind the plugin's socket (through `berth_fs::socket::claim`: a stale socket is replaced, a live
/// one or anything that is not a socket refused). Mode 0600: only root (dockerd) may call.
fn bind_socket(path: &Path) -> Result<(UnixListener, berth_fs::socket::SocketId)> {
    use berth_fs::socket::{Claimed, SocketError};
    let err = |reason: String| Error::Socket {
        path: path.to_path_buf(),
        reason,
    };
    match berth_fs::socket::claim(path) {
        Ok(Claimed::Free) => {}
        Ok(Claimed::ReplacedStale) => {
            tracing::warn!(socket = %path.display(), "replaced a stale socket");
        }
        Err(SocketError::InUse { .. }) => {
            return Err(err(
                "another process is serving on it (stop it first)".to_owned()
            ));
        }
        Err(SocketError::NotASocket { what, .. }) => {
            return Err(err(format!(
                "exists and is {what}, not a socket; refusing to replace it"
            )));
        }
        Err(e @ SocketError::Io { .. }) => return Err(err(e.to_string())),
    }
    let listener = UnixListener::bind(path).map_err(|e| err(format!("bind: {e}")))?;
    std::fs::set_permissions(path, std::fs::Permissions::from_mode(0o600))
        .map_err(|e| err(format!("chmod: {e}")))?;
    let id = berth_fs::socket::identity(path).map_err(|e| err(e.to_string()))?;
    Ok((listener, id))
}

/// Remove the socket file if it is still the one this process bound.
fn remove_own_socket(path: &Path, id: berth_fs::socket::SocketId) {
    if let Err(e) = berth_fs::socket::release(path, id) {
        tracing::warn!(socket = %path.display(), error = %e, "could not remove the socket");
    }
}

fn json<T: Serialize>(status: StatusCode, body: &T) -> Response<Full<Bytes>> {
    let bytes = serde_json::to_vec(body).unwrap_or_else(|e| {
        format!("{{\"Err\":{:?}}}", format!("cannot encode the answer: {e}")).into_bytes()
    });
    let mut resp = Response::new(Full::new(Bytes::from(bytes)));
    *resp.status_mut() = status;
    resp.headers_mut().insert(
        hyper::header::CONTENT_TYPE,
        hyper::header::HeaderValue::from_static(protocol::CONTENT_TYPE),
    );
    resp
}

fn err(status: StatusCode, message: impl Into<String>) -> Response<Full<Bytes>> {
    json(
        status,
        &protocol::ErrResponse {
            err: message.into(),
        },
    )
}

/// Decode the request body, or answer 400 with serde's message (which names a missing field).
macro_rules! parse_or_400 {
    ($ty:ty, $path:expr, $body:expr) => {
        match serde_json::from_slice::<$ty>($body) {
            Ok(request) => request,
            Err(e) => {
                return err(
                    StatusCode::BAD_REQUEST,
                    format!("malformed request to {}: {e}", $path),
                );
            }
        }
    };
}

/// Run a registry operation in its own task: a client hanging up cannot cancel it halfway.
async fn detached<T: Send + 'static>(
    op: impl Future<Output = Result<T>> + Send + 'static,
) -> Result<T> {
    tokio::spawn(op)
        .await
        .unwrap_or_else(|e| Err(Error::Remote(format!("the operation failed: {e}"))))
}

async fn respond(registry: Arc<Registry>, req: Request<Incoming>) -> Response<Full<Bytes>> {
    let path = req.uri().path().to_owned();
    if req.method() != Method::POST {
        return err(StatusCode::METHOD_NOT_ALLOWED, format!("{path}: use POST"));
    }
    let body = match Limited::new(req.into_body(), MAX_BODY).collect().await {
        Ok(collected) => collected.to_bytes(),
        Err(e) if e.is::<http_body_util::LengthLimitError>() => {
            return err(
                StatusCode::PAYLOAD_TOO_LARGE,
                format!("request body larger than {MAX_BODY} bytes"),
            );
        }
        Err(e) => return err(StatusCode::BAD_REQUEST, format!("reading the request: {e}")),
    };
    dispatch(&registry, &path, &body).await
}

async fn dispatch(registry: &Arc<Registry>, path: &str, body: &[u8]) -> Response<Full<Bytes>> {
    use protocol::*;
    let ok = StatusCode::OK;
    let fail = |e: Error| err(ok, e.to_string());
    match path {
        endpoint::ACTIVATE => json(
            ok,
            &ActivateResponse {
                implements: vec!["VolumeDriver".into()],
            },
        ),
        endpoint::CAPABILITIES => json(
            ok,
            &CapabilitiesResponse {
                capabilities: Capabilities {
                    scope: "local".into(),
                },
            },
        ),
        endpoint::LIST => json(
            ok,
            &ListResponse {
                volumes: registry.list(),
                err: String::new(),
            },
        ),
        endpoint::CREATE => {
            let r = parse_or_400!(CreateRequest, path, body);
            let opts: BTreeMap<String, String> = r.opts.unwrap_or_default();
            let name = r.name.clone();
            let reg = Arc::clone(registry);
            match detached(async move { reg.create(&name, opts).await }).await {
                Ok(()) => json(ok, &ErrResponse::default()),
                Err(e) => {
                    tracing::warn!(volume = %r.name, error = %e, "create failed");
                    fail(e)
                }
            }
        }
        endpoint::REMOVE => {
            let r = parse_or_400!(NameRequest, path, body);
            let name = r.name.clone();
            let reg = Arc::clone(registry);
            match detached(async move { reg.remove(&name).await }).await {
                Ok(()) => json(ok, &ErrResponse::default()),
                Err(e) => {
                    tracing::warn!(volume = %r.name, error = %e, "remove failed");
                    fail(e)
                }
            }
        }
        endpoint::MOUNT => {
            let r = parse_or_400!(MountRequest, path, body);
            let (name, id) = (r.name.clone(), r.id.clone());
            let reg = Arc::clone(registry);
            match detached(async move { reg.mount(&name, &id).await }).await {
                Ok(p) => json(
                    ok,
                    &MountpointResponse {
                        mountpoint: p.to_string_lossy().into_owned(),
                        err: String::new(),
                    },
                ),
                Err(e) => {
                    tracing::warn!(volume = %r.name, id = %r.id, error = %e, "mount failed");
                    fail(e)
                }
            }
        }
        endpoint::UNMOUNT => {
            let r = parse_or_400!(MountRequest, path, body);
            let (name, id) = (r.name.clone(), r.id.clone());
            let reg = Arc::clone(registry);
            match detached(async move { reg.unmount(&name, &id).await }).await {
                Ok(()) => json(ok, &ErrResponse::default()),
                Err(e) => {
                    tracing::warn!(volume = %r.name, id = %r.id, error = %e, "unmount failed");
                    fail(e)
                }
            }
        }
        endpoint::RELEASE => {
            let r = parse_or_400!(ReleaseRequest, path, body);
            let (name, id, count) = (r.name.clone(), r.id.clone(), r.count);
            let reg = Arc::clone(registry);
            match detached(async move { reg.release(&name, &id, count).await }).await {
                Ok(rel) => json(
                    ok,
                    &ReleaseResponse {
                        released: rel.released,
                        remaining: rel.remaining,
                        unmounted: rel.unmounted,
                        err: String::new(),
                    },
                ),
                Err(e) => fail(e),
            }
        }
        endpoint::PATH => {
            let r = parse_or_400!(NameRequest, path, body);
            match registry.path(&r.name) {
                Ok(p) => json(
                    ok,
                    &MountpointResponse {
                        mountpoint: p.to_string_lossy().into_owned(),
                        err: String::new(),
                    },
                ),
                Err(e) => fail(e),
            }
        }
        endpoint::GET => {
            let r = parse_or_400!(NameRequest, path, body);
            match registry.get(&r.name) {
                Ok(v) => json(
                    ok,
                    &GetResponse {
                        volume: Some(v),
                        err: String::new(),
                    },
                ),
                Err(e) => fail(e),
            }
        }
        other => err(
            StatusCode::NOT_FOUND,
            format!("unknown endpoint {other} (this is a VolumeDriver plugin)"),
        ),
    }
}
