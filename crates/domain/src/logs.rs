//! Log lines for the systemd journal (`--log-format journald`, or stderr found to be the
//! journal's stream): sd-daemon(3) priority prefixes on stderr, one line per event.
//!
//! Why prefixes rather than the native journal protocol (`tracing-journald`): the unit's stderr
//! already goes to the journal, which reads `<N>` as the priority; the lines stay readable
//! anywhere else (a pipe, `docker logs`), need no socket, and a test can read them from a pipe.
//! The price is that fields arrive as text (`key=value`) in MESSAGE, not as journal fields.

use std::fmt::{self, Write as _};
use tracing::field::{Field, Visit};
use tracing::{Event, Level, Subscriber};
use tracing_subscriber::fmt::format::Writer;
use tracing_subscriber::fmt::{FmtContext, FormatEvent, FormatFields, FormattedFields};
use tracing_subscriber::registry::LookupSpan;

/// The sd-daemon priority of a level: error 3, warn 4, info 6, debug and trace 7.
pub fn priority(level: &Level) -> u8 {
    match *level {
        Level::ERROR => 3,
        Level::WARN => 4,
        Level::INFO => 6,
        _ => 7,
    }
}

/// True when `journal_stream` (the value of `JOURNAL_STREAM`, `DEV:INODE` in decimal, see
/// systemd.exec(5)) names this process's stderr: systemd connected it to the journal, and a
/// child whose stderr was redirected elsewhere inherits the variable but not the stream.
pub fn stderr_is_journal(journal_stream: Option<&str>) -> bool {
    use std::os::fd::AsFd;
    use std::os::unix::fs::MetadataExt;
    let Some((dev, ino)) = journal_stream.and_then(|v| v.trim().split_once(':')) else {
        return false;
    };
    let (Ok(dev), Ok(ino)) = (dev.parse::<u64>(), ino.parse::<u64>()) else {
        return false;
    };
    let Ok(fd) = std::io::stderr().as_fd().try_clone_to_owned() else {
        return false;
    };
    match std::fs::File::from(fd).metadata() {
        Ok(m) => m.dev() == dev && m.ino() == ino,
        Err(_) => false,
    }
}

/// The event formatter: `<PRIORITY>target: message key=value ...`, no colours, no timestamp,
/// newlines escaped so one event is one line.
pub struct Journald;

impl<S, N> FormatEvent<S, N> for Journald
where
    S: Subscriber + for<'a> LookupSpan<'a>,
    N: for<'a> FormatFields<'a> + 'static,
{
    fn format_event(
        &self,
        ctx: &FmtContext<'_, S, N>,
        mut writer: Writer<'_>,
        event: &Event<'_>,
    ) -> fmt::Result {
        let meta = event.metadata();
        let mut fields = Fields::default();
        event.record(&mut fields);
        let mut line = format!("{}: {}", meta.target(), fields.message);
        line.push_str(&fields.rest);
        if let Some(scope) = ctx.event_scope() {
            for span in scope.from_root() {
                let ext = span.extensions();
                if let Some(f) = ext.get::<FormattedFields<N>>() {
                    if !f.is_empty() {
                        let _ = write!(line, " {}", f.fields);
                    }
                }
            }
        }
        writeln!(writer, "<{}>{}", priority(meta.level()), one_line(&line))
    }
}

/// The message and the other fields of one event.
#[derive(Default)]
struct Fields {
    message: String,
    rest: String,
}

impl Visit for Fields {
    fn record_str(&mut self, field: &Field, value: &str) {
        if field.name() == "message" {
            self.message.push_str(value);
        } else if value.is_empty() || value.contains([' ', '"', '=', '\n', '\r', '\t']) {
            let _ = write!(self.rest, " {}={value:?}", field.name());
        } else {
            let _ = write!(self.rest, " {}={value}", field.name());
        }
    }

    fn record_debug(&mut self, field: &Field, value: &dyn fmt::Debug) {
        if field.name() == "message" {
            let _ = write!(self.message, "{value:?}");
        } else {
            let _ = write!(self.rest, " {}={value:?}", field.name());
        }
    }
}

/// Newlines and other control characters escaped: the journal would cut the event in two.
fn one_line(s: &str) -> String {
    let mut out = String::with_capacity(s.len());
    for c in s.chars() {
        match c {
            '\n' => out.push_str("\\n"),
            '\r' => out.push_str("\\r"),
            c if c.is_control() && c != '\t' => {
                let _ = write!(out, "\\u{{{:x}}}", c as u32);
            }
            c => out.push(c),
        }
    }
    out
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn priorities_follow_sd_daemon() {
        assert_eq!(priority(&Level::ERROR), 3);
        assert_eq!(priority(&Level::WARN), 4);
        assert_eq!(priority(&Level::INFO), 6);
        assert_eq!(priority(&Level::DEBUG), 7);
        assert_eq!(one_line("a\nb\x1b[31m"), "a\\nb\\u{1b}[31m");
    }

    #[test]
    fn a_malformed_journal_stream_is_not_the_journal() {
        assert!(!stderr_is_journal(None));
        assert!(!stderr_is_journal(Some("")));
        assert!(!stderr_is_journal(Some("12")));
        assert!(!stderr_is_journal(Some("x:y")));
        assert!(!stderr_is_journal(Some("0:0")));
    }
}
