//! berth-docker: the [`Runtime`] over the Docker Engine API (bollard). The only crate in berth that
//! talks to Docker.
//!
//! It owns: connecting (with API version negotiation, so an older Engine such as API 1.41 works),
//! translating bollard's errors into [`RuntimeError`] kinds (404 → not found, 409 → conflict, 304 on
//! stop → success, transport errors → unavailable), a timeout on every call (ECS's defaults; the
//! ordinary and the volume limits are the operator's) whose error says whether the Engine still
//! answers a ping (slow) or not (down), merging concurrent pulls of one image into one (dropped
//! when no one waits for it any more), retrying retriable pull failures with backoff and jitter,
//! and mapping the engine-neutral [`ContainerSpec`] to Docker's create body field by field.
//!
//! Modules, by responsibility:
//!
//! - `auth`: the registry credential chain ([`AuthChain`]: `repositoryCredentials` through the
//!   secret provider, ECS's engine auth data, the Docker client's `config.json` and its
//!   credential helpers) and Docker's registry naming ([`registry_host`]).
//! - `connection`: [`connect`] (version negotiation, ping) and [`Timeouts`]: every call bounded,
//!   an overrun judged by a ping and worded in one place (slow, not down / does not answer).
//! - `errors`: bollard's errors into [`RuntimeError`] kinds; pull failures retriable or not.
//! - `pull`: merged concurrent pulls, retries with backoff and jitter, progress,
//!   [`split_reference`].
//! - `body`: [`ContainerSpec`] → the container create body (and a volume spec → the volume
//!   create body).
//! - `events`: one task's container events as [`berth_engine::runtime::RuntimeEvent`]s.
//! - `inspect`: inspect and list answers into the engine's types ([`details_of`],
//!   [`parse_docker_time`], [`ManagedContainer`]).
//! - `runtime`: [`DockerRuntime`], the [`berth_engine::runtime::Runtime`] implementation, plus
//!   the managed-container list and logs.
//!
//! The modules are private; everything other crates use is re-exported here.
//!
//! [`Runtime`]: berth_engine::runtime::Runtime
//! [`RuntimeError`]: berth_engine::runtime::RuntimeError
//! [`ContainerSpec`]: berth_engine::spec::ContainerSpec

mod auth;
mod body;
mod connection;
mod errors;
mod events;
mod inspect;
mod pull;
mod runtime;

pub use auth::{
    AuthChain, DEFAULT_HELPER_TIMEOUT, DockerConfig, EngineAuth, EngineAuthError, registry_host,
};
pub use body::create_body;
pub use connection::{DEFAULT_ENGINE, Timeouts, connect, engine_address};
pub use inspect::{ManagedContainer, details_of, parse_docker_time};
pub use pull::{PullRetry, split_reference};
pub use runtime::DockerRuntime;
