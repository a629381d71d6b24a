//! The web console (docs/console.md): one page, its script and its style
//! sheet, compiled into the binary so the console works with no network
//! beyond this server. The page holds no data and needs no credential: a
//! person gives an API key in the page, which keeps it in its own memory and
//! calls the public API with it, so the console sees exactly what the API
//! lets that key see.

use hyper::header::HeaderValue;
use hyper::StatusCode;

use super::respond::{self, Resp};
use grid_core::routes::Route;

const PAGE: &str = include_str!("assets/console.html");
const SCRIPT: &str = include_str!("assets/console.js");
const STYLE: &str = include_str!("assets/console.css");

/// Only the console's own script and style run: no inline script or style,
/// no eval, nothing from another origin. Images are the grid's own signed
/// downloads and the session thumbnails the script draws (`data:`); the
/// script talks to this origin only (its API, and a session's CDP endpoint
/// over a WebSocket for the thumbnails).
pub const CONTENT_SECURITY_POLICY: &str = "default-src 'self'; script-src 'self'; style-src 'self'; \
     img-src 'self' data:; connect-src 'self'; object-src 'none'; base-uri 'none'; form-action 'none'; \
     frame-ancestors 'none'";

/// The console's page or one of its two assets.
pub fn serve(route: Route) -> Resp {
    let (content_type, body) = match route {
        Route::ConsoleScript => ("text/javascript; charset=utf-8", SCRIPT),
        Route::ConsoleStyle => ("text/css; charset=utf-8", STYLE),
        _ => ("text/html; charset=utf-8", PAGE),
    };
    let mut r = respond::bytes(StatusCode::OK, content_type, body.as_bytes().to_vec());
    let h = r.headers_mut();
    for (name, value) in [
        ("content-security-policy", CONTENT_SECURITY_POLICY),
        // The page's address carries nothing secret, but the pages it links
        // (a live view, a signed download) do: never sent on as a referrer.
        ("referrer-policy", "no-referrer"),
        // A new build's assets are picked up on the next load.
        ("cache-control", "no-cache"),
        ("x-content-type-options", "nosniff"),
        ("x-frame-options", "DENY"),
    ] {
        h.insert(name, HeaderValue::from_static(value));
    }
    r
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn the_page_names_exactly_its_two_routes_and_holds_no_inline_script_or_style() {
        // Relative to the page's own address (`/console`), as the routes are.
        for route in [Route::ConsoleScript, Route::ConsoleStyle] {
            let relative = route.template().trim_start_matches('/');
            assert!(PAGE.contains(&format!("\"{relative}\"")), "{relative} not named by the page");
        }
        assert_eq!(PAGE.matches("<script").count(), 1, "one script, its own file");
        assert!(PAGE.contains("<script src=\"console/console.js\""));
        assert!(!PAGE.contains("style=") && !PAGE.contains("<style"), "inline style");
        // No inline event handler attribute (` onclick="..."`).
        let handler = PAGE.split(" on").skip(1).find(|rest| {
            let name: String = rest.chars().take_while(char::is_ascii_lowercase).collect();
            !name.is_empty() && rest[name.len()..].starts_with('=')
        });
        assert_eq!(handler, None, "an inline event handler");
        // No eval of any kind, and no HTML parsed from data.
        for banned in ["eval(", "new Function", "innerHTML", "outerHTML", "insertAdjacentHTML", "document.write"] {
            assert!(!SCRIPT.contains(banned), "{banned} in console.js");
        }
        assert!(CONTENT_SECURITY_POLICY.contains("script-src 'self';"));
        assert!(!CONTENT_SECURITY_POLICY.contains("unsafe"));
    }
}
