//! `sendonce completions SHELL` and the hidden `sendonce manpage DIR`: what the Debian package
//! ships is generated from the real grammar, for every shell, with a page per subcommand.

use crate::common::Env;

/// Each shell's script is the shell's own kind of script and knows the subcommands and their
/// flags; nothing touches the database.
#[test]
fn completions_for_every_shell() {
    let env = Env::new();
    for (shell, marker) in [
        ("bash", "complete -F _sendonce"),
        ("zsh", "#compdef sendonce"),
        ("fish", "complete -c sendonce"),
        ("elvish", "edit:completion:arg-completer[sendonce]"),
        ("powershell", "Register-ArgumentCompleter"),
    ] {
        let r = env.run(&["completions", shell]);
        assert_eq!(r.code, 0, "completions {shell}: {}", r.stderr);
        assert!(
            r.stdout.contains(marker),
            "completions {shell} lacks {marker:?}"
        );
        for word in ["campaign", "subscriber", "serve", "doubts", "completions"] {
            assert!(
                r.stdout.contains(word),
                "completions {shell} does not know {word}"
            );
        }
        // A subcommand's own flag, not only the names.
        assert!(
            r.stdout.contains("busy-timeout"),
            "completions {shell} has no flags"
        );
        assert!(r.stderr.is_empty(), "completions {shell}: {}", r.stderr);
    }
    assert!(!env.db.exists(), "completions created a database");

    // --json keeps its promise of one JSON document: the script is inside it.
    let plain = env.ok(&["completions", "zsh"]);
    let doc: serde_json::Value = serde_json::from_str(&env.ok(&["--json", "completions", "zsh"]))
        .expect("one JSON document");
    assert_eq!(doc["shell"], "zsh");
    assert_eq!(doc["script"].as_str().map(str::trim), Some(plain.as_str()));
}

#[test]
fn bad_or_missing_shell_is_a_usage_error() {
    let env = Env::new();
    let r = env.run(&["completions", "tcsh"]);
    assert_eq!(r.code, 2, "{}", r.stderr);
    assert!(r.stdout.is_empty(), "{}", r.stdout);
    assert!(r.stderr.contains("tcsh"), "{}", r.stderr);
    assert!(
        r.stderr.contains("bash") && r.stderr.contains("powershell"),
        "the error should list the shells: {}",
        r.stderr
    );
    let r = env.run(&["completions"]);
    assert_eq!(r.code, 2, "{}", r.stderr);
    let r = env.run(&["--json", "completions", "tcsh"]);
    assert_eq!(r.code, 2, "{}", r.stderr);
    let doc: serde_json::Value = serde_json::from_str(r.stdout.trim()).expect("one JSON document");
    assert_eq!(doc["exit_code"], 2);
}

/// `sendonce.1` plus one page per visible subcommand, nested ones included, each a roff page
/// with the global flags propagated; the hidden command itself has none.
#[test]
fn manpage_writes_a_page_per_subcommand() {
    let env = Env::new();
    let dir = env.path("man/man1");
    let out = env.ok(&["--json", "manpage", dir.to_str().expect("utf-8 path")]);
    let doc: serde_json::Value = serde_json::from_str(&out).expect("JSON");
    let listed: Vec<String> = doc["pages"]
        .as_array()
        .expect("pages")
        .iter()
        .map(|p| p.as_str().expect("page name").to_string())
        .collect();
    let mut on_disk: Vec<String> = std::fs::read_dir(&dir)
        .expect("man dir")
        .map(|e| e.expect("entry").file_name().to_string_lossy().into_owned())
        .collect();
    on_disk.sort();
    assert_eq!(listed, on_disk);

    let read = |name: &str| {
        std::fs::read_to_string(dir.join(name)).unwrap_or_else(|e| panic!("{name}: {e}"))
    };
    let main = read("sendonce.1");
    assert!(
        main.lines().any(|l| l.starts_with(".TH sendonce 1")),
        "{main}"
    );
    assert!(main.contains("campaign"), "sendonce.1 lists no subcommands");
    for page in [
        "sendonce-campaign.1",
        "sendonce-campaign-create.1",
        "sendonce-serve.1",
        "sendonce-run.1",
        "sendonce-completions.1",
        "sendonce-account-add.1",
    ] {
        let text = read(page);
        assert!(text.contains(".TH"), "{page} has no .TH");
    }
    // Flags of the subcommand and, propagated, the global ones with their variables.
    let serve = read("sendonce-serve.1");
    assert!(serve.contains("worker"), "sendonce-serve.1 lacks --worker");
    assert!(
        serve.contains("SENDONCE_DB"),
        "sendonce-serve.1 lacks the global --db"
    );
    assert!(
        !on_disk.iter().any(|p| p == "sendonce-help.1"),
        "sendonce-help.1 written"
    );
    assert!(
        on_disk.iter().any(|p| p == "sendonce-manpage.1"),
        "the manpage command has its page"
    );
    assert!(on_disk.len() > 30, "only {} pages", on_disk.len());

    // The top-level help shows both: man pages for a `cargo install` come from `manpage`.
    let help = env.ok(&["--help"]);
    assert!(help.contains("completions"), "{help}");
    assert!(help.contains("manpage"), "{help}");
}

#[test]
fn manpage_into_a_file_names_the_path() {
    let env = Env::new();
    let file = env.write("not-a-dir", "x");
    let target = file.join("man1");
    let r = env.run(&["manpage", target.to_str().expect("utf-8 path")]);
    assert_eq!(r.code, 1, "{}", r.stderr);
    assert!(r.stderr.contains("not-a-dir"), "{}", r.stderr);
}
