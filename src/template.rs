//! Message templates (minijinja): checked once at campaign creation, rendered deterministically per recipient.
//!
//! Rendering is a pure function of the frozen campaign content and the variables captured
//! when the list was built, so a retry sends byte-identical content.

use crate::error::{Error, Result};
use minijinja::Environment;
use std::collections::BTreeSet;

/// Variables every recipient has, whatever its attributes.
pub const BUILTIN_VARS: [&str; 3] = ["name", "email", "phone"];

/// The compiled subject and body of one campaign (or literal text, for notifications).
pub struct Compiled {
    env: Environment<'static>,
    has_subject: bool,
    /// Literal subject and body, sent verbatim: `{{` in a CI message is not a template.
    literal: Option<(Option<String>, String)>,
}

fn env_with(subject: Option<&str>, body: &str) -> Result<Environment<'static>> {
    let mut env = Environment::new();
    env.set_keep_trailing_newline(true);
    env.add_template_owned("body", body.to_string())
        .map_err(|e| Error::invalid(format!("the body template does not parse: {e}")))?;
    if let Some(s) = subject {
        env.add_template_owned("subject", s.to_string())
            .map_err(|e| Error::invalid(format!("the subject template does not parse: {e}")))?;
    }
    Ok(env)
}

/// Check a campaign's templates: they parse, and every variable they use is either built in or
/// an attribute that subscribers of the account have. Called at creation, never mid-send.
pub fn check(subject: Option<&str>, body: &str, known_attrs: &BTreeSet<String>) -> Result<()> {
    if body.trim().is_empty() {
        return Err(Error::invalid("the body is empty"));
    }
    let env = env_with(subject, body)?;
    for (which, present) in [("subject", subject.is_some()), ("body", true)] {
        if !present {
            continue;
        }
        let t = env
            .get_template(which)
            .map_err(|e| Error::invalid(format!("{which} template: {e}")))?;
        let mut unknown: Vec<String> = t
            .undeclared_variables(false)
            .into_iter()
            .filter(|v| !BUILTIN_VARS.contains(&v.as_str()) && !known_attrs.contains(v))
            .collect();
        unknown.sort();
        if !unknown.is_empty() {
            let mut available: Vec<&str> = BUILTIN_VARS.to_vec();
            available.extend(known_attrs.iter().map(|s| s.as_str()));
            return Err(Error::invalid(format!(
                "the {which} template uses unknown variable(s) {}; available: {}",
                unknown.join(", "),
                available.join(", ")
            )));
        }
    }
    Ok(())
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

    #[test]
    fn unknown_variables_are_refused_at_check() {
        let attrs: BTreeSet<String> = ["city".to_string()].into();
        assert!(check(Some("Hi {{ name }}"), "From {{ city }}", &attrs).is_ok());
        let e = check(None, "Hello {{ nmae }}", &attrs).unwrap_err();
        assert!(e.message.contains("nmae"), "{}", e.message);
        assert!(check(None, "Hello {{ name ", &attrs).is_err());
        assert!(check(None, "   ", &attrs).is_err());
    }

    #[test]
    fn render_is_deterministic() {
        let c = Compiled::new(Some("Hi {{ name }}"), "City: {{ city }}\n").unwrap();
        let v = serde_json::json!({"name": "Ann", "email": "a@x.com"});
        let a = c.render(&v).unwrap();
        assert_eq!(a, c.render(&v).unwrap());
        assert_eq!(a, c.render_json(&v.to_string()).unwrap());
        assert_eq!(a.0.as_deref(), Some("Hi Ann"));
        assert_eq!(a.1, "City: \n");
    }
}
