//! The fake provider's own flags (`sendonce fake-provider --help`): the command line embeds them
//! as they are; `Config::from_args` and `smtp::Config::from_args` read them.

use super::Limits;

use std::path::PathBuf;

/// `sendonce fake-provider`: an offline provider and inbox for tests. POST /send (JSON,
/// Idempotency-Key header), Twilio-, Resend-, Postmark-, Amazon SES v2-, SendGrid-, Mailgun-
/// and Brevo-compatible endpoints (point a provider's base URL or SDK here; SES signatures are
/// checked against SENDONCE_FAKE_AWS_KEY=ID:SECRET when it is set) and SMTP (--smtp); read back with GET /messages (filters,
/// /messages/wait, /messages/{id}), Mailpit's /api/v1, or the web inbox at /.
#[derive(clap::Args, Debug)]
pub struct Args {
    /// Not used: the fake provider keeps no database. This hidden local copy keeps the global
    /// `--db` out of this command's help (clap propagates a global value into it; it is ignored).
    #[arg(long = "db", hide = true)]
    pub db: Option<PathBuf>,
    /// Address to listen on (port 0: any free port). The bound address is printed first.
    #[arg(long, default_value = "127.0.0.1:9000")]
    pub listen: std::net::SocketAddr,
    /// Delivery log (JSONL, one line per accepted request). Keys are kept in FILE.keys.
    #[arg(long, value_name = "FILE")]
    pub log: PathBuf,
    /// Also accept mail over SMTP on this address (e.g. 127.0.0.1:1025; port 0: any free
    /// port), printed as "smtp listening on ADDR" after the HTTP line. Any client, STARTTLS
    /// with a generated certificate, AUTH PLAIN/LOGIN; each message is stored before its 250.
    #[arg(long, value_name = "ADDR")]
    pub smtp: Option<std::net::SocketAddr>,
    /// Once every listener is bound, write {"http": ADDR, "smtp": ADDR or null} to FILE
    /// (atomically: a reader sees all of it or nothing), for scripts that wait for the fake.
    #[arg(long, value_name = "FILE")]
    pub ready_file: Option<PathBuf>,
    /// Remember idempotency keys: a replay gets the first id, a different payload gets 409
    /// (the default).
    #[arg(long, overrides_with = "no_idempotent")]
    pub idempotent: bool,
    /// Every request is a new delivery, like SMTP.
    #[arg(long, overrides_with = "idempotent")]
    pub no_idempotent: bool,
    /// Uniform random delay before each send, e.g. 5ms..50ms.
    #[arg(long, value_name = "MIN..MAX")]
    pub latency: Option<String>,
    /// Share of sends answered 503 without recording them (0..1).
    #[arg(long, default_value_t = 0.0, value_name = "P")]
    pub fail_rate: f64,
    /// Share of sends recorded, then answered by closing the connection (a lost reply).
    #[arg(long, default_value_t = 0.0, value_name = "P")]
    pub drop_after_accept_rate: f64,
    /// Seed for the random faults, latency and --chaos rules: the same seed and the same
    /// requests misbehave the same way.
    #[arg(long)]
    pub seed: Option<u64>,
    /// A misbehaviour rule, repeatable: key=value pairs separated by commas. provider=API
    /// (webhook, twilio, resend, postmark, ses, sendgrid, mailgun, brevo; default every API),
    /// then one effect: rate=N/s or N/m [burst=N] [then=STATUS] (past the rate: STATUS, default
    /// 429, with Retry-After); slow=DURATION or slow=MIN..MAX; status=STATUS (4xx/5xx instead
    /// of accepting) [every=N,for=M: the first M of every N requests]; after-accept=hang,
    /// for=DURATION (stored, then no answer: the client times out). p=P fires on a share of
    /// requests. Refusals use the API's error format and store nothing. E.g.
    /// 'provider=resend,rate=10/s,then=429'. GET|PUT|DELETE /chaos shows and replaces them.
    #[arg(long = "chaos", value_name = "RULE")]
    pub chaos: Vec<String>,
    /// A number the Twilio endpoint answers with error 21610 (recipient opted out).
    /// Repeatable.
    #[arg(long = "twilio-opted-out", value_name = "NUMBER")]
    pub twilio_opted_out: Vec<String>,
    /// Append one JSON object per line for every HTTP request to FILE as it arrives, before
    /// latency and faults (not fsynced): {"at": unix ms, "method", "path" (no query),
    /// "key": the Idempotency-Key header or null, "api": webhook|twilio|resend|postmark|
    /// assertions when known}. Never a credential. Tells calls that reached the provider from
    /// calls that never left.
    #[arg(long, value_name = "FILE")]
    pub request_log: Option<PathBuf>,
    /// HTTP connections served at once; past it a new connection gets 503 with
    /// "Connection: close" once its request head is in (or after 1 s), and is closed.
    #[arg(long, value_name = "N", default_value_t = Limits::default().max_connections)]
    pub max_connections: usize,
    /// Answer HTTP requests whose Host is NAME too (with or without a port); repeatable. By
    /// default only localhost, loopback addresses and the address a connection reached are
    /// answered, others get 403: a web page cannot read the inbox through DNS rebinding.
    #[arg(long = "allow-host", value_name = "NAME")]
    pub allow_host: Vec<String>,
    /// Hidden (tests): a request's line and headers must arrive within this (default 10s).
    #[arg(long, hide = true, value_name = "DURATION")]
    pub header_timeout: Option<String>,
    /// Hidden (tests): a request's body must arrive within this, else 408 (default 10s).
    #[arg(long, hide = true, value_name = "DURATION")]
    pub body_timeout: Option<String>,
    /// Hidden (tests): an idle keep-alive connection is closed after this (default 30s).
    #[arg(long, hide = true, value_name = "DURATION")]
    pub idle_timeout: Option<String>,
    /// After accepting a message, POST a signed delivery callback to the sender at URL (the
    /// base of `sendonce serve`, e.g. http://127.0.0.1:8025), as the real provider would:
    /// /send → URL/hooks/standard/ACCOUNT (Standard Webhooks) and Resend →
    /// URL/hooks/resend/ACCOUNT (Svix), both signed with SENDONCE_FAKE_WEBHOOK_SECRET
    /// (whsec_...); Postmark → URL/hooks/postmark/ACCOUNT with Basic auth from
    /// SENDONCE_FAKE_POSTMARK_AUTH (user:password); Twilio → the message's own StatusCallback,
    /// signed with the auth token it was sent with. Retried a few times; never delays the answer.
    #[arg(long, value_name = "URL")]
    pub callbacks: Option<String>,
    /// The {account} of the callback URLs (name or id).
    #[arg(long, value_name = "ACCOUNT", default_value = "1")]
    pub callback_account: String,
    /// SMTP: inject a failure, PHASE=P[:CODE], repeatable. Phases: connect (CODE instead of
    /// the greeting, default 421), mail, rcpt, data (refuse the command, default 451; 5xx
    /// allowed) and drop-after-accept (stored, then the connection closed without the 250).
    #[arg(long = "smtp-chaos", value_name = "PHASE=P[:CODE]")]
    pub smtp_chaos: Vec<String>,
    /// SMTP: largest message accepted (advertised in SIZE; 552 past it), e.g. 25MiB.
    #[arg(long, value_name = "SIZE", default_value = "25MiB")]
    pub smtp_max_size: String,
    /// SMTP: close a session idle this long (421), e.g. 30s.
    #[arg(long, value_name = "DURATION", default_value = "30s")]
    pub smtp_idle_timeout: String,
}
