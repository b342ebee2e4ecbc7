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
//!
//! Pure, and importing nothing of the crate: the task state ([`crate::state`]) builds on it, so
//! nothing here may reach the runtime. Its create spec is [`crate::spec::pause_spec`]; making its
//! image present (importing berth's own, or pulling the operator's `--pause-image`) is the
//! actor's pull effect, through [`crate::pause_provision::ensure_pause_image`].

use berth_model::{ContainerDefinition, IpcMode, NetworkMode, PidMode, TaskDefinition};

/// The repository of berth's built-in pause image ([`crate::pause_image`]), which the pause
/// container's definition names. Defined here, not there, so the state reaches no runtime code.
pub const PAUSE_REPOSITORY: &str = "berth/pause";

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
/// berth's own image or the operator's (see [`crate::spec::pause_spec`]).
pub fn pause_definition() -> ContainerDefinition {
    let mut def = ContainerDefinition::new(PAUSE_CONTAINER, PAUSE_REPOSITORY);
    def.essential = true;
    def.stop_timeout = Some(PAUSE_STOP_TIMEOUT_SECS);
    def
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
