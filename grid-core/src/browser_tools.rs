//! The MCP browser tools (docs/mcp.md, "Browser tools"): an agent drives a
//! leased session's browser with them, named and shaped as Playwright MCP's
//! are, each taking the `sessionId`. Here: the table of tools (name, what
//! it does, its input schema, whether it only reads) and their arguments
//! read into a `BrowserTool`, every problem named by its field, and what a
//! tool answers (`Answer`). The server runs a tool through the session's
//! CDP gate (`grid-server sessions/tools.rs`).

use base64::Engine as _;
use serde::{Deserialize, Serialize};
use serde_json::{json, Map, Value};

use crate::snapshot;

/// Longest text `browser_type` types, in characters.
pub const MAX_TYPED_CHARS: usize = 100_000;
/// Longest expression `browser_evaluate` evaluates, in characters.
pub const MAX_EXPRESSION_CHARS: usize = 100_000;
/// Longest wait of `browser_wait_for`, in milliseconds.
pub const MAX_WAIT_MS: u64 = 60_000;
/// Most fields `browser_fill_form` fills at once.
pub const MAX_FORM_FIELDS: usize = 100;
/// Most files one `browser_file_upload` gives a file input.
pub const MAX_UPLOAD_FILES: usize = 10;
/// Most bytes (decoded) one `browser_file_upload` carries, all files
/// together: its base64 fits in one MCP request (8 MiB).
pub const MAX_UPLOAD_BYTES: usize = 5 * 1024 * 1024;
/// Longest name of an uploaded file.
pub const MAX_FILE_NAME_CHARS: usize = 255;

/// The most of a value's JSON a tool answers (`browser_evaluate`); a longer
/// one is cut to this, with a note, so that one call cannot make the server
/// hold or send a page's hundreds of megabytes (docs/mcp.md).
pub const MAX_RESULT_CHARS: usize = 8 << 20;

/// What a tool answers: the current tab's URL and title after it, and what
/// the tool itself reads. As JSON, it is also what the node running a
/// session's browser answers the node that asked it to run the tool.
#[derive(Debug, Clone, Default, PartialEq, Serialize, Deserialize)]
#[serde(rename_all = "camelCase")]
pub struct Answer {
    pub url: String,
    pub title: String,
    pub snapshot: Option<String>,
    pub result: Option<Value>,
    /// A PNG (`browser_take_screenshot`); base64 in JSON.
    #[serde(with = "base64_bytes")]
    pub image: Option<Vec<u8>>,
    /// The result as lines a person reads, where JSON would be hard going
    /// (the console, the requests).
    pub lines: Option<String>,
    /// `browser_evaluate`'s value when its JSON passed [`MAX_RESULT_CHARS`]:
    /// its start, instead of `result`.
    pub cut: Option<Cut>,
}

/// A value too long to answer whole: the length of its JSON and its first
/// [`MAX_RESULT_CHARS`] characters (or less, on a character's boundary).
#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize)]
#[serde(rename_all = "camelCase")]
pub struct Cut {
    pub total_chars: usize,
    pub kept: String,
}

/// `Answer::image` as base64 text in JSON.
mod base64_bytes {
    use base64::Engine as _;
    use serde::{Deserialize, Deserializer, Serializer};

    pub fn serialize<S: Serializer>(bytes: &Option<Vec<u8>>, s: S) -> Result<S::Ok, S::Error> {
        match bytes {
            Some(b) => s.serialize_some(&base64::engine::general_purpose::STANDARD.encode(b)),
            None => s.serialize_none(),
        }
    }

    pub fn deserialize<'de, D: Deserializer<'de>>(d: D) -> Result<Option<Vec<u8>>, D::Error> {
        match Option::<String>::deserialize(d)? {
            Some(text) => {
                base64::engine::general_purpose::STANDARD.decode(text).map(Some).map_err(serde::de::Error::custom)
            }
            None => Ok(None),
        }
    }
}

/// One call of a browser tool, its arguments checked.
#[derive(Debug, Clone, PartialEq)]
pub enum BrowserTool {
    Navigate { url: String },
    NavigateBack,
    Snapshot,
    Click { target: Ref, double: bool },
    Hover { target: Ref },
    Type { target: Ref, text: String, submit: bool },
    FillForm { fields: Vec<(Ref, String)> },
    PressKey { key: String },
    SelectOption { target: Ref, values: Vec<String> },
    WaitFor { text: Option<String>, text_gone: Option<String>, time_ms: Option<u64> },
    TakeScreenshot { full_page: bool },
    Evaluate { expression: String },
    Tabs { action: TabAction },
    Drag { start: Ref, end: Ref },
    FileUpload { target: Ref, files: Vec<Upload> },
    ConsoleMessages { only_errors: bool },
    NetworkRequests,
}

/// A file an agent gives a page's file input, with its bytes.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct Upload {
    pub name: String,
    /// Its media type (`application/octet-stream` when not given).
    pub mime_type: String,
    pub content: Vec<u8>,
}

#[derive(Debug, Clone, PartialEq)]
pub enum TabAction {
    List,
    New { url: Option<String> },
    Select { index: usize },
    Close { index: Option<usize> },
}

/// An element of the last snapshot: its ref as written (`e42`) and the
/// backend DOM node id it names.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct Ref {
    pub text: String,
    pub backend_node_id: i64,
}

/// A browser tool's row: its name, title, what it does and whether it only
/// reads the page.
pub struct ToolRow {
    pub name: &'static str,
    pub title: &'static str,
    pub description: &'static str,
    pub read_only: bool,
}

/// Every browser tool, in the order `tools/list` gives them.
pub const TOOLS: &[ToolRow] = &[
    row("browser_navigate", "Navigate to a URL", "Opens a URL in the session's current tab and answers the page's snapshot.", false),
    row("browser_navigate_back", "Go back", "Goes back to the previous page of the current tab.", false),
    row("browser_snapshot", "Read the page", "The current tab as an accessibility snapshot: one element per line, `- role \"name\" [ref=eN]`, nested by indentation. Use the refs with the other tools; a ref stays valid until the page replaces its element.", true),
    row("browser_click", "Click an element", "Clicks the element a snapshot ref names (in its middle, scrolled into view) and answers the new snapshot.", false),
    row("browser_hover", "Hover over an element", "Moves the mouse over the element a ref names.", false),
    row("browser_type", "Type into an element", "Focuses the element a ref names and types text into it; `submit: true` presses Enter after.", false),
    row("browser_fill_form", "Fill a form", "Sets the value of several fields at once (text inputs, text areas, checkboxes with \"true\"/\"false\", selects by option label or value), firing input and change events.", false),
    row("browser_press_key", "Press a key", "Presses a key in the current tab: a character, or a name such as Enter, Tab, Escape, Backspace, ArrowDown.", false),
    row("browser_select_option", "Select options", "Selects options of a <select> by their value or label.", false),
    row("browser_wait_for", "Wait", "Waits until a text appears (`text`), disappears (`textGone`), or for a time (`timeMs`, at most 60000); answers the snapshot.", true),
    row("browser_take_screenshot", "Take a screenshot", "A PNG screenshot of the current tab's viewport (or the whole page with `fullPage`), as image content you can see.", true),
    row("browser_evaluate", "Evaluate JavaScript", "Evaluates a JavaScript expression in the current tab (awaiting a promise) and answers its value as JSON.", false),
    row("browser_drag", "Drag and drop", "Drags the element `startRef` names onto the one `endRef` names (the mouse pressed, moved and released; HTML drag and drop included) and answers the new snapshot.", false),
    row("browser_file_upload", "Upload files", "Gives the file input a ref names the files you send with their bytes (`files`: name, base64 content, media type; at most 10 files, 5 MiB in all), as if a person chose them, firing input and change. Nothing is read from any disk.", false),
    row("browser_console_messages", "Read console messages", "The current tab's console messages since its page loaded (console calls, uncaught errors, the browser's own warnings such as a failed resource), oldest first; `onlyErrors` keeps the errors.", true),
    row("browser_network_requests", "Read network requests", "The requests the current tab's page made since it loaded: method, URL, resource type and the answer's status (or why it failed), oldest first.", true),
    row("browser_tabs", "Manage tabs", "Lists the session's tabs, opens a new one (`action: new`, optional `url`), selects one (`select`, `index`) or closes one (`close`, optional `index`, default the current).", false),
];

const fn row(name: &'static str, title: &'static str, description: &'static str, read_only: bool) -> ToolRow {
    ToolRow { name, title, description, read_only }
}

/// Whether `name` is a browser tool.
pub fn is_browser_tool(name: &str) -> bool {
    TOOLS.iter().any(|t| t.name == name)
}

/// The input schema of a browser tool: `sessionId` and its own arguments.
pub fn input_schema(name: &str) -> Value {
    let target =
        json!({"type": "string", "pattern": "^e[1-9][0-9]*$", "description": "A ref from the last snapshot (e12)."});
    let element =
        json!({"type": "string", "description": "What the element is, in words (for the log; the ref decides)."});
    let (properties, required): (Value, &[&str]) = match name {
        "browser_navigate" => {
            (json!({"url": {"type": "string", "description": "An absolute http or https URL."}}), &["url"])
        }
        "browser_click" => {
            (json!({"ref": target, "element": element, "doubleClick": {"type": "boolean", "default": false}}), &["ref"])
        }
        "browser_hover" => (json!({"ref": target, "element": element}), &["ref"]),
        "browser_type" => (
            json!({"ref": target, "element": element,
                   "text": {"type": "string", "maxLength": MAX_TYPED_CHARS},
                   "submit": {"type": "boolean", "default": false, "description": "Press Enter after typing."}}),
            &["ref", "text"],
        ),
        "browser_fill_form" => (
            json!({"fields": {
                "type": "array", "minItems": 1, "maxItems": MAX_FORM_FIELDS,
                "items": {"type": "object", "additionalProperties": false, "required": ["ref", "value"],
                          "properties": {"ref": target, "name": element, "value": {"type": "string", "maxLength": MAX_TYPED_CHARS}}}
            }}),
            &["fields"],
        ),
        "browser_press_key" => (json!({"key": {"type": "string", "minLength": 1, "maxLength": 32}}), &["key"]),
        "browser_select_option" => (
            json!({"ref": target, "element": element,
                   "values": {"type": "array", "minItems": 1, "maxItems": 100, "items": {"type": "string"}}}),
            &["ref", "values"],
        ),
        "browser_wait_for" => (
            json!({"text": {"type": "string", "minLength": 1, "maxLength": 1000},
                   "textGone": {"type": "string", "minLength": 1, "maxLength": 1000},
                   "timeMs": {"type": "integer", "minimum": 0, "maximum": MAX_WAIT_MS}}),
            &[],
        ),
        "browser_take_screenshot" => (json!({"fullPage": {"type": "boolean", "default": false}}), &[]),
        "browser_evaluate" => (
            json!({"expression": {"type": "string", "minLength": 1, "maxLength": MAX_EXPRESSION_CHARS}}),
            &["expression"],
        ),
        "browser_tabs" => (
            json!({"action": {"type": "string", "enum": ["list", "new", "select", "close"]},
                   "index": {"type": "integer", "minimum": 0},
                   "url": {"type": "string"}}),
            &["action"],
        ),
        "browser_drag" => (
            json!({"startRef": target, "startElement": element, "endRef": target, "endElement": element}),
            &["startRef", "endRef"],
        ),
        "browser_file_upload" => (
            json!({"ref": target, "element": element, "files": {
                "type": "array", "minItems": 1, "maxItems": MAX_UPLOAD_FILES,
                "items": {"type": "object", "additionalProperties": false, "required": ["name", "contentBase64"],
                          "properties": {
                              "name": {"type": "string", "minLength": 1, "maxLength": MAX_FILE_NAME_CHARS, "description": "The file's name, without a folder."},
                              "contentBase64": {"type": "string", "contentEncoding": "base64", "description": "The file's bytes, base64 (standard alphabet)."},
                              "mimeType": {"type": "string", "maxLength": 255, "default": "application/octet-stream"}}}
            }}),
            &["ref", "files"],
        ),
        "browser_console_messages" => (json!({"onlyErrors": {"type": "boolean", "default": false}}), &[]),
        _ => (json!({}), &[]),
    };
    let mut props = Map::new();
    props.insert(
        "sessionId".into(),
        json!({"type": "string", "minLength": 1, "description": "The sessionId lease_session answered."}),
    );
    if let Value::Object(own) = properties {
        props.extend(own);
    }
    let mut all = vec!["sessionId"];
    all.extend_from_slice(required);
    json!({"type": "object", "properties": props, "required": all, "additionalProperties": false})
}

/// The output schema every browser tool answers with.
pub fn output_schema() -> Value {
    json!({
        "type": "object",
        "properties": {
            "sessionId": {"type": "string"},
            "url": {"type": "string", "description": "The current tab's URL after the action."},
            "title": {"type": "string"},
            "snapshot": {"type": "string", "description": "The page as lines `- role \"name\" [ref=eN]` (left out where the tool says nothing of the page)."},
            "result": {"description": "browser_evaluate's value; browser_tabs' list; browser_console_messages' messages; browser_network_requests' requests."},
            "resultInText": {"type": "boolean", "description": "The value (over 1 MiB as JSON) is in the text content only, sent once."},
            "resultCut": {
                "type": "object",
                "description": "browser_evaluate's value was longer than a tool answers (8 MiB of JSON): the text content holds its start.",
                "properties": {"totalChars": {"type": "integer", "minimum": 0}, "keptChars": {"type": "integer", "minimum": 0}},
                "required": ["totalChars", "keptChars"]
            }
        },
        "required": ["sessionId", "url", "title"]
    })
}

/// The session id and the tool's arguments, or every problem, each named
/// by its field.
pub fn parse(name: &str, args: &Map<String, Value>) -> Result<(String, BrowserTool), Vec<String>> {
    let mut p = vec![];
    let schema = input_schema(name);
    let known: Vec<&str> =
        schema["properties"].as_object().map(|o| o.keys().map(String::as_str).collect()).unwrap_or_default();
    for k in args.keys() {
        if !known.contains(&k.as_str()) {
            p.push(format!("{k}: unknown argument of {name}"));
        }
    }
    let session = text(&mut p, args, "sessionId", true, 256).unwrap_or_default();
    let tool = match name {
        "browser_navigate" => text(&mut p, args, "url", true, 8192).map(|url| BrowserTool::Navigate { url }),
        "browser_navigate_back" => Some(BrowserTool::NavigateBack),
        "browser_snapshot" => Some(BrowserTool::Snapshot),
        "browser_click" => {
            let double = flag(&mut p, args, "doubleClick");
            element_ref(&mut p, args.get("ref"), "ref").map(|target| BrowserTool::Click { target, double })
        }
        "browser_hover" => element_ref(&mut p, args.get("ref"), "ref").map(|target| BrowserTool::Hover { target }),
        "browser_type" => {
            let target = element_ref(&mut p, args.get("ref"), "ref");
            let t = text_allow_empty(&mut p, args, "text", MAX_TYPED_CHARS);
            let submit = flag(&mut p, args, "submit");
            match (target, t) {
                (Some(target), Some(text)) => Some(BrowserTool::Type { target, text, submit }),
                _ => None,
            }
        }
        "browser_fill_form" => fields(&mut p, args.get("fields")).map(|fields| BrowserTool::FillForm { fields }),
        "browser_press_key" => text(&mut p, args, "key", true, 32).map(|key| BrowserTool::PressKey { key }),
        "browser_select_option" => {
            let target = element_ref(&mut p, args.get("ref"), "ref");
            let values = strings(&mut p, args.get("values"), "values");
            match (target, values) {
                (Some(target), Some(values)) => Some(BrowserTool::SelectOption { target, values }),
                _ => None,
            }
        }
        "browser_wait_for" => {
            let text_ = text(&mut p, args, "text", false, 1000);
            let gone = text(&mut p, args, "textGone", false, 1000);
            let time_ms = match args.get("timeMs") {
                None => None,
                Some(v) => match v.as_u64().filter(|n| *n <= MAX_WAIT_MS) {
                    Some(n) => Some(n),
                    None => {
                        p.push(format!("timeMs: must be a whole number from 0 to {MAX_WAIT_MS}"));
                        None
                    }
                },
            };
            if text_.is_none()
                && gone.is_none()
                && time_ms.is_none()
                && !args.contains_key("text")
                && !args.contains_key("textGone")
                && !args.contains_key("timeMs")
            {
                p.push("text, textGone or timeMs: give at least one".into());
            }
            Some(BrowserTool::WaitFor { text: text_, text_gone: gone, time_ms })
        }
        "browser_take_screenshot" => Some(BrowserTool::TakeScreenshot { full_page: flag(&mut p, args, "fullPage") }),
        "browser_evaluate" => text(&mut p, args, "expression", true, MAX_EXPRESSION_CHARS)
            .map(|expression| BrowserTool::Evaluate { expression }),
        "browser_tabs" => {
            let index = match args.get("index") {
                None => None,
                Some(v) => match v.as_u64() {
                    Some(n) => Some(n as usize),
                    None => {
                        p.push("index: must be a whole number from 0".into());
                        None
                    }
                },
            };
            let url = text(&mut p, args, "url", false, 8192);
            match text(&mut p, args, "action", true, 16).as_deref() {
                Some("list") => Some(TabAction::List),
                Some("new") => Some(TabAction::New { url }),
                Some("select") => match index {
                    Some(index) => Some(TabAction::Select { index }),
                    None => {
                        p.push("index: required to select a tab".into());
                        None
                    }
                },
                Some("close") => Some(TabAction::Close { index }),
                Some(other) => {
                    p.push(format!("action: must be list, new, select or close, got \"{other}\""));
                    None
                }
                None => None,
            }
            .map(|action| BrowserTool::Tabs { action })
        }
        "browser_drag" => {
            let start = element_ref(&mut p, args.get("startRef"), "startRef");
            let end = element_ref(&mut p, args.get("endRef"), "endRef");
            match (start, end) {
                (Some(start), Some(end)) => Some(BrowserTool::Drag { start, end }),
                _ => None,
            }
        }
        "browser_file_upload" => {
            let target = element_ref(&mut p, args.get("ref"), "ref");
            let files = uploads(&mut p, args.get("files"));
            match (target, files) {
                (Some(target), Some(files)) => Some(BrowserTool::FileUpload { target, files }),
                _ => None,
            }
        }
        "browser_console_messages" => {
            Some(BrowserTool::ConsoleMessages { only_errors: flag(&mut p, args, "onlyErrors") })
        }
        "browser_network_requests" => Some(BrowserTool::NetworkRequests),
        other => {
            p.push(format!("{other}: not a browser tool"));
            None
        }
    };
    match tool {
        Some(tool) if p.is_empty() => Ok((session, tool)),
        _ => Err(p),
    }
}

/// `browser_file_upload`'s files, their bytes decoded, within the bounds.
fn uploads(p: &mut Vec<String>, v: Option<&Value>) -> Option<Vec<Upload>> {
    let Some(list) = v.and_then(Value::as_array).filter(|l| (1..=MAX_UPLOAD_FILES).contains(&l.len())) else {
        p.push(format!("files: must be a list of 1 to {MAX_UPLOAD_FILES} files"));
        return None;
    };
    let before = p.len();
    let mut files = vec![];
    let mut total = 0usize;
    for (i, f) in list.iter().enumerate() {
        let Some(f) = f.as_object() else {
            p.push(format!("files[{i}]: must be an object with name and contentBase64"));
            continue;
        };
        for k in f.keys().filter(|k| !matches!(k.as_str(), "name" | "contentBase64" | "mimeType")) {
            p.push(format!("files[{i}].{k}: unknown field (name, contentBase64, mimeType)"));
        }
        let name = match f.get("name").and_then(Value::as_str) {
            Some(n)
                if !n.is_empty()
                    && n.chars().count() <= MAX_FILE_NAME_CHARS
                    && !n.contains(['/', '\\', '\0'])
                    && n != "."
                    && n != ".." =>
            {
                Some(n.to_string())
            }
            _ => {
                p.push(format!(
                    "files[{i}].name: must be a file name of 1 to {MAX_FILE_NAME_CHARS} characters, without a folder"
                ));
                None
            }
        };
        let mime_type = match f.get("mimeType") {
            None => Some("application/octet-stream".to_string()),
            Some(Value::String(m))
                if m.len() <= 255 && !m.is_empty() && m.is_ascii() && !m.contains(char::is_control) =>
            {
                Some(m.clone())
            }
            Some(_) => {
                p.push(format!("files[{i}].mimeType: must be a media type such as text/plain"));
                None
            }
        };
        let content = match f.get("contentBase64").and_then(Value::as_str) {
            // Bounded before decoding: base64 is 4 characters per 3 bytes.
            Some(b) if b.len() > (MAX_UPLOAD_BYTES / 3 + 1) * 4 => {
                p.push(format!("files[{i}].contentBase64: over {MAX_UPLOAD_BYTES} bytes"));
                None
            }
            Some(b) => match base64::engine::general_purpose::STANDARD.decode(b) {
                Ok(bytes) => Some(bytes),
                Err(_) => {
                    p.push(format!("files[{i}].contentBase64: not base64 (standard alphabet, padded)"));
                    None
                }
            },
            None => {
                p.push(format!("files[{i}].contentBase64: required, the file's bytes as base64"));
                None
            }
        };
        if let (Some(name), Some(mime_type), Some(content)) = (name, mime_type, content) {
            total += content.len();
            files.push(Upload { name, mime_type, content });
        }
    }
    if total > MAX_UPLOAD_BYTES {
        p.push(format!("files: {total} bytes in all, over {MAX_UPLOAD_BYTES}"));
    }
    (p.len() == before).then_some(files)
}

fn text(p: &mut Vec<String>, args: &Map<String, Value>, field: &str, required: bool, max: usize) -> Option<String> {
    match args.get(field) {
        None if required => {
            p.push(format!("{field}: required"));
            None
        }
        None => None,
        Some(Value::String(s)) if !s.is_empty() && s.chars().count() <= max => Some(s.clone()),
        Some(_) => {
            p.push(format!("{field}: must be a string of 1 to {max} characters"));
            None
        }
    }
}

fn text_allow_empty(p: &mut Vec<String>, args: &Map<String, Value>, field: &str, max: usize) -> Option<String> {
    match args.get(field) {
        Some(Value::String(s)) if s.chars().count() <= max => Some(s.clone()),
        _ => {
            p.push(format!("{field}: required, a string of at most {max} characters"));
            None
        }
    }
}

fn flag(p: &mut Vec<String>, args: &Map<String, Value>, field: &str) -> bool {
    match args.get(field) {
        None => false,
        Some(Value::Bool(b)) => *b,
        Some(_) => {
            p.push(format!("{field}: must be a boolean"));
            false
        }
    }
}

fn element_ref(p: &mut Vec<String>, v: Option<&Value>, field: &str) -> Option<Ref> {
    match v.and_then(Value::as_str) {
        Some(s) => match snapshot::parse_ref(s) {
            Some(id) => Some(Ref { text: s.to_string(), backend_node_id: id }),
            None => {
                p.push(format!(
                    "{field}: \"{s}\" is not a ref of a snapshot (e12); take a snapshot with browser_snapshot"
                ));
                None
            }
        },
        None => {
            p.push(format!("{field}: required, a ref from the last snapshot (e12)"));
            None
        }
    }
}

fn strings(p: &mut Vec<String>, v: Option<&Value>, field: &str) -> Option<Vec<String>> {
    match v.and_then(Value::as_array) {
        Some(a) if !a.is_empty() && a.iter().all(Value::is_string) => {
            Some(a.iter().filter_map(Value::as_str).map(str::to_string).collect())
        }
        _ => {
            p.push(format!("{field}: required, a non-empty array of strings"));
            None
        }
    }
}

fn fields(p: &mut Vec<String>, v: Option<&Value>) -> Option<Vec<(Ref, String)>> {
    let Some(list) = v.and_then(Value::as_array).filter(|l| !l.is_empty() && l.len() <= MAX_FORM_FIELDS) else {
        p.push(format!("fields: required, 1 to {MAX_FORM_FIELDS} objects {{ref, value}}"));
        return None;
    };
    let before = p.len();
    let mut out = vec![];
    for (i, f) in list.iter().enumerate() {
        let target = element_ref(p, f.get("ref"), &format!("fields[{i}].ref"));
        let value = match f.get("value") {
            Some(Value::String(s)) if s.chars().count() <= MAX_TYPED_CHARS => Some(s.clone()),
            Some(Value::Bool(b)) => Some(b.to_string()),
            _ => {
                p.push(format!("fields[{i}].value: required, a string"));
                None
            }
        };
        if let (Some(t), Some(v)) = (target, value) {
            out.push((t, v));
        }
    }
    (p.len() == before).then_some(out)
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn an_answer_crosses_between_nodes_whole_its_image_as_base64() {
        let answer = Answer {
            url: "http://a.test/".into(),
            title: "A".into(),
            snapshot: Some("- heading \"A\" [ref=e2]".into()),
            result: Some(json!({"n": 1})),
            image: Some(vec![0x89, b'P', b'N', b'G', 0, 255]),
            lines: None,
            cut: Some(Cut { total_chars: 9, kept: "[1,".into() }),
        };
        let sent = serde_json::to_value(&answer).unwrap();
        assert_eq!(sent["image"], "iVBORwD/");
        assert_eq!(sent["cut"], json!({"totalChars": 9, "kept": "[1,"}));
        assert_eq!(serde_json::from_value::<Answer>(sent).unwrap(), answer);
        let bare = Answer { url: "about:blank".into(), ..Answer::default() };
        assert_eq!(serde_json::from_value::<Answer>(serde_json::to_value(&bare).unwrap()).unwrap(), bare);
    }

    fn args(v: Value) -> Map<String, Value> {
        v.as_object().cloned().unwrap_or_default()
    }

    #[test]
    fn arguments_are_read_and_every_problem_named() {
        let (s, t) =
            parse("browser_type", &args(json!({"sessionId": "ss_1", "ref": "e5", "text": "ada", "submit": true})))
                .unwrap();
        assert_eq!(s, "ss_1");
        assert_eq!(
            t,
            BrowserTool::Type {
                target: Ref { text: "e5".into(), backend_node_id: 5 },
                text: "ada".into(),
                submit: true
            }
        );
        let e = parse("browser_click", &args(json!({"ref": "button", "bogus": 1}))).unwrap_err();
        assert!(e.iter().any(|m| m.starts_with("bogus: unknown argument")), "{e:?}");
        assert!(e.iter().any(|m| m.starts_with("sessionId: required")), "{e:?}");
        assert!(e.iter().any(|m| m.starts_with("ref: \"button\" is not a ref")), "{e:?}");
        assert!(parse("browser_wait_for", &args(json!({"sessionId": "s"}))).is_err());
        let (_, t) = parse("browser_wait_for", &args(json!({"sessionId": "s", "text": "Welcome"}))).unwrap();
        assert_eq!(t, BrowserTool::WaitFor { text: Some("Welcome".into()), text_gone: None, time_ms: None });
        let (_, t) = parse("browser_tabs", &args(json!({"sessionId": "s", "action": "select", "index": 1}))).unwrap();
        assert_eq!(t, BrowserTool::Tabs { action: TabAction::Select { index: 1 } });
        let e = parse("browser_fill_form", &args(json!({"sessionId": "s", "fields": [{"ref": "e1"}]}))).unwrap_err();
        assert_eq!(e, ["fields[0].value: required, a string"]);
    }

    #[test]
    fn uploads_arrive_decoded_within_their_bounds_and_drags_name_both_ends() {
        let (_, t) = parse(
            "browser_file_upload",
            &args(json!({"sessionId": "s", "ref": "e7",
                         "files": [{"name": "a.txt", "contentBase64": "aGk=", "mimeType": "text/plain"},
                                   {"name": "b.bin", "contentBase64": ""}]})),
        )
        .unwrap();
        let BrowserTool::FileUpload { target, files } = t else { panic!("{t:?}") };
        assert_eq!(target.backend_node_id, 7);
        assert_eq!(files[0], Upload { name: "a.txt".into(), mime_type: "text/plain".into(), content: b"hi".to_vec() });
        assert_eq!((files[1].mime_type.as_str(), files[1].content.len()), ("application/octet-stream", 0));
        let too_big = "A".repeat((MAX_UPLOAD_BYTES / 3 + 2) * 4);
        let e = parse(
            "browser_file_upload",
            &args(json!({"sessionId": "s", "ref": "e7",
                         "files": [{"name": "../etc/passwd", "contentBase64": "!!"},
                                   {"name": "x", "contentBase64": too_big, "path": "/etc"}]})),
        )
        .unwrap_err();
        for want in [
            "files[0].name: must be a file name",
            "files[0].contentBase64: not base64",
            "files[1].path: unknown field",
            "files[1].contentBase64: over",
        ] {
            assert!(e.iter().any(|m| m.starts_with(want)), "{want}: {e:?}");
        }
        let e = parse("browser_file_upload", &args(json!({"sessionId": "s", "ref": "e7", "files": []}))).unwrap_err();
        assert!(e[0].starts_with("files: must be a list of 1 to 10"), "{e:?}");
        let (_, t) = parse("browser_drag", &args(json!({"sessionId": "s", "startRef": "e1", "endRef": "e2"}))).unwrap();
        assert!(
            matches!(t, BrowserTool::Drag { start, end } if start.backend_node_id == 1 && end.backend_node_id == 2)
        );
        let e = parse("browser_drag", &args(json!({"sessionId": "s", "startRef": "e1"}))).unwrap_err();
        assert_eq!(e, ["endRef: required, a ref from the last snapshot (e12)"]);
        let (_, t) = parse("browser_console_messages", &args(json!({"sessionId": "s", "onlyErrors": true}))).unwrap();
        assert_eq!(t, BrowserTool::ConsoleMessages { only_errors: true });
    }

    #[test]
    fn every_tool_has_a_closed_schema_naming_the_session() {
        for t in TOOLS {
            let s = input_schema(t.name);
            assert_eq!(s["additionalProperties"], false, "{}", t.name);
            assert_eq!(s["required"][0], "sessionId", "{}", t.name);
            assert!(is_browser_tool(t.name));
        }
        assert!(!is_browser_tool("lease_session"));
    }
}
