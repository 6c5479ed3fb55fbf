//! Small steps that several operations share, written once over the seam (`sql::Tx`).

use crate::sql::{args, Arg, Column, Mismatch, Row, Tx, Value};
use sendonce_domain::error::{Error, Result};

/// `NotFound` unless account `account_id` exists.
pub(crate) fn require_account(tx: &mut dyn Tx, account_id: i64) -> Result<()> {
    if tx.exists("SELECT 1 FROM accounts WHERE id = ?1", &args![account_id])? {
        Ok(())
    } else {
        Err(Error::not_found(format!("unknown account id {account_id}")))
    }
}

/// What `campaigns.body` holds (0005): the text template, or, when the text part is generated
/// from the HTML, the HTML template (`body` is NOT NULL since 0001).
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub(crate) enum BodyFormat {
    Text,
    Html,
}

impl BodyFormat {
    pub(crate) fn as_str(self) -> &'static str {
        match self {
            BodyFormat::Text => "text",
            BodyFormat::Html => "html",
        }
    }

    pub(crate) fn parse(s: &str) -> Option<BodyFormat> {
        match s {
            "text" => Some(BodyFormat::Text),
            "html" => Some(BodyFormat::Html),
            _ => None,
        }
    }

    /// The stored `(body, body_format, html)` of a text template `body` (empty: generated
    /// from `html`) and an HTML template.
    pub(crate) fn store<'a>(
        body: &'a str,
        html: Option<&'a str>,
    ) -> (&'a str, BodyFormat, Option<&'a str>) {
        match html {
            Some(h) if body.is_empty() => (h, BodyFormat::Html, None),
            _ => (body, BodyFormat::Text, html),
        }
    }

    /// The `(text template, HTML template)` of stored columns; the text is empty when it is
    /// generated from the HTML.
    pub(crate) fn load(self, body: String, html: Option<String>) -> (String, Option<String>) {
        match self {
            BodyFormat::Text => (body, html),
            BodyFormat::Html => (String::new(), Some(body)),
        }
    }
}

impl Column for BodyFormat {
    fn from_value(v: Value<'_>) -> std::result::Result<Self, Mismatch> {
        let found = match v {
            Value::Text(t) => BodyFormat::parse(t),
            _ => None,
        };
        found.ok_or(Mismatch {
            what: "body format",
            unknown_name: true,
        })
    }
}

impl From<BodyFormat> for Arg<'_> {
    fn from(v: BodyFormat) -> Self {
        Arg::Text(v.as_str())
    }
}

// --- webhooks, rate limits ---

/// `sql` followed by a lock clause of the dialect (`Dialect::for_update`…), without a copy
/// when the clause is empty (SQLite).
pub(crate) fn locking<'a>(sql: &'a str, lock: &str) -> std::borrow::Cow<'a, str> {
    if lock.is_empty() {
        std::borrow::Cow::Borrowed(sql)
    } else {
        std::borrow::Cow::Owned(format!("{sql}{lock}"))
    }
}

// --- get_at: Directory, Suppressions, Audit, Campaigns, Messages, Notifications ---

/// Column `i` of `r` as `T`, where a value that names no variant of an enum is damage named
/// `place` (`table.column`, as the message the user sees says it).
pub(crate) fn get_at<T: Column>(r: Row<'_>, i: usize, place: &str) -> Result<T> {
    let v = r.value(i)?;
    T::from_value(v).map_err(|m| {
        if m.unknown_name {
            Error::damaged(format!("{place} holds {v}, which is not a {}", m.what))
        } else {
            Error::db(format!(
                "database error: column {place} holds {v}, not a value of type {}",
                m.what
            ))
        }
    })
}

/// SQLite's `json_patch(attrs, patch)` in Rust, byte for byte (checked against SQLite in
/// `sqlite/dialect.rs`): RFC 7396 merge patch, the target's key order kept, new keys appended,
/// a null removing its key, nested objects merged (a new object merged into `{}`, so its nulls
/// go), anything else replaced; every value's text kept as written (number `2.50`, string
/// escapes), whitespace dropped. PostgreSQL merges subscriber attributes with it
/// (`Dialect::json_patch`): its `jsonb ||` is shallow and reorders keys.
pub(crate) fn json_patch(attrs: &str, patch_text: &str) -> Result<String> {
    let target = json::parse(attrs)?;
    let patch = json::parse(patch_text)?;
    let mut out = String::with_capacity(attrs.len() + patch_text.len());
    json::merge(target, &patch).write(&mut out);
    Ok(out)
}

/// A JSON text as a tree whose leaves keep their text (for [`json_patch`]).
mod json {
    use sendonce_domain::error::{Error, Result};

    /// As deep as SQLite nests (`JSON_MAX_DEPTH`).
    const MAX_DEPTH: usize = 1000;

    pub(super) enum Json<'a> {
        /// A number, string, `true`, `false` or `null`, as written.
        Leaf(&'a str),
        Array(Vec<Json<'a>>),
        /// Members in order: the key as written (quotes included) and its value.
        Object(Vec<(&'a str, Json<'a>)>),
    }

    fn malformed() -> Error {
        Error::db("database error: malformed JSON")
    }

    /// `text` as a tree; malformed JSON is an error (as SQLite's is).
    pub(super) fn parse(text: &str) -> Result<Json<'_>> {
        let mut p = Parser { s: text, i: 0 };
        let v = p.value(0)?;
        p.space();
        if p.i == text.len() {
            Ok(v)
        } else {
            Err(malformed())
        }
    }

    struct Parser<'a> {
        s: &'a str,
        i: usize,
    }

    impl<'a> Parser<'a> {
        fn peek(&self) -> Option<u8> {
            self.s.as_bytes().get(self.i).copied()
        }

        fn space(&mut self) {
            while matches!(self.peek(), Some(b' ' | b'\t' | b'\n' | b'\r')) {
                self.i += 1;
            }
        }

        fn eat(&mut self, b: u8) -> bool {
            self.space();
            let hit = self.peek() == Some(b);
            if hit {
                self.i += 1;
            }
            hit
        }

        fn value(&mut self, depth: usize) -> Result<Json<'a>> {
            if depth > MAX_DEPTH {
                return Err(malformed());
            }
            self.space();
            match self.peek() {
                Some(b'{') => self.object(depth),
                Some(b'[') => self.array(depth),
                Some(b'"') => self.string().map(Json::Leaf),
                Some(_) => self.scalar().map(Json::Leaf),
                None => Err(malformed()),
            }
        }

        fn object(&mut self, depth: usize) -> Result<Json<'a>> {
            self.i += 1;
            let mut members = Vec::new();
            if self.eat(b'}') {
                return Ok(Json::Object(members));
            }
            loop {
                self.space();
                let key = self.string()?;
                if !self.eat(b':') {
                    return Err(malformed());
                }
                members.push((key, self.value(depth + 1)?));
                if self.eat(b'}') {
                    return Ok(Json::Object(members));
                }
                if !self.eat(b',') {
                    return Err(malformed());
                }
            }
        }

        fn array(&mut self, depth: usize) -> Result<Json<'a>> {
            self.i += 1;
            let mut items = Vec::new();
            if self.eat(b']') {
                return Ok(Json::Array(items));
            }
            loop {
                items.push(self.value(depth + 1)?);
                if self.eat(b']') {
                    return Ok(Json::Array(items));
                }
                if !self.eat(b',') {
                    return Err(malformed());
                }
            }
        }

        /// A string token, quotes included (checked by serde_json's own string grammar).
        fn string(&mut self) -> Result<&'a str> {
            let start = self.i;
            if self.peek() != Some(b'"') {
                return Err(malformed());
            }
            self.i += 1;
            loop {
                match self.peek() {
                    None => return Err(malformed()),
                    Some(b'"') => break,
                    Some(b'\\') => self.i += 2,
                    Some(_) => self.i += 1,
                }
            }
            self.i += 1;
            let token = self.s.get(start..self.i).ok_or_else(malformed)?;
            serde_json::from_str::<String>(token).map_err(|_| malformed())?;
            Ok(token)
        }

        /// A number or a literal.
        fn scalar(&mut self) -> Result<&'a str> {
            let start = self.i;
            while matches!(self.peek(), Some(b) if b.is_ascii_alphanumeric() || b"+-.".contains(&b))
            {
                self.i += 1;
            }
            let token = &self.s[start..self.i];
            if matches!(token, "true" | "false" | "null") || is_number(token) {
                Ok(token)
            } else {
                Err(malformed())
            }
        }
    }

    /// JSON's number grammar: `-?(0|[1-9][0-9]*)(\.[0-9]+)?([eE][+-]?[0-9]+)?`.
    fn is_number(t: &str) -> bool {
        fn digits(b: &[u8]) -> usize {
            b.iter().take_while(|c| c.is_ascii_digit()).count()
        }
        let mut b = t.as_bytes();
        if let [b'-', rest @ ..] = b {
            b = rest;
        }
        let n = digits(b);
        if n == 0 || (n > 1 && b[0] == b'0') {
            return false;
        }
        b = &b[n..];
        if let [b'.', rest @ ..] = b {
            let n = digits(rest);
            if n == 0 {
                return false;
            }
            b = &rest[n..];
        }
        if let [b'e' | b'E', rest @ ..] = b {
            let rest = match rest {
                [b'+' | b'-', r @ ..] => r,
                r => r,
            };
            let n = digits(rest);
            if n == 0 {
                return false;
            }
            b = &rest[n..];
        }
        b.is_empty()
    }

    /// The key's text decoded (SQLite compares labels by what they say, not how).
    fn same_key(a: &str, b: &str) -> bool {
        if a == b || (!a.contains('\\') && !b.contains('\\')) {
            return a == b;
        }
        serde_json::from_str::<String>(a).ok() == serde_json::from_str::<String>(b).ok()
    }

    fn is_null(v: &Json<'_>) -> bool {
        matches!(v, Json::Leaf("null"))
    }

    fn clone<'a>(v: &Json<'a>) -> Json<'a> {
        match v {
            Json::Leaf(t) => Json::Leaf(t),
            Json::Array(items) => Json::Array(items.iter().map(clone).collect()),
            Json::Object(m) => Json::Object(m.iter().map(|(k, v)| (*k, clone(v))).collect()),
        }
    }

    /// RFC 7396 as SQLite's `jsonMergePatch` runs it.
    pub(super) fn merge<'a>(target: Json<'a>, patch: &Json<'a>) -> Json<'a> {
        let Json::Object(changes) = patch else {
            return clone(patch);
        };
        let mut members = match target {
            Json::Object(m) => m,
            _ => Vec::new(),
        };
        for (key, value) in changes {
            match members.iter().position(|(k, _)| same_key(key, k)) {
                Some(at) if is_null(value) => {
                    members.remove(at);
                }
                Some(at) => {
                    let old = std::mem::replace(&mut members[at].1, Json::Leaf("null"));
                    members[at].1 = merge(old, value);
                }
                None if is_null(value) => {}
                None => members.push((key, merge(Json::Object(Vec::new()), value))),
            }
        }
        Json::Object(members)
    }

    impl Json<'_> {
        /// The minified text.
        pub(super) fn write(&self, out: &mut String) {
            match self {
                Json::Leaf(t) => out.push_str(t),
                Json::Array(items) => {
                    out.push('[');
                    for (n, v) in items.iter().enumerate() {
                        if n > 0 {
                            out.push(',');
                        }
                        v.write(out);
                    }
                    out.push(']');
                }
                Json::Object(members) => {
                    out.push('{');
                    for (n, (k, v)) in members.iter().enumerate() {
                        if n > 0 {
                            out.push(',');
                        }
                        out.push_str(k);
                        out.push(':');
                        v.write(out);
                    }
                    out.push('}');
                }
            }
        }
    }
}
