//! Resource tags as ECS takes them (`TagResource`, `RegisterTaskDefinition`'s and `RunTask`'s
//! `tags`): `{"key": …, "value": …}` pairs, and the rules every tag berth accepts obeys, wherever
//! it comes from (a definition's `tags`, `berth run --tag`, the agent's container instance tags).
//!
//! ECS's rules: at most 50 tags per resource; a key of 1–128 characters, a value of 0–256; letters,
//! digits and spaces (any Unicode letter or digit) and `+ - = . _ : / @`; the `aws:` prefix (any
//! case) is reserved for AWS and refused in a key. Keys are unique within one set of tags. Pure.

use serde::{Deserialize, Serialize};
use std::collections::BTreeMap;

/// One tag.
#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize)]
pub struct Tag {
    pub key: String,
    pub value: String,
}

impl Tag {
    pub fn new(key: impl Into<String>, value: impl Into<String>) -> Self {
        Tag {
            key: key.into(),
            value: value.into(),
        }
    }
}

/// ECS's limit on tags per resource.
pub const MAX_TAGS: usize = 50;
/// ECS's longest key, in characters.
pub const MAX_KEY_CHARS: usize = 128;
/// ECS's longest value, in characters.
pub const MAX_VALUE_CHARS: usize = 256;

const ALLOWED_PUNCTUATION: &str = "+-=._:/@ ";

fn bad_char(s: &str) -> Option<char> {
    s.chars()
        .find(|c| !(c.is_alphanumeric() || ALLOWED_PUNCTUATION.contains(*c)))
}

/// Why a tag, or a set of tags, breaks ECS's rules; the text names the key or value and says
/// what ECS accepts.
#[derive(Debug, Clone, PartialEq, Eq, thiserror::Error)]
pub enum TagError {
    #[error("a tag key must not be empty")]
    EmptyKey,
    #[error("a tag key has at most {MAX_KEY_CHARS} characters, this one has {chars}")]
    KeyTooLong { chars: usize },
    #[error("tag key {key:?}: the aws: prefix is reserved for AWS's own tags")]
    ReservedKey { key: String },
    #[error("tag key {key:?} holds {found:?}; use letters, digits, spaces and + - = . _ : / @")]
    KeyCharacter { key: String, found: char },
    #[error("a tag value has at most {MAX_VALUE_CHARS} characters, this one has {chars}")]
    ValueTooLong { chars: usize },
    #[error("tag value {value:?} holds {found:?}; use letters, digits, spaces and + - = . _ : / @")]
    ValueCharacter { value: String, found: char },
    #[error("{text:?} is not KEY=VALUE (write e.g. team=web; an empty value is team=)")]
    NotKeyValue { text: String },
    #[error("at most {MAX_TAGS} tags per resource, found {found}")]
    TooMany { found: usize },
}

/// Why `key` is not a tag key ECS accepts.
pub fn check_key(key: &str) -> Result<(), TagError> {
    let n = key.chars().count();
    if n == 0 {
        return Err(TagError::EmptyKey);
    }
    if n > MAX_KEY_CHARS {
        return Err(TagError::KeyTooLong { chars: n });
    }
    if key.get(..4).is_some_and(|p| p.eq_ignore_ascii_case("aws:")) {
        return Err(TagError::ReservedKey {
            key: key.to_string(),
        });
    }
    if let Some(c) = bad_char(key) {
        return Err(TagError::KeyCharacter {
            key: key.to_string(),
            found: c,
        });
    }
    Ok(())
}

/// Why `value` is not a tag value ECS accepts.
pub fn check_value(value: &str) -> Result<(), TagError> {
    let n = value.chars().count();
    if n > MAX_VALUE_CHARS {
        return Err(TagError::ValueTooLong { chars: n });
    }
    if let Some(c) = bad_char(value) {
        return Err(TagError::ValueCharacter {
            value: value.to_string(),
            found: c,
        });
    }
    Ok(())
}

/// `KEY=VALUE` (the value may be empty and may hold `=`), checked.
pub fn parse_key_value(text: &str) -> Result<Tag, TagError> {
    let Some((key, value)) = text.split_once('=') else {
        return Err(TagError::NotKeyValue {
            text: text.to_string(),
        });
    };
    check_key(key)?;
    check_value(value)?;
    Ok(Tag::new(key, value))
}

/// `base` with `overrides` laid over it: a key in both takes the override's value, in `base`'s
/// place; new keys come after, in their order.
pub fn merge(base: &[Tag], overrides: &[Tag]) -> Vec<Tag> {
    let mut out: Vec<Tag> = base.to_vec();
    for t in overrides {
        match out.iter_mut().find(|o| o.key == t.key) {
            Some(o) => o.value = t.value.clone(),
            None => out.push(t.clone()),
        }
    }
    out
}

/// The tags as the metadata endpoint's JSON object (`TaskTags`, `ContainerInstanceTags`).
pub fn to_map(tags: &[Tag]) -> BTreeMap<String, String> {
    tags.iter()
        .map(|t| (t.key.clone(), t.value.clone()))
        .collect()
}

/// Why a whole set of tags is refused: more than [`MAX_TAGS`].
pub fn check_count(n: usize) -> Result<(), TagError> {
    if n > MAX_TAGS {
        Err(TagError::TooMany { found: n })
    } else {
        Ok(())
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn ecs_rules() {
        assert!(check_key("team").is_ok());
        assert!(check_key("app.kubernetes/name:x@y+z=w_v-u").is_ok());
        assert!(check_key("équipe 2").is_ok());
        assert!(check_key("").unwrap_err().to_string().contains("empty"));
        assert!(
            check_key("AWS:x")
                .unwrap_err()
                .to_string()
                .contains("reserved")
        );
        assert!(
            check_key(&"k".repeat(129))
                .unwrap_err()
                .to_string()
                .contains("128")
        );
        assert!(check_key("a;b").unwrap_err().to_string().contains("';'"));
        assert!(check_value("").is_ok());
        assert!(
            check_value(&"v".repeat(257))
                .unwrap_err()
                .to_string()
                .contains("256")
        );
        assert!(check_count(50).is_ok() && check_count(51).is_err());
    }

    #[test]
    fn key_value_and_merge() {
        assert_eq!(parse_key_value("a=b=c"), Ok(Tag::new("a", "b=c")));
        assert_eq!(parse_key_value("a="), Ok(Tag::new("a", "")));
        assert!(
            parse_key_value("a")
                .unwrap_err()
                .to_string()
                .contains("KEY=VALUE")
        );
        let merged = merge(
            &[Tag::new("a", "1"), Tag::new("b", "2")],
            &[Tag::new("b", "3"), Tag::new("c", "4")],
        );
        assert_eq!(
            merged,
            vec![Tag::new("a", "1"), Tag::new("b", "3"), Tag::new("c", "4")]
        );
        assert_eq!(to_map(&merged)["b"], "3");
    }
}
