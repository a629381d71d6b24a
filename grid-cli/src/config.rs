//! `grid config`: named contexts (a server address, a key file, a CA) kept in
//! a config file, like kubectl's. Flags win over environment variables,
//! which win over the current context, which wins over the defaults.
//!
//! The file is `$GRID_CONFIG`, else `$XDG_CONFIG_HOME/grid/config.toml`, else
//! `~/.config/grid/config.toml`. Keys are never written into it: a context
//! names a key file (kept private by its owner), read when a command runs.

use std::collections::BTreeMap;
use std::path::{Path, PathBuf};
use std::process::ExitCode;

use anyhow::{bail, Context as _};
use clap::Subcommand;
use serde::{Deserialize, Serialize};

use crate::output;

#[derive(Debug, Default, Serialize, Deserialize, PartialEq, Eq)]
#[serde(rename_all = "kebab-case", deny_unknown_fields)]
pub struct ConfigFile {
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub current_context: Option<String>,
    #[serde(default)]
    pub contexts: BTreeMap<String, GridContext>,
}

#[derive(Debug, Default, Clone, Serialize, Deserialize, PartialEq, Eq)]
#[serde(rename_all = "kebab-case", deny_unknown_fields)]
pub struct GridContext {
    pub url: String,
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub key_file: Option<PathBuf>,
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub ca_cert: Option<PathBuf>,
}

#[derive(Debug, Subcommand)]
pub enum ConfigCommand {
    /// Create or change a context: `grid config set-context prod --url https://grid.example.com --key-file ~/.grid/prod.key`.
    SetContext {
        name: String,
        /// The grid's base URL.
        #[arg(long)]
        url: Option<String>,
        /// A file holding the API key (its first line).
        #[arg(long, value_name = "FILE")]
        key_file: Option<PathBuf>,
        /// A PEM CA to trust for this grid.
        #[arg(long, value_name = "PEM")]
        ca_cert: Option<PathBuf>,
    },
    /// Make a context the current one.
    UseContext { name: String },
    /// List the contexts (`*` marks the current one).
    GetContexts,
    /// Print the current context's name.
    CurrentContext,
    /// Remove a context.
    DeleteContext { name: String },
}

/// Where the config file is.
pub fn path() -> Option<PathBuf> {
    let var = |name: &str| std::env::var_os(name).filter(|v| !v.is_empty()).map(PathBuf::from);
    var("GRID_CONFIG")
        .or_else(|| var("XDG_CONFIG_HOME").map(|d| d.join("grid/config.toml")))
        .or_else(|| var("HOME").map(|h| h.join(".config/grid/config.toml")))
}

pub fn load(path: &Path) -> anyhow::Result<ConfigFile> {
    match std::fs::read_to_string(path) {
        Ok(text) => toml::from_str(&text).with_context(|| format!("{} is not a grid config file", path.display())),
        Err(e) if e.kind() == std::io::ErrorKind::NotFound => Ok(ConfigFile::default()),
        Err(e) => Err(e).with_context(|| format!("cannot read {}", path.display())),
    }
}

fn save(path: &Path, config: &ConfigFile) -> anyhow::Result<()> {
    if let Some(dir) = path.parent() {
        std::fs::create_dir_all(dir).with_context(|| format!("cannot create {}", dir.display()))?;
    }
    let text = toml::to_string_pretty(config).context("cannot write the config")?;
    let tmp = path.with_extension("toml.tmp");
    std::fs::write(&tmp, text).with_context(|| format!("cannot write {}", tmp.display()))?;
    std::fs::rename(&tmp, path).with_context(|| format!("cannot replace {}", path.display()))
}

/// The current context, if the config file names one.
pub fn current() -> anyhow::Result<Option<(String, GridContext)>> {
    let Some(path) = path() else { return Ok(None) };
    let config = load(&path)?;
    let Some(name) = config.current_context.clone() else { return Ok(None) };
    match config.contexts.get(&name) {
        Some(c) => Ok(Some((name, c.clone()))),
        None => bail!("the current context {name} is not in {} (grid config get-contexts)", path.display()),
    }
}

/// The API key of a context's key file: its first line.
pub fn read_key(file: &Path) -> anyhow::Result<String> {
    let text = std::fs::read_to_string(file).with_context(|| format!("cannot read the key file {}", file.display()))?;
    let key = text.lines().next().unwrap_or("").trim().to_string();
    if key.is_empty() {
        bail!("the key file {} is empty", file.display());
    }
    Ok(key)
}

pub fn run(command: ConfigCommand) -> anyhow::Result<ExitCode> {
    let path = path().context("no config file: set GRID_CONFIG, XDG_CONFIG_HOME or HOME")?;
    let mut config = load(&path)?;
    match command {
        ConfigCommand::SetContext { name, url, key_file, ca_cert } => {
            let existing = config.contexts.get(&name).cloned();
            let url = match (url, &existing) {
                (Some(u), _) => u,
                (None, Some(c)) => c.url.clone(),
                (None, None) => bail!("a new context needs --url"),
            };
            let absolute = |p: PathBuf| std::path::absolute(&p).unwrap_or(p);
            let context = GridContext {
                url,
                key_file: key_file.map(absolute).or(existing.as_ref().and_then(|c| c.key_file.clone())),
                ca_cert: ca_cert.map(absolute).or(existing.and_then(|c| c.ca_cert)),
            };
            config.contexts.insert(name.clone(), context);
            if config.current_context.is_none() {
                config.current_context = Some(name.clone());
            }
            save(&path, &config)?;
            output::lines(&[format!("context {name} set in {}", path.display())])?;
        }
        ConfigCommand::UseContext { name } => {
            if !config.contexts.contains_key(&name) {
                bail!("no context {name} in {} (grid config get-contexts)", path.display());
            }
            config.current_context = Some(name.clone());
            save(&path, &config)?;
            output::lines(&[format!("using context {name}")])?;
        }
        ConfigCommand::GetContexts => {
            let rows: Vec<Vec<String>> = config
                .contexts
                .iter()
                .map(|(name, c)| {
                    let mark = if config.current_context.as_deref() == Some(name) { "*" } else { "" };
                    let key = c.key_file.as_ref().map_or("-".to_string(), |p| p.display().to_string());
                    vec![mark.to_string(), name.clone(), c.url.clone(), key]
                })
                .collect();
            output::lines(&output::table(&["CURRENT", "NAME", "URL", "KEY FILE"], &rows))?;
        }
        ConfigCommand::CurrentContext => match &config.current_context {
            Some(name) => output::lines(std::slice::from_ref(name))?,
            None => bail!("no current context (grid config use-context NAME)"),
        },
        ConfigCommand::DeleteContext { name } => {
            if config.contexts.remove(&name).is_none() {
                bail!("no context {name} in {}", path.display());
            }
            if config.current_context.as_deref() == Some(name.as_str()) {
                config.current_context = None;
            }
            save(&path, &config)?;
            output::lines(&[format!("context {name} deleted")])?;
        }
    }
    Ok(ExitCode::SUCCESS)
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn the_file_reads_back_as_written() {
        let mut c = ConfigFile { current_context: Some("prod".into()), ..Default::default() };
        c.contexts
            .insert("prod".into(), GridContext { url: "https://g".into(), key_file: Some("/k".into()), ca_cert: None });
        let text = toml::to_string_pretty(&c).unwrap();
        assert!(text.contains("current-context = \"prod\""), "{text}");
        assert!(text.contains("key-file = \"/k\""), "{text}");
        assert_eq!(toml::from_str::<ConfigFile>(&text).unwrap(), c);
        assert!(toml::from_str::<ConfigFile>("colour = 1").is_err(), "unknown settings are refused");
    }
}
