//! The pull effect: obtain a container's image according to the pull behaviour, with its registry
//! login, reporting the pull's phases and progress; given up (its request to Docker dropped) once
//! the task is stopping. The pause container's "pull" provisions its image instead: berth's own,
//! imported offline when the Engine lacks it ([`crate::pause_provision::ensure_pause_image`]), or the
//! operator's `--pause-image`, pulled like any image.
//!
//! A login that cannot be found stops the task whatever the behaviour (ECS's
//! `ResourceInitializationError`); a failed pull falls back to the cached image where the
//! behaviour allows, else stops the container (or the task) with ECS's
//! `CannotPullContainerError`.
//!
//! Whether an image is present is Docker's image inspect, and only its 404 means absent: a failed
//! inspect is asked again a few times ([`super::ask_again`]), and one that keeps failing fails the
//! container with the inspect's error, never pulls over a local image (`prefer-cached`) nor hides
//! a cached copy without saying so (after a failed pull).

use super::effects::Context;
use crate::auth::{AuthError, RegistryAuth, RegistryAuthResolver};
use crate::decide::Event;
use crate::pause_provision;
use crate::pull::{self as pulls, AfterFailure, PullBehavior, PullRecord};
use crate::report::{self, PullPhase, Report, now_ms};
use crate::runtime::{PullProgress, Runtime};
use tokio::sync::mpsc;

/// Perform `Action::Pull(i)`.
pub(super) fn spawn<R: Runtime>(cx: &Context<'_, R>, i: usize) {
    let (config, state) = (cx.config, cx.state);
    if state.is_pause(i) && config.pause_image.is_none() {
        provide_pause_image(cx, i);
        return;
    }
    let rt = cx.rt.clone();
    let tx = cx.effects.results.clone();
    let image = match &config.pause_image {
        Some(own) if state.is_pause(i) => own.clone(),
        _ => state.def(i).image.clone(),
    };
    let reports = cx.reports.clone();
    let (task, container) = (state.id.clone(), state.containers[i].name.clone());
    let (behavior, record) = (config.pull_behavior, config.pull_record.clone());
    let resolver = config.registry_auth.clone();
    let parameter = state
        .def(i)
        .repository_credentials
        .as_ref()
        .map(|c| c.credentials_parameter.clone());
    let stopping = cx.effects.stopping.clone();
    cx.effects.spawn(async move {
        let report = |phase, reason: Option<String>| {
            let _ = reports.send(Report::Pull {
                time: report::rfc3339(now_ms()),
                task: task.clone(),
                container: container.clone(),
                image: image.clone(),
                phase,
                reason,
            });
        };
        let progress = |p: PullProgress| {
            let _ = reports.send(Report::PullProgress {
                task: task.clone(),
                container: container.clone(),
                image: image.clone(),
                layers: p.layers,
                layers_done: p.layers_done,
                bytes: p.bytes,
                bytes_total: p.bytes_total,
            });
        };
        let login = Login {
            resolver: resolver.as_deref(),
            parameter: parameter.as_deref(),
        };
        let pull = pull_image(
            &*rt, &image, behavior, &*record, login, i, &progress, &report,
        );
        // A stop while the pull is in flight gives it up: dropping the pull drops the
        // request to Docker (a pull merged with another task's goes on for that one).
        let ev = tokio::select! {
            ev = pull => ev,
            () = stopping.cancelled() => {
                report(PullPhase::Failed, Some(PULL_ABANDONED.to_string()));
                Event::PullAbandoned { container: i, at: now_ms() }
            }
        };
        let _ = tx.send(ev);
    });
}

/// The pause container's "pull" when the operator names no pause image: berth's own image,
/// imported offline when the Engine does not have it. A failure stops the task.
fn provide_pause_image<R: Runtime>(cx: &Context<'_, R>, i: usize) {
    let rt = cx.rt.clone();
    let tx = cx.effects.results.clone();
    cx.effects.spawn(async move {
        let ev = match pause_provision::ensure_pause_image(&*rt).await {
            Ok(_) => Event::Pulled {
                container: i,
                at: now_ms(),
            },
            Err(e) => Event::PullFailed {
                container: i,
                at: now_ms(),
                message: format!(
                    "CannotPullContainerError: cannot provision berth's pause image: {e}"
                ),
                stop_task: true,
            },
        };
        let _ = tx.send(ev);
    });
}

/// Where a container's registry login comes from.
#[derive(Clone, Copy)]
struct Login<'a> {
    resolver: Option<&'a dyn RegistryAuthResolver>,
    /// The container's `repositoryCredentials.credentialsParameter`.
    parameter: Option<&'a str>,
}

impl Login<'_> {
    /// The login for `image`: asked of the resolver; without one, anonymous unless the container
    /// names a secret (then an error saying what is missing).
    async fn resolve(self, image: &str) -> Result<Option<RegistryAuth>, AuthError> {
        match (self.resolver, self.parameter) {
            (Some(r), parameter) => r.resolve(image, parameter).await,
            (None, Some(parameter)) => Err(AuthError::NoSecretProvider {
                parameter: parameter.to_string(),
            }),
            (None, None) => Ok(None),
        }
    }
}

/// Whether `image` is present locally, by Docker's image inspect: `Ok(false)` only for its 404.
/// Any other failure (a refusal, a timeout, a lost connection) is asked again
/// ([`super::ask_again`]); once every attempt failed, the last error with the count.
async fn inspect_image<R: Runtime>(rt: &R, image: &str) -> Result<bool, String> {
    super::ask_again("image inspect", || rt.image_present(image))
        .await
        .map_err(|e| {
            format!(
                "docker image inspect {image} failed {} times, last: {e}",
                super::ASK_AGAIN_ATTEMPTS
            )
        })
}

/// The pull report's reason when a stop gave the pull up.
pub const PULL_ABANDONED: &str = "pull abandoned: the task is stopping";

/// The reason ECS gives a task whose secrets or registry login cannot be obtained.
pub const AUTH_FAILURE_PREFIX: &str =
    "ResourceInitializationError: unable to pull secrets or registry auth";

/// Obtain a container's image according to the pull behaviour: find its registry login and pull
/// if needed, fall back to the cached image where the behaviour allows, and say what the container
/// (or task) does otherwise. A login that cannot be found (a secret that does not resolve, a
/// failing credential helper) stops the task, as ECS stops it, whatever the behaviour.
#[allow(clippy::too_many_arguments)]
async fn pull_image<R: Runtime>(
    rt: &R,
    image: &str,
    behavior: PullBehavior,
    record: &dyn PullRecord,
    login: Login<'_>,
    container: usize,
    progress: impl Fn(PullProgress),
    report: impl Fn(PullPhase, Option<String>),
) -> Event {
    // Only prefer-cached asks whether the image is here before pulling (once asks the record,
    // default and always pull anyway). Only Docker's 404 means absent: an inspect that keeps
    // failing fails the decision, never pulls over an image the host may have.
    let present = if behavior == PullBehavior::PreferCached {
        match inspect_image(rt, image).await {
            Ok(present) => present,
            Err(e) => {
                let message = format!(
                    "CannotPullContainerError: cannot tell whether image {image} is present \
                     locally, so it is not pulled over a local copy: {e}"
                );
                report(PullPhase::Failed, Some(message.clone()));
                return Event::PullFailed {
                    container,
                    at: now_ms(),
                    message,
                    stop_task: false,
                };
            }
        }
    } else {
        false
    };
    if !pulls::pull_needed(behavior, present, record.pulled_before(image)) {
        report(PullPhase::Cached, None);
        return Event::Pulled {
            container,
            at: now_ms(),
        };
    }
    let auth = match login.resolve(image).await {
        Ok(auth) => auth,
        Err(e) => {
            let message = format!("{AUTH_FAILURE_PREFIX}: {e}");
            report(PullPhase::Failed, Some(message.clone()));
            return Event::PullFailed {
                container,
                at: now_ms(),
                message,
                stop_task: true,
            };
        }
    };
    report(PullPhase::Started, None);
    // Drive the pull and pass its progress on as it comes, all of it before the final phase.
    let (ptx, mut prx) = mpsc::unbounded_channel::<PullProgress>();
    let pull = rt.pull(image, auth.as_ref(), Some(ptx));
    tokio::pin!(pull);
    let result = loop {
        tokio::select! {
            r = &mut pull => break r,
            Some(p) = prx.recv() => progress(p),
        }
    };
    while let Ok(p) = prx.try_recv() {
        progress(p);
    }
    let error = match result {
        Ok(()) => {
            if let Err(e) = record.record_pull(image) {
                tracing::warn!(%image, error = %e, "cannot record the pull (needed by pull behavior once)");
            }
            report(PullPhase::Done, None);
            return Event::Pulled {
                container,
                at: now_ms(),
            };
        }
        Err(e) => e,
    };
    let mut message = format!("CannotPullContainerError: {error}");
    // The pull may have failed after another one brought the image: look again (only where a
    // cached copy would be used). An inspect that keeps failing uses no cached copy and says so.
    let present_now = match behavior {
        PullBehavior::Default | PullBehavior::PreferCached => {
            match inspect_image(rt, image).await {
                Ok(present) => present,
                Err(e) => {
                    message.push_str(&format!(
                        "; whether a cached copy of {image} is present is unknown: {e}"
                    ));
                    false
                }
            }
        }
        PullBehavior::Always | PullBehavior::Once => false,
    };
    match pulls::after_failure(behavior, present_now) {
        AfterFailure::UseCached => {
            report(
                PullPhase::Cached,
                Some(format!("{message}; using the cached image")),
            );
            Event::Pulled {
                container,
                at: now_ms(),
            }
        }
        outcome => {
            report(PullPhase::Failed, Some(message.clone()));
            Event::PullFailed {
                container,
                at: now_ms(),
                message,
                stop_task: outcome == AfterFailure::TaskStops,
            }
        }
    }
}
