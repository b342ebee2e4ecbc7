//! An order-preserving JSON tree for the validator, and how values are described in messages.
//!
//! `serde_json::Value` sorts object keys and keeps only the last of duplicate keys; this tree keeps
//! both the document order (so problems come out in that order) and duplicates (so they can be
//! reported). serde_json's recursion limit (128 levels) still applies while reading.

use serde::de::{self, Deserialize, Deserializer, MapAccess, SeqAccess, Visitor};
use std::fmt;

/// Like `serde_json::Value`, but objects keep their keys in document order, duplicates included.
/// serde_json's recursion limit (128 levels) still applies, so depth is bounded.
#[derive(Debug, PartialEq)]
pub(super) enum Json {
    Null,
    Bool(bool),
    Number(serde_json::Number),
    String(String),
    Array(Vec<Json>),
    Object(Vec<(String, Json)>),
}

impl<'de> Deserialize<'de> for Json {
    fn deserialize<D: Deserializer<'de>>(deserializer: D) -> Result<Self, D::Error> {
        deserializer.deserialize_any(JsonVisitor)
    }
}

pub(super) struct JsonVisitor;

impl<'de> Visitor<'de> for JsonVisitor {
    type Value = Json;

    fn expecting(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.write_str("any JSON value")
    }
    fn visit_bool<E>(self, b: bool) -> Result<Json, E> {
        Ok(Json::Bool(b))
    }
    fn visit_i64<E>(self, n: i64) -> Result<Json, E> {
        Ok(Json::Number(n.into()))
    }
    fn visit_u64<E>(self, n: u64) -> Result<Json, E> {
        Ok(Json::Number(n.into()))
    }
    fn visit_f64<E: de::Error>(self, n: f64) -> Result<Json, E> {
        serde_json::Number::from_f64(n)
            .map(Json::Number)
            .ok_or_else(|| E::custom("number out of range"))
    }
    fn visit_str<E>(self, s: &str) -> Result<Json, E> {
        Ok(Json::String(s.to_owned()))
    }
    fn visit_string<E>(self, s: String) -> Result<Json, E> {
        Ok(Json::String(s))
    }
    fn visit_unit<E>(self) -> Result<Json, E> {
        Ok(Json::Null)
    }
    fn visit_none<E>(self) -> Result<Json, E> {
        Ok(Json::Null)
    }
    fn visit_some<D: Deserializer<'de>>(self, d: D) -> Result<Json, D::Error> {
        Json::deserialize(d)
    }
    fn visit_seq<A: SeqAccess<'de>>(self, mut seq: A) -> Result<Json, A::Error> {
        let mut items = Vec::new();
        while let Some(item) = seq.next_element()? {
            items.push(item);
        }
        Ok(Json::Array(items))
    }
    fn visit_map<A: MapAccess<'de>>(self, mut map: A) -> Result<Json, A::Error> {
        let mut fields = Vec::new();
        while let Some(entry) = map.next_entry::<String, Json>()? {
            fields.push(entry);
        }
        Ok(Json::Object(fields))
    }
}

/// How a value reads in "expected X, found Y".
pub(super) fn describe(v: &Json) -> String {
    match v {
        Json::Null => "null".to_owned(),
        Json::Bool(b) => format!("a boolean ({b})"),
        Json::Number(n) => format!("a number ({n})"),
        Json::String(s) => format!("a string ({})", quote(s)),
        Json::Array(_) => "an array".to_owned(),
        Json::Object(_) => "an object".to_owned(),
    }
}

/// A string in double quotes, escaped, shortened when long.
pub(super) fn quote(s: &str) -> String {
    const MAX: usize = 60;
    if s.chars().count() > MAX {
        let short: String = s.chars().take(MAX - 3).collect();
        format!("{:?}...", short)
    } else {
        format!("{s:?}")
    }
}

/// The object has this key with a non-null value.
pub(super) fn has_field(object: &[(String, Json)], key: &str) -> bool {
    object
        .iter()
        .any(|(k, v)| k == key && !matches!(v, Json::Null))
}

pub(super) fn is_empty_value(v: &Json) -> bool {
    match v {
        Json::Null => true,
        Json::Array(a) => a.is_empty(),
        Json::Object(o) => o.is_empty(),
        _ => false,
    }
}
