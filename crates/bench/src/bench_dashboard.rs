//! `sendonce bench --only dashboard`: every GET page of the dashboard timed on a big file. One
//! account with an admin, a list and a campaign of `--scale` recipients (seeded as the scale
//! section does; most sent, some failed, suppressed, in doubt and still queued), served by a
//! child `sendonce serve` on loopback; each page (ids substituted, plus a search and a second
//! page where the page offers them) fetched `RUNS` times by a logged-in client. Figures only:
//! a median over `SLOW_MS` is flagged, never asserted.

use super::bench::{child_cmd, load_average, machine, setup_campaign_in_lists, Machine, Workspace};
use crate::limit;
use crate::seed::Bench as _;
use sendonce_core::app;
use sendonce_domain::error::{Error, Result};
use sendonce_domain::login::Password;
use sendonce_domain::token::Scope;
use sendonce_store::sqlite::SqliteStore;
use sendonce_store::{Ledger, Lists, Outcome, Record, Store, Synchronous};
use serde::Serialize;
use std::io::BufRead;
use std::path::{Path, PathBuf};
use std::process::Stdio;
use std::time::{Duration, Instant};

/// Timed fetches of each page (the median and the max are reported).
pub const RUNS: usize = 7;
/// A page whose median is above this is flagged.
pub const SLOW_MS: f64 = 100.0;
/// Rows per seeding transaction of the sends' states.
const STATE_BATCH: usize = 5_000;
/// The bench admin's password (a throwaway file; never printed).
const ADMIN_PASSWORD: &str = "bench dashboard password";

/// What to measure.
#[derive(Debug, Clone)]
pub struct Options {
    /// Recipients of the campaign (subscribers seeded).
    pub recipients: u64,
    pub sync: Synchronous,
    pub dir: Option<PathBuf>,
}

/// How the campaign's sends were left.
#[derive(Debug, Default, Serialize)]
pub struct States {
    pub sent: u64,
    pub failed: u64,
    pub in_doubt: u64,
    pub queued: u64,
    pub suppressed: u64,
}

/// One page's figures.
#[derive(Debug, Serialize)]
pub struct PageTiming {
    /// The route as `route_list()` has it.
    pub route: String,
    /// The path fetched (ids substituted, query variant included).
    pub path: String,
    pub status: u16,
    pub median_ms: f64,
    pub max_ms: f64,
    pub slow: bool,
}

#[derive(Debug, Serialize)]
pub struct DashboardReport {
    pub machine: Machine,
    pub recipients: u64,
    pub states: States,
    pub seed_seconds: f64,
    pub runs: usize,
    pub pages: Vec<PageTiming>,
    /// Pages whose median is above `SLOW_MS`.
    pub slow: usize,
    /// Routes not timed (a path parameter the bench has no id for), with why.
    pub skipped: Vec<String>,
    pub seconds: f64,
}

/// The ids a route's `{param}` stands for.
struct Ids {
    campaign: i64,
    list: i64,
    subscriber: i64,
    send_id: i64,
    token: i64,
}

/// The address the bench suppresses (the removal confirmation page names it).
const BENCH_SUPPRESSED: &str = "bench-suppressed@example.org";

impl Ids {
    fn substitute(&self, route: &str) -> Option<String> {
        let mut out = Vec::new();
        for seg in route.split('/') {
            out.push(
                match seg.strip_prefix('{').and_then(|s| s.strip_suffix('}')) {
                    Some("id") => self.campaign.to_string(),
                    Some("list") => self.list.to_string(),
                    Some("subscriber") => self.subscriber.to_string(),
                    Some("send_id") => self.send_id.to_string(),
                    Some("token") => self.token.to_string(),
                    Some(_) => return None,
                    None => seg.to_string(),
                },
            );
        }
        let path = out.join("/");
        // A confirmation page asks which decision it confirms.
        if route.ends_with("/resolve") {
            return Some(format!("{path}?as=sent"));
        }
        if route.ends_with("/suppressions/remove") {
            return Some(format!("{path}?address={BENCH_SUPPRESSED}"));
        }
        Some(path)
    }
}

/// Run the section.
pub fn run(opts: &Options, rt: &tokio::runtime::Runtime) -> Result<DashboardReport> {
    let started = Instant::now();
    let load_start = load_average();
    let ws = Workspace::new(opts.dir.as_deref(), opts.sync)?;
    let (db, store) = ws.fresh("dashboard.db")?;
    let (ids, states) = seed(store, opts.recipients)?;
    let seed_seconds = started.elapsed().as_secs_f64();
    let (mut server, base) = start_server(&db)?;
    let timed = rt.block_on(time_pages(&base, &ids));
    // SAFETY: kill(2) on our own child, not reaped yet.
    unsafe {
        libc::kill(server.id() as i32, libc::SIGTERM);
    }
    let _ = server.wait();
    let (pages, skipped) = timed?;
    Ok(DashboardReport {
        machine: machine(load_start),
        recipients: opts.recipients,
        states,
        seed_seconds,
        runs: RUNS,
        slow: pages.iter().filter(|p| p.slow).count(),
        pages,
        skipped,
        seconds: started.elapsed().as_secs_f64(),
    })
}

/// The account `bench` (admin `bench`, a send token), its subscribers in one list and the
/// campaign's sends in a realistic mix of states.
fn seed(file: SqliteStore, n: u64) -> Result<(Ids, States)> {
    let store = &file;
    let (campaign, _) = setup_campaign_in_lists(store, n, 1)?;
    store.start_due_campaigns(sendonce_domain::clock::now_ms())?;
    while !store.build_list_chunk(campaign, 50_000)? {}
    let queued = store.bench_count(campaign, "queued")?;
    let in_doubt = (queued / 330).max(1);
    let failed = (queued / 50).max(1);
    let still_queued = (queued / 200).max(1);
    let sent = queued.saturating_sub(in_doubt + failed + still_queued);
    let mut token = 1;
    move_rows(store, campaign, sent, &mut token, None)?;
    let failure = Outcome::Failed {
        error: "550 mailbox unavailable".into(),
        suppress: None,
    };
    move_rows(store, campaign, failed, &mut token, Some(&failure))?;
    let doubt = Outcome::InDoubt {
        error: "timed out after the request was sent".into(),
    };
    let send_id = move_rows(store, campaign, in_doubt, &mut token, Some(&doubt))?;
    // The app layer's use cases take the store the commands hold.
    let store = &Store::Sqlite(file);
    app::admins::create(
        store,
        "bench",
        "bench",
        &Password::new(ADMIN_PASSWORD.into())?,
        false,
    )?;
    let api = app::tokens::create(store, "bench", "bench", Scope::Read)?;
    // One suppression the removal's confirmation page can name.
    app::suppressions::add(
        store,
        "bench",
        &app::suppressions::Entry::new(sendonce_domain::address::Channel::Email, BENCH_SUPPRESSED)?,
        "bench",
    )?;
    let list = store
        .campaign_lists(campaign)?
        .first()
        .copied()
        .unwrap_or(0);
    let states = States {
        sent: store.bench_count(campaign, "sent")?,
        failed: store.bench_count(campaign, "failed")?,
        in_doubt: store.bench_count(campaign, "in_doubt")?,
        queued: store.bench_count(campaign, "queued")?,
        suppressed: store.bench_count(campaign, "suppressed")?,
    };
    if let Some(file) = store.file() {
        file.checkpoint_truncate()?;
    }
    let ids = Ids {
        campaign,
        list,
        // The seeded subscribers' ids start at 1 on a fresh file.
        subscriber: 1,
        send_id,
        token: api.id,
    };
    Ok((ids, states))
}

/// Lease `n` queued rows of the campaign in batches and record them as sent (`outcome` None:
/// the bare confirmation) or with `outcome`. Returns the last row's id.
fn move_rows(
    store: &SqliteStore,
    campaign: i64,
    n: u64,
    token: &mut i64,
    outcome: Option<&Outcome>,
) -> Result<i64> {
    let mut left = n;
    let mut last = 0;
    while left > 0 {
        let batch = (left as usize).min(STATE_BATCH);
        let now = sendonce_domain::clock::now_ms();
        let claim = limit::bare_claim(store, campaign, batch, *token, now, 60_000)?;
        if claim.ids.is_empty() {
            break;
        }
        match outcome {
            None => {
                limit::bare_confirm(store, &claim.ids, *token, now)?;
            }
            Some(o) => {
                let records: Vec<Record> = claim
                    .ids
                    .iter()
                    .map(|&id| Record {
                        id,
                        token: *token,
                        outcome: o.clone(),
                    })
                    .collect();
                store.record(&records, now)?;
            }
        }
        last = claim.ids.last().copied().unwrap_or(last);
        left -= claim.ids.len() as u64;
        *token += 1;
    }
    Ok(last)
}

/// A child `sendonce serve` on loopback; its base URL.
fn start_server(db: &Path) -> Result<(std::process::Child, String)> {
    let mut cmd = child_cmd(db)?;
    cmd.args(["-q", "serve", "--listen", "127.0.0.1:0"])
        .env_remove("SENDONCE_PROVIDER")
        .stdout(Stdio::piped())
        .stderr(Stdio::inherit());
    let mut child = cmd
        .spawn()
        .map_err(|e| Error::io("cannot start sendonce serve", e))?;
    let mut first = String::new();
    if let Some(out) = child.stdout.take() {
        std::io::BufReader::new(out)
            .read_line(&mut first)
            .map_err(|e| Error::io("reading sendonce serve", e))?;
    }
    match first.trim().strip_prefix("listening on ") {
        Some(addr) => Ok((child, addr.to_string())),
        None => {
            let _ = child.kill();
            let _ = child.wait();
            Err(Error::internal(format!(
                "sendonce serve printed {first:?}, not its address"
            )))
        }
    }
}

/// A logged-in client of the dashboard: its session cookie.
struct Client {
    http: reqwest::Client,
    base: String,
    cookie: String,
}

impl Client {
    async fn login(base: &str) -> Result<Client> {
        let _ = rustls::crypto::ring::default_provider().install_default();
        let http = reqwest::Client::builder()
            .no_proxy()
            .redirect(reqwest::redirect::Policy::none())
            .timeout(Duration::from_secs(60))
            .build()
            .map_err(|e| Error::internal(format!("http client: {e}")))?;
        let form = http
            .get(format!("{base}/admin/login"))
            .send()
            .await
            .map_err(net)?;
        let nonce_cookie = cookie_of(form.headers(), "sendonce_login")?;
        let body = form.text().await.map_err(net)?;
        let nonce = field_value(&body, "nonce")
            .ok_or_else(|| Error::internal("the login page has no nonce"))?;
        let fields: String = form_urlencoded::Serializer::new(String::new())
            .extend_pairs([
                ("name", "bench"),
                ("password", ADMIN_PASSWORD),
                ("nonce", &nonce),
            ])
            .finish();
        let res = http
            .post(format!("{base}/admin/login"))
            .header("cookie", nonce_cookie)
            .header("content-type", "application/x-www-form-urlencoded")
            .body(fields)
            .send()
            .await
            .map_err(net)?;
        let cookie = cookie_of(res.headers(), "sendonce_session")?;
        Ok(Client {
            http,
            base: base.to_string(),
            cookie,
        })
    }

    /// GET `path`: status, body, milliseconds.
    async fn get(&self, path: &str) -> Result<(u16, String, f64)> {
        let t = Instant::now();
        let res = self
            .http
            .get(format!("{}{path}", self.base))
            .header("cookie", &self.cookie)
            .send()
            .await
            .map_err(net)?;
        let status = res.status().as_u16();
        let body = res.text().await.map_err(net)?;
        Ok((status, body, t.elapsed().as_secs_f64() * 1e3))
    }
}

fn net(e: reqwest::Error) -> Error {
    Error::internal(format!("dashboard request: {e}"))
}

/// `name=value` of cookie `name` in the answer's `Set-Cookie` headers.
fn cookie_of(h: &reqwest::header::HeaderMap, name: &str) -> Result<String> {
    h.get_all("set-cookie")
        .iter()
        .filter_map(|v| v.to_str().ok())
        .find(|v| v.starts_with(&format!("{name}=")))
        .and_then(|v| v.split(';').next())
        .map(str::to_string)
        .ok_or_else(|| Error::internal(format!("no {name} cookie (login refused?)")))
}

/// The value of the first `name="NAME" value="..."` in a page.
fn field_value(body: &str, name: &str) -> Option<String> {
    let marker = format!("name=\"{name}\" value=\"");
    let start = body.find(&marker)? + marker.len();
    let end = body[start..].find('"')?;
    Some(body[start..start + end].to_string())
}

/// The query variants a page offers: a search when it has a field `q`, each state of its
/// `status` filter, its next page when it links to itself with a cursor (`after=`, `page=`,
/// `cursor=`, `before=`).
fn variants(path: &str, body: &str) -> Vec<String> {
    let mut out = Vec::new();
    if body.contains("name=\"q\"") {
        out.push(format!("{path}?q=reader12"));
    }
    // Every state a `status` filter offers (a rare state is where a walk would be slow).
    if let Some(i) = body.find("name=\"status\"") {
        let select = &body[i..body[i..].find("</select>").map_or(body.len(), |e| i + e)];
        for part in select.split("<option value=\"").skip(1) {
            match part.split('"').next() {
                Some(v) if !v.is_empty() => out.push(format!("{path}?status={v}")),
                _ => {}
            }
        }
    }
    let href = format!("href=\"{path}?");
    let mut rest = body;
    while let Some(i) = rest.find(&href) {
        let start = i + "href=\"".len();
        let end = rest[start..].find('"').map_or(rest.len(), |e| start + e);
        let link = rest[start..end].replace("&amp;", "&");
        if ["after=", "page=", "cursor=", "before="]
            .iter()
            .any(|k| link.contains(k))
        {
            out.push(link);
            break;
        }
        rest = &rest[end..];
    }
    out
}

/// Time every GET route (and its variants) `RUNS` times; the figures and the routes skipped.
async fn time_pages(base: &str, ids: &Ids) -> Result<(Vec<PageTiming>, Vec<String>)> {
    let client = Client::login(base).await?;
    let mut pages = Vec::new();
    let mut skipped = Vec::new();
    for (method, route) in sendonce_http::dashboard::route_list() {
        if method != "GET" {
            continue;
        }
        let Some(path) = ids.substitute(route) else {
            skipped.push(format!("{route}: a path parameter the bench has no id for"));
            continue;
        };
        let (_, first, _) = client.get(&path).await?;
        let mut paths = vec![path.clone()];
        paths.extend(variants(&path, &first));
        for p in paths {
            pages.push(time_one(&client, route, &p).await?);
        }
    }
    Ok((pages, skipped))
}

async fn time_one(client: &Client, route: &str, path: &str) -> Result<PageTiming> {
    let mut ms = Vec::with_capacity(RUNS);
    let mut status = 0;
    for _ in 0..RUNS {
        let (s, _, t) = client.get(path).await?;
        status = s;
        ms.push(t);
    }
    ms.sort_by(f64::total_cmp);
    let median_ms = ms[RUNS / 2];
    Ok(PageTiming {
        route: route.to_string(),
        path: path.to_string(),
        status,
        median_ms,
        max_ms: ms[RUNS - 1],
        slow: median_ms > SLOW_MS,
    })
}

impl DashboardReport {
    pub fn table(&self) -> String {
        let s = &self.states;
        let mut t = format!(
            "sendonce bench --only dashboard: {} recipients (sent {}, failed {}, suppressed {}, \
             in doubt {}, queued {}), seeded in {:.1} s; {} cpu(s), load {:.1} -> {:.1}\n\
             each page {} times by one logged-in client over loopback (wall time of the \
             request), median > {SLOW_MS} ms flagged\n\n{:<42} {:>6} {:>10} {:>10}\n",
            self.recipients,
            s.sent,
            s.failed,
            s.suppressed,
            s.in_doubt,
            s.queued,
            self.seed_seconds,
            self.machine.cpus,
            self.machine.load_start,
            self.machine.load_end,
            self.runs,
            "page",
            "status",
            "median ms",
            "max ms"
        );
        for p in &self.pages {
            t.push_str(&format!(
                "{:<42} {:>6} {:>10.1} {:>10.1}{}\n",
                p.path,
                p.status,
                p.median_ms,
                p.max_ms,
                if p.slow { "  SLOW" } else { "" }
            ));
        }
        for s in &self.skipped {
            t.push_str(&format!("not timed: {s}\n"));
        }
        t.push_str(&format!(
            "\n{} page(s) over {SLOW_MS} ms; {:.1} s in all",
            self.slow, self.seconds
        ));
        t
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn ids_and_variants() {
        let ids = Ids {
            campaign: 1,
            list: 2,
            subscriber: 3,
            send_id: 4,
            token: 5,
        };
        assert_eq!(
            ids.substitute("/admin/lists/{list}/subscribers/{subscriber}"),
            Some("/admin/lists/2/subscribers/3".into())
        );
        assert_eq!(ids.substitute("/admin/x/{what}"), None);
        let body = r#"<input name="q" value=""><a href="/admin/x?after=9&amp;q=a">Next</a>"#;
        assert_eq!(
            variants("/admin/x", body),
            ["/admin/x?q=reader12", "/admin/x?after=9&q=a"]
        );
        let body = r#"<select name="status"><option value="">any</option>
            <option value="failed">failed</option><option value="in_doubt" selected>in_doubt</option>
            </select><select name="other"><option value="x">x</option></select>"#;
        assert_eq!(
            variants("/admin/x", body),
            ["/admin/x?status=failed", "/admin/x?status=in_doubt"]
        );
    }
}
