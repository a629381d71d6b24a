//! A page as an agent reads it: the accessibility tree Chromium computes
//! (`Accessibility.getFullAXTree`), written as Playwright's ARIA snapshots
//! are, one element per line, nested by indentation:
//!
//! ```text
//! - heading "Sign in" [level=1] [ref=e12]
//! - textbox "User name" [ref=e15]
//! - button "Sign in" [ref=e17]
//! - list [ref=e20]:
//!   - listitem [ref=e21]:
//!     - link "Home" [ref=e22]
//! - text: Welcome back
//! ```
//!
//! Every element an action can target carries a ref: `e` and the node's
//! backend DOM node id, which the browser keeps for as long as the node
//! exists, so a ref stays valid until the page replaces that element.
//! Nodes the tree ignores, and unnamed generic containers, are left out and
//! their children lifted to their place. Pure: the server reads the tree
//! over CDP and hands its nodes here.

use serde_json::Value;

/// Most lines a snapshot writes; a page beyond it ends with a line saying
/// how many elements were left out.
pub const MAX_LINES: usize = 5_000;
/// Longest name or text written for one element, in characters.
pub const MAX_TEXT_CHARS: usize = 300;

/// Roles that only group their children: written only when named.
/// (`LabelText` is Chromium's own role for a `<label>`, which ARIA and
/// Playwright's snapshots do not name: the field it labels carries its text.)
const GENERIC: &[&str] =
    &["generic", "none", "presentation", "LineBreak", "InlineTextBox", "RootWebArea", "WebArea", "LabelText"];
/// Boolean properties written as `[name]` when true.
const FLAGS: &[&str] = &["checked", "disabled", "expanded", "selected", "pressed", "required", "focused"];

/// A ref as written in a snapshot.
pub fn ref_of(backend_node_id: i64) -> String {
    format!("e{backend_node_id}")
}

/// The backend DOM node id a ref names: `e42` is 42.
pub fn parse_ref(r: &str) -> Option<i64> {
    r.strip_prefix('e')?.parse().ok().filter(|n| *n > 0)
}

/// The snapshot of `nodes`, the `nodes` array of `Accessibility.getFullAXTree`.
pub fn write(nodes: &[Value]) -> String {
    let by_id: std::collections::HashMap<&str, &Value> =
        nodes.iter().filter_map(|n| Some((n["nodeId"].as_str()?, n))).collect();
    let Some(root) = nodes.iter().find(|n| n.get("parentId").is_none_or(Value::is_null)) else {
        return String::new();
    };
    let mut out = Writer { lines: vec![], left_out: 0 };
    out.children(root, &by_id, 0);
    let mut text = out.lines.join("\n");
    if out.left_out > 0 {
        text.push_str(&format!("\n- text: ({} more elements left out of this snapshot)", out.left_out));
    }
    text
}

struct Writer {
    lines: Vec<String>,
    left_out: usize,
}

impl Writer {
    fn children(&mut self, node: &Value, by_id: &std::collections::HashMap<&str, &Value>, depth: usize) {
        for child in node["childIds"].as_array().into_iter().flatten() {
            if let Some(c) = child.as_str().and_then(|id| by_id.get(id)) {
                self.node(c, by_id, depth);
            }
        }
    }

    fn node(&mut self, node: &Value, by_id: &std::collections::HashMap<&str, &Value>, depth: usize) {
        let role = node["role"]["value"].as_str().unwrap_or_default();
        let name = clean(node["name"]["value"].as_str().unwrap_or_default());
        let ignored = node["ignored"].as_bool().unwrap_or(false);
        if role == "StaticText" {
            // The text of its parent, unless the parent's name already says it.
            if !name.is_empty() {
                self.push(depth, format!("- text: {}", quoted_if_needed(&name)));
            }
            return;
        }
        if ignored || (GENERIC.contains(&role) && name.is_empty()) || role.is_empty() {
            self.children(node, by_id, depth);
            return;
        }
        let mut line = format!("- {role}");
        if !name.is_empty() {
            line.push_str(&format!(" \"{}\"", name.replace('"', "\\\"")));
        }
        for p in node["properties"].as_array().into_iter().flatten() {
            let (pname, value) = (p["name"].as_str().unwrap_or_default(), &p["value"]["value"]);
            if FLAGS.contains(&pname) && (value == true || value == "true" || value == "mixed") {
                if value == "mixed" {
                    line.push_str(&format!(" [{pname}=mixed]"));
                } else {
                    line.push_str(&format!(" [{pname}]"));
                }
            } else if pname == "level" && value.is_number() {
                line.push_str(&format!(" [level={value}]"));
            }
        }
        if let Some(id) = node["backendDOMNodeId"].as_i64() {
            line.push_str(&format!(" [ref={}]", ref_of(id)));
        }
        let value = clean(node["value"]["value"].as_str().unwrap_or_default());
        let has_children = node["childIds"].as_array().is_some_and(|c| !c.is_empty());
        // A named leaf's only child is usually its own text: not repeated.
        let only_own_text = has_children && self.only_text(node, by_id, &name);
        if !value.is_empty() {
            line.push_str(&format!(": {}", quoted_if_needed(&value)));
            self.push(depth, line);
        } else if has_children && !only_own_text {
            line.push(':');
            self.push(depth, line);
            let before = self.lines.len();
            self.children(node, by_id, depth + 1);
            if self.lines.len() == before {
                // Nothing below was written after all.
                if let Some(last) = self.lines.last_mut() {
                    last.pop();
                }
            }
        } else {
            self.push(depth, line);
        }
    }

    /// Whether every descendant of `node` is text equal to `name` (or
    /// nothing written).
    fn only_text(&self, node: &Value, by_id: &std::collections::HashMap<&str, &Value>, name: &str) -> bool {
        node["childIds"].as_array().into_iter().flatten().all(|c| {
            let Some(child) = c.as_str().and_then(|id| by_id.get(id)) else { return true };
            let role = child["role"]["value"].as_str().unwrap_or_default();
            let text = clean(child["name"]["value"].as_str().unwrap_or_default());
            match role {
                "StaticText" | "InlineTextBox" => text.is_empty() || text == name,
                _ if child["ignored"].as_bool().unwrap_or(false) || (GENERIC.contains(&role) && text.is_empty()) => {
                    self.only_text(child, by_id, name)
                }
                _ => false,
            }
        })
    }

    fn push(&mut self, depth: usize, line: String) {
        if self.lines.len() >= MAX_LINES {
            self.left_out += 1;
            return;
        }
        self.lines.push(format!("{}{line}", "  ".repeat(depth)));
    }
}

/// Whitespace collapsed, bounded.
fn clean(s: &str) -> String {
    let collapsed = s.split_whitespace().collect::<Vec<_>>().join(" ");
    if collapsed.chars().count() > MAX_TEXT_CHARS {
        let cut: String = collapsed.chars().take(MAX_TEXT_CHARS).collect();
        format!("{cut}…")
    } else {
        collapsed
    }
}

/// Text as YAML would need it on one line: quoted when it could be read
/// as something else.
fn quoted_if_needed(s: &str) -> String {
    let plain = !s.is_empty()
        && !s.starts_with(['-', '[', '{', '"', '\'', '#', '&', '*', '!', '|', '>', '%', '@', '`'])
        && !s.contains(": ")
        && !s.ends_with(':');
    if plain {
        s.to_string()
    } else {
        format!("\"{}\"", s.replace('\\', "\\\\").replace('"', "\\\""))
    }
}

#[cfg(test)]
mod tests {
    use serde_json::json;

    use super::*;

    fn node(id: &str, parent: Option<&str>, role: &str, name: &str, children: &[&str], backend: Option<i64>) -> Value {
        let mut n = json!({
            "nodeId": id, "role": {"value": role}, "name": {"value": name},
            "childIds": children, "ignored": false
        });
        if let Some(p) = parent {
            n["parentId"] = json!(p);
        }
        if let Some(b) = backend {
            n["backendDOMNodeId"] = json!(b);
        }
        n
    }

    #[test]
    fn a_sign_in_form_reads_as_lines_with_refs() {
        let mut heading = node("3", Some("2"), "heading", "Sign in", &["4"], Some(12));
        heading["properties"] = json!([{"name": "level", "value": {"type": "integer", "value": 1}}]);
        let mut user = node("5", Some("2"), "textbox", "User name", &[], Some(15));
        user["value"] = json!({"value": "ada"});
        let mut hidden = node("8", Some("2"), "button", "ghost", &[], Some(30));
        hidden["ignored"] = json!(true);
        let nodes = vec![
            node("1", None, "RootWebArea", "Sign in", &["2"], Some(1)),
            node("2", Some("1"), "generic", "", &["3", "5", "6", "8", "9"], Some(2)),
            heading,
            node("4", Some("3"), "StaticText", "Sign in", &[], None),
            user,
            node("6", Some("2"), "button", "Sign in", &["7"], Some(17)),
            node("7", Some("6"), "StaticText", "Sign in", &[], None),
            hidden,
            node("9", Some("2"), "list", "", &["10"], Some(20)),
            node("10", Some("9"), "listitem", "", &["11"], Some(21)),
            node("11", Some("10"), "link", "Home", &[], Some(22)),
        ];
        assert_eq!(
            write(&nodes),
            "- heading \"Sign in\" [level=1] [ref=e12]\n\
             - textbox \"User name\" [ref=e15]: ada\n\
             - button \"Sign in\" [ref=e17]\n\
             - list [ref=e20]:\n  - listitem [ref=e21]:\n    - link \"Home\" [ref=e22]"
        );
    }

    #[test]
    fn refs_round_trip_and_text_is_bounded() {
        assert_eq!(parse_ref(&ref_of(42)), Some(42));
        assert_eq!(parse_ref("42"), None);
        assert_eq!(parse_ref("e0"), None);
        assert_eq!(parse_ref("ex"), None);
        let long = "word ".repeat(200);
        assert!(clean(&long).chars().count() <= MAX_TEXT_CHARS + 1);
        assert_eq!(quoted_if_needed("a: b"), "\"a: b\"");
        assert_eq!(quoted_if_needed("hello"), "hello");
    }

    #[test]
    fn a_page_past_the_bound_says_how_much_was_left_out() {
        let ids: Vec<String> = (0..MAX_LINES + 10).map(|i| format!("n{i}")).collect();
        let refs: Vec<&str> = ids.iter().map(String::as_str).collect();
        let mut nodes = vec![node("root", None, "RootWebArea", "", &refs, None)];
        for (i, id) in ids.iter().enumerate() {
            nodes.push(node(id, Some("root"), "button", &format!("b{i}"), &[], Some(i as i64 + 1)));
        }
        let text = write(&nodes);
        assert_eq!(text.lines().count(), MAX_LINES + 1);
        assert!(text.ends_with("(10 more elements left out of this snapshot)"), "{}", &text[text.len() - 80..]);
    }
}
