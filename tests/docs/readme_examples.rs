//! The manual's "Use it in your own tests" examples (docs/fake-provider.md), run as written: the pytest file with
//! `python3 -m pytest` (the built `sendonce` first on PATH), and the GitHub Actions job's `run:`
//! steps in bash, in order, with the job's env (its `uses:` steps listed and skipped).

use serde_json::Value;
use std::path::{Path, PathBuf};
use std::process::Command;

const BIN: &str = env!("CARGO_BIN_EXE_sendonce");

/// The fenced block after the line `<!-- ci: NAME -->` in docs/fake-provider.md.
fn block(name: &str) -> String {
    let readme = std::fs::read_to_string(
        Path::new(env!("CARGO_MANIFEST_DIR")).join("docs/fake-provider.md"),
    )
    .expect("read docs/fake-provider.md");
    let marker = format!("<!-- ci: {name} -->");
    let mut lines = readme.lines().skip_while(|l| l.trim() != marker).skip(1);
    let fence = lines
        .next()
        .unwrap_or_else(|| panic!("docs/fake-provider.md has no {marker}"));
    assert!(
        fence.starts_with("```"),
        "{marker} is not followed by a fence: {fence:?}"
    );
    let body: Vec<&str> = lines.take_while(|l| !l.starts_with("```")).collect();
    assert!(!body.is_empty(), "{marker}: empty block");
    body.join("\n") + "\n"
}

/// PATH with the built sendonce first (then the test venv's python3, already first).
fn path_with_sendonce() -> String {
    let bin_dir = Path::new(BIN).parent().unwrap();
    format!(
        "{}:{}",
        bin_dir.display(),
        std::env::var("PATH").unwrap_or_default()
    )
}

fn pin(package: &str) -> String {
    let req = std::fs::read_to_string(
        Path::new(env!("CARGO_MANIFEST_DIR")).join("tests/requirements.txt"),
    )
    .unwrap();
    req.lines()
        .find_map(|l| {
            l.split_whitespace()
                .next()?
                .strip_prefix(&format!("{package}=="))
                .map(str::to_string)
        })
        .unwrap_or_else(|| panic!("no {package} pin in tests/requirements.txt"))
}

#[test]
fn the_pytest_example_passes_as_written() {
    let dir = tempfile::tempdir().unwrap();
    std::fs::write(dir.path().join("test_signup.py"), block("pytest-example")).unwrap();
    let out = Command::new("python3")
        .args(["-m", "pytest", "-q", "-p", "no:cacheprovider"])
        .current_dir(dir.path())
        .env("PATH", path_with_sendonce())
        .env_remove("FAKE_READY")
        .output()
        .expect("python3 (tests/run.sh makes the venv with pytest)");
    let text = format!(
        "{}{}",
        String::from_utf8_lossy(&out.stdout),
        String::from_utf8_lossy(&out.stderr)
    );
    assert!(out.status.success(), "pytest failed:\n{text}");
    assert!(text.contains("1 passed"), "{text}");
}

/// What one run of the workflow did.
struct JobRun {
    /// (step name, ran, exit code)
    steps: Vec<(String, bool, Option<i32>)>,
    uses: Vec<String>,
    output: String,
}

/// Run the job's steps like a runner would: `uses:` skipped (listed), `run:` in
/// `bash --noprofile --norc -e`, `if: failure()` only after a failed step, `if: always()` always.
fn run_job(workspace: &Path) -> JobRun {
    let yaml = block("github-actions-example");
    let out = Command::new("python3")
        .args([
            "-c",
            "import json, sys, yaml; print(json.dumps(yaml.safe_load(sys.stdin)))",
        ])
        .stdin(std::process::Stdio::piped())
        .stdout(std::process::Stdio::piped())
        .spawn()
        .and_then(|mut c| {
            use std::io::Write;
            c.stdin.take().unwrap().write_all(yaml.as_bytes())?;
            c.wait_with_output()
        })
        .expect("python3 with PyYAML");
    assert!(
        out.status.success(),
        "PyYAML: {}",
        String::from_utf8_lossy(&out.stderr)
    );
    let wf: Value = serde_json::from_slice(&out.stdout).unwrap();
    let jobs = wf["jobs"].as_object().expect("jobs");
    assert_eq!(jobs.len(), 1, "one job");
    let job = jobs.values().next().unwrap();
    let env: Vec<(String, String)> = job["env"]
        .as_object()
        .map(|m| {
            m.iter()
                .map(|(k, v)| (k.clone(), v.as_str().unwrap_or(&v.to_string()).to_string()))
                .collect()
        })
        .unwrap_or_default();
    let mut run = JobRun {
        steps: Vec::new(),
        uses: Vec::new(),
        output: String::new(),
    };
    let mut failed = false;
    for (i, step) in job["steps"].as_array().expect("steps").iter().enumerate() {
        if let Some(u) = step["uses"].as_str() {
            run.uses.push(u.to_string());
            continue;
        }
        let name = step["name"].as_str().unwrap_or("").to_string();
        let script = step["run"]
            .as_str()
            .unwrap_or_else(|| panic!("step {i}: no run"));
        let go = match step["if"].as_str() {
            None => !failed,
            Some("failure()") => failed,
            Some("always()") => true,
            Some(other) => panic!("step {name:?}: unsupported if: {other}"),
        };
        if !go {
            run.steps.push((name, false, None));
            continue;
        }
        let mut cmd = Command::new("bash");
        cmd.args(["--noprofile", "--norc", "-e", "-c", script])
            .current_dir(workspace)
            .env("PATH", path_with_sendonce())
            .env_remove("FAKE_READY");
        for (k, v) in &env {
            cmd.env(k, v);
        }
        if let Some(m) = step["env"].as_object() {
            for (k, v) in m {
                cmd.env(k, v.as_str().unwrap_or(&v.to_string()));
            }
        }
        let out = cmd.output().expect("bash");
        run.output += &format!(
            "== {name}\n{}{}",
            String::from_utf8_lossy(&out.stdout),
            String::from_utf8_lossy(&out.stderr)
        );
        if !out.status.success() {
            failed = true;
        }
        run.steps.push((name, true, out.status.code()));
    }
    run
}

/// The background fake of a job run, if it is still alive: SIGTERM it (the test failed).
fn stop_leftover(workspace: &Path) -> bool {
    let Ok(pid) = std::fs::read_to_string(workspace.join(".sendonce-fake/pid")) else {
        return false;
    };
    let Ok(pid) = pid.trim().parse::<i32>() else {
        return false;
    };
    // SAFETY: kill(2) with signal 0 only checks; SIGTERM on the fake this job started.
    unsafe {
        if libc::kill(pid, 0) == 0 {
            libc::kill(pid, libc::SIGTERM);
            return true;
        }
    }
    false
}

fn workspace() -> (tempfile::TempDir, PathBuf) {
    let dir = tempfile::tempdir().unwrap();
    let ws = dir.path().to_path_buf();
    std::fs::write(ws.join("test_signup.py"), block("pytest-example")).unwrap();
    (dir, ws)
}

#[test]
fn the_github_actions_job_runs_as_written() {
    let (_dir, ws) = workspace();
    let run = run_job(&ws);
    let leftover = stop_leftover(&ws);
    let out = &run.output;
    assert_eq!(
        run.uses,
        [
            "actions/checkout@v4",
            "actions/checkout@v4",
            "actions/setup-python@v5"
        ],
        "only checkout and setup steps may be `uses:`"
    );
    assert!(!leftover, "the job left the fake provider running\n{out}");
    let steps: Vec<(&str, bool, Option<i32>)> = run
        .steps
        .iter()
        .map(|(n, r, c)| (n.as_str(), *r, *c))
        .collect();
    assert_eq!(
        steps,
        [
            ("Install sendonce and pytest", true, Some(0)),
            ("Start the fake provider", true, Some(0)),
            ("Run the tests", true, Some(0)),
            ("Show the fake provider's log", false, None),
            ("Stop the fake provider", true, Some(0)),
        ],
        "{out}"
    );
    assert!(out.contains("1 passed"), "{out}");
    // The tests used the job's fake (FAKE_READY), which kept its log through SIGTERM.
    let log = ws.join(".sendonce-fake/deliveries.jsonl");
    let lines = sendonce::provider::deliverylog::read_lines(&log).expect("the job's delivery log");
    assert_eq!(lines.len(), 1, "{out}");
    assert_eq!(lines[0].to, "kim@example.com");
    // The pinned pytest of the job is the one tests/requirements.txt installs.
    assert!(block("github-actions-example").contains(&format!("pytest=={}", pin("pytest"))));
}

#[test]
fn the_github_actions_job_shows_the_log_when_a_test_fails() {
    let (_dir, ws) = workspace();
    std::fs::write(
        ws.join("test_broken.py"),
        "def test_broken():\n    assert 1 == 2, 'a failing test of the app'\n",
    )
    .unwrap();
    let run = run_job(&ws);
    let leftover = stop_leftover(&ws);
    let out = &run.output;
    assert!(!leftover, "the job left the fake provider running\n{out}");
    let ran: Vec<(&str, bool)> = run.steps.iter().map(|(n, r, _)| (n.as_str(), *r)).collect();
    assert_eq!(
        ran,
        [
            ("Install sendonce and pytest", true),
            ("Start the fake provider", true),
            ("Run the tests", true),
            ("Show the fake provider's log", true),
            ("Stop the fake provider", true),
        ],
        "{out}"
    );
    assert_ne!(run.steps[2].2, Some(0), "pytest failed: {out}");
    // The log step printed the requests and the delivery of the passing test.
    let shown = out
        .split("== Show the fake provider's log\n")
        .nth(1)
        .expect("the log step's output");
    assert!(shown.contains("kim@example.com"), "{shown}");
    assert!(shown.contains("\"path\":\"/messages/wait\""), "{shown}");
}
