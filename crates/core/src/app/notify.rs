//! `sendonce notify`: one message per recipient per CI job, exactly once across retries and
//! re-runs. The idempotency key comes from the CI environment (or `--key`); the ledger lives in
//! a small state database; the provider's own idempotency key covers ephemeral runners.

use crate::{provider, worker};
use sendonce_domain::address::{normalize_email, normalize_phone, Channel};
use sendonce_domain::error::{Error, Result};
use sendonce_domain::{clock, model};
use sendonce_store::prelude::*;
use sendonce_store::{Ledger, NotifyRow, OpenOptions, Store, Target};
use serde::Serialize;
use std::path::{Path, PathBuf};
use std::sync::Arc;

/// What to send, validated by the CLI layer.
#[derive(Debug, Clone)]
pub struct Request {
    pub to: Vec<String>,
    pub message: String,
    pub subject: Option<String>,
    pub from: Option<String>,
    pub key: Option<String>,
    pub channel: Option<Channel>,
    pub provider: Option<String>,
    pub state: Option<Target>,
    pub dry_run: bool,
}

/// One recipient's result.
#[derive(Debug, Clone, Serialize)]
pub struct Recipient {
    pub to: String,
    pub channel: Channel,
    pub job_id: String,
    pub idempotency_key: String,
    /// `sent`, `already_sent`, `in_doubt`, `failed`, `pending` (dry run: `would_send`).
    pub outcome: String,
    pub sent_at: Option<String>,
    pub provider_message_id: Option<String>,
    pub reason: Option<String>,
}

#[derive(Debug, Clone, Serialize)]
pub struct Report {
    pub key: String,
    /// Where the key came from: `--key`, or the CI system's name.
    pub key_source: String,
    pub state: PathBuf,
    pub dry_run: bool,
    pub recipients: Vec<Recipient>,
}

impl Report {
    pub fn text(&self) -> String {
        let mut t = String::new();
        for r in &self.recipients {
            let id = r.provider_message_id.as_deref().unwrap_or("-");
            let line = match r.outcome.as_str() {
                "sent" => format!("sent          {} ({}) id {id}", r.to, r.channel),
                "already_sent" => format!(
                    "already sent  {} ({}) at {} id {id}",
                    r.to,
                    r.channel,
                    r.sent_at.as_deref().unwrap_or("?")
                ),
                "would_send" => format!("would send    {} ({}) job {}", r.to, r.channel, r.job_id),
                "in_doubt" => format!(
                    "IN DOUBT      {} ({}): {} — the provider may or may not have it; check, then `sendonce --db {} doubts resolve`",
                    r.to,
                    r.channel,
                    r.reason.as_deref().unwrap_or("outcome unknown"),
                    self.state.display()
                ),
                other => format!(
                    "{:<13} {} ({}): {}",
                    other.to_uppercase(),
                    r.to,
                    r.channel,
                    r.reason.as_deref().unwrap_or("")
                ),
            };
            t.push_str(&line);
            t.push('\n');
        }
        t.push_str(&format!("key {} ({})", self.key, self.key_source));
        t
    }

    /// Counts for the exit code.
    pub fn outcome(&self) -> sendonce_domain::exit::Outcome {
        sendonce_domain::exit::Outcome {
            in_doubt: self
                .recipients
                .iter()
                .filter(|r| r.outcome == "in_doubt")
                .count() as u64,
            failed: self
                .recipients
                .iter()
                .filter(|r| r.outcome == "failed")
                .count() as u64,
        }
    }
}

/// A CI system and how its key is derived: the variables that stay the same when a job is
/// retried or re-run, and change for a new pipeline.
struct Ci {
    name: &'static str,
    /// Set (to anything non-empty) when running on this CI.
    detect: &'static str,
    /// Variables joined into the key, in order. All must be present.
    parts: &'static [&'static str],
}

/// The supported CI systems (docs/notify.md lists the same table).
const CIS: &[Ci] = &[
    Ci {
        name: "github-actions",
        detect: "GITHUB_ACTIONS",
        parts: &["GITHUB_REPOSITORY", "GITHUB_RUN_ID", "GITHUB_JOB"],
    },
    Ci {
        name: "gitlab-ci",
        detect: "GITLAB_CI",
        parts: &["CI_PROJECT_ID", "CI_PIPELINE_ID", "CI_JOB_NAME"],
    },
    Ci {
        name: "buildkite",
        detect: "BUILDKITE",
        parts: &["BUILDKITE_BUILD_ID", "BUILDKITE_STEP_ID"],
    },
    Ci {
        name: "circleci",
        detect: "CIRCLECI",
        parts: &["CIRCLE_PIPELINE_ID", "CIRCLE_JOB"],
    },
    Ci {
        name: "jenkins",
        detect: "JENKINS_URL",
        parts: &["JOB_NAME", "BUILD_NUMBER"],
    },
    // Woodpecker and Drone: a restarted pipeline gets a new number but names its parent.
    Ci {
        name: "woodpecker",
        detect: "CI_PIPELINE_NUMBER",
        parts: &[
            "CI_REPO",
            "CI_PIPELINE_PARENT|CI_PIPELINE_NUMBER",
            "CI_WORKFLOW_NAME",
            "CI_STEP_NAME",
        ],
    },
    Ci {
        name: "drone",
        detect: "DRONE",
        parts: &[
            "DRONE_REPO",
            "DRONE_BUILD_PARENT|DRONE_BUILD_NUMBER",
            "DRONE_STAGE_NAME",
            "DRONE_STEP_NAME",
        ],
    },
];

/// Derive the key from the CI environment. `Ok(None)` outside any known CI.
pub fn ci_key(env: &dyn Fn(&str) -> Option<String>) -> Result<Option<(String, &'static str)>> {
    let get = |k: &str| env(k).filter(|v| !v.trim().is_empty());
    for ci in CIS {
        if get(ci.detect).is_none() {
            continue;
        }
        let mut parts = Vec::new();
        for p in ci.parts {
            // `A|B`: A when set and not "0", else B.
            let value = p
                .split('|')
                .find_map(|k| get(k).filter(|v| v != "0"))
                .ok_or_else(|| {
                    Error::invalid(format!(
                        "running on {} but {} is not set; pass --key",
                        ci.name,
                        p.replace('|', " or ")
                    ))
                })?;
            parts.push(value);
        }
        return Ok(Some((format!("{}:{}", ci.name, parts.join(":")), ci.name)));
    }
    Ok(None)
}

/// The default state database: `$XDG_STATE_HOME/sendonce/notify.db`, else
/// `$HOME/.local/state/sendonce/notify.db`.
pub fn default_state(env: &dyn Fn(&str) -> Option<String>) -> Result<PathBuf> {
    let base = env("XDG_STATE_HOME")
        .filter(|v| v.starts_with('/'))
        .map(PathBuf::from)
        .or_else(|| {
            env("HOME")
                .filter(|v| !v.is_empty())
                .map(|h| Path::new(&h).join(".local/state"))
        })
        .ok_or_else(|| {
            Error::invalid("neither XDG_STATE_HOME nor HOME is set; pass --state PATH")
        })?;
    Ok(base.join("sendonce").join("notify.db"))
}

/// The channel of an address: `+` and digits is SMS, an `@` is email.
pub fn channel_of(address: &str, forced: Option<Channel>) -> Result<(Channel, String)> {
    let channel = match forced {
        Some(c) => c,
        None if address.trim_start().starts_with('+') => Channel::Sms,
        None if address.contains('@') => Channel::Email,
        None => {
            return Err(Error::invalid(format!(
                "cannot tell the channel of {address:?}: give an email address or an E.164 phone number (+14155550100), or --channel"
            )))
        }
    };
    let normal = match channel {
        Channel::Email => normalize_email(address)?.1,
        Channel::Sms => normalize_phone(address)?,
    };
    Ok((channel, normal))
}

fn recipient_from(row: &NotifyRow, before: Option<&str>) -> Recipient {
    let outcome = match (row.status.as_str(), before) {
        ("sent", Some("sent")) => "already_sent",
        ("sent", _) => "sent",
        ("in_doubt", _) => "in_doubt",
        ("failed", _) => "failed",
        ("suppressed", _) => "failed",
        _ => "pending",
    };
    Recipient {
        to: row.address.clone(),
        channel: row.channel,
        job_id: row.job_id.clone(),
        idempotency_key: model::idempotency_key(&row.job_id),
        outcome: outcome.into(),
        sent_at: row.sent_at.map(clock::format_ms),
        provider_message_id: row.provider_message_id.clone(),
        reason: row.reason.clone(),
    }
}

/// Recipients grouped per channel, normalised, without duplicates.
type Groups = Vec<(Channel, Vec<String>)>;

/// What a notification is keyed on and where its ledger lives, checked.
struct Plan {
    key: String,
    key_source: String,
    state: Target,
    groups: Groups,
}

/// Send (or, with `dry_run`, show) one notification.
pub fn run(
    req: &Request,
    env: &dyn Fn(&str) -> Option<String>,
    rt: &tokio::runtime::Runtime,
) -> Result<Report> {
    let plan = plan(req, env)?;
    let recipients = if req.dry_run {
        would_send(&plan)?
    } else {
        send(req, &plan, rt)?
    };
    Ok(Report {
        key: plan.key,
        key_source: plan.key_source,
        // A postgres:// ledger is shown without its password.
        state: PathBuf::from(plan.state.shown()),
        dry_run: req.dry_run,
        recipients,
    })
}

/// The request checked: a message, recipients, a key, a state file.
fn plan(req: &Request, env: &dyn Fn(&str) -> Option<String>) -> Result<Plan> {
    if req.message.trim().is_empty() {
        return Err(Error::invalid("the message is empty"));
    }
    if req.to.is_empty() {
        return Err(Error::invalid("no recipient: pass --to ADDRESS"));
    }
    let (key, key_source) = key_of(req, env)?;
    let groups = groups_of(req)?;
    if groups.iter().any(|(c, _)| *c == Channel::Email) {
        check_email_headers(req)?;
    }
    let state = match &req.state {
        Some(p) => p.clone(),
        None => Target::File(default_state(env)?),
    };
    Ok(Plan {
        key,
        key_source,
        state,
        groups,
    })
}

/// What an email's headers need before anything is recorded under the key: a provider's refusal
/// of them would be permanent and burn the key, although the user can fix them (a re-run with a
/// good `--from` must send, not answer FAILED). Whether a sender is needed at all is the
/// provider's to say (`send`).
fn check_email_headers(req: &Request) -> Result<()> {
    if let Some(from) = req.from.as_deref() {
        sendonce_domain::headers::parse_mailbox("--from", from).map_err(Error::invalid)?;
    }
    if let Some(subject) = req.subject.as_deref() {
        sendonce_domain::headers::check_text(
            "--subject",
            subject,
            sendonce_domain::headers::MAX_SUBJECT_BYTES,
        )
        .map_err(Error::invalid)?;
    }
    Ok(())
}

/// The idempotency key (`--key`, else the CI job's) and where it came from.
fn key_of(req: &Request, env: &dyn Fn(&str) -> Option<String>) -> Result<(String, String)> {
    let (key, key_source) =
        match &req.key {
            Some(k) if k.trim().is_empty() => return Err(Error::invalid("--key is empty")),
            Some(k) => (k.trim().to_string(), "--key".to_string()),
            None => match ci_key(env)? {
                Some((k, ci)) => (k, ci.to_string()),
                None => return Err(Error::invalid(
                    "not running on a known CI system, so there is no job to key this message on; \
                     pass --key (the same key on a retry means the same message)",
                )),
            },
        };
    if key.chars().any(|c| c.is_control()) {
        return Err(Error::invalid("--key contains a control character"));
    }
    Ok((key, key_source))
}

/// Group recipients per channel, normalised, without duplicates.
fn groups_of(req: &Request) -> Result<Groups> {
    let mut groups: Groups = Vec::new();
    for to in &req.to {
        let (ch, addr) = channel_of(to, req.channel)?;
        match groups.iter_mut().find(|(c, _)| *c == ch) {
            Some((_, v)) if v.contains(&addr) => {}
            Some((_, v)) => v.push(addr),
            None => groups.push((ch, vec![addr])),
        }
    }
    Ok(groups)
}

/// A dry run: what each recipient's state is, read from the ledger if it exists; nothing
/// written.
fn would_send(plan: &Plan) -> Result<Vec<Recipient>> {
    let existing = if plan.state.file().is_none_or(Path::exists) {
        Some(sendonce_store::open(&plan.state, &OpenOptions::default())?)
    } else {
        None
    };
    let mut recipients = Vec::new();
    for (ch, addrs) in &plan.groups {
        let rows = match &existing {
            Some(s) => s.notification_rows(&plan.key, *ch, addrs)?,
            None => Vec::new(),
        };
        for a in addrs {
            let job_id = sendonce_store::notify_job_id(&plan.key, a);
            match rows.iter().find(|r| &r.address == a) {
                Some(r) if r.status == "sent" => recipients.push(recipient_from(r, Some("sent"))),
                Some(r) => {
                    let mut x = recipient_from(r, None);
                    if x.outcome == "pending" {
                        x.outcome = "would_send".into();
                    }
                    recipients.push(x)
                }
                None => recipients.push(Recipient {
                    to: a.clone(),
                    channel: *ch,
                    idempotency_key: model::idempotency_key(&job_id),
                    job_id,
                    outcome: "would_send".into(),
                    sent_at: None,
                    provider_message_id: None,
                    reason: None,
                }),
            }
        }
    }
    Ok(recipients)
}

/// Open (or create) the state ledger, record the notification, run a worker once over it and
/// read each recipient's outcome, telling "sent now" from "sent earlier".
fn send(req: &Request, plan: &Plan, rt: &tokio::runtime::Runtime) -> Result<Vec<Recipient>> {
    let spec = req.provider.as_deref().ok_or_else(|| {
        Error::invalid("no provider: pass --provider SPEC or set SENDONCE_PROVIDER")
    })?;
    let provider = provider::from_spec(spec)?;
    if req.from.is_none() && provider.needs_sender() {
        return Err(Error::invalid(format!(
            "{} needs a sender and its spec has no from=: pass --from ADDRESS (e.g. --from 'CI \
             <ci@example.org>' for email, a number for SMS); nothing was sent or recorded \
             under the key",
            provider.capabilities().name
        )));
    }
    let store = open_state(&plan.state)?;
    // Status before this run, to tell "sent now" from "sent earlier".
    let mut before: Vec<NotifyRow> = Vec::new();
    for (ch, addrs) in &plan.groups {
        before.extend(store.notification_rows(&plan.key, *ch, addrs)?);
        let subject = if *ch == Channel::Email {
            req.subject.as_deref()
        } else {
            None
        };
        store.prepare_notification(
            &plan.key,
            *ch,
            req.from.as_deref(),
            subject,
            &req.message,
            addrs,
        )?;
    }
    // Power-loss suite only (tests/crash/powerloss.rs): a short lease, so that a retry after a cut
    // mid-call does not wait 30 s to find the row in doubt.
    #[cfg(feature = "crash-points")]
    let lease = std::env::var("SENDONCE_TEST_NOTIFY_LEASE_MS")
        .ok()
        .and_then(|v| v.parse().ok())
        .map_or(
            std::time::Duration::from_secs(30),
            std::time::Duration::from_millis,
        );
    #[cfg(not(feature = "crash-points"))]
    let lease = std::time::Duration::from_secs(30);
    let cfg = worker::Config {
        once: true,
        batch: 100,
        concurrency: req.to.len().clamp(1, 64),
        lease,
        tick: std::time::Duration::from_millis(200),
        max_attempts: 5,
        drain_deadline: std::time::Duration::from_secs(10),
        ..Default::default()
    };
    let ledger: Arc<dyn Ledger> = store.clone();
    rt.block_on(worker::run(ledger, provider, cfg, std::future::pending()))?;
    let mut recipients = Vec::new();
    for (ch, addrs) in &plan.groups {
        for row in store.notification_rows(&plan.key, *ch, addrs)? {
            let prev = before
                .iter()
                .find(|b| b.job_id == row.job_id)
                .map(|b| b.status.as_str());
            recipients.push(recipient_from(&row, prev));
        }
    }
    Ok(recipients)
}

/// The state ledger at `state`, its directory and file created if missing.
/// A postgres:// ledger is a database of its own: nothing to create on disk.
fn open_state(state: &Target) -> Result<std::sync::Arc<Store>> {
    if let Some(dir) = state.file().and_then(Path::parent) {
        sendonce_domain::files::create_dir_all_private(dir)
            .map_err(|e| Error::io(&format!("cannot create {}", dir.display()), e))?;
    }
    sendonce_store::open(
        state,
        &OpenOptions {
            create: true,
            pool_size: 2,
            // CI caches carry this file between machines on purpose: no clone guard.
            guard: false,
            ..Default::default()
        },
    )
}

#[cfg(test)]
mod tests {
    use super::*;
    use std::collections::HashMap;

    fn env_of(pairs: &[(&str, &str)]) -> impl Fn(&str) -> Option<String> {
        let m: HashMap<String, String> = pairs
            .iter()
            .map(|(k, v)| (k.to_string(), v.to_string()))
            .collect();
        move |k: &str| m.get(k).cloned()
    }

    /// The variables of each CI system and the key they give.
    const CI_CASES: &[(&[(&str, &str)], &str)] = &[
        (
            &[
                ("GITHUB_ACTIONS", "true"),
                ("GITHUB_REPOSITORY", "o/r"),
                ("GITHUB_RUN_ID", "42"),
                ("GITHUB_JOB", "build"),
                ("GITHUB_RUN_ATTEMPT", "3"),
            ],
            "github-actions:o/r:42:build",
        ),
        (
            &[
                ("GITLAB_CI", "true"),
                ("CI_PROJECT_ID", "7"),
                ("CI_PIPELINE_ID", "99"),
                ("CI_JOB_NAME", "test"),
                ("CI_JOB_ID", "1234"),
            ],
            "gitlab-ci:7:99:test",
        ),
        (
            &[
                ("BUILDKITE", "true"),
                ("BUILDKITE_BUILD_ID", "b-1"),
                ("BUILDKITE_STEP_ID", "s-2"),
                ("BUILDKITE_JOB_ID", "j-9"),
            ],
            "buildkite:b-1:s-2",
        ),
        (
            &[
                ("CIRCLECI", "true"),
                ("CIRCLE_PIPELINE_ID", "p-1"),
                ("CIRCLE_JOB", "deploy"),
                ("CIRCLE_WORKFLOW_ID", "w-5"),
            ],
            "circleci:p-1:deploy",
        ),
        (
            &[
                ("JENKINS_URL", "http://j/"),
                ("JOB_NAME", "app/main"),
                ("BUILD_NUMBER", "17"),
            ],
            "jenkins:app/main:17",
        ),
        (
            &[
                ("CI", "woodpecker"),
                ("CI_PIPELINE_NUMBER", "12"),
                ("CI_PIPELINE_PARENT", "10"),
                ("CI_REPO", "o/r"),
                ("CI_WORKFLOW_NAME", "ci"),
                ("CI_STEP_NAME", "notify"),
            ],
            "woodpecker:o/r:10:ci:notify",
        ),
        (
            &[
                ("CI", "woodpecker"),
                ("CI_PIPELINE_NUMBER", "12"),
                ("CI_PIPELINE_PARENT", "0"),
                ("CI_REPO", "o/r"),
                ("CI_WORKFLOW_NAME", "ci"),
                ("CI_STEP_NAME", "notify"),
            ],
            "woodpecker:o/r:12:ci:notify",
        ),
        (
            &[
                ("DRONE", "true"),
                ("DRONE_REPO", "o/r"),
                ("DRONE_BUILD_NUMBER", "8"),
                ("DRONE_BUILD_PARENT", "5"),
                ("DRONE_STAGE_NAME", "default"),
                ("DRONE_STEP_NAME", "tell"),
            ],
            "drone:o/r:5:default:tell",
        ),
    ];

    #[test]
    fn keys_per_ci_are_stable_across_retries() {
        for (vars, want) in CI_CASES {
            let (k, _) = ci_key(&env_of(vars)).unwrap().unwrap();
            assert_eq!(&k, want);
        }
        retry_attempts_are_not_part_of_the_key();
    }

    fn retry_attempts_are_not_part_of_the_key() {
        // The attempt counters that change on a retry are not part of the key.
        let a = ci_key(&env_of(&[
            ("GITHUB_ACTIONS", "true"),
            ("GITHUB_REPOSITORY", "o/r"),
            ("GITHUB_RUN_ID", "42"),
            ("GITHUB_JOB", "b"),
            ("GITHUB_RUN_ATTEMPT", "1"),
        ]))
        .unwrap();
        let b = ci_key(&env_of(&[
            ("GITHUB_ACTIONS", "true"),
            ("GITHUB_REPOSITORY", "o/r"),
            ("GITHUB_RUN_ID", "42"),
            ("GITHUB_JOB", "b"),
            ("GITHUB_RUN_ATTEMPT", "2"),
        ]))
        .unwrap();
        assert_eq!(a, b);
        assert!(ci_key(&env_of(&[])).unwrap().is_none());
        let e = ci_key(&env_of(&[("GITLAB_CI", "true")])).unwrap_err();
        assert!(e.message.contains("CI_PROJECT_ID"), "{}", e.message);
    }

    #[test]
    fn channels_follow_the_address() {
        assert_eq!(
            channel_of("+1 415 555 0100", None).unwrap(),
            (Channel::Sms, "+14155550100".into())
        );
        assert_eq!(
            channel_of("Ops@Example.com", None).unwrap(),
            (Channel::Email, "ops@example.com".into())
        );
        assert!(channel_of("ops", None).is_err());
    }

    #[test]
    fn state_defaults_to_xdg() {
        let p = default_state(&env_of(&[("XDG_STATE_HOME", "/s"), ("HOME", "/h")])).unwrap();
        assert_eq!(p, PathBuf::from("/s/sendonce/notify.db"));
        let p = default_state(&env_of(&[("HOME", "/h")])).unwrap();
        assert_eq!(p, PathBuf::from("/h/.local/state/sendonce/notify.db"));
    }
}
