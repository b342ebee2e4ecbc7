//! IAM role references of a task definition (`taskRoleArn`, `executionRoleArn`): what a role ARN
//! is, as IAM writes it (`arn:<partition>:iam::<account>:role/<path/><name>`), and the short name
//! ECS also accepts (completed with the host's partition and account). Pure: nothing here assumes a
//! role or reads credentials (berth-aws does, for the engine's `roles::RoleSource`).

use std::fmt;

/// A parsed role ARN.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct RoleArn {
    /// `aws`, `aws-cn`, `aws-us-gov`, … (the STS partition the role lives in).
    pub partition: String,
    /// The 12-digit account id.
    pub account: String,
    /// The role's path, `/` when it has none (`/service-role/` …).
    pub path: String,
    /// The role's name (1–64 of letters, digits and `+ = , . @ _ -`).
    pub name: String,
}

impl fmt::Display for RoleArn {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        write!(
            f,
            "arn:{}:iam::{}:role{}{}",
            self.partition, self.account, self.path, self.name
        )
    }
}

/// What IAM allows in a role name.
fn name_char(c: char) -> bool {
    c.is_ascii_alphanumeric() || "+=,.@_-".contains(c)
}

fn check_name(name: &str) -> Result<(), String> {
    if name.is_empty() || name.len() > 64 || !name.chars().all(name_char) {
        return Err(format!(
            "role name {name:?} is not a valid IAM role name: 1 to 64 letters, digits and + = , . @ _ -"
        ));
    }
    Ok(())
}

impl RoleArn {
    /// Parse a full role ARN. The error says what is wrong and what a role ARN looks like.
    pub fn parse(s: &str) -> Result<RoleArn, String> {
        const SHAPE: &str = "a role ARN is arn:PARTITION:iam::ACCOUNT:role/NAME (or a role name)";
        let parts: Vec<&str> = s.splitn(6, ':').collect();
        let [arn, partition, service, region, account, resource] = parts[..] else {
            return Err(format!("{s:?} is not a role ARN; {SHAPE}"));
        };
        if arn != "arn"
            || partition.is_empty()
            || !partition
                .chars()
                .all(|c| c.is_ascii_lowercase() || c == '-')
        {
            return Err(format!("{s:?} is not a role ARN; {SHAPE}"));
        }
        if service != "iam" {
            return Err(format!(
                "{s:?} names service {service:?}, not an IAM role; {SHAPE}"
            ));
        }
        if !region.is_empty() {
            return Err(format!(
                "{s:?} has region {region:?}, but IAM roles have none; {SHAPE}"
            ));
        }
        if account.len() != 12 || !account.chars().all(|c| c.is_ascii_digit()) {
            return Err(format!(
                "{s:?} has account {account:?}; an account id is 12 digits; {SHAPE}"
            ));
        }
        let Some(rest) = resource.strip_prefix("role/") else {
            return Err(format!(
                "{s:?} names {resource:?}, not a role (role/NAME); {SHAPE}"
            ));
        };
        let (path, name) = match rest.rfind('/') {
            Some(i) => (format!("/{}", &rest[..=i]), &rest[i + 1..]),
            None => ("/".to_owned(), rest),
        };
        if path.contains("//") || path.len() > 512 {
            return Err(format!("{s:?} has an invalid role path {path:?}; {SHAPE}"));
        }
        check_name(name)?;
        Ok(RoleArn {
            partition: partition.to_owned(),
            account: account.to_owned(),
            path,
            name: name.to_owned(),
        })
    }

    /// A role as a task definition gives it: a full ARN, or a role name that ECS completes with
    /// the account and partition it runs in (berth: the host's identity).
    pub fn resolve(given: &str, partition: &str, account: &str) -> Result<RoleArn, String> {
        if given.starts_with("arn:") {
            return RoleArn::parse(given);
        }
        check_name(given)?;
        Ok(RoleArn {
            partition: partition.to_owned(),
            account: account.to_owned(),
            path: "/".to_owned(),
            name: given.to_owned(),
        })
    }

    /// Check what a definition gives, without the host's identity (a name is accepted as is).
    pub fn check(given: &str) -> Result<(), String> {
        if given.starts_with("arn:") {
            RoleArn::parse(given).map(|_| ())
        } else {
            check_name(given)
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn a_role_arn_is_parsed_with_its_path() {
        let r = RoleArn::parse("arn:aws:iam::123456789012:role/service-role/app-task").unwrap();
        assert_eq!(r.partition, "aws");
        assert_eq!(r.account, "123456789012");
        assert_eq!(r.path, "/service-role/");
        assert_eq!(r.name, "app-task");
        assert_eq!(
            r.to_string(),
            "arn:aws:iam::123456789012:role/service-role/app-task"
        );
        let r = RoleArn::parse("arn:aws-cn:iam::123456789012:role/x").unwrap();
        assert_eq!((r.partition.as_str(), r.path.as_str()), ("aws-cn", "/"));
    }

    #[test]
    fn what_is_not_a_role_arn_is_refused_with_the_shape() {
        for bad in [
            "arn:aws:s3:::bucket",
            "arn:aws:iam::12345:role/x",
            "arn:aws:iam:us-east-1:123456789012:role/x",
            "arn:aws:iam::123456789012:user/x",
            "arn:aws:iam::123456789012:role/",
            "arn:aws:iam::123456789012:role/bad name",
            "arn:aws",
        ] {
            let e = RoleArn::parse(bad).unwrap_err();
            assert!(e.contains("IAM") || e.contains("role ARN"), "{bad}: {e}");
        }
    }

    #[test]
    fn a_role_name_is_completed_with_the_hosts_account() {
        let r = RoleArn::resolve("app", "aws", "000000000000").unwrap();
        assert_eq!(r.to_string(), "arn:aws:iam::000000000000:role/app");
        assert!(RoleArn::check("app").is_ok());
        assert!(RoleArn::check("a/b").is_err());
    }
}
