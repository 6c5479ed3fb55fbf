//! No database password in cleartext over a network connection without TLS (issue 37, F7).
//!
//! A server whose `pg_hba.conf` says `password` asks the client for the password as is
//! (AuthenticationCleartextPassword); over a TCP connection without TLS anyone on the path
//! reads it, and an active attacker can ask for it that way whatever the real server says.
//! tokio-postgres answers that request whenever it has a password and offers no hook or
//! option to refuse it (`channel_binding=require` refuses it too, but also refuses SCRAM
//! without TLS, which is safe). So when the password would travel without TLS, the store
//! opens the socket itself and hands it to the driver (`Config::connect_raw`) wrapped in
//! [`Watched`], which reads the server's authentication request on its way to the driver and,
//! when it is the cleartext one, fails the read: the driver never answers, the password is
//! never written. SCRAM and MD5 go on as before. A Unix socket is not watched (it does not
//! leave the machine), nor is anything after authentication.
//!
//! The URL may allow it: `cleartext_password=allow` (our own parameter, taken out before the
//! driver parses the URL). On this path each host is tried in order with `connect_timeout`
//! and the keepalive settings; `target_session_attrs` and `load_balance_hosts`, which only the
//! driver's own connect honours, are refused with a clear error instead of being ignored.

use std::io;
use std::pin::Pin;
use std::task::{ready, Context, Poll};
use tokio::io::{AsyncRead, AsyncWrite, ReadBuf};
use tokio_postgres::config::{Host, LoadBalanceHosts, SslMode, TargetSessionAttrs};
use tokio_postgres::Config;

/// The URL parameter that lets the password go in cleartext without TLS.
pub(super) const OPT_IN: &str = "cleartext_password";

/// The URL without our own parameter, and whether it allowed cleartext. `Err` names a value
/// other than `allow`.
pub(super) fn take_opt_in(url: &str) -> Result<(String, bool), String> {
    let Some((head, query)) = url.split_once('?') else {
        return Ok((url.to_string(), false));
    };
    let mut allowed = false;
    let mut kept = Vec::new();
    for kv in query.split('&') {
        match kv.split_once('=') {
            Some((OPT_IN, "allow")) => allowed = true,
            Some((OPT_IN, other)) => {
                return Err(format!(
                    "{OPT_IN}={other}: the only value is `allow` (lets the database password \
                     go in cleartext over a connection without TLS)"
                ))
            }
            _ => kept.push(kv),
        }
    }
    let url = match kept.is_empty() {
        true => head.to_string(),
        false => format!("{head}?{}", kept.join("&")),
    };
    Ok((url, allowed))
}

/// Whether connections of `config` must be watched: a password, no TLS, a TCP host, and no
/// opt-in. `Err` when the configuration asks for what the watched path cannot do.
pub(super) fn must_watch(config: &Config, allowed: bool) -> Result<bool, String> {
    let plain = matches!(config.get_ssl_mode(), SslMode::Disable | SslMode::Prefer);
    let tcp = config.get_hosts().iter().any(|h| matches!(h, Host::Tcp(_)))
        || !config.get_hostaddrs().is_empty();
    let watch = plain && tcp && !allowed && config.get_password().is_some();
    if watch
        && (config.get_target_session_attrs() != TargetSessionAttrs::Any
            || config.get_load_balance_hosts() != LoadBalanceHosts::Disable)
    {
        return Err(format!(
            "target_session_attrs and load_balance_hosts are not supported with a password over \
             a connection without TLS: use sslmode=require, or add {OPT_IN}=allow to the URL"
        ));
    }
    Ok(watch)
}

/// The read error a refused request becomes (found again by `is_refusal`).
#[derive(Debug)]
struct Refused;

impl std::fmt::Display for Refused {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        write!(
            f,
            "the server asked for the database password in cleartext over a connection \
             without TLS; it was not sent (connect with sslmode=require, make the server use \
             scram-sha-256, or add {OPT_IN}=allow to the URL to send it anyway)"
        )
    }
}

impl std::error::Error for Refused {}

/// The refusal's text, when a driver error is this refusal (the driver's own message says only
/// "error communicating with the server").
pub(super) fn refusal(e: &tokio_postgres::Error) -> Option<String> {
    use std::error::Error as _;
    e.source()
        .and_then(|s| s.downcast_ref::<io::Error>())
        .and_then(|io| io.get_ref())
        .filter(|inner| inner.is::<Refused>())
        .map(|inner| inner.to_string())
}

/// Reads the server's messages until authentication ends, refusing a cleartext request.
#[derive(Default)]
struct Watch {
    /// Authentication ended (AuthenticationOk seen): nothing more is looked at.
    done: bool,
    /// The first bytes of the message being read: its type, length and (for `R`) code.
    head: Vec<u8>,
    /// Bytes of the current message still to pass over.
    skip: usize,
}

/// AuthenticationOk and AuthenticationCleartextPassword (protocol 3, "Message Formats").
const AUTH_OK: u32 = 0;
const AUTH_CLEARTEXT: u32 = 3;

impl Watch {
    fn feed(&mut self, mut data: &[u8]) -> io::Result<()> {
        while !self.done && !data.is_empty() {
            if self.skip > 0 {
                let n = self.skip.min(data.len());
                data = &data[n..];
                self.skip -= n;
                continue;
            }
            let want = |head: &[u8]| if head.first() == Some(&b'R') { 9 } else { 5 };
            let n = (want(&self.head) - self.head.len()).min(data.len());
            self.head.extend_from_slice(&data[..n]);
            data = &data[n..];
            if self.head.len() < want(&self.head) {
                continue;
            }
            let len = u32::from_be_bytes([self.head[1], self.head[2], self.head[3], self.head[4]]);
            if self.head[0] == b'R' {
                let code =
                    u32::from_be_bytes([self.head[5], self.head[6], self.head[7], self.head[8]]);
                if code == AUTH_CLEARTEXT {
                    return Err(io::Error::new(io::ErrorKind::PermissionDenied, Refused));
                }
                self.done = code == AUTH_OK;
            }
            self.skip = (1 + len as usize).saturating_sub(self.head.len());
            self.head.clear();
        }
        Ok(())
    }
}

/// A connection to the server whose incoming bytes pass through a [`Watch`] (a Unix socket's
/// do not), or the error connecting failed with, given to the driver at its first write so
/// that it reports it as its own.
enum Stream {
    Tcp(tokio::net::TcpStream, Watch),
    Unix(tokio::net::UnixStream),
    Failed(Option<io::Error>),
}

impl AsyncRead for Stream {
    fn poll_read(
        self: Pin<&mut Self>,
        cx: &mut Context<'_>,
        buf: &mut ReadBuf<'_>,
    ) -> Poll<io::Result<()>> {
        match self.get_mut() {
            Stream::Tcp(s, watch) => {
                let before = buf.filled().len();
                ready!(Pin::new(s).poll_read(cx, buf))?;
                watch.feed(&buf.filled()[before..])?;
                Poll::Ready(Ok(()))
            }
            Stream::Unix(s) => Pin::new(s).poll_read(cx, buf),
            Stream::Failed(e) => Poll::Ready(Err(failed(e))),
        }
    }
}

impl AsyncWrite for Stream {
    fn poll_write(
        self: Pin<&mut Self>,
        cx: &mut Context<'_>,
        data: &[u8],
    ) -> Poll<io::Result<usize>> {
        match self.get_mut() {
            Stream::Tcp(s, _) => Pin::new(s).poll_write(cx, data),
            Stream::Unix(s) => Pin::new(s).poll_write(cx, data),
            Stream::Failed(e) => Poll::Ready(Err(failed(e))),
        }
    }

    fn poll_flush(self: Pin<&mut Self>, cx: &mut Context<'_>) -> Poll<io::Result<()>> {
        match self.get_mut() {
            Stream::Tcp(s, _) => Pin::new(s).poll_flush(cx),
            Stream::Unix(s) => Pin::new(s).poll_flush(cx),
            Stream::Failed(e) => Poll::Ready(Err(failed(e))),
        }
    }

    fn poll_shutdown(self: Pin<&mut Self>, cx: &mut Context<'_>) -> Poll<io::Result<()>> {
        match self.get_mut() {
            Stream::Tcp(s, _) => Pin::new(s).poll_shutdown(cx),
            Stream::Unix(s) => Pin::new(s).poll_shutdown(cx),
            Stream::Failed(_) => Poll::Ready(Ok(())),
        }
    }
}

fn failed(e: &mut Option<io::Error>) -> io::Error {
    e.take()
        .unwrap_or_else(|| io::Error::new(io::ErrorKind::NotConnected, "not connected"))
}

/// deadpool's connector for watched connections.
pub(super) struct Watched;

type Connected = (tokio_postgres::Client, tokio::task::JoinHandle<()>);

impl deadpool_postgres::Connect for Watched {
    fn connect(
        &self,
        config: &Config,
    ) -> Pin<
        Box<dyn std::future::Future<Output = Result<Connected, tokio_postgres::Error>> + Send + '_>,
    > {
        let config = config.clone();
        Box::pin(async move {
            let stream = open(&config).await;
            let (client, connection) = config.connect_raw(stream, tokio_postgres::NoTls).await?;
            let task = tokio::spawn(async move {
                let _ = connection.await;
            });
            Ok((client, task))
        })
    }
}

/// Where one connection attempt goes: a host name or address (`hostaddr` wins over the name
/// at the same place, as with the driver) and its port, or a socket directory.
enum Target {
    Tcp(String, u16),
    Addr(std::net::IpAddr, u16),
    Unix(std::path::PathBuf, u16),
}

fn targets(config: &Config) -> Vec<Target> {
    let (hosts, addrs, ports) = (
        config.get_hosts(),
        config.get_hostaddrs(),
        config.get_ports(),
    );
    let port = |i: usize| ports.get(i).or(ports.first()).copied().unwrap_or(5432);
    (0..hosts.len().max(addrs.len()))
        .map(|i| match (addrs.get(i), hosts.get(i)) {
            (Some(a), _) => Target::Addr(*a, port(i)),
            (None, Some(Host::Tcp(name))) => Target::Tcp(name.clone(), port(i)),
            (None, Some(Host::Unix(dir))) => Target::Unix(dir.clone(), port(i)),
            (None, None) => Target::Tcp(String::new(), port(i)),
        })
        .collect()
}

async fn attempt(target: &Target, config: &Config) -> io::Result<Stream> {
    let tcp = match target {
        Target::Tcp(name, port) => tokio::net::TcpStream::connect((name.as_str(), *port)).await?,
        Target::Addr(addr, port) => tokio::net::TcpStream::connect((*addr, *port)).await?,
        Target::Unix(dir, port) => {
            let path = dir.join(format!(".s.PGSQL.{port}"));
            return Ok(Stream::Unix(tokio::net::UnixStream::connect(path).await?));
        }
    };
    keepalive(&tcp, config)?;
    Ok(Stream::Tcp(tcp, Watch::default()))
}

/// The first host that accepts a connection, tried in order; the last failure otherwise.
async fn open(config: &Config) -> Stream {
    let mut last = io::Error::new(io::ErrorKind::InvalidInput, "no host to connect to");
    for target in targets(config) {
        let got = match config.get_connect_timeout() {
            Some(t) => tokio::time::timeout(*t, attempt(&target, config))
                .await
                .unwrap_or_else(|_| Err(io::Error::new(io::ErrorKind::TimedOut, "timeout"))),
            None => attempt(&target, config).await,
        };
        match got {
            Ok(s) => return s,
            Err(e) => last = e,
        }
    }
    Stream::Failed(Some(last))
}

fn keepalive(s: &tokio::net::TcpStream, config: &Config) -> io::Result<()> {
    s.set_nodelay(true)?;
    if !config.get_keepalives() {
        return Ok(());
    }
    let mut ka = socket2::TcpKeepalive::new().with_time(config.get_keepalives_idle());
    if let Some(every) = config.get_keepalives_interval() {
        ka = ka.with_interval(every);
    }
    if let Some(n) = config.get_keepalives_retries() {
        ka = ka.with_retries(n);
    }
    socket2::SockRef::from(s).set_tcp_keepalive(&ka)
}

#[cfg(test)]
mod tests {
    use super::*;

    fn msg(kind: u8, body: &[u8]) -> Vec<u8> {
        let mut m = vec![kind];
        m.extend_from_slice(&(body.len() as u32 + 4).to_be_bytes());
        m.extend_from_slice(body);
        m
    }

    /// Feeds `bytes` in chunks of `n`: the watch must not depend on how reads split them.
    fn feed(bytes: &[u8], n: usize) -> io::Result<Watch> {
        let mut w = Watch::default();
        for c in bytes.chunks(n) {
            w.feed(c)?;
        }
        Ok(w)
    }

    #[test]
    fn a_cleartext_request_is_refused_however_it_is_split() {
        let mut stream = msg(b'N', b"notice\0");
        stream.extend(msg(b'R', &3u32.to_be_bytes()));
        for n in 1..=stream.len() {
            let e = feed(&stream, n).err().expect("refused");
            assert!(e.to_string().contains("cleartext"), "{e}");
        }
    }

    #[test]
    fn scram_md5_and_what_follows_authentication_pass() {
        let mut sasl = 10u32.to_be_bytes().to_vec();
        sasl.extend_from_slice(b"SCRAM-SHA-256\0\0");
        let mut stream = msg(b'R', &sasl);
        stream.extend(msg(b'R', &[0, 0, 0, 11, 1, 2, 3]));
        stream.extend(msg(b'R', &0u32.to_be_bytes()));
        // After AuthenticationOk a row could hold anything, even what looks like a request.
        stream.extend(msg(b'R', &3u32.to_be_bytes()));
        for n in 1..=stream.len() {
            assert!(feed(&stream, n).expect("passes").done);
        }
        let mut md5 = 5u32.to_be_bytes().to_vec();
        md5.extend_from_slice(&[1, 2, 3, 4]);
        assert!(feed(&msg(b'R', &md5), 3).is_ok());
    }

    #[test]
    fn the_opt_in_is_taken_out_of_the_url() {
        let (url, allowed) = take_opt_in("postgres://u:p@h/db?cleartext_password=allow").unwrap();
        assert_eq!((url.as_str(), allowed), ("postgres://u:p@h/db", true));
        let (url, allowed) =
            take_opt_in("postgres://u:p@h/db?sslmode=disable&cleartext_password=allow&port=5")
                .unwrap();
        assert_eq!(url, "postgres://u:p@h/db?sslmode=disable&port=5");
        assert!(allowed);
        assert_eq!(
            take_opt_in("postgres://h/db").unwrap(),
            ("postgres://h/db".to_string(), false)
        );
        assert!(take_opt_in("postgres://h/db?cleartext_password=yes").is_err());
    }
}
