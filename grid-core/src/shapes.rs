//! The JSON Schema of each request: the one definition of its shape (field
//! names, which are required, bounds, enums, patterns, defaults) that the
//! MCP tools publish as their input schemas and an API description can
//! reuse. Bounds and vocabularies are the validators' constants and the
//! catalog's lists, not copies of them; `grid-core/tests/shapes.rs` proves,
//! driven by these schemas, that each agrees with its wire type (`wire::*`,
//! what the SDK sends) and its validator (`validate::*`, what the server
//! accepts) on every field, bound and enum.
//!
//! Keywords are JSON Schema 2020-12. A quantity string (`"250m"`, `"1Gi"`)
//! also carries its bounds as `x-minimum` and `x-maximum` (quantity strings;
//! numeric `minimum` cannot bound a string) and its grammar as `format`
//! `cpu-quantity` or `byte-quantity` (`validate::quantity`).

use serde_json::{json, Map, Value};

use crate::catalog::{ParamGroup, Profile, Script, PUBLIC_WEB_ONLY_V1};
use crate::validate::one_call::OneCall;
use crate::validate::params::{self, ImageFormat, ResourceType, SameSite, WaitUntil};
use crate::validate::quantity::{format_bytes, format_cpu_millis, BYTE_QUANTITY_PATTERN, CPU_QUANTITY_PATTERN};
use crate::validate::{batch, job, list, proxy, session};
use crate::wire::job::{JobPhase, NetworkProfile};

/// The requests' shapes that have a name: each body, each script's
/// `params` (`CaptureParams`, `FetchParams`, ...: the script's name in
/// Pascal case) and the parts that stand for one thing a client builds (a
/// viewport, a cookie) or that several scripts share. The OpenAPI document publishes them as
/// `components.schemas` and refers to them wherever the same schema
/// appears; names are what a generated client calls its types.
pub fn named() -> Vec<(String, Value)> {
    let mut named: Vec<(String, Value)> = vec![
        ("BatchSubmission".into(), new_batch()),
        ("JobSubmission".into(), new_job()),
        ("JobResources".into(), job_resources()),
        ("JobCapabilities".into(), job_capabilities()),
        ("SessionRequest".into(), new_session()),
        ("SessionViewport".into(), session_viewport()),
        ("UpstreamProxy".into(), upstream_proxy()),
        ("CaptureClip".into(), script_param(ParamGroup::Screenshot, "clip")),
        ("CaptureViewport".into(), script_param(ParamGroup::Rendering, "viewport")),
        ("CaptureWaitFor".into(), script_param(ParamGroup::Rendering, "waitFor")),
        ("Cookie".into(), script_param(ParamGroup::Page, "cookies")["items"].clone()),
        ("ExtraHeaders".into(), script_param(ParamGroup::Page, "headers")),
        ("WaitUntil".into(), script_param(ParamGroup::Page, "waitUntil")),
        ("ResourceType".into(), script_param(ParamGroup::Page, "blockResourceTypes")["items"].clone()),
    ];
    named.extend(Script::ALL.map(|s| (params_name(s), script_params(s))));
    named.extend(OneCall::ALL.map(|c| (one_call_name(c), one_call_body(c))));
    named
}

/// The name of a one-call capture's body: `ScreenshotRequest`, `PdfRequest`.
fn one_call_name(call: OneCall) -> String {
    format!("{}Request", pascal_case(call.path().trim_start_matches('/')))
}

/// The name of a script's `params`: `CaptureParams`, `RenderFetchParams`.
fn params_name(script: Script) -> String {
    format!("{}Params", pascal_case(script.as_str()))
}

/// `render-fetch` → `RenderFetch`.
fn pascal_case(name: &str) -> String {
    name.split(|c: char| !c.is_ascii_alphanumeric())
        .map(|word| {
            let mut chars = word.chars();
            chars.next().map(|c| c.to_ascii_uppercase().to_string() + chars.as_str()).unwrap_or_default()
        })
        .collect()
}

/// The body of POST /batches (`wire::batch::NewBatch`).
///
/// `params` depends on `script`: `dependentSchemas.params` is a `oneOf`
/// keyed by `script`, one branch per script whose `params` is that script's
/// schema (`script_params`); a body without `script` takes the default
/// script's branch. Not a `oneOf` at the root: some model APIs refuse a tool
/// whose input schema has `oneOf`, `anyOf` or `allOf` at its top level.
/// Params are checked when each item runs (the contract): a batch whose
/// params break this schema is still accepted, and its items fail naming
/// the parameter.
pub fn new_batch() -> Value {
    let mut schema = object(
        json!({
            "urls": {
                "type": "array",
                // An http(s) scheme and the start of a host: no pattern can
                // say all the URL standard's parser accepts (it takes
                // `http:a.example` and `http:\\a.example`), but every URL it
                // refuses for want of a host fails this; the server parses the rest.
                "items": {"type": "string", "format": "uri", "pattern": "^[hH][tT][tT][pP][sS]?:[/\\\\]*[^/\\\\?#]"},
                "minItems": batch::MIN_URLS,
                "maxItems": batch::MAX_URLS,
                "description": "Absolute http or https URLs, one capture item each."
            },
            "script": {
                "type": "string",
                "enum": Script::ALL.map(Script::as_str),
                "default": Script::DEFAULT.as_str(),
                "description": format!(
                    "What each item does, and its price per item in micro-euros: {}.",
                    Script::ALL.map(|s| format!("{} {}", s.as_str(), s.price_micros())).join(", ")
                )
            },
            "profileId": profile_id(&Profile::ALL),
            "params": {
                "type": "object",
                // Said outright: a generated client types an object
                // without properties and without this as always empty.
                "additionalProperties": true,
                "default": {},
                "description": "The script's parameters: dependentSchemas.params.oneOf has one branch per script \
                                listing every parameter it takes. Checked when each item runs: a bad one fails \
                                the item, naming it (docs/browser-captures.md)."
            },
            "priority": {
                "type": "integer",
                "minimum": batch::MIN_PRIORITY,
                "maximum": batch::MAX_PRIORITY,
                "description": "Lower runs sooner; items without priority run first."
            },
            "context": {
                "type": "string",
                "pattern": crate::validate::session::CONTEXT_ID_PATTERN,
                "description": "A context of yours (POST /contexts) whose cookies every item sends, by the browser's rules; read-only (docs/captures.md, Signed-in captures)."
            },
            "proxy": upstream_proxy()
        }),
        &["urls"],
    );
    schema["dependentSchemas"] = json!({"params": {"oneOf": Script::ALL.map(script_branch)}});
    schema
}

/// The body of a one-call capture (`validate::one_call`): `url`,
/// `profileId` and the route's script's parameters, flat beside them.
pub fn one_call_body(call: OneCall) -> Value {
    let script = call.script();
    let params = script_params(script);
    let mut properties = json!({
        "url": {
            "type": "string",
            "format": "uri",
            "pattern": "^[hH][tT][tT][pP][sS]?:[/\\\\]*[^/\\\\?#]",
            "description": "The page: an absolute http or https URL."
        },
        "profileId": profile_id(&Profile::ALL),
        "context": {
            "type": "string",
            "pattern": crate::validate::session::CONTEXT_ID_PATTERN,
            "description": "A context of yours (POST /contexts) whose cookies the page starts with; read-only (docs/captures.md, Signed-in captures)."
        }
    });
    for (name, schema) in params["properties"].as_object().into_iter().flatten() {
        properties[name] = schema.clone();
    }
    let mut o = object(properties, &["url"]);
    if let Some(rules) = params.get("dependentSchemas") {
        o["dependentSchemas"] = rules.clone();
    }
    o["title"] = json!(one_call_name(call));
    o
}

/// One branch of `new_batch`'s `oneOf`: a body whose `script` is `script`
/// (or, for the default script, absent) has these `params`.
fn script_branch(script: Script) -> Value {
    let required: &[&str] = if script == Script::DEFAULT { &[] } else { &["script"] };
    json!({
        "title": script.as_str(),
        "properties": {"script": {"const": script.as_str()}, "params": script_params(script)},
        "required": required
    })
}

/// The `params` of an item run by `script` (`validate::params`): exactly
/// the parameters `params::names(script)` lists, with the validator's
/// bounds. What a schema cannot state (sums and products of several values,
/// names equal but for letter case, a cookie domain against the item's URL)
/// is said in the descriptions; `tests/shapes.rs` proves the validator
/// refuses each.
pub fn script_params(script: Script) -> Value {
    let properties: Map<String, Value> =
        params::params_of(script).map(|(name, group)| (name.to_string(), script_param(group, name))).collect();
    let mut o = object(Value::Object(properties), &[]);
    o["default"] = json!({});
    // A generated client names its type after the title.
    o["title"] = json!(params_name(script));
    if script.takes(ParamGroup::Screenshot) {
        // quality only with a lossy format; at most one screenshot region
        // (fullPage: false names none).
        o["dependentSchemas"] = json!({
            "quality": {
                "required": ["format"],
                "properties": {"format": {"enum": [ImageFormat::Jpeg.as_str(), ImageFormat::Webp.as_str()]}}
            },
            "clip": {"properties": {"fullPage": {"const": false}}, "not": {"required": ["selector"]}},
            "selector": {"properties": {"fullPage": {"const": false}}}
        });
    }
    o
}

/// One parameter's schema, as its group takes it.
fn script_param(group: ParamGroup, name: &str) -> Value {
    let int = |min: u64, max: u64| json!({"type": "integer", "minimum": min, "maximum": max});
    let number = |min: f64, max: f64| json!({"type": "number", "minimum": min, "maximum": max});
    let boolean =
        |default: bool, description: &str| json!({"type": "boolean", "default": default, "description": description});
    let selector =
        || json!({"type": "string", "maxLength": params::MAX_SELECTOR_CHARS, "pattern": params::SELECTOR_PATTERN});
    let described = |mut v: Value, description: String| {
        v["description"] = json!(description);
        v
    };
    match name {
        "timeoutMs" => {
            let (min, max, what) = match group {
                ParamGroup::Request => (
                    params::MIN_TIMEOUT_MS,
                    params::MAX_TIMEOUT_MS,
                    "Whole-request budget in ms: connect, redirects, headers and body.",
                ),
                ParamGroup::Page
                | ParamGroup::AllowedHosts
                | ParamGroup::Rendering
                | ParamGroup::Screenshot
                | ParamGroup::Pdf => (
                    params::MIN_BROWSER_TIMEOUT_MS,
                    params::MAX_BROWSER_TIMEOUT_MS,
                    "Budget in ms from navigation start until the page is ready (waitUntil, then waitFor).",
                ),
            };
            let mut v = described(int(min, max), what.into());
            v["default"] = json!(params::DEFAULT_TIMEOUT_MS);
            v
        }
        "waitUntil" => json!({
            "type": "string",
            "enum": [WaitUntil::Load.as_str(), WaitUntil::NetworkIdle.as_str()],
            "default": WaitUntil::Load.as_str(),
            "description": "load: the document's load event; networkidle: load, then 500 ms without network connections."
        }),
        "allowedHosts" => json!({
            "type": "array",
            "maxItems": params::MAX_ALLOWED_HOSTS,
            "items": {
                "type": "string",
                "anyOf": [
                    {"pattern": params::HOST_PATTERN_PATTERN, "maxLength": params::MAX_HOST_CHARS},
                    {"pattern": params::HOST_IPV6_PATTERN, "format": "ipv6-literal"}
                ],
                "description": "example.com, *.example.com (every subdomain, not example.com itself), an IPv4 address or [IPv6]; no scheme, port or path."
            },
            "description": "Hosts the page may reach besides the item URL's own; leave out for no restriction."
        }),
        "fullPage" => boolean(
            false,
            "Screenshot the whole page (viewport wide) instead of the viewport. Excludes clip and selector.",
        ),
        "format" if group == ParamGroup::Pdf => json!({
            "type": "string",
            "enum": params::paper_names(),
            "default": params::DEFAULT_PAPER,
            "description": "The paper, by its name (Puppeteer's names, letter case as listed)."
        }),
        "landscape" => boolean(false, "Print in landscape orientation."),
        "printBackground" => boolean(false, "Print background colours and images."),
        "margin" => {
            let length = json!({
                "anyOf": [
                    {"type": "number", "minimum": 0, "maximum": params::MAX_MARGIN_INCHES * 96.0},
                    {"type": "string", "pattern": params::MARGIN_PATTERN}
                ]
            });
            let mut o = object(
                Value::Object(params::MARGIN_FIELDS.iter().map(|f| (f.to_string(), length.clone())).collect()),
                &[],
            );
            o["description"] = json!(format!(
                "Paper margins: a number of CSS pixels (96 to the inch) or a length such as \"1cm\" (px, in, cm,                  mm), each at most {} in; 0 where left out. Top and bottom, left and right must leave room to print.",
                params::MAX_MARGIN_INCHES
            ));
            o
        }
        "scale" => {
            let mut v = number(params::MIN_PDF_SCALE, params::MAX_PDF_SCALE);
            v["default"] = json!(1.0);
            v["description"] = json!("Scale of the page's rendering on the paper.");
            v
        }
        "format" => json!({
            "type": "string",
            "enum": ImageFormat::ALL.map(ImageFormat::as_str),
            "default": ImageFormat::Png.as_str(),
            "description": "The screenshot's image format."
        }),
        "quality" => described(
            int(params::MIN_QUALITY, params::MAX_QUALITY),
            format!(
                "Compression quality of a jpeg or webp screenshot (default {}); refused with png.",
                params::DEFAULT_QUALITY
            ),
        ),
        "clip" => {
            let mut o = object(
                json!({
                    "x": number(0.0, params::MAX_CAPTURE_EXTENT),
                    "y": number(0.0, params::MAX_CAPTURE_EXTENT),
                    "width": number(1.0, params::MAX_CAPTURE_EXTENT),
                    "height": number(1.0, params::MAX_CAPTURE_EXTENT)
                }),
                params::CLIP_FIELDS,
            );
            o["description"] = json!(format!(
                "Screenshot this rectangle of the page, CSS pixels from the document's top left; width x height x \
                 deviceScaleFactor² at most {} image pixels. Excludes fullPage and selector.",
                params::MAX_SCREENSHOT_PIXELS
            ));
            o
        }
        "selector" => described(
            selector(),
            "Screenshot the box of the first element matching this CSS selector. Excludes fullPage and clip.".into(),
        ),
        "hideSelectors" => json!({
            "type": "array",
            "maxItems": params::MAX_HIDE_SELECTORS,
            "items": selector(),
            "default": [],
            "description": "Elements set to display: none before the screenshot (cookie banners, chat widgets)."
        }),
        "viewport" => {
            let size = || int(params::MIN_VIEWPORT_SIZE, params::MAX_VIEWPORT_SIZE);
            let mut dsf = number(params::MIN_DEVICE_SCALE_FACTOR, params::MAX_DEVICE_SCALE_FACTOR);
            dsf["default"] = json!(1.0);
            let mut o = object(
                json!({
                    "width": size(),
                    "height": size(),
                    "deviceScaleFactor": dsf,
                    "mobile": boolean(false, "Mobile emulation: the page's <meta name=viewport> is honoured.")
                }),
                &["width", "height"],
            );
            o["description"] = json!(format!(
                "The page's viewport instead of the profile's, CSS pixels; width x height x deviceScaleFactor² at \
                 most {} image pixels.",
                params::MAX_SCREENSHOT_PIXELS
            ));
            o
        }
        "waitFor" => {
            let mut o = object(
                json!({
                    "selector": described(selector(), "An element matching this CSS selector exists.".into()),
                    "networkIdleMs": described(
                        int(params::MIN_NETWORK_IDLE_MS, params::MAX_NETWORK_IDLE_MS),
                        "No request of the page in flight for this long.".into()
                    ),
                    "delayMs": described(int(params::MIN_DELAY_MS, params::MAX_DELAY_MS), "Then this long, whatever happens.".into())
                }),
                &[],
            );
            o["minProperties"] = json!(1);
            o["description"] = json!(
                "More to wait for after waitUntil, in this order, all within timeoutMs: networkIdleMs and delayMs \
                 must each be less than timeoutMs."
            );
            o
        }
        "javascriptEnabled" => boolean(true, "false: the page's scripts do not run."),
        "userAgent" => json!({
            "type": "string",
            "maxLength": params::MAX_USER_AGENT_CHARS,
            "pattern": params::NOT_BLANK_PRINTABLE_PATTERN,
            "description": "The user agent of every request and of navigator.userAgent instead of the profile's: printable ASCII."
        }),
        "headers" => {
            // Refused names, in any letter case (JSON Schema patterns have no
            // case-insensitive flag).
            let any_case = |name: &str| -> String {
                name.chars()
                    .map(|c| {
                        if c.is_ascii_alphabetic() {
                            format!("[{}{}]", c.to_ascii_lowercase(), c.to_ascii_uppercase())
                        } else {
                            c.to_string()
                        }
                    })
                    .collect()
            };
            let names: Vec<String> = params::REFUSED_HEADERS.iter().map(|n| any_case(n)).collect();
            let refused = format!("^({})$|^{}", names.join("|"), any_case(params::REFUSED_HEADER_PREFIX));
            json!({
                "type": "object",
                "maxProperties": params::MAX_HEADERS,
                "propertyNames": {
                    "pattern": params::TOKEN_PATTERN,
                    "maxLength": params::MAX_HEADER_NAME_CHARS,
                    "not": {"pattern": refused}
                },
                "additionalProperties": {
                    "type": "string",
                    "maxLength": params::MAX_HEADER_VALUE_CHARS,
                    "pattern": params::PRINTABLE_PATTERN
                },
                "default": {},
                "description": format!(
                    "Extra request headers, sent with requests to the item URL's host only. Names are \
                     case-insensitive, so no name twice in another case; names and values together at most {} \
                     bytes. Cookie and User-Agent have parameters of their own; hop-by-hop, Host, Proxy-*, \
                     Content-Length and Expect are refused.",
                    params::MAX_HEADERS_BYTES
                )
            })
        }
        "cookies" => {
            let domain_rule = params::HOST_NAME_PATTERN.trim_start_matches('^').trim_end_matches('$');
            let mut cookie = object(
                json!({
                    "name": {"type": "string", "maxLength": params::MAX_COOKIE_NAME_CHARS, "pattern": params::TOKEN_PATTERN},
                    "value": {"type": "string", "maxLength": params::MAX_COOKIE_VALUE_CHARS, "pattern": params::COOKIE_TEXT_PATTERN},
                    "domain": {
                        "type": "string",
                        "anyOf": [
                            {"pattern": format!("^{domain_rule}$"), "maxLength": params::MAX_HOST_CHARS},
                            {"pattern": format!("^\\.{domain_rule}$"), "maxLength": params::MAX_HOST_CHARS + 1}
                        ],
                        "description": "A domain cookie for this domain and its subdomains: the item URL's host or a parent domain of it. Leave out for a cookie of the item URL's host only."
                    },
                    "path": {"type": "string", "maxLength": params::MAX_COOKIE_PATH_CHARS, "pattern": params::COOKIE_PATH_PATTERN},
                    "secure": {"type": "boolean", "default": false},
                    "httpOnly": {"type": "boolean", "default": false},
                    "sameSite": {"type": "string", "enum": SameSite::ALL.map(SameSite::as_str)}
                }),
                &["name", "value"],
            );
            // Cookies a browser would drop without a word.
            let secure = json!({"properties": {"secure": {"const": true}}, "required": ["secure"]});
            cookie["allOf"] = json!([
                {"if": {"properties": {"sameSite": {"const": SameSite::None.as_str()}}, "required": ["sameSite"]}, "then": secure},
                {"if": {"properties": {"name": {"pattern": "^__Secure-"}}, "required": ["name"]}, "then": secure},
                {
                    "if": {"properties": {"name": {"pattern": "^__Host-"}}, "required": ["name"]},
                    "then": {
                        "properties": {"secure": {"const": true}, "path": {"const": "/"}},
                        "required": ["secure"],
                        "not": {"required": ["domain"]}
                    }
                }
            ]);
            json!({
                "type": "array",
                "maxItems": params::MAX_COOKIES,
                "items": cookie,
                "default": [],
                "description": format!(
                    "Cookies the item's browser context starts with; names and values together at most {} bytes.",
                    params::MAX_COOKIES_BYTES
                )
            })
        }
        "blockResourceTypes" => json!({
            "type": "array",
            "items": {"type": "string", "enum": ResourceType::ALL.map(ResourceType::as_str)},
            "uniqueItems": true,
            "default": [],
            "description": "Requests of these types fail before they leave the browser."
        }),
        // `params::PARAMS` lists only the parameters above.
        other => json!({"description": format!("{other}: not described")}),
    }
}

/// The body of POST /jobs (`wire::job::NewJob`).
pub fn new_job() -> Value {
    let strings =
        |min: usize, max: usize| json!({"type": "array", "items": no_nul_string(), "minItems": min, "maxItems": max});
    let mut args = strings(0, job::MAX_ARGS);
    args["default"] = json!([]);
    let reserved = job::RESERVED_ENV_PREFIXES
        .iter()
        .map(|prefix| json!({"pattern": format!("^{prefix}")}))
        .chain([json!({"enum": job::RESERVED_ENV_NAMES})])
        .collect::<Vec<_>>();
    object(
        json!({
            "image": {
                "type": "string",
                "minLength": 1,
                "description": "[registry/]repository[:tag][@sha256:digest] in a repository admitted on the grid's registry."
            },
            "command": strings(job::MIN_COMMAND, job::MAX_COMMAND),
            "args": args,
            "resources": job_resources(),
            "runningDeadlineSeconds": {
                "type": "integer",
                "minimum": job::MIN_RUNNING_DEADLINE_SECONDS,
                "maximum": job::MAX_RUNNING_DEADLINE_SECONDS
            },
            "retries": {"type": "integer", "minimum": job::MIN_RETRIES, "maximum": job::MAX_RETRIES, "default": 0},
            "priority": {
                "type": "integer",
                "minimum": job::MIN_PRIORITY,
                "maximum": job::MAX_PRIORITY,
                "default": 0,
                "description": "Higher runs sooner."
            },
            "capabilities": job_capabilities(),
            "env": {
                "type": "object",
                "maxProperties": job::MAX_ENV,
                "propertyNames": {"pattern": job::ENV_NAME_PATTERN, "not": {"anyOf": reserved}},
                "additionalProperties": no_nul_string()
            },
            "labels": {
                "type": "object",
                "maxProperties": job::MAX_LABELS,
                "propertyNames": {"pattern": job::LABEL_PATTERN},
                "additionalProperties": label_value()
            },
            "idempotencyKey": {
                "type": "string",
                "minLength": job::MIN_IDEMPOTENCY_KEY_CHARS,
                "maxLength": job::MAX_IDEMPOTENCY_KEY_CHARS
            }
        }),
        &["image", "command", "resources", "runningDeadlineSeconds", "capabilities", "env", "labels", "idempotencyKey"],
    )
}

fn job_resources() -> Value {
    object(
        json!({
            "cpu": quantity(Quantity::Cpu, job::MIN_CPU_MILLIS, job::MAX_CPU_MILLIS),
            "memory": quantity(Quantity::Bytes, job::MIN_MEMORY_BYTES, job::MAX_MEMORY_BYTES),
            "ephemeralStorage": quantity(
                Quantity::Bytes,
                job::MIN_EPHEMERAL_STORAGE_BYTES,
                job::MAX_EPHEMERAL_STORAGE_BYTES
            )
        }),
        &["cpu", "memory", "ephemeralStorage"],
    )
}

fn job_capabilities() -> Value {
    object(
        json!({"networkProfile": {"type": "string", "enum": NetworkProfile::ALL.map(NetworkProfile::as_str)}}),
        &["networkProfile"],
    )
}

/// The body of POST /sessions (`wire::session::NewSession`).
pub fn new_session() -> Value {
    let mut schema = object(
        json!({
            "profileId": profile_id(&Profile::LEASABLE),
            "ttlMinutes": {
                "type": "integer",
                "minimum": session::MIN_TTL_MINUTES,
                "maximum": session::MAX_TTL_MINUTES,
                "default": session::DEFAULT_TTL_MINUTES
            },
            "network": {
                "type": "string",
                "enum": [PUBLIC_WEB_ONLY_V1],
                "description": "Leave out for the grid's ordinary network access."
            },
            "viewport": session_viewport(),
            "userAgent": {
                "type": "string",
                "minLength": 1,
                "maxLength": session::MAX_USER_AGENT_CHARS,
                "pattern": session::USER_AGENT_PATTERN,
                "description": "The User-Agent header and navigator.userAgent instead of the profile's."
            },
            "locale": {
                "type": "string",
                "pattern": session::LOCALE_PATTERN,
                "description": "navigator.language, Accept-Language and Intl's default locale instead of the profile's, e.g. fr-CA."
            },
            "context": object(
                json!({
                    "id": {
                        "type": "string",
                        "pattern": session::CONTEXT_ID_PATTERN,
                        "description": "A context of the caller's (POST /contexts)."
                    },
                    "persist": {
                        "type": "boolean",
                        "default": false,
                        "description": "Save the session's cookies and storage back to the context when it ends; without it the context is read-only."
                    }
                }),
                &["id"]
            ),
            "proxy": upstream_proxy(),
            "takeOver": {
                "type": "boolean",
                "default": false,
                "description": "Whether a person at the live view (liveViewUrl) may take over the page: mouse, keyboard and scroll sent to it. Without it the view only watches."
            },
            "recording": {
                "type": "boolean",
                "default": false,
                "description": "Whether the session's pages are recorded as a screencast into a self-contained replay page (recording.html), listed with its downloads and fetched through GET /sessions/{sessionId}/recording once the session has ended. Bounded per session (docs/sessions.md)."
            },
            "timezone": {
                "type": "string",
                // The list itself, not a format: a client (or a generator
                // of test requests) knows exactly which names are taken.
                "enum": crate::time_zones::TIME_ZONES,
                "description": "The IANA time zone of Date and Intl instead of the profile's, e.g. America/Toronto (one of Chromium's Intl.supportedValuesOf('timeZone'), or UTC)."
            }
        }),
        &[],
    );
    // A mobile viewport only with a profile that takes one: the default
    // profile is a desktop browser, so such a body names its profile. Not
    // an `anyOf` at the root (model APIs refuse a tool whose input schema
    // composes at its top level).
    let mobile_profiles: Vec<&str> =
        Profile::LEASABLE.into_iter().filter(|p| *p != Profile::DesktopBrowserNl).map(Profile::as_str).collect();
    schema["dependentSchemas"] = json!({"viewport": {"anyOf": [
        {"properties": {"viewport": {"properties": {"mobile": {"const": false}}}}},
        {"required": ["profileId"], "properties": {"profileId": {"enum": mobile_profiles}}}
    ]}});
    schema
}

/// `proxy` of a lease or a batch (`wire::proxy::NewProxy`).
pub fn upstream_proxy() -> Value {
    let credential = |what: &str| {
        json!({
            "type": "string",
            "maxLength": proxy::MAX_CREDENTIAL_BYTES,
            "pattern": "^[^\\u0000-\\u001f\\u007f]*$",
            "description": format!("The proxy's {what}; sealed at rest, never logged or shown.")
        })
    };
    let mut username = credential("user name");
    username["minLength"] = json!(1);
    json!({
        "type": "object",
        "properties": {
            "server": {
                "type": "string",
                "maxLength": proxy::MAX_SERVER_CHARS,
                "pattern": proxy::SERVER_PATTERN,
                "description": "http://host:port, https://host:port or socks5://host:port, without credentials. Its address passes the grid's private-network guard."
            },
            "username": username,
            "password": credential("password")
        },
        "required": ["server"],
        "additionalProperties": false,
        "dependentSchemas": {"password": {"required": ["username"]}},
        "description": "An upstream proxy the allowed traffic goes through, after the grid's own network checks (docs/proxies.md)."
    })
}

/// A lease's `viewport` (`wire::session::NewViewport`).
fn session_viewport() -> Value {
    json!({
        "type": "object",
        "properties": {
            "width": {"type": "integer", "minimum": session::MIN_VIEWPORT_SIZE, "maximum": session::MAX_VIEWPORT_SIZE},
            "height": {"type": "integer", "minimum": session::MIN_VIEWPORT_SIZE, "maximum": session::MAX_VIEWPORT_SIZE},
            "deviceScaleFactor": {
                "type": "number",
                "minimum": session::MIN_DEVICE_SCALE_FACTOR,
                "maximum": session::MAX_DEVICE_SCALE_FACTOR,
                "default": session::DEFAULT_DEVICE_SCALE_FACTOR
            },
            "mobile": {
                "type": "boolean",
                "default": false,
                "description": format!("Mobile emulation (touch, the page's meta viewport); not with {}.", Profile::DesktopBrowserNl.as_str())
            }
        },
        "required": ["width", "height"],
        "additionalProperties": false,
        "description": format!(
            "Every page's size in CSS pixels instead of the profile's; width x height x deviceScaleFactor² at most {}.",
            session::MAX_VIEWPORT_PIXELS
        )
    })
}

/// The parameters of GET /jobs as one object (`label` holds the one
/// `label.<key>` filter as `{key: value}`); `validate::list::query_pairs`
/// turns it into the query the call reads.
pub fn job_list_query() -> Value {
    object(
        json!({
            "limit": {"type": "integer", "minimum": list::MIN_LIMIT, "maximum": list::MAX_LIMIT, "default": list::DEFAULT_LIMIT},
            "cursor": {"type": "string", "description": "nextCursor of the previous page"},
            "phase": {"type": "string", "enum": JobPhase::ALL.map(JobPhase::as_str)},
            "label": {
                "type": "object",
                "maxProperties": list::MAX_LABEL_FILTERS,
                "propertyNames": {"pattern": job::LABEL_PATTERN},
                "additionalProperties": label_value(),
                "description": "one label filter, {key: value}"
            }
        }),
        &[],
    )
}

/// GET /batches' parameters.
pub fn batch_list_query() -> Value {
    object(
        json!({
            "limit": {"type": "integer", "minimum": list::MIN_LIMIT, "maximum": list::MAX_LIMIT, "default": list::DEFAULT_LIMIT},
            "cursor": {"type": "string", "description": "nextCursor of the previous page"}
        }),
        &[],
    )
}

/// GET /account's parameters (the `get_account` tool's arguments).
pub fn account_query() -> Value {
    object(
        json!({
            "limit": {"type": "integer", "minimum": list::MIN_LIMIT, "maximum": list::MAX_LIMIT, "default": list::DEFAULT_LIMIT},
            "cursor": {"type": "string", "description": "nextCursor of the previous page"},
            "kind": {"type": "string", "enum": crate::ledger::EntryKind::ALL.map(crate::ledger::EntryKind::as_str)}
        }),
        &[],
    )
}

/// An object with exactly these properties: the validators refuse any
/// other member (the contract: "Other fields are refused").
fn object(properties: Value, required: &[&str]) -> Value {
    json!({"type": "object", "properties": properties, "required": required, "additionalProperties": false})
}

fn profile_id(among: &[Profile]) -> Value {
    let names: Vec<&str> = among.iter().map(|p| p.as_str()).collect();
    json!({"type": "string", "enum": names, "default": Profile::DEFAULT.as_str()})
}

/// A string a process can receive: no NUL character.
fn no_nul_string() -> Value {
    json!({"type": "string", "pattern": "^[^\\u0000]*$"})
}

/// A label value: empty, or what a label key may be.
fn label_value() -> Value {
    let rule = job::LABEL_PATTERN.trim_start_matches('^').trim_end_matches('$');
    json!({"type": "string", "pattern": format!("^({rule})?$")})
}

#[derive(Clone, Copy)]
enum Quantity {
    Cpu,
    Bytes,
}

/// `{request, limit}` of one resource, both within `[min, max]`.
fn quantity(kind: Quantity, min: u64, max: u64) -> Value {
    let (format, pattern, min, max) = match kind {
        Quantity::Cpu => ("cpu-quantity", CPU_QUANTITY_PATTERN, format_cpu_millis(min), format_cpu_millis(max)),
        Quantity::Bytes => ("byte-quantity", BYTE_QUANTITY_PATTERN, format_bytes(min), format_bytes(max)),
    };
    let bound = json!({"type": "string", "format": format, "pattern": pattern, "x-minimum": min, "x-maximum": max});
    let mut o = object(json!({"request": bound, "limit": bound}), &["request", "limit"]);
    o["description"] = json!(format!("Quantities from {min} to {max}; request no more than limit."));
    o
}
