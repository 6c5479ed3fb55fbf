//! Audience filters ("segments"): a small language over subscriber attributes, parsed into a
//! [`Filter`] that the store compiles into SQL with every value bound (never spliced in).
//!
//! ```text
//! expr  := or
//! or    := and ("or" and)*
//! and   := unary ("and" unary)*
//! unary := "not" unary | "(" expr ")" | cond
//! cond  := FIELD "=" STRING | FIELD "!=" STRING
//!        | FIELD "in" "(" STRING ("," STRING)* ")" | FIELD "not" "in" "(" ... ")"
//!        | "has" FIELD | "created_after" STRING | "created_before" STRING
//! ```
//!
//! `FIELD` is an attribute name or one of the built-ins `name`, `email`, `phone`
//! (`[A-Za-z_][A-Za-z0-9_-]*`; the keywords `and`, `or`, `not`, `in`, `has`, `created_after`,
//! `created_before` are reserved and case-insensitive). Strings are in double quotes with the
//! escapes `\"` and `\\`. Comparison is on text, exact and case-sensitive, except `email`, which
//! is compared as normalised (lower-cased) on both sides. A missing attribute never equals
//! anything: `=`, `in` and `has` are false for it, `!=` and `not in` are true. Dates are
//! `YYYY-MM-DD` (midnight UTC) or RFC 3339 in UTC (`2026-01-01T09:30:00Z`); `created_after T`
//! means created at `T` or later, `created_before T` strictly before `T`.

use crate::error::{Error, Result};
use std::collections::BTreeSet;

/// The longest filter text, in bytes.
pub const MAX_TEXT_BYTES: usize = 4096;
/// The deepest nesting of `not` and parentheses.
pub const MAX_DEPTH: usize = 16;
/// The most values in one `in (...)`.
pub const MAX_VALUES: usize = 256;
/// The most conditions in one filter.
pub const MAX_CONDITIONS: usize = 64;

/// The built-in fields: subscriber columns rather than attributes.
pub const BUILTIN_FIELDS: [&str; 3] = ["name", "email", "phone"];

const KEYWORDS: [&str; 7] = [
    "and",
    "or",
    "not",
    "in",
    "has",
    "created_after",
    "created_before",
];

/// What a condition reads.
#[derive(Debug, Clone, PartialEq, Eq)]
pub enum Field {
    /// The subscriber's name.
    Name,
    /// The normalised (lower-cased) email address.
    Email,
    /// The E.164 phone number.
    Phone,
    /// A free attribute, by name.
    Attr(String),
}

impl Field {
    fn from_ident(s: &str) -> Field {
        match s {
            "name" => Field::Name,
            "email" => Field::Email,
            "phone" => Field::Phone,
            other => Field::Attr(other.to_string()),
        }
    }

    /// The name as written in a filter.
    pub fn as_str(&self) -> &str {
        match self {
            Field::Name => "name",
            Field::Email => "email",
            Field::Phone => "phone",
            Field::Attr(a) => a,
        }
    }
}

/// One condition on a subscriber.
#[derive(Debug, Clone, PartialEq, Eq)]
pub enum Cond {
    /// The field is present and equal to the text.
    Eq(Field, String),
    /// The field is missing or different from the text.
    Ne(Field, String),
    /// The field is present and equal to one of the texts.
    In(Field, Vec<String>),
    /// The field is missing or equal to none of the texts.
    NotIn(Field, Vec<String>),
    /// The field is present and not empty (nor only blanks).
    Has(Field),
    /// Created at this time (Unix ms) or later.
    CreatedAfter(i64),
    /// Created strictly before this time (Unix ms).
    CreatedBefore(i64),
}

/// A parsed audience filter. Every node is two-valued (true or false, never unknown), so `not`
/// is the plain complement.
#[derive(Debug, Clone, PartialEq, Eq)]
pub enum Filter {
    Or(Vec<Filter>),
    And(Vec<Filter>),
    Not(Box<Filter>),
    Cond(Cond),
}

impl Filter {
    /// Parse a filter as given by a person (errors name the column and what was expected).
    pub fn parse(text: &str) -> Result<Filter> {
        if text.len() > MAX_TEXT_BYTES {
            return Err(Error::invalid(format!(
                "the filter is {} bytes, more than the limit of {MAX_TEXT_BYTES}",
                text.len()
            )));
        }
        let tokens = lex(text)?;
        let mut p = Parser {
            tokens,
            pos: 0,
            depth: 0,
            conditions: 0,
        };
        let f = p.or()?;
        match p.peek() {
            Tok::End => Ok(f),
            _ => Err(p.expected("\"and\", \"or\" or the end of the filter")),
        }
    }

    /// Parse a filter read back from the database: it was checked when it was stored, so a
    /// filter that no longer parses is damage ([`Error::damaged`]), never "no filter".
    pub fn parse_stored(text: &str, campaign_id: i64) -> Result<Filter> {
        Filter::parse(text).map_err(|e| {
            Error::damaged(format!(
                "campaigns.filter of campaign {campaign_id} no longer parses ({})",
                e.message
            ))
        })
    }

    /// The names of the fields the filter reads (built-ins included).
    pub fn fields(&self) -> BTreeSet<String> {
        let mut out = BTreeSet::new();
        self.visit(&mut |c| {
            let f = match c {
                Cond::Eq(f, _) | Cond::Ne(f, _) | Cond::In(f, _) | Cond::NotIn(f, _) => f,
                Cond::Has(f) => f,
                Cond::CreatedAfter(_) | Cond::CreatedBefore(_) => return,
            };
            out.insert(f.as_str().to_string());
        });
        out
    }

    /// The fields the filter compares with a value (`=`, `!=`, `in`, `not in`): those a typo
    /// would silently turn into "nobody" or "everybody". A field only tested with `has` may be
    /// one no subscriber has yet (`not has churned`, a guard written ahead of time).
    fn compared_fields(&self) -> BTreeSet<String> {
        let mut out = BTreeSet::new();
        self.visit(&mut |c| {
            if let Cond::Eq(f, _) | Cond::Ne(f, _) | Cond::In(f, _) | Cond::NotIn(f, _) = c {
                out.insert(f.as_str().to_string());
            }
        });
        out
    }

    /// `Ok` when every compared field is a built-in or one of `attrs` (the attribute names
    /// some subscriber of the account has); otherwise a usage error listing the available
    /// ones. Fields only tested with `has` / `not has` are not checked.
    pub fn check_fields(&self, attrs: &BTreeSet<String>) -> Result<()> {
        let unknown: Vec<String> = self
            .compared_fields()
            .into_iter()
            .filter(|f| !BUILTIN_FIELDS.contains(&f.as_str()) && !attrs.contains(f))
            .collect();
        if unknown.is_empty() {
            return Ok(());
        }
        let available = if attrs.is_empty() {
            "no subscriber of the account has attributes".to_string()
        } else {
            let names: Vec<&str> = attrs.iter().map(String::as_str).collect();
            format!("the account's subscribers have {}", names.join(", "))
        };
        Err(Error::invalid(format!(
            "the filter compares unknown field(s) {}: {available} (and the built-ins name, \
             email, phone); a field no subscriber has yet can be tested with `has` / `not has`",
            unknown.join(", ")
        )))
    }

    fn visit(&self, f: &mut dyn FnMut(&Cond)) {
        match self {
            Filter::Or(v) | Filter::And(v) => v.iter().for_each(|x| x.visit(f)),
            Filter::Not(x) => x.visit(f),
            Filter::Cond(c) => f(c),
        }
    }
}

#[derive(Debug, Clone, PartialEq, Eq)]
enum Tok {
    Ident(String),
    Str(String),
    LParen,
    RParen,
    Comma,
    Eq,
    Ne,
    End,
}

impl Tok {
    fn describe(&self) -> String {
        match self {
            Tok::Ident(s) => format!("{s:?}"),
            Tok::Str(_) => "a string".to_string(),
            Tok::LParen => "\"(\"".to_string(),
            Tok::RParen => "\")\"".to_string(),
            Tok::Comma => "\",\"".to_string(),
            Tok::Eq => "\"=\"".to_string(),
            Tok::Ne => "\"!=\"".to_string(),
            Tok::End => "the end of the filter".to_string(),
        }
    }

    fn is_keyword(&self, k: &str) -> bool {
        matches!(self, Tok::Ident(s) if s.eq_ignore_ascii_case(k))
    }
}

fn at(col: usize, msg: impl std::fmt::Display) -> Error {
    Error::invalid(format!("invalid filter at column {col}: {msg}"))
}

/// Tokens with their 1-based column (in characters).
fn lex(text: &str) -> Result<Vec<(Tok, usize)>> {
    let chars: Vec<char> = text.chars().collect();
    let mut out = Vec::new();
    let mut i = 0;
    while i < chars.len() {
        let c = chars[i];
        let col = i + 1;
        let single = match c {
            '(' => Some(Tok::LParen),
            ')' => Some(Tok::RParen),
            ',' => Some(Tok::Comma),
            '=' => Some(Tok::Eq),
            _ => None,
        };
        if let Some(t) = single {
            out.push((t, col));
            i += 1;
        } else if c.is_whitespace() {
            i += 1;
        } else if c == '!' && chars.get(i + 1) == Some(&'=') {
            out.push((Tok::Ne, col));
            i += 2;
        } else if c == '"' {
            let (s, next) = lex_string(&chars, i)?;
            out.push((Tok::Str(s), col));
            i = next;
        } else if c.is_ascii_alphabetic() || c == '_' {
            let start = i;
            while i < chars.len()
                && (chars[i].is_ascii_alphanumeric() || chars[i] == '_' || chars[i] == '-')
            {
                i += 1;
            }
            out.push((Tok::Ident(chars[start..i].iter().collect()), col));
        } else {
            return Err(at(
                col,
                format!(
                    "unexpected character {c:?} (expected a field, a keyword, a string in \
                     double quotes, \"(\", \")\", \",\", \"=\" or \"!=\")"
                ),
            ));
        }
    }
    out.push((Tok::End, chars.len() + 1));
    Ok(out)
}

/// The string starting at `chars[start]` (a `"`): its text and the index after it.
fn lex_string(chars: &[char], start: usize) -> Result<(String, usize)> {
    let mut s = String::new();
    let mut i = start + 1;
    loop {
        match chars.get(i) {
            None => {
                return Err(at(
                    start + 1,
                    "this string has no closing double quote (expected '\"')",
                ))
            }
            Some('"') => return Ok((s, i + 1)),
            Some('\\') => match chars.get(i + 1) {
                Some(&c @ ('"' | '\\')) => {
                    s.push(c);
                    i += 2;
                }
                other => {
                    let found = other.map_or("the end".to_string(), |c| format!("{c:?}"));
                    return Err(at(
                        i + 1,
                        format!("expected \\\" or \\\\ after a backslash, found {found}"),
                    ));
                }
            },
            Some(&c) => {
                s.push(c);
                i += 1;
            }
        }
    }
}

struct Parser {
    tokens: Vec<(Tok, usize)>,
    pos: usize,
    depth: usize,
    conditions: usize,
}

impl Parser {
    fn peek(&self) -> &Tok {
        &self.tokens[self.pos.min(self.tokens.len() - 1)].0
    }

    fn col(&self) -> usize {
        self.tokens[self.pos.min(self.tokens.len() - 1)].1
    }

    fn next(&mut self) -> Tok {
        let t = self.peek().clone();
        if self.pos < self.tokens.len() - 1 {
            self.pos += 1;
        }
        t
    }

    fn expected(&self, what: &str) -> Error {
        at(
            self.col(),
            format!("expected {what}, found {}", self.peek().describe()),
        )
    }

    fn or(&mut self) -> Result<Filter> {
        let mut parts = vec![self.and()?];
        while self.peek().is_keyword("or") {
            self.next();
            parts.push(self.and()?);
        }
        Ok(if parts.len() == 1 {
            parts.remove(0)
        } else {
            Filter::Or(parts)
        })
    }

    fn and(&mut self) -> Result<Filter> {
        let mut parts = vec![self.unary()?];
        while self.peek().is_keyword("and") {
            self.next();
            parts.push(self.unary()?);
        }
        Ok(if parts.len() == 1 {
            parts.remove(0)
        } else {
            Filter::And(parts)
        })
    }

    fn unary(&mut self) -> Result<Filter> {
        let nests = self.peek().is_keyword("not") || *self.peek() == Tok::LParen;
        if nests {
            self.depth += 1;
            if self.depth > MAX_DEPTH {
                return Err(at(
                    self.col(),
                    format!("the filter nests deeper than {MAX_DEPTH} levels"),
                ));
            }
        }
        let f = if self.peek().is_keyword("not") {
            self.next();
            Filter::Not(Box::new(self.unary()?))
        } else if *self.peek() == Tok::LParen {
            self.next();
            let inner = self.or()?;
            if *self.peek() != Tok::RParen {
                return Err(self.expected("\")\", \"and\" or \"or\""));
            }
            self.next();
            inner
        } else {
            Filter::Cond(self.cond()?)
        };
        if nests {
            self.depth -= 1;
        }
        Ok(f)
    }

    fn cond(&mut self) -> Result<Cond> {
        self.conditions += 1;
        if self.conditions > MAX_CONDITIONS {
            return Err(at(
                self.col(),
                format!("the filter has more than {MAX_CONDITIONS} conditions"),
            ));
        }
        if self.peek().is_keyword("has") {
            self.next();
            return Ok(Cond::Has(self.field()?));
        }
        for (kw, after) in [("created_after", true), ("created_before", false)] {
            if self.peek().is_keyword(kw) {
                self.next();
                let ms = self.date()?;
                return Ok(if after {
                    Cond::CreatedAfter(ms)
                } else {
                    Cond::CreatedBefore(ms)
                });
            }
        }
        let field = self.field()?;
        self.comparison(field)
    }

    /// What follows a field: `= "x"`, `!= "x"`, `in (...)`, `not in (...)`.
    fn comparison(&mut self, field: Field) -> Result<Cond> {
        let email = field == Field::Email;
        let norm = |s: String| if email { s.to_lowercase() } else { s };
        match self.peek().clone() {
            Tok::Eq => {
                self.next();
                Ok(Cond::Eq(field, norm(self.string()?)))
            }
            Tok::Ne => {
                self.next();
                Ok(Cond::Ne(field, norm(self.string()?)))
            }
            t if t.is_keyword("in") => {
                self.next();
                let values = self.values()?.into_iter().map(norm).collect();
                Ok(Cond::In(field, values))
            }
            t if t.is_keyword("not") => {
                self.next();
                if !self.peek().is_keyword("in") {
                    return Err(self.expected("\"in\" after \"not\""));
                }
                self.next();
                let values = self.values()?.into_iter().map(norm).collect();
                Ok(Cond::NotIn(field, values))
            }
            _ => Err(self.expected(&format!(
                "\"=\", \"!=\", \"in\" or \"not in\" after the field {}",
                field.as_str()
            ))),
        }
    }

    fn field(&mut self) -> Result<Field> {
        match self.peek().clone() {
            Tok::Ident(s) if !KEYWORDS.iter().any(|k| s.eq_ignore_ascii_case(k)) => {
                self.next();
                Ok(Field::from_ident(&s))
            }
            Tok::Ident(s) => Err(at(
                self.col(),
                format!(
                    "expected a field name, found the keyword {s:?} (keywords cannot name a \
                     field)"
                ),
            )),
            _ => Err(self.expected("a field name (an attribute, name, email or phone)")),
        }
    }

    fn string(&mut self) -> Result<String> {
        if let Tok::Str(s) = self.peek().clone() {
            self.next();
            Ok(s)
        } else {
            Err(self.expected("a string in double quotes"))
        }
    }

    /// `( "a", "b", ... )`, at least one and at most [`MAX_VALUES`].
    fn values(&mut self) -> Result<Vec<String>> {
        if *self.peek() != Tok::LParen {
            return Err(self.expected("\"(\" after \"in\""));
        }
        self.next();
        let mut values = Vec::new();
        loop {
            if values.len() == MAX_VALUES {
                return Err(at(
                    self.col(),
                    format!("more than {MAX_VALUES} values in one \"in\""),
                ));
            }
            values.push(self.string()?);
            match self.peek() {
                Tok::Comma => {
                    self.next();
                }
                Tok::RParen => {
                    self.next();
                    return Ok(values);
                }
                _ => return Err(self.expected("\",\" or \")\"")),
            }
        }
    }

    /// A date string: `YYYY-MM-DD` (midnight UTC) or an RFC 3339 time in UTC.
    fn date(&mut self) -> Result<i64> {
        let col = self.col();
        let s = self.string()?;
        let is_day = s.len() == 10
            && s.bytes().enumerate().all(|(i, b)| {
                if i == 4 || i == 7 {
                    b == b'-'
                } else {
                    b.is_ascii_digit()
                }
            });
        let full = if is_day {
            format!("{s}T00:00:00Z")
        } else {
            s.clone()
        };
        crate::clock::parse_rfc3339_ms(&full).map_err(|_| {
            at(
                col,
                format!(
                    "expected a date like \"2026-01-01\" or a UTC time like \
                     \"2026-01-01T09:30:00Z\", found {s:?}"
                ),
            )
        })
    }
}

#[cfg(test)]
mod tests;
