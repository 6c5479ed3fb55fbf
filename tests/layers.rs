//! The direction of calls between the layers (ARCHITECTURE.md), checked on the source: what
//! each layer may name of the crate, and that only the SQLite backend names rusqlite.

use std::path::{Path, PathBuf};

fn sources(dir: &Path, out: &mut Vec<PathBuf>) {
    for entry in std::fs::read_dir(dir).expect("read src") {
        let path = entry.expect("dir entry").path();
        if path.is_dir() {
            sources(&path, out);
        } else if path.extension().is_some_and(|e| e == "rs") {
            out.push(path);
        }
    }
}

/// Every `(file, line)` under `src/<layer>` that mentions one of `forbidden`.
fn offences(layer: &str, forbidden: &[&str]) -> Vec<String> {
    let root = Path::new(env!("CARGO_MANIFEST_DIR"))
        .join("src")
        .join(layer);
    let mut files = Vec::new();
    sources(&root, &mut files);
    assert!(!files.is_empty(), "no sources under {}", root.display());
    let mut found = Vec::new();
    for f in files {
        let text = std::fs::read_to_string(&f).expect("read source");
        for (n, line) in text.lines().enumerate() {
            if forbidden.iter().any(|w| line.contains(w)) {
                found.push(format!("{}:{}: {}", f.display(), n + 1, line.trim()));
            }
        }
    }
    found
}

#[test]
fn the_domain_names_no_other_layer() {
    let bad = offences(
        "domain",
        &[
            "crate::store",
            "crate::provider",
            "crate::worker",
            "crate::app",
            "crate::cli",
            "crate::tools",
            "rusqlite",
            "tokio",
        ],
    );
    assert!(
        bad.is_empty(),
        "domain/ reaches outward:\n{}",
        bad.join("\n")
    );
}

#[test]
fn the_store_serves_and_calls_nothing_above_it() {
    let bad = offences(
        "store",
        &[
            "crate::app",
            "crate::worker",
            "crate::cli",
            "crate::provider",
        ],
    );
    assert!(bad.is_empty(), "store/ calls upward:\n{}", bad.join("\n"));
}

/// The PostgreSQL driver likewise stays in `src/store/postgres/`, and that backend never names
/// SQLite's.
#[test]
fn only_the_postgres_backend_names_the_postgres_driver() {
    let driver = ["tokio_postgres", "deadpool", "postgres_rustls"];
    for layer in [
        "domain",
        "app",
        "worker",
        "cli",
        "provider",
        "http",
        "store/sqlite",
    ] {
        let bad = offences(layer, &driver);
        assert!(
            bad.is_empty(),
            "{layer}/ names the PostgreSQL driver:\n{}",
            bad.join("\n")
        );
    }
    let dir = Path::new(env!("CARGO_MANIFEST_DIR")).join("src/store");
    for entry in std::fs::read_dir(&dir).expect("read src/store") {
        let path = entry.expect("dir entry").path();
        if path.is_file() {
            let text = std::fs::read_to_string(&path).expect("read");
            assert!(
                !driver.iter().any(|d| text.contains(d)),
                "{} names the PostgreSQL driver",
                path.display()
            );
        }
    }
    let bad = offences("store/postgres", &["rusqlite", "r2d2"]);
    assert!(
        bad.is_empty(),
        "store/postgres/ names SQLite:\n{}",
        bad.join("\n")
    );
}

#[test]
fn only_the_sqlite_backend_names_rusqlite() {
    for layer in ["domain", "app", "worker", "cli", "provider"] {
        let bad = offences(layer, &["rusqlite", "r2d2"]);
        assert!(bad.is_empty(), "{layer}/ names SQLite:\n{}", bad.join("\n"));
    }
    // The neutral store layer (src/store/*.rs, not sqlite/) neither.
    let dir = Path::new(env!("CARGO_MANIFEST_DIR")).join("src/store");
    for entry in std::fs::read_dir(&dir).expect("read src/store") {
        let path = entry.expect("dir entry").path();
        if path.is_file() {
            let text = std::fs::read_to_string(&path).expect("read");
            assert!(
                !text.contains("rusqlite") && !text.contains("r2d2"),
                "{} names SQLite",
                path.display()
            );
        }
    }
}

#[test]
fn use_cases_do_not_know_the_cli_and_providers_do_not_know_the_store() {
    let bad = offences("app", &["crate::cli"]);
    assert!(bad.is_empty(), "app/ reaches the CLI:\n{}", bad.join("\n"));
    let bad = offences("provider", &["crate::store", "crate::worker", "crate::app"]);
    assert!(
        bad.is_empty(),
        "provider/ reaches storage or callers:\n{}",
        bad.join("\n")
    );
}

#[test]
fn the_cli_goes_through_the_use_cases() {
    let bad = offences("cli", &["crate::worker", "crate::provider", "rusqlite"]);
    assert!(bad.is_empty(), "cli/ bypasses app/:\n{}", bad.join("\n"));
}

#[test]
fn only_the_worker_calls_providers() {
    // `send(` and `lookup(` on a provider happen in src/worker only; app and cli build
    // providers (from_spec) but never call them.
    for layer in ["app", "cli", "store"] {
        let bad = offences(layer, &[".send(&", ".lookup(&"]);
        assert!(
            bad.is_empty(),
            "{layer}/ calls a provider:\n{}",
            bad.join("\n")
        );
    }
}
