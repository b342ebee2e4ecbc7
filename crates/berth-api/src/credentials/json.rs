//! The credentials endpoint's answers, in ECS's shapes: the credentials
//! (`{"RoleArn","AccessKeyId","SecretAccessKey","Token","Expiration"}`) and the error object
//! (`{"code","message"}`) with the codes and texts of the ECS agent's credentials handler.

use berth_engine::roles::RoleCredentials;
use serde::Serialize;

/// The prefix of every error message of the v2 route, as ECS words it.
pub const ERROR_PREFIX: &str = "CredentialsV2Request: ";
/// No id after `/v2/credentials/`.
pub const NO_ID: &str = "NoIdInRequest";
/// An id that names no credentials (and, at berth, an id refused to this caller).
pub const INVALID_ID: &str = "InvalidIdInRequest";
/// The role's source failed.
pub const INTERNAL: &str = "InternalServerError";

/// ECS's error object.
#[derive(Debug, Clone, PartialEq, Eq, Serialize)]
pub struct ErrorBody {
    pub code: &'static str,
    pub message: String,
}

impl ErrorBody {
    pub fn no_id() -> ErrorBody {
        ErrorBody {
            code: NO_ID,
            message: format!("{ERROR_PREFIX}No Credential ID in the request"),
        }
    }

    /// Unknown ids and refused callers get the very same answer, so nothing tells them apart.
    pub fn not_found() -> ErrorBody {
        ErrorBody {
            code: INVALID_ID,
            message: format!("{ERROR_PREFIX}Credentials not found"),
        }
    }

    /// The source's failure: `why` names the role, the service and AWS's words (never a secret:
    /// [`berth_engine::roles::RoleError`] carries none).
    pub fn internal(why: &str) -> ErrorBody {
        ErrorBody {
            code: INTERNAL,
            message: format!("{ERROR_PREFIX}{why}"),
        }
    }
}

/// ECS's credentials JSON.
#[derive(Serialize)]
#[serde(rename_all = "PascalCase")]
pub struct CredentialsBody<'a> {
    pub role_arn: &'a str,
    pub access_key_id: &'a str,
    pub secret_access_key: &'a str,
    /// Always present: botocore reads it unconditionally; empty for long-term keys.
    pub token: &'a str,
    pub expiration: String,
}

/// When a source gives credentials without an expiry (long-term keys of a local file), the
/// answer says they expire this far ahead, so clients come back for them.
pub const DEFAULT_LIFETIME_MS: i64 = 60 * 60 * 1000;

impl<'a> CredentialsBody<'a> {
    pub fn new(c: &'a RoleCredentials) -> CredentialsBody<'a> {
        CredentialsBody {
            role_arn: &c.role_arn,
            access_key_id: &c.access_key_id,
            secret_access_key: c.secret_access_key.expose(),
            token: c.session_token.as_ref().map_or("", |t| t.expose()),
            expiration: rfc3339(c.expiration_ms),
        }
    }
}

/// Milliseconds since the epoch as RFC 3339 in UTC to the second (`2026-12-02T12:00:00Z`), as
/// ECS's `Expiration`.
pub fn rfc3339(ms: i64) -> String {
    let format =
        time::macros::format_description!("[year]-[month]-[day]T[hour]:[minute]:[second]Z");
    time::OffsetDateTime::from_unix_timestamp(ms.div_euclid(1000))
        .ok()
        .and_then(|t| t.format(format).ok())
        .unwrap_or_else(|| "1970-01-01T00:00:00Z".to_string())
}

#[cfg(test)]
mod tests {
    use super::*;
    use berth_engine::secrets::SecretValue;

    #[test]
    fn the_answer_has_ecss_fields_and_format() {
        let c = RoleCredentials {
            role_arn: "arn:aws:iam::123456789012:role/app".into(),
            access_key_id: "AKIDEXAMPLE".into(),
            secret_access_key: SecretValue::new("s3cret".into()),
            session_token: Some(SecretValue::new("tok".into())),
            expiration_ms: 1_796_212_800_000,
        };
        let v = serde_json::to_value(CredentialsBody::new(&c)).expect("json");
        assert_eq!(
            v,
            serde_json::json!({
                "RoleArn": "arn:aws:iam::123456789012:role/app",
                "AccessKeyId": "AKIDEXAMPLE",
                "SecretAccessKey": "s3cret",
                "Token": "tok",
                "Expiration": "2026-12-02T12:00:00Z"
            })
        );
    }

    #[test]
    fn errors_are_ecss_words() {
        assert_eq!(
            serde_json::to_value(ErrorBody::no_id()).expect("json"),
            serde_json::json!({"code": "NoIdInRequest", "message": "CredentialsV2Request: No Credential ID in the request"})
        );
        assert_eq!(
            serde_json::to_value(ErrorBody::not_found()).expect("json"),
            serde_json::json!({"code": "InvalidIdInRequest", "message": "CredentialsV2Request: Credentials not found"})
        );
    }
}
