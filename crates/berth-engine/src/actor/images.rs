//! Image leases: with [`RunConfig::images`] the actor leases every image its containers name
//! before it subscribes, pulls or creates anything (waiting while image cleanup removes one, then
//! pulling it again per the pull behaviour), records the use, and at the end records the last use
//! of a finished task and drops the leases (see [`crate::image_use`]). The pause container's image
//! is never leased: image cleanup never removes a pause image.

use super::RunConfig;
use crate::image_use::{ImageTracking, Lease};
use crate::report::now_ms;
use crate::state::TaskState;

/// The images a task's containers name (its pause container's excepted: cleanup never removes a
/// pause image), each once.
fn task_images(state: &TaskState) -> Vec<String> {
    let mut images: Vec<String> = Vec::new();
    for i in 0..state.containers.len() {
        if state.is_pause(i) {
            continue;
        }
        let image = &state.def(i).image;
        if !images.contains(image) {
            images.push(image.clone());
        }
    }
    images
}

/// Take a lease on each of the task's images (waiting while cleanup removes one) and record the
/// use. Nothing when the agent tracks no images.
pub(super) async fn hold_images(config: &RunConfig, state: &TaskState) -> Vec<Lease> {
    let Some(tracking) = &config.images else {
        return Vec::new();
    };
    let mut leases = Vec::new();
    for image in task_images(state) {
        leases.push(tracking.leases.acquire(&image).await);
        record_use(tracking, &image, &state.id).await;
    }
    leases
}

/// Record a use now, off the async threads (the store commits, an fsync); a failure is logged.
async fn record_use(tracking: &ImageTracking, image: &str, task: &str) {
    let (records, image, task) = (
        tracking.records.clone(),
        image.to_string(),
        task.to_string(),
    );
    let at = now_ms();
    let outcome = tokio::task::spawn_blocking(move || records.used(&image, &task, at)).await;
    match outcome {
        Ok(Ok(())) => {}
        Ok(Err(e)) => tracing::warn!(error = %e, "cannot record the image's use"),
        Err(e) => tracing::warn!(error = %e, "cannot record the image's use"),
    }
}

/// A finished task stops using its images now (their last use); the leases go with it.
pub(super) async fn release_images(config: &RunConfig, state: &TaskState, leases: Vec<Lease>) {
    if let (Some(tracking), true) = (&config.images, state.is_finished()) {
        for image in task_images(state) {
            record_use(tracking, &image, &state.id).await;
        }
    }
    drop(leases);
}
