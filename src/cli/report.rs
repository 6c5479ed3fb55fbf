//! `campaign report`: every recipient of a campaign streamed as CSV (cells a spreadsheet would
//! run as formulas neutralised) or as a JSON array, times in RFC 3339 in both.

use super::args::ReportFormat;
use crate::app::campaigns;
use crate::error::{Error, Result};
use crate::store::Store;
use std::io::Write;

/// Write the report of campaign `id` to stdout. A reader that goes away ends it quietly
/// (`ErrorKind::ClosedOutput`).
pub(super) fn write(store: &Store, id: i64, format: ReportFormat) -> Result<()> {
    let stdout = std::io::stdout();
    let mut out = std::io::BufWriter::new(stdout.lock());
    match format {
        ReportFormat::Csv => write_csv(store, id, &mut out)?,
        ReportFormat::Json => write_json(store, id, &mut out)?,
    }
    out.flush().map_err(Error::output)
}

fn write_csv(store: &Store, id: i64, out: &mut impl Write) -> Result<()> {
    campaigns::write_report_csv(store, id, out)
}

fn write_json(store: &Store, id: i64, out: &mut impl Write) -> Result<()> {
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
