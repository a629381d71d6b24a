//! How `grid` writes: JSON lines for `--json`, aligned tables and key/value
//! lines for people, and the one `error: ...` line on stderr.
//!
//! Rules: stdout carries only results; progress and errors go to stderr.
//! With `--json`, every answer is printed as the API sent it, with the
//! whitespace outside strings removed so one document is one line.

use std::io::{self, Write};
use std::process::ExitCode;

use grid_client::error::ClientError;
use grid_client::RawReply;

/// How results are printed (`--output`).
#[derive(Debug, Clone, Copy, PartialEq, Eq, clap::ValueEnum)]
pub enum Format {
    Table,
    Json,
    Yaml,
}

static FORMAT: std::sync::OnceLock<Format> = std::sync::OnceLock::new();

/// Set once by `main`, before any command prints.
pub fn set_format(format: Format) {
    let _ = FORMAT.set(format);
}

/// Prints one API answer as one line of JSON (a YAML document with
/// `--output yaml`). Refuses a body that is not JSON.
pub fn json_line(reply: &RawReply) -> anyhow::Result<()> {
    let value = match serde_json::from_slice::<serde_json::Value>(&reply.body) {
        Ok(v) => v,
        Err(cause) => return Err(ClientError::Decode { endpoint: reply.endpoint.clone(), cause }.into()),
    };
    if FORMAT.get() == Some(&Format::Yaml) {
        let mut stdout = io::stdout().lock();
        stdout.write_all(crate::yaml::document(&value).as_bytes())?;
        stdout.flush()?;
        return Ok(());
    }
    let mut line = compact_json(&reply.body);
    line.push(b'\n');
    let mut stdout = io::stdout().lock();
    stdout.write_all(&line)?;
    stdout.flush()?;
    Ok(())
}

/// Writes a downloaded file to `file` (`-o FILE`), or to stdout for none
/// or `-`. Binary on a terminal garbles it and helps nobody: without `-o`
/// it is refused, naming `what`: the file, and what it is (its size).
/// Answers whether it went to a file.
pub fn file_or_stdout(
    file: Option<&std::path::Path>,
    bytes: &[u8],
    what: impl FnOnce() -> (String, String),
) -> anyhow::Result<bool> {
    use anyhow::Context as _;
    use std::io::IsTerminal as _;
    match file {
        Some(path) if path.as_os_str() != "-" => {
            std::fs::write(path, bytes).with_context(|| format!("cannot write {}", path.display()))?;
            Ok(true)
        }
        _ => {
            if file.is_none() && io::stdout().is_terminal() && std::str::from_utf8(bytes).is_err() {
                let (file, size) = what();
                anyhow::bail!("{file} is binary ({size}); not writing it to the terminal: pass -o FILE, or pipe it");
            }
            let mut stdout = io::stdout().lock();
            stdout.write_all(bytes)?;
            stdout.flush()?;
            Ok(false)
        }
    }
}

/// Prints one document the CLI made itself (not an API answer) as one line
/// of JSON, or a YAML document with `--output yaml`.
pub fn json_value(value: &serde_json::Value) -> anyhow::Result<()> {
    let mut stdout = io::stdout().lock();
    if FORMAT.get() == Some(&Format::Yaml) {
        stdout.write_all(crate::yaml::document(value).as_bytes())?;
    } else {
        serde_json::to_writer(&mut stdout, value)?;
        stdout.write_all(b"\n")?;
    }
    stdout.flush()?;
    Ok(())
}

/// Removes the whitespace outside strings; keeps everything else, key order
/// included, byte for byte.
pub fn compact_json(body: &[u8]) -> Vec<u8> {
    let mut out = Vec::with_capacity(body.len());
    let mut in_string = false;
    let mut escaped = false;
    for &b in body {
        if in_string {
            out.push(b);
            if escaped {
                escaped = false;
            } else if b == b'\\' {
                escaped = true;
            } else if b == b'"' {
                in_string = false;
            }
        } else {
            match b {
                b' ' | b'\n' | b'\r' | b'\t' => {}
                b'"' => {
                    in_string = true;
                    out.push(b);
                }
                _ => out.push(b),
            }
        }
    }
    out
}

/// Writes lines to stdout.
pub fn lines(lines: &[String]) -> anyhow::Result<()> {
    let mut stdout = io::stdout().lock();
    for line in lines {
        writeln!(stdout, "{line}")?;
    }
    stdout.flush()?;
    Ok(())
}

/// Left-aligned columns separated by two spaces; the last column is not padded.
pub fn table(header: &[&str], rows: &[Vec<String>]) -> Vec<String> {
    let mut widths: Vec<usize> = header.iter().map(|h| h.chars().count()).collect();
    for row in rows {
        for (i, cell) in row.iter().enumerate() {
            if i < widths.len() {
                widths[i] = widths[i].max(cell.chars().count());
            }
        }
    }
    let render = |cells: Vec<&str>| {
        let last = cells.len().saturating_sub(1);
        let mut line = String::new();
        for (i, cell) in cells.into_iter().enumerate() {
            if i > 0 {
                line.push_str("  ");
            }
            line.push_str(cell);
            if i < last {
                line.extend(std::iter::repeat_n(' ', widths[i].saturating_sub(cell.chars().count())));
            }
        }
        line.trim_end().to_string()
    };
    let mut out = vec![render(header.to_vec())];
    out.extend(rows.iter().map(|row| render(row.iter().map(String::as_str).collect())));
    out
}

/// `key  value` lines with the keys padded to one width.
pub fn key_values(pairs: &[(&str, String)]) -> Vec<String> {
    let width = pairs.iter().map(|(k, _)| k.len()).max().unwrap_or(0);
    pairs.iter().map(|(k, v)| format!("{k:width$}  {v}").trim_end().to_string()).collect()
}

/// `1 item`, `2 items`: a number with its noun in the right number.
pub fn count(n: u64, one: &str, many: &str) -> String {
    format!("{n} {}", if n == 1 { one } else { many })
}

/// Which credential a command sent, for the hint of a 401.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum CredentialSent {
    None,
    ApiKey,
    Token,
}

/// What an error line may point at: the server tried and the credential sent.
#[derive(Debug, Clone)]
pub struct Hints {
    pub url: String,
    pub credential: CredentialSent,
}

impl Hints {
    /// For errors before any request (config, usage).
    pub fn none() -> Hints {
        Hints { url: String::new(), credential: CredentialSent::None }
    }
}

/// Prints the error line on stderr (and, where the fix is known, a `hint:`
/// line saying what to do) and gives the exit code: 1, or 0 when stdout was
/// closed early by a reader (`grid ... | head`).
pub fn report_error(error: &anyhow::Error, hints: &Hints) -> ExitCode {
    if let Some(io_error) = error.downcast_ref::<io::Error>() {
        if io_error.kind() == io::ErrorKind::BrokenPipe {
            return ExitCode::SUCCESS;
        }
    }
    eprintln!("error: {}", error_text(error, hints));
    if let Some(hint) = hint(error, hints) {
        eprintln!("hint: {hint}");
    }
    ExitCode::from(1)
}

fn error_text(error: &anyhow::Error, hints: &Hints) -> String {
    match error.downcast_ref::<ClientError>() {
        // `<status> <error>[: detail; ...][ (field=value, ...)]`
        Some(e @ ClientError::Api { .. }) => e.to_string(),
        // One line: the address tried and the innermost cause.
        Some(ClientError::Transport(e)) => {
            let mut cause = e.to_string();
            let mut source = std::error::Error::source(e);
            while let Some(s) = source {
                cause = s.to_string();
                source = s.source();
            }
            format!("the grid at {} did not answer: {cause}", hints.url)
        }
        Some(other) => other.to_string(),
        None => format!("{error:#}"),
    }
}

/// What to do about an error, when the CLI knows.
fn hint(error: &anyhow::Error, hints: &Hints) -> Option<String> {
    match error.downcast_ref::<ClientError>()? {
        ClientError::Api { status: 401, .. } => Some(match hints.credential {
            CredentialSent::None => "no API key was sent: set GRID_API_KEY or pass --api-key (the key `grid-server` \
                printed at first start, or one from `grid-server key create`)"
                .into(),
            CredentialSent::ApiKey => {
                "the API key (GRID_API_KEY or --api-key) was refused: it is unknown, revoked, or \
                its account is suspended; ask the operator for a key (`grid-server key create`)"
                    .into()
            }
            CredentialSent::Token => "the sign-in token (GRID_TOKEN or --token) was refused: it expired or is not for \
                this grid; sign in again"
                .into(),
        }),
        ClientError::Transport(e) if certificate_refused(e) => Some(format!(
            "the server's TLS certificate is not trusted: set GRID_CA_CERT or pass --ca-cert with the PEM file of \
             the CA that issued it (a self-signed grid's is DATA_DIR/tls/ca.pem, named in its `listening` event as \
             caCert) (tried {})",
            hints.url
        )),
        ClientError::Transport(_) => {
            Some(format!("is the server running there? set GRID_URL or pass --url (tried {})", hints.url))
        }
        e @ ClientError::Api { status: 429, .. } => Some(format!(
            "this credential is over its request rate; nothing was done: run the command again{} \
             (the operator sets a key's rate with `grid-server key create --rate-per-second N --burst N`)",
            e.retry_after().map(|d| format!(" after {}s", d.as_secs())).unwrap_or_default()
        )),
        ClientError::Api { status: 413, .. } => {
            Some("the request is larger than the grid accepts: send fewer URLs per batch (split the list)".into())
        }
        ClientError::Api { status: 408, .. } => {
            Some("the request body was not sent in time: check the network, or send a smaller request".into())
        }
        _ => None,
    }
}

/// Whether the connection failed because the server's certificate was not
/// trusted (rustls names the certificate in its error; no other transport
/// failure does).
fn certificate_refused(e: &(dyn std::error::Error + 'static)) -> bool {
    let mut source = Some(e);
    while let Some(s) = source {
        let text = s.to_string();
        if text.contains("invalid peer certificate") || text.contains("UnknownIssuer") {
            return true;
        }
        source = s.source();
    }
    false
}

/// A line for item failures whose fix is on the server's side.
pub fn failure_hint<'a>(reasons: impl IntoIterator<Item = &'a str>) -> Option<String> {
    reasons.into_iter().any(|r| r.contains("is not a public address")).then(|| {
        "hint: the grid refuses loopback and private addresses; an operator who means to capture \
         them starts the server with --allow-private-networks"
            .to_string()
    })
}

#[cfg(test)]
mod tests {
    use serde_json::json;

    use super::*;

    #[test]
    fn compaction_keeps_strings_and_order() {
        let body = b"{\n  \"z\": \"a b\\\" \\\\\",\n  \"a\": [1, 2],\t\"u\": \"\xc3\xbc \"\n}\n";
        assert_eq!(compact_json(body), b"{\"z\":\"a b\\\" \\\\\",\"a\":[1,2],\"u\":\"\xc3\xbc \"}".to_vec());
        let compact = br#"{"batchId":"b1","jobCount":2}"#;
        assert_eq!(compact_json(compact), compact.to_vec());
    }

    #[test]
    fn tables_align() {
        let rows = vec![vec!["j1".to_string(), "completed".into(), "https://a".into(), String::new()]];
        assert_eq!(
            table(&["JOB", "STATE", "URL", "REASON"], &rows),
            vec!["JOB  STATE      URL        REASON", "j1   completed  https://a"]
        );
    }

    #[test]
    fn api_errors_read_as_the_contract_says() {
        let e = ClientError::from_answer(
            400,
            &Default::default(),
            json!({"error": "invalid batch body", "detail": ["urls: at most 1000"]}).to_string().as_bytes(),
        );
        let hints = Hints { url: "http://h:1".into(), credential: CredentialSent::ApiKey };
        assert_eq!(error_text(&e.into(), &hints), "400 invalid batch body: urls: at most 1000");
    }
}
