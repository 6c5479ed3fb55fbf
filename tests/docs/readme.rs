//! The README cannot drift: its "Quick start" block runs as written, top to bottom, in an empty
//! directory with the binary under test first on PATH, and its two top commands are the ones
//! that exist (the demo, and `tests/run.sh`, which `.ci/run` calls too).
// Some tests here need tools outside Rust (tier 1); without them their helpers go unused.
#![cfg_attr(not(feature = "tier1"), allow(unused_imports, dead_code))]

use crate::common::BIN;
use std::os::unix::fs::PermissionsExt;
use std::path::Path;
use std::process::Command;

/// A Quick start line ending with this comment is not run (installing is the test's own job).
const SKIP_MARKER: &str = "# not run by tests/docs/readme.rs";

fn readme() -> String {
    let path = Path::new(env!("CARGO_MANIFEST_DIR")).join("README.md");
    std::fs::read_to_string(&path).expect("read README.md")
}

/// The lines of every fenced code block in `text`.
fn code_blocks(text: &str) -> Vec<Vec<String>> {
    let mut blocks = Vec::new();
    let mut current: Option<Vec<String>> = None;
    for line in text.lines() {
        if line.trim_start().starts_with("```") {
            match current.take() {
                Some(b) => blocks.push(b),
                None => current = Some(Vec::new()),
            }
        } else if let Some(b) = current.as_mut() {
            b.push(line.to_string());
        }
    }
    assert!(current.is_none(), "README.md has an unclosed code fence");
    blocks
}

/// The text of the section under the heading `## {title}`, up to the next `## ` heading.
fn section(text: &str, title: &str) -> String {
    let heading = format!("## {title}");
    let mut lines = text.lines().skip_while(|l| l.trim_end() != heading);
    assert!(
        lines.next().is_some(),
        "README.md has no `{heading}` section"
    );
    lines
        .take_while(|l| !l.starts_with("## "))
        .collect::<Vec<_>>()
        .join("\n")
}

/// The Quick start as a bash script: every line of its code blocks, marked lines commented out.
fn quick_start_script() -> (String, Vec<String>) {
    let blocks = code_blocks(&section(&readme(), "Quick start"));
    assert!(
        !blocks.is_empty(),
        "the Quick start section has no code block"
    );
    let mut script = String::new();
    let mut skipped = Vec::new();
    let mut continued = false;
    for line in blocks.iter().flatten() {
        let continues = line.trim_end().ends_with('\\');
        if line.trim_end().ends_with(SKIP_MARKER) {
            assert!(
                !continued && !continues,
                "a skipped line cannot be part of a multi-line command: {line}"
            );
            let code = line.split(" #").next().unwrap_or("");
            assert!(
                !code.contains("sendonce"),
                "every sendonce command of the Quick start must run; this one is skipped: {line}"
            );
            skipped.push(line.clone());
            script.push_str("# skipped: ");
        }
        script.push_str(line);
        script.push('\n');
        continued = continues;
    }
    (script, skipped)
}

/// Runs `script` with bash (`-euo pipefail -x`) in `root/work`, with a clean environment: the
/// binary under test first on PATH, HOME, XDG directories and TMPDIR under `root`.
fn run_script(root: &Path, script: &str) -> (std::path::PathBuf, std::process::Output) {
    let work = root.join("work");
    let home = root.join("home");
    let tmpdir = root.join("tmp");
    for d in [&work, &home, &tmpdir] {
        std::fs::create_dir_all(d).expect("mkdir");
    }
    let script_path = root.join("script.sh");
    std::fs::write(&script_path, script).expect("write script");
    let bin_dir = Path::new(BIN).parent().expect("binary directory");
    let path = format!("{}:/usr/local/bin:/usr/bin:/bin", bin_dir.display());
    let out = Command::new("bash")
        .args(["-e", "-u", "-o", "pipefail", "-x"])
        .arg(&script_path)
        .current_dir(&work)
        .env_clear()
        .env("PATH", path)
        .env("HOME", &home)
        .env("XDG_CONFIG_HOME", home.join(".config"))
        .env("XDG_STATE_HOME", home.join(".local/state"))
        .env("XDG_DATA_HOME", home.join(".local/share"))
        .env("XDG_CACHE_HOME", home.join(".cache"))
        .env("TMPDIR", &tmpdir)
        .stdin(std::process::Stdio::null())
        .output()
        .expect("run bash");
    (work, out)
}

#[test]
fn quick_start_runs_as_written() {
    let (script, skipped) = quick_start_script();
    assert!(
        skipped.len() <= 1,
        "only the install line may be skipped: {skipped:?}"
    );
    assert!(
        script.contains("sendonce run"),
        "the Quick start should send:\n{script}"
    );

    let tmp = tempfile::tempdir().expect("tempdir");
    // What the test needs back from the script, after the README's own lines.
    let trailer = "printf 'readme-test: db=%s campaign=%s\\n' \"$SENDONCE_DB\" \"$CID\"\n";
    let (work, out) = run_script(tmp.path(), &format!("{script}{trailer}"));
    let tmpdir = tmp.path().join("tmp");
    let stdout = String::from_utf8_lossy(&out.stdout);
    let stderr = String::from_utf8_lossy(&out.stderr);
    assert!(
        out.status.success(),
        "the README's Quick start failed ({}):\n--- script\n{script}--- stdout\n{stdout}--- stderr (bash -x)\n{stderr}",
        out.status
    );

    // `sendonce demo` made its directory under TMPDIR and finished its campaign.
    assert!(
        stdout.contains("campaign 1 is sent"),
        "demo summary: {stdout}"
    );
    let demo_dirs = std::fs::read_dir(&tmpdir)
        .expect("read TMPDIR")
        .filter_map(|e| e.ok())
        .filter(|e| {
            e.file_name()
                .to_string_lossy()
                .starts_with("sendonce-demo-")
        })
        .count();
    assert_eq!(demo_dirs, 1, "the demo should make one directory in TMPDIR");

    // The campaign of the walkthrough ended `sent`: Ada got one message, the suppressed
    // address none.
    let last = stdout
        .lines()
        .rev()
        .find_map(|l| l.strip_prefix("readme-test: "))
        .expect("trailer line");
    let (db, cid) = last
        .strip_prefix("db=")
        .and_then(|r| r.split_once(" campaign="))
        .expect("trailer format");
    let db = work.join(db);
    assert!(db.exists(), "{} was not created", db.display());
    let status = Command::new(BIN)
        .args(["--json", "--db"])
        .arg(&db)
        .args(["campaign", "status", cid])
        .env_remove("SENDONCE_DB")
        .output()
        .expect("campaign status");
    assert!(status.status.success(), "{status:?}");
    let doc: serde_json::Value = serde_json::from_slice(&status.stdout).expect("status json");
    assert_eq!(doc["status"], "sent", "{doc}");
    assert_eq!(doc["sent"], 1, "{doc}");
    for state in ["queued", "leased", "failed", "in_doubt", "cancelled"] {
        assert_eq!(doc[state], 0, "{state}: {doc}");
    }

    let outbox = std::fs::read_to_string(work.join("outbox.jsonl")).expect("outbox.jsonl");
    let lines: Vec<serde_json::Value> = outbox
        .lines()
        .map(|l| serde_json::from_str(l).expect("outbox line"))
        .collect();
    assert_eq!(lines.len(), 1, "{outbox}");
    assert_eq!(lines[0]["to"], "ada@example.org");
    assert_eq!(lines[0]["from"], "news@example.org");
    assert_eq!(lines[0]["subject"], "News for Ada");
    assert_eq!(lines[0]["body"], "Hello Ada,\nnews from London.\n");

    // The report has Ada, sent; the suppressed address, if it is listed at all, as suppressed.
    let report = std::fs::read_to_string(work.join("report.csv")).expect("report.csv");
    let mut rows = report.lines();
    assert!(
        rows.next().unwrap_or("").starts_with("send_id,"),
        "{report}"
    );
    let rows: Vec<&str> = rows.collect();
    assert!(
        rows.iter().any(|r| r.contains(",ada@example.org,sent,")),
        "{report}"
    );
    for row in &rows {
        assert!(
            row.contains(",ada@example.org,sent,")
                || row.contains(",bounced@example.org,suppressed,"),
            "unexpected report row {row:?} in:\n{report}"
        );
    }
}

/// The top of the README shows the two commands a newcomer needs, and both exist: the test
/// command is the script `.ci/run` calls, and that script runs every tier (crash points included)
/// in release.
#[test]
fn top_commands_are_the_demo_and_the_test_script() {
    let text = readme();
    let first = code_blocks(&text)
        .into_iter()
        .next()
        .expect("a first code block");
    let commands: Vec<&str> = first
        .iter()
        .map(|l| l.split(" #").next().unwrap_or("").trim())
        .filter(|c| !c.is_empty())
        .collect();
    assert_eq!(commands, ["cargo run --release -- demo", "tests/run.sh"]);

    let root = Path::new(env!("CARGO_MANIFEST_DIR"));
    let script = root.join("tests/run.sh");
    let mode = std::fs::metadata(&script)
        .expect("tests/run.sh")
        .permissions()
        .mode();
    assert!(mode & 0o111 != 0, "tests/run.sh is not executable");
    let body = std::fs::read_to_string(&script).expect("read tests/run.sh");
    assert!(body.contains("cargo test --release --no-fail-fast --features tier2 \"$@\""));
    assert!(body.contains("tests/requirements.txt"));
    let ci = std::fs::read_to_string(root.join(".ci/run")).expect("read .ci/run");
    assert!(
        ci.lines()
            .any(|l| !l.trim_start().starts_with('#') && l.contains("tests/run.sh")),
        ".ci/run does not call tests/run.sh"
    );
}

/// Kills the server the first-ten-minutes block left running, however the test ends.
struct Stop(Option<u32>);

impl Drop for Stop {
    fn drop(&mut self) {
        if let Some(pid) = self.0 {
            let _ = Command::new("kill").arg(pid.to_string()).status();
        }
    }
}

/// README's "The first ten minutes" runs as written (on a free port instead of 8025): the API
/// message is sent once and a replay of its request answers from the ledger, the campaign's
/// unsubscribe link works, and the admin it makes can log in to the dashboard.
#[test]
fn first_ten_minutes_runs_as_written() {
    let blocks = code_blocks(&section(&readme(), "The first ten minutes"));
    assert_eq!(blocks.len(), 1, "one block in The first ten minutes");
    let port = std::net::TcpListener::bind("127.0.0.1:0")
        .and_then(|l| l.local_addr())
        .expect("a free port")
        .port();
    let written = blocks[0].join("\n");
    assert!(written.contains("127.0.0.1:8025"), "{written}");
    let script = written.replace("127.0.0.1:8025", &format!("127.0.0.1:{port}"));
    // After the README's lines: the server's pid, and the same request again, which must be
    // answered as a replay.
    let trailer = format!(
        "\nprintf 'readme-test: pid=%s\\n' \"$!\"\n\
         curl -s -o /dev/null -D - \"http://127.0.0.1:{port}/v1/messages\" \
         -H \"Authorization: Bearer $TOKEN\" -H \"Idempotency-Key: welcome-ada\" \
         -H \"Content-Type: application/json\" \
         -d '{{\"to\": \"ada@example.org\", \"from\": \"app@example.org\", \"subject\": \"Welcome\", \"text\": \"Hello Ada\"}}'\n"
    );
    let tmp = tempfile::tempdir().expect("tempdir");
    let (work, out) = run_script(tmp.path(), &format!("{script}{trailer}"));
    let stdout = String::from_utf8_lossy(&out.stdout).to_string();
    let pid = stdout
        .lines()
        .find_map(|l| l.strip_prefix("readme-test: pid="))
        .and_then(|p| p.trim().parse::<u32>().ok());
    let _stop = Stop(pid);
    let log = std::fs::read_to_string(work.join("serve.log")).unwrap_or_default();
    assert!(
        out.status.success(),
        "the README's first ten minutes failed ({}):\n--- stdout\n{stdout}--- stderr (bash -x)\n{}--- serve.log\n{log}",
        out.status,
        String::from_utf8_lossy(&out.stderr)
    );
    assert!(pid.is_some(), "{stdout}");

    // The message was sent, once, and its repeat was answered from the ledger.
    assert!(stdout.contains("\"status\":\"sent\""), "{stdout}");
    assert!(
        stdout
            .to_ascii_lowercase()
            .contains("idempotent-replayed: true"),
        "{stdout}"
    );
    let outbox = std::fs::read_to_string(work.join("demo/outbox.jsonl")).expect("outbox");
    let to_ada = outbox
        .lines()
        .filter(|l| l.contains("\"to\":\"ada@example.org\""))
        .count();
    assert_eq!(to_ada, 1, "{outbox}");

    // The unsubscribe link showed its page, worked, and the suppression list says so.
    assert!(stdout.contains("You are unsubscribed"), "{stdout}");
    assert!(stdout.contains("unsubscribe-link"), "{stdout}");

    // The admin it made logs in to the dashboard of the server it left running.
    let password = written
        .split("SENDONCE_ADMIN_PASSWORD='")
        .nth(1)
        .and_then(|r| r.split('\'').next())
        .expect("the block sets SENDONCE_ADMIN_PASSWORD");
    let admin = crate::common::dashboard::Admin::login(
        &format!("http://127.0.0.1:{port}"),
        "ana",
        password,
    );
    let page = admin.get("/admin/campaigns");
    assert!(page.body.contains("Second issue"), "{}", page.body);
}
