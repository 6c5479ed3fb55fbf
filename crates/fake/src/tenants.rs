//! Per-tenant inboxes: one fake serves a whole test suite's parallel tests, each reading only
//! its own messages. A message is filed in a tenant (its `X-Fake-Tenant` header, the
//! `/t/{tenant}/...` prefix it was sent through, the SMTP user, a Twilio account, an AWS key
//! id, or a fingerprint of its API key); a request under `/t/{tenant}/` sees (and clears) only
//! that tenant's messages, through every read API and the web inbox.

use hyper::http::request::Parts;

tokio::task_local! {
    /// The tenant of the request being answered, when it came through `/t/{tenant}/`.
    static VIEW: String;
}

/// The tenant whose view this request is in (`/t/{tenant}/...`), if any.
pub(crate) fn view() -> Option<String> {
    VIEW.try_with(Clone::clone).ok()
}

/// The path prefix of this request's view: `/t/{tenant}`, or empty (links in pages use it).
pub(crate) fn base() -> String {
    view().map(|t| format!("/t/{t}")).unwrap_or_default()
}

/// `/t/{tenant}{rest}` → the tenant and the rest of the path (`/` when empty).
pub(crate) fn split(path: &str) -> Option<(&str, &str)> {
    let after = path.strip_prefix("/t/")?;
    Some(match after.find('/') {
        Some(i) => (&after[..i], &after[i..]),
        None => (after, "/"),
    })
}

/// The path a request came with, before its `/t/{tenant}` prefix was taken off (kept in its
/// extensions: a SigV4 signature covers it).
#[derive(Clone, Debug)]
pub(crate) struct OriginalPath(pub String);

/// The path `parts` came with: the original one under a tenant prefix.
pub(crate) fn original_path(parts: &hyper::http::request::Parts) -> &str {
    parts
        .extensions
        .get::<OriginalPath>()
        .map_or(parts.uri.path(), |o| o.0.as_str())
}

/// Run `f` (on a blocking thread) in the view `view`, when there is one.
pub(crate) fn in_view<R>(view: Option<String>, f: impl FnOnce() -> R) -> R {
    match view {
        Some(t) => VIEW.sync_scope(t, f),
        None => f(),
    }
}

/// Run `f` in `tenant`'s view.
pub(crate) async fn scoped<F: std::future::Future>(tenant: String, f: F) -> F::Output {
    VIEW.scope(tenant, f).await
}

/// What a request's credential says about who sent it, for [`tenant`].
pub(crate) enum Who<'a> {
    /// A name that is no secret (a Twilio account SID, an AWS access key id, an SMTP user).
    Name(&'a str),
    /// A secret API key: filed under a fingerprint of it, never the key itself.
    Secret(&'a str),
    Nobody,
}

/// The inbox a request is filed in: its `X-Fake-Tenant` header, else the `/t/{tenant}` it
/// came through, else what its credential names: a name as it is, a secret key as `key-` and the first 16 hex digits of its SHA-256.
/// Checked by `apis::record` (1 to 64 of `A-Z a-z 0-9 . _ @ + -`).
pub(crate) fn tenant(parts: &Parts, who: Who<'_>) -> Option<String> {
    if let Some(v) = parts.headers.get("x-fake-tenant") {
        return Some(String::from_utf8_lossy(v.as_bytes()).trim().to_string());
    }
    if let Some(t) = view() {
        return Some(t);
    }
    match who {
        Who::Name(n) => Some(named(n)).filter(|_| !n.is_empty()),
        Who::Secret(k) => Some(fingerprint(k)).filter(|_| !k.is_empty()),
        Who::Nobody => None,
    }
}

/// A name as its inbox's name, or its fingerprint when it cannot be one.
pub(crate) fn named(n: &str) -> String {
    if tenant_ok(n) {
        n.to_string()
    } else {
        fingerprint(n)
    }
}

/// `key-` and the first 16 hex digits of the SHA-256 of `secret`.
fn fingerprint(secret: &str) -> String {
    use sha2::Digest;
    let d = sha2::Sha256::digest(secret.as_bytes());
    let hex: String = d.iter().take(8).map(|b| format!("{b:02x}")).collect();
    format!("key-{hex}")
}

/// Whether `t` may name an inbox.
pub(crate) fn tenant_ok(t: &str) -> bool {
    (1..=64).contains(&t.len())
        && t.bytes()
            .all(|b| b.is_ascii_alphanumeric() || b"._@+-".contains(&b))
}

/// The refusal of a request whose `X-Fake-Tenant` cannot name an inbox.
pub(crate) fn bad_tenant(t: &str) -> String {
    format!("X-Fake-Tenant {t:?} must be 1 to 64 of A-Z a-z 0-9 . _ @ + -")
}
