//! Subscriber input: one validated subscriber from flags, CSV files streamed row by row with
//! line numbers in every error, and message bodies read with a size limit. Every input has a
//! limit a real list or message never reaches (docs/limits.md, "Input limits"), checked while reading,
//! so a huge or endless input fails fast with an error instead of filling memory.

use sendonce_domain::address::{normalize_email, normalize_phone};
use sendonce_domain::error::{Error, Result};
use sendonce_domain::headers::check_data;
use sendonce_store::NewSubscriber;
use std::cell::{Cell, RefCell};
use std::collections::{HashMap, VecDeque};
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
    check_sizes(email, phone, name, status, attrs)?;
    check_texts(name, attrs)?;
    let email = email.filter(|s| !s.trim().is_empty());
    let phone = phone.filter(|s| !s.trim().is_empty());
    if email.is_none() && phone.is_none() {
        return Err(Error::invalid(
            "a subscriber needs an email address or a phone number",
        ));
    }
    Ok(NewSubscriber {
        email: email.map(normalize_email).transpose()?,
        phone: phone.map(normalize_phone).transpose()?,
        name: clean_name(name),
        status: check_status(status)?.to_string(),
        attrs: attrs_json(attrs, false)?,
        consent: None,
    })
}

/// Sizes first, so that no later message quotes a huge value.
fn check_sizes(
    email: Option<&str>,
    phone: Option<&str>,
    name: Option<&str>,
    status: Option<&str>,
    attrs: &[(String, String)],
) -> Result<()> {
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
    Ok(())
}

/// A name and attribute values hold nothing a header value may not: a template may print
/// them into a subject (see [`check_data`]).
fn check_texts(name: Option<&str>, attrs: &[(String, String)]) -> Result<()> {
    if let Some(n) = name {
        check_data("the name", n).map_err(Error::invalid)?;
    }
    for (k, v) in attrs {
        check_data(&format!("attribute {:?}", k.trim()), v).map_err(Error::invalid)?;
    }
    Ok(())
}

/// The names [`sendonce_domain::template::reserved_names`] gives, computed once.
static RESERVED: std::sync::LazyLock<Vec<String>> =
    std::sync::LazyLock::new(sendonce_domain::template::reserved_names);

/// `name` is a variable templates already have: an attribute of that name would hide it.
fn reserved(name: &str) -> Result<()> {
    if RESERVED.iter().any(|r| r == name) {
        return Err(Error::invalid(format!(
            "attribute {name:?} is a reserved name: templates have a variable of that name \
             already, which it would hide (reserved: {})",
            RESERVED.join(", ")
        )));
    }
    Ok(())
}

/// A display name, trimmed; empty means none.
fn clean_name(name: Option<&str>) -> Option<String> {
    name.map(|s| s.trim().to_string()).filter(|s| !s.is_empty())
}

/// One of [`STATUSES`]; none or empty means `confirmed`.
fn check_status(status: Option<&str>) -> Result<&str> {
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
    Ok(status)
}

/// The attributes as a JSON object. An empty value is a missing value, as for `name`:
/// templates then see it as missing (refused at create, or filled by `default(...)`), never as
/// empty text. With `empty_as_null` (an update, merged with `json_patch`), an empty value is
/// written as `null`, which removes the attribute.
fn attrs_json(attrs: &[(String, String)], empty_as_null: bool) -> Result<String> {
    let mut map = serde_json::Map::new();
    for (k, v) in attrs {
        let k = k.trim();
        if k.is_empty() || !k.chars().all(|c| c.is_ascii_alphanumeric() || c == '_') {
            return Err(Error::invalid(format!(
                "invalid attribute name {k:?} (letters, digits and _ only)"
            )));
        }
        reserved(k)?;
        if !v.trim().is_empty() {
            map.insert(k.to_string(), serde_json::Value::String(v.clone()));
        } else if empty_as_null {
            map.insert(k.to_string(), serde_json::Value::Null);
        }
    }
    // A `tz` that names no zone could never place a send window.
    sendonce_domain::window::check_tz_attribute(&map)?;
    Ok(serde_json::Value::Object(map).to_string())
}

/// Validate the fields `subscriber update` changes (the same rules as [`subscriber`]);
/// `--attr key=` (empty) removes an attribute.
pub fn changes(
    name: Option<&str>,
    status: Option<&str>,
    attrs: &[String],
) -> Result<sendonce_store::SubscriberChanges> {
    if name.is_none() && status.is_none() && attrs.is_empty() {
        return Err(Error::invalid(
            "nothing to change: give --name, --status or --attr KEY=VALUE",
        ));
    }
    let pairs = attrs
        .iter()
        .map(|a| parse_attr(a))
        .collect::<Result<Vec<_>>>()?;
    check_sizes(None, None, name, status, &pairs)?;
    check_texts(name, &pairs)?;
    Ok(sendonce_store::SubscriberChanges {
        name: clean_name(name),
        status: status
            .map(|s| check_status(Some(s)))
            .transpose()?
            .map(str::to_string),
        attrs: if pairs.is_empty() {
            None
        } else {
            Some(attrs_json(&pairs, true)?)
        },
    })
}

/// Parse `k=v` from `--attr`.
pub fn parse_attr(s: &str) -> Result<(String, String)> {
    let (k, v) = s
        .split_once('=')
        .ok_or_else(|| Error::invalid(format!("--attr {s:?} must be written key=value")))?;
    Ok((k.to_string(), v.to_string()))
}

/// The text encoding of a CSV file (`subscriber import --encoding`).
#[derive(Debug, Clone, Copy, PartialEq, Eq, Default)]
pub enum Encoding {
    /// UTF-8; any invalid byte sequence is an error naming its line.
    #[default]
    Utf8,
    /// ISO-8859-1: every byte is the Unicode character of the same number.
    Latin1,
}

impl Encoding {
    /// `utf8` or `latin1`, as `--encoding` takes them.
    pub fn parse(s: &str) -> Result<Encoding> {
        match s {
            "utf8" => Ok(Encoding::Utf8),
            "latin1" => Ok(Encoding::Latin1),
            _ => Err(Error::invalid(format!(
                "--encoding {s:?}: expected utf8 or latin1"
            ))),
        }
    }

    /// The text of one field; `None` if it is not valid in this encoding.
    fn decode(self, bytes: &[u8]) -> Option<String> {
        match self {
            Encoding::Utf8 => std::str::from_utf8(bytes).ok().map(str::to_string),
            Encoding::Latin1 => Some(bytes.iter().map(|&b| char::from(b)).collect()),
        }
    }
}

/// How a subscriber CSV file is written: the byte between fields and the text encoding.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct CsvFormat {
    pub delimiter: u8,
    pub encoding: Encoding,
}

impl Default for CsvFormat {
    fn default() -> Self {
        CsvFormat {
            delimiter: b',',
            encoding: Encoding::Utf8,
        }
    }
}

/// The delimiters `--delimiter` accepts, and how each is written in messages and on the
/// command line.
const DELIMITERS: [(u8, &str, &str); 4] = [
    (b',', "`,`", "','"),
    (b';', "`;`", "';'"),
    (b'\t', "tabs", "tab"),
    (b'|', "`|`", "'|'"),
];

/// `--delimiter`: `,`, `;`, `|`, or a tab written `tab`, `\t` or as the character itself.
pub fn parse_delimiter(s: &str) -> Result<u8> {
    let d = match s {
        "tab" | "\\t" | "\t" => b'\t',
        "," | ";" | "|" => s.as_bytes()[0],
        _ => {
            return Err(Error::invalid(format!(
                "--delimiter {s:?}: expected `,`, `;`, `|` or a tab (written `tab` or `\\t`)"
            )))
        }
    };
    Ok(d)
}

/// Where the line ends are in the bytes handed to the CSV parser, so that a row's line number
/// is the one an editor shows: `\n`, `\r\n` and a lone `\r` each end a line (the three line
/// ends the parser accepts), and the blank lines the parser skips still count. The csv crate's
/// own record position is taken before the parser skips the `\n` of a `\r\n` and any blank
/// lines, so it is a line short on CRLF files and after a blank line, and stays at 1 in a file
/// of `\r` line ends. Memory: one entry per run of line ends not yet passed.
#[derive(Default)]
struct LineIndex {
    /// Runs of consecutive line-end bytes: (first byte, byte after, how many line ends).
    runs: VecDeque<(u64, u64, u64)>,
    /// Line ends before the first run.
    passed: u64,
    /// Bytes fed so far.
    fed: u64,
    /// The last byte fed was `\r`.
    after_cr: bool,
}

impl LineIndex {
    fn feed(&mut self, bytes: &[u8]) {
        for &b in bytes {
            let at = self.fed;
            self.fed += 1;
            if b != b'\n' && b != b'\r' {
                self.after_cr = false;
                continue;
            }
            // The `\n` of a `\r\n` ends no line of its own.
            let crlf = b == b'\n' && self.after_cr;
            self.after_cr = b == b'\r';
            match self.runs.back_mut() {
                Some(run) if run.1 == at => {
                    run.1 = at + 1;
                    run.2 += u64::from(!crlf);
                }
                // Its `\r` was passed and counted already.
                _ if crlf => {}
                _ => self.runs.push_back((at, at + 1, 1)),
            }
        }
    }

    /// The line on which the first row at or after byte `at` starts. `at` is where the parser
    /// began reading the row: just past the previous row's first line-end byte, so possibly the
    /// `\n` of a `\r\n` or blank lines, which the parser skips. Offsets must not go backwards.
    fn line_at(&mut self, at: u64) -> u64 {
        while let Some(&(_, end, n)) = self.runs.front() {
            if end > at {
                break;
            }
            self.passed += n;
            self.runs.pop_front();
        }
        let skipped = match self.runs.front() {
            Some(&(start, _, n)) if start <= at => n,
            _ => 0,
        };
        1 + self.passed + skipped
    }
}

/// What the CSV reader and the byte source under it share.
#[derive(Default)]
struct Shared {
    /// Where the current row starts (the parser's byte position after the previous row).
    row_start: Cell<u64>,
    /// Set when a read was refused.
    tripped: Cell<bool>,
    lines: RefCell<LineIndex>,
}

/// Hands the CSV parser at most `MAX_ROW_BYTES + 1` bytes past the start of the row being
/// parsed. The parser asks for more only once it has consumed everything it was given, so a
/// refused read means the current row is longer than the limit: a 50 MB field or a million
/// columns stop the import there instead of being buffered whole. Every byte handed over is
/// also fed to the line index.
struct RowBound<R> {
    inner: R,
    /// Bytes handed to the parser so far.
    given: u64,
    shared: Rc<Shared>,
}

impl<R: Read> Read for RowBound<R> {
    fn read(&mut self, buf: &mut [u8]) -> std::io::Result<usize> {
        let cap = self
            .shared
            .row_start
            .get()
            .saturating_add(MAX_ROW_BYTES + 1);
        let room = cap.saturating_sub(self.given);
        if room == 0 {
            self.shared.tripped.set(true);
            return Err(std::io::Error::other("row longer than the limit"));
        }
        let n = buf.len().min(usize::try_from(room).unwrap_or(usize::MAX));
        let got = self.inner.read(&mut buf[..n])?;
        self.given += got as u64;
        self.shared.lines.borrow_mut().feed(&buf[..got]);
        Ok(got)
    }
}

fn row_too_long(file: &str, line: u64) -> Error {
    Error::invalid(format!(
        "{file}: line {line}: the row is longer than the {} limit for one CSV row \
         (at most {MAX_COLUMNS} columns, {} per attribute value, {} per email, phone, name, \
         status or column name); nothing was imported",
        size(MAX_ROW_BYTES),
        size(MAX_ATTR_BYTES as u64),
        size(MAX_FIELD_BYTES as u64)
    ))
}

fn not_utf8(file: &str, line: u64) -> Error {
    Error::invalid(format!(
        "{file}: line {line}: not valid UTF-8 (bad encoding); if the file was saved as Latin-1 \
         (ISO-8859-1), import it with --encoding latin1, or save it again as UTF-8 (\"CSV UTF-8\" \
         in a spreadsheet); nothing was imported"
    ))
}

/// A CSV file being read row by row, with line numbers counted by [`LineIndex`].
struct CsvInput {
    file: String,
    format: CsvFormat,
    rdr: csv::Reader<RowBound<std::io::BufReader<Box<dyn Read>>>>,
    shared: Rc<Shared>,
    record: csv::ByteRecord,
}

impl CsvInput {
    fn open(path: &Path, format: CsvFormat) -> Result<CsvInput> {
        let file = path.display().to_string();
        let f =
            std::fs::File::open(path).map_err(|e| Error::io(&format!("cannot read {file}"), e))?;
        CsvInput::from_reader(file, Box::new(f), format)
    }

    /// A CSV input over any byte source, named `file` in messages.
    fn from_reader(file: String, f: Box<dyn Read>, format: CsvFormat) -> Result<CsvInput> {
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
        let shared = Rc::new(Shared::default());
        let rdr = csv::ReaderBuilder::new()
            .has_headers(true)
            .flexible(false)
            .delimiter(format.delimiter)
            .from_reader(RowBound {
                inner: input,
                given: 0,
                shared: Rc::clone(&shared),
            });
        Ok(CsvInput {
            file,
            format,
            rdr,
            shared,
            record: csv::ByteRecord::new(),
        })
    }

    fn line_at(&self, byte: u64) -> u64 {
        self.shared.lines.borrow_mut().line_at(byte)
    }

    /// The header's cells and its line. An empty file (nothing, a byte order mark, blank
    /// lines) is an error that says what a header looks like.
    fn header(&mut self) -> Result<(u64, Vec<String>)> {
        let file = self.file.clone();
        let file = file.as_str();
        let headers = match self.rdr.byte_headers() {
            Ok(h) => h.clone(),
            Err(_) if self.shared.tripped.get() => return Err(row_too_long(file, self.line_at(0))),
            Err(e) => {
                return Err(Error::invalid(format!(
                    "{file}: cannot read the header line: {e}"
                )))
            }
        };
        let line = self.line_at(0);
        let empty = || {
            Error::invalid(format!(
                "{file} is empty: expected a header row such as `email,name`"
            ))
        };
        if headers.is_empty() {
            return Err(empty());
        }
        if self.rdr.position().byte() > MAX_ROW_BYTES {
            return Err(row_too_long(file, line));
        }
        self.shared.row_start.set(self.rdr.position().byte());
        if headers.len() > MAX_COLUMNS {
            return Err(Error::invalid(format!(
                "{file}: line {line}: the header has {} columns, more than the limit of \
                 {MAX_COLUMNS}; nothing was imported",
                headers.len()
            )));
        }
        let cells = headers
            .iter()
            .map(|h| self.format.encoding.decode(h))
            .collect::<Option<Vec<String>>>()
            .ok_or_else(|| not_utf8(file, line))?;
        if cells.iter().all(|c| c.trim().is_empty()) && self.next_row()?.is_none() {
            return Err(empty());
        }
        Ok((line, cells))
    }

    /// The next row's line and fields, or `None` at the end of the file.
    fn next_row(&mut self) -> Result<Option<(u64, Vec<String>)>> {
        let start = self.rdr.position().byte();
        let res = self.rdr.read_byte_record(&mut self.record);
        let line = self.line_at(start);
        let file = &self.file;
        match res {
            Ok(false) => return Ok(None),
            Ok(true) => {}
            Err(_) if self.shared.tripped.get() => return Err(row_too_long(file, line)),
            Err(e) => {
                let what = match e.kind() {
                    csv::ErrorKind::UnequalLengths {
                        expected_len, len, ..
                    } => format!("the row has {len} fields, but the header has {expected_len}"),
                    _ => e.to_string(),
                };
                return Err(Error::invalid(format!("{file}: line {line}: {what}")));
            }
        }
        let end = self.rdr.position().byte();
        if end.saturating_sub(self.shared.row_start.get()) > MAX_ROW_BYTES {
            return Err(row_too_long(file, line));
        }
        self.shared.row_start.set(end);
        let fields = self
            .record
            .iter()
            .map(|f| self.format.encoding.decode(f))
            .collect::<Option<Vec<String>>>()
            .ok_or_else(|| not_utf8(file, line))?;
        Ok(Some((line, fields)))
    }
}

/// The columns a subscriber CSV's header names.
struct Columns {
    names: Vec<String>,
    email: Option<usize>,
    phone: Option<usize>,
    name: Option<usize>,
    status: Option<usize>,
    attrs: Vec<usize>,
}

impl Columns {
    /// Check the header's cells (read on `line` of `file`, split at `delimiter`).
    fn new(file: &str, line: u64, cells: &[String], delimiter: u8) -> Result<Columns> {
        if let Some((i, h)) = cells
            .iter()
            .enumerate()
            .find(|(_, h)| h.len() > MAX_FIELD_BYTES)
        {
            return Err(Error::invalid(format!(
                "{file}: line {line}: the name of column {} is {} bytes, longer than the {} \
                 limit; nothing was imported",
                i + 1,
                h.len(),
                size(MAX_FIELD_BYTES as u64)
            )));
        }
        let names: Vec<String> = cells.iter().map(|h| h.trim().to_lowercase()).collect();
        let find = |n: &str| names.iter().position(|c| c == n);
        let (email, phone) = (find("email"), find("phone"));
        if names.iter().all(|n| n.is_empty()) {
            return Err(Error::invalid(format!(
                "{file}: line {line}: the header row is blank: expected a header row such as \
                 `email,name`"
            )));
        }
        if email.is_none() && phone.is_none() {
            return Err(missing_address_column(file, &names, delimiter));
        }
        let mut seen = HashMap::new();
        for (i, c) in names.iter().enumerate() {
            if c.is_empty() {
                return Err(Error::invalid(format!(
                    "{file}: header column {} has no name",
                    i + 1
                )));
            }
            if let Some(j) = seen.insert(c.clone(), i) {
                return Err(Error::invalid(format!(
                    "{file}: header names column {c:?} twice (columns {} and {})",
                    j + 1,
                    i + 1
                )));
            }
        }
        let (name, status) = (find("name"), find("status"));
        let attrs: Vec<usize> = (0..names.len())
            .filter(|i| ![email, phone, name, status].contains(&Some(*i)))
            .collect();
        for &i in &attrs {
            reserved(&names[i]).map_err(|e| {
                Error::invalid(format!(
                    "{file}: line {line}: column {}: {}; nothing was imported",
                    i + 1,
                    e.message
                ))
            })?;
        }
        Ok(Columns {
            names,
            email,
            phone,
            name,
            status,
            attrs,
        })
    }

    /// One data row as a subscriber (validated by [`subscriber`]); a name or attribute value
    /// that [`check_data`] refuses is an error naming its column.
    fn subscriber(&self, fields: &[String]) -> Result<NewSubscriber> {
        for i in self.name.iter().chain(&self.attrs).copied() {
            if let Some(v) = fields.get(i) {
                let what = format!("column {} ({})", i + 1, self.names[i]);
                check_data(&what, v).map_err(Error::invalid)?;
            }
        }
        let get = |c: Option<usize>| c.and_then(|i| fields.get(i)).map(String::as_str);
        let attrs: Vec<(String, String)> = self
            .attrs
            .iter()
            .map(|&i| {
                (
                    self.names[i].clone(),
                    fields.get(i).cloned().unwrap_or_default(),
                )
            })
            .collect();
        subscriber(
            get(self.email),
            get(self.phone),
            get(self.name),
            get(self.status),
            &attrs,
        )
    }
}

/// The header has neither `email` nor `phone`. If its cells contain another delimiter than
/// the one in use, the file was most likely written with that one: say which flag reads it.
fn missing_address_column(file: &str, names: &[String], delimiter: u8) -> Error {
    let mut msg = format!(
        "{file}: missing column: the header needs an `email` or a `phone` column (found: {})",
        names.join(", ")
    );
    let other = DELIMITERS
        .iter()
        .filter(|(d, _, _)| *d != delimiter)
        .find(|(d, _, _)| names.iter().any(|n| n.as_bytes().contains(d)));
    if let Some((_, shown, flag)) = other {
        msg.push_str(&format!(
            "; its columns look separated by {shown}: import it with --delimiter {flag}"
        ));
    }
    Error::invalid(msg)
}

/// Read a CSV file of subscribers. The header names the columns: `email` and/or `phone`
/// (at least one), optional `name` and `status`; every other column becomes an attribute.
/// Returns one entry per data row with its line number; a file-level problem is an error.
/// The file is streamed row by row: memory follows the rows kept, and a row or header over
/// the limits ([`MAX_ROW_BYTES`], [`MAX_COLUMNS`]) is an error naming its line. Field sizes
/// ([`MAX_FIELD_BYTES`], [`MAX_ATTR_BYTES`]) are checked per row by [`subscriber`].
/// Every row is kept, invalid ones as their error (what `--skip-invalid` reports).
pub fn read_csv(path: &Path) -> Result<Vec<(u64, Result<NewSubscriber>)>> {
    read_csv_with(path, true, CsvFormat::default())
}

/// [`read_csv`] for a file in `format`; with `keep_invalid` false, reading stops after the
/// first invalid row (an import without `--skip-invalid` stops there anyway), so a file of
/// garbage costs nothing past its first bad row. Line numbers are the editor's (see
/// [`LineIndex`]): the same for LF and CRLF line ends, with or without a byte order mark.
pub fn read_csv_with(
    path: &Path,
    keep_invalid: bool,
    format: CsvFormat,
) -> Result<Vec<(u64, Result<NewSubscriber>)>> {
    rows_of(CsvInput::open(path, format)?, keep_invalid, format)
}

/// The largest CSV file the dashboard takes in one upload.
pub const MAX_CSV: usize = 5 * 1024 * 1024;

/// [`read_csv_with`] for a file already in memory (a dashboard upload, at most [`MAX_CSV`]
/// bytes), named `name` in messages: the same parser, limits, checks and line numbers.
pub fn read_csv_bytes(
    name: &str,
    bytes: Vec<u8>,
    keep_invalid: bool,
    format: CsvFormat,
) -> Result<Vec<(u64, Result<NewSubscriber>)>> {
    if bytes.len() > MAX_CSV {
        return Err(Error::invalid(format!(
            "{name} is {} bytes, larger than the {} limit for an upload; nothing was imported",
            bytes.len(),
            size(MAX_CSV as u64)
        )));
    }
    let reader: Box<dyn Read> = Box::new(std::io::Cursor::new(bytes));
    rows_of(
        CsvInput::from_reader(name.to_string(), reader, format)?,
        keep_invalid,
        format,
    )
}

/// How many rows a [`Preview`] shows.
pub const PREVIEW_ROWS: usize = 20;

/// One row of a [`Preview`]: what the import would write for it.
#[derive(Debug, Clone, serde::Serialize)]
pub struct PreviewRow {
    pub line: u64,
    /// Normalised (lower case).
    pub email: Option<String>,
    pub phone: Option<String>,
    pub name: Option<String>,
    pub status: String,
    /// The other columns, `key=value`, in the file's order.
    pub attrs: Vec<String>,
}

/// A row the import would leave out, with its line and why.
#[derive(Debug, Clone, serde::Serialize)]
pub struct RowError {
    pub line: u64,
    pub reason: String,
}

/// What importing a CSV file would do, found by the import's own parser and checks without
/// writing anything: the first [`PREVIEW_ROWS`] valid rows, every invalid row, the counts.
#[derive(Debug, Clone, serde::Serialize)]
pub struct Preview {
    pub rows: Vec<PreviewRow>,
    pub errors: Vec<RowError>,
    pub valid: u64,
    pub invalid: u64,
}

/// Preview the import of the CSV `bytes` (named `name` in messages) in `format`. A problem
/// with the whole file (not UTF-8, no `email` or `phone` column, too large) is an error.
pub fn preview(name: &str, bytes: Vec<u8>, format: CsvFormat) -> Result<Preview> {
    let rows = read_csv_bytes(name, bytes, true, format)?;
    let mut p = Preview {
        rows: Vec::new(),
        errors: Vec::new(),
        valid: 0,
        invalid: 0,
    };
    for (line, row) in rows {
        match row {
            Ok(s) => {
                p.valid += 1;
                if p.rows.len() < PREVIEW_ROWS {
                    p.rows.push(preview_row(line, s));
                }
            }
            Err(e) => {
                p.invalid += 1;
                p.errors.push(RowError {
                    line,
                    reason: e.message,
                });
            }
        }
    }
    Ok(p)
}

fn preview_row(line: u64, s: NewSubscriber) -> PreviewRow {
    let attrs = serde_json::from_str::<serde_json::Map<String, serde_json::Value>>(&s.attrs)
        .unwrap_or_default()
        .into_iter()
        .map(|(k, v)| format!("{k}={}", v.as_str().unwrap_or_default()))
        .collect();
    PreviewRow {
        line,
        email: s.email.map(|e| e.1),
        phone: s.phone,
        name: s.name,
        status: s.status,
        attrs,
    }
}

fn rows_of(
    mut input: CsvInput,
    keep_invalid: bool,
    format: CsvFormat,
) -> Result<Vec<(u64, Result<NewSubscriber>)>> {
    let (header_line, cells) = input.header()?;
    let cols = Columns::new(&input.file, header_line, &cells, format.delimiter)?;
    let mut out = Vec::new();
    let mut seen: HashMap<String, u64> = HashMap::new();
    while let Some((line, fields)) = input.next_row()? {
        let parsed = cols.subscriber(&fields).and_then(|s| {
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
        assert_eq!(e.kind, sendonce_domain::error::ErrorKind::Invalid);
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
        let all = read_csv_with(f.path(), true, CsvFormat::default()).expect("read");
        assert_eq!(all.len(), 4);
        let first = read_csv_with(f.path(), false, CsvFormat::default()).expect("read");
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

    #[test]
    fn line_index_counts_lf_crlf_cr_and_blank_lines_alike() {
        for text in [
            "h\na\n\n\"b\ny\"\nc\n",
            "h\r\na\r\n\r\n\"b\r\ny\"\r\nc\r\n",
            "h\ra\r\r\"b\ry\"\rc\r",
        ] {
            let f = file(text.as_bytes());
            let format = CsvFormat::default();
            let mut input = CsvInput::open(f.path(), format).expect("open");
            let (line, _) = input.header().expect("header");
            assert_eq!(line, 1, "{text:?}");
            let mut lines = Vec::new();
            while let Some((line, _)) = input.next_row().expect("row") {
                lines.push(line);
            }
            assert_eq!(lines, [2, 4, 6], "{text:?}");
        }
        // A `\r\n` split between two reads is still one line end.
        let mut index = LineIndex::default();
        index.feed(b"a\r");
        index.feed(b"\nb\n");
        assert_eq!(index.line_at(2), 2);
        assert_eq!(index.line_at(5), 3);
    }

    #[test]
    fn preview_shows_valid_rows_and_every_error_with_its_line() {
        let csv =
            b"email,name,city\na@x.com,Ann,Oslo\nnot-an-address,Bob,\nA@x.com,Dup,\n".to_vec();
        let p = preview("upload.csv", csv, CsvFormat::default()).expect("preview");
        assert_eq!((p.valid, p.invalid), (1, 2));
        assert_eq!(p.rows[0].email.as_deref(), Some("a@x.com"));
        assert_eq!(p.rows[0].attrs, ["city=Oslo"]);
        assert_eq!(p.errors[0].line, 3);
        assert_eq!(p.errors[1].line, 4);
        assert!(
            p.errors[1].reason.contains("duplicate"),
            "{}",
            p.errors[1].reason
        );
        let e = preview(
            "x.csv",
            b"email\n\xff\xfe@x\n".to_vec(),
            CsvFormat::default(),
        )
        .expect_err("not UTF-8");
        assert!(e.message.contains("UTF-8"), "{}", e.message);
    }

    #[test]
    fn delimiters_and_encodings() {
        assert_eq!(parse_delimiter(";").ok(), Some(b';'));
        assert_eq!(parse_delimiter("tab").ok(), Some(b'\t'));
        assert_eq!(parse_delimiter("\\t").ok(), Some(b'\t'));
        assert_eq!(parse_delimiter("|").ok(), Some(b'|'));
        assert!(parse_delimiter("::").is_err());
        assert!(parse_delimiter("\"").is_err());
        assert_eq!(
            Encoding::Latin1.decode(b"Jos\xe9").as_deref(),
            Some("Jos\u{e9}")
        );
        assert_eq!(Encoding::Utf8.decode(b"Jos\xe9"), None);
        assert!(Encoding::parse("latin1").is_ok() && Encoding::parse("cp1252").is_err());
    }
}
