//! Where each option came from, so that an error names the place to fix:
//! the command line (clap's `value_source`), the config file (the key's
//! line, from toml's spans), or the code that built the options.

use std::collections::{BTreeMap, BTreeSet};
use std::path::{Path, PathBuf};

use super::{Command, ConfigError, GatewayOptions};
use crate::gateway::GatewayConfig;

/// Gateway options together with where each was given.
#[derive(Clone, Debug)]
pub struct Sourced {
    options: GatewayOptions,
    /// The keys (`max-body`) given on the command line.
    on_cli: BTreeSet<String>,
    file: Option<FileKeys>,
}

#[derive(Clone, Debug)]
struct FileKeys {
    path: PathBuf,
    /// Key → the line (1-based) that sets it.
    lines: BTreeMap<String, usize>,
}

impl Sourced {
    /// Options set in code: errors name the flag. A `config` file is read
    /// with [`Sourced::read`] (or from a command line,
    /// `Sourced::from_matches`), where its keys' lines are known.
    pub fn new(options: GatewayOptions) -> Result<Self, ConfigError> {
        if let Some(path) = &options.config {
            return Err(ConfigError {
                at: "--config".into(),
                message: format!(
                    "{}: read a config file with Sourced::read or from the command line",
                    path.display()
                ),
            });
        }
        Ok(Self {
            options,
            on_cli: BTreeSet::new(),
            file: None,
        })
    }

    /// The options of the config file `path`.
    pub fn read(path: &Path) -> Result<Self, ConfigError> {
        let text = std::fs::read_to_string(path).map_err(|e| ConfigError {
            at: path.display().to_string(),
            message: format!("cannot read: {e}"),
        })?;
        Self::parse(path, &text)
    }

    /// The options of the config file `path` whose contents are `text`:
    /// its relative paths are taken from the file's directory.
    pub fn parse(path: &Path, text: &str) -> Result<Self, ConfigError> {
        let bad = |e: toml::de::Error| ConfigError {
            at: path.display().to_string(),
            message: e.to_string().trim_end().to_owned(),
        };
        let mut options: GatewayOptions = toml::from_str(text).map_err(bad)?;
        let spans: BTreeMap<String, toml::Spanned<toml::Value>> =
            toml::from_str(text).map_err(bad)?;
        let lines = spans
            .into_iter()
            .map(|(key, value)| {
                let before = text.get(..value.span().start).unwrap_or(text);
                (key, before.matches('\n').count() + 1)
            })
            .collect();
        if let Some(dir) = path.parent() {
            for p in [
                &mut options.identity,
                &mut options.auth_token_file,
                &mut options.capture,
                &mut options.tls_cert,
                &mut options.tls_key,
                &mut options.upstream_ca,
                &mut options.ingress_cert,
                &mut options.ingress_key,
                &mut options.ingress_client_ca,
            ]
            .into_iter()
            .flatten()
            {
                if p.is_relative() {
                    *p = dir.join(&*p);
                }
            }
        }
        Ok(Self {
            options,
            on_cli: BTreeSet::new(),
            file: Some(FileKeys {
                path: path.to_owned(),
                lines,
            }),
        })
    }

    /// The options of a command line that flattens [`GatewayOptions`]: its
    /// `--config` file (if any) under its flags.
    #[cfg(feature = "cli")]
    pub fn from_matches(matches: &clap::ArgMatches) -> Result<Self, ConfigError> {
        use clap::FromArgMatches;
        let clap_error = |e: clap::Error| ConfigError {
            at: "command line".into(),
            message: e.to_string().trim_end().to_owned(),
        };
        let cli = GatewayOptions::from_arg_matches(matches).map_err(clap_error)?;
        let mut sourced = match &cli.config {
            None => Self::new(cli)?,
            Some(path) => {
                let mut sourced = Self::read(path)?;
                let in_file = sourced.options.insecure_accept_any_peer;
                sourced
                    .options
                    .update_from_arg_matches(matches)
                    .map_err(clap_error)?;
                // A flag's absence on the command line is not a `false`.
                sourced.options.insecure_accept_any_peer |= in_file;
                sourced
            }
        };
        sourced.on_cli = matches
            .ids()
            .filter(|id| {
                matches.value_source(id.as_str()) == Some(clap::parser::ValueSource::CommandLine)
            })
            .map(|id| id.as_str().replace('_', "-"))
            .collect();
        Ok(sourced)
    }

    pub fn options(&self) -> &GatewayOptions {
        &self.options
    }

    /// The options, to change in code (what is changed keeps the place it
    /// was given in errors).
    pub fn options_mut(&mut self) -> &mut GatewayOptions {
        &mut self.options
    }

    /// The config file these options were read from, if any.
    pub fn file(&self) -> Option<&Path> {
        self.file.as_ref().map(|f| f.path.as_path())
    }

    /// Where the option `key` (`max-body`) was given: `--max-body`, or
    /// `FILE: line N: key `max-body``.
    pub(super) fn at(&self, key: &str) -> String {
        match &self.file {
            Some(file) if !self.on_cli.contains(key) => match file.lines.get(key) {
                Some(line) => format!("{}: line {line}: key `{key}`", file.path.display()),
                None => format!("--{key}"),
            },
            _ => format!("--{key}"),
        }
    }

    /// The error `message` about the option `key`.
    pub(super) fn error(&self, key: &str, message: impl Into<String>) -> ConfigError {
        ConfigError {
            at: self.at(key),
            message: message.into(),
        }
    }

    /// The gateway these options describe, whatever the command.
    pub fn resolve(&self) -> Result<GatewayConfig, ConfigError> {
        self.options.build(self)
    }

    /// The gateway these options describe, checked first against what
    /// `command` does (so that an empty `serve` says there is nothing to
    /// do, not that a key is missing).
    pub fn resolve_for(&self, command: Command) -> Result<GatewayConfig, ConfigError> {
        let o = &self.options;
        match command {
            Command::Serve if o.listen.is_empty() && o.ingress.is_empty() => Err(ConfigError {
                at: "serve".into(),
                message: "nothing to do: give --listen (with --upstream) to be an origin \
                          and/or --ingress (with --peer) to be an edge"
                    .into(),
            }),
            Command::Connect => match o.serve_only_given() {
                Some(id) => Err(self.error(
                    &id.replace('_', "-"),
                    "belongs to `serve`: connect carries its stdin and stdout to --peer and \
                     nothing else",
                )),
                None if o.peer.is_empty() => Err(self.error(
                    "peer",
                    "connect needs --peer quic://ADDR, tls://ADDR or npamp://ADDR",
                )),
                None => self.resolve(),
            },
            Command::Serve => self.resolve(),
        }
    }
}
