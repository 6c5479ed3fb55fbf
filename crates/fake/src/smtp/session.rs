//! One SMTP connection: the RFC 5321 dialogue (EHLO/HELO, MAIL, RCPT, DATA, RSET, NOOP, VRFY,
//! HELP, QUIT), STARTTLS (RFC 3207), AUTH PLAIN/LOGIN (RFC 4954), pipelined commands read from
//! a buffer, DATA kept byte for byte after dot-unstuffing, and the limits that keep a hostile
//! client from hurting the server (line length, size, idle and DATA time, bad commands).

use super::{Phase, Settings, Tls};
use crate::journal::Verdict;
use crate::server::Shared;
use base64::Engine as _;
use sendonce_core::provider::deliverylog::Envelope;
use std::sync::Arc;
use std::time::Duration;
use tokio::io::{AsyncRead, AsyncReadExt, AsyncWrite, AsyncWriteExt};
use tokio::net::TcpStream;
use tokio::sync::watch;
use tokio::time::Instant;

/// Longest command line (and AUTH response) kept; longer ones get 500 and are discarded.
const MAX_LINE: usize = 64 << 10;
/// Lines too long before the connection is closed.
const MAX_LONG_LINES: u32 = 3;
/// Bad commands (5xx answers to the client's mistakes) before 421 and close.
const MAX_BAD: u32 = 20;
/// Recipients per transaction.
const MAX_RCPT: usize = 100;
/// How long DATA may take from 354 to the final dot.
const DATA_TIME: Duration = Duration::from_secs(300);
/// How long one session may last, whatever it does (a client sending NOOP every 29 s would
/// otherwise hold a session slot for ever).
const SESSION_TIME: Duration = Duration::from_secs(900);
const HOST: &str = "sendonce-fake-provider";

trait Io: AsyncRead + AsyncWrite + Unpin + Send {}
impl<T: AsyncRead + AsyncWrite + Unpin + Send> Io for T {}

/// Why the session ends early.
enum End {
    /// The client went away, or an I/O error: nothing more to say.
    Gone,
    /// Say this (a 421), then close.
    Say(String),
}

type Step<T> = std::result::Result<T, End>;

/// What one command line read gave.
enum Got {
    Line(Vec<u8>),
    TooLong,
}

struct Session {
    shared: Arc<Shared>,
    io: Box<dyn Io>,
    buf: Vec<u8>,
    /// Dropping the rest of a line that was too long.
    discarding: bool,
    tls: Option<Tls>,
    tls_active: bool,
    stop: watch::Receiver<bool>,
    helo: bool,
    authed: bool,
    /// The AUTH user, once authenticated: the inbox its messages are filed in.
    user: Option<String>,
    mail: Option<Mail>,
    rcpts: Vec<String>,
    bad: u32,
    long_lines: u32,
}

struct Mail {
    from: String,
    utf8: bool,
}

/// Run one session to its end.
pub(super) async fn run(
    shared: Arc<Shared>,
    stream: TcpStream,
    tls: Option<Tls>,
    stop: watch::Receiver<bool>,
) {
    let mut s = Session {
        shared,
        io: Box::new(stream),
        buf: Vec::with_capacity(4096),
        discarding: false,
        tls,
        tls_active: false,
        stop,
        helo: false,
        authed: false,
        user: None,
        mail: None,
        rcpts: Vec::new(),
        bad: 0,
        long_lines: 0,
    };
    let ended = match tokio::time::timeout(SESSION_TIME, s.dialogue()).await {
        Ok(ended) => ended,
        Err(_) => Err(End::Say(format!(
            "421 4.4.2 {HOST} session longer than {} minutes, closing",
            SESSION_TIME.as_secs() / 60
        ))),
    };
    if let Err(End::Say(last)) = ended {
        let _ = s.send(&last).await;
    }
    let _ = tokio::time::timeout(Duration::from_secs(5), s.io.shutdown()).await;
}

impl Session {
    fn settings(&self) -> &Settings {
        &self.shared.config.smtp
    }

    /// True when `phase`'s chaos hits this time; its code.
    fn chaos(&self, phase: Phase) -> Option<u16> {
        let c = self.settings().chaos(phase)?;
        let [x] = self.shared.rng.unit::<1>();
        (x < c.p).then_some(c.code)
    }

    async fn dialogue(&mut self) -> Step<()> {
        if let Some(code) = self.chaos(Phase::Connect) {
            return Err(End::Say(format!(
                "{code} {} injected failure (--smtp-chaos connect)",
                enhanced(code)
            )));
        }
        self.send(&format!("220 {HOST} ESMTP sendonce fake-provider ready"))
            .await?;
        loop {
            let line = match self.read_command().await? {
                Got::Line(l) => l,
                Got::TooLong => {
                    self.long_lines += 1;
                    if self.long_lines >= MAX_LONG_LINES {
                        return Err(End::Say(
                            "421 4.7.0 too many lines too long, closing".into(),
                        ));
                    }
                    self.bad_reply("500 5.5.2 line too long").await?;
                    continue;
                }
            };
            let Ok(text) = std::str::from_utf8(&line) else {
                self.bad_reply("500 5.5.2 the command is not valid UTF-8")
                    .await?;
                continue;
            };
            let text = text.trim_end_matches(['\r', '\n']);
            let (verb, arg) = match text.split_once(' ') {
                Some((v, a)) => (v, a.trim()),
                None => (text, ""),
            };
            match verb.to_ascii_uppercase().as_str() {
                "EHLO" | "HELO" => self.helo(verb.eq_ignore_ascii_case("EHLO"), arg).await?,
                "MAIL" => self.mail(arg).await?,
                "RCPT" => self.rcpt(arg).await?,
                "DATA" => self.data(arg).await?,
                "RSET" => {
                    self.reset();
                    self.send("250 2.0.0 OK").await?;
                }
                "NOOP" => self.send("250 2.0.0 OK").await?,
                "VRFY" => {
                    self.send("252 2.5.2 cannot verify the user, but will accept the message")
                        .await?
                }
                "HELP" => {
                    self.send(
                        "214 2.0.0 EHLO HELO MAIL RCPT DATA RSET NOOP VRFY HELP QUIT STARTTLS AUTH",
                    )
                    .await?
                }
                "QUIT" => {
                    self.send("221 2.0.0 bye").await?;
                    return Ok(());
                }
                "STARTTLS" => self.starttls(arg).await?,
                "AUTH" => self.auth(arg).await?,
                "EXPN" | "TURN" | "ETRN" | "BDAT" | "ATRN" => {
                    self.bad_reply("502 5.5.1 command not implemented").await?
                }
                _ => self.bad_reply("500 5.5.2 command not recognized").await?,
            }
        }
    }

    fn reset(&mut self) {
        self.mail = None;
        self.rcpts.clear();
    }

    /// Write one reply (a single line, or lines joined by `\n`).
    async fn send(&mut self, reply: &str) -> Step<()> {
        let mut out = reply.replace('\n', "\r\n");
        out.push_str("\r\n");
        let idle = self.settings().idle_timeout;
        let write = async {
            self.io.write_all(out.as_bytes()).await?;
            self.io.flush().await
        };
        match tokio::time::timeout(idle, write).await {
            Ok(Ok(())) => Ok(()),
            _ => Err(End::Gone),
        }
    }

    /// A 5xx for the client's mistake: counted, and the 20th closes the session.
    async fn bad_reply(&mut self, reply: &str) -> Step<()> {
        self.bad += 1;
        if self.bad >= MAX_BAD {
            return Err(End::Say("421 4.7.0 too many bad commands, closing".into()));
        }
        self.send(reply).await
    }

    /// Read more bytes into the buffer: 421 after the idle timeout (or at `deadline`).
    async fn fill(&mut self, deadline: Option<Instant>, stoppable: bool) -> Step<()> {
        let idle = self.settings().idle_timeout;
        let until = match deadline {
            Some(d) => d.min(Instant::now() + idle),
            None => Instant::now() + idle,
        };
        let mut chunk = [0u8; 16 << 10];
        let stop = &mut self.stop;
        let read = self.io.read(&mut chunk);
        let n = tokio::select! {
            r = tokio::time::timeout_at(until, read) => match r {
                Ok(Ok(0)) | Ok(Err(_)) => return Err(End::Gone),
                Ok(Ok(n)) => n,
                Err(_) if deadline.is_some_and(|d| Instant::now() >= d) => {
                    return Err(End::Say("421 4.4.2 DATA took too long, closing".into()))
                }
                Err(_) => return Err(End::Say("421 4.4.2 idle timeout, closing".into())),
            },
            _ = async { let _ = stop.wait_for(|s| *s).await; }, if stoppable => {
                return Err(End::Say("421 4.3.2 the fake provider is shutting down".into()))
            }
        };
        self.buf.extend_from_slice(&chunk[..n]);
        Ok(())
    }

    /// The next command line (through its LF) from the buffer, reading as needed.
    async fn read_command(&mut self) -> Step<Got> {
        loop {
            if let Some(pos) = self.buf.iter().position(|b| *b == b'\n') {
                let line: Vec<u8> = self.buf.drain(..=pos).collect();
                if std::mem::take(&mut self.discarding) || line.len() > MAX_LINE {
                    return Ok(Got::TooLong);
                }
                return Ok(Got::Line(line));
            }
            if self.buf.len() > MAX_LINE {
                self.buf.clear();
                self.discarding = true;
            }
            let stoppable = self.buf.is_empty() && !self.discarding;
            if stoppable && *self.stop.borrow() {
                return Err(End::Say(
                    "421 4.3.2 the fake provider is shutting down".into(),
                ));
            }
            self.fill(None, stoppable).await?;
        }
    }

    async fn helo(&mut self, ehlo: bool, arg: &str) -> Step<()> {
        if arg.is_empty() {
            return self
                .bad_reply("501 5.5.4 a domain or address is required")
                .await;
        }
        self.reset();
        self.helo = true;
        if !ehlo {
            return self.send(&format!("250 {HOST} greets {arg}")).await;
        }
        let mut lines = vec![
            format!("{HOST} greets {arg}"),
            "PIPELINING".to_string(),
            format!("SIZE {}", self.settings().max_size),
            "8BITMIME".into(),
            "SMTPUTF8".into(),
            "ENHANCEDSTATUSCODES".into(),
        ];
        if !self.tls_active && self.tls.is_some() {
            lines.push("STARTTLS".into());
        }
        lines.push("AUTH PLAIN LOGIN".into());
        lines.push("HELP".into());
        let n = lines.len();
        let text: Vec<String> = lines
            .into_iter()
            .enumerate()
            .map(|(i, l)| format!("250{}{l}", if i + 1 == n { ' ' } else { '-' }))
            .collect();
        self.send(&text.join("\n")).await
    }

    async fn mail(&mut self, arg: &str) -> Step<()> {
        if !self.helo {
            return self.bad_reply("503 5.5.1 send EHLO or HELO first").await;
        }
        if self.mail.is_some() {
            return self
                .bad_reply("503 5.5.1 a transaction is already open (RSET first)")
                .await;
        }
        if self.settings().auth.is_some() && !self.authed {
            return self.bad_reply("530 5.7.0 authentication required").await;
        }
        let Some(rest) = strip_prefix_ci(arg, "FROM:") else {
            return self
                .bad_reply("501 5.5.4 syntax: MAIL FROM:<address> [parameters]")
                .await;
        };
        let Some((path, params)) = split_path(rest) else {
            return self.bad_reply("501 5.1.7 bad sender address syntax").await;
        };
        let mut utf8 = false;
        for p in params.split_whitespace() {
            let (k, v) = p.split_once('=').unwrap_or((p, ""));
            match k.to_ascii_uppercase().as_str() {
                "SIZE" => match v.parse::<u64>() {
                    Ok(n) if n > self.settings().max_size => {
                        let max = self.settings().max_size;
                        return self
                            .send(&format!(
                                "552 5.3.4 message size {n} exceeds the limit of {max} bytes"
                            ))
                            .await;
                    }
                    Ok(_) => {}
                    Err(_) => return self.bad_reply("501 5.5.4 bad SIZE parameter").await,
                },
                "BODY" if v.eq_ignore_ascii_case("7BIT") || v.eq_ignore_ascii_case("8BITMIME") => {}
                "BODY" => {
                    return self
                        .bad_reply("501 5.5.4 BODY must be 7BIT or 8BITMIME")
                        .await
                }
                "SMTPUTF8" if v.is_empty() => utf8 = true,
                "AUTH" => {}
                _ => {
                    return self
                        .bad_reply("555 5.5.4 MAIL parameter not recognized")
                        .await
                }
            }
        }
        if let Some(bad) = self.check_address(path, utf8, true) {
            return self.bad_reply(bad).await;
        }
        if let Some(code) = self.chaos(Phase::Mail) {
            let r = format!(
                "{code} {} injected failure (--smtp-chaos mail)",
                enhanced(code)
            );
            return self.send(&r).await;
        }
        self.mail = Some(Mail {
            from: path.to_string(),
            utf8,
        });
        self.send("250 2.1.0 sender OK").await
    }

    /// A reply when `addr` is not acceptable.
    fn check_address(&self, addr: &str, utf8: bool, empty_ok: bool) -> Option<&'static str> {
        if addr.is_empty() {
            return (!empty_ok).then_some("501 5.1.3 an empty recipient is not allowed");
        }
        if addr.chars().any(|c| c.is_control() || c == ' ') {
            return Some("501 5.1.3 bad address syntax");
        }
        if !addr.is_ascii() && !utf8 {
            return Some("553 5.6.7 a non-ASCII address needs the SMTPUTF8 parameter");
        }
        None
    }

    async fn rcpt(&mut self, arg: &str) -> Step<()> {
        let Some(utf8) = self.mail.as_ref().map(|m| m.utf8) else {
            return self.bad_reply("503 5.5.1 send MAIL FROM first").await;
        };
        let Some(rest) = strip_prefix_ci(arg, "TO:") else {
            return self.bad_reply("501 5.5.4 syntax: RCPT TO:<address>").await;
        };
        let Some((path, params)) = split_path(rest) else {
            return self
                .bad_reply("501 5.1.3 bad recipient address syntax")
                .await;
        };
        if !params.trim().is_empty() {
            return self
                .bad_reply("555 5.5.4 RCPT parameters not recognized")
                .await;
        }
        if let Some(bad) = self.check_address(path, utf8, false) {
            return self.bad_reply(bad).await;
        }
        if self.rcpts.len() >= MAX_RCPT {
            return self.send("452 4.5.3 too many recipients").await;
        }
        if let Some(code) = self.chaos(Phase::Rcpt) {
            let r = format!(
                "{code} {} injected failure (--smtp-chaos rcpt)",
                enhanced(code)
            );
            return self.send(&r).await;
        }
        self.rcpts.push(path.to_string());
        self.send("250 2.1.5 recipient OK").await
    }

    async fn data(&mut self, arg: &str) -> Step<()> {
        if self.mail.is_none() {
            return self.bad_reply("503 5.5.1 send MAIL FROM first").await;
        }
        if self.rcpts.is_empty() {
            return self.bad_reply("503 5.5.1 no valid recipients").await;
        }
        if !arg.is_empty() {
            return self.bad_reply("501 5.5.4 DATA takes no argument").await;
        }
        if let Some(code) = self.chaos(Phase::Data) {
            let r = format!(
                "{code} {} injected failure (--smtp-chaos data)",
                enhanced(code)
            );
            return self.send(&r).await;
        }
        self.send("354 end data with <CR><LF>.<CR><LF>").await?;
        let (raw, too_big) = self.read_data().await?;
        let from = self.mail.take().map(|m| m.from).unwrap_or_default();
        let to = std::mem::take(&mut self.rcpts);
        if too_big {
            let max = self.settings().max_size;
            return self
                .send(&format!(
                    "552 5.3.4 message exceeds the limit of {max} bytes"
                ))
                .await;
        }
        let mut req = crate::inbox::request_from_smtp(Envelope { from, to }, raw);
        if let Some(t) = req
            .tenant
            .as_deref()
            .filter(|t| !crate::tenants::tenant_ok(t))
        {
            let refusal = format!("554 5.6.0 {}", crate::tenants::bad_tenant(t));
            return self.send(&refusal).await;
        }
        if req.tenant.is_none() {
            req.tenant = self.user.as_deref().map(crate::tenants::named);
        }
        match self.shared.journal.submit_then(req, |_| {}).await {
            Ok(Verdict::Delivered { message_id, .. }) => {
                if self.chaos(Phase::DropAfterAccept).is_some() {
                    // Stored and fsynced; the client never hears about it.
                    return Err(End::Gone);
                }
                self.send(&format!("250 2.0.0 OK queued as {message_id}"))
                    .await
            }
            Ok(Verdict::Conflict) => self.send("451 4.3.0 not stored (conflict)").await,
            Err(e) => {
                tracing::warn!("fake provider: cannot store an SMTP message: {e}");
                self.send("451 4.3.0 the message could not be stored").await
            }
        }
    }

    /// The message up to the final dot, unstuffed, every other byte as received; and whether
    /// it went past the size limit (then the bytes are dropped, not kept).
    async fn read_data(&mut self) -> Step<(Vec<u8>, bool)> {
        let max = self.settings().max_size;
        let deadline = Instant::now() + DATA_TIME;
        let mut out = Vec::new();
        let mut size: u64 = 0;
        let mut at_line_start = true;
        loop {
            let piece: Vec<u8> = if let Some(pos) = self.buf.iter().position(|b| *b == b'\n') {
                self.buf.drain(..=pos).collect()
            } else if self.buf.len() > MAX_LINE {
                // A very long line: pass it on in pieces (only a line's start can be a dot).
                self.buf.drain(..).collect()
            } else {
                self.fill(Some(deadline), false).await?;
                continue;
            };
            let mut bytes = &piece[..];
            // RFC 5321 4.1.1.4: only CRLF "." CRLF ends the data, and only a dot after a CRLF
            // is a stuffed one. After a bare LF a dot is content: read otherwise, a body could
            // end early and smuggle the rest in as commands.
            if at_line_start {
                if bytes == b".\r\n" {
                    return Ok((out, size > max));
                }
                if bytes.first() == Some(&b'.') {
                    bytes = &bytes[1..];
                }
            }
            at_line_start = piece.ends_with(b"\r\n");
            size += bytes.len() as u64;
            if size <= max {
                out.extend_from_slice(bytes);
            } else if !out.is_empty() {
                out = Vec::new();
            }
        }
    }

    async fn starttls(&mut self, arg: &str) -> Step<()> {
        if self.tls_active {
            return self.bad_reply("503 5.5.1 TLS is already active").await;
        }
        let Some(tls) = self.tls.clone() else {
            return self.bad_reply("502 5.5.1 STARTTLS is not available").await;
        };
        if !arg.is_empty() {
            return self.bad_reply("501 5.5.4 STARTTLS takes no argument").await;
        }
        self.send("220 2.0.0 ready to start TLS").await?;
        // Anything pipelined after STARTTLS was sent in the clear: never act on it.
        self.buf.clear();
        let plain = std::mem::replace(
            &mut self.io,
            Box::new(tokio::io::join(tokio::io::empty(), tokio::io::sink())),
        );
        let idle = self.settings().idle_timeout;
        match tokio::time::timeout(idle, tls.acceptor.accept(plain)).await {
            Ok(Ok(stream)) => self.io = Box::new(stream),
            _ => return Err(End::Gone),
        }
        self.tls_active = true;
        self.helo = false;
        self.authed = false;
        self.reset();
        Ok(())
    }

    /// One line of an AUTH exchange (base64), `None` when the client cancelled with `*`.
    async fn auth_line(&mut self, prompt: &str) -> Step<Option<String>> {
        self.send(prompt).await?;
        match self.read_command().await? {
            Got::TooLong => Ok(None),
            Got::Line(l) => {
                let t = String::from_utf8_lossy(&l);
                let t = t.trim_end_matches(['\r', '\n']).trim();
                Ok((t != "*").then(|| t.to_string()))
            }
        }
    }

    async fn auth(&mut self, arg: &str) -> Step<()> {
        if !self.helo {
            return self.bad_reply("503 5.5.1 send EHLO first").await;
        }
        if self.authed {
            return self.bad_reply("503 5.5.1 already authenticated").await;
        }
        if self.mail.is_some() {
            return self
                .bad_reply("503 5.5.1 AUTH is not allowed during a transaction")
                .await;
        }
        let (mech, initial) = match arg.split_once(' ') {
            Some((m, i)) => (m, Some(i.trim().to_string())),
            None => (arg, None),
        };
        let (user, password) = match mech.to_ascii_uppercase().as_str() {
            "PLAIN" => {
                let resp = match initial {
                    Some(i) if i != "=" => Some(i),
                    Some(_) => Some(String::new()),
                    None => self.auth_line("334 ").await?,
                };
                let Some(resp) = resp else {
                    return self.bad_reply("501 5.7.0 authentication cancelled").await;
                };
                let Some(plain) = decode(&resp) else {
                    return self.bad_reply("501 5.5.2 cannot decode the response").await;
                };
                let mut parts = plain.split('\0');
                match (parts.next(), parts.next(), parts.next(), parts.next()) {
                    (Some(_authz), Some(u), Some(p), None) => (u.to_string(), p.to_string()),
                    _ => return self.bad_reply("501 5.5.2 malformed PLAIN response").await,
                }
            }
            "LOGIN" => {
                let user = match initial {
                    Some(i) => Some(i),
                    None => self.auth_line("334 VXNlcm5hbWU6").await?,
                };
                let Some(user) = user.as_deref().and_then(decode) else {
                    return self
                        .bad_reply("501 5.7.0 authentication cancelled or malformed")
                        .await;
                };
                let pass = self.auth_line("334 UGFzc3dvcmQ6").await?;
                let Some(password) = pass.as_deref().and_then(decode) else {
                    return self
                        .bad_reply("501 5.7.0 authentication cancelled or malformed")
                        .await;
                };
                (user, password)
            }
            _ => {
                return self
                    .bad_reply("504 5.5.4 unrecognized authentication mechanism")
                    .await
            }
        };
        let ok = match &self.settings().auth {
            Some(c) => c.accepts(&user, &password),
            None => true,
        };
        if ok {
            self.authed = true;
            self.user = Some(user);
            self.send("235 2.7.0 authentication successful").await
        } else {
            self.bad_reply("535 5.7.8 authentication credentials invalid")
                .await
        }
    }
}

/// Base64 to UTF-8 text (lossy), `None` when not base64.
fn decode(s: &str) -> Option<String> {
    base64::engine::general_purpose::STANDARD
        .decode(s.trim())
        .ok()
        .map(|b| String::from_utf8_lossy(&b).into_owned())
}

fn strip_prefix_ci<'a>(s: &'a str, prefix: &str) -> Option<&'a str> {
    let head = s.get(..prefix.len())?;
    head.eq_ignore_ascii_case(prefix)
        .then(|| s[prefix.len()..].trim_start())
}

/// `<path> params` (or a bare `path params`): the address (source route dropped) and the rest.
fn split_path(s: &str) -> Option<(&str, &str)> {
    let (path, rest) = if let Some(inner) = s.strip_prefix('<') {
        let end = inner.find('>')?;
        (&inner[..end], &inner[end + 1..])
    } else {
        match s.split_once(' ') {
            Some((p, r)) => (p, r),
            None => (s, ""),
        }
    };
    if !rest.is_empty() && !rest.starts_with(' ') {
        return None;
    }
    // `@relay1,@relay2:user@example.org`: the route is obsolete and ignored.
    let path = match path.starts_with('@') {
        true => path.split_once(':').map(|(_, a)| a)?,
        false => path,
    };
    Some((path, rest))
}

/// An enhanced status code matching a basic one's class.
fn enhanced(code: u16) -> &'static str {
    match code {
        421 => "4.3.2",
        400..=499 => "4.3.0",
        550 => "5.7.1",
        _ => "5.3.0",
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn paths_parse() {
        assert_eq!(split_path("<a@b.c> SIZE=10"), Some(("a@b.c", " SIZE=10")));
        assert_eq!(split_path("<>"), Some(("", "")));
        assert_eq!(split_path("<@r1,@r2:a@b.c>"), Some(("a@b.c", "")));
        assert_eq!(split_path("a@b.c"), Some(("a@b.c", "")));
        assert_eq!(split_path("<a@b.c"), None);
        assert_eq!(split_path("<a@b.c>x"), None);
        assert_eq!(strip_prefix_ci("from: <a>", "FROM:"), Some("<a>"));
        assert_eq!(strip_prefix_ci("TO:<a>", "FROM:"), None);
    }
}
