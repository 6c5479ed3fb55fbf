//! Message templates (minijinja): checked once at campaign creation, rendered deterministically per recipient.
//!
//! Rendering is a pure function of the frozen campaign content and the variables captured
//! when the list was built, so a retry sends byte-identical content.

use crate::domain::address::Channel;
use crate::error::{Error, Result};
use minijinja::value::Kwargs;
use minijinja::{Environment, UndefinedBehavior};
use std::collections::{BTreeMap, BTreeSet};

mod uses;

/// Variables every recipient has, whatever its attributes.
pub const BUILTIN_VARS: [&str; 3] = ["name", "email", "phone"];

/// The compiled subject and body of one campaign (or literal text, for notifications).
pub struct Compiled {
    env: Environment<'static>,
    has_subject: bool,
    /// Literal subject and body, sent verbatim: `{{` in a CI message is not a template.
    literal: Option<(Option<String>, String)>,
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
fn env_with(subject: Option<&str>, body: &str) -> Result<Environment<'static>> {
    let mut env = Environment::new();
    env.set_keep_trailing_newline(true);
    env.set_undefined_behavior(UndefinedBehavior::SemiStrict);
    env.add_filter("truncate", truncate);
    env.add_template_owned("body", body.to_string())
        .map_err(|e| Error::invalid(format!("the body template does not parse: {e}")))?;
    if let Some(s) = subject {
        env.add_template_owned("subject", s.to_string())
            .map_err(|e| Error::invalid(format!("the subject template does not parse: {e}")))?;
    }
    Ok(env)
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
    if body.trim().is_empty() {
        return Err(Error::invalid("the body is empty"));
    }
    let env = env_with(subject, body)?;
    for (which, source) in [("subject", subject), ("body", Some(body))] {
        if let Some(source) = source {
            let needed = needed_vars(&env, which, source)?;
            check_known(which, &needed, known_attrs)?;
            check_present(which, &needed, counts)?;
        }
    }
    Ok(())
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
    pub fn new(subject: Option<&str>, body: &str) -> Result<Self> {
        Ok(Compiled {
            env: env_with(subject, body)?,
            has_subject: subject.is_some(),
            literal: None,
        })
    }

    /// Text that is sent as it is, whatever braces it contains.
    pub fn literal(subject: Option<&str>, body: &str) -> Self {
        Compiled {
            env: Environment::new(),
            has_subject: subject.is_some(),
            literal: Some((subject.map(str::to_string), body.to_string())),
        }
    }

    /// Render from the captured variables as stored (JSON text), without building a
    /// `serde_json::Value` first.
    pub fn render_json(&self, vars: &str) -> Result<(Option<String>, String)> {
        if let Some((subject, body)) = &self.literal {
            return Ok((subject.clone(), body.clone()));
        }
        let v: minijinja::Value = serde_json::from_str(vars)
            .map_err(|e| Error::invalid(format!("captured variables: {e}")))?;
        self.render(&v)
    }

    /// Render `(subject, body)` for one recipient's captured variables (a JSON object).
    pub fn render<S: serde::Serialize>(&self, vars: &S) -> Result<(Option<String>, String)> {
        if let Some((subject, body)) = &self.literal {
            return Ok((subject.clone(), body.clone()));
        }
        let render = |name: &str| -> Result<String> {
            self.env
                .get_template(name)
                .and_then(|t| t.render(vars))
                .map_err(|e| Error::invalid(format!("rendering the {name} failed: {e}")))
        };
        let subject = if self.has_subject {
            Some(render("subject")?)
        } else {
            None
        };
        Ok((subject, render("body")?))
    }
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
        assert_eq!(a, c.render_json(&v.to_string()).unwrap());
        assert_eq!(a.0.as_deref(), Some("Hi Ann"));
        assert_eq!(a.1, "City: -\n");
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
        assert_eq!(c.render(&v).unwrap().1, "nowhere");
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
        let out = c.render(&serde_json::json!({ "s": s })).unwrap().1;
        assert_eq!(out, "foo...|foo ba...|foo bar baz qux|foo bar...|foo~");
        let c = Compiled::new(None, "{{ s | truncate(2) }}").unwrap();
        assert!(c.render(&serde_json::json!({ "s": s })).is_err());
    }
}
