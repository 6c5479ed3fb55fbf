//! The TOML configuration file (`--config`, default `./sendonce.toml` when present): which
//! provider serves which account and channel, with optional rate limits and concurrency caps.
//! Secrets never live here: each provider reads them from environment variables or files.
//!
//! ```toml
//! provider = "outbox:./outbox.jsonl"        # default for everything else
//! public_url = "https://news.example.org"   # {{ unsubscribe_url }} is public_url/u/TOKEN
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
//! ```

use crate::domain::address::Channel;
use crate::error::{Error, Result};
use serde::Deserialize;
use std::path::{Path, PathBuf};

/// The parsed file.
#[derive(Debug, Clone, Default, Deserialize)]
#[serde(deny_unknown_fields)]
pub struct Config {
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
}

/// `[[webhook]]`: one provider webhook of one account. The secret (Twilio auth token, Postmark
/// `user:password`, Resend or Standard Webhooks `whsec_...` signing secret) is read from an
/// environment variable or a file, never written here.
#[derive(Debug, Clone, Deserialize)]
#[serde(deny_unknown_fields)]
pub struct Webhook {
    pub account: AccountRef,
    /// `twilio`, `postmark`, `resend` or `standard`.
    pub source: String,
    pub secret_env: Option<String>,
    pub secret_file: Option<PathBuf>,
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
    /// Load `path`, or `./sendonce.toml` if `path` is None and that file exists.
    pub fn load(path: Option<&Path>) -> Result<Option<Config>> {
        let path: PathBuf = match path {
            Some(p) => p.to_path_buf(),
            None => {
                let p = PathBuf::from("sendonce.toml");
                if !p.exists() {
                    return Ok(None);
                }
                p
            }
        };
        let text = std::fs::read_to_string(&path)
            .map_err(|e| Error::io(&format!("cannot read config {}", path.display()), e))?;
        let cfg =
            Config::parse(&text).map_err(|e| e.context(&format!("config {}", path.display())))?;
        Ok(Some(cfg))
    }

    pub fn parse(text: &str) -> Result<Config> {
        let cfg: Config = toml::from_str(text).map_err(|e| Error::invalid(e.to_string()))?;
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
            if crate::domain::webhook::Source::parse(&w.source).is_none() {
                return Err(Error::invalid(format!(
                    "webhook {n}: unknown source {:?} (twilio, postmark, resend, standard)",
                    w.source
                )));
            }
            if w.secret_env.is_some() == w.secret_file.is_some() {
                return Err(Error::invalid(format!(
                    "webhook {n}: give exactly one of secret_env and secret_file"
                )));
            }
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
        let e = Config::parse("[[webhook]]\naccount = 1\nsource = \"mailgun\"\nsecret_env = \"X\"")
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
    }
}
