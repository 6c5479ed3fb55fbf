//! `campaign report`: every recipient of a campaign streamed as CSV (cells a spreadsheet would
//! run as formulas neutralised) or as a JSON array, times in RFC 3339 in both.

use super::args::ReportFormat;
use crate::app::campaigns;
use crate::domain::clock;
use crate::error::{Error, Result};
use crate::store::Storage;
use std::io::Write;

/// Write the report of campaign `id` to stdout. A reader that goes away ends it quietly
/// (`ErrorKind::ClosedOutput`).
pub(super) fn write(store: &dyn Storage, id: i64, format: ReportFormat) -> Result<()> {
    let stdout = std::io::stdout();
    let mut out = std::io::BufWriter::new(stdout.lock());
    match format {
        ReportFormat::Csv => write_csv(store, id, &mut out)?,
        ReportFormat::Json => write_json(store, id, &mut out)?,
    }
    out.flush().map_err(Error::output)
}

const CSV_HEADER: [&str; 8] = [
    "send_id",
    "job_id",
    "address",
    "status",
    "attempts",
    "provider_message_id",
    "reason",
    "sent_at",
];

fn write_csv(store: &dyn Storage, id: i64, out: &mut impl Write) -> Result<()> {
    let mut csvw = csv::Writer::from_writer(out);
    csvw.write_record(CSV_HEADER).map_err(csv_output)?;
    campaigns::report(store, id, |r| {
        csvw.write_record([
            r.send_id.to_string(),
            cell(r.job_id),
            cell(r.address),
            r.status,
            r.attempts.to_string(),
            cell(r.provider_message_id.unwrap_or_default()),
            cell(r.reason.unwrap_or_default()),
            r.sent_at.map(clock::format_ms).unwrap_or_default(),
        ])
        .map_err(csv_output)
    })?;
    csvw.flush().map_err(Error::output)
}

fn write_json(store: &dyn Storage, id: i64, out: &mut impl Write) -> Result<()> {
    out.write_all(b"[").map_err(Error::output)?;
    let mut first = true;
    campaigns::report(store, id, |r| {
        if !first {
            out.write_all(b",\n").map_err(Error::output)?;
        }
        first = false;
        serde_json::to_writer(&mut *out, &r).map_err(json_output)
    })?;
    out.write_all(b"]\n").map_err(Error::output)
}

/// A failed write of JSON output; a closed pipe stays recognisable as one.
fn json_output(e: serde_json::Error) -> Error {
    Error::output(e.io_error_kind().map_or_else(
        || std::io::Error::other(e.to_string()),
        std::io::Error::from,
    ))
}

/// A failed write of CSV output; a closed pipe stays recognisable as one.
fn csv_output(e: csv::Error) -> Error {
    match e.into_kind() {
        csv::ErrorKind::Io(io) => Error::output(io),
        other => Error::invalid(format!("cannot write the CSV report: {other:?}")),
    }
}

/// A CSV cell a spreadsheet will not run as a formula (OWASP "CSV injection"): text starting
/// with `=`, `+`, `-`, `@`, a tab or a carriage return gets a leading `'`. A phone number
/// `+351...` reads `'+351...` in the file and shows as `+351...` in a spreadsheet.
fn cell(s: String) -> String {
    if s.starts_with(['=', '+', '-', '@', '\t', '\r']) {
        format!("'{s}")
    } else {
        s
    }
}
