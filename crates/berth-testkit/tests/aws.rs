//! The `aws` helpers against the moto_server scripts/test starts: what they set up can be read
//! back, and the fault helpers behave as they say (a closed port refuses, a stalled listener
//! accepts and never answers).

use berth_testkit::aws::{self, ACCOUNT, Moto};
use berth_testkit::unique_name;
use std::io::Read as _;
use std::net::TcpStream;
use std::time::Duration;

#[test]
fn what_the_helpers_set_up_can_be_read_back() {
    let moto = Moto::from_env();
    assert!(moto.endpoint().starts_with("http://127.0.0.1:"));
    assert_eq!(
        moto.addr().port().to_string(),
        moto.endpoint().rsplit(':').next().unwrap()
    );
    assert!(moto.venv().join("bin/moto_server").exists());
    let env = moto.berth_env();
    let get = |k: &str| env.iter().find(|(n, _)| n == k).map(|(_, v)| v.as_str());
    assert_eq!(get("AWS_ENDPOINT_URL"), Some(moto.endpoint()));
    assert_eq!(get("AWS_ACCESS_KEY_ID"), Some(moto.host_access_key_id()));
    assert_eq!(get("AWS_EC2_METADATA_DISABLED"), Some("true"));
    assert_eq!(get("AWS_PROFILE"), None);

    let who = moto.cli(&["sts", "get-caller-identity"]);
    assert_eq!(who["Account"], ACCOUNT);

    let role = unique_name("berth-kit-");
    assert_eq!(
        moto.create_role(&role),
        format!("arn:aws:iam::{ACCOUNT}:role/{role}")
    );

    let name = format!("/{}/p", unique_name("kit-"));
    moto.put_parameter(&name, "v1", true);
    let got = moto.cli(&["ssm", "get-parameter", "--name", &name, "--with-decryption"]);
    assert_eq!(got["Parameter"]["Value"], "v1");
    assert_eq!(got["Parameter"]["Type"], "SecureString");

    let arn = moto.create_secret(&unique_name("kit/s-"), "one");
    moto.put_secret_value(&arn, "two", &["AWSCURRENT"]);
    moto.put_secret_value(&arn, "three", &["BERTHTEST"]);
    let current = moto.cli(&["secretsmanager", "get-secret-value", "--secret-id", &arn]);
    assert_eq!(current["SecretString"], "two");
    let staged = moto.cli(&[
        "secretsmanager",
        "get-secret-value",
        "--secret-id",
        &arn,
        "--version-stage",
        "BERTHTEST",
    ]);
    assert_eq!(staged["SecretString"], "three");

    let bucket = unique_name("berth-kit-");
    moto.put_object(&bucket, "a/b.env", b"A=1\n");
    moto.put_object(&bucket, "c.env", b"C=1\n"); // the bucket exists now
    let listed = moto.cli(&["s3api", "list-objects-v2", "--bucket", &bucket]);
    let keys: Vec<&str> = listed["Contents"]
        .as_array()
        .unwrap()
        .iter()
        .map(|o| o["Key"].as_str().unwrap())
        .collect();
    assert_eq!(keys, ["a/b.env", "c.env"]);

    let repo = unique_name("berth-kit-");
    assert_eq!(
        moto.ecr_create_repository(&repo),
        format!("{ACCOUNT}.dkr.ecr.us-east-1.amazonaws.com/{repo}")
    );

    let group = unique_name("/berth/kit-");
    moto.cli(&["logs", "create-log-group", "--log-group-name", &group]);
    moto.cli(&[
        "logs",
        "create-log-stream",
        "--log-group-name",
        &group,
        "--log-stream-name",
        "s",
    ]);
    assert!(moto.log_events(&group, "s").is_empty());
    let now_ms = std::time::SystemTime::now()
        .duration_since(std::time::UNIX_EPOCH)
        .unwrap()
        .as_millis();
    let events = format!("timestamp={now_ms},message=hello");
    moto.cli(&[
        "logs",
        "put-log-events",
        "--log-group-name",
        &group,
        "--log-stream-name",
        "s",
        "--log-events",
        &events,
    ]);
    assert_eq!(moto.log_events(&group, "s"), vec!["hello".to_owned()]);

    let (ok, _, stderr) = moto.cli_status(&["ssm", "get-parameter", "--name", "/berth/absent"]);
    assert!(!ok);
    assert!(stderr.contains("ParameterNotFound"), "{stderr}");
}

#[test]
fn a_closed_port_refuses_and_a_stalled_listener_never_answers() {
    let closed = aws::closed_port();
    let err = TcpStream::connect_timeout(&closed, Duration::from_secs(2)).unwrap_err();
    assert_eq!(err.kind(), std::io::ErrorKind::ConnectionRefused);

    let (addr, stalled) = aws::stalled_listener();
    let mut s = TcpStream::connect_timeout(&addr, Duration::from_secs(2)).unwrap();
    s.set_read_timeout(Some(Duration::from_millis(300)))
        .unwrap();
    let mut buf = [0u8; 1];
    let err = s.read(&mut buf).unwrap_err();
    assert!(
        matches!(
            err.kind(),
            std::io::ErrorKind::WouldBlock | std::io::ErrorKind::TimedOut
        ),
        "{err:?}"
    );
    drop(stalled);
}

#[test]
fn a_private_server_is_its_own_and_goes_away_when_dropped() {
    let private = Moto::start_private(&[]);
    let shared = Moto::from_env();
    assert_ne!(private.endpoint(), shared.endpoint());
    let bucket = unique_name("berth-private-");
    private.put_object(&bucket, "k", b"x");
    let (found, _, _) = shared.cli_status(&["s3api", "head-bucket", "--bucket", &bucket]);
    assert!(
        !found,
        "the shared server does not have the private one's bucket"
    );
    let addr = private.addr();
    drop(private);
    assert!(TcpStream::connect_timeout(&addr, Duration::from_secs(2)).is_err());
}
