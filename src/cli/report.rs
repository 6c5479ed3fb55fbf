//! `campaign report`: every recipient of a campaign streamed as CSV (cells a spreadsheet would
//! run as formulas neutralised) or as a JSON array, times in RFC 3339 in both.

use super::args::ReportFormat;
use sendonce_core::app::campaigns;
use sendonce_domain::error::{Error, Result};
use sendonce_store::Store;
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

/// The array opens with its first line (or at the end, empty), so a campaign refused before
/// any line (an unknown id) writes nothing to stdout.
fn write_json(store: &Store, id: i64, out: &mut impl Write) -> Result<()> {
    let mut first = true;
    campaigns::report(store, id, |r| {
        let sep: &[u8] = if first { b"[" } else { b",\n" };
        out.write_all(sep).map_err(Error::output)?;
        first = false;
        serde_json::to_writer(&mut *out, &r).map_err(json_output)
    })?;
    let end: &[u8] = if first { b"[]\n" } else { b"]\n" };
    out.write_all(end).map_err(Error::output)
}

/// A failed write of JSON output; a closed pipe stays recognisable as one.
fn json_output(e: serde_json::Error) -> Error {
    Error::output(e.io_error_kind().map_or_else(
        || std::io::Error::other(e.to_string()),
        std::io::Error::from,
    ))
}
