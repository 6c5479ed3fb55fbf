//! The command-line grammar (clap derive). Nothing here touches the database.

use clap::{Args, Parser, Subcommand, ValueEnum};
use std::path::PathBuf;

#[derive(Parser, Debug)]
#[command(
    name = "sendonce",
    version,
    about = "Email and SMS sending with an exactly-once ledger in one SQLite file",
    long_about = "Email and SMS sending with an exactly-once ledger in one SQLite file.\n\n\
        Each recipient of a campaign gets the message once, even if a worker is killed between \
        the provider's answer and the database write: a lease is committed before every call and \
        a fenced confirmation after it. Calls whose outcome cannot be known are parked \
        `in_doubt` (see `sendonce doubts`), never silently retried or dropped.",
    after_help = "Exit codes: 0 success, 1 operational failure, 2 usage error, \
        3 finished with sends in doubt, 4 finished with permanent failures (notify)."
)]
pub struct Cli {
    /// Database file.
    #[arg(
        long,
        global = true,
        env = "SENDONCE_DB",
        default_value = "./sendonce.db"
    )]
    pub db: PathBuf,
    /// Machine-readable output: one JSON document per command on stdout.
    #[arg(long, global = true)]
    pub json: bool,
    /// Log format on stderr (default: human, or journald when stderr is the systemd journal's
    /// stream, i.e. JOURNAL_STREAM names it).
    #[arg(long, global = true, value_enum, env = "SENDONCE_LOG_FORMAT")]
    pub log_format: Option<LogFormat>,
    /// More logging (-v info, -vv debug).
    #[arg(short, long, global = true, action = clap::ArgAction::Count)]
    pub verbose: u8,
    /// Only errors on stderr.
    #[arg(short, long, global = true)]
    pub quiet: bool,
    /// How long to wait for another process's write lock before giving up.
    #[arg(long, global = true, default_value = "10s")]
    pub busy_timeout: String,
    #[command(subcommand)]
    pub command: Command,
    /// Where `db` came from (flag, SENDONCE_DB, the config file's `db`, the default): set by
    /// the binary after parsing (`cli::config::settle_db`).
    #[arg(skip)]
    pub db_from: Option<sendonce_core::config::Origin>,
}

#[derive(Copy, Clone, Debug, PartialEq, Eq, ValueEnum)]
pub enum LogFormat {
    Human,
    Json,
    /// sd-daemon priority prefixes (`<3>` error ... `<7>` debug), one line per event,
    /// key=value fields, no colours, no timestamp (the journal adds one).
    Journald,
}

/// `sendonce config`.
#[derive(Subcommand, Debug)]
pub enum ConfigCmd {
    /// The effective settings and where each came from (flag, environment variable, config
    /// file, default), the config file chosen and the candidates looked at. Secrets are never
    /// shown: only whether they are set and their length.
    Show {
        /// Config file (default: SENDONCE_CONFIG, ./sendonce.toml,
        /// $XDG_CONFIG_HOME/sendonce/sendonce.toml, /etc/sendonce/sendonce.toml: the first that
        /// exists).
        #[arg(long)]
        config: Option<PathBuf>,
    },
    /// Print a commented example sendonce.toml (the Debian package installs it as
    /// /etc/sendonce/sendonce.toml).
    Example,
}

#[derive(Subcommand, Debug)]
pub enum Command {
    /// Create the database file (or upgrade its schema).
    Init,
    /// Run the whole job end to end in a temporary directory, on the outbox provider.
    Demo {
        /// Subscribers to create.
        #[arg(long, default_value_t = 1000)]
        recipients: u32,
        /// Directory for the files (default: a new temporary directory).
        #[arg(long)]
        dir: Option<PathBuf>,
        /// Not used: the demo makes its own database in --dir (hidden, ignored; keeps the
        /// global `--db` out of this command's help).
        #[arg(long = "db", hide = true)]
        db: Option<PathBuf>,
    },
    /// Tenants.
    #[command(subcommand)]
    Account(AccountCmd),
    /// Subscribers of an account.
    #[command(subcommand)]
    Subscriber(SubscriberCmd),
    /// Subscriber lists of an account: campaigns may target lists instead of everyone.
    #[command(subcommand)]
    List(ListCmd),
    /// Per-account suppression lists: a suppressed address is never claimed.
    #[command(subcommand)]
    Suppress(SuppressCmd),
    /// Stored templates for API messages (`"template": NAME` in POST /v1/messages): save a new
    /// version, list, show. A version never changes once saved.
    #[command(subcommand)]
    Template(TemplateCmd),
    /// API tokens of an account (for `sendonce serve`): shown once, stored as SHA-256.
    #[command(subcommand)]
    Token(TokenCmd),
    /// Dashboard admins (`sendonce serve` at /admin/): create, list, password, remove. The
    /// password is read from SENDONCE_ADMIN_PASSWORD, from --password-stdin, or asked on the
    /// terminal; never from a flag.
    #[command(subcommand)]
    Admin(AdminCmd),
    /// Campaigns: create, approve, pause, resume, cancel, status, report.
    #[command(subcommand)]
    Campaign(CampaignCmd),
    /// Send: claim due rows, call the provider, record outcomes.
    Run(RunArgs),
    /// Serve the HTTP API (transactional messages with Idempotency-Key, health), optionally
    /// with the send loop in the same process (--worker).
    Serve(ServeArgs),
    /// Take one delivery status notification (an RFC 3464 bounce) from the MTA on standard input
    /// (or --file) and apply it: a hard bounce suppresses the recipient, and a send of that job
    /// left in doubt is settled as sent.
    ///
    /// The DSN is believed only when it came to the VERP return path of the message it reports
    /// on: send with the SMTP provider's `return_path=bounces@DOMAIN` (and
    /// SENDONCE_UNSUBSCRIBE_SECRET set, here too), and have the MTA of DOMAIN pipe mail for
    /// bounces+*@DOMAIN into this command (Postfix: an alias `bounces: "|sendonce bounce
    /// --account NAME"` with recipient_delimiter = +). The same DSN twice changes nothing.
    /// Exit: 0 applied (or a replay), 2 refused (not a DSN, no or wrong VERP tag, headers not
    /// returned, another account's job; nothing written), 75 what the MTA should retry later
    /// (database busy, unavailable or guarded, the secret not set, an unknown account: it keeps
    /// the DSN and tries again).
    Bounce(BounceArgs),
    /// Sends whose outcome is unknown, and the operator's decision on them.
    #[command(subcommand)]
    Doubts(DoubtsCmd),
    /// Events out: what happened to an account's sends, subscribers, campaigns and
    /// suppressions, recorded in the same commit as the change. Read them here (or `GET
    /// /v1/events`), or have them delivered to your application's webhook endpoints (`sendonce
    /// endpoint`).
    #[command(subcommand)]
    Events(EventsCmd),
    /// Webhook endpoints of an account: events delivered by the worker (`run`, `serve
    /// --worker`) as Standard Webhooks POSTs signed with the endpoint's secret, at least once,
    /// retried for three days. The secret is shown once, at `add` and `rotate`, and needs
    /// SENDONCE_UNSUBSCRIBE_SECRET (it is derived from it). URLs that resolve to loopback,
    /// private, link-local or metadata addresses are refused unless SENDONCE_EVENTS_ALLOW (or
    /// `[events] allow` in the config file) names them.
    #[command(subcommand)]
    Endpoint(EndpointCmd),
    /// Make this place the owner of the database file, after moving it to another path or
    /// host, or after it went back in time (a lost -wal, a snapshot put back).
    ///
    /// A worker refuses to claim from a copy of the file (exit 5) and from a file that is
    /// behind its watermark (the `-watermark` file beside it). Run this only when the original
    /// will never run again. If the file went back in time, every unfinished row is marked as
    /// possibly delivered: retried with the same key inside an idempotent provider's window,
    /// otherwise parked in doubt.
    Adopt,
    /// Copy the database to PATH while workers keep running (SQLite's VACUUM INTO), sync it,
    /// check the copy with quick_check, and print its size and ledger counts.
    Backup {
        /// Where to write the backup (must not exist).
        path: PathBuf,
    },
    /// Put a backup in place of the database (refused while any process has it open for
    /// writing), then adopt it. Rows the backup does not know as finished are treated as
    /// possibly delivered when the replaced file had gone further.
    Restore {
        /// The backup file (made by `sendonce backup`).
        backup: PathBuf,
    },
    /// Send a one-off message (a CI job's result) exactly once per job, even when the job is
    /// retried or re-run.
    ///
    /// The idempotency key comes from the CI environment (GitHub Actions, GitLab CI, Buildkite,
    /// CircleCI, Jenkins, Woodpecker, Drone) or --key; each recipient gets its own job id under
    /// it. The ledger lives in --state (default $XDG_STATE_HOME/sendonce/notify.db). On an
    /// ephemeral runner that file does not survive a re-run: then only a provider that honours
    /// idempotency keys (outbox, webhook with key_window, Resend) prevents the duplicate.
    /// Exit: 0 sent or already sent, 3 in doubt, 4 failed permanently, 2 usage error.
    Notify(NotifyArgs),
    /// Compare a provider's delivery log (outbox or fake-provider JSONL) with the ledger:
    /// lost, duplicated, unexpected, sent after opt-out. Exit 0 on pass, 1 on failure.
    Check {
        /// Campaign to check (repeatable). The API's messages (the transactional streams) are
        /// always checked too: with no campaign, only they are.
        #[arg(long = "campaign")]
        campaigns: Vec<i64>,
        /// Delivery log file (repeatable).
        #[arg(long = "log", required = true)]
        logs: Vec<PathBuf>,
    },
    /// Run an offline provider and inbox for tests and demos: HTTP (--provider webhook:URL, or
    /// a twilio:, resend: or postmark: provider whose base_url points here; also the send calls
    /// of Amazon SES v2, SendGrid, Mailgun and Brevo for their SDKs) and SMTP (--smtp); assert
    /// through GET /messages, Mailpit's API, or the web inbox at /.
    FakeProvider(Box<sendonce_fake::Args>),
    /// The config file and settings: `config show` (effective settings and their sources,
    /// secrets masked), `config example` (a commented sendonce.toml).
    #[command(subcommand)]
    Config(ConfigCmd),
    /// Measure throughput, memory, WAL size, restart and notify times and the query plans of
    /// the send path on temporary databases, side by side with the raw SQLite limit of this
    /// machine.
    Bench(BenchArgs),
    /// Print a shell completion script on stdout (bash, zsh, fish, elvish, powershell), e.g.
    /// `sendonce completions bash > ~/.local/share/bash-completion/completions/sendonce`.
    Completions {
        /// Shell to complete for.
        #[arg(value_enum)]
        shell: clap_complete::Shell,
    },
    /// Write the man pages (sendonce.1 and one per subcommand, roff) into DIR, e.g.
    /// `sendonce manpage ~/.local/share/man/man1` (the Debian package ships them).
    #[command(visible_alias = "manpages")]
    Manpage {
        /// Directory to write the pages into (created if missing).
        dir: PathBuf,
    },
    /// Look at the database and its files without writing anything: quick_check (integrity_check
    /// with --full), foreign keys, schema, file modes, WAL, expired leases, rows in doubt,
    /// campaigns stuck in sending, the clone guard, the providers of the config file, free disk.
    /// Exit 0 healthy, 1 when something needs attention (each finding says what to run).
    Doctor(DoctorArgs),
    /// Copy a SQLite database into an empty PostgreSQL one and mark the file as moved.
    ///
    /// Workers must be stopped: the file's exclusive lock is held for the whole copy (refused
    /// while any worker, `serve` or writing command has it open). Refused for a file that is a
    /// copy, went back in time, fails quick_check or was already moved, and for a target with
    /// any row in it. Every table (installation id, leases and fence tokens, in-doubt rows,
    /// suppressions, lists, token hashes, ...) is copied in one PostgreSQL transaction and
    /// verified (rows per table, a checksum of the sends) before it commits. The file then
    /// refuses to send (exit 5) and names the new --db; read-only commands still work on it.
    ///
    /// Keep the password out of the command line (`ps` shows it): put the URL in SENDONCE_DB
    /// (the default target) or in a variable named by --to-env, or the password in ~/.pgpass.
    MigrateStore(MigrateStoreArgs),
}

/// `sendonce bounce`.
#[derive(Args, Debug)]
pub struct BounceArgs {
    /// The account that sent the mail (name or id).
    #[arg(long)]
    pub account: String,
    /// The address the DSN was delivered to (bounces+TAG@DOMAIN). Default: ORIGINAL_RECIPIENT
    /// (set by Postfix for an alias's command), else the DSN's Delivered-To, X-Original-To and
    /// To headers.
    #[arg(long, env = "ORIGINAL_RECIPIENT", value_name = "ADDR")]
    pub to: Option<String>,
    /// Read the DSN from FILE instead of standard input.
    #[arg(long, value_name = "FILE")]
    pub file: Option<PathBuf>,
}

/// `sendonce migrate-store`.
#[derive(Args, Debug)]
pub struct MigrateStoreArgs {
    /// The SQLite database file to move.
    #[arg(long, value_name = "FILE")]
    pub from: PathBuf,
    /// The PostgreSQL database (postgres://USER@HOST/DB). Default: SENDONCE_DB (or --db) when it
    /// is a postgres:// URL. A password here is visible in `ps`: prefer --to-env or SENDONCE_DB.
    #[arg(long, value_name = "URL", conflicts_with = "to_env")]
    pub to: Option<String>,
    /// Read the target URL from the environment variable VAR (keeps the password out of argv).
    #[arg(long, value_name = "VAR")]
    pub to_env: Option<String>,
}

/// `sendonce doctor`.
#[derive(Args, Debug)]
pub struct DoctorArgs {
    /// Run the complete `integrity_check` instead of `quick_check` (slower on large files).
    #[arg(long)]
    pub full: bool,
    /// Config file whose provider routes are built (default: as `sendonce config show` finds it).
    #[arg(long, env = "SENDONCE_CONFIG")]
    pub config: Option<PathBuf>,
    /// Default provider spec, as `run --provider`.
    #[arg(long, env = "SENDONCE_PROVIDER")]
    pub provider: Option<String>,
}

/// The `synchronous` pragma. FULL is the only setting under which a committed marker survives
/// a power loss.
#[derive(Copy, Clone, Debug, PartialEq, Eq, ValueEnum)]
pub enum SyncArg {
    Full,
    Normal,
}

/// `sendonce bench`.
#[derive(Args, Debug)]
pub struct BenchArgs {
    /// A postgres:// URL (or SENDONCE_DB): bench the PostgreSQL store instead: the pipeline with
    /// 1, 2 and 4 `sendonce run` processes beside the original design's loop (FOR UPDATE SKIP
    /// LOCKED, mark sent before the call) on the same server, medians of 3 rounds. The database
    /// must hold no account; the bench empties it after. A file path is ignored: the SQLite
    /// bench makes its own databases (see --dir).
    #[arg(long = "db", value_name = "URL", env = "SENDONCE_DB")]
    pub db: Option<PathBuf>,

    /// A postgres:// URL of an empty database: the SQLite bench then also runs the original
    /// design's loop (FOR UPDATE SKIP LOCKED, mark sent before the call) there with 1, 2 and 4
    /// workers on as many rows, and compares the pipeline with its best. Give it through
    /// SENDONCE_BENCH_PG when it holds a password (a flag shows in `ps`). The bench empties
    /// the database after.
    #[arg(
        long = "compare-pg",
        value_name = "URL",
        env = "SENDONCE_BENCH_PG",
        hide_env_values = true
    )]
    pub compare_pg: Option<String>,

    /// Recipients for the limit and pipeline sections.
    #[arg(long, default_value_t = 100_000)]
    pub recipients: u64,
    /// Rows per claim (limit, pipeline, scale and latency sections).
    #[arg(long, default_value_t = 500)]
    pub batch: usize,
    /// synchronous pragma of every database the bench opens.
    #[arg(long, value_enum, default_value_t = SyncArg::Full)]
    pub sync: SyncArg,
    /// Latency of the provider in the latency-bound section.
    #[arg(long, default_value = "50ms")]
    pub latency: String,
    /// Provider calls in flight (pipeline, scale and latency sections).
    #[arg(long, default_value_t = 256)]
    pub concurrency: usize,
    /// Subscribers for the scale, WAL and memory sections (default 1,000,000); messages in the
    /// log of the inbox section (default 100,000).
    #[arg(long)]
    pub scale: Option<u64>,
    /// Put the databases here and keep them (default: a temporary directory, removed after).
    #[arg(long)]
    pub dir: Option<PathBuf>,
    /// Run one section alone. throughput: sections 1 and 2 (the two-marker loop on the
    /// ledger's table and on a minimal 9-column row, the pipeline with the null and the outbox
    /// provider, and with the null provider on a file that records no send events: what the
    /// events cost), three rounds on fresh files, medians and each round. list-build: list building for --scale subscribers, account-wide
    /// and through three lists overlapping by a third, with the plans of its statements.
    /// http: a load test of `serve --worker` with the fake provider on loopback (--clients,
    /// --seconds): requests/s, p50/p99 latency, deliveries = accepted, duplicates 0.
    /// dashboard: every GET page of `serve`'s dashboard timed (median and max of 7) on a
    /// campaign of --scale recipients; a median over 100 ms is flagged.
    /// inbox: `fake-provider` started over a delivery log of --scale messages (default
    /// 100,000): its start-up time and memory, and its inbox's listings, searches and pages
    /// timed (median and max of 9).
    #[arg(long, value_enum)]
    pub only: Option<BenchSection>,
    /// Concurrent clients of the http section.
    #[arg(long, default_value_t = 16)]
    pub clients: usize,
    /// How long the clients of the http section post, in seconds.
    #[arg(long, default_value_t = 30)]
    pub seconds: u64,
}

/// A section `sendonce bench --only` runs alone.
#[derive(Copy, Clone, Debug, PartialEq, Eq, ValueEnum)]
pub enum BenchSection {
    Throughput,
    ListBuild,
    Http,
    Dashboard,
    Inbox,
}

#[derive(Subcommand, Debug)]
pub enum AccountCmd {
    /// Add an account; prints its id.
    Add {
        /// The account's name (unique; commands take it wherever they take an account id).
        name: String,
    },
    /// List the accounts, with how many subscribers and campaigns each has.
    List,
    /// Change an account's settings.
    Update {
        /// Account id or name.
        account: String,
        /// One line appended to every SMS of the account's campaigns created from now on
        /// ("Reply STOP to opt out"); counted in the segments at create. "" removes it.
        #[arg(long, value_name = "TEXT")]
        sms_footer: Option<String>,
        /// The account's time zone (IANA name, e.g. Europe/Lisbon; UTC until set): windows
        /// are read in it for a recipient whose own zone is unknown.
        #[arg(long, value_name = "ZONE")]
        tz: Option<String>,
        /// Default send window of new campaigns, local time HH:MM-HH:MM (e.g. 09:00-20:00),
        /// honoured in each recipient's zone; "any" removes it.
        #[arg(long, value_name = "HH:MM-HH:MM")]
        send_window: Option<String>,
        /// SMS quiet hours of new campaigns: SMS go out only between these local times where
        /// the recipient's zone is known (tz attribute or the number's country). Default
        /// 08:00-21:00 (the US TCPA's hours); "off" turns them off.
        #[arg(long, value_name = "HH:MM-HH:MM")]
        sms_hours: Option<String>,
    },
}

#[derive(Subcommand, Debug)]
pub enum SubscriberCmd {
    /// Add one subscriber; prints its id. Adding the address of a removed subscriber brings
    /// it back.
    Add {
        /// Account id or name.
        #[arg(long)]
        account: String,
        /// Email address (at least one of --email and --phone).
        #[arg(long, required_unless_present = "phone")]
        email: Option<String>,
        /// E.164 phone number (+14155550100).
        #[arg(long)]
        phone: Option<String>,
        /// Display name, usable in templates as {{ name }}.
        #[arg(long)]
        name: Option<String>,
        /// Free attribute, usable in templates as {{ key }}. Repeatable.
        #[arg(long = "attr", value_name = "KEY=VALUE")]
        attrs: Vec<String>,
        /// pending, confirmed, unsubscribed or bounced. Only confirmed subscribers are sent to.
        #[arg(long, default_value = "confirmed")]
        status: String,
        /// A list (id or name) to join; repeatable. An address that is already a subscriber
        /// only joins the lists (an existing membership is kept as it is). A double opt-in
        /// list makes the membership pending and queues one confirmation email.
        #[arg(long = "list", value_name = "LIST")]
        lists: Vec<String>,
        /// The lawful basis of this opt-in (`consent`, `contract`, where and how it was
        /// given), kept in the consent record `subscriber export` shows.
        #[arg(long, value_name = "TEXT")]
        basis: Option<String>,
        #[command(flatten)]
        links: PublicUrlArgs,
    },
    /// Import a CSV file (header: email and/or phone, optional name, status, any attributes).
    /// All-or-nothing unless --skip-invalid.
    Import {
        /// Account id or name.
        #[arg(long)]
        account: String,
        /// The CSV file.
        file: PathBuf,
        /// Import the valid rows and report every skipped one (with its line number).
        #[arg(long)]
        skip_invalid: bool,
        /// Field separator: `,`, `;`, `|`, or a tab (written `tab` or `\t`).
        #[arg(long, default_value = ",", value_name = "CHAR")]
        delimiter: String,
        /// Text encoding of the file; latin1 is ISO-8859-1 (older spreadsheet exports).
        #[arg(long, default_value = "utf8", value_parser = ["utf8", "latin1"])]
        encoding: String,
        /// A list (id or name) every row joins, in the same transaction; repeatable. Rows
        /// whose address is already a subscriber only join the lists. A double opt-in list
        /// makes the memberships pending and queues one confirmation email each.
        #[arg(long = "list", value_name = "LIST")]
        lists: Vec<String>,
        /// The lawful basis of this opt-in (`consent`, `contract`, where and how it was
        /// given), kept in the consent record `subscriber export` shows.
        #[arg(long, value_name = "TEXT")]
        basis: Option<String>,
        #[command(flatten)]
        links: PublicUrlArgs,
    },
    /// List an account's subscribers (removed ones are not listed), in id order.
    List {
        /// Account id or name.
        #[arg(long)]
        account: String,
        /// Only this status: pending, confirmed, unsubscribed or bounced.
        #[arg(long)]
        status: Option<String>,
        /// At most this many.
        #[arg(long, default_value_t = 1000)]
        limit: usize,
        /// Start after this subscriber id (for paging).
        #[arg(long, default_value_t = 0)]
        after: i64,
    },
    /// Show one subscriber.
    Show {
        /// Account id or name.
        #[arg(long)]
        account: String,
        /// Subscriber id, email address or phone number.
        subscriber: String,
    },
    /// Change a subscriber's name, status or attributes.
    Update {
        /// Account id or name.
        #[arg(long)]
        account: String,
        /// Subscriber id, email address or phone number.
        subscriber: String,
        /// New display name.
        #[arg(long)]
        name: Option<String>,
        /// New status: pending, confirmed, unsubscribed or bounced.
        #[arg(long)]
        status: Option<String>,
        /// Set an attribute. Repeatable.
        #[arg(long = "attr", value_name = "KEY=VALUE")]
        attrs: Vec<String>,
    },
    /// Remove a subscriber: never sent to again and listed nowhere; the ledger keeps the
    /// rows of messages already sent to it.
    Remove {
        /// Account id or name.
        #[arg(long)]
        account: String,
        /// Subscriber id, email address or phone number.
        subscriber: String,
    },
    /// Print everything held about one subscriber as JSON: its row, memberships, consent
    /// records, suppressions, sends (with the variables captured and a hash of the content),
    /// API messages and events. Removed and erased subscribers included.
    Export {
        /// Account id or name.
        #[arg(long)]
        account: String,
        /// Subscriber id, email address or phone number.
        subscriber: String,
    },
    /// Erase a subscriber's personal data everywhere the database holds it (name,
    /// attributes, addresses, captured variables, API message content and metadata, consent
    /// records, events). Each address is kept only as its SHA-256, suppressed, so it is never
    /// sent to or added again (`suppress remove` lifts that). Irreversible; see
    /// docs/privacy.md for what is kept and why.
    Erase {
        /// Account id or name.
        #[arg(long)]
        account: String,
        /// Subscriber id, email address or phone number.
        subscriber: String,
        /// Confirm: erasure cannot be undone.
        #[arg(long)]
        yes: bool,
    },
}

#[derive(Subcommand, Debug)]
pub enum SuppressCmd {
    /// Suppress an address: from the moment this returns, no new claim sends to it.
    Add {
        /// Account id or name.
        #[arg(long)]
        account: String,
        /// Which list: email or sms.
        #[arg(long, value_parser = ["email", "sms"])]
        channel: String,
        /// The email address or E.164 phone number.
        address: String,
        /// Why (kept with the entry).
        #[arg(long, default_value = "manual")]
        reason: String,
    },
    /// Remove an address from the suppression list.
    Remove {
        /// Account id or name.
        #[arg(long)]
        account: String,
        /// Which list: email or sms.
        #[arg(long, value_parser = ["email", "sms"])]
        channel: String,
        /// The email address or E.164 phone number.
        address: String,
    },
    /// List an account's suppressions.
    List {
        /// Account id or name.
        #[arg(long)]
        account: String,
    },
}

/// Where an admin's password comes from (never a flag: flags show in `ps`).
#[derive(Args, Debug, Clone)]
pub struct PasswordInput {
    /// Read the password from the first line of standard input (else SENDONCE_ADMIN_PASSWORD,
    /// else a prompt on the terminal). At least 12 characters.
    #[arg(long)]
    pub password_stdin: bool,
}

#[derive(Subcommand, Debug)]
pub enum AdminCmd {
    /// Make a dashboard admin of one account; it sees and changes only that account's data.
    Create {
        /// Account id or name.
        #[arg(long)]
        account: String,
        /// Login name (no spaces; names are never reused).
        #[arg(long)]
        name: String,
        /// Also show this admin the server-wide settings (database, default provider, every
        /// account's webhook secrets, doctor) on the dashboard's Settings page.
        #[arg(long)]
        operator: bool,
        #[command(flatten)]
        password: PasswordInput,
    },
    /// Admins (never their passwords): id, account, name, role, created, removed.
    List {
        /// Only this account's (id or name).
        #[arg(long)]
        account: Option<String>,
    },
    /// Set a new password; the admin's sessions end.
    Password {
        /// Login name.
        name: String,
        #[command(flatten)]
        password: PasswordInput,
    },
    /// Remove an admin: it can no longer log in and its sessions end.
    Remove {
        /// Login name.
        name: String,
    },
}

#[derive(Subcommand, Debug)]
pub enum EventsCmd {
    /// The account's events after a cursor, oldest first: one line each (id, type, time,
    /// subject; `--json` for the whole events), then `next CURSOR` to read on from.
    List {
        /// Account id or name.
        #[arg(long)]
        account: String,
        /// The `next` cursor of the previous read; default: from the oldest event kept.
        #[arg(long)]
        after: Option<String>,
        /// Comma-separated event types or families (`send.failed,campaign.*`).
        #[arg(long)]
        types: Option<String>,
        /// Events at most (1 to 500).
        #[arg(long, default_value_t = 100)]
        limit: usize,
    },
}

#[derive(Debug, Subcommand)]
pub enum EndpointCmd {
    /// Add an endpoint; prints its signing secret once (`whsec_…`).
    Add {
        /// Account id or name.
        #[arg(long)]
        account: String,
        /// Where to POST events (http:// or https://).
        #[arg(long)]
        url: String,
        /// Comma-separated event types or families; default: every event.
        #[arg(long)]
        types: Option<String>,
        /// Deliver each subject's events one at a time, in order (a send's, a subscriber's).
        #[arg(long)]
        ordered: bool,
    },
    /// The account's endpoints: id, status, url, types, deliveries pending, delivered, dropped.
    List {
        /// Account id or name.
        #[arg(long)]
        account: String,
    },
    /// One endpoint and its latest deliveries (the attempt log's summary).
    Show {
        /// Account id or name.
        #[arg(long)]
        account: String,
        /// Endpoint id (from `endpoint list`).
        id: i64,
    },
    /// Change an endpoint: url, types, order, or turn it off and on (`--enable` also restarts
    /// an endpoint the circuit breaker turned off after five days of failures).
    Update {
        /// Account id or name.
        #[arg(long)]
        account: String,
        /// Endpoint id (from `endpoint list`).
        id: i64,
        /// A new URL (checked as at `add`).
        #[arg(long)]
        url: Option<String>,
        /// Comma-separated event types or families; empty: every event.
        #[arg(long)]
        types: Option<String>,
        /// Deliver each subject's events one at a time, in order (true or false).
        #[arg(long)]
        ordered: Option<bool>,
        /// Turn it on again (also after the circuit breaker turned it off).
        #[arg(long, conflicts_with = "disable")]
        enable: bool,
        /// Turn it off: its events wait until it is enabled.
        #[arg(long)]
        disable: bool,
    },
    /// A new signing secret, printed once; the old one keeps signing beside it for --overlap.
    Rotate {
        /// Account id or name.
        #[arg(long)]
        account: String,
        /// Endpoint id (from `endpoint list`).
        id: i64,
        /// How long the old secret keeps signing beside the new one.
        #[arg(long, default_value = "24h")]
        overlap: String,
    },
    /// Deliver again one event (--event evt_N), the events with ids from --from to --to, or
    /// those that happened from --since to --until (RFC 3339 times); at most 10,000.
    Replay {
        /// Account id or name.
        #[arg(long)]
        account: String,
        /// Endpoint id (from `endpoint list`).
        id: i64,
        /// One event id (`evt_812`).
        #[arg(long, conflicts_with_all = ["from", "to", "since", "until"])]
        event: Option<String>,
        /// The first event id of a range.
        #[arg(long, requires = "to", conflicts_with_all = ["since", "until"])]
        from: Option<String>,
        /// The last event id of a range.
        #[arg(long, requires = "from")]
        to: Option<String>,
        /// The start of a time range (`2026-12-07T09:00:00Z`).
        #[arg(long, requires = "until")]
        since: Option<String>,
        /// The end of a time range.
        #[arg(long, requires = "since")]
        until: Option<String>,
    },
    /// Remove an endpoint with its deliveries and their log.
    Remove {
        /// Account id or name.
        #[arg(long)]
        account: String,
        /// Endpoint id (from `endpoint list`).
        id: i64,
    },
}

#[derive(Debug, Subcommand)]
pub enum TokenCmd {
    /// Make an API token; prints it once (only its SHA-256 is stored).
    Create {
        /// Account id or name.
        #[arg(long)]
        account: String,
        /// What the token is for, shown in `token list`.
        #[arg(long, default_value = "api")]
        name: String,
        /// send: send and follow messages; read: read everything of the account; admin:
        /// everything in the account.
        #[arg(long, default_value = "send", value_parser = ["send", "read", "admin"])]
        scope: String,
    },
    /// The account's tokens (never their text): id, name, scope, prefix, created, last used,
    /// revoked.
    List {
        /// Account id or name.
        #[arg(long)]
        account: String,
    },
    /// Revoke a token: from then on it authenticates nothing.
    Revoke {
        /// Account id or name.
        #[arg(long)]
        account: String,
        /// Token id (from `token list`).
        id: i64,
    },
}

#[derive(Subcommand, Debug)]
pub enum TemplateCmd {
    /// Save a template's next version (1 for a new name), checked first: every part must parse
    /// (minijinja; data is HTML-escaped in the HTML part only). Give a text file, an HTML file
    /// or both.
    Save {
        /// Account id or name.
        #[arg(long)]
        account: String,
        /// The template's name: 1 to 64 letters, digits, '.', '_' or '-'.
        name: String,
        /// The subject template (email).
        #[arg(long)]
        subject: Option<String>,
        /// The text template (SMS: the whole message), UTF-8.
        #[arg(long)]
        text_file: Option<PathBuf>,
        /// The HTML template, UTF-8; alone, each message's text part is generated from it.
        #[arg(long)]
        html_file: Option<PathBuf>,
    },
    /// The latest version of each of the account's templates.
    List {
        /// Account id or name.
        #[arg(long)]
        account: String,
    },
    /// One version of a template, whole (default: the latest).
    Show {
        /// Account id or name.
        #[arg(long)]
        account: String,
        /// The template's name.
        name: String,
        /// Which version (default: the latest).
        #[arg(long)]
        version: Option<i64>,
    },
}

#[derive(Subcommand, Debug)]
pub enum ListCmd {
    /// Create a list; prints its id.
    Create {
        /// Account id or name.
        #[arg(long)]
        account: String,
        /// The list's name, unique in the account.
        name: String,
        /// What the list is for, for people.
        #[arg(long)]
        description: Option<String>,
        /// single: members are subscribed at once; double: they stay pending until they
        /// confirm the link of the confirmation email each new member is sent (needs
        /// --confirm-from).
        #[arg(long, default_value = "single", value_parser = ["single", "double"])]
        optin: String,
        /// Alias of `--optin double`, kept for scripts written with it; `--optin` is the
        /// spelling to use.
        #[arg(long, conflicts_with = "optin")]
        double_opt_in: bool,
        /// Take signups from the public form (`POST /subscribe`, `GET /subscribe/ID` of
        /// `sendonce serve`).
        #[arg(long)]
        public: bool,
        #[command(flatten)]
        confirm: ConfirmArgs,
    },
    /// Change a list: its public form, its confirmation message.
    Update {
        /// Account id or name.
        #[arg(long)]
        account: String,
        /// List id or name.
        list: String,
        /// Take signups from the public form.
        #[arg(long, conflicts_with = "no_public")]
        public: bool,
        /// Stop taking signups from the public form.
        #[arg(long)]
        no_public: bool,
        #[command(flatten)]
        confirm: ConfirmArgs,
    },
    /// The account's lists with their members per status.
    List {
        /// Account id or name.
        #[arg(long)]
        account: String,
    },
    /// One list, by id or name.
    Show {
        /// Account id or name.
        #[arg(long)]
        account: String,
        /// List id or name.
        list: String,
    },
    /// Remove a list and its memberships (subscribers stay); refused while an approved,
    /// sending or paused campaign targets it.
    Remove {
        /// Account id or name.
        #[arg(long)]
        account: String,
        /// List id or name.
        list: String,
    },
}

/// The confirmation message of a double opt-in list (email only).
#[derive(Args, Debug)]
pub struct ConfirmArgs {
    /// Sender of the confirmation messages (`news@example.org` or `News <news@example.org>`);
    /// required for a double opt-in list.
    #[arg(long, value_name = "ADDRESS")]
    pub confirm_from: Option<String>,
    /// Subject template of the confirmation (default "Confirm your subscription to
    /// {{ list.name }}").
    #[arg(long, value_name = "TEXT")]
    pub confirm_subject: Option<String>,
    /// Text body template of the confirmation; it must print {{ confirm_url }} and may print
    /// {{ list.name }}, {{ name }} and {{ email }} (default: a short text with the link).
    #[arg(long, value_name = "FILE")]
    pub confirm_body_file: Option<PathBuf>,
}

/// Where confirmation links point when a command adds members to a double opt-in list.
#[derive(Args, Debug)]
pub struct PublicUrlArgs {
    /// Public base URL of `sendonce serve` (https://news.example.org): members added to a
    /// double opt-in list are sent a confirmation link URL/c/TOKEN, sealed with
    /// SENDONCE_UNSUBSCRIBE_SECRET. Default: public_url in the config file.
    #[arg(long, env = "SENDONCE_PUBLIC_URL", value_name = "URL")]
    pub public_url: Option<String>,
    /// The config file that may hold public_url (default: as `sendonce config show` finds it).
    #[arg(long, value_name = "FILE", env = "SENDONCE_CONFIG")]
    pub config: Option<PathBuf>,
}

/// `campaign create`.
#[derive(Args, Debug)]
pub struct CampaignCreate {
    /// Account id or name.
    #[arg(long)]
    pub account: String,
    /// A name for people (reports, lists).
    #[arg(long)]
    pub name: String,
    /// email or sms.
    #[arg(long, value_parser = ["email", "sms"])]
    pub channel: String,
    /// Sender: required for email (`news@example.org` or `Name <news@example.org>`); an
    /// E.164 number for sms (optional: the provider's default).
    #[arg(long)]
    pub from: Option<String>,
    /// Subject template (required for email).
    #[arg(long)]
    pub subject: Option<String>,
    /// Text body template file (minijinja syntax: {{ name }}, {{ email }}, attributes,
    /// {{ campaign.name }}, {{ unsubscribe_url }}). Email: give it, --html-file, or both.
    #[arg(long, required_unless_present = "html_file")]
    pub body_file: Option<PathBuf>,
    /// HTML body template file (email): values printed in it are HTML-escaped. With
    /// --body-file the message is multipart/alternative; without, its text part is
    /// generated from each recipient's HTML.
    #[arg(long)]
    pub html_file: Option<PathBuf>,
    /// Reply-To address for email (`desk@example.org` or `Desk <desk@example.org>`).
    #[arg(long, value_name = "ADDRESS")]
    pub reply_to: Option<String>,
    /// Target a list (id or name) instead of every confirmed subscriber; repeatable. An
    /// address in several lists gets one message.
    #[arg(long = "list", value_name = "LIST")]
    pub lists: Vec<String>,
    /// Only the targeted subscribers this filter matches, e.g.
    /// 'city = "Lisboa" and plan in ("pro", "team")' (docs/campaigns.md, "Segments"); frozen at approval.
    #[arg(long, value_name = "EXPR")]
    pub filter: Option<String>,
    /// Check the draft and print the audience counts it would have (as `campaign
    /// audience`); write nothing.
    #[arg(long)]
    pub dry_run: bool,
    /// Receipts, password resets and other messages a recipient cannot opt out of: no
    /// List-Unsubscribe header, and approvable without a public URL. Frozen at approval.
    #[arg(long)]
    pub transactional: bool,
    /// Send only between these local times (HH:MM-HH:MM, e.g. 09:00-18:00) in each
    /// recipient's zone (tz attribute, else the number's country, else the account's zone);
    /// "any": none. Default: the account's (`account update --send-window`); none when
    /// --transactional. A recipient outside it waits for it to open.
    #[arg(long, value_name = "HH:MM-HH:MM")]
    pub send_window: Option<String>,
    /// SMS quiet hours (HH:MM-HH:MM) where the recipient's zone is known; "off": none.
    /// Default: the account's (08:00-21:00 unless changed); none when --transactional.
    #[arg(long, value_name = "HH:MM-HH:MM")]
    pub sms_hours: Option<String>,
}

#[derive(Subcommand, Debug)]
pub enum CampaignCmd {
    /// Create a draft campaign; prints its id. Templates are checked now, not mid-send.
    Create(CampaignCreate),
    /// Approve a draft: freezes its content and schedules it (now, or --at).
    Approve {
        /// Campaign id.
        id: i64,
        /// RFC 3339 time to start sending, e.g. 2026-12-24T09:00:00Z.
        #[arg(long)]
        at: Option<String>,
        /// Public base URL where `sendonce serve` answers /u/TOKEN (as for `run`): an email
        /// campaign that is not --transactional is approved only with one, and with
        /// SENDONCE_UNSUBSCRIBE_SECRET set. Default: public_url in the config file.
        #[arg(long, env = "SENDONCE_PUBLIC_URL", value_name = "URL")]
        public_url: Option<String>,
        /// Config file, for its public_url (default: as `sendonce config show` finds it).
        #[arg(long, env = "SENDONCE_CONFIG")]
        config: Option<PathBuf>,
        /// Refuse (exit 2) a campaign that reaches nobody right now, instead of approving it
        /// with a warning.
        #[arg(long)]
        strict: bool,
    },
    /// Stop claiming for a campaign; in-flight calls finish. A running `sendonce run` goes on
    /// with it after `resume`.
    Pause {
        /// Campaign id.
        id: i64,
    },
    /// Resume a paused campaign.
    Resume {
        /// Campaign id.
        id: i64,
    },
    /// Cancel a campaign; queued sends are cancelled.
    Cancel {
        /// Campaign id.
        id: i64,
    },
    /// List campaigns, newest first.
    List {
        /// Only this account's (id or name).
        #[arg(long)]
        account: Option<String>,
        /// Only campaigns in this state: draft, approved, sending, paused, sent, cancelled.
        #[arg(long)]
        status: Option<String>,
    },
    /// Who the campaign's targets would reach now, and how many they leave out as
    /// duplicates, suppressed, unsubscribed, unconfirmed or without an address (any state).
    Audience {
        /// Campaign id.
        id: i64,
    },
    /// Counts per send state.
    Status {
        /// Campaign id.
        id: i64,
        /// Follow the campaign until it is no longer sending: a progress bar on a terminal,
        /// a line per change otherwise.
        #[arg(long)]
        watch: bool,
    },
    /// Every recipient: state, attempts, provider id, reason.
    Report {
        /// Campaign id.
        id: i64,
        /// Output format (default: csv, or json with --json). Times are RFC 3339 in both.
        #[arg(long, value_enum)]
        format: Option<ReportFormat>,
    },
    /// Print the message one subscriber would get, rendered exactly as the worker renders it
    /// (same content, same captured variables, same unsubscribe link); sends and writes
    /// nothing.
    Preview {
        /// Campaign id.
        id: i64,
        /// Subscriber id, email address or phone number.
        #[arg(long)]
        subscriber: String,
        /// eml: the whole RFC 5322 message (email; headers as the SMTP provider writes them);
        /// text: the text part (SMS: the message); html: the HTML part. Default: eml for
        /// email, text for sms.
        #[arg(long, value_enum)]
        format: Option<PreviewFormat>,
        #[command(flatten)]
        send: SendTarget,
    },
    /// Send one copy of a campaign, rendered for a subscriber (default: the first it would
    /// reach), to another address through the campaign's provider route, marked as a test
    /// ("[TEST] " subject, job id test:CAMPAIGN:UUID). Outside the ledger: the subscriber still
    /// gets their own message, and running it again sends another copy.
    TestSend {
        /// Campaign id (any state, drafts included).
        id: i64,
        /// Where the copy goes (an email address or an E.164 number, per the channel).
        #[arg(long)]
        to: String,
        /// Subscriber id, email address or phone number whose variables fill the templates.
        #[arg(long)]
        subscriber: Option<String>,
        #[command(flatten)]
        send: SendTarget,
    },
}

/// The provider routes and the public URL a rendering uses, as `run` takes them.
#[derive(Args, Debug, Clone)]
pub struct SendTarget {
    /// Provider spec (as for `run`); default: the config file's route for the campaign.
    #[arg(long, env = "SENDONCE_PROVIDER")]
    pub provider: Option<String>,
    /// Config file (default: as `sendonce config show` finds it).
    #[arg(long, env = "SENDONCE_CONFIG")]
    pub config: Option<PathBuf>,
    /// Public base URL for {{ unsubscribe_url }} (as for `run`).
    #[arg(long, env = "SENDONCE_PUBLIC_URL", value_name = "URL")]
    pub public_url: Option<String>,
}

#[derive(Copy, Clone, Debug, PartialEq, Eq, ValueEnum)]
pub enum PreviewFormat {
    Eml,
    Text,
    Html,
}

#[derive(Copy, Clone, Debug, ValueEnum)]
pub enum ReportFormat {
    Csv,
    Json,
}

#[derive(Args, Debug)]
pub struct ServeArgs {
    /// Address to listen on (port 0: any free port). The bound address is printed first on
    /// stdout: `listening on http://ADDR`. Default: listen in the config file's [serve],
    /// else 127.0.0.1:8025.
    #[arg(long, env = "SENDONCE_LISTEN")]
    pub listen: Option<String>,
    /// Run the send loop in this process too (or worker = true in [serve]); without it,
    /// `sendonce run` processes on the same file send what the API queues.
    #[arg(long, env = "SENDONCE_WORKER", value_parser = clap::builder::BoolishValueParser::new())]
    pub worker: bool,
    /// Provider for the worker (as for `run`; needs --worker).
    #[arg(long, env = "SENDONCE_PROVIDER")]
    pub provider: Option<String>,
    /// Config file with routes (as for `run`).
    #[arg(long, env = "SENDONCE_CONFIG")]
    pub config: Option<PathBuf>,
    /// Public base URL of this sender, for {{ unsubscribe_url }} (as for `run`) and the
    /// confirmation links of double opt-in lists (`POST /v1/subscribers`, the signup form).
    #[arg(long, env = "SENDONCE_PUBLIC_URL", value_name = "URL")]
    pub public_url: Option<String>,
    /// After SIGTERM, how long requests and sends in flight may take (default 30s).
    #[arg(long, env = "SENDONCE_DRAIN")]
    pub drain: Option<String>,
    /// Largest request body, in bytes (default 1048576).
    #[arg(long, env = "SENDONCE_BODY_LIMIT")]
    pub body_limit: Option<usize>,
    /// A request still unanswered after this long is cut (408), slow clients included
    /// (default 60s).
    #[arg(long, env = "SENDONCE_REQUEST_TIMEOUT")]
    pub request_timeout: Option<String>,
    /// A request's body must arrive within this after its head, else 408 and the connection
    /// is closed (default 10s).
    #[arg(long, env = "SENDONCE_BODY_TIMEOUT", value_name = "DURATION")]
    pub body_timeout: Option<String>,
    /// Client connections open at once (default 512). At the cap the connection idle longest
    /// (or slowest to send its request) is closed to make room; when all are busy a new one
    /// gets 503. Refused at start unless it fits `ulimit -n` with room to spare.
    #[arg(long, env = "SENDONCE_MAX_CONNECTIONS", value_name = "N")]
    pub max_connections: Option<usize>,
    /// How often the worker looks for new messages when idle.
    #[arg(long, default_value = "100ms")]
    pub tick: String,
    /// Provider calls in flight at most (worker).
    #[arg(long, default_value_t = 32)]
    pub concurrency: usize,
    /// Lease length of the worker's claims (renewed at dispatch; calls time out at half of
    /// it): how long a row stays claimed after the process died before another worker may
    /// take it again.
    #[arg(long, default_value = "60s")]
    pub lease: String,
}

#[derive(Args, Debug)]
pub struct RunArgs {
    /// Process everything due, then exit (instead of running until stopped).
    #[arg(long)]
    pub once: bool,
    /// Provider for every campaign (overrides the config file's default): outbox:PATH[?idempotent=false],
    /// webhook:URL[#timeout=10s&key_window=24h], smtp://HOST:PORT?tls=..., twilio:ACCOUNT_SID?from=+1...,
    /// resend:?from=ADDR, postmark:?from=ADDR or null. Without it, SENDONCE_PROVIDER or a
    /// config file, `run` refuses to start. Credentials come from environment variables (SENDONCE_SMTP_PASSWORD,
    /// SENDONCE_TWILIO_AUTH_TOKEN, SENDONCE_RESEND_API_KEY, SENDONCE_POSTMARK_TOKEN) or the spec's
    /// *_file= option, never from the command line.
    #[arg(long, env = "SENDONCE_PROVIDER")]
    pub provider: Option<String>,
    /// Config file routing accounts and channels to providers, with rate limits (default:
    /// SENDONCE_CONFIG, ./sendonce.toml, $XDG_CONFIG_HOME/sendonce/sendonce.toml,
    /// /etc/sendonce/sendonce.toml: the first that exists; see `sendonce config show`).
    #[arg(long, env = "SENDONCE_CONFIG")]
    pub config: Option<PathBuf>,
    /// Rows per claim.
    #[arg(long, default_value_t = 100)]
    pub batch: usize,
    /// Provider calls in flight at most.
    #[arg(long, default_value_t = 32)]
    pub concurrency: usize,
    /// Lease length (renewed at dispatch; calls time out at half of it).
    #[arg(long, default_value = "60s")]
    pub lease: String,
    /// How often to look for due campaigns when idle.
    #[arg(long, default_value = "1s")]
    pub tick: String,
    /// Name in the ledger's lease_owner column (default: host-pid).
    #[arg(long)]
    pub worker_id: Option<String>,
    /// Attempts before a definitely-not-sent message is failed.
    #[arg(long, default_value_t = 8)]
    pub max_attempts: i64,
    /// First retry delay (doubles per attempt, up to 5m).
    #[arg(long, default_value = "1s")]
    pub retry_base: String,
    /// After SIGTERM/Ctrl-C, how long in-flight calls may take.
    #[arg(long, default_value = "30s")]
    pub drain: String,
    /// Subscribers per list-building transaction.
    #[arg(long, default_value_t = 50_000)]
    pub list_chunk: usize,
    /// Public base URL of this sender (https://news.example.org), served by `sendonce serve`:
    /// `{{ unsubscribe_url }}` and every email's List-Unsubscribe are URL/u/TOKEN, sealed with
    /// SENDONCE_UNSUBSCRIBE_SECRET. Default: public_url in the config file. A campaign that prints
    /// the link is not sent without it.
    #[arg(long, env = "SENDONCE_PUBLIC_URL", value_name = "URL")]
    pub public_url: Option<String>,
    /// synchronous pragma (for `sendonce bench --sync normal`; FULL is the durable setting).
    #[arg(long, hide = true, value_enum, default_value_t = SyncArg::Full)]
    pub sync: SyncArg,
    /// Add the process's peak resident memory (VmHWM) to the output (for `sendonce bench`).
    #[arg(long, hide = true)]
    pub report_peak_rss: bool,
}

#[derive(Subcommand, Debug)]
pub enum DoubtsCmd {
    /// Sends in doubt for a campaign.
    List {
        /// Campaign id.
        #[arg(long)]
        campaign: i64,
    },
    /// Decide a send in doubt: --as-sent (it was delivered) or --requeue (it was not; send it
    /// again).
    Resolve {
        /// The send id (first column of `doubts list`).
        send_id: i64,
        /// It was delivered (checked with the provider or the recipient).
        #[arg(long, conflicts_with = "requeue")]
        as_sent: bool,
        /// It was not delivered: queue it again.
        #[arg(long)]
        requeue: bool,
        /// Who decided (kept in the ledger's reason; default: $USER).
        #[arg(long)]
        by: Option<String>,
    },
}

#[derive(Args, Debug)]
pub struct NotifyArgs {
    /// Used only when it is a postgres:// URL (then the ledger, unless --state is given): a
    /// SQLite --db is not notify's ledger. This hidden local copy keeps the global `--db` out of
    /// this command's help (clap propagates a global value into it).
    #[arg(long = "db", hide = true)]
    pub db: Option<PathBuf>,

    /// Recipient: an email address or an E.164 phone number (+14155550100). Repeatable.
    #[arg(long, required = true)]
    pub to: Vec<String>,
    /// The message text (sent verbatim). Without --message or --message-file, read from stdin.
    #[arg(long, conflicts_with = "message_file")]
    pub message: Option<String>,
    /// Read the message text from a file.
    #[arg(long)]
    pub message_file: Option<PathBuf>,
    /// Subject (email).
    #[arg(long)]
    pub subject: Option<String>,
    /// Sender address or number.
    #[arg(long)]
    pub from: Option<String>,
    /// Idempotency key: the same key means the same message. Default: derived from the CI job.
    #[arg(long)]
    pub key: Option<String>,
    /// Force the channel instead of deriving it from each address.
    #[arg(long, value_parser = ["email", "sms"])]
    pub channel: Option<String>,
    /// Provider spec (see `sendonce run --help`).
    #[arg(long, env = "SENDONCE_PROVIDER")]
    pub provider: Option<String>,
    /// Ledger file or postgres:// URL (default: a postgres:// --db or SENDONCE_DB, else
    /// $XDG_STATE_HOME/sendonce/notify.db or ~/.local/state/sendonce/notify.db).
    #[arg(long)]
    pub state: Option<PathBuf>,
    /// Show the key, the job ids and what would be sent; send nothing, write nothing.
    #[arg(long)]
    pub dry_run: bool,
}
