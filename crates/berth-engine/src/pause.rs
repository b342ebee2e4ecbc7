//! The task's pause container: the internal container that owns the namespaces a task's containers
//! share — the network namespace in `awsvpc` mode, the PID namespace with `pidMode: task`, the IPC
//! namespace with `ipcMode: task` — as the ECS agent's `~internal~ecs~pause` does on EC2.
//!
//! It is one more container of the task (appended to the definition when the state is built, so
//! every container keeps its index), which the engine creates, starts, adopts, stops and removes with
//! the same machinery as the others. Its wiring (see [`crate::state::Wiring::namespace_owner`]) makes
//! it exist before any other container is created, run before any starts, and stop only after every
//! other container has stopped. It is essential: if it dies, the task stops. Its image is berth's
//! own, imported offline on first use (`pause_image`); the metadata endpoint hides it, as ECS does.
//!
//! The name cannot clash with a user's container: ECS container names allow only letters, digits,
//! hyphens and underscores, and this one starts with `~`.

use crate::pause_image::{self, PAUSE_REPOSITORY};
use crate::runtime::{Runtime, RuntimeError};
use berth_model::{ContainerDefinition, IpcMode, NetworkMode, PidMode, TaskDefinition};

/// The definition name of the pause container.
pub const PAUSE_CONTAINER: &str = "~internal~berth~pause";

/// Seconds between SIGTERM and SIGKILL when the pause container is stopped (berth's pause program
/// exits on SIGTERM at once; an operator's own pause image may not).
pub const PAUSE_STOP_TIMEOUT_SECS: u32 = 10;

/// What the pause container owns for this task (all false: the task has no pause container).
#[derive(Debug, Clone, Copy, PartialEq, Eq, Default)]
pub struct Shares {
    /// `networkMode: awsvpc`: the network namespace, on the Docker bridge.
    pub network: bool,
    /// `pidMode: task`.
    pub pid: bool,
    /// `ipcMode: task`.
    pub ipc: bool,
}

impl Shares {
    pub fn of(def: &TaskDefinition) -> Self {
        Shares {
            network: def.network_mode == NetworkMode::Awsvpc,
            pid: def.pid_mode == Some(PidMode::Task),
            ipc: def.ipc_mode == Some(IpcMode::Task),
        }
    }

    pub fn any(self) -> bool {
        self.network || self.pid || self.ipc
    }
}

/// Whether a task of this definition gets a pause container.
pub fn needs_pause(def: &TaskDefinition) -> bool {
    Shares::of(def).any()
}

/// The pause container's definition. Its `image` is only a label for people: the create spec uses
/// the image berth provisions (see [`crate::spec::container_spec`]).
pub fn pause_definition() -> ContainerDefinition {
    let mut def = ContainerDefinition::new(PAUSE_CONTAINER, PAUSE_REPOSITORY);
    def.essential = true;
    def.stop_timeout = Some(PAUSE_STOP_TIMEOUT_SECS);
    def
}

/// The image the pause container is created from: berth's own ([`pause_image`]).
pub fn pause_image_name() -> String {
    pause_image::image_name()
}

/// Make the pause image present (the pause container's "pull"): berth's own image is imported
/// offline when missing. Returns the image name.
pub async fn provision<R: Runtime>(rt: &R) -> Result<String, RuntimeError> {
    pause_image::ensure_pause_image(rt).await
}

/// True for the pause container's definition name.
pub fn is_pause(name: &str) -> bool {
    name == PAUSE_CONTAINER
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn only_shared_namespaces_need_a_pause_container() {
        let mut def = TaskDefinition::new("f", vec![ContainerDefinition::new("a", "img")]);
        assert!(!needs_pause(&def));
        for mode in [NetworkMode::Bridge, NetworkMode::Host, NetworkMode::None] {
            def.network_mode = mode;
            assert!(!needs_pause(&def), "{mode:?}");
        }
        def.pid_mode = Some(PidMode::Host);
        def.ipc_mode = Some(IpcMode::None);
        assert!(!needs_pause(&def));
        def.ipc_mode = Some(IpcMode::Task);
        assert_eq!(
            Shares::of(&def),
            Shares {
                network: false,
                pid: false,
                ipc: true
            }
        );
        def.ipc_mode = None;
        def.pid_mode = Some(PidMode::Task);
        assert!(needs_pause(&def));
        def.pid_mode = None;
        def.network_mode = NetworkMode::Awsvpc;
        assert!(Shares::of(&def).network && needs_pause(&def));
    }

    #[test]
    fn the_name_cannot_be_a_user_container_name() {
        let parsed = berth_model::parse(&format!(
            r#"{{"family":"f","containerDefinitions":[{{"name":"{PAUSE_CONTAINER}","image":"i"}}]}}"#
        ));
        assert!(parsed.is_err(), "validation must refuse the internal name");
        assert!(pause_definition().essential);
    }
}
