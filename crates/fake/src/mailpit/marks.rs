//! Mailpit's read flags and tags: `PUT /api/v1/messages` (`{"IDs": [...], "Read": true}`, or
//! `"Search"`, or neither for all), `GET` and `PUT /api/v1/tags` (`{"IDs": [...], "Tags": [...]}`
//! replaces those messages' tags), `PUT /api/v1/tags/{tag}` (`{"Name": ...}` renames) and
//! `DELETE /api/v1/tags/{tag}`. Kept in the inbox index, in memory: a restart of the fake shows
//! every message unread and untagged.

use super::search::Search;
use super::{server_error, text};
use crate::server::{reply, Body, Shared};
use hyper::{Response, StatusCode};
use serde_json::{json, Value};

/// The `IDs` of a request body: absent or null is none, else an array of strings.
pub(super) fn ids_of(v: &Value) -> Result<Vec<String>, String> {
    match v.get("IDs") {
        None | Some(Value::Null) => Ok(Vec::new()),
        Some(Value::Array(a)) => a
            .iter()
            .map(|i| i.as_str().map(str::to_string))
            .collect::<Option<Vec<_>>>()
            .ok_or_else(|| "IDs must be strings".to_string()),
        Some(_) => Err("IDs must be an array of strings".into()),
    }
}

/// A JSON object body (an empty body is `{}`).
fn object(body: &[u8]) -> Result<Value, String> {
    if body.iter().all(u8::is_ascii_whitespace) {
        return Ok(json!({}));
    }
    let v: Value = serde_json::from_slice(body).map_err(|e| format!("invalid JSON body: {e}"))?;
    if v.is_object() {
        Ok(v)
    } else {
        Err("the body must be a JSON object".into())
    }
}

/// A tag as Mailpit keeps it: letters, digits, `-`, `.`, `_` and spaces; anything else is
/// dropped, and so is a tag left empty.
pub(super) fn clean_tag(t: &str) -> Option<String> {
    let kept: String = t
        .chars()
        .filter(|c| c.is_ascii_alphanumeric() || matches!(c, '-' | '.' | '_' | ' '))
        .collect();
    let kept = kept.split_whitespace().collect::<Vec<_>>().join(" ");
    (!kept.is_empty()).then_some(kept)
}

/// `PUT /api/v1/messages`: mark read (`"Read": true`) or unread the messages of `IDs`, of
/// `Search`, or all.
pub(super) async fn set_read(shared: &Shared, body: &[u8]) -> Response<Body> {
    let (ids, search, read) = match object(body).and_then(|v| {
        let read = match v.get("Read") {
            None | Some(Value::Null) => false,
            Some(Value::Bool(b)) => *b,
            Some(_) => return Err("Read must be true or false".into()),
        };
        let search = v.get("Search").and_then(Value::as_str).map(str::to_string);
        Ok((ids_of(&v)?, search.filter(|s| !s.trim().is_empty()), read))
    }) {
        Ok(p) => p,
        Err(e) => return text(StatusCode::BAD_REQUEST, e),
    };
    let done = crate::inbox::query(shared, move |ix| {
        let mut st = ix.write();
        let ids = match search {
            Some(q) => {
                let s = Search::parse(&q);
                let found: Vec<String> = st
                    .newest()
                    .filter(|&i| s.matches(&st, st.entry(i)))
                    .map(|i| st.entry(i).id().to_string())
                    .collect();
                Some(found)
            }
            None => (!ids.is_empty()).then_some(ids),
        };
        st.set_read(ids.as_deref(), read);
    })
    .await;
    match done {
        Ok(()) => text(StatusCode::OK, "ok"),
        Err(e) => server_error(e),
    }
}

/// `PUT /api/v1/tags`: the messages of `IDs` get exactly `Tags` (none when absent).
pub(super) async fn set_tags(shared: &Shared, body: &[u8]) -> Response<Body> {
    let parsed = object(body).and_then(|v| {
        let tags = match v.get("Tags") {
            None | Some(Value::Null) => Vec::new(),
            Some(Value::Array(a)) => a
                .iter()
                .map(|t| t.as_str().map(clean_tag))
                .collect::<Option<Vec<_>>>()
                .ok_or("Tags must be strings")?
                .into_iter()
                .flatten()
                .collect(),
            Some(_) => return Err("Tags must be an array of strings".into()),
        };
        Ok((ids_of(&v)?, tags))
    });
    let (ids, tags) = match parsed {
        Ok(p) => p,
        Err(e) => return text(StatusCode::BAD_REQUEST, e),
    };
    match crate::inbox::query(shared, move |ix| ix.write().set_tags(&ids, &tags)).await {
        Ok(()) => text(StatusCode::OK, "ok"),
        Err(e) => server_error(e),
    }
}

/// `GET /api/v1/tags`: every tag in use, sorted.
pub(super) async fn tags(shared: &Shared) -> Response<Body> {
    match crate::inbox::query(shared, |ix| ix.read().tag_names()).await {
        Ok(t) => reply(StatusCode::OK, json!(t)),
        Err(e) => server_error(e),
    }
}

/// `PUT /api/v1/tags/{tag}` with `{"Name": new}` renames a tag; `DELETE` (`body: None`)
/// removes it from every message. The name in the path is cleaned as a tag is.
pub(super) async fn retag(shared: &Shared, tag: String, body: Option<&[u8]>) -> Response<Body> {
    let Some(tag) = clean_tag(&tag) else {
        return text(StatusCode::NOT_FOUND, "Not found");
    };
    let to = match body.map(object).transpose() {
        Ok(None) => None,
        Ok(Some(v)) => match v.get("Name").and_then(Value::as_str).and_then(clean_tag) {
            Some(n) => Some(n),
            None => return text(StatusCode::BAD_REQUEST, "Name must be a tag name"),
        },
        Err(e) => return text(StatusCode::BAD_REQUEST, e),
    };
    match crate::inbox::query(shared, move |ix| ix.write().retag(&tag, to.as_deref())).await {
        Ok(()) => text(StatusCode::OK, "ok"),
        Err(e) => server_error(e),
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn tags_are_cleaned_and_ids_checked() {
        assert_eq!(clean_tag("  Big  sale! ").as_deref(), Some("Big sale"));
        assert_eq!(clean_tag("v1.2_x-y").as_deref(), Some("v1.2_x-y"));
        assert_eq!(clean_tag("!!"), None);
        assert_eq!(ids_of(&json!({"IDs": ["a"]})).unwrap(), ["a"]);
        assert!(ids_of(&json!({"IDs": [1]})).is_err());
        assert!(object(b"[1]").is_err());
        assert_eq!(object(b" ").unwrap(), json!({}));
    }
}
