//! berth's AWS access — the only crate of berth that talks to AWS, through the AWS SDK for Rust
//! (no hand-written SigV4, no credential chain of berth's own). It serves the engine's two AWS
//! seams: [`StsRoles`], the `RoleSource` that turns a task's `taskRoleArn`/`executionRoleArn`
//! into temporary credentials with STS `AssumeRole` (for the credentials endpoint and the
//! execution role's duties), and [`AwsValues`], the `RemoteAccess` that reads `secrets` from SSM
//! Parameter Store and Secrets Manager, `environmentFiles` from S3 and logs in to private ECR
//! registries, each signed with the execution role's credentials when the task has one.
//!
//! Modules: [`access`] (berth's own access from the SDK's default chain, the HTTPS client, the
//! timeout, endpoints and the description; how a service client is built), [`call`] (SDK errors as
//! the engine's `RemoteError`/`RoleError`, ARN and partition helpers), [`roles`] (`StsRoles` and
//! its cache), [`values`] (`AwsValues`).
//!
//! berth's own credentials and region come from the environment berth runs in (`AWS_REGION`,
//! `AWS_PROFILE`, …, `AWS_ENDPOINT_URL` and `AWS_ENDPOINT_URL_<SERVICE>` for other endpoints);
//! nothing here reads or writes a file of berth's. Values are `SecretValue`s and errors never
//! carry one.

pub mod access;
pub mod call;
pub mod roles;
pub mod values;

pub use access::{AwsAccess, AwsOverrides, AwsSettings};
pub use roles::StsRoles;
pub use values::{AwsValues, S3_OBJECT_LIMIT};
