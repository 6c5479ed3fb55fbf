//! Transactional messages (`POST /v1/messages`): one email or SMS per Idempotency-Key,
//! checked as campaign content is, then queued through the ledger like any campaign row. The
//! same key with the same request gets the first answer again; with another request it is
//! refused; while the first has not answered, the second is told so and nothing is sent twice.

use super::notify::channel_of;
use super::templates;
use sendonce_domain::address::Channel;
use sendonce_domain::attachment::{self, Attachment};
use sendonce_domain::content::{self, Content};
use sendonce_domain::error::{Error, Result};
use sendonce_domain::model::SendStatus;
use sendonce_domain::template::text_of_html;
use sendonce_store::group::Group;
use sendonce_store::prelude::*;
use sendonce_store::{Answer, MessageRow, NewMessage, Store, Submitted, TemplateRow};
use serde::{Deserialize, Serialize};
use sha2::{Digest, Sha256};
use std::collections::HashMap;

/// Longest Idempotency-Key, in bytes (Stripe's limit).
pub const MAX_KEY_BYTES: usize = 255;

/// One message as a client sends it.
#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize)]
#[serde(deny_unknown_fields)]
pub struct MessageRequest {
    /// An email address or an E.164 number.
    pub to: String,
    /// `email` or `sms`; default: from the shape of `to`.
    #[serde(default)]
    pub channel: Option<Channel>,
    #[serde(default)]
    pub from: Option<String>,
    #[serde(default)]
    pub reply_to: Option<String>,
    #[serde(default)]
    pub subject: Option<String>,
    /// The text (SMS: the whole message).
    #[serde(default)]
    pub text: Option<String>,
    /// The HTML part (email); alone, the text part is generated from it.
    #[serde(default)]
    pub html: Option<String>,
    /// A stored template's name, instead of `subject`, `text` and `html`: rendered with `data`
    /// when the message is accepted. (The new fields are left out of the request's hash when
    /// absent, so a request from before them hashes as it did.)
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub template: Option<String>,
    /// Which version of `template` (default: the latest when the message is accepted).
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub template_version: Option<i64>,
    /// The template's variables (a JSON object).
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub data: Option<serde_json::Value>,
    /// Files sent with the message (email only), base64 in the JSON.
    #[serde(default, skip_serializing_if = "Vec::is_empty")]
    pub attachments: Vec<AttachmentRequest>,
    /// The client's own JSON object (at most 4 KiB), returned as it was in the message's
    /// events (`GET /v1/events`, webhooks). Never sent to the recipient.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub metadata: Option<serde_json::Value>,
}

/// Longest `metadata`, in bytes of JSON.
pub const MAX_METADATA_BYTES: usize = 4096;

/// `metadata` as stored: a JSON object of at most [`MAX_METADATA_BYTES`].
fn metadata_of(req: &MessageRequest) -> Result<Option<String>> {
    let Some(m) = &req.metadata else {
        return Ok(None);
    };
    if !m.is_object() {
        return Err(Error::invalid("metadata: must be a JSON object"));
    }
    let text = m.to_string();
    if text.len() > MAX_METADATA_BYTES {
        return Err(Error::invalid(format!(
            "metadata: {} bytes of JSON, more than {MAX_METADATA_BYTES}",
            text.len()
        )));
    }
    Ok(Some(text))
}

/// An attachment as a client sends it (`Debug` shows its name and size, never its content).
#[derive(Clone, PartialEq, Eq, Serialize, Deserialize)]
#[serde(deny_unknown_fields)]
pub struct AttachmentRequest {
    pub filename: String,
    /// Default: from the file name's extension.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub content_type: Option<String>,
    /// The bytes, base64 (standard alphabet).
    pub content: String,
    /// For an inline image the HTML shows as `cid:…`.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub content_id: Option<String>,
}

impl std::fmt::Debug for AttachmentRequest {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        write!(
            f,
            "AttachmentRequest({:?}, {} base64 characters)",
            self.filename,
            self.content.len()
        )
    }
}

/// A message as the API shows it.
#[derive(Debug, Clone, Serialize)]
pub struct MessageView {
    pub id: i64,
    /// `queued`, `sent`, `suppressed`, `failed` or `in_doubt`.
    pub status: &'static str,
    pub channel: Channel,
    pub to: String,
    pub idempotency_key: String,
    pub job_id: String,
    pub attempts: i64,
    pub provider_message_id: Option<String>,
    pub reason: Option<String>,
    #[serde(serialize_with = "sendonce_domain::clock::ser_ms")]
    pub created_at: i64,
    #[serde(serialize_with = "sendonce_domain::clock::ser_opt_ms")]
    pub sent_at: Option<i64>,
    /// The stored template it was rendered from, and its version.
    #[serde(skip_serializing_if = "Option::is_none")]
    pub template: Option<String>,
    #[serde(skip_serializing_if = "Option::is_none")]
    pub template_version: Option<i64>,
    /// How many files it carries.
    pub attachments: i64,
    #[serde(skip_serializing_if = "Option::is_none")]
    pub subject: Option<String>,
}

impl MessageView {
    /// Whether the outcome is known (nothing will change without an operator).
    pub fn settled(&self) -> bool {
        self.status != "queued"
    }
}

impl From<MessageRow> for MessageView {
    fn from(r: MessageRow) -> Self {
        let status = match r.status {
            SendStatus::Queued | SendStatus::Leased => "queued",
            SendStatus::Sent => "sent",
            SendStatus::Suppressed => "suppressed",
            SendStatus::InDoubt => "in_doubt",
            SendStatus::Failed | SendStatus::Cancelled => "failed",
        };
        MessageView {
            id: r.id,
            status,
            channel: r.channel,
            to: r.to,
            idempotency_key: r.idempotency_key,
            job_id: r.job_id,
            attempts: r.attempts,
            provider_message_id: r.provider_message_id,
            reason: r.reason,
            created_at: r.created_at,
            sent_at: r.sent_at,
            template_version: r.template.as_ref().map(|t| t.1),
            template: r.template.map(|t| t.0),
            attachments: r.attachments,
            subject: r.subject,
        }
    }
}

/// What a submission came to.
#[derive(Debug, Clone)]
pub enum Submission {
    /// A new message, queued. `answer`: the answer kept with it in its own transaction (the
    /// caller brought one); `None`: the caller answers and keeps its answer ([`save_answer`]).
    New {
        view: Box<MessageView>,
        answer: Option<(u16, String)>,
    },
    /// The first answer to this key and request, to be given again as it was.
    Replay { status: u16, body: String },
    /// The first request with this key has not answered yet (`since`: when it came, Unix ms).
    InProgress { id: i64, since: i64 },
}

/// An Idempotency-Key as the API takes it: 1 to 255 printable ASCII characters.
pub fn check_key(key: &str) -> Result<&str> {
    if key.is_empty()
        || key.len() > MAX_KEY_BYTES
        || !key.bytes().all(|b| (0x20..0x7f).contains(&b))
    {
        return Err(Error::invalid(format!(
            "the Idempotency-Key must be 1 to {MAX_KEY_BYTES} printable ASCII characters"
        )));
    }
    Ok(key)
}

/// A request checked and normalised, ready to submit (it owns what [`NewMessage`] borrows).
struct Prepared {
    key: String,
    hash: String,
    channel: Channel,
    to: String,
    subject: Option<String>,
    text: String,
    html: Option<String>,
    template: Option<TemplateRow>,
    attachments: Vec<Attachment>,
    metadata: Option<String>,
}

impl Prepared {
    fn message<'a>(
        &'a self,
        account_id: i64,
        req: &'a MessageRequest,
        now: i64,
        answer: Option<Answer>,
    ) -> NewMessage<'a> {
        NewMessage {
            answer,
            account_id,
            idempotency_key: &self.key,
            request_hash: &self.hash,
            channel: self.channel,
            to: &self.to,
            from: req.from.as_deref(),
            reply_to: req.reply_to.as_deref(),
            subject: self.subject.as_deref(),
            text: &self.text,
            html: self.html.as_deref(),
            template: self.template.as_ref(),
            attachments: &self.attachments,
            metadata: self.metadata.as_deref(),
            now,
        }
    }
}

/// Check `req` and its key as `submit` takes them, rendering `template` (the stored version
/// `req` names, read by the caller) with its data: nothing is written.
fn prepare(key: &str, req: &MessageRequest, template: Option<TemplateRow>) -> Result<Prepared> {
    let key = check_key(key)?;
    let (channel, to) = channel_of(&req.to, req.channel).map_err(|e| e.context("to"))?;
    let (subject, text, html) = content_of(req, template.as_ref())?;
    let html = html.filter(|h| !h.trim().is_empty());
    content::check(&Content {
        channel,
        sender: req.from.as_deref(),
        subject: subject.as_deref(),
        body: &text,
        html: html.as_deref(),
        reply_to: req.reply_to.as_deref(),
        sms_footer: None,
    })
    .map_err(api_words)?;
    // An HTML-only message gets its text part now, so that sending never has to.
    let text = match &html {
        Some(h) if text.trim().is_empty() => text_of_html(h)?,
        _ => text,
    };
    let bodies = text.len() + html.as_ref().map_or(0, String::len);
    let attachments = attachments_of(channel, &req.attachments, bodies)?;
    let metadata = metadata_of(req)?;
    Ok(Prepared {
        key: key.to_string(),
        hash: request_hash(req)?,
        channel,
        to,
        subject,
        text,
        html,
        template,
        attachments,
        metadata,
    })
}

/// The subject, text and HTML of `req`: its own, or its template's rendered with its data.
fn content_of(
    req: &MessageRequest,
    template: Option<&TemplateRow>,
) -> Result<(Option<String>, String, Option<String>)> {
    let Some(t) = template else {
        if req.data.is_some() || req.template_version.is_some() {
            return Err(Error::invalid(
                "data and template_version go with template (the name of a stored template)",
            ));
        }
        let text = req.text.clone().unwrap_or_default();
        return Ok((req.subject.clone(), text, req.html.clone()));
    };
    if req.subject.is_some() || req.text.is_some() || req.html.is_some() {
        return Err(Error::invalid(
            "give either template (with data) or subject, text and html, not both",
        ));
    }
    let empty = serde_json::Value::Object(Default::default());
    let r = templates::render(t, req.data.as_ref().unwrap_or(&empty))?;
    Ok((r.subject, r.text, r.html))
}

/// The attachments of `req`, decoded and checked (email only).
fn attachments_of(
    channel: Channel,
    given: &[AttachmentRequest],
    bodies: usize,
) -> Result<Vec<Attachment>> {
    if channel == Channel::Sms && !given.is_empty() {
        return Err(Error::invalid(
            "attachments: an SMS carries none (email only)",
        ));
    }
    let all = given
        .iter()
        .enumerate()
        .map(|(i, a)| {
            attachment::decode(
                &a.filename,
                a.content_type.as_deref(),
                &a.content,
                a.content_id.as_deref(),
            )
            .map_err(|e| e.context(&format!("attachments[{i}]")))
        })
        .collect::<Result<Vec<_>>>()?;
    attachment::check_all(&all, bodies)?;
    Ok(all)
}

/// The stored template `req` names, if it names one.
fn template_for(
    store: &Store,
    account_id: i64,
    req: &MessageRequest,
) -> Result<Option<TemplateRow>> {
    req.template
        .as_deref()
        .map(|name| store.template(account_id, name, req.template_version))
        .transpose()
        .map_err(|e| e.context("template"))
}

/// What the store answered, as the API says it.
fn finish(submitted: Submitted) -> Result<Submission> {
    Ok(match submitted {
        Submitted::Created { row, answer } => Submission::New {
            view: Box::new((*row).into()),
            answer,
        },
        Submitted::Replay { status, body, .. } => Submission::Replay { status, body },
        Submitted::InProgress { id, since } => Submission::InProgress { id, since },
        Submitted::Mismatch { id } => {
            return Err(Error::key_reused(format!(
                "this Idempotency-Key was used for message {id} with another request; use a \
                 new key for a new message"
            )))
        }
    })
}

/// Submit `req` for `account_id` under `key`: through `group` (committed with the other
/// requests waiting, `sendonce_store::group`) when there is one, else in its own transaction;
/// with `answer`, the request's answer is kept in that same transaction.
pub fn submit(
    store: &Store,
    group: Option<&Group>,
    account_id: i64,
    key: &str,
    req: &MessageRequest,
    answer: Option<Answer>,
) -> Result<Submission> {
    let p = match template_for(store, account_id, req).and_then(|t| prepare(key, req, t)) {
        Ok(p) => p,
        Err(e) => return earlier(store, account_id, key, req, e),
    };
    let m = p.message(account_id, req, sendonce_domain::clock::now_ms(), answer);
    let submitted = match group {
        Some(g) => g.submit_message(&m)?,
        None => store.submit_message(&m)?,
    };
    finish(submitted)
}

/// A request that cannot be prepared now (its template's latest version no longer renders with
/// its data, or is gone) may be the retry of one accepted before: its key's first answer, as
/// for any retry; `e` for a new key (or a key used with another request, which `e` explains
/// better than a mismatch would).
fn earlier(
    store: &Store,
    account_id: i64,
    key: &str,
    req: &MessageRequest,
    e: Error,
) -> Result<Submission> {
    let (Ok(key), Ok(hash)) = (check_key(key), request_hash(req)) else {
        return Err(e);
    };
    match store.submitted(account_id, key, &hash)? {
        Some(found @ (Submitted::Replay { .. } | Submitted::InProgress { .. })) => finish(found),
        _ => Err(e),
    }
}

/// Most messages in one batch (`POST /v1/messages/batch`).
pub const MAX_BATCH: usize = 500;

/// Submit a batch: each message under its own key, checked and answered on its own (one that is
/// refused does not stop the others), all of them through `group` at once so that they share
/// its commits. Results in the order of `items`.
pub fn submit_batch(
    store: &Store,
    group: &Group,
    account_id: i64,
    items: &[(String, MessageRequest)],
    answer: Option<Answer>,
) -> Result<Vec<Result<Submission>>> {
    if items.is_empty() || items.len() > MAX_BATCH {
        return Err(Error::invalid(format!(
            "a batch holds 1 to {MAX_BATCH} messages, not {}",
            items.len()
        )));
    }
    // One lookup per (template, version) the batch names, not one per message.
    let mut templates: HashMap<(&str, Option<i64>), Result<Option<TemplateRow>>> = HashMap::new();
    let prepared: Vec<Result<Prepared>> = items
        .iter()
        .enumerate()
        .map(|(i, (key, req))| {
            let t = match req.template.as_deref() {
                None => Ok(None),
                Some(name) => templates
                    .entry((name, req.template_version))
                    .or_insert_with(|| template_for(store, account_id, req))
                    .clone(),
            };
            t.and_then(|t| prepare(key, req, t))
                .map_err(|e| e.context(&format!("messages[{i}]")))
        })
        .collect();
    // A refused item whose key was used with this very request already has its answer.
    let mut earlier_answers: Vec<Option<Result<Submission>>> = prepared
        .iter()
        .zip(items)
        .map(|(p, (key, req))| match p {
            Err(e) => Some(earlier(store, account_id, key, req, e.clone())),
            Ok(_) => None,
        })
        .collect();
    let now = sendonce_domain::clock::now_ms();
    let ready: Vec<NewMessage<'_>> = prepared
        .iter()
        .zip(items)
        .filter_map(|(p, (_, req))| {
            let p = p.as_ref().ok()?;
            Some(p.message(account_id, req, now, answer.clone()))
        })
        .collect();
    let mut submitted = group.submit_messages(&ready).into_iter();
    Ok(prepared
        .into_iter()
        .zip(earlier_answers.iter_mut())
        .map(|(p, earlier)| {
            if let Some(answer) = earlier.take() {
                return answer;
            }
            p?;
            let s = submitted
                .next()
                .ok_or_else(|| Error::internal("the group answered fewer messages"))??;
            finish(s)
        })
        .collect())
}

/// A content error in the API's words: the checks are shared with `campaign create`, whose
/// messages name its flags.
fn api_words(mut e: Error) -> Error {
    for (flag, field) in [
        ("--body-file, --html-file or both", "text, html or both"),
        ("--html-file", "html"),
        ("--reply-to", "reply_to"),
        ("--subject", "subject"),
        ("--from", "from"),
    ] {
        e.message = e.message.replace(flag, field);
    }
    e
}

/// SHA-256 (hex) of the request as parsed, fields in their declared order.
fn request_hash(req: &MessageRequest) -> Result<String> {
    let canonical = serde_json::to_vec(req)
        .map_err(|e| Error::internal(format!("cannot encode the request: {e}")))?;
    Ok(Sha256::digest(&canonical)
        .iter()
        .map(|b| format!("{b:02x}"))
        .collect())
}

/// Keep the answer the first request gave, for its replays (through `group` as for
/// [`submit`]).
pub fn save_answer(
    store: &Store,
    group: Option<&Group>,
    account_id: i64,
    id: i64,
    status: u16,
    body: &str,
) -> Result<()> {
    match group {
        Some(g) => g.save_answer(account_id, id, status, body),
        None => store.save_answer(account_id, id, status, body),
    }
}

/// Messages per page of the dashboard's message stream.
pub const PAGE: usize = 50;

/// Which messages to show: a recipient's start, a state as the API names it, a provider id.
#[derive(Debug, Clone, Default)]
pub struct MessageFilter<'a> {
    pub to: Option<&'a str>,
    pub status: Option<&'a str>,
    pub provider_id: Option<&'a str>,
    /// Keyset: older than this message id.
    pub before: Option<i64>,
}

/// A page of messages, newest first, and the cursor of the next (older) page.
#[derive(Debug, Clone, Serialize)]
pub struct MessagePage {
    pub messages: Vec<MessageView>,
    pub next_before: Option<i64>,
}

/// The account's messages, newest first, filtered (the dashboard's message stream).
pub fn page(store: &Store, account: &str, f: &MessageFilter<'_>) -> Result<MessagePage> {
    use SendStatus::*;
    let account_id = store.resolve_account(account)?;
    let states: Option<&[SendStatus]> = match f.status.map(str::trim).filter(|s| !s.is_empty()) {
        None => None,
        Some("queued") => Some(&[Queued, Leased]),
        Some("sent") => Some(&[Sent]),
        Some("suppressed") => Some(&[Suppressed]),
        Some("failed") => Some(&[Failed, Cancelled]),
        Some("in_doubt") => Some(&[InDoubt]),
        Some(other) => {
            return Err(Error::invalid(format!(
                "status {other:?}: queued, sent, suppressed, failed or in_doubt"
            )))
        }
    };
    // Addresses are stored normalised: an email in lower case, a phone in E.164.
    let to =
        f.to.map(str::trim)
            .filter(|t| !t.is_empty())
            .map(str::to_lowercase);
    let rows = store.messages_page(&sendonce_store::MessageSearch {
        account_id,
        to_prefix: to.as_deref(),
        states,
        provider_id: f.provider_id.map(str::trim).filter(|p| !p.is_empty()),
        before: f.before,
        limit: PAGE,
    })?;
    let next_before = (rows.len() == PAGE)
        .then(|| rows.last().map(|r| r.id))
        .flatten();
    Ok(MessagePage {
        messages: rows.into_iter().map(MessageView::from).collect(),
        next_before,
    })
}

/// Message `id` of `account_id`; another account's is `NotFound`.
pub fn get(store: &Store, account_id: i64, id: i64) -> Result<MessageView> {
    Ok(store.message(account_id, id)?.into())
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn content_errors_name_the_api_fields() {
        let e = api_words(Error::invalid(
            "an email campaign needs --from (the sender: `news@example.org`)",
        ));
        assert!(
            e.message.contains("needs from (") && !e.message.contains("--"),
            "{}",
            e.message
        );
        let e = api_words(Error::invalid("--reply-to: bad"));
        assert_eq!(e.message, "reply_to: bad");
    }
}
