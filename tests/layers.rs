//! The direction of calls between the layers (ARCHITECTURE.md). Between crates Cargo keeps it:
//! `crate_dependencies_point_down` checks that each crate's manifest names only crates below it.
//! Inside a crate Cargo sees nothing, so the rest reads the source: the layers inside `core`
//! (app, worker, provider), the CLI above it, and which file of the store names which driver.

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

/// Every `(file, line)` under `<dir>` (from the workspace root) that mentions one of
/// `forbidden`.
fn offences(dir: &str, forbidden: &[&str]) -> Vec<String> {
    let root = Path::new(env!("CARGO_MANIFEST_DIR")).join(dir);
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

/// The crates, bottom up, and the workspace crates each may depend on (ARCHITECTURE.md).
const CRATES: &[(&str, &[&str])] = &[
    ("crates/domain", &[]),
    ("crates/store", &["sendonce-domain"]),
    ("crates/core", &["sendonce-domain", "sendonce-store"]),
    (
        "crates/http",
        &["sendonce-domain", "sendonce-store", "sendonce-core"],
    ),
    (
        "crates/fake",
        &["sendonce-domain", "sendonce-core", "sendonce-http"],
    ),
    (
        "crates/bench",
        &[
            "sendonce-domain",
            "sendonce-store",
            "sendonce-core",
            "sendonce-http",
            "sendonce-fake",
        ],
    ),
];

/// The workspace crates a manifest's `[dependencies]` names.
fn workspace_dependencies(manifest: &str) -> Vec<String> {
    let mut section = "";
    let mut out = Vec::new();
    for line in manifest.lines().map(str::trim) {
        if line.starts_with('[') {
            section = line;
        } else if section == "[dependencies]" && line.starts_with("sendonce-") {
            let name = line.split(['.', ' ', '=']).next().unwrap_or(line);
            out.push(name.to_string());
        }
    }
    out
}

#[test]
fn crate_dependencies_point_down() {
    let root = Path::new(env!("CARGO_MANIFEST_DIR"));
    for (dir, allowed) in CRATES {
        let manifest =
            std::fs::read_to_string(root.join(dir).join("Cargo.toml")).expect("read manifest");
        for dep in workspace_dependencies(&manifest) {
            assert!(
                allowed.contains(&dep.as_str()),
                "{dir} depends on {dep}, which is not below it"
            );
        }
    }
    // The database drivers are the store's (and the benchmarks', which measure them).
    for (dir, _) in CRATES {
        let manifest =
            std::fs::read_to_string(root.join(dir).join("Cargo.toml")).expect("read manifest");
        if !dir.ends_with("store") && !dir.ends_with("bench") {
            for driver in ["rusqlite", "r2d2", "tokio-postgres", "deadpool-postgres"] {
                assert!(
                    !manifest.contains(&format!("\n{driver}.")),
                    "{dir} depends on {driver}"
                );
            }
        }
    }
}

#[test]
fn inside_core_calls_go_down() {
    let bad = offences("crates/core/src/app", &["crate::cli", "sendonce_http"]);
    assert!(bad.is_empty(), "app/ reaches the CLI:\n{}", bad.join("\n"));
    let bad = offences(
        "crates/core/src/provider",
        &["sendonce_store", "crate::worker", "crate::app"],
    );
    assert!(
        bad.is_empty(),
        "provider/ reaches storage or callers:\n{}",
        bad.join("\n")
    );
    let bad = offences("crates/core/src/worker", &["crate::app"]);
    assert!(
        bad.is_empty(),
        "worker/ calls the use cases:\n{}",
        bad.join("\n")
    );
}

/// The PostgreSQL driver likewise stays in `crates/store/src/postgres/`, and that backend never names
/// SQLite's.
#[test]
fn only_the_postgres_backend_names_the_postgres_driver() {
    let driver = ["tokio_postgres", "deadpool", "postgres_rustls"];
    for layer in [
        "crates/domain/src",
        "crates/core/src",
        "crates/http/src",
        "crates/fake/src",
        "src",
        "crates/store/src/sqlite",
    ] {
        let bad = offences(layer, &driver);
        assert!(
            bad.is_empty(),
            "{layer}/ names the PostgreSQL driver:\n{}",
            bad.join("\n")
        );
    }
    let dir = Path::new(env!("CARGO_MANIFEST_DIR")).join("crates/store/src");
    for entry in std::fs::read_dir(&dir).expect("read crates/store/src") {
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
    let bad = offences("crates/store/src/postgres", &["rusqlite", "r2d2"]);
    assert!(
        bad.is_empty(),
        "store/postgres/ names SQLite:\n{}",
        bad.join("\n")
    );
}

#[test]
fn only_the_sqlite_backend_names_rusqlite() {
    for layer in [
        "crates/domain/src",
        "crates/core/src",
        "crates/http/src",
        "crates/fake/src",
        "src",
    ] {
        let bad = offences(layer, &["rusqlite", "r2d2"]);
        assert!(bad.is_empty(), "{layer}/ names SQLite:\n{}", bad.join("\n"));
    }
    // The neutral store layer (crates/store/src/*.rs, not sqlite/) neither.
    let dir = Path::new(env!("CARGO_MANIFEST_DIR")).join("crates/store/src");
    for entry in std::fs::read_dir(&dir).expect("read crates/store/src") {
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
fn the_cli_goes_through_the_use_cases() {
    let bad = offences(
        "src/cli",
        &[
            "sendonce_core::worker",
            "sendonce_core::provider",
            "rusqlite",
        ],
    );
    assert!(bad.is_empty(), "cli/ bypasses app/:\n{}", bad.join("\n"));
}

#[test]
fn only_the_worker_calls_providers() {
    // `send(` and `lookup(` on a provider happen in the worker only; app and cli build
    // providers (from_spec) but never call them.
    for layer in ["crates/core/src/app", "src/cli", "crates/store/src"] {
        let bad = offences(layer, &[".send(&", ".lookup(&"]);
        assert!(
            bad.is_empty(),
            "{layer}/ calls a provider:\n{}",
            bad.join("\n")
        );
    }
}

/// The stores lend their drivers' handles (`SqliteStore::raw_write`, `PgStore::run`) for
/// statements outside the product: only the benchmarks take them (the limit loop, the original
/// design's loop on tables of their own).
#[test]
fn only_the_benchmarks_borrow_a_stores_driver() {
    for dir in [
        "crates/domain/src",
        "crates/core/src",
        "crates/http/src",
        "crates/fake/src",
        "src",
    ] {
        let bad = offences(dir, &["raw_write(", "|pool|"]);
        assert!(
            bad.is_empty(),
            "{dir} borrows a store's driver:\n{}",
            bad.join("\n")
        );
    }
}
