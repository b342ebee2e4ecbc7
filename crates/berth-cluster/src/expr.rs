//! The subset of ECS's cluster query language that `memberOf` constraints take, parsed once
//! ([`Expr::parse`]) and evaluated against a node ([`Expr::matches`]). Pure.
//!
//! Supported (everything else is refused with the position and what berth takes instead):
//!
//! | subject | operators |
//! |---|---|
//! | `attribute:<name>` | `==` `equals`, `!=` `not_equals`, `in`, `not_in` `!in`, `exists`, `!exists` `not_exists` |
//! | `ec2InstanceId`, `instanceId` (the node name) | `==`, `!=`, `in`, `not_in` |
//! | `task:group` (a group with a task on the node) | `==`, `!=`, `in`, `not_in` |
//! | `runningTasksCount` | `==`, `!=`, `>`, `>=`, `<`, `<=` (whole numbers) |
//!
//! Lists are `[a, b, c]` (ECS's form; `(a, b)` is read too). Expressions combine with
//! `and`/`&&`, `or`/`||`, `not`/`!` and parentheses; `not` binds tightest, then `and`, then `or`.
//! Not supported: `matches` (`=~`) and `not_matches` (`!~`), `agentConnected`, `agentVersion`,
//! `registeredAt`. An attribute a node does not have is "absent": `==` and `in` are false, `!=`
//! and `not_in` true, as ECS's "does not equal" reads.
//!
//! Hand-written (a small recursive-descent parser): no crate implements ECS's query language.

use crate::placement::NodeLoad;

/// A parsed expression.
#[derive(Debug, Clone, PartialEq, Eq)]
pub enum Expr {
    And(Box<Expr>, Box<Expr>),
    Or(Box<Expr>, Box<Expr>),
    Not(Box<Expr>),
    Test(Subject, Test),
}

/// What a comparison looks at.
#[derive(Debug, Clone, PartialEq, Eq)]
pub enum Subject {
    Attribute(String),
    InstanceId,
    TaskGroup,
    RunningTasksCount,
}

/// A comparison.
#[derive(Debug, Clone, PartialEq, Eq)]
pub enum Test {
    Eq(String),
    Ne(String),
    In(Vec<String>),
    NotIn(Vec<String>),
    Exists,
    NotExists,
    Cmp(Ordering, u64),
}

/// A numeric comparison of `runningTasksCount`.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Ordering {
    Gt,
    Ge,
    Lt,
    Le,
}

#[derive(Debug, Clone, PartialEq, Eq)]
enum Tok {
    Word(String),
    Sym(&'static str),
}

const SYMBOLS: &[&str] = &[
    "&&", "||", "==", "!=", "=~", "!~", ">=", "<=", ">", "<", "(", ")", "[", "]", ",",
];

/// Splits into words and symbols, each with its byte offset. `!` before `in`/`exists` (no space)
/// is part of that operator; a lone `!` is `not`.
fn lex(input: &str) -> Result<Vec<(usize, Tok)>, String> {
    let mut out = Vec::new();
    let mut i = 0;
    let bytes = input.as_bytes();
    while i < bytes.len() {
        let rest = &input[i..];
        let c = rest.chars().next().unwrap_or(' ');
        if c.is_whitespace() {
            i += c.len_utf8();
            continue;
        }
        if let Some(sym) = SYMBOLS.iter().find(|s| rest.starts_with(**s)) {
            out.push((i, Tok::Sym(sym)));
            i += sym.len();
            continue;
        }
        if c == '!' {
            let op = ["!in", "!exists"].into_iter().find(|op| {
                rest.starts_with(op)
                    && !rest[op.len()..]
                        .chars()
                        .next()
                        .is_some_and(|n| n.is_alphanumeric() || n == '_')
            });
            match op {
                Some(op) => {
                    out.push((i, Tok::Word(op.to_owned())));
                    i += op.len();
                }
                None => {
                    out.push((i, Tok::Sym("!")));
                    i += 1;
                }
            }
            continue;
        }
        let end = rest
            .find(|ch: char| ch.is_whitespace() || "()[],!=<>&|".contains(ch))
            .unwrap_or(rest.len());
        if end == 0 {
            return Err(format!("at {i}: unexpected {c:?}"));
        }
        out.push((i, Tok::Word(rest[..end].to_owned())));
        i += end;
    }
    Ok(out)
}

struct Parser {
    toks: Vec<(usize, Tok)>,
    pos: usize,
    len: usize,
}

impl Parser {
    fn peek(&self) -> Option<&Tok> {
        self.toks.get(self.pos).map(|(_, t)| t)
    }
    fn at(&self) -> usize {
        self.toks.get(self.pos).map_or(self.len, |(o, _)| *o)
    }
    fn next(&mut self) -> Option<Tok> {
        let t = self.toks.get(self.pos).map(|(_, t)| t.clone());
        self.pos += 1;
        t
    }
    fn is_word(&self, words: &[&str]) -> bool {
        matches!(self.peek(), Some(Tok::Word(w)) if words.contains(&w.as_str()))
    }
    fn is_sym(&self, sym: &str) -> bool {
        matches!(self.peek(), Some(Tok::Sym(s)) if *s == sym)
    }

    fn or(&mut self) -> Result<Expr, String> {
        let mut left = self.and()?;
        while self.is_word(&["or"]) || self.is_sym("||") {
            self.next();
            left = Expr::Or(Box::new(left), Box::new(self.and()?));
        }
        Ok(left)
    }
    fn and(&mut self) -> Result<Expr, String> {
        let mut left = self.unary()?;
        while self.is_word(&["and"]) || self.is_sym("&&") {
            self.next();
            left = Expr::And(Box::new(left), Box::new(self.unary()?));
        }
        Ok(left)
    }
    fn unary(&mut self) -> Result<Expr, String> {
        if self.is_word(&["not"]) || self.is_sym("!") {
            self.next();
            return Ok(Expr::Not(Box::new(self.unary()?)));
        }
        if self.is_sym("(") {
            self.next();
            let e = self.or()?;
            if !self.is_sym(")") {
                return Err(format!("at {}: expected ')'", self.at()));
            }
            self.next();
            return Ok(e);
        }
        self.test()
    }
    fn test(&mut self) -> Result<Expr, String> {
        let at = self.at();
        let subject = match self.next() {
            Some(Tok::Word(w)) => match w.as_str() {
                "ec2InstanceId" | "instanceId" => Subject::InstanceId,
                "task:group" => Subject::TaskGroup,
                "runningTasksCount" => Subject::RunningTasksCount,
                other => match other.strip_prefix("attribute:") {
                    Some(name) if !name.is_empty() => Subject::Attribute(name.to_owned()),
                    _ if ["agentConnected", "agentVersion", "registeredAt"].contains(&other) => {
                        return Err(format!(
                            "at {at}: the subject {other} is not supported by berth; use attribute:<name>, instanceId, task:group or runningTasksCount"
                        ));
                    }
                    _ => {
                        return Err(format!(
                            "at {at}: expected a subject (attribute:<name>, instanceId, task:group, runningTasksCount), found {other:?}"
                        ));
                    }
                },
            },
            Some(Tok::Sym(s)) => return Err(format!("at {at}: expected a subject, found {s:?}")),
            None => return Err(format!("at {at}: expected a subject, found the end")),
        };
        let at = self.at();
        let op = match self.next() {
            Some(Tok::Word(w)) => w,
            Some(Tok::Sym(s)) => s.to_owned(),
            None => return Err(format!("at {at}: expected an operator after the subject")),
        };
        let test = match op.as_str() {
            "==" | "equals" => Test::Eq(self.value()?),
            "!=" | "not_equals" => Test::Ne(self.value()?),
            "in" => Test::In(self.list()?),
            "not_in" | "!in" => Test::NotIn(self.list()?),
            "exists" => Test::Exists,
            "!exists" | "not_exists" => Test::NotExists,
            ">" | "greater_than" => Test::Cmp(Ordering::Gt, self.number()?),
            ">=" | "greater_than_equal" => Test::Cmp(Ordering::Ge, self.number()?),
            "<" | "less_than" => Test::Cmp(Ordering::Lt, self.number()?),
            "<=" | "less_than_equal" => Test::Cmp(Ordering::Le, self.number()?),
            "=~" | "matches" | "!~" | "not_matches" => {
                return Err(format!(
                    "at {at}: {op} (pattern matching) is not supported by berth; list the values with `in [a, b]`"
                ));
            }
            other => return Err(format!("at {at}: unknown operator {other:?}")),
        };
        let allowed = match (&subject, &test) {
            (Subject::Attribute(_), Test::Cmp(..)) => false,
            (Subject::Attribute(_), _) => true,
            (Subject::RunningTasksCount, Test::Eq(v) | Test::Ne(v)) => v.parse::<u64>().is_ok(),
            (Subject::RunningTasksCount, Test::Cmp(..)) => true,
            (Subject::RunningTasksCount, _) => false,
            (_, Test::Eq(_) | Test::Ne(_) | Test::In(_) | Test::NotIn(_)) => true,
            _ => false,
        };
        if !allowed {
            return Err(format!(
                "at {at}: {op} does not apply to this subject (see docs/cluster.md for the operators each subject takes)"
            ));
        }
        Ok(Expr::Test(subject, test))
    }
    fn value(&mut self) -> Result<String, String> {
        let at = self.at();
        match self.next() {
            Some(Tok::Word(w)) => Ok(w),
            _ => Err(format!("at {at}: expected a value")),
        }
    }
    fn number(&mut self) -> Result<u64, String> {
        let at = self.at();
        let v = self.value()?;
        v.parse()
            .map_err(|_| format!("at {at}: expected a whole number, found {v:?}"))
    }
    fn list(&mut self) -> Result<Vec<String>, String> {
        let at = self.at();
        let close = if self.is_sym("[") {
            "]"
        } else if self.is_sym("(") {
            ")"
        } else {
            return Err(format!("at {at}: expected a list such as [a, b]"));
        };
        self.next();
        let mut values = vec![self.value()?];
        while self.is_sym(",") {
            self.next();
            values.push(self.value()?);
        }
        if !self.is_sym(close) {
            return Err(format!("at {}: expected ',' or '{close}'", self.at()));
        }
        self.next();
        Ok(values)
    }
}

impl Expr {
    /// Parses an expression; the error says where (a byte offset) and what was expected.
    pub fn parse(input: &str) -> Result<Expr, String> {
        let toks = lex(input)?;
        if toks.is_empty() {
            return Err("the expression is empty".to_owned());
        }
        let mut p = Parser {
            toks,
            pos: 0,
            len: input.len(),
        };
        let e = p.or()?;
        if p.pos < p.toks.len() {
            return Err(format!(
                "at {}: unexpected text after the expression",
                p.at()
            ));
        }
        Ok(e)
    }

    /// Whether the node is selected.
    pub fn matches(&self, node: &NodeLoad) -> bool {
        match self {
            Expr::And(a, b) => a.matches(node) && b.matches(node),
            Expr::Or(a, b) => a.matches(node) || b.matches(node),
            Expr::Not(e) => !e.matches(node),
            Expr::Test(subject, test) => test_node(subject, test, node),
        }
    }
}

fn test_node(subject: &Subject, test: &Test, node: &NodeLoad) -> bool {
    // The subject's values on this node: an attribute has at most one, task:group one per group
    // with a task there, instanceId the node name.
    let values: Vec<&str> = match subject {
        Subject::Attribute(name) => node
            .attributes
            .get(name)
            .map(String::as_str)
            .into_iter()
            .collect(),
        Subject::InstanceId => vec![node.name.as_str()],
        Subject::TaskGroup => node
            .groups
            .iter()
            .filter(|(_, n)| **n > 0)
            .map(|(g, _)| g.as_str())
            .collect(),
        Subject::RunningTasksCount => {
            let count = node.tasks;
            return match test {
                Test::Eq(v) => v.parse() == Ok(count),
                Test::Ne(v) => v.parse() != Ok(count),
                Test::Cmp(Ordering::Gt, n) => count > *n,
                Test::Cmp(Ordering::Ge, n) => count >= *n,
                Test::Cmp(Ordering::Lt, n) => count < *n,
                Test::Cmp(Ordering::Le, n) => count <= *n,
                _ => false,
            };
        }
    };
    match test {
        Test::Eq(v) => values.contains(&v.as_str()),
        Test::Ne(v) => !values.contains(&v.as_str()),
        Test::In(list) => values.iter().any(|x| list.iter().any(|l| l == x)),
        Test::NotIn(list) => !values.iter().any(|x| list.iter().any(|l| l == x)),
        Test::Exists => !values.is_empty(),
        Test::NotExists => values.is_empty(),
        Test::Cmp(..) => false,
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use std::collections::BTreeMap;

    fn node(name: &str, attrs: &[(&str, &str)], groups: &[&str]) -> NodeLoad {
        NodeLoad {
            name: name.to_owned(),
            attributes: attrs
                .iter()
                .map(|(k, v)| ((*k).to_owned(), (*v).to_owned()))
                .collect(),
            groups: groups
                .iter()
                .map(|g| ((*g).to_owned(), 1))
                .collect::<BTreeMap<_, _>>(),
            tasks: u64::try_from(groups.len()).unwrap(),
            ..NodeLoad::default()
        }
    }

    fn m(expr: &str, n: &NodeLoad) -> bool {
        Expr::parse(expr)
            .unwrap_or_else(|e| panic!("{expr}: {e}"))
            .matches(n)
    }

    #[test]
    fn ecs_examples_select_as_documented() {
        let a = node(
            "n1",
            &[
                ("ecs.instance-type", "t2.small"),
                ("ecs.availability-zone", "us-east-1a"),
            ],
            &["service:web"],
        );
        let b = node(
            "n2",
            &[
                ("ecs.instance-type", "t2.medium"),
                ("ecs.availability-zone", "us-east-1b"),
            ],
            &[],
        );
        let c = node("n3", &[], &[]);
        let e = "attribute:ecs.instance-type == t2.small";
        assert!(m(e, &a) && !m(e, &b) && !m(e, &c));
        let e = "attribute:ecs.instance-type in [t2.small, t2.medium]";
        assert!(m(e, &a) && m(e, &b) && !m(e, &c));
        let e = "attribute:ecs.availability-zone != us-east-1a";
        assert!(!m(e, &a) && m(e, &b) && m(e, &c));
        let e = "attribute:ecs.instance-type exists";
        assert!(m(e, &a) && m(e, &b) && !m(e, &c));
        let e = "attribute:ecs.instance-type !exists";
        assert!(!m(e, &a) && m(e, &c));
        let e = "attribute:ecs.availability-zone not_in [us-east-1a, us-east-1b]";
        assert!(!m(e, &a) && !m(e, &b) && m(e, &c));
        let e = "task:group == service:web";
        assert!(m(e, &a) && !m(e, &b));
        let e = "not(task:group == service:web)";
        assert!(!m(e, &a) && m(e, &b));
        let e = "attribute:ecs.instance-type == t2.small or attribute:ecs.availability-zone == us-east-1b";
        assert!(m(e, &a) && m(e, &b) && !m(e, &c));
        let e = "instanceId != n1 && (attribute:ecs.instance-type ==";
        assert!(Expr::parse(e).is_err());
        let e = "ec2InstanceId in [n1, n3] and !attribute:ecs.instance-type exists";
        assert!(!m(e, &a) && !m(e, &b) && m(e, &c));
        let e = "runningTasksCount < 1";
        assert!(!m(e, &a) && m(e, &b));
        let e = "runningTasksCount == 1";
        assert!(m(e, &a) && !m(e, &b));
    }

    #[test]
    fn and_binds_tighter_than_or() {
        let a = node("a", &[("x", "1")], &[]);
        // true or (false and false) = true; (true or false) and false would be false.
        assert!(m(
            "attribute:x == 1 or attribute:x == 2 and attribute:x == 3",
            &a
        ));
    }

    #[test]
    fn refusals_say_where_and_what_instead() {
        for (expr, wanted) in [
            (
                "attribute:ecs.instance-type =~ t2.*",
                "at 28: =~ (pattern matching) is not supported",
            ),
            (
                "agentVersion > 1.0",
                "at 0: the subject agentVersion is not supported",
            ),
            ("attribute:x", "at 11: expected an operator"),
            ("attribute:x in a", "at 15: expected a list"),
            ("attribute:x in [a, b", "expected ',' or ']'"),
            ("attribute:x > 3", "does not apply to this subject"),
            ("colour == red", "expected a subject"),
            (
                "attribute:x == 1 attribute:y == 2",
                "at 17: unexpected text",
            ),
            ("", "empty"),
            ("runningTasksCount > many", "expected a whole number"),
        ] {
            let err = Expr::parse(expr).unwrap_err();
            assert!(err.contains(wanted), "{expr}: {err}");
        }
    }
}
