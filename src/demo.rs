//! `sendonce demo`: the main job end to end on a fresh database in a temporary directory.

use crate::{provider, worker};
use sendonce_core::app::import;
use sendonce_domain::address::Channel;
use sendonce_domain::error::{Error, Result};
use sendonce_store::prelude::*;
use sendonce_store::{ImportReport, Ledger, NewCampaign, OpenOptions, Store};
use serde::Serialize;
use std::io::Write;
use std::path::{Path, PathBuf};
use std::sync::Arc;

/// What the demo did, for people (`text`) and scripts (`--json`).
#[derive(Debug, Serialize)]
pub struct Report {
    pub dir: PathBuf,
    pub db: PathBuf,
    pub csv: PathBuf,
    pub outbox: PathBuf,
    pub campaign_id: i64,
    pub csv_rows: u64,
    pub imported: u64,
    pub skipped_duplicates: Vec<String>,
    pub suppressed_address: String,
    pub counts: std::collections::BTreeMap<&'static str, u64>,
    pub campaign_status: String,
    pub outbox_deliveries: u64,
    pub seconds: f64,
}

impl Report {
    pub fn text(&self) -> String {
        let mut t = format!(
            "demo finished in {:.2}s\nimported {} of {} CSV rows",
            self.seconds, self.imported, self.csv_rows,
        );
        match self.skipped_duplicates.len() {
            0 => t.push('\n'),
            1 => t.push_str("; skipped 1 duplicate address that differs only in case:\n"),
            n => t.push_str(&format!(
                "; skipped {n} duplicate addresses that differ only in case:\n"
            )),
        }
        for s in self.skipped_duplicates.iter().take(5) {
            t.push_str(&format!("  {s}\n"));
        }
        if self.skipped_duplicates.len() > 5 {
            t.push_str(&format!(
                "  ... and {} more\n",
                self.skipped_duplicates.len() - 5
            ));
        }
        t.push_str(&format!(
            "suppressed before sending: {} (never claimed, so never sent)\n\
             campaign {} is {}: sent {}, failed {}, suppressed {}, in doubt {}\n\
             the outbox holds {} deliveries, one per recipient\n\
             files:\n  database  {}\n  csv       {}\n  outbox    {}\n\
             look inside: sendonce --db {} campaign report {}",
            self.suppressed_address,
            self.campaign_id,
            self.campaign_status,
            self.counts["sent"],
            self.counts["failed"],
            self.counts["suppressed"],
            self.counts["in_doubt"],
            self.outbox_deliveries,
            self.db.display(),
            self.csv.display(),
            self.outbox.display(),
            self.db.display(),
            self.campaign_id
        ));
        t
    }
}

fn fresh_dir() -> Result<PathBuf> {
    let base = std::env::temp_dir().join(format!(
        "sendonce-demo-{}-{}",
        std::process::id(),
        sendonce_domain::clock::now_ms()
    ));
    std::fs::create_dir_all(&base).map_err(|e| Error::io("cannot create the demo directory", e))?;
    Ok(base)
}

/// The directory named by `--dir` (created if missing), or a fresh one under the temp dir.
fn demo_dir(dir: Option<&Path>) -> Result<PathBuf> {
    Ok(match dir {
        Some(d) => {
            std::fs::create_dir_all(d)
                .map_err(|e| Error::io(&format!("cannot create {}", d.display()), e))?;
            d.to_path_buf()
        }
        None => fresh_dir()?,
    })
}

/// The demo's subscriber CSV with `n` rows; one row in 50 repeats an earlier address in another
/// case. Returns the number of rows written.
fn write_csv(csv: &Path, n: u64) -> Result<u64> {
    let mut rows = 0u64;
    let f = std::fs::File::create(csv)
        .map_err(|e| Error::io(&format!("cannot create {}", csv.display()), e))?;
    let mut w = std::io::BufWriter::new(f);
    let io = |e| Error::io("writing the demo CSV", e);
    writeln!(w, "email,name,city").map_err(io)?;
    let cities = ["Lisbon", "Porto", "Recife", "Luanda", "Maputo"];
    for i in 1..=n {
        if i % 50 == 0 {
            writeln!(
                w,
                "Reader{}@Example.ORG,Reader {} again,Lisbon",
                i - 1,
                i - 1
            )
            .map_err(io)?;
        } else {
            writeln!(
                w,
                "reader{i}@example.org,Reader {i},{}",
                cities[(i % 5) as usize]
            )
            .map_err(io)?;
        }
        rows += 1;
    }
    w.flush().map_err(io)?;
    Ok(rows)
}

/// The demo's account, subscribers (from `csv`), one suppressed address and an approved
/// campaign: the campaign id, the import report and the suppressed address.
fn seed(store: &Store, csv: &Path) -> Result<(i64, ImportReport, String)> {
    let account = store.add_account("demo")?;
    let report = store.import_subscribers(account, import::read_csv(csv)?, true, &[])?;
    let suppressed_address = "reader3@example.org".to_string();
    store.suppress(
        account,
        Channel::Email,
        &suppressed_address,
        "demo: asked to stop",
        "manual",
    )?;
    let cid = store.create_campaign(&NewCampaign {
        account_id: account,
        name: "Demo newsletter",
        channel: Channel::Email,
        sender: Some("news@example.org"),
        subject: Some("News for {{ name }}"),
        body: "Hello {{ name }},\n\nThis month in {{ city }}: nothing was sent twice.\n",
        html: None,
        reply_to: None,
        filter: None,
        sms_footer: None,
        lists: &[],
        transactional: false,
        windows: &Default::default(),
    })?;
    store.approve_campaign(cid, sendonce_domain::clock::now_ms())?;
    Ok((cid, report, suppressed_address))
}

pub fn run(recipients: u32, dir: Option<&Path>, rt: &tokio::runtime::Runtime) -> Result<Report> {
    if recipients < 2 {
        return Err(Error::invalid("--recipients must be at least 2"));
    }
    let started = std::time::Instant::now();
    let dir = demo_dir(dir)?;
    let db = dir.join("sendonce.db");
    let csv = dir.join("subscribers.csv");
    let outbox = dir.join("outbox.jsonl");
    if db.exists() || outbox.exists() {
        return Err(Error::invalid(format!(
            "{} already holds a demo; pass an empty --dir",
            dir.display()
        )));
    }

    let rows = write_csv(&csv, recipients as u64)?;

    let store = sendonce_store::open(
        &sendonce_store::Target::File(db.clone()),
        &OpenOptions {
            create: true,
            ..Default::default()
        },
    )?;
    let (cid, report, suppressed_address) = seed(&store, &csv)?;

    let provider = provider::from_spec(&format!("outbox:{}", outbox.display()))?;
    let ledger: Arc<dyn Ledger> = store.clone();
    // Every newsletter email carries List-Unsubscribe: the demo seals its links with a key of
    // its own (made now, never stored) for the address `sendonce serve` listens on by default.
    let secret = format!("{}", uuid::Uuid::new_v4().simple());
    let keys = sendonce_domain::links::Keys::new(
        sendonce_domain::links::Secret::new(secret.into_bytes()).map_err(Error::internal)?,
    );
    let links = sendonce_domain::links::Links::new("http://127.0.0.1:8025", keys)
        .map_err(Error::internal)?;
    let cfg = worker::Config {
        once: true,
        tick: std::time::Duration::from_millis(50),
        links: Some(links),
        ..Default::default()
    };
    rt.block_on(worker::spawn(ledger, provider, cfg, std::future::pending()))?;

    let counts = store.status_counts(cid)?;
    let lines = sendonce_core::provider::deliverylog::read_lines(&outbox)?;
    Ok(Report {
        dir,
        db,
        csv,
        outbox,
        campaign_id: cid,
        csv_rows: rows,
        imported: report.imported,
        skipped_duplicates: report
            .skipped
            .iter()
            .map(|s| format!("line {}: {}", s.line, s.reason))
            .collect(),
        suppressed_address,
        campaign_status: counts.status.to_string(),
        counts: counts.counts,
        outbox_deliveries: lines.iter().filter(|l| !l.replay).count() as u64,
        seconds: started.elapsed().as_secs_f64(),
    })
}
