//! Repository rules checked inside `cargo test`, as rust-analyzer's tidy
//! test does: they read the sources, need no binaries and take milliseconds.
//!
//! - grid-core is sans-IO: its sources name no clock, randomness, file
//!   system, sockets, process, environment or async runtime, and its
//!   Cargo.toml pulls none in (chrono without its `clock` feature).
//! - No `.unwrap()` / `.expect(` in the library and binary crates outside
//!   tests and `fn main`: a failure is an error value, not a panic.
//! - ARCHITECTURE.md's codemap names only modules that exist, and names
//!   every source module of the `grid-*` crates.
//! - Every path (`store/items.rs`) and Rust name (`store::jobs::owned_record`,
//!   `ApiError::row`, `StoreError`) ARCHITECTURE.md backticks, in any
//!   section, exists in the sources (`classify` says what is skipped, and why).
//! - grid-server's top-level modules form a graph with the program's top
//!   (`main`, `app`, `api`, `http`) over the subsystems: no subsystem
//!   references the top, and the subsystems' references form no cycle.
//! - No black-box test holds SQL text: stored state is read (and faults are
//!   injected) through `grid_tests::stored`, the one place that knows the
//!   store's tables (schema_parity.rs, which reads the catalogs, aside).
//! - Every black-box test file says which stores it runs on (`//! Runs on:`),
//!   scripts/test.sh's PostgreSQL pass takes its files from those lines,
//!   and a file touching the store directly runs on both.
//! - No write goes through a reader connection: the closures given to
//!   `Store::read`, `lookup` and `read_blocking`, and the functions taking
//!   a `ReadConn`, call no `execute` and hold no SQL that writes.
//! - The browser tools run in `api` only: nothing in grid-server's `http/`
//!   names the sessions' tool runner, the tools' argument reader or the
//!   call to another node's, and the MCP module (`http/mcp.rs`,
//!   `http/mcp_tools.rs`) reaches no state but through `api` (and the
//!   configuration).
//! - The black-box suite waits through `grid_tests::wait` (`wait_until`,
//!   `wait_for`, `block_until`): no deadline (`Instant::now() +`) in
//!   tests/ outside tests/src/wait.rs but the listed few that are not a
//!   wait on a condition, each with why.
//!
//! The checks work on the sources with comments and the insides of string
//! and char literals blanked out (`code_only`), so prose and doc examples
//! do not count.
//!
//! Runs on: one store, because it starts no server.

use std::collections::BTreeSet;
use std::path::{Path, PathBuf};

fn root() -> PathBuf {
    Path::new(env!("CARGO_MANIFEST_DIR")).parent().expect("tests/ is inside the workspace").to_path_buf()
}

/// The crates whose `src` must hold no panicking shortcuts and be in the codemap.
const CRATES: [&str; 4] = ["grid-core", "grid-server", "grid-client", "grid-cli"];

fn rust_files(dir: &Path) -> Vec<PathBuf> {
    let mut out = vec![];
    let mut stack = vec![dir.to_path_buf()];
    while let Some(d) = stack.pop() {
        for entry in std::fs::read_dir(&d).unwrap_or_else(|e| panic!("{}: {e}", d.display())) {
            let path = entry.unwrap().path();
            if path.is_dir() {
                stack.push(path);
            } else if path.extension().is_some_and(|e| e == "rs") {
                out.push(path);
            }
        }
    }
    out.sort();
    out
}

fn read(path: &Path) -> String {
    std::fs::read_to_string(path).unwrap_or_else(|e| panic!("{}: {e}", path.display()))
}

/// A file's code without comments and literals (`code_only`), lexed once
/// per test thread: the ARCHITECTURE.md check asks for every file of a
/// crate for each name it checks.
fn code_of(path: &Path) -> std::rc::Rc<String> {
    thread_local! {
        static LEXED: std::cell::RefCell<std::collections::HashMap<PathBuf, std::rc::Rc<String>>> =
            Default::default();
    }
    LEXED.with(|lexed| {
        lexed.borrow_mut().entry(path.to_path_buf()).or_insert_with(|| std::rc::Rc::new(code_only(&read(path)))).clone()
    })
}

fn rel(path: &Path) -> String {
    path.strip_prefix(root()).unwrap_or(path).display().to_string()
}

// ----- a small Rust lexer: enough to tell code from comments and literals -----

/// `src` with comments and the contents of string, byte-string, raw-string
/// and char literals replaced by spaces. Line breaks stay, so offsets and
/// line numbers are those of the original.
fn code_only(src: &str) -> String {
    let c: Vec<char> = src.chars().collect();
    let mut out: Vec<char> = Vec::with_capacity(c.len());
    let blank = |ch: char| if ch == '\n' { '\n' } else { ' ' };
    let ident = |ch: char| ch.is_alphanumeric() || ch == '_';
    let mut i = 0;
    while i < c.len() {
        let at = |k: usize| c.get(i + k).copied().unwrap_or('\0');
        if at(0) == '/' && at(1) == '/' {
            while i < c.len() && c[i] != '\n' {
                out.push(' ');
                i += 1;
            }
        } else if at(0) == '/' && at(1) == '*' {
            let mut depth = 0;
            while i < c.len() {
                if c[i] == '/' && c.get(i + 1) == Some(&'*') {
                    depth += 1;
                    out.extend([' ', ' ']);
                    i += 2;
                } else if c[i] == '*' && c.get(i + 1) == Some(&'/') {
                    depth -= 1;
                    out.extend([' ', ' ']);
                    i += 2;
                    if depth == 0 {
                        break;
                    }
                } else {
                    out.push(blank(c[i]));
                    i += 1;
                }
            }
        } else if (at(0) == 'r' || (at(0) == 'b' && at(1) == 'r')) && (i == 0 || !ident(c[i - 1])) && {
            let start = if at(0) == 'r' { 1 } else { 2 };
            let mut k = start;
            while at(k) == '#' {
                k += 1;
            }
            at(k) == '"'
        } {
            // r"..." / r#"..."# / br#"..."#
            while c[i] != '#' && c[i] != '"' {
                out.push(c[i]);
                i += 1;
            }
            let mut hashes = 0;
            while c[i] == '#' {
                hashes += 1;
                out.push('#');
                i += 1;
            }
            out.push('"');
            i += 1;
            while i < c.len() {
                if c[i] == '"' && (1..=hashes).all(|h| c.get(i + h) == Some(&'#')) {
                    out.push('"');
                    out.extend(std::iter::repeat_n('#', hashes));
                    i += 1 + hashes;
                    break;
                }
                out.push(blank(c[i]));
                i += 1;
            }
        } else if at(0) == '"' {
            out.push('"');
            i += 1;
            while i < c.len() {
                if c[i] == '\\' {
                    out.push(' ');
                    out.push(blank(c.get(i + 1).copied().unwrap_or(' ')));
                    i += 2;
                } else if c[i] == '"' {
                    out.push('"');
                    i += 1;
                    break;
                } else {
                    out.push(blank(c[i]));
                    i += 1;
                }
            }
        } else if at(0) == '\'' && (at(1) == '\\' || (at(1) != '\0' && at(2) == '\'')) {
            // A char literal ('x', '\n', '\u{..}'); a lifetime ('a) has no closing quote.
            out.push('\'');
            i += 1;
            while i < c.len() && c[i] != '\'' {
                if c[i] == '\\' {
                    out.push(' ');
                    i += 1;
                }
                out.push(' ');
                i += 1;
            }
            out.push('\'');
            i += 1;
        } else {
            out.push(c[i]);
            i += 1;
        }
    }
    out.into_iter().collect()
}

/// The string literals of `src` (plain, byte and raw), each as the line it
/// opens on and its text as written (escapes and line continuations left as
/// they are). Read off `code_only`, which keeps every literal's quotes and
/// blanks what is between them, char for char.
fn string_literals(src: &str) -> Vec<(usize, String)> {
    let code = code_only(src);
    let mut out = vec![];
    let mut line = 1;
    let mut open: Option<(usize, String)> = None;
    for (c, s) in code.chars().zip(src.chars()) {
        match (&mut open, c) {
            (None, '"') => open = Some((line, String::new())),
            (Some(_), '"') => out.extend(open.take()),
            (Some((_, text)), _) => text.push(s),
            (None, _) => {}
        }
        if s == '\n' {
            line += 1;
        }
    }
    out
}

/// Where the item starting at byte `from` of `code` ends: after its `;` at
/// bracket depth 0, or after the `}` that closes its body.
fn item_end(code: &str, from: usize) -> usize {
    let mut depth = 0i32;
    for (k, ch) in code[from..].char_indices() {
        match ch {
            '(' | '[' | '{' => depth += 1,
            ')' | ']' => depth -= 1,
            '}' => {
                depth -= 1;
                if depth == 0 {
                    return from + k + 1;
                }
            }
            ';' if depth == 0 => return from + k + 1,
            _ => {}
        }
    }
    code.len()
}

/// Byte ranges of `code` that are test-only (`#[cfg(test)]` items, the
/// attribute included) or the body of `fn main`.
fn exempt_ranges(code: &str) -> Vec<(usize, usize)> {
    let mut ranges = vec![];
    for (at, _) in code.match_indices("#[cfg(test)]") {
        ranges.push((at, item_end(code, at + "#[cfg(test)]".len())));
    }
    for (at, _) in code.match_indices("fn main(") {
        if at == 0 || !code[..at].ends_with(|c: char| c.is_alphanumeric() || c == '_') {
            ranges.push((at, item_end(code, at)));
        }
    }
    ranges
}

/// Files that are test modules: declared as `#[cfg(test)] mod name;` (or
/// `pub mod name;`, `pub(crate) mod name;`).
fn test_module_files(files: &[PathBuf]) -> BTreeSet<PathBuf> {
    let mut out = BTreeSet::new();
    for file in files {
        let code = code_of(file);
        for (at, _) in code.match_indices("#[cfg(test)]") {
            let item = code[at + "#[cfg(test)]".len()..item_end(code.as_str(), at + "#[cfg(test)]".len())].trim();
            let item = ["pub(crate) ", "pub(super) ", "pub "].iter().fold(item, |i, v| i.strip_prefix(v).unwrap_or(i));
            let Some(name) = item.strip_prefix("mod ").and_then(|m| m.strip_suffix(';')) else { continue };
            let name = name.trim();
            let stem = file.file_stem().and_then(|s| s.to_str()).unwrap_or("");
            let dir = if matches!(stem, "lib" | "main" | "mod") {
                file.parent().unwrap().to_path_buf()
            } else {
                file.with_extension("")
            };
            out.insert(dir.join(format!("{name}.rs")));
            out.insert(dir.join(name).join("mod.rs"));
        }
    }
    out
}

fn line_of(code: &str, at: usize) -> usize {
    code[..at].matches('\n').count() + 1
}

/// Occurrences of `word` in `code` not inside a longer identifier or path
/// segment (so `Instant` does not match `InstantLike`, `rand::` does not
/// match `brand::`).
fn word_hits(code: &str, word: &str) -> Vec<usize> {
    let ident = |c: char| c.is_alphanumeric() || c == '_';
    code.match_indices(word)
        .map(|(at, _)| at)
        .filter(|&at| {
            let before_ok = word.starts_with(|c: char| !ident(c)) || !code[..at].ends_with(ident);
            let after_ok = word.ends_with(|c: char| !ident(c)) || !code[at + word.len()..].starts_with(ident);
            before_ok && after_ok
        })
        .collect()
}

// ----- the lexer itself -----

#[test]
fn code_only_blanks_comments_and_literals_but_keeps_code_and_lines() {
    let src = "let a = \"x.unwrap()\"; // y.expect(\nlet b = r#\"}\"#; /* { */ let c = '{'; fn f<'a>(x: &'a str) {}\n";
    let code = code_only(src);
    assert_eq!(code.len(), src.len());
    assert_eq!(code.matches('\n').count(), 2);
    assert!(!code.contains("unwrap") && !code.contains("expect"), "{code}");
    assert_eq!(code.matches('{').count(), 1, "only fn f's body brace is code: {code}");
    assert!(code.contains("fn f<'a>(x: &'a str) {}"), "{code}");
    let nested = code_only("/* a /* b */ still comment */ x");
    assert_eq!(nested.trim(), "x");
}

#[test]
fn string_literals_are_read_with_the_line_they_open_on() {
    let src = "let a = \"one\"; // \"not a literal\"\nlet b = r#\"two \"quoted\"\n lines\"#; let c = '\"';\n\
               let d = b\"three\\\"\"; /* \"no\" */ let e = \"µ€\";\n";
    let found = string_literals(src);
    let texts: Vec<(usize, &str)> = found.iter().map(|(l, t)| (*l, t.as_str())).collect();
    assert_eq!(texts, [(1, "one"), (2, "two \"quoted\"\n lines"), (4, "three\\\""), (4, "µ€")]);
}

#[test]
fn word_hits_find_whole_names_only() {
    let code = code_only("let t = Instant::now(); let u = InstantLike; brand::x(); rand::random(); x.await;");
    assert_eq!(word_hits(&code, "Instant").len(), 1);
    assert_eq!(word_hits(&code, "rand::").len(), 1);
    assert_eq!(word_hits(&code, ".await").len(), 1);
}

#[test]
fn dependencies_read_inline_and_inherited_entries() {
    let manifest = "[dependencies]\nserde.workspace = true\nchrono = { workspace = true, features = [\"clock\"] }\n\n[dev-dependencies]\nrand = \"1\"\n";
    let deps = dependencies(manifest, "[dependencies]");
    assert_eq!(deps[0], ("serde".to_string(), "{ workspace = true }".to_string()));
    assert_eq!(deps[1].0, "chrono");
    assert!(deps[1].1.contains("clock"));
    assert_eq!(deps.len(), 2);
}

#[test]
fn exempt_ranges_cover_test_modules_and_main_only() {
    let code = code_only(
        "fn f() { a.unwrap() }\n#[cfg(test)]\nmod tests {\n fn g() { b.unwrap() }\n}\nfn main() { c.unwrap() }\nfn h() { d.unwrap() }\n",
    );
    let exempt = exempt_ranges(&code);
    let flagged: Vec<usize> = code
        .match_indices(".unwrap()")
        .map(|(at, _)| at)
        .filter(|at| !exempt.iter().any(|(s, e)| (s..e).contains(&at)))
        .map(|at| line_of(&code, at))
        .collect();
    assert_eq!(flagged, vec![1, 7]);
}

// ----- grid-core is sans-IO -----

/// What grid-core's sources must not name: clock reads, randomness, the
/// file system, sockets, processes, the environment, threads and async.
/// Address types (`std::net::IpAddr`) are plain values and allowed.
const CORE_FORBIDDEN: &[(&str, &str)] = &[
    ("SystemTime", "clock"),
    ("Instant", "clock"),
    ("Utc::now", "clock"),
    ("Local::now", "clock"),
    ("chrono::Local", "clock"),
    ("rand::", "randomness"),
    ("getrandom", "randomness"),
    ("ulid", "randomness"),
    ("Ulid", "randomness"),
    ("uuid", "randomness"),
    ("std::fs", "file system"),
    ("File::open", "file system"),
    ("TcpStream", "network"),
    ("TcpListener", "network"),
    ("UdpSocket", "network"),
    ("ToSocketAddrs", "network"),
    ("UnixStream", "network"),
    ("reqwest", "network"),
    ("hyper", "network"),
    ("std::process", "process"),
    ("std::env", "environment"),
    ("std::thread", "threads"),
    ("tokio", "async runtime"),
    ("async", "async"),
    (".await", "async"),
];

#[test]
fn grid_core_sources_read_no_clock_draw_no_randomness_and_do_no_io() {
    let mut found = vec![];
    let files = rust_files(&root().join("grid-core/src"));
    let test_files = test_module_files(&files);
    for file in files.iter().filter(|f| !test_files.contains(*f)) {
        let code = code_of(file);
        // Tests may read files (the contract) and clocks; the domain may not.
        let exempt = exempt_ranges(&code);
        for (word, what) in CORE_FORBIDDEN {
            for at in word_hits(&code, word) {
                if !exempt.iter().any(|(s, e)| (*s..*e).contains(&at)) {
                    found.push(format!("{}:{}: `{word}` ({what})", rel(file), line_of(&code, at)));
                }
            }
        }
    }
    assert!(found.is_empty(), "grid-core is pure (ARCHITECTURE.md):\n{}", found.join("\n"));
}

/// The `[dependencies]` entries of a Cargo.toml: name and the rest of the line.
fn dependencies(manifest: &str, section: &str) -> Vec<(String, String)> {
    let mut out = vec![];
    let mut inside = false;
    for line in manifest.lines() {
        let line = line.split('#').next().unwrap_or("").trim();
        if line.starts_with('[') {
            inside = line == section;
            continue;
        }
        if !inside || line.is_empty() {
            continue;
        }
        if let Some((name, rest)) = line.split_once('=') {
            let name = name.trim();
            // `chrono.workspace = true` inherits like `chrono = { workspace = true }`.
            match name.strip_suffix(".workspace") {
                Some(name) => out.push((name.to_string(), "{ workspace = true }".to_string())),
                None => out.push((name.to_string(), rest.trim().to_string())),
            }
        }
    }
    out
}

/// Crates that read the clock, draw randomness or do I/O; grid-core must
/// not depend on them.
const CORE_FORBIDDEN_DEPENDENCIES: &[&str] = &[
    "tokio",
    "futures",
    "futures-util",
    "async-trait",
    "rand",
    "getrandom",
    "ulid",
    "uuid",
    "reqwest",
    "hyper",
    "hyper-util",
    "tokio-tungstenite",
    "rusqlite",
    "bollard",
    "tempfile",
    "tracing",
    "ring",
    "libc",
];

#[test]
fn grid_core_depends_on_nothing_that_does_io_and_chrono_has_no_clock() {
    let manifest = read(&root().join("grid-core/Cargo.toml"));
    let deps = dependencies(&manifest, "[dependencies]");
    let bad: Vec<&String> =
        deps.iter().map(|(n, _)| n).filter(|n| CORE_FORBIDDEN_DEPENDENCIES.contains(&n.as_str())).collect();
    assert!(bad.is_empty(), "grid-core/Cargo.toml depends on {bad:?}");
    // chrono's `clock` feature is `Utc::now`; neither grid-core's entry nor
    // the workspace's (which it inherits) may turn it on.
    if let Some((_, own)) = deps.iter().find(|(n, _)| n == "chrono") {
        assert!(!own.contains("clock"), "grid-core/Cargo.toml: chrono = {own}");
        let workspace = read(&root().join("Cargo.toml"));
        let inherited = dependencies(&workspace, "[workspace.dependencies]");
        let (_, ws) = inherited.iter().find(|(n, _)| n == "chrono").expect("chrono in [workspace.dependencies]");
        let entry = if own.contains("workspace") { ws } else { own };
        assert!(entry.contains("default-features = false"), "chrono must not take its default features: {entry}");
        assert!(!entry.contains("clock"), "chrono's clock feature is on for grid-core: {entry}");
    }
}

// ----- no panicking shortcuts -----

#[test]
fn no_unwrap_or_expect_outside_tests_and_main() {
    let mut found = vec![];
    for krate in CRATES {
        let files = rust_files(&root().join(krate).join("src"));
        let test_files = test_module_files(&files);
        for file in files.iter().filter(|f| !test_files.contains(*f)) {
            let code = code_of(file);
            let exempt = exempt_ranges(&code);
            for pattern in [".unwrap()", ".expect("] {
                for (at, _) in code.match_indices(pattern) {
                    if !exempt.iter().any(|(s, e)| (*s..*e).contains(&at)) {
                        found.push(format!("{}:{}: {pattern}", rel(file), line_of(&code, at)));
                    }
                }
            }
        }
    }
    assert!(
        found.is_empty(),
        "return an error instead (or, for a poisoned lock, `unwrap_or_else(|p| p.into_inner())`):\n{}",
        found.join("\n")
    );
}

// ----- the codemap -----

/// One `### \`crate\`` section of the codemap: its name and bullets.
struct Section {
    krate: String,
    bullets: Vec<String>,
}

fn codemap() -> Vec<Section> {
    let doc = read(&root().join("ARCHITECTURE.md"));
    let start = doc.find("\n## Codemap").expect("ARCHITECTURE.md has a ## Codemap");
    let body = &doc[start + 1..];
    let end = body[3..].find("\n## ").map_or(body.len(), |e| e + 3);
    let mut sections: Vec<Section> = vec![];
    for line in body[..end].lines() {
        if let Some(name) = line.strip_prefix("### `").and_then(|l| l.strip_suffix('`')) {
            sections.push(Section { krate: name.to_string(), bullets: vec![] });
        } else if let Some(section) = sections.last_mut() {
            if let Some(bullet) = line.strip_prefix("- ") {
                section.bullets.push(bullet.to_string());
            } else if line.starts_with("  ") && !section.bullets.is_empty() {
                let last = section.bullets.last_mut().unwrap();
                last.push(' ');
                last.push_str(line.trim());
            } else if !line.trim().is_empty() {
                // Prose of the section: names in it resolve against the crate.
                section.bullets.push(line.to_string());
            }
        }
    }
    sections
}

fn backticked(text: &str) -> Vec<&str> {
    text.split('`').skip(1).step_by(2).collect()
}

/// A backticked name that denotes a source path: `x.rs`, `dir/`, or
/// `x.rs::item`; globs and other files are not paths of modules.
fn as_module_path(token: &str) -> Option<&str> {
    if token.contains('*') || token.contains(' ') {
        return None;
    }
    let path = token.split("::").next().unwrap_or(token);
    (path.ends_with(".rs") || path.ends_with('/')).then_some(path)
}

/// The files a codemap path names, tried against the bullet's directory
/// (its first name, when that is `dir/`), the crate's `src`, the crate and
/// the repo.
fn resolve(root: &Path, src: &Path, base: Option<&str>, path: &str) -> Option<PathBuf> {
    let mut candidates = vec![];
    if let Some(base) = base {
        candidates.push(src.join(base).join(path));
    }
    candidates.push(src.join(path));
    if let Some(krate) = src.parent() {
        candidates.push(krate.join(path));
    }
    candidates.push(root.join(path));
    candidates.into_iter().find(|c| if path.ends_with('/') { c.is_dir() } else { c.is_file() })
}

#[test]
fn every_codemap_path_exists_and_every_source_module_is_in_the_codemap() {
    let root = root();
    let mut missing = vec![];
    let mut named: BTreeSet<PathBuf> = BTreeSet::new();
    let sections = codemap();
    for krate in CRATES {
        assert!(sections.iter().any(|s| s.krate == krate), "ARCHITECTURE.md has no codemap section for {krate}");
    }
    for section in &sections {
        let src = root.join(&section.krate).join("src");
        for bullet in &section.bullets {
            let tokens = backticked(bullet);
            let base = tokens.first().copied().filter(|t| t.ends_with('/') && !t.contains(' '));
            for token in tokens {
                if let Some(path) = as_module_path(token) {
                    match resolve(&root, &src, base, path) {
                        Some(found) if path.ends_with('/') => {
                            named.insert(found.join("mod.rs"));
                        }
                        Some(found) => {
                            named.insert(found);
                        }
                        None => missing.push(format!("`{token}` (### `{}`)", section.krate)),
                    }
                }
            }
        }
    }
    assert!(missing.is_empty(), "ARCHITECTURE.md's codemap names what does not exist:\n{}", missing.join("\n"));
    let mut unnamed = vec![];
    for krate in CRATES {
        let files = rust_files(&root.join(krate).join("src"));
        let test_files = test_module_files(&files);
        for file in &files {
            let crate_root =
                file.parent() == Some(&root.join(krate).join("src")) && file.file_name().is_some_and(|n| n == "lib.rs");
            if !crate_root && !test_files.contains(file) && !named.contains(file) {
                unnamed.push(rel(file));
            }
        }
    }
    assert!(unnamed.is_empty(), "source modules missing from ARCHITECTURE.md's codemap:\n{}", unnamed.join("\n"));
}

/// The transports (`http/`) sit on top: no subsystem or the transport-neutral
/// API layer reaches into them, so a subsystem never depends on how a call
/// arrived (issue 9: the import cycle through `http::App`). hyper is the
/// transport's HTTP library; outbound clients (the fetch script's
/// hyper-util client, reqwest) and the `http` crate's types are not the
/// transport.
#[test]
fn no_subsystem_imports_the_http_transport() {
    let src = root().join("grid-server/src");
    let mut offenders = vec![];
    for dir in ["api", "capture", "compute", "sessions", "store", "browser"] {
        for file in rust_files(&src.join(dir)) {
            let code = code_of(&file);
            for needle in ["crate::http", "hyper::", "use hyper;"] {
                for at in code.match_indices(needle).map(|(i, _)| i) {
                    offenders.push(format!("{}:{}: {needle}", rel(&file), line_of(&code, at)));
                }
            }
        }
    }
    assert!(offenders.is_empty(), "subsystems importing the HTTP transport:\n{}", offenders.join("\n"));
}

// ----- every path and symbol ARCHITECTURE.md names exists -----

/// One backticked token of ARCHITECTURE.md and where it stands: its line,
/// the codemap section's crate (none outside the codemap) and the bullet's
/// directory (its first name, when that is `dir/`).
#[derive(Debug, PartialEq)]
struct Mention<'a> {
    line: usize,
    token: &'a str,
    krate: Option<&'a str>,
    base: Option<&'a str>,
}

/// Every backticked token of `doc` outside fenced blocks, in order.
fn mentions(doc: &str) -> Vec<Mention<'_>> {
    let mut out = vec![];
    let (mut fenced, mut in_codemap) = (false, false);
    let (mut krate, mut base): (Option<&str>, Option<&str>) = (None, None);
    for (i, line) in doc.lines().enumerate() {
        if line.starts_with("```") {
            fenced = !fenced;
            continue;
        }
        if fenced {
            continue;
        }
        if let Some(heading) = line.strip_prefix("## ") {
            in_codemap = heading.trim() == "Codemap";
            krate = None;
            base = None;
        } else if let Some(name) = line.strip_prefix("### `").and_then(|l| l.strip_suffix('`')) {
            krate = in_codemap.then_some(name);
            base = None;
            continue;
        } else if let Some(bullet) = line.strip_prefix("- ") {
            base = backticked(bullet).first().copied().filter(|t| t.ends_with('/') && !t.contains(' '));
        } else if !line.starts_with("  ") {
            // Prose: names resolve against the crate (or the repo), not a bullet's directory.
            base = None;
        }
        for token in backticked(line) {
            out.push(Mention { line: i + 1, token, krate, base });
        }
    }
    out
}

/// What a backticked token is taken for.
#[derive(Debug, PartialEq)]
enum Named<'a> {
    /// A file or directory of the repository (`store/items.rs`, `docs/`,
    /// `grid-server/src/http`, a glob `schema*.sql` some file matches),
    /// with the item it names in that file, if any (`respond.rs::error`).
    Path(&'a str, Option<&'a str>),
    /// A Rust path: `store::jobs::owned_record`, `grid_core::item::apply`,
    /// `ApiError::row`.
    Symbol(&'a str),
    /// A trait implemented for a type, as rustdoc writes it: `From<JobError>`.
    Impl(&'a str),
    /// Not a name in the sources, for the reason given.
    Skipped(&'static str),
}

/// Names that look like paths or types of the repository but are not.
const NOT_REPOSITORY_NAMES: &[(&str, &str)] =
    &[("public-web-only/v1", "an egress policy's name"), ("Ok", "std's `Result::Ok`"), ("Allow", "an HTTP header")];

/// The extensions of the repository's own files: a dotted name without a
/// `/` is a path only with one of them (`grid.db`, `ca.pem` are files the
/// server writes at run time; `Target.sendMessageToTarget` is a CDP method).
const SOURCE_EXTENSIONS: &[&str] = &[".rs", ".sql", ".html", ".md", ".toml"];

fn is_ident(s: &str) -> bool {
    s.starts_with(|c: char| c.is_alphabetic() || c == '_') && s.chars().all(|c| c.is_alphanumeric() || c == '_')
}

fn classify(token: &str) -> Named<'_> {
    if let Some((_, why)) = NOT_REPOSITORY_NAMES.iter().find(|(t, _)| *t == token) {
        return Named::Skipped(why);
    }
    // Several words: an HTTP route (`POST /batches`), SQL (`PRAGMA
    // user_version`), a command line (`--output yaml`), a signature or a
    // formula (`apply(item, event, now, backoff) -> Outcome`).
    if token.is_empty() || token.contains(char::is_whitespace) {
        return Named::Skipped("not one name: an HTTP route, SQL, a command line, a signature or a formula");
    }
    if token.starts_with('-') {
        return Named::Skipped("a command-line flag");
    }
    // `/tmp`, `/proc/PID/root`, `/jobs/{id}`.
    if token.starts_with('/') {
        return Named::Skipped("an absolute path: of the host or of the API, not of the repository");
    }
    // `GRID_CA_CERT`, `COMPUTE_UNAVAILABLE`, `DATA_DIR/tls`.
    let head = token.split('/').next().unwrap_or(token);
    if head.len() > 1 && head.chars().all(|c| c.is_ascii_uppercase() || c.is_ascii_digit() || c == '_') {
        return Named::Skipped("an environment variable (or a path under one) or an error code");
    }
    let source_file = |p: &str| p.contains('/') || SOURCE_EXTENSIONS.iter().any(|e| p.ends_with(e));
    if let Some((path, item)) = token.split_once("::") {
        if source_file(path) {
            return Named::Path(path, Some(item));
        }
        // Anything else with `::` is checked as a Rust path, so one that is
        // malformed fails rather than passes unseen.
        return Named::Symbol(token);
    }
    if source_file(token) {
        return Named::Path(token, None);
    }
    if let Some((name, rest)) = token.split_once('<') {
        if is_ident(name) && rest.ends_with('>') {
            return Named::Impl(token);
        }
    }
    if token.contains('*') {
        return Named::Skipped("a pattern of test names (`sdk_*`)");
    }
    if token.contains('.') {
        return Named::Skipped("a dotted name that is no source file: a data file the server writes or a CDP method");
    }
    // `Call`, `StoreError`, `StopBrowser`: a lone CamelCase name is a type,
    // trait or enum variant of the sources.
    if is_ident(token) && token.starts_with(|c: char| c.is_ascii_uppercase()) && token.contains(char::is_lowercase) {
        return Named::Symbol(token);
    }
    // `perform`, `account_id`, `allowedHosts`, `Idempotency-Key`,
    // `grid-server`: a lone lower-case name could be a function, a column,
    // a field of the wire, a header, a crate, a script or a state; telling
    // which needs more than a textual rule, so it is not checked.
    Named::Skipped("a single lower-case name, not qualified by a path")
}

/// The definitions of `name` in `code`: a function, type, trait, constant,
/// static, type alias, module or macro of that name.
fn defines(code: &str, name: &str) -> bool {
    ["fn", "struct", "enum", "trait", "const", "static", "type", "mod", "union", "macro_rules!"]
        .iter()
        .any(|kw| !word_hits(code, &format!("{kw} {name}")).is_empty())
}

fn defines_type(code: &str, name: &str) -> bool {
    ["struct", "enum", "trait", "type", "union"].iter().any(|kw| !word_hits(code, &format!("{kw} {name}")).is_empty())
}

/// `name` is a variant of some enum in `code`.
fn defines_variant(code: &str, name: &str) -> bool {
    word_hits(code, "enum").into_iter().any(|at| !word_hits(&code[at..item_end(code, at)], name).is_empty())
}

/// `ty::member` exists in `code`: a variant of `enum ty` or a field of
/// `struct ty` (as rustdoc links them), or an associated fn, const or type
/// in an `impl` block whose self type is `ty` (`impl ty`, `impl<T> ty<T>`,
/// `impl Trait for ty`).
fn has_member(code: &str, ty: &str, member: &str) -> bool {
    for kw in ["enum", "struct", "union"] {
        for at in word_hits(code, &format!("{kw} {ty}")) {
            let body = &code[at + kw.len() + 1 + ty.len()..item_end(code, at)];
            if !word_hits(body, member).is_empty() {
                return true;
            }
        }
    }
    for at in word_hits(code, "impl") {
        // An `impl` item starts its line; `impl Trait` in argument position does not.
        let line_start = code[..at].rfind('\n').map_or(0, |n| n + 1);
        let before = code[line_start..at].trim();
        if !(before.is_empty() || before == "unsafe") {
            continue;
        }
        let end = item_end(code, at);
        let Some(open) = code[at..end].find('{') else { continue };
        let header = &code[at..at + open];
        let self_ty = header.rsplit(" for ").next().unwrap_or(header);
        if word_hits(self_ty, ty).is_empty() {
            continue;
        }
        let body = &code[at + open..end];
        if ["fn", "const", "type"].iter().any(|kw| !word_hits(body, &format!("{kw} {member}")).is_empty()) {
            return true;
        }
    }
    false
}

/// The file of a module: `dir/name.rs` or `dir/name/mod.rs`.
fn module_file(dir: &Path, name: &str) -> Option<PathBuf> {
    [dir.join(format!("{name}.rs")), dir.join(name).join("mod.rs")].into_iter().find(|f| f.is_file())
}

fn crate_root_file(src: &Path) -> PathBuf {
    let lib = src.join("lib.rs");
    if lib.is_file() {
        lib
    } else {
        src.join("main.rs")
    }
}

/// Where a mention's names resolve: its codemap section's crate, or
/// outside the codemap grid-server (the shell the Invariants are about);
/// then grid-core, whose types every crate uses (`Access::Node`).
fn crate_srcs(root: &Path, krate: Option<&str>) -> Vec<PathBuf> {
    let first = krate.map(|k| root.join(k).join("src")).filter(|s| s.is_dir());
    let mut srcs = vec![first.unwrap_or_else(|| root.join("grid-server/src"))];
    if !srcs[0].ends_with("grid-core/src") {
        srcs.push(root.join("grid-core/src"));
    }
    srcs
}

/// A symbol path: a crate (`grid_core::`, `grid_client::`, `crate::`) or
/// else the mention's crates, then modules as long as a module file
/// exists, then one item defined in the last module's file, or `Type::member`;
/// a path that starts with a type (`ApiError::row`) finds the type's crate.
fn check_symbol(root: &Path, krate: Option<&str>, token: &str) -> Result<(), String> {
    let segments: Vec<&str> = token.split("::").collect();
    if !segments.iter().all(|s| is_ident(s)) {
        return Err("not a Rust path of plain names".into());
    }
    let (srcs, rest) = match segments[0] {
        k if k.starts_with("grid_") => (vec![root.join(k.replace('_', "-")).join("src")], &segments[1..]),
        "crate" => (crate_srcs(root, krate).into_iter().take(1).collect(), &segments[1..]),
        _ => (crate_srcs(root, krate), &segments[..]),
    };
    let srcs: Vec<PathBuf> = srcs.into_iter().filter(|s| s.is_dir()).collect();
    if srcs.is_empty() {
        return Err("no such crate".into());
    }
    let Some(first) = rest.first() else { return Ok(()) };
    if first.starts_with(char::is_uppercase) {
        // `Type` or `Type::member`, anywhere in the crates that define the type.
        let crates: Vec<Vec<std::rc::Rc<String>>> =
            srcs.iter().map(|src| rust_files(src).iter().map(|f| code_of(f)).collect()).collect();
        let defining: Vec<usize> =
            (0..srcs.len()).filter(|&k| crates[k].iter().any(|code| defines_type(code, first))).collect();
        // A lone name may also be an enum's variant (`StopBrowser`).
        if let [name] = rest {
            if defining.is_empty() && crates.iter().flatten().any(|code| defines_variant(code, name)) {
                return Ok(());
            }
        }
        let names = |ks: &[usize]| ks.iter().map(|&k| rel(&srcs[k])).collect::<Vec<_>>().join(", ");
        if defining.is_empty() {
            return Err(format!("no type `{first}` in {}", names(&(0..srcs.len()).collect::<Vec<_>>())));
        }
        return match rest {
            [_] => Ok(()),
            [ty, member] if defining.iter().any(|&k| crates[k].iter().any(|code| has_member(code, ty, member))) => {
                Ok(())
            }
            [ty, member] => {
                Err(format!("`{ty}` in {} has no variant, field or associated item `{member}`", names(&defining)))
            }
            _ => Err("more segments than `Type::member`".into()),
        };
    }
    // Modules: the first crate in which the first segment is a module.
    let src = srcs.iter().find(|src| module_file(src, first).is_some()).unwrap_or(&srcs[0]);
    let (mut file, mut dir, mut i) = (crate_root_file(src), src.clone(), 0);
    while let Some(found) = rest.get(i).and_then(|seg| module_file(&dir, seg)) {
        dir = dir.join(rest[i]);
        file = found;
        i += 1;
    }
    let code = code_of(&file);
    match &rest[i..] {
        [] => Ok(()),
        [item] if defines(&code, item) => Ok(()),
        [ty, member] if defines_type(&code, ty) && has_member(&code, ty, member) => Ok(()),
        [ty, member] => Err(format!("{} defines no `{ty}` with a member `{member}`", rel(&file))),
        [item] => Err(format!("{} defines no `{item}`", rel(&file))),
        more => Err(format!("{} has no module `{}`", rel(&file), more[0])),
    }
}

/// A path of the repository, tried as the codemap check does (bullet
/// directory, crate `src`, crate, repo root; outside the codemap against
/// grid-server). A glob must match some file; `file.rs::item` must define
/// `item`.
fn check_path(
    root: &Path,
    krate: Option<&str>,
    base: Option<&str>,
    path: &str,
    item: Option<&str>,
) -> Result<(), String> {
    let src = crate_srcs(root, krate).remove(0);
    if let Some((dir, pattern)) = path.contains('*').then(|| path.rsplit_once('/').unwrap_or(("", path))) {
        let (prefix, suffix) = pattern.split_once('*').unwrap_or((pattern, ""));
        let dir = if dir.is_empty() { String::new() } else { format!("{dir}/") };
        let candidates = [
            base.map(|b| src.join(b).join(&dir)),
            Some(src.join(&dir)),
            src.parent().map(|k| k.join(&dir)),
            Some(root.join(&dir)),
        ];
        let matches = candidates.into_iter().flatten().filter(|d| d.is_dir()).any(|d| {
            std::fs::read_dir(&d).into_iter().flatten().flatten().any(|e| {
                let name = e.file_name().to_string_lossy().to_string();
                name.len() >= prefix.len() + suffix.len() && name.starts_with(prefix) && name.ends_with(suffix)
            })
        });
        return if matches { Ok(()) } else { Err("no file matches".into()) };
    }
    // `grid-server/src/http` names a directory without the trailing `/`.
    let dir = (!path.ends_with('/')).then(|| format!("{path}/"));
    let found = resolve(root, &src, base, path).or_else(|| dir.and_then(|d| resolve(root, &src, base, &d)));
    let Some(found) = found else {
        return Err(format!("no such file or directory (tried against {})", rel(&src)));
    };
    match item {
        Some(item) if !defines(&code_of(&found), item) => Err(format!("{} defines no `{item}`", rel(&found))),
        _ => Ok(()),
    }
}

/// A trait implementation `Trait<Args>`: some file of the mention's crates
/// has `impl Trait<Args> for`.
fn check_impl(root: &Path, krate: Option<&str>, token: &str) -> Result<(), String> {
    let needle = format!("impl {token} for");
    let found = crate_srcs(root, krate)
        .iter()
        .filter(|s| s.is_dir())
        .any(|src| rust_files(src).iter().any(|f| code_of(f).contains(&needle)));
    if found {
        Ok(())
    } else {
        Err(format!("no `{needle}`"))
    }
}

#[test]
fn every_path_and_symbol_architecture_md_names_exists() {
    let root = root();
    let doc = read(&root.join("ARCHITECTURE.md"));
    let mut wrong = vec![];
    for m in mentions(&doc) {
        let result = match classify(m.token) {
            Named::Path(path, item) => check_path(&root, m.krate, m.base, path, item),
            Named::Symbol(symbol) => check_symbol(&root, m.krate, symbol),
            Named::Impl(token) => check_impl(&root, m.krate, token),
            Named::Skipped(_) => Ok(()),
        };
        if let Err(why) = result {
            wrong.push(format!("ARCHITECTURE.md:{}: `{}`: {why}", m.line, m.token));
        }
    }
    assert!(wrong.is_empty(), "ARCHITECTURE.md names what does not exist:\n{}", wrong.join("\n"));
}

#[test]
fn mentions_are_told_apart_into_paths_symbols_and_skipped_names() {
    let doc = "intro `http/auth.rs` and `grid_core::validate`\n\
               ```\n`not/a/mention.rs`\n```\n\
               ## Codemap\n\
               ### `grid-server`\n\
               - `store/`: `items.rs` (`Store`), `--max-workers`, `POST /batches`, `grid.db`,\n  \
                 `schema*.sql`, `respond.rs::error`\n\
               ## Invariants\n\
               - `store::jobs::owned_record`, `ApiError::row`, `From<JobError>`, `DATA_DIR/tls`, `/tmp`,\n  \
                 `public-web-only/v1`, `sdk_*`, `Target.sendMessageToTarget`, `a::<T>::b`\n";
    let found = mentions(doc);
    let at = |token: &str| found.iter().find(|m| m.token == token).unwrap_or_else(|| panic!("no mention of {token}"));
    assert!(found.iter().all(|m| m.token != "not/a/mention.rs"), "fenced blocks are skipped");
    assert_eq!(*at("http/auth.rs"), Mention { line: 1, token: "http/auth.rs", krate: None, base: None });
    assert_eq!(
        *at("items.rs"),
        Mention { line: 7, token: "items.rs", krate: Some("grid-server"), base: Some("store/") }
    );
    assert_eq!(at("schema*.sql").base, Some("store/"), "a continuation line keeps its bullet's directory");
    assert_eq!((at("store::jobs::owned_record").line, at("store::jobs::owned_record").krate), (10, None));

    for path in ["http/auth.rs", "store/", "items.rs", "schema*.sql", "public-web-only/v1"] {
        let expected = if path.starts_with("public") {
            Named::Skipped("an egress policy's name")
        } else {
            Named::Path(path, None)
        };
        assert_eq!(classify(path), expected, "{path}");
    }
    assert_eq!(classify("respond.rs::error"), Named::Path("respond.rs", Some("error")));
    for symbol in ["grid_core::validate", "store::jobs::owned_record", "ApiError::row", "a::<T>::b"] {
        assert_eq!(classify(symbol), Named::Symbol(symbol));
    }
    assert_eq!(classify("From<JobError>"), Named::Impl("From<JobError>"));
    assert_eq!(classify("Store"), Named::Symbol("Store"));
    for skipped in [
        "Ok",
        "perform",
        "allowedHosts",
        "--max-workers",
        "POST /batches",
        "grid.db",
        "DATA_DIR/tls",
        "/tmp",
        "sdk_*",
        "Target.sendMessageToTarget",
    ] {
        assert!(matches!(classify(skipped), Named::Skipped(_)), "{skipped}: {:?}", classify(skipped));
    }
    assert!(check_symbol(&root(), None, "a::<T>::b").is_err(), "a malformed Rust path fails, not passes");
    for (symbol, exists) in [
        ("grid_core::item::apply", true),
        ("grid_core::item::no_such_fn", false),
        ("store::jobs::owned_record", true),
        ("store::no_such_module::owned_record", false),
        ("ApiError::row", true),
        ("ApiError::no_such_member", false),
        ("NoSuchType", false),
    ] {
        assert_eq!(
            check_symbol(&root(), None, symbol).is_ok(),
            exists,
            "{symbol}: {:?}",
            check_symbol(&root(), None, symbol)
        );
    }
}

// ----- effect executors are exhaustive -----

/// The `_ =>` arms and the do-nothing arms (`=> {}`, `=> ()`) inside
/// functions named `execute*` in `code` (already `code_only`): each as the
/// function's name and the arm's byte offset. An executor of a machine's
/// effects names every effect, so a new one does not compile until it is
/// executed; and it executes every effect it names (one that belongs to
/// the other half of the step goes in the other half's enum, not in a
/// do-nothing arm here).
fn wildcard_arms_in_executors(code: &str) -> Vec<(String, usize)> {
    let ident = |c: char| c.is_alphanumeric() || c == '_';
    let mut found = vec![];
    for at in word_hits(code, "fn") {
        let after = code[at + 2..].trim_start();
        let name: String = after.chars().take_while(|&c| ident(c)).collect();
        if !name.starts_with("execute") {
            continue;
        }
        let end = item_end(code, at);
        for (k, _) in code[at..end].match_indices("_ =>") {
            if !code[..at + k].ends_with(ident) {
                found.push((name.clone(), at + k));
            }
        }
        for (k, _) in code[at..end].match_indices("=>") {
            let rest = code[at + k + 2..end].trim_start();
            let empty_block = rest.strip_prefix('{').is_some_and(|r| r.trim_start().starts_with('}'));
            if empty_block || rest.starts_with("()") {
                found.push((name.clone(), at + k));
            }
        }
    }
    found
}

#[test]
fn wildcard_arms_are_found_in_executors_only() {
    let code = code_only(
        "fn execute_in_tx(e: &E) { match e { E::A => {} _ => {} } }\n\
         fn execute(e: &E) -> BoxFuture<'_, ()> { match e { E::A | _ => {} } }\n\
         fn executor_of(x: Option<u8>) { match x { Some(_) => {}, None => {} } }\n\
         fn other(x: u8) { match x { 1 => {} _ => {} } }\n\
         fn execute_after_commit(e: &E) { match e { E::A => {} // _ => {}\n } }\n\
         fn execute_named(e: &E) { match e { E::A => go(), my_ => stop() } }\n\
         fn execute_jobs(e: &E) { match e { E::Start => start(), E::Reserve { .. } | E::Settle { .. } => {} } }\n\
         fn execute_unit(e: &E) { match e { E::Stop => stop(), E::Settle => () } }\n",
    );
    let mut names: Vec<String> = wildcard_arms_in_executors(&code).into_iter().map(|(name, _)| name).collect();
    names.dedup();
    // The first two also hold do-nothing arms (`E::A => {}`).
    assert_eq!(names, ["execute_in_tx", "execute", "execute_after_commit", "execute_jobs", "execute_unit"]);
}

#[test]
fn effect_executors_in_drivers_have_no_wildcard_arm() {
    let src = root().join("grid-server").join("src");
    // A driver is `<area>/driver.rs` or a directory `<area>/driver/`, every
    // file of which is read.
    let mut drivers: Vec<PathBuf> = std::fs::read_dir(&src)
        .unwrap_or_else(|e| panic!("{}: {e}", src.display()))
        .flat_map(|entry| {
            let area = entry.unwrap().path();
            let (file, dir) = (area.join("driver.rs"), area.join("driver"));
            if file.is_file() {
                vec![file]
            } else if dir.is_dir() {
                rust_files(&dir)
            } else {
                vec![]
            }
        })
        .collect();
    drivers.sort();
    let areas = drivers.iter().filter(|p| p.ends_with("driver.rs") || p.ends_with("driver/mod.rs")).count();
    assert!(areas >= 3, "the machines' drivers are not where this rule looks: {drivers:?}");
    let mut found = vec![];
    for file in &drivers {
        let code = code_of(file);
        for (name, at) in wildcard_arms_in_executors(&code) {
            found.push(format!("{}:{}: a `_` or do-nothing arm in `{name}`", rel(file), line_of(&code, at)));
        }
    }
    assert!(
        found.is_empty(),
        "an effect executor names every effect (a new one must not compile unhandled):\n{}",
        found.join("\n")
    );
}

// ----- api/ calls drivers and reads, never a store writer -----

/// What opens a write transaction on the store (`Store::write`,
/// `Store::write_blocking`) or performs a submission under an
/// Idempotency-Key (`idempotency::once`, which writes): every write of a
/// machine's row is its driver's, creation included.
const STORE_WRITERS: &[&str] = &[".write(", ".write_blocking(", "idempotency::once(", "once("];

fn store_writes_in(code: &str) -> Vec<(usize, &'static str)> {
    let mut found = vec![];
    for writer in STORE_WRITERS {
        for (at, _) in code.match_indices(writer) {
            let before = code[..at].chars().next_back();
            // `once(` as a whole name only (not `call_once(`).
            if *writer == "once(" && before.is_some_and(|c| c.is_alphanumeric() || c == '_' || c == ':') {
                continue;
            }
            found.push((line_of(code, at), *writer));
        }
    }
    found.sort();
    found
}

#[test]
fn store_writes_are_found_as_calls_only() {
    let code = code_only(
        "let x = app.store.write(move |tx| go(tx));\n\
         app.store.read(|c| load(c));\n\
         idempotency::once(tx, a, k, now, f);\n\
         once(tx, a, k, now, f);\n\
         std::sync::Once::call_once(f); // .write(\n\
         let s = \".write(\";\n",
    );
    assert_eq!(store_writes_in(&code), [(1, ".write("), (3, "idempotency::once("), (4, "once(")]);
}

#[test]
fn api_calls_drivers_and_reads_but_no_store_writer() {
    let api = root().join("grid-server").join("src").join("api");
    let files = rust_files(&api);
    assert!(files.len() >= 4, "the API's calls are not where this rule looks: {files:?}");
    let mut found = vec![];
    for file in &files {
        let code = code_of(file);
        for (line, writer) in store_writes_in(&code) {
            found.push(format!("{}:{line}: `{writer}`", rel(file)));
        }
    }
    assert!(
        found.is_empty(),
        "api/ writes only through the machines' drivers (creation is their first step), and reads:\n{}",
        found.join("\n")
    );
}

// ----- reads do not write -----

/// What opens a read on the store: the closures these take get a reader
/// connection (`store::ReadConn`), read-only at the database too.
const STORE_READERS: [&str; 3] = [".read(", ".lookup(", ".read_blocking("];

/// What writes through a connection: its calls, and SQL that changes rows
/// or the schema, or locks rows (`FOR UPDATE`, which PostgreSQL's read-only
/// transactions refuse).
const WRITE_CALLS: [&str; 6] =
    [".execute(", ".execute_values(", ".send_all(", "set_setting(", "setting_or_init(", ".lock_rows("];
const WRITE_SQL: [&str; 7] = ["INSERT", "UPDATE", "DELETE", "CREATE", "ALTER", "DROP", "REPLACE"];

/// Where the byte range `from..` of `code` opening with `(` closes.
fn closing_paren(code: &str, open: usize) -> usize {
    let mut depth = 0i32;
    for (k, ch) in code[open..].char_indices() {
        match ch {
            '(' | '[' | '{' => depth += 1,
            ')' | ']' | '}' => {
                depth -= 1;
                if depth == 0 {
                    return open + k + 1;
                }
            }
            _ => {}
        }
    }
    code.len()
}

/// The spans of `code` a reader connection reaches: the arguments of each
/// `STORE_READERS` call, and the signature and body of each function with
/// a `ReadConn` parameter. As byte ranges of `code`, which `code_only`
/// keeps char for char (so they are taken of the source by chars).
fn reader_spans(code: &str) -> Vec<(usize, usize)> {
    let mut spans = vec![];
    for reader in STORE_READERS {
        for (at, _) in code.match_indices(reader) {
            let open = at + reader.len() - 1;
            spans.push((open, closing_paren(code, open)));
        }
    }
    for at in word_hits(code, "fn") {
        let Some(body) = code[at..].find(['{', ';']).map(|k| at + k) else { continue };
        if takes_reader(&code[at..body]) && code[body..].starts_with('{') {
            spans.push((at, item_end(code, at)));
        }
    }
    spans.sort();
    spans
}

/// Whether a function's signature has a parameter of type `&ReadConn`
/// (not a closure's, as `f: impl FnOnce(&ReadConn)` is).
fn takes_reader(signature: &str) -> bool {
    signature.match_indices("ReadConn").any(|(at, _)| {
        signature[..at].trim_end_matches(|c: char| c.is_alphanumeric() || c == '_' || c == ':').ends_with(": &")
    })
}

/// Writes (`WRITE_CALLS` in code, `WRITE_SQL` as whole uppercase words in
/// string literals) inside the reader spans of `src`, as (line, what).
fn writes_through_readers(src: &str) -> Vec<(usize, String)> {
    let code = code_only(src);
    let (chars, code_chars): (Vec<char>, Vec<char>) = (src.chars().collect(), code.chars().collect());
    let to_char = |byte: usize| code[..byte].chars().count();
    let mut found = vec![];
    for (from, to) in reader_spans(&code) {
        let span_code: String = code_chars[to_char(from)..to_char(to)].iter().collect();
        let span_src: String = chars[to_char(from)..to_char(to)].iter().collect();
        let line = line_of(&code, from);
        for call in WRITE_CALLS {
            for (k, _) in span_code.match_indices(call) {
                found.push((line + span_code[..k].matches('\n').count(), format!("`{call}`")));
            }
        }
        for (l, text) in string_literals(&span_src) {
            for keyword in WRITE_SQL {
                for at in word_hits(&text, keyword) {
                    let after = text[at + keyword.len()..].chars().next();
                    if after.is_none_or(char::is_whitespace) {
                        found.push((line + l - 1 + text[..at].matches('\n').count(), format!("SQL `{keyword}`")));
                    }
                }
            }
        }
    }
    found.sort();
    found.dedup();
    found
}

#[test]
fn writes_through_readers_are_found_in_read_closures_and_reader_functions_only() {
    let src = "fn a(c: &ReadConn) -> R {\n    c.query_row(\"SELECT 1 FROM t FOR UPDATE\", (), f)\n}\n\
               fn b(tx: &Conn) { tx.execute(\"DELETE FROM t\", ()) }\n\
               store.read(move |c| c.execute(\"SELECT pg_notify(?1)\", x)).await;\n\
               store.write(|tx| tx.execute(\"UPDATE t SET a = 1\", ()));\n\
               store.lookup(|c| c.query_row(\"SELECT updated FROM t\", (), f));\n\
               let s = \"INSERT INTO t\"; x.read(&mut buf); // .read(|c| c.execute(\n";
    assert_eq!(writes_through_readers(src), [(2, "SQL `UPDATE`".to_string()), (5, "`.execute(`".to_string())]);
    assert!(takes_reader("fn a(&self, conn: &crate::store::ReadConn, n: usize) -> R "));
    assert!(!takes_reader("fn read<R>(&self, f: impl FnOnce(&ReadConn) -> StoreResult<R>) -> StoreResult<R> "));
}

/// Reads never write: reader connections refuse writes at the database
/// (SQLite's `query_only`, PostgreSQL's `default_transaction_read_only`)
/// and reads get a type without `execute` (`store::ReadConn`), and this
/// rule keeps SQL that writes out of the closures reads run and the
/// functions that take a reader, where the type cannot see it.
#[test]
fn no_write_goes_through_a_reader_connection() {
    let src = root().join("grid-server").join("src");
    let mut found = vec![];
    for file in rust_files(&src) {
        for (line, what) in writes_through_readers(&read(&file)) {
            found.push(format!("{}:{line}: {what}", rel(&file)));
        }
    }
    assert!(
        found.is_empty(),
        "a write through a reader connection (a `Store::read`/`lookup`/`read_blocking` closure, or a function \
         taking `ReadConn`); write in `Store::write` instead:\n{}",
        found.join("\n")
    );
}

// ----- stored state is read through one module -----

/// SQL keywords a string literal of a black-box test must not hold (as whole
/// uppercase words, followed by white space): what reads, changes or
/// rigs the store's rows. Tests go through `grid_tests::stored`
/// (tests/src/stored.rs), whose named readers and fault injectors are the
/// only SQL against the grid's schema in tests/, so a schema change is
/// one edit there and both dialects are handled once.
const SQL_TEXT: &[&str] =
    &["SELECT", "UPDATE", "INSERT INTO", "DELETE FROM", "CREATE TRIGGER", "DROP TRIGGER", "CREATE FUNCTION", "PRAGMA"];

/// Files of tests/tests that may hold SQL text, and why.
const SQL_TEXT_ALLOWED: &[(&str, &str)] = &[
    ("schema_parity.rs", "reads the schema itself, from both stores' catalogs (`Stored::catalog`)"),
    ("tidy.rs", "names the SQL it looks for"),
];

/// Where `text` holds one of `SQL_TEXT`: each as (line within `text`, 0
/// first; the keyword).
fn sql_in(text: &str) -> Vec<(usize, &'static str)> {
    let ident = |c: char| c.is_alphanumeric() || c == '_';
    let mut found = vec![];
    for keyword in SQL_TEXT {
        for (at, _) in text.match_indices(keyword) {
            let before_ok = !text[..at].ends_with(ident);
            let after_ok = text[at + keyword.len()..].starts_with(char::is_whitespace);
            if before_ok && after_ok {
                found.push((text[..at].matches('\n').count(), *keyword));
            }
        }
    }
    found.sort();
    found
}

#[test]
fn sql_text_is_found_in_literals_only() {
    let src = "// SELECT x FROM items\nlet a = \"SELECT COUNT(*) FROM items\";\nlet b = format!(\"x\\n \\\n  UPDATE jobs SET\");\n\
               let c = \"DELETE /sessions/{id}\"; let d = \"SELECTED \"; let e = \"NO_UPDATE here\";\n\
               let f = r#\"CREATE TRIGGER t\n BEFORE INSERT ON k\"#; let g = \"select the tab\";\n";
    let mut found = vec![];
    for (line, text) in string_literals(src) {
        found.extend(sql_in(&text).into_iter().map(|(l, keyword)| (line + l, keyword)));
    }
    assert_eq!(found, [(2, "SELECT"), (4, "UPDATE"), (6, "CREATE TRIGGER")]);
}

#[test]
fn black_box_tests_hold_no_sql_text() {
    let dir = root().join("tests").join("tests");
    let mut found = vec![];
    for file in rust_files(&dir) {
        let name = file.file_name().and_then(|n| n.to_str()).unwrap_or_default();
        if SQL_TEXT_ALLOWED.iter().any(|(allowed, _)| *allowed == name) {
            continue;
        }
        for (line, text) in string_literals(&read(&file)) {
            for (l, keyword) in sql_in(&text) {
                found.push(format!("{}:{}: `{keyword}`", rel(&file), line + l));
            }
        }
    }
    assert!(
        found.is_empty(),
        "read or rig stored rows through `grid_tests::stored` (a named reader there, added if missing), \
         not SQL in the test:\n{}",
        found.join("\n")
    );
}

// ----- grid-server's module graph: the top over subsystems, no cycle -----

/// The program's top in grid-server: the start-up, the wiring and the
/// transports with their dispatch. They may use any module; no other module
/// may use them.
const PROGRAM_TOP: [&str; 4] = ["main", "app", "api", "http"];

/// The top-level modules a source file's non-test code names, with the line
/// of the first reference to each: `crate::m` (also inside `crate::{..}`)
/// and a `super::` that climbs to the crate root (`super::m` in `x/mod.rs`,
/// `super::super::m` in `x/y.rs`). `depth` is the file's depth below
/// `src`: 0 for `x.rs`, 1 for `x/mod.rs` and `x/y.rs`, and so on.
fn module_references(code: &str, depth: usize, is_mod_rs: bool) -> Vec<(String, usize)> {
    let ident = |c: char| c.is_alphanumeric() || c == '_';
    let exempt = exempt_ranges(code);
    let live = |at: usize| !exempt.iter().any(|&(a, b)| (a..b).contains(&at));
    let mut out: Vec<(String, usize)> = vec![];
    let mut add = |name: &str, at: usize| {
        if !name.is_empty() && !out.iter().any(|(n, _)| n == name) {
            out.push((name.to_string(), line_of(code, at)));
        }
    };
    let first_segments = |rest: &str| -> Vec<String> {
        // `{a, b::c, d::{e, f}}` -> a, b, d
        let mut names = vec![];
        let (mut level, mut start) = (0usize, 1usize);
        for (k, ch) in rest.char_indices() {
            match ch {
                '{' => {
                    level += 1;
                    if level == 1 {
                        start = k + 1;
                    }
                }
                '}' | ',' if level == 1 => {
                    let name: String = rest[start..k].trim().chars().take_while(|&c| ident(c)).collect();
                    names.push(name);
                    start = k + 1;
                    if ch == '}' {
                        break;
                    }
                }
                '}' => level -= 1,
                _ => {}
            }
        }
        names
    };
    for at in word_hits(code, "crate::").into_iter().filter(|&at| live(at)) {
        let rest = &code[at + "crate::".len()..];
        if rest.starts_with('{') {
            for name in first_segments(rest) {
                add(&name, at);
            }
        } else {
            add(&rest.chars().take_while(|&c| ident(c)).collect::<String>(), at);
        }
    }
    // How many `super::` climb from this file to the crate root.
    let to_root = if is_mod_rs { depth } else { depth + 1 };
    if to_root > 0 {
        let climb = "super::".repeat(to_root);
        for at in word_hits(code, &climb).into_iter().filter(|&at| live(at)) {
            if code[..at].ends_with("super::") {
                continue;
            }
            let rest = &code[at + climb.len()..];
            if rest.starts_with("super::") {
                continue;
            }
            if rest.starts_with('{') {
                for name in first_segments(rest) {
                    add(&name, at);
                }
            } else {
                add(&rest.chars().take_while(|&c| ident(c)).collect::<String>(), at);
            }
        }
    }
    out
}

/// grid-server's top-level modules and, for each, the modules its non-test
/// code references, each with where it first does.
fn server_module_graph() -> std::collections::BTreeMap<String, std::collections::BTreeMap<String, String>> {
    let src = root().join("grid-server/src");
    let files = rust_files(&src);
    let tests = test_module_files(&files);
    let modules: BTreeSet<String> = files
        .iter()
        .filter_map(|f| f.strip_prefix(&src).ok()?.components().next())
        .map(|c| c.as_os_str().to_string_lossy().trim_end_matches(".rs").to_string())
        .collect();
    let mut graph: std::collections::BTreeMap<String, std::collections::BTreeMap<String, String>> =
        modules.iter().map(|m| (m.clone(), Default::default())).collect();
    for file in files.iter().filter(|f| !tests.contains(*f)) {
        let inner = file.strip_prefix(&src).unwrap();
        let from = inner.components().next().unwrap().as_os_str().to_string_lossy().trim_end_matches(".rs").to_string();
        let depth = inner.components().count() - 1;
        let is_mod_rs = file.file_name().is_some_and(|n| n == "mod.rs");
        let code = code_of(file);
        for (to, line) in module_references(&code, depth, is_mod_rs) {
            if to != from && modules.contains(&to) {
                graph.get_mut(&from).unwrap().entry(to).or_insert_with(|| format!("{}:{line}", rel(file)));
            }
        }
    }
    graph
}

#[test]
fn module_references_read_crate_paths_groups_and_climbing_supers() {
    let code = code_only(
        "use crate::store::Store;\nuse crate::{clock, ids::now};\nuse super::driver;\nfn f() { super::super::metrics::get(); }\n#[cfg(test)]\nmod tests { use crate::sim; }\n",
    );
    let names = |refs: Vec<(String, usize)>| refs.into_iter().map(|(n, _)| n).collect::<Vec<_>>();
    // In `capture/driver.rs`: `super::driver` stays inside capture, `super::super::metrics` climbs out.
    assert_eq!(names(module_references(&code, 1, false)), ["store", "clock", "ids", "metrics"]);
    // In `capture/mod.rs`: `super::driver` is the crate's `driver` (and `super::super` leaves the crate).
    assert_eq!(names(module_references(&code, 1, true)), ["store", "clock", "ids", "driver"]);
}

/// Each top-level module of grid-server is either the program's top
/// (`PROGRAM_TOP`: it may use anything) or a subsystem below it: no
/// subsystem references the top (it would reach everything through it),
/// and the subsystems' references form no cycle, so each can be read,
/// tested and changed with only what it names below it.
#[test]
fn no_subsystem_depends_on_the_top_and_subsystems_form_no_cycle() {
    let graph = server_module_graph();
    let below = |m: &str| !PROGRAM_TOP.contains(&m);
    let mut problems = vec![];
    for (from, tos) in graph.iter().filter(|(m, _)| below(m)) {
        for (to, at) in tos.iter().filter(|(m, _)| !below(m)) {
            problems.push(format!("{from} -> {to} (the program's top): {at}"));
        }
    }
    // The cycles: the subsystems that reach each other, each group listed once with its edges.
    let nodes: Vec<&String> = graph.keys().filter(|m| below(m)).collect();
    let reach = |start: &str| -> BTreeSet<String> {
        let mut seen = BTreeSet::new();
        let mut stack = vec![start.to_string()];
        while let Some(m) = stack.pop() {
            for to in graph[&m].keys().filter(|t| below(t)) {
                if seen.insert(to.clone()) {
                    stack.push(to.clone());
                }
            }
        }
        seen
    };
    let reaches: std::collections::BTreeMap<&String, BTreeSet<String>> = nodes.iter().map(|m| (*m, reach(m))).collect();
    let mut reported = BTreeSet::new();
    for m in &nodes {
        if reported.contains(*m) || !reaches[m].contains(*m) {
            continue;
        }
        let cycle: Vec<&String> =
            nodes.iter().copied().filter(|o| reaches[m].contains(*o) && reaches[o].contains(*m)).collect();
        let edges: Vec<String> = cycle
            .iter()
            .flat_map(|a| {
                graph[*a].iter().filter(|(b, _)| cycle.contains(b)).map(move |(b, at)| format!("  {a} -> {b}: {at}"))
            })
            .collect();
        problems.push(format!(
            "cycle between {}:\n{}",
            cycle.iter().map(|s| s.as_str()).collect::<Vec<_>>().join(", "),
            edges.join("\n")
        ));
        reported.extend(cycle.into_iter().cloned());
    }
    assert!(problems.is_empty(), "grid-server's module graph:\n{}", problems.join("\n"));
}

/// What a black-box test file's `//! Runs on:` line says: `Some(true)` for
/// both stores, `Some(false)` for one, `None` when it has no such line or
/// another text.
fn runs_on_both(src: &str) -> Option<bool> {
    let lines: Vec<&str> = src.lines().filter(|l| l.starts_with("//! Runs on:")).collect();
    match lines.as_slice() {
        [line] if line.starts_with("//! Runs on: both stores, because ") => Some(true),
        [line] if line.starts_with("//! Runs on: one store, because ") => Some(false),
        _ => None,
    }
}

#[test]
fn runs_on_reads_the_one_line_and_nothing_else() {
    assert_eq!(runs_on_both("//! x\n//! Runs on: both stores, because y.\n"), Some(true));
    assert_eq!(runs_on_both("//! Runs on: one store, because y.\n"), Some(false));
    assert_eq!(runs_on_both("//! Runs on: both\n"), None, "no reason");
    assert_eq!(runs_on_both("//! x\n"), None);
    assert_eq!(runs_on_both("//! Runs on: one store, because a.\n//! Runs on: one store, because b.\n"), None);
}

/// Every black-box test file says which stores it runs on (scripts/test.sh
/// runs on PostgreSQL the files that say both, and takes its list from
/// nowhere else), and every file that reads, locks or inspects the store
/// directly runs on both, unless it is on PostgreSQL in either pass.
#[test]
fn every_test_touching_the_store_runs_on_both_stores() {
    let root = root();
    let touching = ["lock_db", "stored::", "Stored", "grid_tests::store::", ".database()"];
    let mut problems = vec![];
    for file in rust_files(&root.join("tests/tests")) {
        let src = read(&file);
        let Some(both) = runs_on_both(&src) else {
            problems.push(format!(
                "{}: no `//! Runs on: both stores, because ...` or `//! Runs on: one store, because ...` line",
                rel(&file)
            ));
            continue;
        };
        let code = code_only(&src);
        let touches: Vec<&str> = touching.iter().copied().filter(|t| code.contains(t)).collect();
        let either_pass = src.contains("on PostgreSQL in either pass") || src.contains("both stores in either pass");
        if !both && !touches.is_empty() && !either_pass {
            problems.push(format!("{}: uses {touches:?} (the store directly) but runs on one store", rel(&file)));
        }
    }
    let script = read(&root.join("scripts/test.sh"));
    if !script.contains("grep -l '^//! Runs on: both stores' tests/tests/*.rs") {
        problems.push("scripts/test.sh does not take the PostgreSQL pass's files from the `Runs on` lines".into());
    }
    assert!(problems.is_empty(), "{}", problems.join("\n"));
}

// ----- the browser tools are API calls -----

/// The MCP module: it reads JSON-RPC into calls of `api` and renders their
/// replies as tool content, nothing more (docs/mcp.md, "Tools").
const MCP_MODULE: [&str; 2] = ["http/mcp.rs", "http/mcp_tools.rs"];

/// What the MCP module may name of grid-server outside `http/`: the API's
/// calls and replies, the `App` it hands them, who calls (`Caller`) and the
/// `serve` configuration (the page origins it allows).
const MCP_MAY_NAME: [&str; 4] = ["api", "app", "store", "config"];

/// The only path into `store` the MCP module may name: the caller's type.
const MCP_STORE_PATH: &str = "store::accounts::Caller";

/// The fields of `App` the MCP module may read: the configuration (the
/// base URL it names a capture's files by). Everything else (the store,
/// the sessions, the peers) is reached through `api::perform`.
const MCP_APP_FIELDS: [&str; 1] = ["config"];

/// What runs a browser tool or parses one: the session's tool runner
/// (`sessions::tools`), the tools' argument reader and the call that runs
/// a tool on another node. Named in `api/` only, which checks the session's
/// owner and liveness before any of them.
const BROWSER_TOOL_LOGIC: [&str; 3] = ["sessions::tools", "browser_tools::parse", ".browser_tool("];

/// Where `code` (non-test) breaks the MCP module's rules, as `line: what`.
fn mcp_module_overreach(code: &str, depth: usize) -> Vec<String> {
    let exempt = exempt_ranges(code);
    let live = |at: usize| !exempt.iter().any(|&(a, b)| (a..b).contains(&at));
    let mut found = vec![];
    for (module, line) in module_references(code, depth, false) {
        if !MCP_MAY_NAME.contains(&module.as_str()) {
            found.push(format!("{line}: names `{module}`"));
        }
    }
    for at in word_hits(code, "store::").into_iter().filter(|&at| live(at)) {
        let path: String = code[at..].chars().take_while(|&c| c.is_alphanumeric() || c == '_' || c == ':').collect();
        if path != MCP_STORE_PATH {
            found.push(format!("{}: names `{path}`", line_of(code, at)));
        }
    }
    for at in word_hits(code, "app.").into_iter().filter(|&at| live(at)) {
        let field: String =
            code[at + "app.".len()..].chars().take_while(|&c| c.is_alphanumeric() || c == '_').collect();
        if !MCP_APP_FIELDS.contains(&field.as_str()) {
            found.push(format!("{}: reads `app.{field}`", line_of(code, at)));
        }
    }
    found
}

/// Where `code` (non-test) names what runs a browser tool.
fn browser_tool_logic_in(code: &str) -> Vec<(usize, &'static str)> {
    let exempt = exempt_ranges(code);
    let mut found = vec![];
    for needle in BROWSER_TOOL_LOGIC {
        for at in word_hits(code, needle) {
            if !exempt.iter().any(|&(a, b)| (a..b).contains(&at)) {
                found.push((line_of(code, at), needle));
            }
        }
    }
    found.sort();
    found
}

#[test]
fn mcp_overreach_and_browser_tool_logic_are_found_in_code_only() {
    let code = code_only(
        "use crate::api::{self, Call};\nuse crate::store::accounts::Caller;\nlet u = &app.config.base_url;\n\
         let r = app.store.lookup(|c| crate::store::sessions::load(c, id));\n\
         crate::sessions::tools::run(live, tool); // app.peers\n\
         let s = \"app.sessions\";\napp.peers.browser_tool(n, s, a, t, v);\n\
         #[cfg(test)]\nmod tests { fn t() { browser_tools::parse(n, a); app.store; } }\n",
    );
    assert_eq!(
        mcp_module_overreach(&code, 1),
        ["5: names `sessions`", "4: names `store::sessions::load`", "4: reads `app.store`", "7: reads `app.peers`",]
    );
    assert_eq!(browser_tool_logic_in(&code), [(5, "sessions::tools"), (7, ".browser_tool(")]);
}

/// The browser tools are calls of the API like every other tool: `api`
/// reads their arguments, checks that the session is the caller's and
/// live, runs the tool where the session's browser is (here, or on its node
/// through `Peers`) and answers a `Reply`; the errors are rows of the error
/// table. So nothing in `http/` runs a browser tool, and the MCP module
/// reaches no state but through `api::perform` (issue 51).
#[test]
fn browser_tools_run_in_api_and_mcp_only_maps_calls() {
    let src = root().join("grid-server/src");
    let mut found = vec![];
    for file in MCP_MODULE.map(|f| src.join(f)) {
        let code = code_of(&file);
        found.extend(mcp_module_overreach(&code, 1).into_iter().map(|f| format!("{}:{f}", rel(&file))));
    }
    for file in rust_files(&src.join("http")) {
        let code = code_of(&file);
        for (line, needle) in browser_tool_logic_in(&code) {
            found.push(format!("{}:{line}: `{needle}`", rel(&file)));
        }
    }
    assert!(
        found.is_empty(),
        "browser tool logic outside api/ (the MCP module maps tools to `api::perform` calls and renders replies):\n{}",
        found.join("\n")
    );
}

// ----- black-box tests wait through `grid_tests::wait` -----

/// The deadlines in tests/ that are not a wait on a condition, as (file,
/// function, why). Everything else that waits goes through `wait_until`,
/// `wait_for` or `block_until` (tests/src/wait.rs, which holds the one
/// deadline they share).
const DEADLINES_ALLOWED: &[(&str, &str, &str)] = &[
    ("tests/src/wait.rs", "start", "the one deadline every wait shares"),
    (
        "tests/src/server.rs",
        "spawn",
        "the start's stdout lines come through a channel, each read with what is left of the start's time",
    ),
    ("tests/src/cli.rs", "run_cli", "a time limit on a command: killed at the limit, its output goes to the caller"),
    ("tests/tests/tls.rs", "serve_expecting_exit", "a time limit on a server expected to exit: killed at the limit"),
    ("tests/src/cdp.rs", "settle", "a bounded look that answers what it saw, never a failure"),
    ("tests/src/delay_proxy.rs", "delayed", "the time held bytes are due to go on, not a deadline"),
    (
        "tests/tests/containment.rs",
        "a_thread_bomb_stops_at_the_browsers_task_bound",
        "samples the task count for at most 60 s; the asserts after judge the peak",
    ),
    (
        "tests/tests/isolation.rs",
        "served_then_settled",
        "a page never asked for is a finding, reported with the test's others",
    ),
    ("tests/src/bin/bench_job_latency.rs", "grid_once", "the poll (5 ms, then 20 ms) is part of what the bench times"),
    ("tests/src/bin/bench_scale_out.rs", "run", "the time limit of a measured run, shared by its submitters"),
    ("tests/src/bin/bench_one_call.rs", "main", "the time limit of a measured run, shared by its drivers"),
    (
        "tests/src/bin/bench_screenshots.rs",
        "main",
        "the time limit of a measured run, and a bounded quiet between sides",
    ),
    ("tests/src/bin/bench_fetch.rs", "main", "the time limit of a measured run, shared by its rounds"),
];

/// Where `code` builds a deadline (`Instant::now() +`): each as (line, the
/// function it is in).
fn deadlines_in(code: &str) -> Vec<(usize, String)> {
    let ident = |c: char| c.is_alphanumeric() || c == '_';
    word_hits(code, "Instant::now()")
        .into_iter()
        .filter(|&at| code[at + "Instant::now()".len()..].trim_start().starts_with('+'))
        .map(|at| {
            let function = word_hits(&code[..at], "fn")
                .last()
                .map(|&f| code[f + 2..].trim_start().chars().take_while(|&c| ident(c)).collect())
                .unwrap_or_default();
            (line_of(code, at), function)
        })
        .collect()
}

#[test]
fn deadlines_are_found_with_their_function() {
    let code = code_only(
        "fn a() {\n    let d = Instant::now() + T;\n    let e = std::time::Instant::now()\n        + T;\n}\n\
         async fn b() { let t = Instant::now(); t + T; \"Instant::now() +\"; }\n// Instant::now() + T\n",
    );
    assert_eq!(deadlines_in(&code), [(2, "a".to_string()), (3, "a".to_string())]);
}

/// A hand-written deadline loop is a second way to wait, with its own poll,
/// its own failure message (or none) and its own mistakes (a deadline
/// checked before the last look, a failure that forgets what was seen).
/// So the black-box suite waits through `grid_tests::wait` only, and a
/// deadline elsewhere in tests/ is one of `DEADLINES_ALLOWED` (issue 51).
#[test]
fn every_wait_goes_through_wait_rs() {
    let tests = root().join("tests");
    let mut found = vec![];
    for file in rust_files(&tests.join("src")).into_iter().chain(rust_files(&tests.join("tests"))) {
        let path = rel(&file);
        for (line, function) in deadlines_in(&code_of(&file)) {
            if !DEADLINES_ALLOWED.iter().any(|(f, n, _)| *f == path && *n == function) {
                found.push(format!("{path}:{line} (fn {function})"));
            }
        }
    }
    assert!(
        found.is_empty(),
        "a deadline loop outside tests/src/wait.rs: wait with `wait_until`, `wait_for` or `block_until`, \
         or list it in DEADLINES_ALLOWED with why it is not a wait on a condition:\n{}",
        found.join("\n")
    );
}
