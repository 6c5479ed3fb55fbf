//! Config discovery (--config, SENDONCE_CONFIG, ./sendonce.toml, $XDG_CONFIG_HOME, /etc), errors
//! that name the file, environment variables over the file, `config show` (sources, masked
//! secrets), `config example` (parses, equals the packaged file), and the log formats on stderr:
//! journald prefixes, JOURNAL_STREAM detection, no ANSI colours in a pipe.

use crate::common::{Env, Run};
use serde_json::Value;
use std::path::Path;
use std::process::{Command, Stdio};

/// `sendonce` in `cwd` with a controlled config environment: XDG_CONFIG_HOME and HOME under
/// the test's directory, SENDONCE_CONFIG and the setting variables removed.
fn cmd_in(env: &Env, cwd: &Path) -> Command {
    let mut c = env.cmd();
    c.current_dir(cwd)
        .env("XDG_CONFIG_HOME", env.path("xdg"))
        .env("HOME", env.path("home"))
        .env_remove("SENDONCE_CONFIG")
        .env_remove("JOURNAL_STREAM")
        .env_remove("SENDONCE_LOG_FORMAT")
        .env_remove("SENDONCE_LOG")
        .env_remove("SENDONCE_PUBLIC_URL");
    for v in [
        "SENDONCE_PROVIDER",
        "SENDONCE_LISTEN",
        "SENDONCE_WORKER",
        "SENDONCE_DRAIN",
        "SENDONCE_BODY_LIMIT",
        "SENDONCE_REQUEST_TIMEOUT",
    ] {
        c.env_remove(v);
    }
    c
}

/// `cmd_in` for the worker runs of the log tests: the public URL back.
fn worker_cmd(env: &Env) -> Command {
    let mut c = cmd_in(env, env.dir.path());
    c.env("SENDONCE_PUBLIC_URL", crate::common::TEST_PUBLIC_URL);
    c
}

fn run(c: &mut Command, args: &[&str]) -> Run {
    Run::from(c.args(args).output().expect("run sendonce"))
}

fn show(c: &mut Command) -> Value {
    let r = run(c, &["config", "show", "--json"]);
    assert_eq!(r.code, 0, "{}\n{}", r.stderr, r.stdout);
    serde_json::from_str(&r.stdout).expect("one JSON document")
}

fn setting<'a>(doc: &'a Value, key: &str) -> &'a Value {
    doc["settings"]
        .as_array()
        .unwrap()
        .iter()
        .find(|s| s["key"] == key)
        .unwrap_or_else(|| panic!("no setting {key} in {doc}"))
}

fn write(path: &Path, text: &str) {
    std::fs::create_dir_all(path.parent().unwrap()).unwrap();
    std::fs::write(path, text).unwrap();
}

#[test]
fn the_first_file_that_exists_wins_in_the_documented_order() {
    let env = Env::new();
    let cwd = env.path("work");
    let xdg = env.path("xdg/sendonce/sendonce.toml");
    let home = env.path("home/.config/sendonce/sendonce.toml");
    let named = env.path("named.toml");
    let by_env = env.path("by-env.toml");
    write(&cwd.join("sendonce.toml"), "provider = \"null\"\n");
    write(&xdg, "public_url = \"https://xdg.example\"\n");
    write(&home, "public_url = \"https://home.example\"\n");
    write(&named, "[serve]\nlisten = \"127.0.0.1:1111\"\n");
    write(&by_env, "[serve]\nlisten = \"127.0.0.1:2222\"\n");

    // ./sendonce.toml first; the candidates are listed in order.
    let d = show(&mut cmd_in(&env, &cwd));
    assert_eq!(d["config_file"], "./sendonce.toml", "{d}");
    assert_eq!(d["chosen_by"], "search");
    let cands: Vec<&str> = d["candidates"]
        .as_array()
        .unwrap()
        .iter()
        .map(|c| c["path"].as_str().unwrap())
        .collect();
    assert_eq!(
        cands,
        [
            "./sendonce.toml",
            xdg.to_str().unwrap(),
            "/etc/sendonce/sendonce.toml"
        ]
    );
    assert_eq!(setting(&d, "provider")["from"]["kind"], "file");

    // SENDONCE_CONFIG beats ./sendonce.toml; --config beats SENDONCE_CONFIG.
    let d = show(cmd_in(&env, &cwd).env("SENDONCE_CONFIG", &by_env));
    assert_eq!(d["config_file"], by_env.to_str().unwrap());
    assert_eq!(d["chosen_by"], "env");
    assert_eq!(setting(&d, "serve.listen")["value"], "127.0.0.1:2222");
    let r = run(
        cmd_in(&env, &cwd).env("SENDONCE_CONFIG", &by_env),
        &[
            "config",
            "show",
            "--json",
            "--config",
            named.to_str().unwrap(),
        ],
    );
    let d: Value = serde_json::from_str(&r.stdout).unwrap();
    assert_eq!(d["chosen_by"], "flag");
    assert_eq!(setting(&d, "serve.listen")["value"], "127.0.0.1:1111");

    // Without ./sendonce.toml: $XDG_CONFIG_HOME/sendonce/sendonce.toml.
    std::fs::remove_file(cwd.join("sendonce.toml")).unwrap();
    let d = show(&mut cmd_in(&env, &cwd));
    assert_eq!(d["config_file"], xdg.to_str().unwrap());
    assert_eq!(setting(&d, "public_url")["value"], "https://xdg.example");
    // Without XDG_CONFIG_HOME: ~/.config/sendonce/sendonce.toml.
    let d = show(cmd_in(&env, &cwd).env_remove("XDG_CONFIG_HOME"));
    assert_eq!(d["config_file"], home.to_str().unwrap());

    // The commands use the file they find: `run` takes its provider from it.
    env.ok(&["init"]);
    write(&cwd.join("sendonce.toml"), "provider = \"bogus:x\"\n");
    let r = run(&mut cmd_in(&env, &cwd), &["run", "--once"]);
    assert_ne!(r.code, 0);
    assert!(r.stderr.contains("bogus"), "{}", r.stderr);
}

#[test]
fn a_named_file_that_does_not_exist_and_a_broken_file_are_errors_naming_them() {
    let env = Env::new();
    env.ok(&["init"]);
    let cwd = env.dir.path();
    let missing = env.path("nope.toml");
    let r = run(
        &mut cmd_in(&env, cwd),
        &["run", "--once", "--config", missing.to_str().unwrap()],
    );
    assert_eq!(r.code, 2, "{}", r.stderr);
    assert!(
        r.stderr.contains(missing.to_str().unwrap()) && r.stderr.contains("does not exist"),
        "{}",
        r.stderr
    );
    let r = run(
        cmd_in(&env, cwd).env("SENDONCE_CONFIG", &missing),
        &["run", "--once"],
    );
    assert!(
        r.stderr.contains("nope.toml") && r.stderr.contains("SENDONCE_CONFIG"),
        "{}",
        r.stderr
    );

    let bad = env.path("sendonce.toml");
    write(&bad, "provider = \"null\"\n\n[serve]\nlisten = 8025\n");
    for args in [&["run", "--once"][..], &["config", "show"][..]] {
        let r = run(&mut cmd_in(&env, cwd), args);
        assert_eq!(r.code, 2, "{args:?}: {}", r.stderr);
        assert!(
            r.stderr.contains("./sendonce.toml") && r.stderr.contains("line 4"),
            "{args:?}: {}",
            r.stderr
        );
        assert_eq!(r.stderr.trim().lines().count(), 1, "one line: {}", r.stderr);
    }
}

#[test]
fn environment_variables_win_over_the_file_and_the_file_over_defaults() {
    let env = Env::new();
    let cwd = env.dir.path();
    let db = env.path("from-file.db");
    write(
        &env.path("sendonce.toml"),
        &format!(
            "db = \"{}\"\nprovider = \"null\"\n[serve]\nlisten = \"127.0.0.1:1\"\ndrain = \"5s\"\n",
            db.display()
        ),
    );
    // `db` in the file is the default of --db: init creates it there (Env::cmd passes --db,
    // so the command is built by hand).
    let mut c = Command::new(crate::common::BIN);
    c.current_dir(cwd)
        .env("XDG_CONFIG_HOME", env.path("xdg"))
        .env_remove("SENDONCE_DB")
        .env_remove("SENDONCE_CONFIG");
    let r = run(&mut c, &["init"]);
    assert_eq!(r.code, 0, "{}", r.stderr);
    assert!(db.exists(), "init used the file's db: {}", r.stdout);
    let bare = |db_env: Option<&Path>| {
        let mut c = Command::new(crate::common::BIN);
        c.current_dir(cwd)
            .env("XDG_CONFIG_HOME", env.path("xdg"))
            .env_remove("SENDONCE_DB")
            .env_remove("SENDONCE_CONFIG")
            .env_remove("SENDONCE_DRAIN")
            .env_remove("SENDONCE_REQUEST_TIMEOUT")
            .env("SENDONCE_LISTEN", "127.0.0.1:9999")
            .env("SENDONCE_WORKER", "yes");
        if let Some(p) = db_env {
            c.env("SENDONCE_DB", p);
        }
        c
    };
    let d = show(&mut bare(None));
    assert_eq!(setting(&d, "db")["from"]["kind"], "file");
    assert_eq!(setting(&d, "db")["value"], db.to_str().unwrap());
    assert_eq!(setting(&d, "serve.listen")["value"], "127.0.0.1:9999");
    assert_eq!(
        setting(&d, "serve.listen")["from"],
        serde_json::json!({"kind": "env", "name": "SENDONCE_LISTEN"})
    );
    assert_eq!(
        setting(&d, "serve.worker")["from"]["name"],
        "SENDONCE_WORKER"
    );
    assert_eq!(setting(&d, "serve.drain")["value"], "5s");
    assert_eq!(setting(&d, "serve.drain")["from"]["kind"], "file");
    assert_eq!(setting(&d, "serve.request_timeout")["value"], "60s");
    assert_eq!(
        setting(&d, "serve.request_timeout")["from"]["kind"],
        "default"
    );
    // SENDONCE_DB beats the file; --db beats SENDONCE_DB.
    let other = env.path("env.db");
    let d = show(&mut bare(Some(&other)));
    assert_eq!(setting(&d, "db")["value"], other.to_str().unwrap());
    assert_eq!(setting(&d, "db")["from"]["name"], "SENDONCE_DB");
    let r = run(
        &mut bare(Some(&other)),
        &["--db", "/x/flag.db", "config", "show", "--json"],
    );
    let d: Value = serde_json::from_str(&r.stdout).unwrap();
    assert_eq!(setting(&d, "db")["from"]["kind"], "flag");
    assert_eq!(setting(&d, "db")["value"], "/x/flag.db");

    // The server takes SENDONCE_LISTEN over the file's listen (127.0.0.1:1 would fail as
    // non-root, or answer on port 1).
    let mut server = std::process::Command::new(crate::common::BIN)
        .current_dir(cwd)
        .args(["--db", db.to_str().unwrap(), "serve"])
        .env("XDG_CONFIG_HOME", env.path("xdg"))
        .env_remove("SENDONCE_CONFIG")
        .env_remove("SENDONCE_WORKER")
        .env("SENDONCE_LISTEN", "127.0.0.1:0")
        .stdout(Stdio::piped())
        .stderr(Stdio::null())
        .spawn()
        .unwrap();
    let mut line = String::new();
    use std::io::BufRead;
    std::io::BufReader::new(server.stdout.take().unwrap())
        .read_line(&mut line)
        .unwrap();
    let _ = server.kill();
    let _ = server.wait();
    assert!(line.starts_with("listening on http://127.0.0.1:"), "{line}");
    assert!(!line.contains("127.0.0.1:1\n"), "{line}");
}

#[test]
fn show_masks_every_secret() {
    let env = Env::new();
    let cwd = env.dir.path();
    const CANARY: &str = "canary-3b9d-show-never-prints-me";
    write(
        &env.path("sendonce.toml"),
        "provider = \"webhook:https://hookuser:canary-3b9d-show-never-prints-me@h.example/send\"\n\
         public_url = \"https://u:p4ss@news.example\"\n\
         [[webhook]]\naccount = \"acme\"\nsource = \"resend\"\nsecret_env = \"ACME_HOOK\"\n\
         [[webhook]]\naccount = \"acme\"\nsource = \"twilio\"\nsecret_file = \"/nonexistent/t\"\n",
    );
    let with_secrets = || {
        let mut c = cmd_in(&env, cwd);
        for v in [
            "SENDONCE_SMTP_PASSWORD",
            "SENDONCE_TWILIO_AUTH_TOKEN",
            "SENDONCE_RESEND_API_KEY",
            "SENDONCE_UNSUBSCRIBE_SECRET",
            "ACME_HOOK",
        ] {
            c.env(v, CANARY);
        }
        c.env_remove("SENDONCE_POSTMARK_TOKEN");
        c
    };
    let text = run(&mut with_secrets(), &["config", "show"]);
    let json = run(&mut with_secrets(), &["config", "show", "--json"]);
    for r in [&text, &json] {
        assert_eq!(r.code, 0, "{}", r.stderr);
        assert!(!r.stdout.contains(CANARY), "{}", r.stdout);
        assert!(!r.stdout.contains("canary"), "{}", r.stdout);
        assert!(!r.stdout.contains("p4ss"), "{}", r.stdout);
        assert!(!r.stderr.contains("canary"), "{}", r.stderr);
    }
    let n = CANARY.len();
    assert!(
        text.stdout
            .contains(&format!("SENDONCE_SMTP_PASSWORD\tset ({n} chars)")),
        "{}",
        text.stdout
    );
    assert!(text.stdout.contains("SENDONCE_POSTMARK_TOKEN\tnot set"));
    assert!(text
        .stdout
        .contains(&format!("ACME_HOOK\tset ({n} chars)\twebhook 1 (resend)")));
    assert!(text
        .stdout
        .contains("/nonexistent/t\tfile missing\twebhook 2 (twilio)"));
    assert!(
        text.stdout.contains("https://***@h.example/send"),
        "{}",
        text.stdout
    );
    assert!(
        text.stdout.contains("https://***@news.example"),
        "{}",
        text.stdout
    );
    assert!(text.stdout.contains("routes: 0, webhooks: 2"));
}

#[test]
fn the_example_parses_and_is_the_packaged_conffile() {
    let env = Env::new();
    let out = env.ok(&["config", "example"]);
    sendonce::config::Config::parse(&out).expect("the example parses");
    assert!(out.contains("# provider = "), "commented: {out}");
    let packaged = std::fs::read_to_string(
        Path::new(env!("CARGO_MANIFEST_DIR")).join("packaging/debian/sendonce.toml"),
    )
    .expect("packaging/debian/sendonce.toml");
    assert_eq!(
        packaged.trim_end(),
        out,
        "packaging/debian/sendonce.toml differs from `sendonce config example`: regenerate it \
         with `sendonce config example > packaging/debian/sendonce.toml`"
    );
    // The file put where it is looked for is used as it is.
    let cwd = env.path("w");
    write(&cwd.join("sendonce.toml"), &out);
    let d = show(&mut cmd_in(&env, &cwd));
    assert_eq!(setting(&d, "serve.listen")["from"]["kind"], "file");
}

/// An account with a 3-recipient email campaign approved; `run --once --provider null` then
/// logs at info.
fn approved(env: &Env) {
    let (_, cid) = env.setup_campaign(3);
    env.ok(&["campaign", "approve", &cid]);
}

fn has_ansi(s: &str) -> bool {
    s.contains('\x1b')
}

#[test]
fn journald_format_is_prefixed_lines_without_colour_or_time() {
    let env = Env::new();
    approved(&env);
    let r = run(
        &mut worker_cmd(&env),
        &[
            "run",
            "--once",
            "--provider",
            "null",
            "-vv",
            "--log-format",
            "journald",
        ],
    );
    assert_eq!(r.code, 0, "{}", r.stderr);
    let lines: Vec<&str> = r.stderr.lines().collect();
    assert!(lines.len() >= 2, "{}", r.stderr);
    for l in &lines {
        let p = l.strip_prefix('<').and_then(|r| r.split_once('>'));
        assert!(
            matches!(p, Some(("3" | "4" | "6" | "7", _))),
            "not an sd-daemon line: {l:?}"
        );
        assert!(!has_ansi(l), "{l:?}");
        assert!(!l.contains(" INFO ") && !l.contains("DEBUG"), "{l:?}");
        // No timestamp: the journal adds its own (the human format starts with 20..-..-..T).
        assert!(!l.get(3..8).unwrap_or("").starts_with("20"), "{l:?}");
    }
    assert!(lines.iter().any(|l| l.starts_with("<6>")), "{}", r.stderr);
    assert!(
        lines.iter().any(|l| l.contains('=')),
        "fields as key=value: {}",
        r.stderr
    );
}

#[test]
fn journal_stream_naming_stderr_turns_journald_on_and_nothing_else_does() {
    use std::os::unix::fs::MetadataExt;
    let env = Env::new();
    approved(&env);
    let log = env.path("stderr.log");
    // `run` logs at info whatever happens.
    let mut c = worker_cmd(&env);
    let f = std::fs::File::create(&log).unwrap();
    let m = f.metadata().unwrap();
    let st = c
        .env("JOURNAL_STREAM", format!("{}:{}", m.dev(), m.ino()))
        .env("SENDONCE_LOG", "debug")
        .stderr(f)
        .stdout(Stdio::null())
        .args(["run", "--once", "--provider", "null"])
        .status()
        .unwrap();
    assert!(st.success());
    let matched = std::fs::read_to_string(&log).unwrap();
    assert!(!matched.is_empty(), "debug logging wrote nothing");
    assert!(
        matched.lines().all(|l| l.starts_with('<')),
        "JOURNAL_STREAM names stderr: journald lines expected:\n{matched}"
    );
    // Another file's dev:inode (stderr redirected away from the journal): human lines.
    let other = std::fs::File::create(env.path("other"))
        .unwrap()
        .metadata()
        .unwrap();
    let f = std::fs::File::create(&log).unwrap();
    let st = worker_cmd(&env)
        .env("JOURNAL_STREAM", format!("{}:{}", other.dev(), other.ino()))
        .env("SENDONCE_LOG", "debug")
        .stderr(f)
        .stdout(Stdio::null())
        .args(["run", "--once", "--provider", "null"])
        .status()
        .unwrap();
    assert!(st.success());
    let human = std::fs::read_to_string(&log).unwrap();
    assert!(!human.is_empty());
    assert!(
        human.lines().all(|l| !l.starts_with('<')),
        "JOURNAL_STREAM names another file: human lines expected:\n{human}"
    );
    assert!(!has_ansi(&human), "a file gets no colours:\n{human}");
    // An explicit --log-format wins over JOURNAL_STREAM.
    let f = std::fs::File::create(&log).unwrap();
    let m = f.metadata().unwrap();
    let st = worker_cmd(&env)
        .env("JOURNAL_STREAM", format!("{}:{}", m.dev(), m.ino()))
        .env("SENDONCE_LOG", "debug")
        .stderr(f)
        .stdout(Stdio::null())
        .args([
            "run",
            "--once",
            "--provider",
            "null",
            "--log-format",
            "json",
        ])
        .status()
        .unwrap();
    assert!(st.success());
    let json = std::fs::read_to_string(&log).unwrap();
    assert!(json.lines().all(|l| l.starts_with('{')), "{json}");
}

#[test]
fn no_colours_in_a_pipe_in_any_format() {
    let env = Env::new();
    approved(&env);
    for format in ["human", "json", "journald"] {
        let r = run(
            worker_cmd(&env).env("SENDONCE_LOG", "debug"),
            &[
                "run",
                "--once",
                "--provider",
                "null",
                "--log-format",
                format,
            ],
        );
        assert_eq!(r.code, 0, "{format}: {}", r.stderr);
        assert!(!r.stderr.is_empty(), "{format}: nothing logged");
        assert!(
            !has_ansi(&r.stderr),
            "{format}: ANSI in a pipe:\n{}",
            r.stderr
        );
    }
}
