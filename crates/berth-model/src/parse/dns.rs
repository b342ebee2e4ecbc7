//! A container's name resolution settings: `dnsServers`, `dnsSearchDomains` and `extraHosts`.
//!
//! Invariants: servers and host addresses are IPv4 or IPv6 addresses (as Rust's `IpAddr` reads
//! them); search domains follow ECS's pattern (letters, digits, `-` and `.`, at most 254
//! characters, ending in a letter or digit); hostnames are not empty and hold no whitespace or
//! `:` (Docker's `host:ip` separator). Limits: whether a server answers is not checked.

use super::checker::{Checker, key_path};
use super::json::{Json, has_field, quote};
use super::rules::{EXTRA_HOST, MISSING};
use crate::types::ExtraHost;
use std::net::IpAddr;

impl Checker {
    pub(super) fn dns_servers(&mut self, path: &str, v: &Json) -> Vec<String> {
        let mut out = Vec::new();
        for (item, p) in self.array(path, v).unwrap_or_default() {
            if let Some(s) = self.string(&p, item) {
                if s.parse::<IpAddr>().is_ok() {
                    out.push(s.to_owned());
                } else {
                    self.error(
                        &p,
                        format!(
                            "{} is not an IP address; DNS servers are written as addresses such as \"10.0.0.2\"",
                            quote(s)
                        ),
                    );
                }
            }
        }
        out
    }

    pub(super) fn dns_search_domains(&mut self, path: &str, v: &Json) -> Vec<String> {
        let mut out = Vec::new();
        for (item, p) in self.array(path, v).unwrap_or_default() {
            if let Some(s) = self.string(&p, item) {
                let chars_ok = s
                    .bytes()
                    .all(|b| b.is_ascii_alphanumeric() || b == b'-' || b == b'.');
                let end_ok = s.bytes().last().is_some_and(|b| b.is_ascii_alphanumeric());
                if chars_ok && end_ok && s.len() <= 254 {
                    out.push(s.to_owned());
                } else {
                    self.error(
                        &p,
                        format!(
                            "{} is not a search domain; use letters, digits, \"-\" and \".\" (at most 254 characters, ending in a letter or digit), such as \"corp.example.com\"",
                            quote(s)
                        ),
                    );
                }
            }
        }
        out
    }

    pub(super) fn extra_hosts(&mut self, path: &str, v: &Json) -> Vec<ExtraHost> {
        let mut out = Vec::new();
        for (item, p) in self.array(path, v).unwrap_or_default() {
            let Some(object) = self.object(&p, item) else {
                continue;
            };
            let (mut hostname, mut ip) = (None, None);
            for f in self.fields(&p, object, &EXTRA_HOST) {
                match f.key {
                    "hostname" => {
                        if let Some(s) = self.non_empty_string(&f.path, f.value) {
                            if s.chars().any(|c| c.is_whitespace() || c == ':') {
                                self.error(
                                    &f.path,
                                    format!("{} is not a valid hostname", quote(&s)),
                                );
                            } else {
                                hostname = Some(s);
                            }
                        }
                    }
                    "ipAddress" => {
                        if let Some(s) = self.string(&f.path, f.value) {
                            if s.parse::<IpAddr>().is_ok() {
                                ip = Some(s.to_owned());
                            } else {
                                self.error(
                                    &f.path,
                                    format!(
                                        "{} is not an IP address; write an address such as \"10.0.0.5\"",
                                        quote(s)
                                    ),
                                );
                            }
                        }
                    }
                    _ => {}
                }
            }
            for field in ["hostname", "ipAddress"] {
                if !has_field(object, field) {
                    self.error(key_path(&p, field), MISSING);
                }
            }
            if let (Some(hostname), Some(ip_address)) = (hostname, ip) {
                out.push(ExtraHost {
                    hostname,
                    ip_address,
                });
            }
        }
        out
    }
}

#[cfg(test)]
mod tests {
    use crate::parse;
    use crate::types::ExtraHost;

    use crate::parse::testing::{one_container as task, problems_of};

    fn problems(extra: &str) -> Vec<String> {
        problems_of(&task(extra))
    }

    #[test]
    fn every_field_is_read() {
        let parsed = parse(&task(
            r#""dnsServers": ["10.0.0.2", "fd00::53"], "dnsSearchDomains": ["corp.example.com", "b"],
               "extraHosts": [{"hostname": "db", "ipAddress": "10.1.2.3"}]"#,
        ))
        .unwrap_or_else(|e| panic!("{:#?}", e.problems));
        assert!(parsed.warnings.is_empty(), "{:?}", parsed.warnings);
        let c = &parsed.definition.container_definitions[0];
        assert_eq!(c.dns_servers, vec!["10.0.0.2", "fd00::53"]);
        assert_eq!(c.dns_search_domains, vec!["corp.example.com", "b"]);
        assert_eq!(
            c.extra_hosts,
            vec![ExtraHost {
                hostname: "db".into(),
                ip_address: "10.1.2.3".into()
            }]
        );
    }

    #[test]
    fn rules() {
        assert_eq!(
            problems(
                r#""dnsServers": ["dns.example.com", 53], "dnsSearchDomains": ["a b", "x."],
                   "extraHosts": [{"hostname": "db:1", "ipAddress": "10.1.2"}, {}]"#
            ),
            vec![
                r#"containerDefinitions[0].dnsServers[0]: "dns.example.com" is not an IP address; DNS servers are written as addresses such as "10.0.0.2""#,
                "containerDefinitions[0].dnsServers[1]: expected a string, found a number (53)",
                r#"containerDefinitions[0].dnsSearchDomains[0]: "a b" is not a search domain; use letters, digits, "-" and "." (at most 254 characters, ending in a letter or digit), such as "corp.example.com""#,
                r#"containerDefinitions[0].dnsSearchDomains[1]: "x." is not a search domain; use letters, digits, "-" and "." (at most 254 characters, ending in a letter or digit), such as "corp.example.com""#,
                r#"containerDefinitions[0].extraHosts[0].hostname: "db:1" is not a valid hostname"#,
                r#"containerDefinitions[0].extraHosts[0].ipAddress: "10.1.2" is not an IP address; write an address such as "10.0.0.5""#,
                "containerDefinitions[0].extraHosts[1].hostname: missing required field",
                "containerDefinitions[0].extraHosts[1].ipAddress: missing required field",
            ]
        );
    }
}
