//! berth-aws against a real `moto_server` (started by scripts/test: `BERTH_TEST_AWS_ENDPOINT`,
//! `BERTH_TEST_AWS_VENV`): STS roles and their cache, SSM and Secrets Manager values, S3 objects,
//! ECR logins, and what an unreachable or stalled AWS looks like. berth's access is loaded from the
//! SDK's default chain, with the process environment set once to moto's (`Moto::berth_env`: fake
//! host keys); each test creates its own data under unique names. What is set up or checked
//! outside berth goes through the AWS CLI of moto's virtualenv.

use berth_aws::{AwsAccess, AwsOverrides, AwsSettings, AwsValues, StsRoles};
use berth_engine::remote::{RemoteAccess, RemoteError};
use berth_engine::roles::{RoleCredentials, RoleError, RoleRequest, RoleSource};
use berth_engine::secrets::SecretValue;
use berth_model::secret::SecretReference;
use berth_testkit::aws::{self, ACCOUNT, Moto, REGION};
use berth_testkit::unique_name;
use std::sync::Once;
use std::time::{Duration, Instant};

static ENV: Once = Once::new();

/// moto, with this process's environment pointed at it (once, before any SDK call).
fn moto() -> Moto {
    let moto = Moto::from_env();
    ENV.call_once(|| {
        // SAFETY: done once, inside `call_once`, before any test of this binary loads an SDK
        // configuration (every test calls `moto()` first); the values are the same for all.
        unsafe {
            for name in aws::REMOVED_ENV {
                std::env::remove_var(name);
            }
            for name in [
                "AWS_ENDPOINT_URL_STS",
                "AWS_ENDPOINT_URL_SSM",
                "AWS_ENDPOINT_URL_S3",
            ] {
                std::env::remove_var(name);
            }
            for (k, v) in moto.berth_env() {
                std::env::set_var(k, v);
            }
        }
    });
    moto
}

async fn access() -> AwsAccess {
    AwsAccess::load(AwsSettings::default()).await
}

fn reference(value_from: &str) -> SecretReference {
    SecretReference::parse(value_from).unwrap()
}

async fn secret(values: &AwsValues, value_from: &str) -> Result<SecretValue, RemoteError> {
    values
        .secret(value_from, &reference(value_from), None)
        .await
}

fn request(role_arn: &str, session: &str) -> RoleRequest {
    RoleRequest {
        role_arn: role_arn.to_owned(),
        session_name: session.to_owned(),
    }
}

#[tokio::test]
async fn berths_access_comes_from_the_default_chain_and_names_no_key() {
    let moto = moto();
    let access = access().await;
    access.has_credentials().await.unwrap();
    assert_eq!(access.region().as_deref(), Some(REGION));
    let described = access.describe();
    assert_eq!(
        described,
        format!(
            "AWS (region us-east-1, credentials from environment variables, endpoint override {})",
            moto.endpoint()
        )
    );
    assert!(!described.contains(moto.host_access_key_id()));
    assert_eq!(access.endpoint("CLOUDWATCH_LOGS", "logs"), moto.endpoint());
    assert_eq!(
        access.endpoint_override("CLOUDWATCH_LOGS").as_deref(),
        Some(moto.endpoint())
    );
    let sts = StsRoles::new(access.clone());
    assert_eq!(sts.describe(), format!("STS at {}", moto.endpoint()));
}

#[tokio::test]
async fn assume_role_answers_the_roles_own_credentials() {
    let moto = moto();
    let name = unique_name("berth-app-");
    let arn = moto.create_role(&name);
    assert_eq!(arn, format!("arn:aws:iam::{ACCOUNT}:role/{name}"));
    let roles = StsRoles::new(access().await);
    let session = "berth-web-0123456789ab";
    let before = Instant::now();
    let creds = roles.credentials(&request(&arn, session)).await.unwrap();
    assert!(before.elapsed() < Duration::from_secs(10));
    assert_eq!(creds.role_arn, arn);
    assert_ne!(creds.access_key_id, moto.host_access_key_id());
    assert_ne!(
        creds.secret_access_key.expose(),
        moto.host_secret_access_key()
    );
    let token = creds.session_token.as_ref().expect("a session token");
    let now_ms = std::time::SystemTime::now()
        .duration_since(std::time::UNIX_EPOCH)
        .unwrap()
        .as_millis() as i64;
    let left = creds.expiration_ms - now_ms;
    assert!(
        (3_000_000..=3_600_000).contains(&left),
        "an hour's credentials, {left} ms left"
    );

    // The keys are the role's: STS says who they are.
    let who = moto.cli_as(
        &creds.access_key_id,
        creds.secret_access_key.expose(),
        Some(token.expose()),
        &["sts", "get-caller-identity"],
    );
    assert_eq!(
        who["Arn"],
        format!("arn:aws:sts::{ACCOUNT}:assumed-role/{name}/{session}")
    );
}

#[tokio::test]
async fn the_cache_answers_the_same_keys_until_half_their_lifetime_then_refreshes() {
    let moto = moto();
    let arn = moto.create_role(&unique_name("berth-cache-"));
    let settings = AwsSettings {
        role_duration: Duration::from_secs(4),
        ..AwsSettings::default()
    };
    let roles = StsRoles::new(AwsAccess::load(settings).await);
    let req = request(&arn, "berth-cache-1");
    let first = roles.credentials(&req).await.unwrap();
    let again = roles.credentials(&req).await.unwrap();
    assert_eq!(again, first, "the second answer is the cached one");

    // Another session of the same role is another key of the cache.
    let other = roles
        .credentials(&request(&arn, "berth-cache-2"))
        .await
        .unwrap();
    assert_ne!(other.access_key_id, first.access_key_id);

    // Past half of the 4 s lifetime: a new AssumeRole.
    tokio::time::sleep(Duration::from_millis(2_300)).await;
    let refreshed = roles.credentials(&req).await.unwrap();
    assert_ne!(refreshed.access_key_id, first.access_key_id);
    assert!(refreshed.expiration_ms > first.expiration_ms);
    let cached = roles.credentials(&req).await.unwrap();
    assert_eq!(cached, refreshed);
}

#[tokio::test]
async fn a_failed_refresh_serves_the_held_credentials_until_they_expire() {
    moto();
    // A server of this test's own, so it can go away under the cache.
    let private = Moto::start_private(&[]);
    let arn = private.create_role(&unique_name("berth-held-"));
    let access = AwsAccess::load_with(
        AwsSettings {
            // A refresh gives up within 1 s, well before the 6 s credentials expire.
            timeout: Duration::from_secs(1),
            role_duration: Duration::from_secs(6),
        },
        AwsOverrides {
            endpoint_url: Some(private.endpoint().to_owned()),
            ..AwsOverrides::default()
        },
    )
    .await;
    let roles = StsRoles::new(access);
    let req = request(&arn, "berth-held");
    let held = roles.credentials(&req).await.unwrap();
    drop(private);

    // Past half the lifetime, STS is gone: the held credentials, still valid, are served.
    tokio::time::sleep(Duration::from_millis(3_300)).await;
    let served = roles.credentials(&req).await.unwrap();
    assert_eq!(served, held);

    // Once they have expired, the failure is the answer.
    let now_ms = std::time::SystemTime::now()
        .duration_since(std::time::UNIX_EPOCH)
        .unwrap()
        .as_millis() as i64;
    let left = u64::try_from(held.expiration_ms - now_ms).unwrap_or(0);
    tokio::time::sleep(Duration::from_millis(left + 100)).await;
    let err = roles.credentials(&req).await.unwrap_err();
    assert!(
        matches!(&err, RoleError::Unreachable { service, .. } if service == "STS"),
        "{err:?}"
    );
}

#[tokio::test]
async fn concurrent_requests_for_one_role_share_one_answer() {
    let moto = moto();
    let arn = moto.create_role(&unique_name("berth-flight-"));
    let roles = StsRoles::new(access().await);
    let req = request(&arn, "berth-flight");
    let answers = futures_util::future::join_all((0..8).map(|_| roles.credentials(&req))).await;
    let first = answers[0].clone().unwrap();
    for a in answers {
        assert_eq!(a.unwrap().access_key_id, first.access_key_id);
    }
}

#[tokio::test]
async fn a_role_that_is_not_an_arn_is_unavailable_before_sts_is_asked() {
    moto();
    let roles = StsRoles::new(access().await);
    let err = roles
        .credentials(&request("app-task", "s"))
        .await
        .unwrap_err();
    assert!(
        matches!(&err, RoleError::Unavailable { role_arn, .. } if role_arn == "app-task"),
        "{err:?}"
    );
}

#[tokio::test]
async fn ssm_parameters_by_name_by_arn_and_decrypted() {
    let moto = moto();
    let values = AwsValues::new(access().await);
    let name = format!("/{}/db", unique_name("prod-"));
    moto.put_parameter(&name, "postgres://db:5432", false);
    assert_eq!(
        secret(&values, &name).await.unwrap().expose(),
        "postgres://db:5432"
    );

    let arn = format!("arn:aws:ssm:{REGION}:{ACCOUNT}:parameter{name}");
    assert_eq!(
        secret(&values, &arn).await.unwrap().expose(),
        "postgres://db:5432"
    );

    let secure = format!("/{}/password", unique_name("prod-"));
    moto.put_parameter(&secure, "s3cr3t", true);
    let raw = moto.cli(&["ssm", "get-parameter", "--name", &secure]);
    assert_ne!(raw["Parameter"]["Value"], "s3cr3t", "stored encrypted");
    assert_eq!(secret(&values, &secure).await.unwrap().expose(), "s3cr3t");
}

#[tokio::test]
async fn a_missing_parameter_is_refused_with_awss_code_and_its_name() {
    let moto = moto();
    let values = AwsValues::new(access().await);
    let name = format!("/{}/absent", unique_name("prod-"));
    let err = secret(&values, &name).await.unwrap_err();
    match &err {
        RemoteError::Refused {
            service,
            endpoint,
            code,
            message,
        } => {
            assert_eq!(service, "SSM");
            assert_eq!(endpoint, moto.endpoint());
            assert_eq!(code, "ParameterNotFound");
            assert!(message.contains(&name), "{message}");
        }
        other => panic!("{other:?}"),
    }
    assert!(err.to_string().starts_with(&format!(
        "SSM at {} answered ParameterNotFound: ",
        moto.endpoint()
    )));
}

#[tokio::test]
async fn secrets_manager_by_arn_and_by_version_stage() {
    let moto = moto();
    let values = AwsValues::new(access().await);
    let name = unique_name("prod/db-");
    let arn = moto.create_secret(&name, r#"{"password":"one"}"#);
    moto.put_secret_value(&arn, r#"{"password":"two"}"#, &[]);

    assert_eq!(
        secret(&values, &arn).await.unwrap().expose(),
        r#"{"password":"two"}"#
    );
    // ECS's suffix: the json key is the caller's to select; the stage is asked of AWS.
    let previous = format!("{arn}:password:AWSPREVIOUS:");
    assert_eq!(
        secret(&values, &previous).await.unwrap().expose(),
        r#"{"password":"one"}"#
    );
    let current = format!("{arn}::AWSCURRENT:");
    assert_eq!(
        secret(&values, &current).await.unwrap().expose(),
        r#"{"password":"two"}"#
    );

    let missing = format!("{arn}::NOSUCHSTAGE:");
    let err = secret(&values, &missing).await.unwrap_err();
    assert!(
        matches!(&err, RemoteError::Refused { service, code, .. }
            if service == "Secrets Manager" && code == "ResourceNotFoundException"),
        "{err:?}"
    );
}

#[tokio::test]
async fn an_s3_object_is_read_as_text_within_a_limit() {
    let moto = moto();
    let values = AwsValues::new(access().await);
    let bucket = unique_name("berth-env-");
    moto.put_object(&bucket, "app/web.env", b"A=1\nB=two words\n");
    let text = values
        .s3_object(&bucket, "app/web.env", None)
        .await
        .unwrap();
    assert_eq!(text.expose(), "A=1\nB=two words\n");

    let err = values
        .s3_object(&bucket, "app/absent.env", None)
        .await
        .unwrap_err();
    assert!(
        matches!(&err, RemoteError::Refused { service, code, message, .. }
            if service == "S3" && code == "NoSuchKey" && message.contains("app/absent.env")),
        "{err:?}"
    );

    moto.put_object(
        &bucket,
        "big.env",
        &vec![b'x'; berth_aws::S3_OBJECT_LIMIT + 1],
    );
    let err = values
        .s3_object(&bucket, "big.env", None)
        .await
        .unwrap_err();
    assert!(err.to_string().contains("over 1 MiB"), "{err}");

    moto.put_object(&bucket, "binary.env", &[0xff, 0xfe, b'A']);
    let err = values
        .s3_object(&bucket, "binary.env", None)
        .await
        .unwrap_err();
    assert!(err.to_string().contains("not UTF-8"), "{err}");
}

#[tokio::test]
async fn an_ecr_login_is_the_decoded_token_of_user_aws() {
    let moto = moto();
    let values = AwsValues::new(access().await);
    let repo = moto.ecr_create_repository(&unique_name("berth-ecr-"));
    let registry = repo.split('/').next().unwrap().to_owned();
    assert_eq!(
        registry,
        format!("{ACCOUNT}.dkr.ecr.{REGION}.amazonaws.com")
    );
    let login = values.ecr_login(&registry, None).await.unwrap();
    assert_eq!(login.username, "AWS");
    assert!(!login.password.is_empty());
    assert_eq!(login.identity_token, None);
    assert_eq!(login.server, registry);
    assert_eq!(
        login.source,
        format!("ECR GetAuthorizationToken at {}", moto.endpoint())
    );
    // The token the CLI gets, decoded, is the same login.
    let token = moto.cli(&["ecr", "get-authorization-token"]);
    let token = token["authorizationData"][0]["authorizationToken"]
        .as_str()
        .unwrap()
        .to_owned();
    use base64::Engine as _;
    let decoded = base64::engine::general_purpose::STANDARD
        .decode(token)
        .unwrap();
    assert_eq!(
        String::from_utf8(decoded).unwrap(),
        format!("AWS:{}", login.password)
    );

    let err = values.ecr_login("docker.io", None).await.unwrap_err();
    assert!(matches!(err, RemoteError::Refused { .. }), "{err:?}");
}

#[tokio::test]
async fn calls_with_an_execution_role_are_signed_with_its_credentials() {
    let moto = moto();
    let access = access().await;
    let arn = moto.create_role(&unique_name("berth-exec-"));
    let roles = StsRoles::new(access.clone());
    let role: RoleCredentials = roles
        .credentials(&request(&arn, "berth-exec"))
        .await
        .unwrap();
    let values = AwsValues::new(access);
    let name = format!("/{}/db", unique_name("prod-"));
    moto.put_parameter(&name, "with-role", false);
    let value = values
        .secret(&name, &reference(&name), Some(&role))
        .await
        .unwrap();
    assert_eq!(value.expose(), "with-role");
    let bucket = unique_name("berth-env-");
    moto.put_object(&bucket, "k", b"X=1\n");
    assert_eq!(
        values
            .s3_object(&bucket, "k", Some(&role))
            .await
            .unwrap()
            .expose(),
        "X=1\n"
    );
    let registry = format!("{ACCOUNT}.dkr.ecr.{REGION}.amazonaws.com");
    assert_eq!(
        values
            .ecr_login(&registry, Some(&role))
            .await
            .unwrap()
            .username,
        "AWS"
    );
}

/// berth's access pointed at `endpoint`, with `timeout`.
async fn access_at(endpoint: &str, timeout: Duration) -> AwsAccess {
    AwsAccess::load_with(
        AwsSettings {
            timeout,
            ..AwsSettings::default()
        },
        AwsOverrides {
            endpoint_url: Some(endpoint.to_owned()),
            ..AwsOverrides::default()
        },
    )
    .await
}

#[tokio::test]
async fn a_closed_port_is_unreachable_soon() {
    moto();
    let endpoint = format!("http://{}", aws::closed_port());
    let access = access_at(&endpoint, Duration::from_secs(2)).await;
    let values = AwsValues::new(access.clone());
    let started = Instant::now();
    let err = secret(&values, "/prod/db").await.unwrap_err();
    assert!(started.elapsed() < Duration::from_secs(10));
    match &err {
        RemoteError::Unreachable {
            service,
            endpoint: at,
            message,
        } => {
            assert_eq!(service, "SSM");
            assert_eq!(at, &endpoint);
            assert!(
                message.starts_with("connection refused") || message.starts_with("timed out"),
                "{message}"
            );
        }
        other => panic!("{other:?}"),
    }

    let started = Instant::now();
    let err = StsRoles::new(access)
        .credentials(&request("arn:aws:iam::123456789012:role/app", "s"))
        .await
        .unwrap_err();
    assert!(started.elapsed() < Duration::from_secs(10));
    assert!(
        matches!(&err, RoleError::Unreachable { service, endpoint: at, .. }
            if service == "STS" && at == &endpoint),
        "{err:?}"
    );
    assert!(
        err.to_string().starts_with(&format!(
            "cannot reach STS at {endpoint} for role arn:aws:iam::123456789012:role/app: "
        )),
        "{err}"
    );
}

#[tokio::test]
async fn a_stalled_endpoint_times_out_within_the_timeout() {
    moto();
    let (addr, _stalled) = aws::stalled_listener();
    let endpoint = format!("http://{addr}");
    let access = access_at(&endpoint, Duration::from_secs(2)).await;
    let started = Instant::now();
    let err = AwsValues::new(access.clone())
        .s3_object("bucket", "key", None)
        .await
        .unwrap_err();
    let took = started.elapsed();
    assert!(took < Duration::from_secs(10), "{took:?}");
    assert!(took >= Duration::from_millis(1_900), "{took:?}");
    assert_eq!(
        err,
        RemoteError::Unreachable {
            service: "S3".into(),
            endpoint: endpoint.clone(),
            message: "timed out after 2 s".into(),
        }
    );

    let started = Instant::now();
    let err = StsRoles::new(access)
        .credentials(&request("arn:aws:iam::123456789012:role/app", "s"))
        .await
        .unwrap_err();
    assert!(started.elapsed() < Duration::from_secs(10));
    assert!(
        matches!(&err, RoleError::Unreachable { message, .. } if message == "timed out after 2 s"),
        "{err:?}"
    );
}
