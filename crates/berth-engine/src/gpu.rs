//! GPUs: a container's `resourceRequirements` GPU request as Docker's device request count, and
//! the reason a create or start gives when the Docker Engine cannot serve that request.
//!
//! berth keeps no GPU inventory (ECS on EC2 assigns GPU ids and sets `NVIDIA_VISIBLE_DEVICES`):
//! it asks Docker for a number of GPUs, as `docker run --gpus <n>` does, and the Engine's GPU
//! runtime picks them. Pure: unit tested without Docker.

use berth_model::GpuRequest;

/// What Docker says when no device driver can serve a device request: the Engine has no GPU
/// runtime (such as the NVIDIA Container Toolkit). Docker 20.10 answers this at start, in
/// `could not select device driver "" with capabilities: [[gpu]]`.
const NO_DEVICE_DRIVER: &str = "could not select device driver";

/// Docker's `DeviceRequests[].Count` for a GPU request: the number, or -1 for every GPU (what
/// `docker run --gpus all` sends).
pub fn docker_count(gpu: GpuRequest) -> i64 {
    match gpu {
        GpuRequest::Count(n) => i64::from(n),
        GpuRequest::All => -1,
    }
}

/// The reason of a failed create or start: `<prefix>: <Docker's message>`; when the container
/// asked for GPUs and Docker found no driver for them, the reason names the requirement and keeps
/// Docker's words: `<prefix>: resourceRequirements GPU <value>: this Docker Engine has no GPU
/// runtime (Docker: <message>)`.
pub fn failure_reason(prefix: &str, gpu: Option<GpuRequest>, docker: &str) -> String {
    match gpu {
        Some(gpu) if docker.contains(NO_DEVICE_DRIVER) => format!(
            "{prefix}: resourceRequirements GPU {}: this Docker Engine has no GPU runtime (Docker: {docker})",
            gpu.ecs_value()
        ),
        _ => format!("{prefix}: {docker}"),
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    const DOCKER: &str = r#"could not select device driver "" with capabilities: [[gpu]]"#;

    #[test]
    fn counts_as_docker_takes_them() {
        assert_eq!(docker_count(GpuRequest::Count(1)), 1);
        assert_eq!(docker_count(GpuRequest::Count(8)), 8);
        assert_eq!(docker_count(GpuRequest::All), -1);
    }

    #[test]
    fn no_gpu_runtime_names_the_requirement_and_keeps_dockers_words() {
        assert_eq!(
            failure_reason(
                "CannotStartContainerError",
                Some(GpuRequest::Count(1)),
                DOCKER
            ),
            r#"CannotStartContainerError: resourceRequirements GPU 1: this Docker Engine has no GPU runtime (Docker: could not select device driver "" with capabilities: [[gpu]])"#
        );
        assert_eq!(
            failure_reason("CannotCreateContainerError", Some(GpuRequest::All), DOCKER),
            r#"CannotCreateContainerError: resourceRequirements GPU ALL: this Docker Engine has no GPU runtime (Docker: could not select device driver "" with capabilities: [[gpu]])"#
        );
    }

    #[test]
    fn other_failures_keep_dockers_words_only() {
        // Another failure of a GPU container: not blamed on the GPU runtime.
        assert_eq!(
            failure_reason(
                "CannotStartContainerError",
                Some(GpuRequest::Count(2)),
                "OCI runtime create failed: exec: \"nope\": executable file not found"
            ),
            "CannotStartContainerError: OCI runtime create failed: exec: \"nope\": executable file not found"
        );
        // The same words for a container that asked for no GPU stay Docker's alone.
        assert_eq!(
            failure_reason("CannotStartContainerError", None, DOCKER),
            format!("CannotStartContainerError: {DOCKER}")
        );
    }
}
