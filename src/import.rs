//! Subscriber input: one validated subscriber from flags, CSV files streamed row by row with
//! line numbers in every error, and message bodies read with a size limit. Every input has a
//! limit a real list or message never reaches (README "Input limits"), checked while reading,
//! so a huge or endless input fails fast with an error instead of filling memory.

use crate::address::{normalize_email, normalize_phone};
use crate::error::{Error, Result};
use crate::store::NewSubscriber;
use std::cell::Cell;
use std::collections::HashMap;
use std::io::{BufRead, Read};
use std::path::Path;
use std::rc::Rc;

pub const STATUSES: [&str; 4] = ["pending", "confirmed", "unsubscribed", "bounced"];

/// The largest message body: `campaign create --body-file`, `notify --message-file` or the
/// message piped to `notify`. A byte limit on what is read, not an SMS length limit.
pub const MAX_BODY_BYTES: u64 = 1024 * 1024;
/// The most columns a subscriber CSV may have, and the most attributes a subscriber may have.
pub const MAX_COLUMNS: usize = 256;
/// The largest CSV row (header included), delimiters and line ending included.
pub const MAX_ROW_BYTES: u64 = 1024 * 1024;
/// The largest attribute value.
pub const MAX_ATTR_BYTES: usize = 64 * 1024;
/// The largest email address, phone number, name, status, column name or attribute name.
pub const MAX_FIELD_BYTES: usize = 1024;

/// A byte count as people write limits: `1 MiB`, `64 KiB`, `100 bytes`.
pub fn size(n: u64) -> String {
    const MIB: u64 = 1024 * 1024;
    if n >= MIB && n.is_multiple_of(MIB) {
        format!("{} MiB", n / MIB)
    } else if n >= 1024 && n.is_multiple_of(1024) {
        format!("{} KiB", n / 1024)
    } else {
        format!("{n} bytes")
    }
}

/// Read at most `limit` bytes from `r`; more is an error (usage) naming `source` (the flag and
/// file, or "the message on stdin"), the limit and `purpose`. Reads no more than `limit + 1`
/// bytes whatever `r` is (a FIFO, stdin, `/dev/zero`), so memory stays bounded.
pub fn read_limited(r: impl Read, source: &str, limit: u64, purpose: &str) -> Result<Vec<u8>> {
    let mut buf = Vec::new();
    r.take(limit.saturating_add(1))
        .read_to_end(&mut buf)
        .map_err(|e| Error::io(&format!("cannot read {source}"), e))?;
    if buf.len() as u64 > limit {
        return Err(Error::invalid(format!(
            "{source} is larger than the {} limit for {purpose}",
            size(limit)
        )));
    }
    Ok(buf)
}

/// [`read_limited`] for UTF-8 text.
pub fn read_text(r: impl Read, source: &str, limit: u64, purpose: &str) -> Result<String> {
    String::from_utf8(read_limited(r, source, limit, purpose)?)
        .map_err(|_| Error::invalid(format!("{source} is not valid UTF-8")))
}

/// A message body from the file given to `flag` (`--body-file`, `--message-file`): UTF-8 text of
/// at most [`MAX_BODY_BYTES`]. `--body-file /dev/zero` fails after reading 1 MiB + 1 byte.
pub fn read_body_file(flag: &str, path: &Path) -> Result<String> {
    let source = format!("{flag} {}", path.display());
    let file =
        std::fs::File::open(path).map_err(|e| Error::io(&format!("cannot read {source}"), e))?;
    read_text(file, &source, MAX_BODY_BYTES, "a message body")
}

/// A message body from stdin, with the same limit as [`read_body_file`].
pub fn read_body_stdin() -> Result<String> {
    read_text(
        std::io::stdin().lock(),
        "the message on stdin",
        MAX_BODY_BYTES,
        "a message body",
    )
}

fn too_long(what: &str, len: usize, limit: usize) -> Error {
    Error::invalid(format!(
        "{what} is {len} bytes, longer than the {} limit",
        size(limit as u64)
    ))
}

/// Validate the fields of one subscriber.
pub fn subscriber(
    email: Option<&str>,
    phone: Option<&str>,
    name: Option<&str>,
    status: Option<&str>,
    attrs: &[(String, String)],
) -> Result<NewSubscriber> {
    // Sizes first, so that no later message quotes a huge value.
    for (what, v) in [
        ("the email address", email),
        ("the phone number", phone),
        ("the name", name),
        ("the status", status),
    ] {
        if let Some(v) = v.filter(|v| v.len() > MAX_FIELD_BYTES) {
            return Err(too_long(what, v.len(), MAX_FIELD_BYTES));
        }
    }
    if attrs.len() > MAX_COLUMNS {
        return Err(Error::invalid(format!(
            "{} attributes, more than the limit of {MAX_COLUMNS}",
            attrs.len()
        )));
    }
    for (k, v) in attrs {
        if k.len() > MAX_FIELD_BYTES {
            return Err(too_long("an attribute name", k.len(), MAX_FIELD_BYTES));
        }
        if v.len() > MAX_ATTR_BYTES {
            return Err(too_long(
                &format!("attribute {:?}", k.trim()),
                v.len(),
                MAX_ATTR_BYTES,
            ));
        }
    }
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

/// Validate the fields `subscriber update` changes (the same rules as [`subscriber`]).
pub fn changes(
    name: Option<&str>,
    status: Option<&str>,
    attrs: &[String],
) -> Result<crate::store::SubscriberChanges> {
    if name.is_none() && status.is_none() && attrs.is_empty() {
        return Err(Error::invalid(
            "nothing to change: give --name, --status or --attr KEY=VALUE",
        ));
    }
    let pairs = attrs
        .iter()
        .map(|a| parse_attr(a))
        .collect::<Result<Vec<_>>>()?;
    // Reuse the full check with a placeholder address: it validates status and attributes.
    let checked = subscriber(Some("x@example.org"), None, name, status, &pairs)?;
    Ok(crate::store::SubscriberChanges {
        name: name.and(checked.name),
        status: status.map(|_| checked.status),
        attrs: (!pairs.is_empty()).then_some(checked.attrs),
    })
}

/// Parse `k=v` from `--attr`.
pub fn parse_attr(s: &str) -> Result<(String, String)> {
    let (k, v) = s
        .split_once('=')
        .ok_or_else(|| Error::invalid(format!("--attr {s:?} must be written key=value")))?;
    Ok((k.to_string(), v.to_string()))
}

/// Hands the CSV parser at most `MAX_ROW_BYTES + 1` bytes past the start of the row being
/// parsed. The parser asks for more only once it has consumed everything it was given, so a
/// refused read means the current row is longer than the limit: a 50 MB field or a million
/// columns stop the import there instead of being buffered whole.
struct RowBound<R> {
    inner: R,
    /// Bytes handed to the parser so far.
    given: u64,
    /// Where the current row starts (the parser's byte position after the previous row).
    row_start: Rc<Cell<u64>>,
    /// Set when a read was refused.
    tripped: Rc<Cell<bool>>,
}

impl<R: Read> Read for RowBound<R> {
    fn read(&mut self, buf: &mut [u8]) -> std::io::Result<usize> {
        let cap = self.row_start.get().saturating_add(MAX_ROW_BYTES + 1);
        let room = cap.saturating_sub(self.given);
        if room == 0 {
            self.tripped.set(true);
            return Err(std::io::Error::other("row longer than the limit"));
        }
        let n = buf.len().min(usize::try_from(room).unwrap_or(usize::MAX));
        let got = self.inner.read(&mut buf[..n])?;
        self.given += got as u64;
        Ok(got)
    }
}

fn row_too_long(file: &impl std::fmt::Display, line: u64) -> Error {
    Error::invalid(format!(
        "{file}: line {line}: the row is longer than the {} limit for one CSV row \
         (at most {MAX_COLUMNS} columns, {} per attribute value, {} per email, phone, name, \
         status or column name); nothing was imported",
        size(MAX_ROW_BYTES),
        size(MAX_ATTR_BYTES as u64),
        size(MAX_FIELD_BYTES as u64)
    ))
}

/// Read a CSV file of subscribers. The header names the columns: `email` and/or `phone`
/// (at least one), optional `name` and `status`; every other column becomes an attribute.
/// Returns one entry per data row with its line number; a file-level problem is an error.
/// The file is streamed row by row: memory follows the rows kept, and a row or header over
/// the limits ([`MAX_ROW_BYTES`], [`MAX_COLUMNS`]) is an error naming its line. Field sizes
/// ([`MAX_FIELD_BYTES`], [`MAX_ATTR_BYTES`]) are checked per row by [`subscriber`].
/// Every row is kept, invalid ones as their error (what `--skip-invalid` reports).
pub fn read_csv(path: &Path) -> Result<Vec<(u64, Result<NewSubscriber>)>> {
    read_csv_with(path, true)
}

/// [`read_csv`]; with `keep_invalid` false, reading stops after the first invalid row (an
/// import without `--skip-invalid` stops there anyway), so a file of garbage costs nothing
/// past its first bad row.
pub fn read_csv_with(path: &Path, keep_invalid: bool) -> Result<Vec<(u64, Result<NewSubscriber>)>> {
    let file = path.display();
    let f = std::fs::File::open(path).map_err(|e| Error::io(&format!("cannot read {file}"), e))?;
    let mut input = std::io::BufReader::with_capacity(64 * 1024, f);
    // A UTF-8 byte order mark (spreadsheet exports) is not part of the first column's name.
    // `fill_buf` may return fewer bytes than the mark on a pipe; then it is simply kept.
    let has_bom = input
        .fill_buf()
        .map_err(|e| Error::io(&format!("cannot read {file}"), e))?
        .starts_with(b"\xef\xbb\xbf");
    if has_bom {
        input.consume(3);
    }
    let row_start = Rc::new(Cell::new(0u64));
    let tripped = Rc::new(Cell::new(false));
    let mut rdr = csv::ReaderBuilder::new()
        .has_headers(true)
        .flexible(false)
        .from_reader(RowBound {
            inner: input,
            given: 0,
            row_start: Rc::clone(&row_start),
            tripped: Rc::clone(&tripped),
        });
    let headers = match rdr.headers() {
        Ok(h) => h.clone(),
        Err(_) if tripped.get() => return Err(row_too_long(&file, 1)),
        Err(e) => {
            return Err(Error::invalid(format!(
                "{file}: cannot read the header line: {e}"
            )))
        }
    };
    if rdr.position().byte() > MAX_ROW_BYTES {
        return Err(row_too_long(&file, 1));
    }
    row_start.set(rdr.position().byte());
    if headers.len() > MAX_COLUMNS {
        return Err(Error::invalid(format!(
            "{file}: line 1: the header has {} columns, more than the limit of {MAX_COLUMNS}; \
             nothing was imported",
            headers.len()
        )));
    }
    if let Some((i, h)) = headers
        .iter()
        .enumerate()
        .find(|(_, h)| h.len() > MAX_FIELD_BYTES)
    {
        return Err(Error::invalid(format!(
            "{file}: line 1: the name of column {} is {} bytes, longer than the {} limit; \
             nothing was imported",
            i + 1,
            h.len(),
            size(MAX_FIELD_BYTES as u64)
        )));
    }
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
            Err(_) if tripped.get() => return Err(row_too_long(&file, line)),
            Err(e) => {
                let at = e.position().map(|p| p.line()).unwrap_or(line);
                return Err(Error::invalid(format!("{file}: line {at}: {e}")));
            }
        }
        let line = record.position().map(|p| p.line()).unwrap_or(line);
        let end = rdr.position().byte();
        if end.saturating_sub(row_start.get()) > MAX_ROW_BYTES {
            return Err(row_too_long(&file, line));
        }
        row_start.set(end);
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
        let stop = !keep_invalid && parsed.is_err();
        out.push((line, parsed));
        if stop {
            break;
        }
    }
    Ok(out)
}

#[cfg(test)]
mod tests {
    use super::*;

    fn file(content: &[u8]) -> tempfile::NamedTempFile {
        let mut f = tempfile::NamedTempFile::new().expect("temp file");
        std::io::Write::write_all(&mut f, content).expect("write");
        f
    }

    #[test]
    fn read_limited_stops_one_byte_past_the_limit() {
        let r = read_limited(&b"abcd"[..], "x", 4, "a test");
        assert_eq!(r.ok(), Some(b"abcd".to_vec()));
        let e = read_limited(std::io::repeat(0), "--body-file /dev/zero", 1024, "a body")
            .expect_err("endless input refused");
        assert_eq!(e.kind, crate::error::ErrorKind::Invalid);
        assert_eq!(
            e.message,
            "--body-file /dev/zero is larger than the 1 KiB limit for a body"
        );
        assert_eq!(size(MAX_BODY_BYTES), "1 MiB");
        assert_eq!(size(100), "100 bytes");
    }

    #[test]
    fn without_keep_invalid_reading_stops_at_the_first_invalid_row() {
        let f = file(b"email\na@x.com\nbroken\nb@x.com\nalso broken\n");
        let all = read_csv_with(f.path(), true).expect("read");
        assert_eq!(all.len(), 4);
        let first = read_csv_with(f.path(), false).expect("read");
        assert_eq!(first.len(), 2);
        assert_eq!(first[1].0, 3);
        assert!(first[1].1.is_err());
    }

    #[test]
    fn a_row_at_the_limit_is_read_and_one_byte_more_is_refused() {
        // "a@x.com," + value + "\n" is exactly MAX_ROW_BYTES, then one byte more. (The value
        // is over the attribute limit: that is the row's own error, not the file's.)
        let head = b"email,note\n";
        let fill = MAX_ROW_BYTES as usize - b"a@x.com,\n".len();
        for (extra, ok) in [(0, true), (1, false)] {
            let mut content = head.to_vec();
            content.extend_from_slice(b"a@x.com,");
            content.extend(std::iter::repeat_n(b'v', fill + extra));
            content.extend_from_slice(b"\n");
            let f = file(&content);
            let rows = read_csv(f.path());
            assert_eq!(rows.is_ok(), ok, "{extra} byte(s) over");
            if let Err(e) = rows {
                assert!(e.message.contains("line 2"), "{}", e.message);
            }
        }
    }
}
