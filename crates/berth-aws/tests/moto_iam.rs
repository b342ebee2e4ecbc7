//! A real `AccessDenied`: berth's access is a user without any policy, on a `moto_server` of this
//! test's own that enforces IAM (`PrivateMoto::with_iam_enforcement`). Its own test binary, since
//! berth's credentials come from the process environment, which here names that user.

use berth_aws::{AwsAccess, AwsSettings, StsRoles};
use berth_engine::roles::{RoleError, RoleRequest, RoleSource};
use berth_testkit::aws::{self, PrivateMoto};

#[tokio::test]
async fn sts_refusing_a_user_without_permission_is_refused_with_awss_words() {
    let (moto, user) = PrivateMoto::with_iam_enforcement();
    // SAFETY: this binary's only test, before any SDK configuration is loaded.
    unsafe {
        for name in aws::REMOVED_ENV {
            std::env::remove_var(name);
        }
        std::env::remove_var("AWS_ENDPOINT_URL_STS");
        for (k, v) in moto.berth_env() {
            std::env::set_var(k, v);
        }
        std::env::set_var("AWS_ACCESS_KEY_ID", &user.access_key_id);
        std::env::set_var("AWS_SECRET_ACCESS_KEY", &user.secret_access_key);
    }
    let roles = StsRoles::new(AwsAccess::load(AwsSettings::default()).await);
    let role_arn = "arn:aws:iam::123456789012:role/berth-app";
    let err = roles
        .credentials(&RoleRequest {
            role_arn: role_arn.to_owned(),
            session_name: "berth-denied".to_owned(),
        })
        .await
        .unwrap_err();
    match &err {
        RoleError::Refused {
            role_arn: arn,
            service,
            endpoint,
            code,
            message,
        } => {
            assert_eq!(arn, role_arn);
            assert_eq!(service, "STS");
            assert_eq!(endpoint, moto.endpoint());
            assert_eq!(code, "AccessDenied", "{message}");
            assert!(
                message.contains(&user.arn) && message.contains("sts:AssumeRole"),
                "{message}"
            );
        }
        other => panic!("{other:?}"),
    }
    assert!(!err.to_string().contains(&user.secret_access_key));
}
