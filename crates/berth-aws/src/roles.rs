//! Task and execution roles through STS ([`StsRoles`], the engine's `RoleSource`): `AssumeRole`
//! with berth's own access (RoleArn, RoleSessionName = the request's session name,
//! DurationSeconds = `AwsSettings::role_duration`), answered from a cache keyed by (role ARN,
//! session name).
//!
//! Cache rules: an answer is served while more than half its lifetime remains, then refreshed;
//! one refresh at a time per key (a `tokio::sync::Mutex` per key: callers of the same key wait
//! for the one call, then read its answer); when a refresh fails while the old credentials have
//! not expired, the old ones are served and a warning logged; expired entries are dropped when a
//! new key is added. Errors name the role ARN, STS, its endpoint and AWS's code and message.
//!
//! Partitions: STS is asked in berth's region when the role is of that region's partition, in the
//! partition's usual region when berth has none; a role of another partition (an `aws-cn` role
//! from a host in `aws`) is refused with what to configure, unless `AWS_ENDPOINT_URL_STS` (or
//! `AWS_ENDPOINT_URL`) names an endpoint to ask anyway.

use crate::access::AwsAccess;
use crate::call::{Failure, STS, partition_default_region, region_partition};
use berth_engine::roles::{BoxFuture, RoleCredentials, RoleError, RoleRequest, RoleSource};
use berth_engine::secrets::SecretValue;
use berth_model::role::RoleArn;
use futures_util::FutureExt;
use std::collections::HashMap;
use std::sync::{Arc, Mutex};
use std::time::SystemTime;

/// The environment suffix and host prefix of STS's endpoints.
const STS_ENV: &str = "STS";
const STS_PREFIX: &str = "sts";

/// One cached answer.
#[derive(Clone)]
struct Cached {
    credentials: RoleCredentials,
    /// When STS answered, milliseconds since the epoch.
    obtained_ms: i64,
}

impl Cached {
    /// More than half the lifetime left.
    fn fresh(&self, now_ms: i64) -> bool {
        let lifetime = self.credentials.expiration_ms - self.obtained_ms;
        now_ms < self.obtained_ms + lifetime / 2
    }

    fn expired(&self, now_ms: i64) -> bool {
        now_ms >= self.credentials.expiration_ms
    }
}

type Slot = Arc<tokio::sync::Mutex<Option<Cached>>>;

/// Role credentials from STS `AssumeRole`, cached (see the module header).
pub struct StsRoles {
    access: AwsAccess,
    cache: Mutex<HashMap<(String, String), Slot>>,
}

/// The region to ask STS in for a role of `partition`, given berth's region and whether an STS
/// endpoint is configured; or why there is none.
fn sts_region(
    berths: Option<&str>,
    overridden: bool,
    role_arn: &str,
    partition: &str,
) -> Result<String, RoleError> {
    match berths {
        Some(region) if region_partition(region) == partition || overridden => {
            Ok(region.to_owned())
        }
        Some(region) => Err(RoleError::Unavailable {
            role_arn: role_arn.to_owned(),
            why: format!(
                "the role is in partition {partition}, but berth's region {region} is in partition {}: \
                 credentials of one partition cannot assume roles of another; run berth with AWS_REGION \
                 set to a region of {partition} and credentials of that partition (or set \
                 AWS_ENDPOINT_URL_STS to an STS endpoint that serves the role)",
                region_partition(region)
            ),
        }),
        None => match partition_default_region(partition) {
            Some(region) => Ok(region.to_owned()),
            None => Err(RoleError::Unavailable {
                role_arn: role_arn.to_owned(),
                why: format!(
                    "berth has no region and knows no region of partition {partition}; set AWS_REGION"
                ),
            }),
        },
    }
}

fn now_ms() -> i64 {
    SystemTime::now()
        .duration_since(SystemTime::UNIX_EPOCH)
        .map(|d| i64::try_from(d.as_millis()).unwrap_or(i64::MAX))
        .unwrap_or(0)
}

impl StsRoles {
    pub fn new(access: AwsAccess) -> StsRoles {
        StsRoles {
            access,
            cache: Mutex::new(HashMap::new()),
        }
    }

    /// The STS endpoint berth asks, in its own region (for messages).
    fn endpoint(&self, region: Option<&str>) -> String {
        self.access.endpoint_in(STS_ENV, STS_PREFIX, region)
    }

    /// One `AssumeRole` call.
    async fn assume(&self, request: &RoleRequest) -> Result<RoleCredentials, RoleError> {
        let role = RoleArn::parse(&request.role_arn).map_err(|why| RoleError::Unavailable {
            role_arn: request.role_arn.clone(),
            why,
        })?;
        let region = sts_region(
            self.access.region().as_deref(),
            self.access.endpoint_override(STS_ENV).is_some(),
            &request.role_arn,
            &role.partition,
        )?;
        let endpoint = self.endpoint(Some(&region));
        let client = aws_sdk_sts::Client::new(&self.access.config_for(Some(&region), None));
        let settings = self.access.settings();
        let seconds = i32::try_from(settings.role_duration.as_secs()).unwrap_or(i32::MAX);
        let answer = client
            .assume_role()
            .role_arn(&request.role_arn)
            .role_session_name(&request.session_name)
            .duration_seconds(seconds)
            .send()
            .await
            .map_err(|e| {
                Failure::of(&e, settings.timeout).role(&request.role_arn, STS, &endpoint)
            })?;
        let incomplete = |what: &str| RoleError::Unreachable {
            role_arn: request.role_arn.clone(),
            service: STS.to_owned(),
            endpoint: endpoint.clone(),
            message: format!("the AssumeRole answer has no {what}"),
        };
        let credentials = answer
            .credentials()
            .ok_or_else(|| incomplete("Credentials"))?;
        let expiration_ms = credentials
            .expiration()
            .to_millis()
            .map_err(|_| incomplete("usable Expiration"))?;
        Ok(RoleCredentials {
            role_arn: request.role_arn.clone(),
            access_key_id: credentials.access_key_id().to_owned(),
            secret_access_key: SecretValue::new(credentials.secret_access_key().to_owned()),
            session_token: Some(SecretValue::new(credentials.session_token().to_owned())),
            expiration_ms,
        })
    }

    /// The cache slot of a request, made when absent (expired entries are dropped then).
    fn slot(&self, request: &RoleRequest) -> Slot {
        let key = (request.role_arn.clone(), request.session_name.clone());
        let mut cache = match self.cache.lock() {
            Ok(c) => c,
            Err(poisoned) => poisoned.into_inner(),
        };
        if let Some(slot) = cache.get(&key) {
            return slot.clone();
        }
        let now = now_ms();
        cache.retain(|_, slot| match slot.try_lock() {
            Ok(cached) => cached.as_ref().is_some_and(|c| !c.expired(now)),
            Err(_) => true, // in use
        });
        cache.entry(key).or_default().clone()
    }

    /// The credentials of a request: cached, refreshed, or the old ones when a refresh fails.
    async fn get(&self, request: &RoleRequest) -> Result<RoleCredentials, RoleError> {
        let slot = self.slot(request);
        let mut cached = slot.lock().await;
        if let Some(c) = cached.as_ref()
            && c.fresh(now_ms())
        {
            return Ok(c.credentials.clone());
        }
        let obtained_ms = now_ms();
        match self.assume(request).await {
            Ok(credentials) => {
                *cached = Some(Cached {
                    credentials: credentials.clone(),
                    obtained_ms,
                });
                Ok(credentials)
            }
            Err(e) => match cached.as_ref() {
                Some(old) if !old.expired(now_ms()) => {
                    tracing::warn!(
                        role_arn = %request.role_arn,
                        session = %request.session_name,
                        error = %e,
                        "refreshing the role's credentials failed; serving the ones held until they expire"
                    );
                    Ok(old.credentials.clone())
                }
                _ => Err(e),
            },
        }
    }
}

impl RoleSource for StsRoles {
    fn credentials<'a>(
        &'a self,
        request: &'a RoleRequest,
    ) -> BoxFuture<'a, Result<RoleCredentials, RoleError>> {
        self.get(request).boxed()
    }

    fn describe(&self) -> String {
        format!("STS at {}", self.endpoint(self.access.region().as_deref()))
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn cached(obtained_ms: i64, expiration_ms: i64) -> Cached {
        Cached {
            credentials: RoleCredentials {
                role_arn: "arn:aws:iam::123456789012:role/r".into(),
                access_key_id: "ASIA".into(),
                secret_access_key: SecretValue::new("s".into()),
                session_token: None,
                expiration_ms,
            },
            obtained_ms,
        }
    }

    #[test]
    fn sts_is_asked_in_the_roles_partition() {
        let cn = "arn:aws-cn:iam::123456789012:role/app";
        assert_eq!(
            sts_region(
                Some("eu-west-1"),
                false,
                "arn:aws:iam::123456789012:role/app",
                "aws"
            ),
            Ok("eu-west-1".to_owned())
        );
        assert_eq!(
            sts_region(None, false, cn, "aws-cn"),
            Ok("cn-north-1".to_owned())
        );
        assert_eq!(
            sts_region(Some("us-east-1"), true, cn, "aws-cn"),
            Ok("us-east-1".to_owned())
        );
        let err = sts_region(Some("us-east-1"), false, cn, "aws-cn").unwrap_err();
        let text = err.to_string();
        assert!(
            text.starts_with(&format!("no credentials for role {cn}: ")),
            "{text}"
        );
        assert!(text.contains("partition aws-cn"), "{text}");
        assert!(text.contains("AWS_REGION"), "{text}");
        assert!(sts_region(None, false, "arn:aws-moon:iam::1:role/x", "aws-moon").is_err());
    }

    #[test]
    fn an_answer_is_fresh_for_half_its_lifetime() {
        let c = cached(1_000, 5_000);
        assert!(c.fresh(1_000));
        assert!(c.fresh(2_999));
        assert!(!c.fresh(3_000));
        assert!(!c.expired(4_999));
        assert!(c.expired(5_000));
    }
}
