//! The credentials endpoint over real HTTP on loopback, against the fake runtime and a scripted
//! role source: ECS's credentials JSON, its error shapes (no id, unknown id, source failure),
//! the caller rule (a bridge task's id refused to a caller that is not its container, answered
//! as an unknown id; a host task's answered by id; an execution id answered to the host), the
//! audit lines (0600, no secret, no id), and v2 metadata's answer to a caller that is no task.

mod common;

use berth_api::credentials::{CredentialsConfig, CredentialsServer};
use berth_api::metadata::TaskDirectory;
use berth_api::metadata::json::TaskInfo;
use berth_api::serve::ServerLimits;
use berth_engine::TaskState;
use berth_engine::fake::FakeRuntime;
use berth_engine::roles::{BoxFuture, RoleCredentials, RoleError, RoleRequest, RoleSource};
use berth_engine::secrets::SecretValue;
use common::{Conn, task};
use serde_json::json;
use std::os::unix::fs::PermissionsExt as _;
use std::sync::{Arc, Mutex};
use tokio::sync::watch;

/// Answers every role with fixed keys, except the role named `denied`; records the requests.
#[derive(Default)]
struct Scripted {
    asked: Mutex<Vec<RoleRequest>>,
}

impl RoleSource for Scripted {
    fn credentials<'a>(
        &'a self,
        request: &'a RoleRequest,
    ) -> BoxFuture<'a, Result<RoleCredentials, RoleError>> {
        self.asked.lock().expect("lock").push(request.clone());
        Box::pin(async move {
            if request.role_arn.ends_with("/denied") {
                return Err(RoleError::Refused {
                    role_arn: request.role_arn.clone(),
                    service: "STS".into(),
                    endpoint: "http://sts.test".into(),
                    code: "AccessDenied".into(),
                    message: "not authorized to perform sts:AssumeRole".into(),
                });
            }
            Ok(RoleCredentials {
                role_arn: request.role_arn.clone(),
                access_key_id: "ASIATESTKEY".into(),
                secret_access_key: SecretValue::new("TOPSECRETVALUE".into()),
                session_token: Some(SecretValue::new("SESSIONTOKENVALUE".into())),
                expiration_ms: 1_796_212_800_000,
            })
        })
    }

    fn describe(&self) -> String {
        "scripted".into()
    }
}

fn with_roles(mut t: TaskState, task_role: &str, execution: bool) -> TaskState {
    t.definition.task_role_arn = Some(task_role.to_string());
    if execution {
        t.definition.execution_role_arn = Some("arn:aws:iam::123456789012:role/exec".into());
    }
    t.role_ids = berth_engine::roles::RoleIds::for_definition(&t.definition);
    t
}

#[tokio::test]
async fn credentials_answer_as_ecs_with_the_caller_rule_and_an_audit_line_each() {
    let tmp = tempfile::tempdir().expect("tmp");
    let audit = tmp.path().join("credentials-audit.log");
    let rt = Arc::new(FakeRuntime::new());
    let directory = Arc::new(TaskDirectory::new());
    let source = Arc::new(Scripted::default());
    let host = with_roles(task("hosted", 1, "host"), "app", true);
    let bridge = with_roles(
        task("bridged", 1, "bridge"),
        "arn:aws:iam::123456789012:role/app",
        false,
    );
    let denied = with_roles(
        task("denied", 1, "host"),
        "arn:aws:iam::123456789012:role/denied",
        false,
    );
    let mut senders = Vec::new();
    for t in [&host, &bridge, &denied] {
        let (tx, rx) = watch::channel(t.clone());
        directory.register(rx);
        senders.push(tx);
    }
    let info = TaskInfo {
        identity: berth_engine::Identity {
            account: "123456789012".into(),
            ..berth_engine::Identity::default()
        },
        ..TaskInfo::default()
    };
    let server = CredentialsServer::start(
        rt,
        directory,
        Some(source.clone()),
        CredentialsConfig {
            task: info,
            audit_log: Some(audit.clone()),
            limits: ServerLimits::METADATA,
        },
        "127.0.0.1:0".parse().expect("addr"),
    )
    .await
    .expect("starts");
    let mut conn = Conn::open(server.local_addr()).await;

    // A host task's id: answered by id, the role name completed with the host's account.
    let id = host.role_ids.task.clone().expect("id");
    let (status, v) = conn.get_json(&format!("/v2/credentials/{id}")).await;
    assert_eq!(status, 200, "{v}");
    assert_eq!(
        v,
        json!({
            "RoleArn": "arn:aws:iam::123456789012:role/app",
            "AccessKeyId": "ASIATESTKEY",
            "SecretAccessKey": "TOPSECRETVALUE",
            "Token": "SESSIONTOKENVALUE",
            "Expiration": "2026-12-02T12:00:00Z"
        })
    );
    let asked = source.asked.lock().expect("lock")[0].clone();
    assert!(asked.session_name.starts_with("berth-hosted-"), "{asked:?}");

    // The execution id, asked from the host (not a task container): answered.
    let exec = host.role_ids.execution.clone().expect("id");
    let (status, v) = conn.get_json(&format!("/v2/credentials/{exec}")).await;
    assert_eq!(
        (status, &v["RoleArn"]),
        (200, &json!("arn:aws:iam::123456789012:role/exec"))
    );

    // No id, an unknown id, a task id, and a bridge task's id asked from the host: ECS's 400s,
    // the refusal indistinguishable from the unknown id.
    let not_found = json!({"code": "InvalidIdInRequest", "message": "CredentialsV2Request: Credentials not found"});
    for path in ["/v2/credentials/", "/v2/credentials"] {
        assert_eq!(
            conn.get_json(path).await,
            (
                400,
                json!({"code": "NoIdInRequest", "message": "CredentialsV2Request: No Credential ID in the request"})
            ),
            "{path}"
        );
    }
    let bridge_id = bridge.role_ids.task.clone().expect("id");
    for path in [
        "/v2/credentials/00000000000000000000000000000000".to_string(),
        format!("/v2/credentials/{}", host.id),
        format!("/v2/credentials/{bridge_id}"),
    ] {
        assert_eq!(
            conn.get_json(&path).await,
            (400, not_found.clone()),
            "{path}"
        );
    }

    // The source refuses: 500, naming the role, the service and AWS's words.
    let denied_id = denied.role_ids.task.clone().expect("id");
    let (status, v) = conn.get_json(&format!("/v2/credentials/{denied_id}")).await;
    assert_eq!((status, &v["code"]), (500, &json!("InternalServerError")));
    let message = v["message"].as_str().expect("message");
    assert!(
        message.starts_with("CredentialsV2Request: ")
            && message.contains("arn:aws:iam::123456789012:role/denied")
            && message.contains("STS")
            && message.contains("AccessDenied"),
        "{message}"
    );

    // v2 metadata: the host is no task's container.
    let (status, v) = conn.get_json("/v2/metadata").await;
    assert_eq!(status, 400);
    assert_eq!(
        v,
        json!("Unable to get task arn from request: unable to associate '127.0.0.1' with task")
    );

    server.shutdown().await;
    let text = std::fs::read_to_string(&audit).expect("audit log");
    let mode = std::fs::metadata(&audit)
        .expect("stat")
        .permissions()
        .mode()
        & 0o777;
    assert_eq!(mode, 0o600);
    let lines: Vec<&str> = text.lines().collect();
    assert_eq!(lines.len(), 8, "{text}");
    for secret in [
        "TOPSECRETVALUE",
        "SESSIONTOKENVALUE",
        id.as_str(),
        bridge_id.as_str(),
        exec.as_str(),
    ] {
        assert!(
            !text.contains(secret),
            "the audit log holds {secret}: {text}"
        );
    }
    assert!(
        lines[0].contains(" 200 127.0.0.1:")
            && lines[0].contains("\"/v2/credentials\"")
            && lines[0].contains(" GetCredentials 2 default "),
        "{}",
        lines[0]
    );
    assert!(
        lines[1].contains(" GetCredentialsExecutionRole 2 "),
        "{}",
        lines[1]
    );
    let refused = lines
        .iter()
        .find(|l| l.contains("refused:"))
        .expect("the refusal is recorded with its reason");
    assert!(
        refused.contains(&bridge.id) && refused.contains("127.0.0.1"),
        "{refused}"
    );
}
