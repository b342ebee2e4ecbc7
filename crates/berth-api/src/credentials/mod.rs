//! The credentials endpoint, ECS's `169.254.170.2`: task IAM role credentials at
//! `/v2/credentials/<id>` (ECS's JSON and errors, with berth's caller rule and ECS's audit log)
//! and the task metadata endpoint v2 (`/v2/metadata`, `/v2/stats`), which ECS serves on the
//! same address. Ids are the tasks' [`berth_engine::roles::RoleIds`], indexed by the metadata
//! endpoint's [`crate::metadata::TaskDirectory`]; credentials come from the agent's
//! [`berth_engine::roles::RoleSource`]. Making the address reachable is the binary's job.
//! See docs/metadata.md.
//!
//! - [`json`]: the answers' shapes and ECS's error codes and texts;
//! - [`caller`]: who may read an id (the caller rule);
//! - [`audit`]: the audit log;
//! - `server`: routes, handlers and the listener.

pub mod audit;
pub mod caller;
pub mod json;
mod server;

pub use server::{CredentialsConfig, CredentialsError, CredentialsServer, router};
