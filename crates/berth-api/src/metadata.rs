//! The task metadata endpoint (ECS task metadata endpoint v4; v3 serves the same data).
//!
//! Routes, for every metadata id `<id>` (128 random bits, the container's only credential):
//!
//! | route                    | answer                                                        |
//! |--------------------------|---------------------------------------------------------------|
//! | `GET /v4/<id>`           | this container ([`json::ContainerResponse`])                  |
//! | `GET /v4/<id>/task`      | its task and the task's containers ([`json::TaskResponse`])   |
//! | `GET /v4/<id>/taskWithTags` | the same plus `TaskTags` and `ContainerInstanceTags`       |
//! | `GET /v4/<id>/stats`     | Docker's stats JSON of this container, plus `network_rate_stats` |
//! | `GET /v4/<id>/task/stats`| DockerId → stats (null for containers not running)           |
//!
//! The same under `/v3/<id>`, without the fields ECS adds in v4 ([`json::Version`]). Unknown id: 404 with a JSON string body; over the per-id rate limit:
//! 429. Tasks are added with [`TaskDirectory::register`] (the actor's snapshot receiver) and
//! removed with [`TaskDirectory::unregister`]; one [`MetadataServer`] serves any number of tasks.
//! See docs/metadata.md.

mod address;
mod directory;
pub mod json;
mod ratelimit;
mod server;

pub use address::{bridge_gateway, gateway_of};
pub use directory::TaskDirectory;
pub use json::{TaskInfo, Version};
pub use ratelimit::{RateLimit, RateLimitParseError};
pub use server::{Listen, MetadataConfig, MetadataError, MetadataServer, router};
