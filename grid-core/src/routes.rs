//! Every HTTP route the server answers, as one list: method, path template
//! and who may call it. The server's router resolves each request through
//! `resolve` (a path no route has is 404, a method no route of the path has
//! is 405), and the OpenAPI document (`openapi.rs`) describes exactly these
//! routes, one operation each. So a route cannot be served without being
//! described, nor described without being served.
//!
//! Why this cannot drift: a route is a variant of `Route`. The router
//! (grid-server `http/mod.rs::dispatch`) and the document
//! (`openapi::describe`) each `match` on it without a catch-all arm, so a
//! new variant does not compile until both say what it does; `Route::ALL`
//! is held to the enum by an exhaustive `match` in this file's tests; and
//! the router reads a path only through `resolve` over `Route::ALL` (but
//! for the "no" paths below). tests/tests/openapi.rs checks the same from outside: every
//! documented operation is routed, every other method is 405.
//!
//! Paths a client reaches only to be told "no" (the OAuth discovery paths
//! of a grid without sign-in, answered 404 with a hint) are not routes.

/// One operation: a method on a path template.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Hash, PartialOrd, Ord)]
pub enum Route {
    Healthz,
    ProtectedResource,
    ProtectedResourceMcp,
    OpenApi,
    Account,
    GridStatus,
    QueueDepth,
    SubmitBatch,
    /// The caller's recent batches, newest first (the console's list).
    ListBatches,
    GetBatch,
    SubmitJob,
    ListJobs,
    GetJob,
    RetryJob,
    CancelJob,
    JobArtifacts,
    JobLogs,
    ArtifactUrl,
    LeaseSession,
    ListSessions,
    ReleaseSession,
    /// The files a session's pages downloaded, with signed URLs.
    SessionDownloads,
    /// A signed URL to the session's recording (docs/sessions.md, Recordings).
    SessionRecording,
    /// Persistent browser contexts (docs/sessions.md, "Contexts").
    CreateContext,
    ListContexts,
    DeleteContext,
    /// One-call captures (docs/one-call.md): the page's screenshot, PDF or
    /// rendered HTML as the answer's body.
    Screenshot,
    Pdf,
    Content,
    Mcp,
    /// A browser's CORS preflight of POST /mcp.
    McpPreflight,
    /// A capture item's published file, by the URL GET /artifacts gave.
    Download,
    /// One file of a session's downloads, by the URL its listing gave.
    SessionDownload,
    /// A session's replay page, by the URL GET /sessions/{id}/recording gave.
    RecordingFile,
    /// The `cdpUrl` itself: a WebSocket to the browser target.
    CdpSocket,
    CdpVersion,
    CdpTargets,
    CdpTargetList,
    CdpNewTarget,
    /// `/json/new` by GET, as DevTools clients older than Chrome 111 send it.
    CdpNewTargetGet,
    CdpCloseTarget,
    CdpActivateTarget,
    CdpView,
    CdpBrowserSocket,
    CdpPageSocket,
    /// Node to node (docs/scale-out.md): the node running a session's
    /// browser brings it in line with its record (starts a session another
    /// node leased for it, stops one another node ended).
    NodeSessionSync,
    /// Node to node: the node running a job's attempt brings its container
    /// in line with the record (stops one another node cancelled).
    NodeJobSync,
    /// Node to node: an MCP browser tool run by the node holding the
    /// session's browser, for a call that reached another node.
    NodeSessionTool,
    /// The web console's page (docs/console.md): HTML served from the
    /// binary; the person gives their key in the page.
    Console,
    /// The console's script and its style sheet (a strict
    /// Content-Security-Policy allows no inline script or style).
    ConsoleScript,
    ConsoleStyle,
}

/// What a route takes as its credential.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Access {
    /// None.
    Open,
    /// An API key (`x-api-key`, or as a bearer token) or a sign-in token,
    /// checked by the router before the call.
    Credential,
    /// The same credentials, checked by the MCP endpoint itself (its 401
    /// carries a challenge, and Origin and CORS come first).
    Mcp,
    /// The session's token in the path.
    SessionToken,
    /// The signature in the query string.
    SignedUrl,
    /// The credential the grid's nodes share through the store
    /// (`x-grid-node-credential`); no API key or token reaches these.
    Node,
}

impl Route {
    pub const ALL: [Route; 51] = [
        Route::Healthz,
        Route::ProtectedResource,
        Route::ProtectedResourceMcp,
        Route::OpenApi,
        Route::Account,
        Route::GridStatus,
        Route::QueueDepth,
        Route::SubmitBatch,
        Route::ListBatches,
        Route::GetBatch,
        Route::SubmitJob,
        Route::ListJobs,
        Route::GetJob,
        Route::RetryJob,
        Route::CancelJob,
        Route::JobArtifacts,
        Route::JobLogs,
        Route::ArtifactUrl,
        Route::LeaseSession,
        Route::ListSessions,
        Route::ReleaseSession,
        Route::SessionDownloads,
        Route::SessionRecording,
        Route::CreateContext,
        Route::ListContexts,
        Route::DeleteContext,
        Route::Screenshot,
        Route::Pdf,
        Route::Content,
        Route::Mcp,
        Route::McpPreflight,
        Route::Download,
        Route::SessionDownload,
        Route::RecordingFile,
        Route::CdpSocket,
        Route::CdpVersion,
        Route::CdpTargets,
        Route::CdpTargetList,
        Route::CdpNewTarget,
        Route::CdpNewTargetGet,
        Route::CdpCloseTarget,
        Route::CdpActivateTarget,
        Route::CdpView,
        Route::CdpBrowserSocket,
        Route::CdpPageSocket,
        Route::NodeSessionSync,
        Route::NodeJobSync,
        Route::NodeSessionTool,
        Route::Console,
        Route::ConsoleScript,
        Route::ConsoleStyle,
    ];

    /// The HTTP method, upper case.
    pub fn method(self) -> &'static str {
        use Route::*;
        match self {
            SubmitBatch | SubmitJob | RetryJob | CancelJob | LeaseSession | Screenshot | Pdf | Content | Mcp
            | NodeSessionSync | NodeJobSync | NodeSessionTool | CreateContext => "POST",
            ReleaseSession | DeleteContext => "DELETE",
            CdpNewTarget => "PUT",
            McpPreflight => "OPTIONS",
            Healthz | ProtectedResource | ProtectedResourceMcp | OpenApi | Account | GridStatus | QueueDepth
            | GetBatch | ListJobs | GetJob | JobArtifacts | JobLogs | ArtifactUrl | ListSessions | SessionDownloads
            | SessionRecording | ListContexts | Download | SessionDownload | RecordingFile | CdpSocket | CdpVersion
            | CdpTargets | CdpTargetList | CdpNewTargetGet | CdpCloseTarget | CdpActivateTarget | CdpView
            | CdpBrowserSocket | CdpPageSocket | ListBatches | Console | ConsoleScript | ConsoleStyle => "GET",
        }
    }

    /// The path template; `{name}` stands for one path segment.
    pub fn template(self) -> &'static str {
        use Route::*;
        match self {
            Healthz => "/healthz",
            ProtectedResource => "/.well-known/oauth-protected-resource",
            ProtectedResourceMcp => "/.well-known/oauth-protected-resource/mcp",
            OpenApi => "/openapi.json",
            Account => "/account",
            GridStatus => "/grid",
            QueueDepth => "/grid/queue-depth",
            SubmitBatch | ListBatches => "/batches",
            GetBatch => "/batches/{batchId}",
            SubmitJob | ListJobs => "/jobs",
            GetJob => "/jobs/{jobId}",
            RetryJob => "/jobs/{jobId}/retry",
            CancelJob => "/jobs/{jobId}/cancel",
            JobArtifacts => "/jobs/{jobId}/artifacts",
            JobLogs => "/jobs/{jobId}/logs",
            ArtifactUrl => "/artifacts/{jobId}/{kind}",
            LeaseSession | ListSessions => "/sessions",
            ReleaseSession => "/sessions/{sessionId}",
            SessionDownloads => "/sessions/{sessionId}/downloads",
            SessionRecording => "/sessions/{sessionId}/recording",
            CreateContext | ListContexts => "/contexts",
            DeleteContext => "/contexts/{contextId}",
            Screenshot => "/screenshot",
            Pdf => "/pdf",
            Content => "/content",
            Mcp | McpPreflight => "/mcp",
            Download => "/downloads/{jobId}/{kind}",
            // Not `/downloads/{sessionId}/{name}`: that is the same template
            // as a capture file's, which a route table (and OpenAPI) cannot
            // tell apart.
            SessionDownload => "/downloads/sessions/{sessionId}/{name}",
            RecordingFile => "/recordings/{sessionId}",
            CdpSocket => "/cdp/{sessionId}/{token}",
            CdpVersion => "/cdp/{sessionId}/{token}/json/version",
            CdpTargets => "/cdp/{sessionId}/{token}/json",
            CdpTargetList => "/cdp/{sessionId}/{token}/json/list",
            CdpNewTarget | CdpNewTargetGet => "/cdp/{sessionId}/{token}/json/new",
            CdpCloseTarget => "/cdp/{sessionId}/{token}/json/close/{targetId}",
            CdpActivateTarget => "/cdp/{sessionId}/{token}/json/activate/{targetId}",
            CdpView => "/cdp/{sessionId}/{token}/view",
            CdpBrowserSocket => "/cdp/{sessionId}/{token}/devtools/browser/{browserId}",
            CdpPageSocket => "/cdp/{sessionId}/{token}/devtools/page/{targetId}",
            NodeSessionSync => "/internal/sessions/{sessionId}/sync",
            NodeJobSync => "/internal/jobs/{jobId}/sync",
            NodeSessionTool => "/internal/sessions/{sessionId}/tool",
            Console => "/console",
            ConsoleScript => "/console/console.js",
            ConsoleStyle => "/console/console.css",
        }
    }

    pub fn access(self) -> Access {
        use Route::*;
        match self {
            // A preflight carries no credential (browsers send none).
            // The console's page and assets hold no data: the page asks the
            // API with the key the person gives it.
            Healthz | ProtectedResource | ProtectedResourceMcp | OpenApi | McpPreflight | Console | ConsoleScript
            | ConsoleStyle => Access::Open,
            Account | GridStatus | QueueDepth | SubmitBatch | ListBatches | GetBatch | SubmitJob | ListJobs
            | GetJob | RetryJob | CancelJob | JobArtifacts | JobLogs | ArtifactUrl | LeaseSession | ListSessions
            | ReleaseSession | SessionDownloads | SessionRecording | CreateContext | ListContexts | DeleteContext
            | Screenshot | Pdf | Content => Access::Credential,
            Mcp => Access::Mcp,
            Download | SessionDownload | RecordingFile => Access::SignedUrl,
            CdpSocket | CdpVersion | CdpTargets | CdpTargetList | CdpNewTarget | CdpNewTargetGet | CdpCloseTarget
            | CdpActivateTarget | CdpView | CdpBrowserSocket | CdpPageSocket => Access::SessionToken,
            NodeSessionSync | NodeJobSync | NodeSessionTool => Access::Node,
        }
    }

    /// The names of the template's parameters, in order.
    pub fn parameters(self) -> Vec<&'static str> {
        self.template().split('/').filter_map(|s| s.strip_prefix('{').and_then(|s| s.strip_suffix('}'))).collect()
    }
}

/// What the router does with a request.
#[derive(Debug, Clone, PartialEq, Eq)]
pub enum Resolved<'a> {
    /// This route, with the values of its template's parameters in order.
    Route(Route, Vec<&'a str>),
    /// The path is a route's, but not with this method: 405, with `allow`
    /// (every method the path has, sorted) and the path's routes (whose
    /// access says who may be told so; the MCP endpoint answers its own 405).
    WrongMethod {
        allow: Vec<&'static str>,
        routes: Vec<Route>,
    },
    NotFound,
}

/// The segments of a request path. Under a session's CDP endpoint empty
/// segments after the token are dropped: DevTools clients append
/// `json/version/` to a URL that may already end in `/`.
fn segments(path: &str) -> Vec<&str> {
    let all: Vec<&str> = path.trim_start_matches('/').split('/').collect();
    match all.as_slice() {
        ["cdp", _, _, ..] => {
            all.iter().take(3).copied().chain(all.iter().skip(3).copied().filter(|s| !s.is_empty())).collect()
        }
        _ => all,
    }
}

/// The values of `template`'s parameters if `segments` is one of its paths.
fn matches<'a>(template: &str, segments: &[&'a str]) -> Option<Vec<&'a str>> {
    let parts: Vec<&str> = template.trim_start_matches('/').split('/').collect();
    if parts.len() != segments.len() {
        return None;
    }
    let mut values = vec![];
    for (part, segment) in parts.iter().zip(segments) {
        if part.starts_with('{') {
            values.push(*segment);
        } else if part != segment {
            return None;
        }
    }
    Some(values)
}

/// The route a request takes. `path` is the request's path, without query.
pub fn resolve<'a>(method: &str, path: &'a str) -> Resolved<'a> {
    let segments = segments(path);
    let mut routes = vec![];
    for route in Route::ALL {
        if let Some(values) = matches(route.template(), &segments) {
            if route.method() == method {
                return Resolved::Route(route, values);
            }
            routes.push(route);
        }
    }
    if routes.is_empty() {
        return Resolved::NotFound;
    }
    let mut allow: Vec<&'static str> = routes.iter().map(|r| r.method()).collect();
    allow.sort_unstable();
    allow.dedup();
    Resolved::WrongMethod { allow, routes }
}

/// The `Allow` value of the path `template`: the methods of its routes,
/// sorted.
pub fn allow(template: &str) -> String {
    let mut methods: Vec<&str> = Route::ALL.iter().filter(|r| r.template() == template).map(|r| r.method()).collect();
    methods.sort_unstable();
    methods.dedup();
    methods.join(", ")
}

/// The template of the routes of `path`, whatever the method (the `route`
/// label of the HTTP metrics: ids and tokens never become label values).
pub fn template_of(path: &str) -> Option<&'static str> {
    let segments = segments(path);
    Route::ALL.into_iter().find(|r| matches(r.template(), &segments).is_some()).map(Route::template)
}

#[cfg(test)]
mod tests {
    use super::*;

    /// A path of `route` with each parameter filled in.
    fn example(route: Route) -> String {
        route.template().split('/').map(|s| if s.starts_with('{') { "x1" } else { s }).collect::<Vec<_>>().join("/")
    }

    #[test]
    fn all_lists_every_route_once() {
        // Exhaustive: a route added to the enum does not compile here until
        // it is counted, and then ALL must hold it.
        for route in Route::ALL {
            match route {
                Route::Healthz
                | Route::ProtectedResource
                | Route::ProtectedResourceMcp
                | Route::OpenApi
                | Route::Account
                | Route::GridStatus
                | Route::QueueDepth
                | Route::SubmitBatch
                | Route::ListBatches
                | Route::GetBatch
                | Route::SubmitJob
                | Route::ListJobs
                | Route::GetJob
                | Route::RetryJob
                | Route::CancelJob
                | Route::Screenshot
                | Route::Pdf
                | Route::Content
                | Route::JobArtifacts
                | Route::JobLogs
                | Route::ArtifactUrl
                | Route::LeaseSession
                | Route::ListSessions
                | Route::ReleaseSession
                | Route::SessionDownloads
                | Route::SessionRecording
                | Route::RecordingFile
                | Route::Mcp
                | Route::McpPreflight
                | Route::Download
                | Route::SessionDownload
                | Route::CdpSocket
                | Route::CdpVersion
                | Route::CdpTargets
                | Route::CdpTargetList
                | Route::CdpNewTarget
                | Route::CdpNewTargetGet
                | Route::CdpCloseTarget
                | Route::CdpActivateTarget
                | Route::CdpView
                | Route::CdpBrowserSocket
                | Route::CdpPageSocket
                | Route::NodeSessionSync
                | Route::NodeSessionTool
                | Route::NodeJobSync
                | Route::CreateContext
                | Route::ListContexts
                | Route::DeleteContext
                | Route::Console
                | Route::ConsoleScript
                | Route::ConsoleStyle => {}
            }
        }
        let routes: std::collections::BTreeSet<Route> = Route::ALL.into_iter().collect();
        assert_eq!(routes.len(), Route::ALL.len(), "a route is listed twice");
        let operations: std::collections::BTreeSet<(&str, &str)> =
            Route::ALL.iter().map(|r| (r.method(), r.template())).collect();
        assert_eq!(operations.len(), Route::ALL.len(), "two routes share a method and path");
    }

    #[test]
    fn every_route_resolves_to_itself() {
        for route in Route::ALL {
            let path = example(route);
            let params = route.parameters();
            match resolve(route.method(), &path) {
                Resolved::Route(found, values) => {
                    assert_eq!(found, route, "{path}");
                    assert_eq!(values.len(), params.len(), "{path}");
                }
                other => panic!("{} {path}: {other:?}", route.method()),
            }
            assert_eq!(template_of(&path), Some(route.template()));
        }
    }

    #[test]
    fn parameters_come_back_in_template_order() {
        assert_eq!(
            resolve("GET", "/artifacts/it_1/screenshot"),
            Resolved::Route(Route::ArtifactUrl, vec!["it_1", "screenshot"])
        );
        assert_eq!(Route::ArtifactUrl.parameters(), ["jobId", "kind"]);
        assert_eq!(
            resolve("GET", "/downloads/sessions/ses_1/report.csv"),
            Resolved::Route(Route::SessionDownload, vec!["ses_1", "report.csv"])
        );
        assert_eq!(resolve("GET", "/downloads/it_1/body"), Resolved::Route(Route::Download, vec!["it_1", "body"]));
        assert_eq!(
            resolve("GET", "/cdp/ses_1/tok/devtools/page/T1"),
            Resolved::Route(Route::CdpPageSocket, vec!["ses_1", "tok", "T1"])
        );
    }

    #[test]
    fn another_method_is_405_with_the_paths_methods() {
        assert_eq!(
            resolve("PUT", "/jobs"),
            Resolved::WrongMethod { allow: vec!["GET", "POST"], routes: vec![Route::SubmitJob, Route::ListJobs] }
        );
        assert_eq!(
            resolve("POST", "/healthz"),
            Resolved::WrongMethod { allow: vec!["GET"], routes: vec![Route::Healthz] }
        );
        assert_eq!(
            resolve("GET", "/mcp"),
            Resolved::WrongMethod { allow: vec!["OPTIONS", "POST"], routes: vec![Route::Mcp, Route::McpPreflight] }
        );
        assert_eq!(
            resolve("POST", "/cdp/s/t/json/new"),
            Resolved::WrongMethod {
                allow: vec!["GET", "PUT"],
                routes: vec![Route::CdpNewTarget, Route::CdpNewTargetGet]
            }
        );
    }

    #[test]
    fn allow_lists_the_methods_of_a_path() {
        assert_eq!(allow("/mcp"), "OPTIONS, POST");
        assert_eq!(allow("/jobs"), "GET, POST");
        assert_eq!(allow("/nope"), "");
    }

    #[test]
    fn unknown_paths_are_not_found() {
        for path in
            ["/", "/nope", "/grid/nope", "/artifacts/x", "/batches/x/y", "/jobs/x/y", "/cdp/s", "/cdp/s/t/json/nope"]
        {
            assert_eq!(resolve("GET", path), Resolved::NotFound, "{path}");
            assert_eq!(template_of(path), None, "{path}");
        }
    }

    #[test]
    fn cdp_paths_ignore_empty_segments_after_the_token() {
        assert_eq!(resolve("GET", "/cdp/s/t/json/version/"), Resolved::Route(Route::CdpVersion, vec!["s", "t"]));
        assert_eq!(resolve("GET", "/cdp/s/t/"), Resolved::Route(Route::CdpSocket, vec!["s", "t"]));
        assert_eq!(resolve("GET", "/cdp/s/t//json//list"), Resolved::Route(Route::CdpTargetList, vec!["s", "t"]));
    }
}
