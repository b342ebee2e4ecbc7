//! The one place an AWS SDK failure becomes berth's words: [`Failure::of`] sorts an `SdkError`
//! into a refusal (the service answered with an error: AWS's code and message, from
//! `ProvideErrorMetadata`) or no answer (connect, TLS, timeout, an unreadable response, a request
//! that could not be built — e.g. no credentials or no region), with a readable message and the
//! SDK's error chain ([`error_chain`]: `DisplayErrorContext` without its `Debug` tail); [`Failure::remote`] and [`Failure::role`] turn it
//! into the engine's `RemoteError` and `RoleError`, naming the service as AWS writes it and the
//! endpoint. Also the small pure helpers about ARNs and partitions the services share.
//!
//! No value reaches a message: the SDK's errors carry codes, messages and transport errors only.

use aws_smithy_runtime_api::client::orchestrator::HttpResponse;
use aws_smithy_runtime_api::client::result::SdkError;
use aws_smithy_types::error::display::DisplayErrorContext;
use aws_smithy_types::error::metadata::ProvideErrorMetadata;
use berth_engine::remote::RemoteError;
use berth_engine::roles::RoleError;
use std::error::Error;
use std::time::Duration;

/// Service names as AWS writes them.
pub const STS: &str = "STS";
pub const SSM: &str = "SSM";
pub const SECRETS_MANAGER: &str = "Secrets Manager";
pub const S3: &str = "S3";
pub const ECR: &str = "ECR";

/// Why a call got no value.
#[derive(Debug, Clone, PartialEq, Eq)]
pub enum Failure {
    /// The service answered with an error.
    Refused { code: String, message: String },
    /// No usable answer.
    Unreachable { message: String },
}

/// "10 s", "2.5 s", "300 ms".
pub fn readable_duration(d: Duration) -> String {
    if d.subsec_millis() == 0 && d.as_secs() > 0 {
        format!("{} s", d.as_secs())
    } else if d.as_secs() > 0 {
        format!("{:.1} s", d.as_secs_f64())
    } else {
        format!("{} ms", d.as_millis())
    }
}

/// An error and its sources in words, as the SDK's `DisplayErrorContext` writes them
/// ("dispatch failure: io error: …: Connection refused (os error 111)"), without the `Debug` form
/// it appends (long, and nothing a reader needs).
pub fn error_chain<E: Error + 'static>(error: &E) -> String {
    let full = DisplayErrorContext(error).to_string();
    let debug = format!(" ({error:?})");
    match full.strip_suffix(&debug) {
        Some(words) => words.to_owned(),
        None => full,
    }
}

/// The first I/O error in an error's chain, in words ("connection refused").
fn io_words(error: &(dyn Error + 'static)) -> Option<&'static str> {
    let mut next: Option<&(dyn Error + 'static)> = Some(error);
    while let Some(e) = next {
        if let Some(io) = e.downcast_ref::<std::io::Error>() {
            use std::io::ErrorKind::*;
            return Some(match io.kind() {
                ConnectionRefused => "connection refused",
                ConnectionReset => "connection reset",
                ConnectionAborted => "connection aborted",
                TimedOut => "timed out",
                HostUnreachable => "host unreachable",
                NetworkUnreachable => "network unreachable",
                UnexpectedEof => "the connection closed early",
                _ => "I/O error",
            });
        }
        next = e.source();
    }
    None
}

/// The text of the first `<name>…</name>` in an XML error body, unescaped.
fn xml_element(body: &[u8], name: &str) -> Option<String> {
    let text = std::str::from_utf8(body).ok()?;
    let open = format!("<{name}>");
    let start = text.find(&open)? + open.len();
    let len = text[start..].find(&format!("</{name}>"))?;
    let raw = text[start..start + len].trim();
    let unescaped = raw
        .replace("&lt;", "<")
        .replace("&gt;", ">")
        .replace("&quot;", "\"")
        .replace("&apos;", "'")
        .replace("&amp;", "&");
    (!unescaped.is_empty()).then_some(unescaped)
}

impl Failure {
    /// Sort an SDK error. `timeout`: the operation timeout berth set, for the message.
    pub fn of<E>(error: &SdkError<E, HttpResponse>, timeout: Duration) -> Failure
    where
        E: ProvideErrorMetadata + Error + 'static,
    {
        let chain = error_chain(error);
        match error {
            SdkError::ServiceError(service) => {
                let status = service.raw().status().as_u16();
                // What the SDK could not read from an error of another shape (an XML
                // `<Errors><Error>` list where the protocol has one `<Error>`).
                let body = service.raw().body().bytes().unwrap_or_default();
                let code = service
                    .err()
                    .code()
                    .map(str::to_owned)
                    .or_else(|| xml_element(body, "Code"))
                    .unwrap_or_else(|| format!("HTTP {status}"));
                let message = service
                    .err()
                    .message()
                    .map(str::to_owned)
                    .or_else(|| xml_element(body, "Message"))
                    .unwrap_or(chain);
                Failure::Refused { code, message }
            }
            SdkError::TimeoutError(_) => Failure::Unreachable {
                message: format!("timed out after {}", readable_duration(timeout)),
            },
            SdkError::DispatchFailure(dispatch) => {
                let words = if dispatch.is_timeout() {
                    Some("timed out")
                } else {
                    io_words(error)
                };
                let message = match words {
                    Some(w) => format!("{w} ({chain})"),
                    None => chain,
                };
                Failure::Unreachable { message }
            }
            SdkError::ResponseError(_) => Failure::Unreachable {
                message: format!("the answer could not be read ({chain})"),
            },
            SdkError::ConstructionFailure(_) => Failure::Unreachable {
                message: format!("the request could not be made ({chain})"),
            },
            _ => Failure::Unreachable { message: chain },
        }
    }

    /// The same failure, its refusal's message naming what was asked (`operation` and `name`,
    /// e.g. "GetParameter", "/prod/db") when AWS's own message does not: AWS often answers
    /// `ParameterNotFound` without the name, or with no message at all.
    pub fn about(self, operation: &str, name: &str) -> Failure {
        match self {
            Failure::Refused { code, message } if message.trim().is_empty() => Failure::Refused {
                code,
                message: format!("{operation} {name}"),
            },
            Failure::Refused { code, message } if !message.contains(name) => Failure::Refused {
                code,
                message: format!("{message} ({operation} {name})"),
            },
            other => other,
        }
    }

    /// As the engine's [`RemoteError`].
    pub fn remote(self, service: &str, endpoint: &str) -> RemoteError {
        match self {
            Failure::Refused { code, message } => RemoteError::Refused {
                service: service.to_owned(),
                endpoint: endpoint.to_owned(),
                code,
                message,
            },
            Failure::Unreachable { message } => RemoteError::Unreachable {
                service: service.to_owned(),
                endpoint: endpoint.to_owned(),
                message,
            },
        }
    }

    /// As the engine's [`RoleError`] for `role_arn`.
    pub fn role(self, role_arn: &str, service: &str, endpoint: &str) -> RoleError {
        match self {
            Failure::Refused { code, message } => RoleError::Refused {
                role_arn: role_arn.to_owned(),
                service: service.to_owned(),
                endpoint: endpoint.to_owned(),
                code,
                message,
            },
            Failure::Unreachable { message } => RoleError::Unreachable {
                role_arn: role_arn.to_owned(),
                service: service.to_owned(),
                endpoint: endpoint.to_owned(),
                message,
            },
        }
    }
}

/// The partition a region belongs to (`aws`, `aws-cn`, `aws-us-gov`, `aws-iso`, `aws-iso-b`).
pub fn region_partition(region: &str) -> &'static str {
    if region.starts_with("cn-") {
        "aws-cn"
    } else if region.starts_with("us-gov-") {
        "aws-us-gov"
    } else if region.starts_with("us-isob-") {
        "aws-iso-b"
    } else if region.starts_with("us-iso-") {
        "aws-iso"
    } else {
        "aws"
    }
}

/// A region of a partition, for calls that have no region of their own.
pub fn partition_default_region(partition: &str) -> Option<&'static str> {
    Some(match partition {
        "aws" => "us-east-1",
        "aws-cn" => "cn-north-1",
        "aws-us-gov" => "us-gov-west-1",
        "aws-iso" => "us-iso-east-1",
        "aws-iso-b" => "us-isob-east-1",
        _ => return None,
    })
}

/// The region field of an ARN (`arn:<partition>:<service>:<region>:…`), when it is an ARN and the
/// field is not empty.
pub fn arn_region(arn: &str) -> Option<&str> {
    let mut fields = arn.splitn(6, ':');
    if fields.next()? != "arn" {
        return None;
    }
    let region = fields.nth(2)?;
    // An ARN has six fields; a bare "arn:a:b:c" is not one.
    fields.nth(1)?;
    (!region.is_empty()).then_some(region)
}

/// The `SecretId` for Secrets Manager: an ARN cut to its first seven `:`-separated fields
/// (`arn:aws:secretsmanager:<region>:<account>:secret:<name>`, without ECS's
/// `:json-key:version-stage:version-id`); anything else as it is.
pub fn secret_id(value_from: &str) -> &str {
    if !value_from.starts_with("arn:") {
        return value_from;
    }
    match value_from.match_indices(':').nth(6) {
        Some((i, _)) => &value_from[..i],
        None => value_from,
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn a_secret_id_is_the_arn_without_ecss_suffix() {
        let arn = "arn:aws:secretsmanager:eu-west-1:123456789012:secret:prod/db-AbCdEf";
        assert_eq!(secret_id(arn), arn);
        assert_eq!(secret_id(&format!("{arn}:password:AWSPREVIOUS:")), arn);
        assert_eq!(secret_id(&format!("{arn}::::")), arn);
        assert_eq!(secret_id(&format!("{arn}:::v-1")), arn);
        assert_eq!(secret_id("prod/db"), "prod/db");
    }

    #[test]
    fn the_region_of_an_arn_is_its_fourth_field() {
        assert_eq!(
            arn_region("arn:aws:ssm:eu-west-1:123456789012:parameter/prod/db"),
            Some("eu-west-1")
        );
        assert_eq!(
            arn_region("arn:aws:secretsmanager:us-east-2:123456789012:secret:a:k:AWSCURRENT:"),
            Some("us-east-2")
        );
        assert_eq!(arn_region("arn:aws:iam::123456789012:role/x"), None);
        assert_eq!(arn_region("arn:aws:s3:::bucket/key"), None);
        assert_eq!(arn_region("/prod/db"), None);
        assert_eq!(arn_region("arn:aws:ssm:eu-west-1"), None);
    }

    #[test]
    fn partitions_are_told_by_region() {
        assert_eq!(region_partition("us-east-1"), "aws");
        assert_eq!(region_partition("cn-northwest-1"), "aws-cn");
        assert_eq!(region_partition("us-gov-east-1"), "aws-us-gov");
        assert_eq!(region_partition("us-isob-east-1"), "aws-iso-b");
        assert_eq!(partition_default_region("aws-cn"), Some("cn-north-1"));
        assert_eq!(partition_default_region("aws-moon"), None);
    }

    #[test]
    fn a_refusal_names_what_was_asked_once() {
        let refused = |m: &str| Failure::Refused {
            code: "ParameterNotFound".into(),
            message: m.into(),
        };
        assert_eq!(
            refused("").about("GetParameter", "/prod/db"),
            refused("GetParameter /prod/db")
        );
        assert_eq!(
            refused("Parameter /prod/db not found.").about("GetParameter", "/prod/db"),
            refused("Parameter /prod/db not found.")
        );
        assert_eq!(
            refused("not found").about("GetParameter", "/prod/db"),
            refused("not found (GetParameter /prod/db)")
        );
        let far = Failure::Unreachable {
            message: "connection refused".into(),
        };
        assert_eq!(far.clone().about("GetParameter", "/prod/db"), far);
    }

    #[test]
    fn an_xml_error_body_gives_its_code_and_message() {
        let body = br#"<?xml version="1.0"?><ErrorResponse><Errors><Error><Code>AccessDenied</Code><Message>User: a &amp; b is not authorized</Message></Error></Errors></ErrorResponse>"#;
        assert_eq!(xml_element(body, "Code").as_deref(), Some("AccessDenied"));
        assert_eq!(
            xml_element(body, "Message").as_deref(),
            Some("User: a & b is not authorized")
        );
        assert_eq!(xml_element(b"<html>502</html>", "Code"), None);
        assert_eq!(xml_element(b"<Code></Code>", "Code"), None);
        assert_eq!(xml_element(&[0xff, 0xfe], "Code"), None);
    }

    #[test]
    fn durations_read_as_people_write_them() {
        assert_eq!(readable_duration(Duration::from_secs(10)), "10 s");
        assert_eq!(readable_duration(Duration::from_millis(2500)), "2.5 s");
        assert_eq!(readable_duration(Duration::from_millis(300)), "300 ms");
    }
}
