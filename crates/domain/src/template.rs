//! Message templates (minijinja): checked once at campaign creation, rendered deterministically per recipient.
//!
//! Rendering is a pure function of the frozen campaign content and the variables captured
//! when the list was built, so a retry sends byte-identical content.

use crate::address::Channel;
use crate::error::{Error, Result};
use minijinja::value::Kwargs;
use minijinja::{Environment, UndefinedBehavior};
use std::collections::{BTreeMap, BTreeSet};

mod budget;
mod uses;

pub use budget::{MAX_RENDERED_BYTES, RENDER_FUEL};

/// Variables every recipient has, whatever its attributes.
pub const BUILTIN_VARS: [&str; 3] = ["name", "email", "phone"];

/// Variables the sender adds to every recipient's when the message is rendered (not captured
/// with the list): `unsubscribe_url`, the signed link built from the worker's public URL.
pub const RENDER_VARS: [&str; 1] = ["unsubscribe_url"];

/// Names a subscriber attribute may not take, sorted: the variables every recipient has
/// ([`BUILTIN_VARS`]), those added at rendering ([`RENDER_VARS`]), and the renderer's globals
/// (`campaign` and minijinja's `range`, `dict`, `namespace`...), which an attribute of the same
/// name would hide when that subscriber's message is rendered.
pub fn reserved_names() -> Vec<String> {
    let mut names: BTreeSet<String> = BUILTIN_VARS
        .iter()
        .chain(RENDER_VARS.iter())
        .map(|s| s.to_string())
        .collect();
    if let Ok(env) = env_with(&Sources::default(), &CampaignVars::default()) {
        names.extend(env.globals().map(|(k, _)| k.to_string()));
    }
    names.into_iter().collect()
}

/// Columns of the text part generated from an HTML body.
pub const TEXT_WIDTH: usize = 78;

/// The templates of one campaign: a subject (email) and at least one body. An email with only
/// `html` gets its text part generated from each recipient's rendered HTML.
#[derive(Debug, Clone, Copy, Default)]
pub struct Sources<'a> {
    pub subject: Option<&'a str>,
    pub text: Option<&'a str>,
    pub html: Option<&'a str>,
}

/// What every template of a campaign can read as `campaign.name` and `campaign.lists` (the
/// names of the lists it targets).
#[derive(Debug, Clone, Default, serde::Serialize)]
pub struct CampaignVars {
    pub name: String,
    pub lists: Vec<String>,
}

/// One recipient's message, rendered.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct Rendered {
    pub subject: Option<String>,
    /// The text part (SMS: the whole message, footer included).
    pub text: String,
    pub html: Option<String>,
}

/// The compiled templates of one campaign (or literal text, for notifications).
pub struct Compiled {
    env: Environment<'static>,
    has_subject: bool,
    has_text: bool,
    has_html: bool,
    /// Appended to the text on a line of its own (the SMS opt-out footer).
    footer: Option<String>,
    /// Literal content, sent verbatim: `{{` in a CI message is not a template.
    literal: Option<Rendered>,
}

/// Who would receive a campaign now, for [`check`]: the account's confirmed subscribers with
/// an address for the channel, and how many of them have each variable (an attribute or a
/// built-in), counted on the same JSON object that rendering reads.
#[derive(Debug, Clone)]
pub struct VarCounts {
    pub channel: Channel,
    pub total: u64,
    pub present: BTreeMap<String, u64>,
}

/// The environment both the check and rendering use. Undefined values are `SemiStrict`:
/// printing, iterating, taking an attribute of or passing to a filter a variable the recipient
/// lacks is an error (a message never goes out with a hole in it), while `default(...)`,
/// `is defined` and the truth test of `{% if var %}` still work, which are the guards [`check`]
/// accepts. `Strict` would make `{% if var %}` an error too; `Lenient` (minijinja's default)
/// printed nothing.
///
/// The templates are named `subject`, `body` (text) and `body.html`: minijinja escapes every
/// value printed in a template whose name ends in `.html`, so a subscriber's `<script>` reaches
/// the HTML part as text; the text part and the subject print values as they are.
fn env_with(src: &Sources<'_>, campaign: &CampaignVars) -> Result<Environment<'static>> {
    let mut env = Environment::new();
    env.set_keep_trailing_newline(true);
    env.set_undefined_behavior(UndefinedBehavior::SemiStrict);
    env.set_fuel(Some(RENDER_FUEL));
    env.set_formatter(html_formatter);
    env.add_filter("truncate", truncate);
    env.add_global("campaign", minijinja::Value::from_serialize(campaign));
    for (name, which, source) in [
        ("subject", "subject", src.subject),
        ("body", "body", src.text),
        ("body.html", "HTML body", src.html),
    ] {
        if let Some(source) = source {
            env.add_template_owned(name, source.to_string())
                .map_err(|e| Error::invalid(format!("the {which} template does not parse: {e}")))?;
        }
    }
    Ok(env)
}

/// Prints a value into a template: in the HTML body a text is escaped for what HTML needs
/// (`& < > " '`) and no more — minijinja's own escaping also writes `/` as `&#x2f;`, valid but
/// it makes every link look broken in a preview and a message's source. Everything else (other
/// templates, numbers, `|safe` values) is printed as minijinja does.
fn html_formatter(
    out: &mut minijinja::Output,
    state: &minijinja::State,
    value: &minijinja::Value,
) -> std::result::Result<(), minijinja::Error> {
    let text = value.as_str().filter(|_| !value.is_safe());
    match (state.auto_escape(), text) {
        (minijinja::AutoEscape::Html, Some(s)) => {
            let mut escaped = String::with_capacity(s.len());
            for c in s.chars() {
                match c {
                    '&' => escaped.push_str("&amp;"),
                    '<' => escaped.push_str("&lt;"),
                    '>' => escaped.push_str("&gt;"),
                    '"' => escaped.push_str("&quot;"),
                    '\'' => escaped.push_str("&#39;"),
                    c => escaped.push(c),
                }
            }
            Ok(out.write_str(&escaped)?)
        }
        _ => minijinja::escape_formatter(out, state, value),
    }
}

/// Jinja2's `truncate(length=255, killwords=false, end="...", leeway=5)`, which minijinja does
/// not ship: a text longer than `length + leeway` characters is cut to `length` characters
/// including `end`, at a space unless `killwords`.
fn truncate(
    s: &str,
    length: Option<usize>,
    killwords: Option<bool>,
    end: Option<String>,
    kwargs: Kwargs,
) -> std::result::Result<String, minijinja::Error> {
    let length = length.map_or_else(|| kwargs.get("length"), |n| Ok(Some(n)))?;
    let killwords = killwords.map_or_else(|| kwargs.get("killwords"), |b| Ok(Some(b)))?;
    let end = end.map_or_else(|| kwargs.get("end"), |e| Ok(Some(e)))?;
    let leeway: Option<usize> = kwargs.get("leeway")?;
    kwargs.assert_all_used()?;
    let (length, end) = (length.unwrap_or(255), end.unwrap_or_else(|| "...".into()));
    let end_chars = end.chars().count();
    if length < end_chars {
        return Err(minijinja::Error::new(
            minijinja::ErrorKind::InvalidOperation,
            format!("truncate: length {length} is shorter than the end {end:?}"),
        ));
    }
    if s.chars().count() <= length.saturating_add(leeway.unwrap_or(5)) {
        return Ok(s.to_string());
    }
    let head: String = s.chars().take(length - end_chars).collect();
    let head = match killwords {
        Some(true) => head.as_str(),
        _ => head.rsplit_once(' ').map_or(head.as_str(), |(h, _)| h),
    };
    Ok(format!("{head}{end}"))
}

/// Check a campaign's templates at creation, never mid-send: they parse, and every variable
/// they read unguarded (see [`uses::unguarded`]) is built in or an attribute subscribers of the
/// account have (`known_attrs`), and is present for every recipient the campaign would have
/// now (`counts`): rendering refuses a missing variable, so one that some recipients lack
/// needs `default(...)` or an `{% if %}`. A guarded variable may be unknown.
pub fn check(
    subject: Option<&str>,
    body: &str,
    known_attrs: &BTreeSet<String>,
    counts: &VarCounts,
) -> Result<()> {
    let src = Sources {
        subject,
        text: Some(body),
        html: None,
    };
    check_all(&src, known_attrs, counts)
}

/// [`check`] for every template of a campaign: subject, text and HTML body.
pub fn check_all(
    src: &Sources<'_>,
    known_attrs: &BTreeSet<String>,
    counts: &VarCounts,
) -> Result<()> {
    let empty = |s: Option<&str>| s.is_none_or(|b| b.trim().is_empty());
    if empty(src.text) && empty(src.html) {
        return Err(Error::invalid("the body is empty"));
    }
    let env = env_with(src, &CampaignVars::default())?;
    for (name, which, source) in [
        ("subject", "subject", src.subject),
        ("body", "body", src.text),
        ("body.html", "HTML body", src.html),
    ] {
        if let Some(source) = source.filter(|s| !s.is_empty()) {
            let mut needed = needed_vars(&env, name, source)
                .map_err(|e| Error::invalid(e.message.replace("the body.html", "the HTML body")))?;
            needed.retain(|v| !RENDER_VARS.contains(&v.as_str()));
            check_known(which, &needed, known_attrs)?;
            check_present(which, &needed, counts)?;
        }
    }
    check_budget(src, known_attrs)
}

/// The templates rendered once for a sample recipient (every variable in `known_attrs` and
/// every built-in a short text): one that goes over the rendering budget is refused now, as the
/// worker would refuse it for every recipient. Other rendering errors are left to the checks
/// above (the sample's texts are not real values: `{{ 1 // (n | int) }}` fails for it).
fn check_budget(src: &Sources<'_>, known_attrs: &BTreeSet<String>) -> Result<()> {
    let c = Compiled::campaign(src, &CampaignVars::default(), None)?;
    match c.render_parts(&budget::sample_vars(known_attrs.iter())) {
        Err(budget::Failure::Budget(m)) => Err(budget::at_check(m)),
        _ => Ok(()),
    }
}

/// The context variables template `which` reads unguarded, sorted; globals (`range`...) left
/// out. An attribute of a subscriber variable (`{{ city.name }}`) is refused: variables are
/// text, so it would be undefined for every recipient.
fn needed_vars(env: &Environment<'_>, which: &str, source: &str) -> Result<Vec<String>> {
    let t = env
        .get_template(which)
        .map_err(|e| Error::invalid(format!("{which} template: {e}")))?;
    let unguarded = uses::unguarded(source)
        .map_err(|e| Error::invalid(format!("the {which} template does not parse: {e}")))?;
    let globals: BTreeSet<&str> = env.globals().map(|(k, _)| k).collect();
    let mut dotted: Vec<String> = t
        .undeclared_variables(true)
        .into_iter()
        .filter(|v| v.contains('.'))
        .filter(|v| {
            !v.split('.')
                .next()
                .is_some_and(|root| globals.contains(root))
        })
        .collect();
    dotted.sort();
    if let Some(v) = dotted.first() {
        return Err(Error::invalid(format!(
            "the {which} template reads `{v}`, but subscriber variables are text without \
             attributes: write `{{{{ {} }}}}`",
            v.split('.').next().unwrap_or(v)
        )));
    }
    // The walk sees `{% set name = name | title %}` read `name` before assigning it, which
    // minijinja's own list misses; it is the list used whenever the walk could follow the
    // template (and minijinja's where it could not: every variable counts as unguarded).
    let mut needed: Vec<String> = match unguarded {
        Some(u) => u.into_iter().collect(),
        None => t.undeclared_variables(false).into_iter().collect(),
    };
    needed.retain(|v| !globals.contains(v.as_str()));
    needed.sort();
    Ok(needed)
}

fn check_known(which: &str, needed: &[String], known_attrs: &BTreeSet<String>) -> Result<()> {
    let unknown: Vec<&str> = needed
        .iter()
        .map(String::as_str)
        .filter(|v| !BUILTIN_VARS.contains(v) && !known_attrs.contains(*v))
        .collect();
    if unknown.is_empty() {
        return Ok(());
    }
    let mut available: Vec<&str> = BUILTIN_VARS.to_vec();
    available.extend(known_attrs.iter().map(|s| s.as_str()));
    Err(Error::invalid(format!(
        "the {which} template uses unknown variable(s) {}; available: {}",
        unknown.join(", "),
        available.join(", ")
    )))
}

fn check_present(which: &str, needed: &[String], counts: &VarCounts) -> Result<()> {
    let address = match counts.channel {
        Channel::Email => "an email address",
        Channel::Sms => "a phone number",
    };
    let lacking: Vec<String> = needed
        .iter()
        .filter_map(|v| {
            let have = counts.present.get(v).copied().unwrap_or(0);
            let lack = counts.total.saturating_sub(have);
            (lack > 0).then(|| {
                format!(
                    "the {which} template uses `{v}` without a default, but {lack} of the {} \
                     confirmed subscribers with {address} lack it: write \
                     {{{{ {v} | default(\"...\") }}}}, guard it with \
                     {{% if {v} %}}...{{% endif %}}, or give every subscriber a {v}",
                    counts.total
                )
            })
        })
        .collect();
    if lacking.is_empty() {
        return Ok(());
    }
    Err(Error::invalid(format!(
        "{} (a message that needs a missing variable fails for that recipient)",
        lacking.join("; ")
    )))
}

impl Compiled {
    /// A subject and a text body, with no campaign variables (tests, benchmarks).
    pub fn new(subject: Option<&str>, body: &str) -> Result<Self> {
        let src = Sources {
            subject,
            text: Some(body),
            html: None,
        };
        Compiled::campaign(&src, &CampaignVars::default(), None)
    }

    /// A campaign's templates; `footer` is appended to every text on a line of its own.
    pub fn campaign(
        src: &Sources<'_>,
        campaign: &CampaignVars,
        footer: Option<&str>,
    ) -> Result<Self> {
        let some = |s: Option<&str>| s.is_some_and(|b| !b.is_empty());
        Ok(Compiled {
            env: env_with(src, campaign)?,
            has_subject: src.subject.is_some(),
            has_text: some(src.text),
            has_html: some(src.html),
            footer: footer.filter(|f| !f.trim().is_empty()).map(str::to_string),
            literal: None,
        })
    }

    /// Text that is sent as it is, whatever braces it contains.
    pub fn literal(subject: Option<&str>, body: &str) -> Self {
        Compiled {
            env: Environment::new(),
            has_subject: subject.is_some(),
            has_text: true,
            has_html: false,
            footer: None,
            literal: Some(Rendered {
                subject: subject.map(str::to_string),
                text: body.to_string(),
                html: None,
            }),
        }
    }

    /// A message sent as it is (an API message): `text` (empty: generated from `html` once,
    /// here) and an optional HTML part.
    pub fn literal_message(subject: Option<&str>, text: &str, html: Option<&str>) -> Result<Self> {
        let text = match html {
            Some(h) if text.is_empty() => text_of_html(h)?,
            _ => text.to_string(),
        };
        let mut c = Compiled::literal(subject, &text);
        if let Some(r) = c.literal.as_mut() {
            r.html = html.map(str::to_string);
        }
        Ok(c)
    }

    /// Whether a template reads `var` (an unsubscribe link the sender must be able to sign).
    pub fn reads(&self, var: &str) -> bool {
        ["subject", "body", "body.html"].iter().any(|name| {
            self.env
                .get_template(name)
                .is_ok_and(|t| t.undeclared_variables(false).contains(var))
        })
    }

    /// Every top-level variable the templates read (`campaign` and the other globals aside).
    pub fn variables(&self) -> BTreeSet<String> {
        ["subject", "body", "body.html"]
            .iter()
            .filter_map(|name| self.env.get_template(name).ok())
            .flat_map(|t| t.undeclared_variables(false))
            .filter(|v| v != "campaign")
            .collect()
    }

    /// Render from the captured variables as stored (JSON text), without building a
    /// `serde_json::Value` first; `unsubscribe_url` is this recipient's link, if the sender
    /// has one.
    pub fn render_json(&self, vars: &str, unsubscribe_url: Option<&str>) -> Result<Rendered> {
        if let Some(r) = self.literal_text() {
            return Ok(r);
        }
        let v: minijinja::Value = serde_json::from_str(vars)
            .map_err(|e| Error::invalid(format!("captured variables: {e}")))?;
        match unsubscribe_url {
            Some(url) => self.render(&minijinja::context! { unsubscribe_url => url, ..v }),
            None => self.render(&v),
        }
    }

    fn literal_text(&self) -> Option<Rendered> {
        self.literal.clone()
    }

    /// Render one recipient's message from its variables (a JSON object). The text part of an
    /// HTML-only email is generated from the rendered HTML. Each template runs within the
    /// rendering budget ([`RENDER_FUEL`] steps, [`MAX_RENDERED_BYTES`] of output); going over
    /// it is an error that names the bound.
    pub fn render<S: serde::Serialize>(&self, vars: &S) -> Result<Rendered> {
        self.render_parts(vars).map_err(budget::Failure::into_error)
    }

    fn render_parts<S: serde::Serialize>(
        &self,
        vars: &S,
    ) -> std::result::Result<Rendered, budget::Failure> {
        if let Some(r) = self.literal_text() {
            return Ok(r);
        }
        let subject = match self.has_subject {
            true => Some(self.render_one("subject", "subject", vars)?),
            false => None,
        };
        let html = match self.has_html {
            true => Some(self.render_one("body.html", "HTML body", vars)?),
            false => None,
        };
        let mut text = match (self.has_text, &html) {
            (true, _) | (false, None) => self.render_one("body", "body", vars)?,
            (false, Some(h)) => text_of_html(h).map_err(|e| budget::Failure::Other(e.message))?,
        };
        if let Some(f) = &self.footer {
            if !text.is_empty() && !text.ends_with('\n') {
                text.push('\n');
            }
            text.push_str(f);
        }
        Ok(Rendered {
            subject,
            text,
            html,
        })
    }

    /// Template `name` rendered into a capped buffer, with minijinja's fuel set by `env_with`.
    fn render_one<S: serde::Serialize>(
        &self,
        name: &str,
        which: &str,
        vars: &S,
    ) -> std::result::Result<String, budget::Failure> {
        let mut out = budget::Capped::default();
        let rendered = self
            .env
            .get_template(name)
            .and_then(|t| t.render_captured_to(vars, &mut out).map(drop));
        match rendered {
            Ok(()) => out.into_string(which),
            Err(e) => Err(budget::Failure::of(which, &e, out.over)),
        }
    }
}

/// The text part of an email written only in HTML: the document as wrapped text, emphasis
/// marked, links listed as numbered footnotes.
/// Links are never wrapped: a URL cut across two lines does not work.
pub fn text_of_html(html: &str) -> Result<String> {
    html2text::config::plain()
        .no_link_wrapping()
        .string_from_read(html.as_bytes(), TEXT_WIDTH)
        .map_err(|e| Error::invalid(format!("cannot turn the HTML body into text: {e}")))
}

#[cfg(test)]
mod tests {
    use super::*;

    /// Two recipients; both have a name and `city`, one has `nickname`.
    fn counts() -> VarCounts {
        let present = [("name", 2), ("email", 2), ("city", 2), ("nickname", 1)];
        VarCounts {
            channel: Channel::Email,
            total: 2,
            present: present.iter().map(|(k, n)| (k.to_string(), *n)).collect(),
        }
    }

    fn attrs() -> BTreeSet<String> {
        ["city".to_string(), "nickname".to_string()].into()
    }

    #[test]
    fn unknown_variables_are_refused_at_check() {
        let (attrs, counts) = (attrs(), counts());
        assert!(check(Some("Hi {{ name }}"), "From {{ city }}", &attrs, &counts).is_ok());
        let e = check(None, "Hello {{ nmae }}", &attrs, &counts).unwrap_err();
        assert!(
            e.message.contains("unknown variable(s) nmae"),
            "{}",
            e.message
        );
        assert!(check(None, "Hello {{ name ", &attrs, &counts).is_err());
        assert!(check(None, "   ", &attrs, &counts).is_err());
        let e = check(None, "{{ city.name | default('x') }}", &attrs, &counts).unwrap_err();
        assert!(e.message.contains("`city.name`"), "{}", e.message);
        assert!(check(
            None,
            "{% for i in range(2) %}{{ i }}{% endfor %}",
            &attrs,
            &counts
        )
        .is_ok());
    }

    #[test]
    fn a_variable_some_recipients_lack_needs_a_default_or_a_guard() {
        let (attrs, counts) = (attrs(), counts());
        let e = check(None, "Hi {{ nickname }}", &attrs, &counts).unwrap_err();
        assert!(
            e.message
                .contains("`nickname` without a default, but 1 of the 2")
                && e.message.contains("{{ nickname | default(\"...\") }}"),
            "{}",
            e.message
        );
        let e = check(None, "{{ phone }}", &attrs, &counts).unwrap_err();
        assert!(e.message.contains("`phone`"), "{}", e.message);
        // Reassigning a variable from itself still reads it first.
        let e = check(
            None,
            "{% set nickname = nickname | title %}Hi {{ nickname }}",
            &attrs,
            &counts,
        )
        .unwrap_err();
        assert!(e.message.contains("`nickname`"), "{}", e.message);
        for ok in [
            "{% set greeting = 'Hi' %}{{ greeting }} {{ name }}",
            "{% for c in [city] %}{{ c }}{{ loop.index }}{% endfor %}",
            "Hi {{ nickname | default('friend') | title }}",
            "{% if nickname %}Hi {{ nickname }}{% endif %}",
            "{{ unknown_to_all | d('x') }}{% if other is defined %}{{ other }}{% endif %}",
        ] {
            assert!(check(None, ok, &attrs, &counts).is_ok(), "{ok}");
        }
    }

    #[test]
    fn render_is_deterministic_and_refuses_a_missing_variable() {
        let c = Compiled::new(Some("Hi {{ name }}"), "City: {{ city | d('-') }}\n").unwrap();
        let v = serde_json::json!({"name": "Ann", "email": "a@x.com"});
        let a = c.render(&v).unwrap();
        assert_eq!(a, c.render(&v).unwrap());
        assert_eq!(a, c.render_json(&v.to_string(), None).unwrap());
        assert_eq!(a.subject.as_deref(), Some("Hi Ann"));
        assert_eq!(a.text, "City: -\n");
        for body in [
            "{{ city }}",
            "{{ city | upper }}",
            "{% for c in city %}{% endfor %}",
        ] {
            let c = Compiled::new(None, body).unwrap();
            let e = c.render(&v).unwrap_err();
            assert!(e.message.contains("undefined"), "{body}: {}", e.message);
        }
        let c = Compiled::new(
            None,
            "{% if city %}in {{ city }}{% else %}nowhere{% endif %}",
        )
        .unwrap();
        assert_eq!(c.render(&v).unwrap().text, "nowhere");
    }

    #[test]
    fn truncate_follows_jinja2() {
        let s = "foo bar baz qux";
        let c = Compiled::new(
            None,
            "{{ s | truncate(9) }}|{{ s | truncate(9, true) }}|{{ s | truncate(11) }}|\
             {{ s | truncate(11, false, '...', leeway=0) }}|{{ s | truncate(length=7, end='~') }}",
        )
        .unwrap();
        let out = c.render(&serde_json::json!({ "s": s })).unwrap().text;
        assert_eq!(out, "foo...|foo ba...|foo bar baz qux|foo bar...|foo~");
        let c = Compiled::new(None, "{{ s | truncate(2) }}").unwrap();
        assert!(c.render(&serde_json::json!({ "s": s })).is_err());
    }
}
