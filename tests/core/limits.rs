//! Input size limits: a body file, a notify message or a subscriber CSV past its limit is a
//! usage error (exit 2) that names the limit (and the CSV line), comes quickly, and writes
//! nothing; endless inputs (`/dev/zero`, a FIFO, stdin) are not read to the end.

use crate::common::{Env, Run, BIN};
use std::io::{BufWriter, Read, Write};
use std::path::{Path, PathBuf};
use std::process::{Command, Stdio};
use std::time::{Duration, Instant};

const MIB: usize = 1024 * 1024;

/// Run `c` with `stdin` under a 1 GiB address-space limit (an unbounded read aborts instead of
/// eating a shared machine's memory) and a 60 s deadline (killed after it). Returns the run and
/// how long it took.
fn bounded(mut c: Command, stdin: Stdio) -> (Run, Duration) {
    use std::os::unix::process::CommandExt;
    // SAFETY: setrlimit(2) is async-signal-safe; nothing else runs between fork and exec.
    unsafe {
        c.pre_exec(|| {
            let lim = libc::rlimit {
                rlim_cur: 1 << 30,
                rlim_max: 1 << 30,
            };
            if libc::setrlimit(libc::RLIMIT_AS, &lim) != 0 {
                return Err(std::io::Error::last_os_error());
            }
            Ok(())
        });
    }
    let start = Instant::now();
    let mut child = c
        .stdin(stdin)
        .stdout(Stdio::piped())
        .stderr(Stdio::piped())
        .spawn()
        .expect("spawn sendonce");
    let status = loop {
        if let Some(s) = child.try_wait().expect("try_wait") {
            break s;
        }
        if start.elapsed() > Duration::from_secs(60) {
            let _ = child.kill();
            break child.wait().expect("wait");
        }
        std::thread::sleep(Duration::from_millis(10));
    };
    let took = start.elapsed();
    let (mut stdout, mut stderr) = (String::new(), String::new());
    if let Some(mut o) = child.stdout.take() {
        let _ = o.read_to_string(&mut stdout);
    }
    if let Some(mut e) = child.stderr.take() {
        let _ = e.read_to_string(&mut stderr);
    }
    let run = Run {
        code: status.code().unwrap_or(-1),
        stdout,
        stderr,
    };
    (run, took)
}

/// `sendonce --db <env's db> args...`, bounded.
fn run_bounded(env: &Env, args: &[&str]) -> (Run, Duration) {
    let mut c = env.cmd();
    c.args(args);
    bounded(c, Stdio::null())
}

fn create_campaign(env: &Env, acct: &str, body: &Path) -> (Run, Duration) {
    run_bounded(
        env,
        &[
            "campaign",
            "create",
            "--account",
            acct,
            "--name",
            "big",
            "--channel",
            "email",
            "--from",
            "news@example.org",
            "--subject",
            "Hi",
            "--body-file",
            body.to_str().unwrap(),
        ],
    )
}

fn assert_refused(r: &Run, took: Duration, needles: &[&str]) {
    assert_eq!(
        r.code, 2,
        "expected a usage error (exit 2), got {}: {}",
        r.code, r.stderr
    );
    for n in needles {
        assert!(r.stderr.contains(n), "no {n:?} in: {}", r.stderr);
    }
    assert!(
        took < Duration::from_secs(20),
        "refusing took {took:?} (the input was read to its end?)"
    );
    assert!(
        r.stderr.len() < 4096,
        "the error quotes the input: {} bytes",
        r.stderr.len()
    );
}

/// A file of `n` bytes of `b'a'`, written quickly.
fn filled(env: &Env, name: &str, n: usize) -> PathBuf {
    let p = env.path(name);
    let mut w = BufWriter::new(std::fs::File::create(&p).unwrap());
    let chunk = vec![b'a'; 64 * 1024];
    let mut left = n;
    while left > 0 {
        let k = left.min(chunk.len());
        w.write_all(&chunk[..k]).unwrap();
        left -= k;
    }
    w.flush().unwrap();
    p
}

#[test]
fn body_file_dev_zero_is_refused_quickly() {
    let env = Env::new();
    let acct = env.setup_account();
    let (r, took) = create_campaign(&env, &acct, Path::new("/dev/zero"));
    assert_refused(
        &r,
        took,
        &["--body-file /dev/zero", "1 MiB limit", "message body"],
    );
    assert_eq!(env.count("SELECT count(*) FROM campaigns"), 0);
}

#[test]
fn body_file_over_the_limit_is_refused_and_at_the_limit_accepted() {
    let env = Env::new();
    let acct = env.setup_account();
    let big = filled(&env, "big.txt", 2 * MIB);
    let (r, took) = create_campaign(&env, &acct, &big);
    assert_refused(&r, took, &["--body-file", "big.txt", "1 MiB limit"]);
    assert_eq!(env.count("SELECT count(*) FROM campaigns"), 0);
    let one_over = filled(&env, "over.txt", MIB + 1);
    let (r, took) = create_campaign(&env, &acct, &one_over);
    assert_refused(&r, took, &["1 MiB limit"]);
    assert_eq!(env.count("SELECT count(*) FROM campaigns"), 0);
    // Exactly the limit is fine.
    let at = filled(&env, "at.txt", MIB);
    let (r, _) = create_campaign(&env, &acct, &at);
    assert_eq!(r.code, 0, "{}", r.stderr);
    assert_eq!(env.count("SELECT count(*) FROM campaigns"), 1);
}

#[test]
fn body_file_fifo_is_not_read_to_its_end() {
    let env = Env::new();
    let acct = env.setup_account();
    let fifo = env.path("body.fifo");
    let c = std::ffi::CString::new(fifo.to_str().unwrap()).unwrap();
    // SAFETY: mkfifo(3) on a NUL-terminated path we own.
    assert_eq!(unsafe { libc::mkfifo(c.as_ptr(), 0o600) }, 0);
    // The writer offers 64 MiB; the reader must stop after the first MiB.
    let path = fifo.clone();
    let writer = std::thread::spawn(move || {
        let Ok(mut f) = std::fs::OpenOptions::new().write(true).open(&path) else {
            return 0;
        };
        let chunk = vec![b'x'; 64 * 1024];
        let mut sent = 0usize;
        while sent < 64 * MIB {
            if f.write_all(&chunk).is_err() {
                break;
            }
            sent += chunk.len();
        }
        sent
    });
    let (r, took) = create_campaign(&env, &acct, &fifo);
    assert_refused(&r, took, &["body.fifo", "1 MiB limit"]);
    let sent = writer.join().unwrap();
    assert!(sent < 64 * MIB, "the whole FIFO was read ({sent} bytes)");
    assert_eq!(env.count("SELECT count(*) FROM campaigns"), 0);
}

fn notify_cmd(d: &Path, extra: &[&str]) -> Command {
    let mut c = Command::new(BIN);
    c.env_remove("SENDONCE_PROVIDER")
        .env_remove("GITHUB_ACTIONS")
        .env_remove("GITLAB_CI")
        .args(["notify", "--to", "a@b.co", "--key", "k1", "--subject", "s"])
        .arg("--state")
        .arg(d.join("state.db"))
        .arg("--provider")
        .arg(format!("outbox:{}", d.join("o.jsonl").display()))
        .args(extra);
    c
}

#[test]
fn notify_message_file_over_the_limit_is_refused() {
    let env = Env::new();
    let big = filled(&env, "msg.txt", 2 * MIB);
    let (r, took) = bounded(
        notify_cmd(env.dir.path(), &["--message-file", big.to_str().unwrap()]),
        Stdio::null(),
    );
    assert_refused(&r, took, &["--message-file", "msg.txt", "1 MiB limit"]);
    assert!(!env.path("o.jsonl").exists(), "a message was sent");
    assert!(!env.path("state.db").exists(), "the state was written");
    // /dev/zero as the file: refused just as fast.
    let (r, took) = bounded(
        notify_cmd(env.dir.path(), &["--message-file", "/dev/zero"]),
        Stdio::null(),
    );
    assert_refused(&r, took, &["--message-file /dev/zero", "1 MiB limit"]);
    assert!(!env.path("o.jsonl").exists(), "a message was sent");
}

#[test]
fn notify_stdin_over_the_limit_is_refused() {
    let env = Env::new();
    // Endless stdin.
    let zero = std::fs::File::open("/dev/zero").unwrap();
    let (r, took) = bounded(notify_cmd(env.dir.path(), &[]), Stdio::from(zero));
    assert_refused(&r, took, &["stdin", "1 MiB limit"]);
    assert!(!env.path("o.jsonl").exists(), "a message was sent");
    // 2 MiB through a pipe.
    let mut c = notify_cmd(env.dir.path(), &[]);
    c.stdin(Stdio::piped())
        .stdout(Stdio::piped())
        .stderr(Stdio::piped());
    let start = Instant::now();
    let mut child = c.spawn().unwrap();
    let mut stdin = child.stdin.take().unwrap();
    let writer = std::thread::spawn(move || {
        let _ = stdin.write_all(&vec![b'm'; 2 * MIB]);
    });
    let out = child.wait_with_output().unwrap();
    writer.join().unwrap();
    assert_refused(&Run::from(out), start.elapsed(), &["stdin", "1 MiB limit"]);
    assert!(!env.path("o.jsonl").exists(), "a message was sent");
    assert!(!env.path("state.db").exists(), "the state was written");
}

/// Write a CSV made of `parts` (each written as is), quickly.
fn csv_file(env: &Env, name: &str, parts: &[&[u8]]) -> PathBuf {
    let p = env.path(name);
    let mut w = BufWriter::new(std::fs::File::create(&p).unwrap());
    for part in parts {
        w.write_all(part).unwrap();
    }
    w.flush().unwrap();
    p
}

fn import(env: &Env, acct: &str, f: &Path, extra: &[&str]) -> (Run, Duration) {
    let mut args = vec![
        "subscriber",
        "import",
        "--account",
        acct,
        f.to_str().unwrap(),
    ];
    args.extend_from_slice(extra);
    run_bounded(env, &args)
}

fn subscribers(env: &Env) -> i64 {
    env.count("SELECT count(*) FROM subscribers")
}

#[test]
fn csv_with_a_10_mb_name_is_refused() {
    let env = Env::new();
    let acct = env.setup_account();
    let name = vec![b'N'; 10_000_000];
    let f = csv_file(
        &env,
        "name.csv",
        &[
            b"email,name\na@x.com,Ann\nb@x.com,",
            &name,
            b"\nc@x.com,Cy\n",
        ],
    );
    for extra in [&[][..], &["--skip-invalid"][..]] {
        let (r, took) = import(&env, &acct, &f, extra);
        assert_refused(&r, took, &["name.csv: line 3", "1 MiB limit"]);
        assert_eq!(subscribers(&env), 0, "{extra:?}");
    }
}

#[test]
fn csv_with_a_50_mb_attribute_is_refused() {
    let env = Env::new();
    let acct = env.setup_account();
    let note = vec![b'A'; 50_000_000];
    let f = csv_file(
        &env,
        "attr.csv",
        &[b"email,note\na@x.com,short\nb@x.com,\"", &note, b"\"\n"],
    );
    let (r, took) = import(&env, &acct, &f, &[]);
    assert_refused(&r, took, &["attr.csv: line 3", "1 MiB limit"]);
    assert_eq!(subscribers(&env), 0);
}

#[test]
fn csv_with_a_million_columns_is_refused() {
    let env = Env::new();
    let acct = env.setup_account();
    let p = env.path("cols.csv");
    let mut w = BufWriter::new(std::fs::File::create(&p).unwrap());
    w.write_all(b"email").unwrap();
    for i in 1..1_000_000 {
        write!(w, ",c{i}").unwrap();
    }
    w.write_all(b"\na@x.com").unwrap();
    for _ in 1..1_000_000 {
        w.write_all(b",v").unwrap();
    }
    w.write_all(b"\n").unwrap();
    w.flush().unwrap();
    drop(w);
    let (r, took) = import(&env, &acct, &p, &[]);
    assert_refused(
        &r,
        took,
        &["cols.csv: line 1", "1 MiB limit", "256 columns"],
    );
    assert_eq!(subscribers(&env), 0);
}

#[test]
fn csv_header_over_the_column_limit_is_refused() {
    let env = Env::new();
    let acct = env.setup_account();
    let mut header = String::from("email");
    let mut row = String::from("a@x.com");
    for i in 1..300 {
        header.push_str(&format!(",c{i}"));
        row.push_str(",v");
    }
    let f = csv_file(
        &env,
        "wide.csv",
        &[header.as_bytes(), b"\n", row.as_bytes(), b"\n"],
    );
    let (r, took) = import(&env, &acct, &f, &[]);
    assert_refused(
        &r,
        took,
        &["wide.csv: line 1", "300 columns", "limit of 256"],
    );
    assert_eq!(subscribers(&env), 0);
    // 256 columns are fine.
    let mut header = String::from("email");
    let mut row = String::from("a@x.com");
    for i in 1..256 {
        header.push_str(&format!(",c{i}"));
        row.push_str(",v");
    }
    let f = csv_file(
        &env,
        "ok.csv",
        &[header.as_bytes(), b"\n", row.as_bytes(), b"\n"],
    );
    let (r, _) = import(&env, &acct, &f, &[]);
    assert_eq!(r.code, 0, "{}", r.stderr);
    assert_eq!(subscribers(&env), 1);
}

#[test]
fn csv_field_limits_name_the_line_and_skip_invalid_skips_the_row() {
    let env = Env::new();
    let acct = env.setup_account();
    let long_name = vec![b'N'; 2000];
    let long_note = vec![b'A'; 70_000];
    let max_note = vec![b'A'; 64 * 1024];
    let f = csv_file(
        &env,
        "fields.csv",
        &[
            b"email,name,note\na@x.com,Ann,hi\nb@x.com,",
            &long_name,
            b",x\nc@x.com,Cy,",
            &long_note,
            b"\nd@x.com,Di,",
            &max_note,
            b"\n",
        ],
    );
    let (r, took) = import(&env, &acct, &f, &[]);
    assert_refused(
        &r,
        took,
        &[
            "line 3",
            "the name is 2000 bytes",
            "1 KiB limit",
            "nothing was imported",
        ],
    );
    assert_eq!(subscribers(&env), 0);
    let (r, _) = import(&env, &acct, &f, &["--json", "--skip-invalid"]);
    assert_eq!(r.code, 0, "{}", r.stderr);
    let doc: serde_json::Value = serde_json::from_str(&r.stdout).unwrap();
    assert_eq!(doc["imported"], 2, "{doc}");
    let skipped = doc["skipped"].as_array().unwrap();
    assert_eq!(skipped.len(), 2, "{doc}");
    assert_eq!(skipped[0]["line"], 3);
    assert_eq!(skipped[1]["line"], 4);
    let reason = skipped[1]["reason"].as_str().unwrap();
    assert!(
        reason.contains("attribute \"note\" is 70000 bytes") && reason.contains("64 KiB limit"),
        "{reason}"
    );
    assert_eq!(subscribers(&env), 2);
}

#[test]
fn csv_long_column_name_is_refused() {
    let env = Env::new();
    let acct = env.setup_account();
    let col = vec![b'c'; 2000];
    let f = csv_file(&env, "h.csv", &[b"email,", &col, b"\na@x.com,v\n"]);
    let (r, took) = import(&env, &acct, &f, &[]);
    assert_refused(
        &r,
        took,
        &["h.csv: line 1", "column 2", "2000 bytes", "1 KiB limit"],
    );
    assert_eq!(subscribers(&env), 0);
}

/// The streaming reader keeps what the whole-file reader did: the byte order mark is dropped,
/// a multi-line quoted field is one row (refused now: a name may not hold a line break), and
/// errors name the row's first line.
#[test]
fn csv_streaming_keeps_bom_and_line_numbers() {
    let env = Env::new();
    let acct = env.setup_account();
    let f = csv_file(
        &env,
        "bom.csv",
        &[b"\xef\xbb\xbfEmail,name\na@x.com,\"two\nlines\"\nb@x.com,B\n"],
    );
    let (r, _) = import(&env, &acct, &f, &["--skip-invalid"]);
    assert_eq!(r.code, 0, "{}", r.stderr);
    let said = format!("{}{}", r.stdout, r.stderr);
    assert!(said.contains("line 2"), "{said}");
    assert_eq!(subscribers(&env), 1);
    let f = csv_file(
        &env,
        "bad.csv",
        &[b"email,name\nc@x.com,\"two\nlines\"\nbroken,B\n"],
    );
    let (r, _) = import(&env, &acct, &f, &[]);
    assert_eq!(r.code, 2, "{}", r.stderr);
    assert!(r.stderr.contains("line 2"), "{}", r.stderr);
    assert_eq!(subscribers(&env), 1);
    let f = csv_file(
        &env,
        "late.csv",
        &[b"email,name\nc@x.com,\"two, lines\"\nbroken,B\n"],
    );
    let (r, _) = import(&env, &acct, &f, &[]);
    assert_eq!(r.code, 2, "{}", r.stderr);
    assert!(r.stderr.contains("line 3"), "{}", r.stderr);
    assert_eq!(subscribers(&env), 1);
}
