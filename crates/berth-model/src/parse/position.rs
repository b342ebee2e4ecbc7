//! Where in the document a JSON syntax error is, as a JSON path. serde_json stops at the first
//! error and says only "line L, column C"; for errors inside a value that is otherwise well formed
//! (a number out of range, a bad escape in a string) the path tells the user which field to fix.
//!
//! Hand-written (no crate gives a path for a byte offset): a scan of the text before the error,
//! which serde_json has already read as valid JSON, tracking the open objects and arrays, the key
//! of each object member and the index of each array element.

use super::checker::{index_path, key_path};

enum Frame {
    /// An object: the key of the member being read (None before its key).
    Object(Option<String>),
    /// An array: the index of the element being read.
    Array(usize),
}

/// The byte offset of serde_json's 1-based `line` and `column`.
pub(super) fn offset(input: &str, line: usize, column: usize) -> usize {
    let start: usize = input
        .split_inclusive('\n')
        .take(line.saturating_sub(1))
        .map(str::len)
        .sum();
    (start + column.saturating_sub(1)).min(input.len())
}

/// The JSON path of the value (or key) at byte `at` of `input`; empty for the document itself.
pub(super) fn path_at(input: &str, at: usize) -> String {
    let bytes = input.as_bytes();
    let mut stack: Vec<Frame> = Vec::new();
    let mut i = 0;
    while i < at.min(bytes.len()) {
        match bytes.get(i) {
            Some(b'{') => stack.push(Frame::Object(None)),
            Some(b'[') => stack.push(Frame::Array(0)),
            Some(b'}' | b']') => {
                stack.pop();
            }
            Some(b',') => match stack.last_mut() {
                Some(Frame::Array(n)) => *n += 1,
                Some(Frame::Object(key)) => *key = None,
                None => {}
            },
            Some(b'"') => {
                let start = i;
                i += 1;
                while let Some(&b) = bytes.get(i) {
                    match b {
                        b'\\' => i += 2,
                        b'"' => break,
                        _ => i += 1,
                    }
                }
                // A string that reaches `at` is where the error is: a key is its own path.
                let text = input.get(start..=i.min(bytes.len().saturating_sub(1)));
                if let Some(Frame::Object(key @ None)) = stack.last_mut() {
                    let raw = text.unwrap_or_default();
                    let decoded = serde_json::from_str::<String>(raw)
                        .unwrap_or_else(|_| raw.trim_matches('"').to_string());
                    *key = Some(decoded);
                }
            }
            _ => {}
        }
        i += 1;
    }
    let mut path = String::new();
    for frame in &stack {
        path = match frame {
            Frame::Object(Some(key)) => key_path(&path, key),
            Frame::Object(None) => path,
            Frame::Array(n) => index_path(&path, *n),
        };
    }
    path
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn the_path_of_a_value_is_found_from_its_offset() {
        let doc = "{\"a\": {\"b\": [1, {\"c\": 1e400}]}, \"d\": 2}";
        let at = doc.find("1e400").expect("there") + 3;
        assert_eq!(path_at(doc, at), "a.b[1].c");
        let doc = "{\"x,y\": [\"q\\\"]\", 5, 1e999]}";
        let at = doc.find("1e999").expect("there");
        assert_eq!(path_at(doc, at), "[\"x,y\"][2]");
        assert_eq!(path_at("1e400", 3), "");
        assert_eq!(offset("ab\ncd\nef", 3, 2), 7);
    }
}
