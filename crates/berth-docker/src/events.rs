//! The Docker event stream of one task's containers, as [`RuntimeEvent`]s: `start`, `die` (with
//! its exit code), `destroy` and `health_status`; every other action is dropped.
//!
//! The stream is filtered by the task's `berth.task` label and replays from one second before the
//! call: the request is only sent when the stream is first polled, and events are idempotent for
//! the engine, so a replayed one costs nothing while a lost one would leave a container's status
//! behind. A stream error is logged and skipped; the stream ends when the Engine closes it.

use berth_engine::runtime::RuntimeEvent;
use berth_engine::spec::LABEL_TASK;
use berth_engine::state::{Health, Millis};
use bollard::Docker;
use bollard::query_parameters::EventsOptionsBuilder;
use futures_util::stream::{BoxStream, StreamExt};
use std::collections::HashMap;

/// The container events of task `task_id`; see the module documentation.
pub(crate) fn task_events(
    docker: &Docker,
    engine: &std::sync::Arc<str>,
    task_id: &str,
) -> BoxStream<'static, RuntimeEvent> {
    let engine = std::sync::Arc::clone(engine);
    let mut filters: HashMap<String, Vec<String>> = HashMap::new();
    filters.insert("type".into(), vec!["container".into()]);
    filters.insert("label".into(), vec![format!("{LABEL_TASK}={task_id}")]);
    // Replay from a second ago: the request is only sent when the stream is first polled, and
    // events are idempotent for the engine, so a replayed one costs nothing while a lost one
    // would leave a container's status behind.
    let since = berth_engine::report::now_ms() - 1000;
    let since = format!("{}.{:03}", since / 1000, since % 1000);
    let opts = EventsOptionsBuilder::default()
        .filters(&filters)
        .since(&since)
        .build();
    let stream = docker.events(Some(opts)).filter_map(move |ev| {
        let engine = std::sync::Arc::clone(&engine);
        async move {
            match ev {
                Ok(ev) => runtime_event(&ev),
                Err(e) => {
                    let e = crate::runtime::name_engine(&engine, crate::errors::translate(e, None));
                    tracing::warn!(error = %e, "docker event stream error");
                    None
                }
            }
        }
    });
    stream.boxed()
}

/// The engine's view of one Docker event, if it is one the engine uses.
fn runtime_event(ev: &bollard::models::EventMessage) -> Option<RuntimeEvent> {
    let at = event_time(ev);
    let actor = ev.actor.as_ref()?;
    let id = actor.id.clone()?;
    let action = ev.action.as_deref()?;
    match action {
        "start" => Some(RuntimeEvent::Start { id, at }),
        "die" => {
            let exit_code = actor
                .attributes
                .as_ref()
                .and_then(|a| a.get("exitCode"))
                .and_then(|c| c.parse().ok());
            Some(RuntimeEvent::Die { id, exit_code, at })
        }
        "destroy" => Some(RuntimeEvent::Destroy { id, at }),
        a if a.starts_with("health_status") => {
            let health = match a.rsplit(':').next().map(str::trim) {
                Some("healthy") => Health::Healthy,
                Some("unhealthy") => Health::Unhealthy,
                _ => Health::Starting,
            };
            Some(RuntimeEvent::Health { id, health })
        }
        _ => None,
    }
}

fn event_time(ev: &bollard::models::EventMessage) -> Millis {
    match (ev.time_nano, ev.time) {
        (Some(ns), _) => ns / 1_000_000,
        (None, Some(s)) => s * 1000,
        (None, None) => berth_engine::report::now_ms(),
    }
}
