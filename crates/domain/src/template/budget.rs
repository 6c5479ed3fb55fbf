//! The rendering budget: how much work one rendering of one template may do (minijinja's fuel,
//! and the bytes it may write), the capped output it is written to, and the errors that name
//! the bound. The same budget applies when a template is checked (a sample recipient) and when
//! the worker renders a recipient's message.

use crate::error::Error;

/// Steps (minijinja's fuel: about one per instruction) one rendering of one template may run.
/// A newsletter of a few hundred lines with its conditions takes a few thousand; a loop runs
/// a handful per turn. A nested `range()` runs out here in milliseconds instead of minutes.
pub const RENDER_FUEL: u64 = 100_000;

/// Bytes one rendering of one template may write: twice the largest email body
/// (`content::MAX_EMAIL_BODY_BYTES`), room for the variables printed into it.
pub const MAX_RENDERED_BYTES: usize = 2 * crate::content::MAX_EMAIL_BODY_BYTES;

/// How one template's rendering failed.
pub(super) enum Failure {
    /// It went over the budget: the message names the bound.
    Budget(String),
    /// Any other error (a missing variable, a failing filter...).
    Other(String),
}

impl Failure {
    /// Sort a minijinja error of template `which` (`over`: the output went over its cap).
    pub(super) fn of(which: &str, e: &minijinja::Error, over: bool) -> Failure {
        if over {
            Failure::Budget(format!(
                "the {which} template exceeds the rendering budget ({MAX_RENDERED_BYTES} bytes \
                 of output)"
            ))
        } else if e.kind() == minijinja::ErrorKind::OutOfFuel {
            Failure::Budget(format!(
                "the {which} template exceeds the rendering budget ({RENDER_FUEL} steps)"
            ))
        } else {
            Failure::Other(format!("rendering the {which} failed: {e}"))
        }
    }

    pub(super) fn into_error(self) -> Error {
        match self {
            Failure::Budget(m) | Failure::Other(m) => Error::invalid(m),
        }
    }
}

/// The output of one rendering, refusing to grow past [`MAX_RENDERED_BYTES`].
#[derive(Default)]
pub(super) struct Capped {
    buf: Vec<u8>,
    /// A write went over the cap (the rendering stopped there).
    pub over: bool,
}

impl std::io::Write for Capped {
    fn write(&mut self, b: &[u8]) -> std::io::Result<usize> {
        if self.buf.len().saturating_add(b.len()) > MAX_RENDERED_BYTES {
            self.over = true;
            return Err(std::io::Error::other("the rendering budget's output cap"));
        }
        self.buf.extend_from_slice(b);
        Ok(b.len())
    }

    fn flush(&mut self) -> std::io::Result<()> {
        Ok(())
    }
}

impl Capped {
    /// The text written (minijinja writes whole UTF-8 strings).
    pub(super) fn into_string(self, which: &str) -> Result<String, Failure> {
        String::from_utf8(self.buf)
            .map_err(|_| Failure::Other(format!("rendering the {which} gave invalid UTF-8")))
    }
}

/// The variables of the sample recipient a campaign's templates are tried on at check time:
/// every built-in variable and every attribute in `attrs` set to a short text, and
/// `unsubscribe_url` to a placeholder link.
pub(super) fn sample_vars<'a>(
    attrs: impl Iterator<Item = &'a String>,
) -> std::collections::BTreeMap<String, String> {
    let mut v: std::collections::BTreeMap<String, String> =
        attrs.map(|a| (a.clone(), "sample".to_string())).collect();
    for (k, s) in [
        ("name", "Sample Name"),
        ("email", "sample@example.com"),
        ("phone", "+15555550100"),
        ("unsubscribe_url", "https://example.invalid/u/SAMPLE"),
    ] {
        v.insert(k.to_string(), s.to_string());
    }
    v
}

/// A budget error found at check time, with what was rendered and what to do.
pub(super) fn at_check(m: String) -> Error {
    Error::invalid(format!(
        "{m} when rendered for a sample recipient (every variable a short text): a loop that \
         runs too many times (a range() inside a range(), a loop over a long text) or output \
         of that size is refused, as the worker would fail every message of it"
    ))
}
