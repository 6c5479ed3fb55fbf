//! Stored templates (`POST /v1/templates`, `sendonce template`): a subject, text and HTML in
//! minijinja, checked when saved; each save of a name is a new version that never changes. A
//! message names a template and gives its `data`; it is rendered when accepted and its result
//! stored as the message's content (`app::messages`), so a retry sends the same bytes whatever
//! is saved later.

use sendonce_domain::content::MAX_EMAIL_BODY_BYTES;
use sendonce_domain::error::{Error, Result};
use sendonce_domain::template::{CampaignVars, Compiled, Rendered, Sources};
use sendonce_store::prelude::*;
use sendonce_store::{NewTemplate, Store, TemplateRow};
use serde::{Deserialize, Serialize};

/// Longest template name, in bytes.
pub const MAX_NAME_BYTES: usize = 64;

/// A template as a client saves it.
#[derive(Debug, Clone, Deserialize)]
#[serde(deny_unknown_fields)]
pub struct TemplateRequest {
    pub name: String,
    #[serde(default)]
    pub subject: Option<String>,
    /// The text part (SMS: the whole message).
    #[serde(default)]
    pub text: Option<String>,
    /// The HTML part; alone, each message's text part is generated from its rendered HTML.
    #[serde(default)]
    pub html: Option<String>,
}

/// A template version as the API shows it.
#[derive(Debug, Clone, Serialize)]
pub struct TemplateView {
    pub name: String,
    pub version: i64,
    pub subject: Option<String>,
    pub text: Option<String>,
    pub html: Option<String>,
    #[serde(serialize_with = "sendonce_domain::clock::ser_ms")]
    pub created_at: i64,
}

impl From<TemplateRow> for TemplateView {
    fn from(t: TemplateRow) -> Self {
        TemplateView {
            name: t.name,
            version: t.version,
            subject: t.subject,
            text: t.text,
            html: t.html,
            created_at: t.created_at,
        }
    }
}

/// The latest versions, for `GET /v1/templates` and `template list`.
#[derive(Debug, Clone, Serialize)]
pub struct TemplateList {
    pub templates: Vec<TemplateView>,
}

/// 1 to 64 letters, digits, `.`, `_` or `-`: it goes into a URL path as it is.
pub fn check_name(name: &str) -> Result<&str> {
    let ok = !name.is_empty()
        && name.len() <= MAX_NAME_BYTES
        && name
            .bytes()
            .all(|b| b.is_ascii_alphanumeric() || b"._-".contains(&b));
    if ok {
        Ok(name)
    } else {
        Err(Error::invalid(format!(
            "name: 1 to {MAX_NAME_BYTES} letters, digits, '.', '_' or '-' (e.g. password-reset)"
        )))
    }
}

/// A blank source is no source.
fn given(s: &Option<String>) -> Option<&str> {
    s.as_deref().filter(|s| !s.trim().is_empty())
}

/// Compile a template's sources: the error says which part does not parse.
fn compile(subject: Option<&str>, text: Option<&str>, html: Option<&str>) -> Result<Compiled> {
    let src = Sources {
        subject,
        text,
        html,
    };
    Compiled::campaign(&src, &CampaignVars::default(), None)
}

/// Check `req` (name, at least a text or an HTML part, sizes, syntax) and save it as the next
/// version of its name.
pub fn save(store: &Store, account: &str, req: &TemplateRequest) -> Result<TemplateView> {
    let name = check_name(req.name.trim())?;
    let (subject, text, html) = (given(&req.subject), given(&req.text), given(&req.html));
    if text.is_none() && html.is_none() {
        return Err(Error::invalid("a template needs text, html or both"));
    }
    for (field, s) in [("subject", subject), ("text", text), ("html", html)] {
        if s.is_some_and(|s| s.len() > MAX_EMAIL_BODY_BYTES) {
            return Err(Error::invalid(format!(
                "{field} is over {MAX_EMAIL_BODY_BYTES} bytes"
            )));
        }
    }
    compile(subject, text, html)?;
    let account_id = store.resolve_account(account)?;
    let row = store.save_template(&NewTemplate {
        account_id,
        name,
        subject,
        text,
        html,
        now: sendonce_domain::clock::now_ms(),
    })?;
    Ok(row.into())
}

/// Version `version` of template `name` (`None`: the latest).
pub fn show(
    store: &Store,
    account: &str,
    name: &str,
    version: Option<i64>,
) -> Result<TemplateView> {
    let account_id = store.resolve_account(account)?;
    Ok(store.template(account_id, name, version)?.into())
}

/// The latest version of each template of the account.
pub fn list(store: &Store, account: &str) -> Result<TemplateList> {
    let account_id = store.resolve_account(account)?;
    let templates = store
        .templates(account_id)?
        .into_iter()
        .map(TemplateView::from)
        .collect();
    Ok(TemplateList { templates })
}

/// Render `t` with `data` (a JSON object): a variable the template prints and `data` lacks is
/// an error naming it, as for a campaign's recipient.
pub fn render(t: &TemplateRow, data: &serde_json::Value) -> Result<Rendered> {
    if !data.is_object() {
        return Err(Error::invalid(
            "data: give a JSON object ({\"name\": \"Ana\"})",
        ));
    }
    let compiled = compile(t.subject.as_deref(), t.text.as_deref(), t.html.as_deref())?;
    compiled.render(data).map_err(|mut e| {
        let lacking: Vec<String> = compiled
            .variables()
            .into_iter()
            .filter(|v| data.get(v).is_none())
            .collect();
        if !lacking.is_empty() {
            e.message = format!("{}; data lacks {}", e.message, lacking.join(", "));
        }
        e.context(&format!("template {:?} version {}", t.name, t.version))
    })
}

#[cfg(test)]
mod tests {
    use super::*;

    fn row(subject: &str, text: &str, html: Option<&str>) -> TemplateRow {
        TemplateRow {
            id: 1,
            account_id: 1,
            name: "reset".into(),
            version: 2,
            subject: Some(subject.into()),
            text: Some(text.into()).filter(|t: &String| !t.is_empty()),
            html: html.map(str::to_string),
            created_at: 0,
        }
    }

    #[test]
    fn renders_data_and_escapes_it_in_html_only() {
        let t = row("Hi {{ name }}", "", Some("<p>{{ name }}</p>"));
        let r = render(&t, &serde_json::json!({"name": "<Ana>"})).unwrap();
        assert_eq!(r.subject.as_deref(), Some("Hi <Ana>"));
        assert_eq!(r.html.as_deref(), Some("<p>&lt;Ana&gt;</p>"));
        assert!(r.text.contains("<Ana>"), "{}", r.text);
    }

    #[test]
    fn a_missing_variable_names_itself_and_the_version() {
        let t = row("Hi", "code {{ code }}", None);
        let e = render(&t, &serde_json::json!({})).unwrap_err();
        assert!(
            e.message.contains("code") && e.message.contains("version 2"),
            "{}",
            e.message
        );
        assert!(render(&t, &serde_json::json!([1])).is_err());
    }

    #[test]
    fn names_are_path_safe() {
        assert!(check_name("password-reset.v2_en").is_ok());
        for bad in ["", "a/b", "a b", "é", &"x".repeat(65)] {
            assert!(check_name(bad).is_err(), "{bad:?}");
        }
    }
}
