//! Pulling images: concurrent pulls of one reference merged into one, retries with backoff, and
//! progress.
//!
//! - [`Pulls`]: the pulls in flight, by image reference and registry login. A second request for
//!   an image that is being pulled with the same login (or both anonymously) joins the first (a
//!   shared future) and gets its result; a request with another login pulls on its own, so a
//!   refused login never answers for an accepted one, nor the other way round. Only the first
//!   request's progress sink is fed. The entry is removed when the pull ends, so a later request
//!   pulls again. A request that is dropped (its task stopped) stops waiting; when the last one
//!   waiting for a pull is dropped, the pull itself is dropped (its request to Docker closed, so
//!   the Engine stops pulling) and its entry removed.
//! - The login goes to Docker as `X-Registry-Auth`. A refused login (or none where the registry
//!   wants one) is permanent: its message is the registry's, followed by which login berth sent
//!   (user, registry, where berth found it; never the secret) or that it found none.
//! - A pull is bounded as a whole (`Timeouts::pull`, all retries included) and per attempt by
//!   inactivity (`Timeouts::pull_inactivity`: no message on the stream for that long aborts the
//!   attempt, retriably).
//! - Retriable failures (see [`crate::errors::pull_error`]) are retried up to
//!   [`PullRetry::attempts`] times, with exponential backoff and jitter between attempts (a
//!   `backon` loop on the engine's one schedule, `berth_engine::retry`); a permanent failure ends
//!   the pull at once.
//! - [`LayerProgress`] sums the per-layer progress of Docker's pull stream for the sink.
//! - [`split_reference`]: `repo[:tag][@digest]` into `fromImage` and `tag`, by the engine's
//!   reference parser (`berth_engine::image_ref`).

use backon::{ExponentialBuilder, Retryable};
use berth_engine::image_ref::{DEFAULT_TAG, ImageRef};
use berth_engine::retry::RetryPolicy;
use berth_engine::runtime::{ProgressSink, PullProgress, RegistryAuth, RuntimeError};
use bollard::Docker;
use bollard::auth::DockerCredentials;
use bollard::query_parameters::CreateImageOptionsBuilder;
use futures_util::future::{BoxFuture, FutureExt, Shared};
use futures_util::stream::StreamExt;
use std::collections::HashMap;
use std::sync::atomic::{AtomicU64, Ordering};
use std::sync::{Arc, Mutex};
use std::time::Duration;

use crate::errors::pull_error;

/// How pulls are retried.
#[derive(Debug, Clone, Copy)]
pub struct PullRetry {
    /// Attempts in all (ECS: 5).
    pub attempts: u32,
    pub min_backoff: Duration,
    pub max_backoff: Duration,
}

impl PullRetry {
    /// The waits between attempts, `attempts - 1` of them: `min_backoff` doubling to
    /// `max_backoff`, each scaled by a random factor in [0.5, 1). backon's jitter adds a random
    /// 0–100 % to a wait, so its schedule runs at half those values: the same range.
    fn schedule(&self) -> ExponentialBuilder {
        RetryPolicy {
            first: self.min_backoff / 2,
            max: self.max_backoff / 2,
        }
        .exponential()
        .with_jitter()
        .with_max_times(usize::try_from(self.attempts.saturating_sub(1)).unwrap_or(usize::MAX))
    }
}

impl Default for PullRetry {
    fn default() -> Self {
        PullRetry {
            attempts: 5,
            min_backoff: Duration::from_millis(1100),
            max_backoff: Duration::from_secs(5),
        }
    }
}

type PullFuture = Shared<BoxFuture<'static, Result<(), RuntimeError>>>;

/// What a pull in flight is known by: the reference and the login it is made with (the whole
/// login, so two logins never share a pull; the key is in memory only, as the login is).
type PullKey = (String, Option<RegistryAuth>);

/// One pull in flight: its shared future, how many requests wait for it, and its number (so a
/// later pull of the same key is never removed in its place).
struct InFlight {
    future: PullFuture,
    waiters: usize,
    id: u64,
}

type Table = Arc<Mutex<HashMap<PullKey, InFlight>>>;

/// The pulls in flight, by image reference and login: a second request for the same image with
/// the same login joins the first. Cheap to clone (clones share the table).
#[derive(Clone, Default)]
pub(crate) struct Pulls(Table);

/// Pull numbers, for [`InFlight::id`].
static NEXT_PULL: AtomicU64 = AtomicU64::new(1);

/// One request waiting for a pull; dropping the last one drops the pull (see the module docs).
struct Waiter {
    table: Table,
    key: PullKey,
    id: u64,
}

impl Drop for Waiter {
    fn drop(&mut self) {
        let removed = {
            let mut pulls = self.table.lock().unwrap_or_else(|e| e.into_inner());
            match pulls.get_mut(&self.key) {
                Some(p) if p.id == self.id => {
                    p.waiters = p.waiters.saturating_sub(1);
                    if p.waiters == 0 {
                        pulls.remove(&self.key)
                    } else {
                        None
                    }
                }
                _ => None,
            }
        };
        // Dropped outside the lock: the last clone of a pull's future drops the pull.
        drop(removed);
    }
}

impl Pulls {
    /// Pull `image` with `auth` (or join its pull in flight with the same login): at most
    /// `overall` in all, each attempt aborted after `inactivity` without progress, retried as
    /// `retry` says.
    #[allow(clippy::too_many_arguments)]
    pub(crate) async fn pull(
        &self,
        docker: &Docker,
        engine: &Arc<str>,
        image: &str,
        auth: Option<&RegistryAuth>,
        retry: PullRetry,
        inactivity: Duration,
        overall: Duration,
        progress: Option<ProgressSink>,
    ) -> Result<(), RuntimeError> {
        let (fut, _waiter) = {
            let mut pulls = self.0.lock().unwrap_or_else(|e| e.into_inner());
            let key: PullKey = (image.to_string(), auth.cloned());
            if let Some(p) = pulls.get_mut(&key) {
                p.waiters += 1;
                let waiter = Waiter {
                    table: Arc::clone(&self.0),
                    key,
                    id: p.id,
                };
                (p.future.clone(), waiter)
            } else {
                let id = NEXT_PULL.fetch_add(1, Ordering::Relaxed);
                let (docker, img) = (docker.clone(), image.to_string());
                let engine = Arc::clone(engine);
                let pulls_map = Arc::clone(&self.0);
                let auth = auth.cloned();
                let entry = key.clone();
                let f = async move {
                    let r = match tokio::time::timeout(
                        overall,
                        pull_with_retries(
                            docker,
                            &engine,
                            img.clone(),
                            auth,
                            retry,
                            inactivity,
                            progress,
                        ),
                    )
                    .await
                    {
                        Ok(r) => r,
                        Err(_) => Err(RuntimeError::PullFailed {
                            image: img.clone(),
                            message: format!(
                                "pull of {img} did not finish within {}s",
                                overall.as_secs()
                            ),
                            retriable: false,
                        }),
                    };
                    let done = {
                        let mut pulls = pulls_map.lock().unwrap_or_else(|e| e.into_inner());
                        match pulls.get(&entry) {
                            Some(p) if p.id == id => pulls.remove(&entry),
                            _ => None,
                        }
                    };
                    // This future's own entry (its clone is dropped outside the lock; the pull
                    // goes on for the requests that hold theirs).
                    drop(done);
                    r
                }
                .boxed()
                .shared();
                pulls.insert(
                    key.clone(),
                    InFlight {
                        future: f.clone(),
                        waiters: 1,
                        id,
                    },
                );
                let waiter = Waiter {
                    table: Arc::clone(&self.0),
                    key,
                    id,
                };
                (f, waiter)
            }
        };
        fut.await
    }
}

/// The attempts of one pull: retriable failures are retried on [`PullRetry::schedule`], up to
/// `retry.attempts` in all; the last error is returned. Every failure is logged.
async fn pull_with_retries(
    docker: Docker,
    engine: &str,
    image: String,
    auth: Option<RegistryAuth>,
    retry: PullRetry,
    inactivity: Duration,
    progress: Option<ProgressSink>,
) -> Result<(), RuntimeError> {
    let (docker, image, auth, progress) =
        (&docker, image.as_str(), auth.as_ref(), progress.as_ref());
    let mut attempt = 0u32;
    let once = move || {
        attempt += 1;
        let n = attempt;
        async move {
            let r = pull_once(docker, engine, image, auth, inactivity, progress).await;
            if let Err(e) = &r {
                tracing::warn!(%image, attempt = n, error = %e, retriable = retriable(e), "pull failed");
            }
            r
        }
    };
    once.retry(retry.schedule())
        .sleep(tokio::time::sleep)
        .when(retriable)
        .await
}

fn retriable(e: &RuntimeError) -> bool {
    matches!(
        e,
        RuntimeError::PullFailed {
            retriable: true,
            ..
        }
    )
}

/// Per-layer progress of one pull, summed for the progress sink.
#[derive(Default)]
struct LayerProgress {
    layers: HashMap<String, (u64, u64, bool)>,
}

impl LayerProgress {
    /// Fold one message of the pull stream in; returns the new sum when it changed.
    fn update(&mut self, info: &bollard::models::CreateImageInfo) -> Option<PullProgress> {
        let id = info.id.as_deref()?;
        let status = info.status.as_deref().unwrap_or_default();
        // Layer lines carry a short hex id; the first line ("Pulling from ...") carries the tag.
        if id.len() != 12 || !id.bytes().all(|b| b.is_ascii_hexdigit()) {
            return None;
        }
        let entry = self.layers.entry(id.to_string()).or_default();
        if let Some(d) = &info.progress_detail
            && status.starts_with("Downloading")
        {
            entry.0 = u64::try_from(d.current.unwrap_or(0)).unwrap_or(0);
            entry.1 = u64::try_from(d.total.unwrap_or(0)).unwrap_or(0);
        }
        if status == "Download complete" {
            entry.0 = entry.1;
        }
        if status == "Pull complete" || status == "Already exists" {
            entry.2 = true;
        }
        let layers = u32::try_from(self.layers.len()).unwrap_or(u32::MAX);
        Some(PullProgress {
            layers,
            layers_done: u32::try_from(self.layers.values().filter(|l| l.2).count())
                .unwrap_or(layers),
            bytes: self.layers.values().map(|l| l.0).sum(),
            bytes_total: self.layers.values().map(|l| l.1).sum(),
        })
    }
}

/// One pull attempt, aborted when the stream shows no progress for `inactivity`.
async fn pull_once(
    docker: &Docker,
    engine: &str,
    image: &str,
    auth: Option<&RegistryAuth>,
    inactivity: Duration,
    progress: Option<&ProgressSink>,
) -> Result<(), RuntimeError> {
    let mut layers = LayerProgress::default();
    let (from_image, tag) = split_reference(image);
    let mut opts = CreateImageOptionsBuilder::default().from_image(from_image);
    if let Some(tag) = tag {
        opts = opts.tag(tag);
    }
    let mut stream = docker.create_image(Some(opts.build()), None, auth.map(credentials));
    loop {
        match tokio::time::timeout(inactivity, stream.next()).await {
            Err(_) => {
                return Err(RuntimeError::PullFailed {
                    image: image.to_string(),
                    message: format!(
                        "pull of {image} made no progress for {}s",
                        inactivity.as_secs()
                    ),
                    retriable: true,
                });
            }
            Ok(None) => return Ok(()),
            Ok(Some(Ok(info))) => {
                if let (Some(sink), Some(p)) = (progress, layers.update(&info)) {
                    let _ = sink.send(p);
                }
            }
            Ok(Some(Err(e))) => {
                return Err(explain_refusal(pull_error(engine, image, e), image, auth));
            }
        }
    }
}

/// The login as Docker's `X-Registry-Auth` wants it.
fn credentials(auth: &RegistryAuth) -> DockerCredentials {
    let non_empty = |s: &str| (!s.is_empty()).then(|| s.to_string());
    DockerCredentials {
        username: non_empty(&auth.username),
        password: non_empty(&auth.password),
        identitytoken: auth.identity_token.clone(),
        serveraddress: non_empty(&auth.server),
        ..Default::default()
    }
}

/// A registry's refusal (Docker's words for it: `unauthorized: …`, `no basic auth credentials`,
/// `denied: …`), with which login berth sent, or that it found none, appended. Other errors are
/// returned as they are.
fn explain_refusal(e: RuntimeError, image: &str, auth: Option<&RegistryAuth>) -> RuntimeError {
    let RuntimeError::PullFailed {
        image: img,
        message,
        retriable: false,
    } = e
    else {
        return e;
    };
    if !crate::errors::is_auth_refusal(&message) {
        return RuntimeError::PullFailed {
            image: img,
            message,
            retriable: false,
        };
    }
    let host = crate::auth::registry_host(image);
    let said = match auth {
        Some(a) if a.username.is_empty() => {
            format!("berth sent an identity token for {host} from {}", a.source)
        }
        Some(a) => format!(
            "berth sent the login of user {:?} for {host} from {}",
            a.username, a.source
        ),
        None => format!(
            "berth found no login for {host}: give one with repositoryCredentials, ECS_ENGINE_AUTH_TYPE/ECS_ENGINE_AUTH_DATA or the Docker config file (--docker-config)"
        ),
    };
    RuntimeError::PullFailed {
        image: img,
        message: format!("{message} ({said})"),
        retriable: false,
    }
}

/// Split `repo[:tag][@digest]` into the `fromImage` and `tag` parameters of `POST /images/create`,
/// by the engine's one reference parser ([`ImageRef`]): the name as written and the tag (`latest`
/// when none is given; a registry port, `host:5000/repo`, is not a tag), or the whole reference
/// and no tag when it has a digest. Validity is the Engine's to judge (it refuses with its words).
pub fn split_reference(image: &str) -> (&str, Option<&str>) {
    let r = ImageRef::split(image);
    if r.digest().is_some() {
        return (image, None);
    }
    let tag = match r.tag() {
        // The tag is the end of `image`, after the name and a colon.
        Some(t) => image.get(image.len() - t.len()..).unwrap_or(DEFAULT_TAG),
        None => DEFAULT_TAG,
    };
    (r.written_name(image), Some(tag))
}

#[cfg(test)]
mod tests {
    use super::*;

    fn login(user: &str) -> RegistryAuth {
        RegistryAuth {
            username: user.into(),
            password: "hunter2".into(),
            identity_token: None,
            server: "127.0.0.1:5001".into(),
            source: "ECS_ENGINE_AUTH_DATA".into(),
        }
    }

    #[test]
    fn a_refusal_says_which_login_was_sent_and_never_the_secret() {
        let refused = || RuntimeError::PullFailed {
            image: "127.0.0.1:5001/p:1".into(),
            message: "unauthorized: authentication required".into(),
            retriable: false,
        };
        let e = explain_refusal(refused(), "127.0.0.1:5001/p:1", Some(&login("alice")));
        assert_eq!(
            e.to_string(),
            "unauthorized: authentication required (berth sent the login of user \"alice\" for 127.0.0.1:5001 from ECS_ENGINE_AUTH_DATA)"
        );
        assert!(!e.to_string().contains("hunter2"));
        let e = explain_refusal(refused(), "127.0.0.1:5001/p:1", None);
        assert!(
            e.to_string().starts_with(
                "unauthorized: authentication required (berth found no login for 127.0.0.1:5001: "
            ),
            "{e}"
        );
        // Not a refusal: unchanged.
        let missing = RuntimeError::PullFailed {
            image: "x".into(),
            message: "manifest unknown".into(),
            retriable: false,
        };
        assert_eq!(explain_refusal(missing.clone(), "x", None), missing);
    }

    #[test]
    fn credentials_carry_the_login_or_the_token() {
        let c = credentials(&login("alice"));
        assert_eq!(c.username.as_deref(), Some("alice"));
        assert_eq!(c.password.as_deref(), Some("hunter2"));
        assert_eq!(c.serveraddress.as_deref(), Some("127.0.0.1:5001"));
        let token = RegistryAuth {
            username: String::new(),
            password: String::new(),
            identity_token: Some("tok".into()),
            ..login("")
        };
        let c = credentials(&token);
        assert_eq!(
            (c.username, c.identitytoken.as_deref()),
            (None, Some("tok"))
        );
    }

    #[tokio::test]
    async fn pulls_with_different_logins_are_not_merged() {
        // Two entries in flight for one image, one per login: nothing shares a result. The
        // table is filled by hand with futures that never finish (no Docker needed).
        let pulls = Pulls::default();
        let pending = || InFlight {
            future: futures_util::future::pending().boxed().shared(),
            waiters: 1,
            id: 0,
        };
        {
            let mut t = pulls.0.lock().unwrap_or_else(|e| e.into_inner());
            t.insert(("i".into(), Some(login("alice"))), pending());
            t.insert(("i".into(), Some(login("mallory"))), pending());
            t.insert(("i".into(), None), pending());
            assert_eq!(t.len(), 3);
            assert!(t.contains_key(&("i".to_string(), Some(login("alice")))));
            let mut other_password = login("alice");
            other_password.password = "wrong".into();
            assert!(!t.contains_key(&("i".to_string(), Some(other_password))));
        }
    }

    #[tokio::test]
    async fn a_pull_nobody_waits_for_any_more_is_dropped_with_its_request() {
        use tokio::io::AsyncReadExt;
        // An Engine that accepts the pull and never answers; it reports each connection closed.
        let dir = tempfile::tempdir().expect("tmp");
        let path = dir.path().join("hang.sock");
        let listener = tokio::net::UnixListener::bind(&path).expect("bind");
        let (closed_tx, mut closed_rx) = tokio::sync::mpsc::unbounded_channel::<()>();
        tokio::spawn(async move {
            while let Ok((mut conn, _)) = listener.accept().await {
                let tx = closed_tx.clone();
                tokio::spawn(async move {
                    let mut buf = [0u8; 4096];
                    while matches!(conn.read(&mut buf).await, Ok(n) if n > 0) {}
                    let _ = tx.send(());
                });
            }
        });
        let docker =
            Docker::connect_with_host(&format!("unix://{}", path.display())).expect("client");
        let engine: Arc<str> = "unix://hang".into();
        let pulls = Pulls::default();
        let start = || {
            let (p, d, e) = (pulls.clone(), docker.clone(), Arc::clone(&engine));
            tokio::spawn(async move {
                let minute = Duration::from_secs(60);
                p.pull(
                    &d,
                    &e,
                    "img:1",
                    None,
                    PullRetry::default(),
                    minute,
                    minute,
                    None,
                )
                .await
            })
        };
        let waiters = || {
            let t = pulls.0.lock().unwrap_or_else(|e| e.into_inner());
            t.values().map(|p| p.waiters).collect::<Vec<_>>()
        };
        let (a, b) = (start(), start());
        tokio::time::sleep(Duration::from_millis(300)).await;
        assert_eq!(waiters(), [2], "one pull, two waiting for it");
        a.abort();
        tokio::time::sleep(Duration::from_millis(100)).await;
        assert_eq!(waiters(), [1], "the other still waits");
        assert!(closed_rx.try_recv().is_err(), "the pull goes on for it");
        b.abort();
        tokio::time::timeout(Duration::from_secs(2), closed_rx.recv())
            .await
            .expect("the pull's request is closed once nobody waits");
        assert_eq!(waiters(), Vec::<usize>::new(), "and its entry is gone");
    }

    #[test]
    fn retries_wait_half_to_all_of_the_doubling_schedule() {
        use backon::BackoffBuilder;
        let retry = PullRetry::default();
        for _ in 0..50 {
            let waits: Vec<Duration> = retry.schedule().build().collect();
            assert_eq!(waits.len(), 4, "5 attempts, 4 waits");
            for (n, wait) in waits.iter().enumerate() {
                let full = retry
                    .min_backoff
                    .saturating_mul(1 << n)
                    .min(retry.max_backoff);
                assert!(
                    *wait >= full / 2 && *wait < full + Duration::from_millis(1),
                    "wait {n}: {wait:?} of {full:?}"
                );
            }
        }
        let one = PullRetry {
            attempts: 1,
            ..PullRetry::default()
        };
        assert_eq!(one.schedule().build().count(), 0, "one attempt, no wait");
        let zero = PullRetry {
            attempts: 0,
            ..PullRetry::default()
        };
        assert_eq!(
            zero.schedule().build().count(),
            0,
            "at least one attempt, no wait"
        );
    }

    #[test]
    fn references_split_into_repo_and_tag() {
        assert_eq!(split_reference("busybox"), ("busybox", Some("latest")));
        assert_eq!(split_reference("busybox:1"), ("busybox", Some("1")));
        assert_eq!(
            split_reference("127.0.0.1:5000/busybox"),
            ("127.0.0.1:5000/busybox", Some("latest"))
        );
        assert_eq!(
            split_reference("127.0.0.1:5000/a/b:2"),
            ("127.0.0.1:5000/a/b", Some("2"))
        );
        assert_eq!(split_reference("x@sha256:abc"), ("x@sha256:abc", None));
        assert_eq!(
            split_reference("docker.io/x:1@sha256:abc"),
            ("docker.io/x:1@sha256:abc", None)
        );
        assert_eq!(split_reference("busybox:"), ("busybox", Some("")));
        assert_eq!(
            split_reference("localhost:5000"),
            ("localhost", Some("5000")),
            "a one-component name has no registry"
        );
    }
}
