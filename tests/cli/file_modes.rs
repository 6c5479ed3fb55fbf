//! Files the program creates are its owner's alone, whatever the umask: the database and its
//! `-wal` and `-shm` (while a server holds them open), its `-watermark`, a backup, an outbox, and
//! `notify`'s state directory
//! and database. Each command runs under `umask 022`, which would give 0644 and 0755.

use crate::common::{Env, BIN};
use std::os::unix::fs::PermissionsExt;
use std::path::Path;
use std::process::{Command, Stdio};

/// `sendonce ARGS` under `umask 022`, with `vars`; required to succeed.
fn under_umask(env: &Env, args: &[&str], vars: &[(&str, &str)]) -> std::process::Output {
    let out = Command::new("sh")
        .arg("-c")
        .arg("umask 022 && exec \"$@\"")
        .arg("sh")
        .arg(BIN)
        .arg("--db")
        .arg(&env.db)
        .args(args)
        .env_remove("SENDONCE_DB")
        .env_remove("SENDONCE_PROVIDER")
        .envs(vars.iter().copied())
        .stdin(Stdio::null())
        .output()
        .expect("run sendonce under sh");
    assert!(
        out.status.success(),
        "sendonce {args:?}: {}",
        String::from_utf8_lossy(&out.stderr)
    );
    out
}

fn mode(p: &Path) -> u32 {
    std::fs::metadata(p)
        .unwrap_or_else(|e| panic!("{}: {e}", p.display()))
        .permissions()
        .mode()
        & 0o777
}

#[test]
fn the_database_its_wal_and_shm_and_an_outbox_are_owner_only() {
    let env = Env::new();
    under_umask(&env, &["init"], &[]);
    assert_eq!(mode(&env.db), 0o600, "the database");
    under_umask(&env, &["account", "add", "acme"], &[]);
    env.ok(&[
        "subscriber",
        "add",
        "--account",
        "acme",
        "--email",
        "a@example.org",
    ]);
    let body = env.write("b.txt", "Hi");
    let id = env.ok(&[
        "campaign",
        "create",
        "--account",
        "acme",
        "--name",
        "c",
        "--channel",
        "email",
        "--from",
        "n@example.org",
        "--subject",
        "s",
        "--body-file",
        body.to_str().unwrap(),
        "--transactional",
    ]);
    env.ok(&["campaign", "approve", &id]);
    let outbox = env.path("outbox.jsonl");
    let spec = format!("outbox:{}", outbox.display());
    under_umask(
        &env,
        &["run", "--once", "--tick", "20ms", "--provider", &spec],
        &[],
    );
    assert_eq!(mode(&outbox), 0o600, "the outbox");
    let watermark = env.db.with_extension("db-watermark");
    assert_eq!(mode(&watermark), 0o600, "the watermark");
    let backup = env.path("backup.db");
    under_umask(&env, &["backup", backup.to_str().unwrap()], &[]);
    assert_eq!(mode(&backup), 0o600, "a backup");

    // A server holds the pool open: the -wal and -shm exist while it runs.
    let mut child = Command::new("sh")
        .arg("-c")
        .arg("umask 022 && exec \"$@\"")
        .arg("sh")
        .arg(BIN)
        .arg("--db")
        .arg(&env.db)
        .args(["serve", "--listen", "127.0.0.1:0"])
        .env_remove("SENDONCE_PUBLIC_URL")
        .stdout(Stdio::piped())
        .stderr(Stdio::null())
        .spawn()
        .expect("spawn serve");
    let mut line = String::new();
    std::io::BufRead::read_line(
        &mut std::io::BufReader::new(child.stdout.take().unwrap()),
        &mut line,
    )
    .unwrap();
    assert!(line.contains("listening"), "{line}");
    let wal = env.db.with_extension("db-wal");
    let shm = env.db.with_extension("db-shm");
    let (w, s) = (mode(&wal), mode(&shm));
    let _ = child.kill();
    let _ = child.wait();
    assert_eq!((w, s), (0o600, 0o600), "-wal and -shm");
}

#[test]
fn notify_makes_its_state_directory_and_database_owner_only() {
    let env = Env::new();
    let state_home = env.path("state");
    let outbox = env.path("o.jsonl");
    let spec = format!("outbox:{}", outbox.display());
    under_umask(
        &env,
        &[
            "notify",
            "--to",
            "a@b.co",
            "--key",
            "k1",
            "--message",
            "done",
            "--provider",
            &spec,
        ],
        &[("XDG_STATE_HOME", state_home.to_str().unwrap())],
    );
    let dir = state_home.join("sendonce");
    assert_eq!(mode(&state_home), 0o700, "{}", state_home.display());
    assert_eq!(mode(&dir), 0o700, "{}", dir.display());
    assert_eq!(mode(&dir.join("notify.db")), 0o600);
    assert_eq!(mode(&outbox), 0o600);
}
