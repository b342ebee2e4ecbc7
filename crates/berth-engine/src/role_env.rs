//! The task role's variable in the containers: with the credentials endpoint served, every
//! container of a task with a `taskRoleArn` (in any network mode; not the pause container berth
//! adds) gets `AWS_CONTAINER_CREDENTIALS_RELATIVE_URI=/v2/credentials/<the task's id>`, which
//! every AWS SDK turns into `http://169.254.170.2/v2/credentials/<id>`.
//!
//! As on ECS (`initializeCredentialsEndpoint` in the ECS agent's task code), berth's value
//! replaces one the definition sets itself; a task without a role, or a host where the endpoint
//! is not served, keeps the definition's environment as it is.

use crate::roles::RELATIVE_URI_VARIABLE;
use crate::spec::ContainerSpec;
use crate::state::TaskState;

/// Set container `i`'s variable when `served` and the task has a task role id.
pub fn apply(spec: &mut ContainerSpec, state: &TaskState, i: usize, served: bool) {
    if !served || state.is_pause(i) {
        return;
    }
    let Some(uri) = state.role_ids.relative_uri() else {
        return;
    };
    let prefix = format!("{RELATIVE_URI_VARIABLE}=");
    spec.env.retain(|e| !e.starts_with(&prefix));
    spec.env.push(format!("{prefix}{uri}"));
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::spec;

    fn task(mode: &str, role: bool, own_value: bool) -> TaskState {
        let role = if role {
            r#""taskRoleArn": "arn:aws:iam::123456789012:role/app","#
        } else {
            ""
        };
        let env = if own_value {
            r#", "environment": [{"name": "AWS_CONTAINER_CREDENTIALS_RELATIVE_URI", "value": "/mine"}, {"name": "A", "value": "1"}]"#
        } else {
            ""
        };
        let json = format!(
            r#"{{"family": "f", "networkMode": "{mode}", {role} "containerDefinitions": [
              {{"name": "app", "image": "app", "memory": 64{env}}},
              {{"name": "side", "image": "side", "memory": 64}}]}}"#
        );
        let def = berth_model::parse(&json).expect("valid").definition;
        TaskState::new(crate::new_task_id(), def, 0)
    }

    fn vars(state: &TaskState, i: usize, served: bool) -> Vec<String> {
        let mut s = spec::container_spec(state, i, &[], None);
        apply(&mut s, state, i, served);
        s.env
            .into_iter()
            .filter(|e| e.starts_with(RELATIVE_URI_VARIABLE))
            .collect()
    }

    #[test]
    fn every_container_of_a_task_with_a_role_gets_its_uri_in_every_mode() {
        for mode in ["bridge", "host", "awsvpc"] {
            let s = task(mode, true, false);
            let id = s.role_ids.task.clone().expect("id");
            let want = vec![format!("{RELATIVE_URI_VARIABLE}=/v2/credentials/{id}")];
            for i in 0..s.containers.len() {
                if s.is_pause(i) {
                    assert!(vars(&s, i, true).is_empty(), "{mode}: the pause container");
                } else {
                    assert_eq!(vars(&s, i, true), want, "{mode} container {i}");
                }
            }
        }
    }

    #[test]
    fn no_role_or_no_endpoint_means_no_variable() {
        let s = task("bridge", false, false);
        assert!(vars(&s, 0, true).is_empty());
        let s = task("bridge", true, false);
        assert!(vars(&s, 0, false).is_empty());
    }

    #[test]
    fn berths_value_replaces_the_definitions_as_on_ecs() {
        let s = task("bridge", true, true);
        let id = s.role_ids.task.clone().expect("id");
        assert_eq!(
            vars(&s, 0, true),
            vec![format!("{RELATIVE_URI_VARIABLE}=/v2/credentials/{id}")]
        );
        // Without a served endpoint the definition's own value stays.
        assert_eq!(
            vars(&s, 0, false),
            vec![format!("{RELATIVE_URI_VARIABLE}=/mine")]
        );
    }
}
