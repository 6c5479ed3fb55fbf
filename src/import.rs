//! Subscriber input: one validated subscriber from flags, and CSV files parsed row by row with
//! line numbers in every error.

use crate::address::{normalize_email, normalize_phone};
use crate::error::{Error, Result};
use crate::store::NewSubscriber;
use std::collections::HashMap;
use std::path::Path;

pub const STATUSES: [&str; 4] = ["pending", "confirmed", "unsubscribed", "bounced"];

/// Validate the fields of one subscriber.
pub fn subscriber(
    email: Option<&str>,
    phone: Option<&str>,
    name: Option<&str>,
    status: Option<&str>,
    attrs: &[(String, String)],
) -> Result<NewSubscriber> {
    let email = email.filter(|s| !s.trim().is_empty());
    let phone = phone.filter(|s| !s.trim().is_empty());
    if email.is_none() && phone.is_none() {
        return Err(Error::invalid(
            "a subscriber needs an email address or a phone number",
        ));
    }
    let email = email.map(normalize_email).transpose()?;
    let phone = phone.map(normalize_phone).transpose()?;
    let status = status
        .map(str::trim)
        .filter(|s| !s.is_empty())
        .unwrap_or("confirmed");
    if !STATUSES.contains(&status) {
        return Err(Error::invalid(format!(
            "invalid status {status:?} (expected one of {})",
            STATUSES.join(", ")
        )));
    }
    let mut map = serde_json::Map::new();
    for (k, v) in attrs {
        let k = k.trim();
        if k.is_empty() || !k.chars().all(|c| c.is_ascii_alphanumeric() || c == '_') {
            return Err(Error::invalid(format!(
                "invalid attribute name {k:?} (letters, digits and _ only)"
            )));
        }
        if crate::template::BUILTIN_VARS.contains(&k) {
            return Err(Error::invalid(format!(
                "attribute {k:?} would hide the built-in variable of that name"
            )));
        }
        map.insert(k.to_string(), serde_json::Value::String(v.clone()));
    }
    Ok(NewSubscriber {
        email,
        phone,
        name: name.map(|s| s.trim().to_string()).filter(|s| !s.is_empty()),
        status: status.to_string(),
        attrs: serde_json::Value::Object(map).to_string(),
    })
}

/// Parse `k=v` from `--attr`.
pub fn parse_attr(s: &str) -> Result<(String, String)> {
    let (k, v) = s
        .split_once('=')
        .ok_or_else(|| Error::invalid(format!("--attr {s:?} must be written key=value")))?;
    Ok((k.to_string(), v.to_string()))
}

/// Read a CSV file of subscribers. The header names the columns: `email` and/or `phone`
/// (at least one), optional `name` and `status`; every other column becomes an attribute.
/// Returns one entry per data row with its line number; a file-level problem is an error.
pub fn read_csv(path: &Path) -> Result<Vec<(u64, Result<NewSubscriber>)>> {
    let bytes = std::fs::read(path)
        .map_err(|e| Error::io(&format!("cannot read {}", path.display()), e))?;
    let bytes = bytes.strip_prefix(b"\xef\xbb\xbf").unwrap_or(&bytes);
    let mut rdr = csv::ReaderBuilder::new()
        .has_headers(true)
        .flexible(false)
        .from_reader(bytes);
    let file = path.display();
    let headers = rdr
        .headers()
        .map_err(|e| Error::invalid(format!("{file}: cannot read the header line: {e}")))?
        .clone();
    let cols: Vec<String> = headers.iter().map(|h| h.trim().to_lowercase()).collect();
    let find = |n: &str| cols.iter().position(|c| c == n);
    let (email_col, phone_col) = (find("email"), find("phone"));
    if email_col.is_none() && phone_col.is_none() {
        return Err(Error::invalid(format!(
            "{file}: missing column: the header needs an `email` or a `phone` column (found: {})",
            cols.join(", ")
        )));
    }
    let mut seen_cols = HashMap::new();
    for (i, c) in cols.iter().enumerate() {
        if c.is_empty() {
            return Err(Error::invalid(format!(
                "{file}: header column {} has no name",
                i + 1
            )));
        }
        if let Some(j) = seen_cols.insert(c.clone(), i) {
            return Err(Error::invalid(format!(
                "{file}: header names column {c:?} twice (columns {} and {})",
                j + 1,
                i + 1
            )));
        }
    }
    let (name_col, status_col) = (find("name"), find("status"));
    let attr_cols: Vec<usize> = (0..cols.len())
        .filter(|i| ![email_col, phone_col, name_col, status_col].contains(&Some(*i)))
        .collect();

    let mut out = Vec::new();
    let mut seen: HashMap<String, u64> = HashMap::new();
    let mut record = csv::ByteRecord::new();
    loop {
        let line = rdr.position().line();
        match rdr.read_byte_record(&mut record) {
            Ok(false) => break,
            Ok(true) => {}
            Err(e) => {
                let at = e.position().map(|p| p.line()).unwrap_or(line);
                return Err(Error::invalid(format!("{file}: line {at}: {e}")));
            }
        }
        let line = record.position().map(|p| p.line()).unwrap_or(line);
        let text: Result<Vec<&str>> = record
            .iter()
            .map(|f| {
                std::str::from_utf8(f).map_err(|_| {
                    Error::invalid(format!(
                        "{file}: line {line}: not valid UTF-8 (bad encoding)"
                    ))
                })
            })
            .collect();
        let fields = text?;
        let get = |c: Option<usize>| c.and_then(|i| fields.get(i).copied());
        let attrs: Vec<(String, String)> = attr_cols
            .iter()
            .map(|&i| (cols[i].clone(), fields.get(i).unwrap_or(&"").to_string()))
            .collect();
        let parsed = subscriber(
            get(email_col),
            get(phone_col),
            get(name_col),
            get(status_col),
            &attrs,
        )
        .and_then(|s| {
            for key in [s.email.as_ref().map(|e| e.1.clone()), s.phone.clone()]
                .into_iter()
                .flatten()
            {
                if let Some(first) = seen.get(&key) {
                    return Err(Error::invalid(format!(
                        "duplicate: {key} already appears on line {first}"
                    )));
                }
                seen.insert(key, line);
            }
            Ok(s)
        });
        out.push((line, parsed));
    }
    Ok(out)
}
