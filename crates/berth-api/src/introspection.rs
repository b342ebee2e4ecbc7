//! The agent introspection API: ECS's `:51678` routes, which monitoring agents, log routers and
//! operators read to learn which cluster and instance the agent is, and which tasks and Docker
//! containers it runs. Answers are built from the same
//! [`TaskDirectory`](crate::metadata::TaskDirectory) the metadata endpoint
//! reads (every task the agent has not yet cleaned up, as its actor last published it) plus each
//! listed container's Docker details asked of the [`berth_engine::Runtime`].
//!
//! | route | answer |
//! |---|---|
//! | `GET /v1/metadata` | `{Cluster, ContainerInstanceArn, Version}` ([`json::AgentMetadataResponse`]) |
//! | `GET /v1/tasks` | `{Tasks: [...]}`, every task ([`json::TasksResponse`]) |
//! | `GET /v1/tasks?dockerid=ID` | the task with a container whose Docker id is `ID` (more than 12 characters: the full id) or starts with it (12 or fewer: a prefix, as `docker ps` prints); 404 when none, 400 when a prefix matches containers of more than one task |
//! | `GET /v1/tasks?taskarn=ARN` | the task with this ARN; 404 when none |
//! | `GET /v1/tasks?dockerid=…&taskarn=…` | 400: at most one of the two |
//! | `GET /license` | the license text (`text/plain`) |
//! | `GET /` | `{AvailableCommands: [...]}`; any other path 404 with the same body |
//!
//! The lookups and answers follow the ECS agent (`ecs-agent/introspection/v1/handlers`,
//! `agent/handlers/v1`); the error answers carry ECS's empty task object plus an `Error` key
//! saying why. The server listens on its own address, bounded like the metadata endpoint
//! ([`crate::serve::ServerLimits::METADATA`]); when the address cannot be bound it warns and
//! retries in the background (1 s doubling to 1 min, as ECS does) instead of stopping the agent.
//! See docs/metadata.md.

pub mod json;
mod server;

pub use server::{IntrospectionConfig, IntrospectionServer, router};
