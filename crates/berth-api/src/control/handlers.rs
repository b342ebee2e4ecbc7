//! One handler per control route, generic over the [`ControlPlane`], and the (command, phase) rule
//! that decides what `stop` and `rm` do to a task in each phase.
//!
//! Invariants: a handler answers JSON or a [`ControlError`] (which answers JSON); extractor
//! rejections (a body over the limit, a bad query) are mapped to `ControlError` here, never passed
//! through as axum's plain-text answers. The task definition is checked here (berth-model), so the
//! plane is only ever given valid definitions.

use super::error::ControlError;
use super::types::{
    Accepted, Health, HealthStatus, ImagesView, ListQuery, PruneQuery, PruneResponse,
    SubmitResponse, TaskView,
};
use super::{ControlPlane, Phase};
use axum::Json;
use axum::body::Bytes;
use axum::extract::rejection::{BytesRejection, PathRejection, QueryRejection};
use axum::extract::{Path, Query, State};
use axum::http::{Method, StatusCode, Uri};
use axum::response::{IntoResponse, Response};
use std::sync::Arc;
use tokio::sync::broadcast;

/// The reason a task stopped by `POST /v1/tasks/{id}/stop` shows.
pub const STOP_REASON: &str = "stopped through the API";
/// The reason a task stopped by `DELETE /v1/tasks/{id}` shows.
pub const REMOVE_REASON: &str = "removed through the API";

/// A command on one task.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Verb {
    /// `POST /v1/tasks/{id}/stop`.
    Stop,
    /// `DELETE /v1/tasks/{id}`.
    Remove,
}

/// What a command does to the task.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Effect {
    /// Send the actor a stop.
    Stop,
    /// Send the actor a stop, and clean up as soon as the task has stopped.
    StopThenCleanUp,
    /// Clean up now (at once, or as soon as the stop under way ends).
    CleanUpNow,
}

/// The (command, phase) rule: one exhaustive match, whose last arm rejects the illegal case.
pub fn answer(verb: Verb, phase: Phase, task: &str) -> Result<Effect, ControlError> {
    match (verb, phase) {
        // Stopping already: the stop is sent again (the actor keeps the first reason, and makes
        // sure every container's desired status is STOPPED).
        (Verb::Stop, Phase::Active | Phase::Stopping) => Ok(Effect::Stop),
        (Verb::Remove, Phase::Active | Phase::Stopping) => Ok(Effect::StopThenCleanUp),
        (Verb::Remove, Phase::Stopped) => Ok(Effect::CleanUpNow),
        (Verb::Stop, Phase::Stopped) => Err(ControlError::AlreadyStopped {
            task: task.to_string(),
        }),
    }
}

fn bad_request(message: String) -> ControlError {
    ControlError::BadRequest { message }
}

fn body_error(rejection: &BytesRejection, limit: usize) -> ControlError {
    if rejection.status() == StatusCode::PAYLOAD_TOO_LARGE {
        ControlError::BodyTooLarge { limit }
    } else {
        bad_request(rejection.body_text())
    }
}

fn path_id(id: Result<Path<String>, PathRejection>) -> Result<String, ControlError> {
    id.map(|Path(id)| id)
        .map_err(|r| bad_request(r.body_text()))
}

/// The full id of the task `id` names: itself when a task has this id, else the one task whose id
/// starts with it (as `docker` takes the 12 characters `ps` prints). No task → not found; more than
/// one → ambiguous, listing them. An empty id names no task.
async fn resolve<C: ControlPlane>(plane: &C, id: String) -> Result<String, ControlError> {
    if id.is_empty() || plane.phase(&id).is_some() || plane.get(&id).await?.is_some() {
        return Ok(id);
    }
    let mut matches: Vec<String> = plane
        .list()
        .await?
        .into_iter()
        .map(|t| t.task)
        .filter(|t| t.starts_with(&id))
        .collect();
    matches.sort();
    match matches.len() {
        0 => Err(ControlError::NotFound { task: id }),
        1 => Ok(matches.remove(0)),
        _ => Err(ControlError::Ambiguous {
            prefix: id,
            matches,
        }),
    }
}

/// The longest client token (ECS RunTask's limit).
pub const CLIENT_TOKEN_MAX: usize = 64;

/// ECS RunTask's rule for a client token: 1 to 64 ASCII characters from `!` to `~` (33–126).
pub fn check_client_token(token: &str) -> Result<(), String> {
    if token.is_empty() {
        return Err("empty; give 1 to 64 printable ASCII characters".to_string());
    }
    if token.len() > CLIENT_TOKEN_MAX {
        return Err(format!(
            "{} characters; at most {CLIENT_TOKEN_MAX} are allowed",
            token.chars().count()
        ));
    }
    if let Some(c) = token.chars().find(|c| !('!'..='~').contains(c)) {
        return Err(format!(
            "{:?} is not allowed; only printable ASCII characters without spaces (33-126)",
            c
        ));
    }
    Ok(())
}

/// `POST /v1/tasks[?tag=KEY=VALUE…][&clientToken=TOKEN]`: check the definition and the tags, have the plane store
/// and start it.
pub async fn submit<C: ControlPlane>(
    State(plane): State<Arc<C>>,
    query: Result<Query<Vec<(String, String)>>, QueryRejection>,
    body: Result<Bytes, BytesRejection>,
) -> Result<Response, ControlError> {
    let Query(query) = query.map_err(|r| bad_request(r.body_text()))?;
    let body = body.map_err(|r| body_error(&r, super::router::MAX_BODY))?;
    let mut parsed = berth_model::parse_bytes_with(&body, &plane.limits()).map_err(|invalid| {
        ControlError::Invalid {
            problems: invalid.problems.iter().map(ToString::to_string).collect(),
        }
    })?;
    // `?tag=KEY=VALUE` (repeatable): the task's tags, as ECS's RunTask `tags`, over the
    // definition's own.
    let mut tags = Vec::new();
    let mut problems = Vec::new();
    let mut client_token = None;
    for (name, value) in &query {
        match name.as_str() {
            "tag" => match berth_model::tags::parse_key_value(value) {
                Ok(t) => tags.push(t),
                Err(why) => problems.push(format!("tag: {why}")),
            },
            // ECS RunTask's `clientToken`: a retry with the same token is the same submit.
            "clientToken" => match check_client_token(value) {
                Ok(()) if client_token.is_none() => client_token = Some(value.clone()),
                Ok(()) => problems.push("clientToken: given more than once".to_string()),
                Err(why) => problems.push(format!("clientToken: {why}")),
            },
            other => problems.push(format!(
                "unknown query parameter {other:?} (known: tag, clientToken)"
            )),
        }
    }
    let merged = berth_model::tags::merge(&parsed.definition.tags, &tags);
    if let Err(why) = berth_model::tags::check_count(merged.len()) {
        problems.push(format!("tag: {why}"));
    }
    if !problems.is_empty() {
        return Err(ControlError::Invalid { problems });
    }
    parsed.definition.tags = merged;
    let mut warnings: Vec<String> = parsed.warnings.iter().map(ToString::to_string).collect();
    let submitted = plane.submit(parsed.definition, client_token).await?;
    warnings.extend(submitted.warnings);
    let task = submitted.task;
    Ok((StatusCode::CREATED, Json(SubmitResponse { task, warnings })).into_response())
}

/// `GET /v1/images`.
pub async fn images<C: ControlPlane>(
    State(plane): State<Arc<C>>,
) -> Result<Json<ImagesView>, ControlError> {
    Ok(Json(plane.images().await?))
}

/// `POST /v1/images/prune[?dryRun=true]`.
pub async fn prune<C: ControlPlane>(
    State(plane): State<Arc<C>>,
    query: Result<Query<PruneQuery>, QueryRejection>,
) -> Result<Json<PruneResponse>, ControlError> {
    let Query(q) = query.map_err(|r| bad_request(r.body_text()))?;
    Ok(Json(plane.prune(q.dry_run).await?))
}

/// `GET /v1/tasks[?status=&family=]`.
pub async fn list<C: ControlPlane>(
    State(plane): State<Arc<C>>,
    query: Result<Query<ListQuery>, QueryRejection>,
) -> Result<Json<Vec<TaskView>>, ControlError> {
    let Query(q) = query.map_err(|r| bad_request(r.body_text()))?;
    let tasks = plane.list().await?;
    Ok(Json(tasks.into_iter().filter(|t| q.matches(t)).collect()))
}

/// `GET /v1/tasks/{id}`.
pub async fn inspect<C: ControlPlane>(
    State(plane): State<Arc<C>>,
    id: Result<Path<String>, PathRejection>,
) -> Result<Json<TaskView>, ControlError> {
    let id = resolve(&*plane, path_id(id)?).await?;
    match plane.get(&id).await? {
        Some(t) => Ok(Json(t)),
        None => Err(ControlError::NotFound { task: id }),
    }
}

/// Apply a command by the rule: 202 with the task's id, or the rule's (or the plane's) refusal.
async fn command<C: ControlPlane>(
    plane: &C,
    verb: Verb,
    id: String,
) -> Result<Response, ControlError> {
    let phase = plane
        .phase(&id)
        .ok_or_else(|| ControlError::NotFound { task: id.clone() })?;
    match answer(verb, phase, &id)? {
        Effect::Stop => plane.stop(&id, STOP_REASON).await?,
        Effect::StopThenCleanUp => {
            // Stopped meanwhile: the cleanup below is all that is left to do.
            match plane.stop(&id, REMOVE_REASON).await {
                Ok(()) | Err(ControlError::AlreadyStopped { .. }) => {}
                Err(e) => return Err(e),
            }
            plane.clean_up_now(&id)?;
        }
        Effect::CleanUpNow => plane.clean_up_now(&id)?,
    }
    Ok((StatusCode::ACCEPTED, Json(Accepted { task: id })).into_response())
}

/// `POST /v1/tasks/{id}/stop`.
pub async fn stop<C: ControlPlane>(
    State(plane): State<Arc<C>>,
    id: Result<Path<String>, PathRejection>,
) -> Result<Response, ControlError> {
    let id = resolve(&*plane, path_id(id)?).await?;
    command(&*plane, Verb::Stop, id).await
}

/// `DELETE /v1/tasks/{id}`.
pub async fn remove<C: ControlPlane>(
    State(plane): State<Arc<C>>,
    id: Result<Path<String>, PathRejection>,
) -> Result<Response, ControlError> {
    let id = resolve(&*plane, path_id(id)?).await?;
    command(&*plane, Verb::Remove, id).await
}

/// `GET /v1/events`: newline-delimited JSON until the client leaves. A subscriber that falls
/// behind the broadcast buffer skips what it missed (and keeps going).
pub async fn events<C: ControlPlane>(State(plane): State<Arc<C>>) -> Response {
    let rx = plane.events();
    let stream = futures_util::stream::unfold(rx, |mut rx| async move {
        loop {
            match rx.recv().await {
                Ok(line) => {
                    return Some((Ok::<_, std::convert::Infallible>(format!("{line}\n")), rx));
                }
                Err(broadcast::error::RecvError::Lagged(_)) => continue,
                Err(broadcast::error::RecvError::Closed) => return None,
            }
        }
    });
    (
        [("content-type", "application/x-ndjson")],
        axum::body::Body::from_stream(stream),
    )
        .into_response()
}

/// `GET /v1/health`: 200 `ok`, or 503 `degraded` with the reason and the held tasks.
pub async fn health<C: ControlPlane>(State(plane): State<Arc<C>>) -> Response {
    let tasks = plane.task_count();
    match plane.degraded() {
        None => Json(Health::ok(tasks)).into_response(),
        Some(d) => (
            StatusCode::SERVICE_UNAVAILABLE,
            Json(Health {
                status: HealthStatus::Degraded,
                tasks,
                reason: Some(d.reason),
                held_tasks: d.held_tasks,
            }),
        )
            .into_response(),
    }
}

/// Any path no route has: 404, JSON.
pub async fn no_route(uri: Uri) -> ControlError {
    ControlError::NoRoute {
        path: uri.path().to_string(),
    }
}

/// A route's path with a method it does not have: 405, JSON (axum adds `Allow`).
pub async fn wrong_method(method: Method, uri: Uri) -> ControlError {
    ControlError::MethodNotAllowed {
        method: method.to_string(),
        path: uri.path().to_string(),
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn client_tokens_follow_ecs_run_task_rule() {
        assert!(check_client_token("retry-1_A.b~!").is_ok());
        assert!(check_client_token(&"x".repeat(64)).is_ok());
        let long = check_client_token(&"x".repeat(65)).expect_err("65");
        assert!(long.contains("at most 64"), "{long}");
        assert!(check_client_token("").is_err());
        let space = check_client_token("a b").expect_err("space");
        assert!(space.contains("' '"), "{space}");
        assert!(check_client_token("é").is_err());
        assert!(check_client_token("a\nb").is_err());
    }

    #[test]
    fn the_rule_answers_every_command_in_every_phase() {
        use Effect::*;
        use Phase::*;
        let table = [
            (Verb::Stop, Active, Some(Stop)),
            (Verb::Stop, Stopping, Some(Stop)),
            (Verb::Stop, Stopped, None),
            (Verb::Remove, Active, Some(StopThenCleanUp)),
            (Verb::Remove, Stopping, Some(StopThenCleanUp)),
            (Verb::Remove, Stopped, Some(CleanUpNow)),
        ];
        for (verb, phase, want) in table {
            match (answer(verb, phase, "t"), want) {
                (Ok(got), Some(want)) => assert_eq!(got, want, "{verb:?} in {phase:?}"),
                (Err(ControlError::AlreadyStopped { task }), None) => assert_eq!(task, "t"),
                (got, want) => panic!("{verb:?} in {phase:?}: {got:?}, expected {want:?}"),
            }
        }
    }

    #[test]
    fn the_phase_follows_known_then_desired() {
        use berth_engine::Status::*;
        assert_eq!(Phase::of(Running, Running), Phase::Active);
        assert_eq!(Phase::of(None, Running), Phase::Active);
        assert_eq!(Phase::of(Running, Stopped), Phase::Stopping);
        assert_eq!(Phase::of(Stopped, Stopped), Phase::Stopped);
    }
}
