//! The TOML configuration file: which provider serves which account and channel, with optional
//! rate limits and concurrency caps, the public URL, the database and `[serve]`. Found by
//! [`discover`] (`--config`, `SENDONCE_CONFIG`, `./sendonce.toml`,
//! `$XDG_CONFIG_HOME/sendonce/sendonce.toml`, `/etc/sendonce/sendonce.toml`: the first that exists);
//! each scalar setting also has an environment variable ([`SETTINGS`]). Secrets never live here:
//! each provider reads them from environment variables or files. `sendonce config example` prints
//! a commented example (`config.example.toml`).
//!
//! ```toml
//! provider = "outbox:./outbox.jsonl"        # default for everything else
//! public_url = "https://news.example.org"   # {{ unsubscribe_url }} is public_url/u/TOKEN
//! db = "/var/lib/sendonce/sendonce.db"      # default of --db
//!
//! [[route]]
//! account = "acme"                          # name or id; omit for every account
//! channel = "email"                         # omit for both channels
//! provider = "webhook:https://hooks.example.org/send#key_window=24h"
//! rate = "20/s"                             # durable token bucket shared by all workers
//! burst = 40
//! concurrency = 16                          # calls in flight for this route, per worker
//!
//! [[webhook]]                               # provider webhooks (sendonce serve)
//! account = "acme"                          # name or id: POST /hooks/twilio/acme
//! source = "twilio"                         # twilio | postmark | resend | standard
//! secret_env = "ACME_TWILIO_AUTH_TOKEN"     # or secret_file = "/etc/sendonce/twilio-token"
//!
//! [serve]                                   # sendonce serve (flags and env win)
//! listen = "127.0.0.1:8025"
//! worker = true
//! drain = "30s"
//! body_limit = 1048576
//! request_timeout = "60s"
//! body_timeout = "10s"
//! max_connections = 512
//! ```

use sendonce_domain::address::Channel;
use sendonce_domain::error::{Error, Result};
use serde::Deserialize;
use std::path::{Path, PathBuf};

/// The parsed file.
#[derive(Debug, Clone, Default, Deserialize)]
#[serde(deny_unknown_fields)]
pub struct Config {
    /// Database file: the default of `--db` when neither the flag nor `SENDONCE_DB` is given.
    pub db: Option<PathBuf>,
    /// Provider for anything no route matches.
    pub provider: Option<String>,
    /// Public base URL of this sender: where `{{ unsubscribe_url }}` points.
    pub public_url: Option<String>,
    /// What `sendonce serve` takes from the file.
    #[serde(default)]
    pub serve: Serve,
    #[serde(default)]
    pub route: Vec<Route>,
    /// Provider webhooks `sendonce serve` accepts (`/hooks/{source}/{account}`).
    #[serde(default)]
    pub webhook: Vec<Webhook>,
    /// Events out: the feed's retention and where webhook deliveries may go.
    #[serde(default)]
    pub events: EventsFile,
    /// Consent records: how much of a client's address they keep.
    #[serde(default)]
    pub privacy: PrivacyFile,
}

/// `[privacy]`: how much of a client's IP address a consent record keeps.
#[derive(Debug, Clone, Default, Deserialize)]
#[serde(deny_unknown_fields)]
pub struct PrivacyFile {
    /// `store`, `truncate` (the default: IPv4 /24, IPv6 /48) or `omit`.
    pub consent_ip: Option<String>,
}

/// `[events]`: how long events are kept, and the inside networks webhook deliveries may reach
/// (by default none: loopback, private, link-local and metadata addresses are refused).
#[derive(Debug, Clone, Default, Deserialize)]
#[serde(deny_unknown_fields)]
pub struct EventsFile {
    /// `30d` by default; at least `4d` (longer than a delivery's retries), at most `30d`.
    pub retention: Option<String>,
    /// Networks or addresses, comma-separated: `127.0.0.1, 10.0.0.0/8`.
    pub allow: Option<String>,
    /// The first retry's delay of a failed webhook delivery (`5s`; doubles after each failure,
    /// at most 6 h apart, for three days).
    pub retry_base: Option<String>,
}

/// `[[webhook]]`: one provider webhook of one account. The secret (Twilio auth token, Postmark
/// `user:password`, Resend or Standard Webhooks `whsec_...` signing secret, Mailgun webhook
/// signing key, SendGrid verification key, Brevo `user:password` or bearer token) is read from
/// an environment variable or a file, never written here. Amazon SES (through SNS) has no
/// secret: its signing certificate (`certificate_file`, PEM) and topic (`topic_arn`).
#[derive(Debug, Clone, Deserialize)]
#[serde(deny_unknown_fields)]
pub struct Webhook {
    pub account: AccountRef,
    /// `twilio`, `postmark`, `resend`, `standard`, `mailgun`, `sendgrid`, `brevo` or `ses`.
    pub source: String,
    pub secret_env: Option<String>,
    pub secret_file: Option<PathBuf>,
    /// `ses`: the SNS signing certificate (PEM), as downloaded from the `SigningCertURL`.
    pub certificate_file: Option<PathBuf>,
    /// `ses`: the ARN of the SNS topic the account's SES notifications are published to.
    pub topic_arn: Option<String>,
}

/// The fields of `[[webhook]]` entry `n` that go with its source.
fn check_webhook(n: usize, w: &Webhook) -> Result<()> {
    use sendonce_domain::webhook::Source;
    let Some(source) = Source::parse(&w.source) else {
        return Err(Error::invalid(format!(
            "webhook {n}: unknown source {:?} ({})",
            w.source,
            Source::hook_names()
        )));
    };
    if source == Source::Ses {
        if w.secret_env.is_some() || w.secret_file.is_some() {
            return Err(Error::invalid(format!(
                "webhook {n} (ses): SNS signs with a certificate, there is no secret: give \
                 certificate_file and topic_arn"
            )));
        }
        if w.certificate_file.is_none() || w.topic_arn.as_deref().is_none_or(str::is_empty) {
            return Err(Error::invalid(format!(
                "webhook {n} (ses): give certificate_file (the SNS signing certificate, PEM) \
                 and topic_arn (the topic SES publishes to)"
            )));
        }
        return Ok(());
    }
    if w.certificate_file.is_some() || w.topic_arn.is_some() {
        return Err(Error::invalid(format!(
            "webhook {n}: certificate_file and topic_arn are for source \"ses\" only"
        )));
    }
    if w.secret_env.is_some() == w.secret_file.is_some() {
        return Err(Error::invalid(format!(
            "webhook {n}: give exactly one of secret_env and secret_file"
        )));
    }
    Ok(())
}

/// `[serve]`: settings of `sendonce serve`. A flag or its environment variable wins over the
/// file, and the file over the built-in default.
#[derive(Debug, Clone, Default, Deserialize)]
#[serde(deny_unknown_fields)]
pub struct Serve {
    pub listen: Option<String>,
    /// Run the send loop in the server's process.
    pub worker: Option<bool>,
    pub drain: Option<String>,
    pub body_limit: Option<usize>,
    pub request_timeout: Option<String>,
    pub body_timeout: Option<String>,
    pub max_connections: Option<usize>,
}

/// One routing rule. The most specific matching rule wins (account and channel, then account,
/// then channel, then the default).
#[derive(Debug, Clone, Deserialize)]
#[serde(deny_unknown_fields)]
pub struct Route {
    pub account: Option<AccountRef>,
    pub channel: Option<String>,
    pub provider: String,
    /// `10/s`, `600/m`, `5000/h`.
    pub rate: Option<String>,
    pub burst: Option<u32>,
    pub concurrency: Option<usize>,
}

/// An account by id or by name.
#[derive(Debug, Clone, Deserialize, PartialEq)]
#[serde(untagged)]
pub enum AccountRef {
    Id(i64),
    Name(String),
}

impl Route {
    fn channel(&self) -> Result<Option<Channel>> {
        self.channel.as_deref().map(str::parse).transpose()
    }

    /// How specific this route is for (account, channel), or None if it does not match.
    fn score(&self, account_id: i64, account_name: &str, channel: Channel) -> Option<u8> {
        let acct = match &self.account {
            None => false,
            Some(AccountRef::Id(id)) if *id == account_id => true,
            Some(AccountRef::Name(n)) if n == account_name => true,
            Some(_) => return None,
        };
        let ch = match self.channel().ok().flatten() {
            None => false,
            Some(c) if c == channel => true,
            Some(_) => return None,
        };
        Some((acct as u8) * 2 + ch as u8)
    }
}

impl Config {
    /// The config file [`discover`] finds (`path` is `--config`, which wins), parsed; None when
    /// no candidate exists. A named file that does not exist is an error naming it.
    pub fn load(path: Option<&Path>) -> Result<Option<Config>> {
        let found = discover(path, &process_env)?;
        found.chosen.as_deref().map(Config::read).transpose()
    }

    /// Read and parse one file; an error names the file (and, for syntax and type errors, the
    /// line and column).
    pub fn read(path: &Path) -> Result<Config> {
        let text = std::fs::read_to_string(path)
            .map_err(|e| Error::io(&format!("cannot read config {}", path.display()), e))?;
        Config::parse(&text).map_err(|e| e.context(&format!("config {}", path.display())))
    }

    /// The value of a scalar setting of [`SETTINGS`] (`serve.listen`...), as text.
    pub fn get(&self, key: &str) -> Option<String> {
        let s = &self.serve;
        match key {
            "db" => self.db.as_ref().map(|p| p.display().to_string()),
            "provider" => self.provider.clone(),
            "public_url" => self.public_url.clone(),
            "serve.listen" => s.listen.clone(),
            "serve.worker" => s.worker.map(|w| w.to_string()),
            "serve.drain" => s.drain.clone(),
            "serve.body_limit" => s.body_limit.map(|n| n.to_string()),
            "serve.request_timeout" => s.request_timeout.clone(),
            "serve.body_timeout" => s.body_timeout.clone(),
            "serve.max_connections" => s.max_connections.map(|n| n.to_string()),
            "events.retention" => self.events.retention.clone(),
            "events.allow" => self.events.allow.clone(),
            "events.retry_base" => self.events.retry_base.clone(),
            "privacy.consent_ip" => self.privacy.consent_ip.clone(),
            _ => None,
        }
    }

    pub fn parse(text: &str) -> Result<Config> {
        let cfg: Config = toml::from_str(text).map_err(|e| Error::invalid(toml_error(text, &e)))?;
        for (i, r) in cfg.route.iter().enumerate() {
            let n = i + 1;
            r.channel().map_err(|e| e.context(&format!("route {n}")))?;
            if let Some(rate) = &r.rate {
                crate::worker::ratelimit::parse_rate(rate)
                    .map_err(|e| e.context(&format!("route {n}")))?;
            }
            if r.burst.is_some() && r.rate.is_none() {
                return Err(Error::invalid(format!("route {n}: burst without rate")));
            }
            if r.burst == Some(0) {
                return Err(Error::invalid(format!(
                    "route {n}: burst must be at least 1 (it is how many sends may go at once)"
                )));
            }
            if r.concurrency == Some(0) {
                return Err(Error::invalid(format!(
                    "route {n}: concurrency must be at least 1"
                )));
            }
        }
        for (i, w) in cfg.webhook.iter().enumerate() {
            let n = i + 1;
            check_webhook(n, w)?;
        }
        Ok(cfg)
    }

    /// The route for a campaign's account and channel (index into `route`), if any matches.
    pub fn route_for(
        &self,
        account_id: i64,
        account_name: &str,
        channel: Channel,
    ) -> Option<usize> {
        self.route
            .iter()
            .enumerate()
            .filter_map(|(i, r)| r.score(account_id, account_name, channel).map(|s| (s, i)))
            .max_by_key(|&(s, i)| (s, std::cmp::Reverse(i)))
            .map(|(_, i)| i)
    }
}

/// The environment variable naming the config file (as `--config` does).
pub const CONFIG_ENV: &str = "SENDONCE_CONFIG";

/// The system-wide config file, the last candidate.
pub const SYSTEM_FILE: &str = "/etc/sendonce/sendonce.toml";

/// One scalar setting of the file, with the environment variable that sets it too (a flag of
/// the same meaning wins over both; the file wins over the built-in default).
#[derive(Debug, Clone, Copy)]
pub struct Setting {
    /// Its key in the file (`serve.listen` is `listen` under `[serve]`).
    pub key: &'static str,
    pub env: &'static str,
    /// The command-line flag of the commands that take it.
    pub flag: &'static str,
    /// Built-in default, if any.
    pub default: Option<&'static str>,
}

/// Every scalar setting. `[[route]]` and `[[webhook]]` are tables: they are set in the file only.
pub const SETTINGS: &[Setting] = &[
    Setting {
        key: "db",
        env: "SENDONCE_DB",
        flag: "--db",
        default: Some("./sendonce.db"),
    },
    Setting {
        key: "provider",
        env: "SENDONCE_PROVIDER",
        flag: "--provider",
        default: None,
    },
    Setting {
        key: "public_url",
        env: "SENDONCE_PUBLIC_URL",
        flag: "--public-url",
        default: None,
    },
    Setting {
        key: "serve.listen",
        env: "SENDONCE_LISTEN",
        flag: "--listen",
        default: Some("127.0.0.1:8025"),
    },
    Setting {
        key: "serve.worker",
        env: "SENDONCE_WORKER",
        flag: "--worker",
        default: Some("false"),
    },
    Setting {
        key: "serve.drain",
        env: "SENDONCE_DRAIN",
        flag: "--drain",
        default: Some("30s"),
    },
    Setting {
        key: "serve.body_limit",
        env: "SENDONCE_BODY_LIMIT",
        flag: "--body-limit",
        default: Some("1048576"),
    },
    Setting {
        key: "serve.request_timeout",
        env: "SENDONCE_REQUEST_TIMEOUT",
        flag: "--request-timeout",
        default: Some("60s"),
    },
    Setting {
        key: "serve.body_timeout",
        env: "SENDONCE_BODY_TIMEOUT",
        flag: "--body-timeout",
        default: Some("10s"),
    },
    Setting {
        key: "serve.max_connections",
        env: "SENDONCE_MAX_CONNECTIONS",
        flag: "--max-connections",
        default: Some("512"),
    },
    Setting {
        key: "events.retention",
        env: "SENDONCE_EVENTS_RETENTION",
        flag: "",
        default: Some("30d"),
    },
    Setting {
        key: "events.allow",
        env: "SENDONCE_EVENTS_ALLOW",
        flag: "",
        default: None,
    },
    Setting {
        key: "events.retry_base",
        env: "SENDONCE_EVENTS_RETRY_BASE",
        flag: "",
        default: Some("5s"),
    },
    Setting {
        key: "privacy.consent_ip",
        env: "SENDONCE_PRIVACY_CONSENT_IP",
        flag: "",
        default: Some("truncate"),
    },
];

/// Where one effective setting came from.
#[derive(Debug, Clone, PartialEq, Eq, serde::Serialize)]
#[serde(tag = "kind", content = "name", rename_all = "snake_case")]
pub enum Origin {
    /// A command-line flag (its name).
    Flag(String),
    /// An environment variable (its name).
    Env(String),
    /// The config file (its path).
    File(PathBuf),
    /// The built-in default.
    Default,
}

impl std::fmt::Display for Origin {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        match self {
            Origin::Flag(n) => write!(f, "flag {n}"),
            Origin::Env(n) => write!(f, "env {n}"),
            Origin::File(p) => write!(f, "file {}", p.display()),
            Origin::Default => f.write_str("default"),
        }
    }
}

/// How the config file was chosen.
#[derive(Debug, Clone, Copy, PartialEq, Eq, serde::Serialize)]
#[serde(rename_all = "snake_case")]
pub enum Chosen {
    /// `--config` (or `SENDONCE_CONFIG` through a command's flag).
    Flag,
    /// `SENDONCE_CONFIG`.
    Env,
    /// The first of the search path that exists.
    Search,
    /// No file.
    None,
}

/// What [`discover`] looked at and what it chose.
#[derive(Debug, Clone)]
pub struct Discovery {
    pub chosen: Option<PathBuf>,
    pub how: Chosen,
    /// The search path, in order (empty when a file was named).
    pub candidates: Vec<PathBuf>,
}

/// The process's environment, for [`discover`].
pub fn process_env(name: &str) -> Option<String> {
    std::env::var(name).ok()
}

/// The search path: `./sendonce.toml`, `$XDG_CONFIG_HOME/sendonce/sendonce.toml` (default
/// `~/.config`; skipped without either variable), then [`SYSTEM_FILE`].
pub fn search_path(env: &dyn Fn(&str) -> Option<String>) -> Vec<PathBuf> {
    let mut out = vec![PathBuf::from("./sendonce.toml")];
    let xdg = env("XDG_CONFIG_HOME")
        .filter(|v| Path::new(v).is_absolute())
        .map(PathBuf::from)
        .or_else(|| {
            env("HOME")
                .filter(|h| !h.is_empty())
                .map(|h| Path::new(&h).join(".config"))
        });
    if let Some(dir) = xdg {
        out.push(dir.join("sendonce").join("sendonce.toml"));
    }
    out.push(PathBuf::from(SYSTEM_FILE));
    out
}

/// Which config file applies: `explicit` (`--config`), then `SENDONCE_CONFIG`, then the first
/// of [`search_path`] that exists. A named file (flag or variable) that does not exist is an
/// error naming it; no file at all is not an error.
pub fn discover(
    explicit: Option<&Path>,
    env: &dyn Fn(&str) -> Option<String>,
) -> Result<Discovery> {
    let named = match explicit {
        // A command's --config takes SENDONCE_CONFIG too (clap's `env`): say which it was.
        Some(p) if env(CONFIG_ENV).is_some_and(|v| Path::new(&v) == p) => {
            Some((p.to_path_buf(), Chosen::Env, CONFIG_ENV))
        }
        Some(p) => Some((p.to_path_buf(), Chosen::Flag, "--config")),
        None => env(CONFIG_ENV)
            .filter(|v| !v.is_empty())
            .map(|v| (PathBuf::from(v), Chosen::Env, CONFIG_ENV)),
    };
    if let Some((path, how, what)) = named {
        if !path.exists() {
            return Err(Error::invalid(format!(
                "config file {} (from {what}) does not exist",
                path.display()
            )));
        }
        return Ok(Discovery {
            chosen: Some(path),
            how,
            candidates: Vec::new(),
        });
    }
    let candidates = search_path(env);
    let chosen = candidates.iter().find(|p| p.exists()).cloned();
    let how = if chosen.is_some() {
        Chosen::Search
    } else {
        Chosen::None
    };
    Ok(Discovery {
        chosen,
        how,
        candidates,
    })
}

/// A TOML error in one line: `line L, column C: what` (the toml crate's own text spans several
/// lines with a snippet of the file, which may hold anything).
fn toml_error(text: &str, e: &toml::de::Error) -> String {
    let what = e.message().trim();
    match e.span() {
        Some(span) => {
            let before = text.get(..span.start).unwrap_or(text);
            let line = before.matches('\n').count() + 1;
            let column = before.rsplit('\n').next().map_or(0, |l| l.chars().count()) + 1;
            format!("line {line}, column {column}: {what}")
        }
        None => what.to_string(),
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    const EXAMPLE: &str = r#"
provider = "outbox:/tmp/o.jsonl"
[[route]]
channel = "sms"
provider = "null"
[[route]]
account = "acme"
provider = "outbox:/tmp/acme.jsonl"
rate = "10/s"
burst = 20
[[route]]
account = 7
channel = "email"
provider = "null"
concurrency = 4
"#;

    #[test]
    fn discovery_follows_the_documented_order() {
        let dir = tempfile::tempdir().unwrap();
        let xdg = dir.path().join("xdg");
        let home = dir.path().join("home");
        let vars = |xdg_value: Option<&str>, config: Option<&str>| {
            let xdg_value = xdg_value.map(str::to_string);
            let config = config.map(str::to_string);
            let home = home.display().to_string();
            move |k: &str| match k {
                "XDG_CONFIG_HOME" => xdg_value.clone(),
                "HOME" => Some(home.clone()),
                CONFIG_ENV => config.clone(),
                _ => None,
            }
        };
        let x = xdg.display().to_string();
        let path = search_path(&vars(Some(&x), None));
        assert_eq!(path[1], xdg.join("sendonce/sendonce.toml"));
        assert_eq!(path[2], Path::new(SYSTEM_FILE));
        // A relative XDG_CONFIG_HOME is ignored (XDG base directory spec): ~/.config.
        let path = search_path(&vars(Some("rel"), None));
        assert_eq!(path[1], home.join(".config/sendonce/sendonce.toml"));
        // A named file that does not exist is an error naming it and where it came from.
        let missing = dir.path().join("missing.toml");
        let m = missing.display().to_string();
        let e = discover(None, &vars(None, Some(&m))).unwrap_err();
        assert!(
            e.message.contains(&m) && e.message.contains(CONFIG_ENV),
            "{}",
            e.message
        );
        let e = discover(Some(&missing), &vars(None, None)).unwrap_err();
        assert!(e.message.contains("--config"), "{}", e.message);
        // The flag wins over the variable.
        let named = dir.path().join("named.toml");
        std::fs::write(&named, "").unwrap();
        let d = discover(Some(&named), &vars(None, Some(&m))).unwrap();
        assert_eq!(
            (d.chosen.as_deref(), d.how),
            (Some(named.as_path()), Chosen::Flag)
        );
    }

    #[test]
    fn parse_errors_give_line_and_column_on_one_line() {
        let e = Config::parse("provider = \"x\"\n\n[serve]\nlisten = 1\n").unwrap_err();
        assert!(
            e.message.starts_with("line 4, column 10: "),
            "{}",
            e.message
        );
        assert!(!e.message.contains('\n'), "{}", e.message);
    }

    #[test]
    fn most_specific_route_wins() {
        let c = Config::parse(EXAMPLE).unwrap();
        assert_eq!(c.route_for(1, "acme", Channel::Email), Some(1));
        assert_eq!(
            c.route_for(1, "acme", Channel::Sms),
            Some(1),
            "account beats channel"
        );
        assert_eq!(c.route_for(2, "other", Channel::Sms), Some(0));
        assert_eq!(c.route_for(2, "other", Channel::Email), None);
        assert_eq!(c.route_for(7, "seven", Channel::Email), Some(2));
    }

    #[test]
    fn bad_files_name_the_problem() {
        assert!(Config::parse("providr = \"x\"")
            .unwrap_err()
            .message
            .contains("providr"));
        let e = Config::parse("[[route]]\nprovider = \"null\"\nchannel = \"fax\"").unwrap_err();
        assert!(
            e.message.contains("route 1") && e.message.contains("fax"),
            "{}",
            e.message
        );
        let e =
            Config::parse("[[route]]\nprovider = \"null\"\nrate = \"1/s\"\nburst = 0").unwrap_err();
        assert!(
            e.message.contains("burst must be at least 1"),
            "{}",
            e.message
        );
        let e = Config::parse("[[route]]\nprovider = \"null\"\nrate = \"lots\"").unwrap_err();
        assert!(e.message.contains("invalid rate"), "{}", e.message);
    }

    #[test]
    fn webhook_entries_are_checked() {
        let ok = "[[webhook]]\naccount = \"acme\"\nsource = \"resend\"\nsecret_env = \"X\"";
        assert_eq!(Config::parse(ok).unwrap().webhook.len(), 1);
        let e =
            Config::parse("[[webhook]]\naccount = 1\nsource = \"sparkpost\"\nsecret_env = \"X\"")
                .unwrap_err();
        assert!(
            e.message.contains("webhook 1: unknown source"),
            "{}",
            e.message
        );
        let e = Config::parse("[[webhook]]\naccount = 1\nsource = \"twilio\"").unwrap_err();
        assert!(
            e.message.contains("exactly one of secret_env"),
            "{}",
            e.message
        );
        let e = Config::parse("[[webhook]]\naccount = 1\nsource = \"twilio\"\nsecret = \"s\"")
            .unwrap_err();
        assert!(e.message.contains("secret"), "{}", e.message);
        for name in ["mailgun", "sendgrid", "brevo"] {
            let ok = format!("[[webhook]]\naccount = 1\nsource = \"{name}\"\nsecret_env = \"X\"");
            assert_eq!(Config::parse(&ok).unwrap().webhook.len(), 1, "{name}");
        }
        let ses = "[[webhook]]\naccount = 1\nsource = \"ses\"\ncertificate_file = \"c.pem\"\n\
                   topic_arn = \"arn:aws:sns:us-east-1:123456789012:bounces\"";
        assert_eq!(Config::parse(ses).unwrap().webhook.len(), 1);
        let e = Config::parse(&format!("{ses}\nsecret_env = \"X\"")).unwrap_err();
        assert!(e.message.contains("no secret"), "{}", e.message);
        let e =
            Config::parse("[[webhook]]\naccount = 1\nsource = \"ses\"\ncertificate_file = \"c\"")
                .unwrap_err();
        assert!(e.message.contains("topic_arn"), "{}", e.message);
        let e = Config::parse(
            "[[webhook]]\naccount = 1\nsource = \"brevo\"\nsecret_env = \"X\"\ntopic_arn = \"a\"",
        )
        .unwrap_err();
        assert!(
            e.message.contains("for source \"ses\" only"),
            "{}",
            e.message
        );
        let e = Config::parse("[[webhook]]\naccount = 1\nsource = \"dsn\"\nsecret_env = \"X\"")
            .unwrap_err();
        assert!(e.message.contains("unknown source"), "{}", e.message);
    }
}
