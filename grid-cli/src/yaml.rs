//! `--output yaml`: an API answer as a YAML document. Every JSON document is
//! already YAML; this writes the block style people read, with strings in
//! double quotes (JSON's escapes are YAML's), so no value is ever re-typed
//! (`"no"`, `"1.0"`, `"2026-11-23"` stay strings).

use serde_json::Value;

/// The document, ending in a newline.
pub fn document(v: &Value) -> String {
    let mut out = String::from("---\n");
    match v {
        Value::Object(m) if !m.is_empty() => block(v, 0, &mut out),
        Value::Array(a) if !a.is_empty() => block(v, 0, &mut out),
        scalar => {
            out.push_str(&inline(scalar));
            out.push('\n');
        }
    }
    out
}

/// A scalar, or an empty collection, on one line.
fn inline(v: &Value) -> String {
    match v {
        Value::Null => "null".into(),
        Value::Bool(b) => b.to_string(),
        Value::Number(n) => n.to_string(),
        Value::String(s) => serde_json::to_string(s).unwrap_or_else(|_| "\"\"".into()),
        Value::Array(_) => "[]".into(),
        Value::Object(_) => "{}".into(),
    }
}

fn is_block(v: &Value) -> bool {
    matches!(v, Value::Object(m) if !m.is_empty()) || matches!(v, Value::Array(a) if !a.is_empty())
}

/// A key as written: plain when it cannot be read as anything but itself.
fn key(k: &str) -> String {
    let plain = k.chars().next().is_some_and(|c| c.is_ascii_alphabetic())
        && k.chars().all(|c| c.is_ascii_alphanumeric() || matches!(c, '_' | '-' | '.'))
        && !matches!(
            k.to_ascii_lowercase().as_str(),
            "true" | "false" | "null" | "yes" | "no" | "on" | "off" | "y" | "n"
        );
    if plain {
        k.to_string()
    } else {
        serde_json::to_string(k).unwrap_or_else(|_| "\"\"".into())
    }
}

/// A non-empty collection at `indent` spaces, one entry per line.
fn block(v: &Value, indent: usize, out: &mut String) {
    let pad = " ".repeat(indent);
    match v {
        Value::Object(m) => {
            for (k, v) in m {
                if is_block(v) {
                    out.push_str(&format!("{pad}{}:\n", key(k)));
                    // A list under a key sits at the key's own indent, as is usual.
                    block(v, if v.is_array() { indent } else { indent + 2 }, out);
                } else {
                    out.push_str(&format!("{pad}{}: {}\n", key(k), inline(v)));
                }
            }
        }
        Value::Array(a) => {
            for item in a {
                if is_block(item) {
                    // The item's first line follows the dash; the rest line up under it.
                    let mut nested = String::new();
                    block(item, indent + 2, &mut nested);
                    let first = nested.get(indent + 2..).unwrap_or("");
                    out.push_str(&format!("{pad}- {first}"));
                } else {
                    out.push_str(&format!("{pad}- {}\n", inline(item)));
                }
            }
        }
        scalar => out.push_str(&format!("{pad}{}\n", inline(scalar))),
    }
}

#[cfg(test)]
mod tests {
    use serde_json::json;

    use super::*;

    #[test]
    fn block_style_with_quoted_strings() {
        let v = json!({"batchId": "bt_1", "counts": {"failed": 0}, "jobs": [{"jobId": "it_1", "state": "completed"}, {"jobId": "it_2", "url": "no"}], "tags": ["a", 1, null], "empty": [], "weird key": true});
        assert_eq!(
            document(&v),
            "---\nbatchId: \"bt_1\"\ncounts:\n  failed: 0\nempty: []\njobs:\n- jobId: \"it_1\"\n  state: \"completed\"\n- jobId: \"it_2\"\n  url: \"no\"\ntags:\n- \"a\"\n- 1\n- null\n\"weird key\": true\n"
        );
        assert_eq!(document(&json!([])), "---\n[]\n");
        assert_eq!(document(&json!([[1, 2], {"a": {"b": "c"}}])), "---\n- - 1\n  - 2\n- a:\n    b: \"c\"\n");
    }
}
