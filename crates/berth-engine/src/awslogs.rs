//! Docker's `awslogs` driver given what it needs from berth, as ECS gives it: the task's execution
//! role through the driver's `awslogs-credentials-endpoint` option (a path under
//! `http://169.254.170.2`, which the Engine calls from the host: the credentials endpoint answers
//! an execution-role id only to callers that are not task containers), and berth's own CloudWatch
//! Logs endpoint override (`AWS_ENDPOINT_URL_LOGS` / `AWS_ENDPOINT_URL`, as the SDKs read them)
//! as `awslogs-endpoint` when the definition gives none, since the Engine does not see berth's
//! environment. An option the definition sets itself is kept. ECS's `awslogs-stream-prefix`,
//! which Docker's driver does not know (the Engine refuses the container: `unknown log opt`),
//! becomes the stream ECS names, `<prefix>/<container name>/<task id>`, unless the definition
//! names an `awslogs-stream` itself. Pure; applied by [`crate::create_spec::build`].
//!
//! Without an execution role (or with no credentials endpoint served) the driver uses the Docker
//! Engine's own credentials, as on ECS, where a task without one logs with the instance's role.

use crate::roles::CREDENTIALS_PATH;
use crate::spec::ContainerSpec;
use crate::state::TaskState;

/// The driver's name.
pub const DRIVER: &str = "awslogs";
/// Docker's option naming the relative URI of the credentials the driver uses.
pub const CREDENTIALS_OPTION: &str = "awslogs-credentials-endpoint";
/// Docker's option naming the CloudWatch Logs endpoint.
pub const ENDPOINT_OPTION: &str = "awslogs-endpoint";
/// ECS's option (not Docker's) that names the stream after the container and the task.
pub const STREAM_PREFIX_OPTION: &str = "awslogs-stream-prefix";
/// Docker's option naming the stream (without it the driver uses the container's Docker id).
pub const STREAM_OPTION: &str = "awslogs-stream";

/// What the host gives `awslogs` containers.
#[derive(Debug, Clone, Default, PartialEq, Eq)]
pub struct Settings {
    /// The credentials endpoint is served (so an execution-role id answers).
    pub credentials_served: bool,
    /// berth's CloudWatch Logs endpoint override, when it has one.
    pub endpoint: Option<String>,
}

/// Add the driver's options to container `i`'s spec when it logs with `awslogs`.
pub fn apply(spec: &mut ContainerSpec, state: &TaskState, i: usize, settings: &Settings) {
    if spec.log_driver.as_deref() != Some(DRIVER) {
        return;
    }
    if let Some(prefix) = spec.log_options.remove(STREAM_PREFIX_OPTION)
        && let Some(def) = state.definition.container_definitions.get(i)
    {
        spec.log_options
            .entry(STREAM_OPTION.to_string())
            .or_insert_with(|| format!("{prefix}/{}/{}", def.name, state.id));
    }
    if settings.credentials_served
        && let Some(id) = &state.role_ids.execution
    {
        spec.log_options
            .entry(CREDENTIALS_OPTION.to_string())
            .or_insert_with(|| format!("{CREDENTIALS_PATH}{id}"));
    }
    if let Some(endpoint) = &settings.endpoint {
        spec.log_options
            .entry(ENDPOINT_OPTION.to_string())
            .or_insert_with(|| endpoint.clone());
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::spec;

    fn task(options: &str, execution_role: bool) -> TaskState {
        let role = if execution_role {
            r#""executionRoleArn": "arn:aws:iam::123456789012:role/exec","#
        } else {
            ""
        };
        let json = format!(
            r#"{{"family": "f", {role} "containerDefinitions": [
            {{"name": "app", "image": "app", "logConfiguration": {{"logDriver": "awslogs",
              "options": {{"awslogs-group": "g", "awslogs-region": "us-east-1"{options}}}}}}},
            {{"name": "plain", "image": "app", "essential": false}}]}}"#
        );
        let def = berth_model::parse(&json).expect("valid").definition;
        TaskState::new("0123456789abcdef0123456789abcdef".into(), def, 0)
    }

    fn settings(endpoint: Option<&str>) -> Settings {
        Settings {
            credentials_served: true,
            endpoint: endpoint.map(str::to_string),
        }
    }

    #[test]
    fn the_execution_role_and_the_endpoint_reach_the_driver() {
        let s = task("", true);
        let mut app = spec::container_spec(&s, 0, &[], None);
        apply(&mut app, &s, 0, &settings(Some("http://127.0.0.1:5000")));
        let id = s.role_ids.execution.as_ref().expect("an execution id");
        assert_eq!(
            app.log_options.get(CREDENTIALS_OPTION),
            Some(&format!("/v2/credentials/{id}"))
        );
        assert_eq!(
            app.log_options.get(ENDPOINT_OPTION).map(String::as_str),
            Some("http://127.0.0.1:5000")
        );
        // A container with another driver is left alone.
        let mut plain = spec::container_spec(&s, 1, &[], None);
        let before = plain.clone();
        apply(&mut plain, &s, 1, &settings(Some("http://x")));
        assert_eq!(plain, before);
    }

    #[test]
    fn what_the_definition_sets_is_kept_and_nothing_is_invented() {
        let s = task(r#", "awslogs-endpoint": "https://logs.example""#, true);
        let mut app = spec::container_spec(&s, 0, &[], None);
        apply(&mut app, &s, 0, &settings(Some("http://127.0.0.1:5000")));
        assert_eq!(
            app.log_options.get(ENDPOINT_OPTION).map(String::as_str),
            Some("https://logs.example")
        );
        // No execution role, or nothing serving credentials: the Engine's own credentials.
        let s = task("", false);
        let mut app = spec::container_spec(&s, 0, &[], None);
        apply(&mut app, &s, 0, &settings(None));
        assert!(!app.log_options.contains_key(CREDENTIALS_OPTION));
        assert!(!app.log_options.contains_key(ENDPOINT_OPTION));
        let s = task("", true);
        let mut app = spec::container_spec(&s, 0, &[], None);
        apply(&mut app, &s, 0, &Settings::default());
        assert!(!app.log_options.contains_key(CREDENTIALS_OPTION));
    }

    #[test]
    fn the_stream_prefix_becomes_ecss_stream_name() {
        let s = task(r#", "awslogs-stream-prefix": "web""#, false);
        let mut app = spec::container_spec(&s, 0, &[], None);
        apply(&mut app, &s, 0, &Settings::default());
        assert!(!app.log_options.contains_key(STREAM_PREFIX_OPTION));
        assert_eq!(
            app.log_options.get(STREAM_OPTION).map(String::as_str),
            Some("web/app/0123456789abcdef0123456789abcdef")
        );
        // A stream the definition names itself is kept; the prefix still never reaches Docker.
        let s = task(
            r#", "awslogs-stream-prefix": "web", "awslogs-stream": "mine""#,
            false,
        );
        let mut app = spec::container_spec(&s, 0, &[], None);
        apply(&mut app, &s, 0, &Settings::default());
        assert!(!app.log_options.contains_key(STREAM_PREFIX_OPTION));
        assert_eq!(
            app.log_options.get(STREAM_OPTION).map(String::as_str),
            Some("mine")
        );
    }
}
