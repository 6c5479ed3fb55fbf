//! `sendonce config show` and `config example`: the config file chosen (and the candidates
//! looked at), every scalar setting's effective value with where it came from, and each secret
//! the program reads told only as "set (N chars)" or "not set", never its value.

use crate::config::{self, Chosen, Config, Origin, SETTINGS};
use sendonce_domain::error::Result;
use serde::Serialize;
use std::path::{Path, PathBuf};

/// The commented example file (the Debian package's `/etc/sendonce/sendonce.toml`).
pub const EXAMPLE: &str = include_str!("../config.example.toml");

/// What `config show` prints.
#[derive(Debug, Serialize)]
pub struct Shown {
    /// The file in effect, if any.
    pub config_file: Option<PathBuf>,
    /// flag, env, search or none.
    pub chosen_by: Chosen,
    /// The search path looked at, in order (empty when a file was named).
    pub candidates: Vec<Candidate>,
    pub settings: Vec<Effective>,
    /// `[[route]]` and `[[webhook]]` entries of the file (tables: file only).
    pub routes: usize,
    pub webhooks: usize,
    pub secrets: Vec<SecretState>,
}

#[derive(Debug, Serialize)]
pub struct Candidate {
    pub path: PathBuf,
    pub exists: bool,
}

/// One setting: its value (URLs with userinfo masked) and its source.
#[derive(Debug, Serialize)]
pub struct Effective {
    pub key: &'static str,
    pub env: &'static str,
    pub value: Option<String>,
    pub from: Origin,
}

/// One secret: the variable (or file) it is read from, and whether it is set.
#[derive(Debug, Serialize)]
pub struct SecretState {
    /// Environment variable, or `secret_file` path for a webhook.
    pub name: String,
    /// What reads it.
    pub used_by: String,
    /// `set (N chars)`, `not set`, `file exists`, `file missing`.
    pub state: String,
}

/// The environment variable with the Standard Webhooks / Svix secret the fake provider signs its
/// callbacks with.
pub const FAKE_WEBHOOK_SECRET_ENV: &str = "SENDONCE_FAKE_WEBHOOK_SECRET";
/// The environment variable with the fake provider's Postmark callback `user:password`.
pub const FAKE_POSTMARK_AUTH_ENV: &str = "SENDONCE_FAKE_POSTMARK_AUTH";

/// The fake provider's Mailgun callback signing key.
pub const FAKE_MAILGUN_KEY_ENV: &str = "SENDONCE_FAKE_MAILGUN_KEY";
/// The fake provider's Brevo callback credential (`user:password` or a bearer token).
pub const FAKE_BREVO_AUTH_ENV: &str = "SENDONCE_FAKE_BREVO_AUTH";
/// The file with the fake provider's SendGrid callback signing key (P-256, PKCS#8 DER).
pub const FAKE_SENDGRID_KEY_FILE_ENV: &str = "SENDONCE_FAKE_SENDGRID_KEY_FILE";
/// The file with the fake provider's SNS signing key (RSA, PKCS#8 DER) for SES callbacks.
pub const FAKE_SNS_KEY_FILE_ENV: &str = "SENDONCE_FAKE_SNS_KEY_FILE";

/// The environment variables of secrets the program reads, and what reads each.
pub const SECRET_VARS: &[(&str, &str)] = &[
    ("SENDONCE_SMTP_PASSWORD", "smtp provider"),
    (crate::provider::twilio::AUTH_TOKEN_ENV, "twilio provider"),
    (crate::provider::resend::API_KEY_ENV, "resend provider"),
    (crate::provider::postmark::TOKEN_ENV, "postmark provider"),
    (
        sendonce_domain::links::SECRET_ENV,
        "unsubscribe and confirm links",
    ),
    (
        sendonce_domain::links::OLD_SECRETS_ENV,
        "links sealed with older keys",
    ),
    (FAKE_WEBHOOK_SECRET_ENV, "fake-provider callbacks"),
    (FAKE_POSTMARK_AUTH_ENV, "fake-provider callbacks"),
    (FAKE_MAILGUN_KEY_ENV, "fake-provider callbacks"),
    (FAKE_BREVO_AUTH_ENV, "fake-provider callbacks"),
    (
        FAKE_SENDGRID_KEY_FILE_ENV,
        "fake-provider callbacks (a key file)",
    ),
    (
        FAKE_SNS_KEY_FILE_ENV,
        "fake-provider callbacks (a key file)",
    ),
];

/// The effective settings. `explicit` is `config show --config`; `db` is the database path the
/// command settled on and where it came from (flag, SENDONCE_DB, the file, the default).
pub fn show(
    explicit: Option<&Path>,
    db: (&Path, &Origin),
    env: &dyn Fn(&str) -> Option<String>,
) -> Result<Shown> {
    let found = config::discover(explicit, env)?;
    let file = found.chosen.as_deref().map(Config::read).transpose()?;
    let secret_values = secret_values(file.as_ref(), env);
    let mask = |v: String| mask_value(&v, &secret_values);
    let mut settings = Vec::new();
    for s in SETTINGS {
        let (value, from) = if s.key == "db" {
            (Some(db.0.display().to_string()), db.1.clone())
        } else if let Some(v) = env(s.env).filter(|v| !v.is_empty()) {
            (Some(v), Origin::Env(s.env.to_string()))
        } else if let (Some(v), Some(path)) = (
            file.as_ref().and_then(|f| f.get(s.key)),
            found.chosen.as_ref(),
        ) {
            (Some(v), Origin::File(path.clone()))
        } else {
            (s.default.map(str::to_string), Origin::Default)
        };
        settings.push(Effective {
            key: s.key,
            env: s.env,
            value: value.map(mask),
            from,
        });
    }
    let secrets = secret_states(file.as_ref(), env);
    Ok(Shown {
        config_file: found.chosen.clone(),
        chosen_by: found.how,
        candidates: found
            .candidates
            .iter()
            .map(|p| Candidate {
                path: p.clone(),
                exists: p.exists(),
            })
            .collect(),
        settings,
        routes: file.as_ref().map_or(0, |f| f.route.len()),
        webhooks: file.as_ref().map_or(0, |f| f.webhook.len()),
        secrets,
    })
}

/// Each secret variable (and each webhook's secret) as set or not, never its value.
fn secret_states(file: Option<&Config>, env: &dyn Fn(&str) -> Option<String>) -> Vec<SecretState> {
    let mut secrets: Vec<SecretState> = SECRET_VARS
        .iter()
        .map(|(name, used_by)| SecretState {
            name: name.to_string(),
            used_by: used_by.to_string(),
            state: told(env(name)),
        })
        .collect();
    secrets.extend(webhook_states(file, env, &|_| true));
    secrets
}

/// The secrets of one account's webhooks (`ours` tells whether a webhook's account is it):
/// all of the settings an account's admin sees. The server's other settings, and other
/// accounts' webhooks, are an operator's (`admin create --operator`).
pub fn account_secrets(
    file: Option<&Config>,
    env: &dyn Fn(&str) -> Option<String>,
    ours: &dyn Fn(&config::AccountRef) -> bool,
) -> Vec<SecretState> {
    webhook_states(file, env, &|w| ours(&w.account))
}

/// The secret of each webhook `keep` keeps, numbered among those kept.
fn webhook_states(
    file: Option<&Config>,
    env: &dyn Fn(&str) -> Option<String>,
    keep: &dyn Fn(&config::Webhook) -> bool,
) -> Vec<SecretState> {
    let mut secrets = Vec::new();
    let kept = file
        .into_iter()
        .flat_map(|f| f.webhook.iter())
        .filter(|w| keep(w));
    for (i, w) in kept.enumerate() {
        let used_by = format!("webhook {} ({})", i + 1, w.source);
        if let Some(var) = &w.secret_env {
            secrets.push(SecretState {
                name: var.clone(),
                used_by,
                state: told(env(var)),
            });
        } else if let Some(path) = w.secret_file.as_ref().or(w.certificate_file.as_ref()) {
            // A secret file, or SES's signing certificate (public, but a file all the same).
            let state = if path.exists() {
                "file exists"
            } else {
                "file missing"
            };
            secrets.push(SecretState {
                name: path.display().to_string(),
                used_by,
                state: state.to_string(),
            });
        }
    }
    secrets
}

/// "set (N chars)" or "not set".
fn told(value: Option<String>) -> String {
    match value {
        Some(v) if !v.is_empty() => format!("set ({} chars)", v.chars().count()),
        Some(_) => "set but empty".to_string(),
        None => "not set".to_string(),
    }
}

/// Values of every secret variable that is set (and long enough to mean something), so that a
/// setting that happens to contain one is masked too.
fn secret_values(file: Option<&Config>, env: &dyn Fn(&str) -> Option<String>) -> Vec<String> {
    let names = SECRET_VARS.iter().map(|(n, _)| n.to_string()).chain(
        file.iter()
            .flat_map(|f| f.webhook.iter())
            .filter_map(|w| w.secret_env.clone()),
    );
    names
        .filter_map(|n| env(&n))
        .map(|v| v.trim().to_string())
        .filter(|v| v.len() >= 4)
        .collect()
}

/// A value as shown: the userinfo of any URL in it replaced by `***`, and any secret value in
/// it replaced by `***`.
pub fn mask_value(value: &str, secrets: &[String]) -> String {
    let mut out = mask_userinfo(value);
    for s in secrets {
        if out.contains(s.as_str()) {
            out = out.replace(s.as_str(), "***");
        }
    }
    out
}

/// `scheme://user:pass@host/...` → `scheme://***@host/...`, for every URL in the text.
pub fn mask_userinfo(text: &str) -> String {
    let mut out = String::new();
    let mut rest = text;
    while let Some(i) = rest.find("://") {
        let (head, tail) = rest.split_at(i + 3);
        out.push_str(head);
        let end = tail.find(['/', '?', '#', ' ']).unwrap_or(tail.len());
        let authority = &tail[..end];
        match authority.rfind('@') {
            Some(at) => {
                out.push_str("***");
                out.push_str(&authority[at..]);
            }
            None => out.push_str(authority),
        }
        rest = &tail[end..];
    }
    out.push_str(rest);
    out
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn userinfo_is_masked_in_every_url() {
        assert_eq!(
            mask_userinfo("webhook:https://u:p@h.example/x?y=1"),
            "webhook:https://***@h.example/x?y=1"
        );
        assert_eq!(
            mask_userinfo("smtp://mailer@smtp.example:587?tls=tls"),
            "smtp://***@smtp.example:587?tls=tls"
        );
        assert_eq!(
            mask_userinfo("https://news.example"),
            "https://news.example"
        );
        assert_eq!(mask_value("a-secret-b", &["secret".into()]), "a-***-b");
    }

    #[test]
    fn the_example_parses_and_so_does_every_commented_setting() {
        let cfg = Config::parse(EXAMPLE).unwrap();
        assert_eq!(cfg.serve.listen.as_deref(), Some("127.0.0.1:8025"));
        // Uncomment every `# key = value` and `# [table]` line: still a valid file, with a
        // route, two webhooks (the second one SES's), a db and a provider.
        let re = regex_lite_uncomment(EXAMPLE);
        let all = Config::parse(&re).unwrap_or_else(|e| panic!("{}\n{re}", e.message));
        assert_eq!((all.route.len(), all.webhook.len()), (1, 2));
        assert!(all.db.is_some() && all.provider.is_some() && all.public_url.is_some());
        assert_eq!(all.serve.worker, Some(true));
    }

    fn regex_lite_uncomment(text: &str) -> String {
        text.lines()
            .map(|l| match l.strip_prefix("# ") {
                Some(r)
                    if r.starts_with('[')
                        || r.split_once(" = ").is_some_and(|(k, _)| {
                            !k.is_empty() && k.chars().all(|c| c.is_ascii_lowercase() || c == '_')
                        }) =>
                {
                    r.to_string()
                }
                _ => l.to_string(),
            })
            .collect::<Vec<_>>()
            .join("\n")
    }
}
