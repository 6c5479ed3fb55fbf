//! The manual cannot drift: README, ARCHITECTURE and docs/*.md link only inside the repository
//! and every link (and anchor) resolves; each docs file lists its sections; README stays a short
//! front door; every command block is run by a named test or says why not; and every `sendonce`
//! command line in them names subcommands and flags that exist.

use clap::CommandFactory;
use std::collections::BTreeSet;
use std::path::{Path, PathBuf};

fn root() -> &'static Path {
    Path::new(env!("CARGO_MANIFEST_DIR"))
}

/// README.md, ARCHITECTURE.md and every docs/*.md, with their text.
fn pages() -> Vec<(PathBuf, String)> {
    let mut files = vec![root().join("README.md"), root().join("ARCHITECTURE.md")];
    let mut docs: Vec<PathBuf> = std::fs::read_dir(root().join("docs"))
        .expect("docs/")
        .filter_map(|e| e.ok().map(|e| e.path()))
        .filter(|p| p.extension().is_some_and(|x| x == "md"))
        .collect();
    docs.sort();
    assert!(docs.len() >= 10, "docs/ should hold the manual: {docs:?}");
    files.extend(docs);
    files
        .into_iter()
        .map(|p| {
            let text = std::fs::read_to_string(&p).unwrap_or_else(|e| panic!("{p:?}: {e}"));
            (p, text)
        })
        .collect()
}

fn name(p: &Path) -> String {
    p.strip_prefix(root()).unwrap_or(p).display().to_string()
}

/// The text outside fenced code blocks, line by line (a code line reads as an empty line).
fn prose(text: &str) -> Vec<&str> {
    let mut fence = false;
    text.lines()
        .map(|l| {
            if l.trim_start().starts_with("```") {
                fence = !fence;
                ""
            } else if fence {
                ""
            } else {
                l
            }
        })
        .collect()
}

/// GitHub's anchor for a heading: lower case, punctuation but `-` and `_` dropped, spaces to `-`.
fn slug(heading: &str) -> String {
    heading
        .trim()
        .to_lowercase()
        .chars()
        .filter(|c| c.is_alphanumeric() || *c == '-' || *c == '_' || *c == ' ')
        .map(|c| if c == ' ' { '-' } else { c })
        .collect()
}

/// (level, title) of every heading outside code blocks.
fn headings(text: &str) -> Vec<(usize, String)> {
    prose(text)
        .into_iter()
        .filter_map(|l| {
            let level = l.chars().take_while(|c| *c == '#').count();
            let title = l.get(level..)?.strip_prefix(' ')?;
            (level > 0).then(|| (level, title.to_string()))
        })
        .collect()
}

/// Every `](target)` of the prose.
fn links(text: &str) -> Vec<String> {
    let mut out = Vec::new();
    for line in prose(text) {
        let mut rest = line;
        while let Some(i) = rest.find("](") {
            rest = &rest[i + 2..];
            if let Some(end) = rest.find(')') {
                out.push(rest[..end].to_string());
                rest = &rest[end..];
            }
        }
    }
    out
}

#[test]
fn every_link_resolves_inside_the_repository() {
    let mut broken = Vec::new();
    for (path, text) in pages() {
        assert!(
            !text.contains("../shared"),
            "{} points at ../shared, outside the repository",
            name(&path)
        );
        for link in links(&text) {
            if link.starts_with("http://") || link.starts_with("https://") {
                continue;
            }
            let (file, anchor) = link.split_once('#').unwrap_or((&link, ""));
            let target = if file.is_empty() {
                path.clone()
            } else {
                path.parent().expect("a directory").join(file)
            };
            let Ok(target) = target.canonicalize() else {
                broken.push(format!("{}: {link} (no such file)", name(&path)));
                continue;
            };
            if !target.starts_with(root()) {
                broken.push(format!("{}: {link} leaves the repository", name(&path)));
                continue;
            }
            if anchor.is_empty() {
                continue;
            }
            let body = std::fs::read_to_string(&target).unwrap_or_default();
            if !headings(&body).iter().any(|(_, t)| slug(t) == anchor) {
                broken.push(format!("{}: {link} (no such heading)", name(&path)));
            }
        }
    }
    assert!(broken.is_empty(), "broken links:\n{}", broken.join("\n"));
}

#[test]
fn each_docs_page_lists_its_sections_and_readme_lists_the_pages() {
    let readme = std::fs::read_to_string(root().join("README.md")).expect("README.md");
    for (path, text) in pages() {
        if !name(&path).starts_with("docs/") {
            continue;
        }
        let file = path.file_name().expect("a name").to_string_lossy();
        assert!(
            readme.contains(&format!("](docs/{file})")),
            "README's table of the manual does not list docs/{file}"
        );
        assert!(text.starts_with("# "), "docs/{file} starts with its title");
        let sections: Vec<String> = headings(&text)
            .into_iter()
            .filter(|(l, _)| *l == 2)
            .map(|(_, t)| t)
            .collect();
        if sections.len() < 2 {
            continue;
        }
        assert!(text.contains("**Contents**"), "docs/{file} has no Contents");
        for s in sections {
            assert!(
                text.contains(&format!("](#{})", slug(&s))),
                "docs/{file}: the Contents do not list `{s}`"
            );
        }
    }
}

#[test]
fn readme_is_a_front_door() {
    let readme = std::fs::read_to_string(root().join("README.md")).expect("README.md");
    let lines = readme.lines().count();
    assert!(
        lines <= 300,
        "README.md has {lines} lines; the manual goes in docs/"
    );
}

/// A fenced block with its language, its lines, and the comment line just before it.
struct Block {
    line: usize,
    lang: String,
    body: Vec<String>,
    marker: Option<String>,
}

fn blocks(text: &str) -> Vec<Block> {
    let lines: Vec<&str> = text.lines().collect();
    let mut out = Vec::new();
    let mut open: Option<Block> = None;
    for (i, l) in lines.iter().enumerate() {
        let t = l.trim_start();
        if let Some(fence) = t.strip_prefix("```") {
            match open.take() {
                Some(b) => out.push(b),
                None => {
                    let before = (0..i)
                        .rev()
                        .map(|k| lines[k].trim())
                        .find(|l| !l.is_empty());
                    let marker = before
                        .and_then(|l| l.strip_prefix("<!--"))
                        .and_then(|l| l.strip_suffix("-->"))
                        .map(|m| m.trim().to_string());
                    open = Some(Block {
                        line: i + 1,
                        lang: fence.trim().to_string(),
                        body: Vec::new(),
                        marker,
                    })
                }
            }
        } else if let Some(b) = open.as_mut() {
            b.body.push(l.to_string());
        }
    }
    out
}

/// Lines a reader would type into a shell.
fn is_command(line: &str) -> bool {
    const STARTS: [&str; 12] = [
        "sendonce ",
        "curl ",
        "cargo ",
        "sudo ",
        "sudoedit ",
        "tests/",
        "packaging/",
        "export ",
        "SENDONCE_",
        "pytest",
        "npm ",
        "python",
    ];
    let l = line.trim_start();
    STARTS.iter().any(|s| l.starts_with(s))
}

/// Every block that holds shell commands is run by a test that reads this page
/// (`<!-- run: tests/FILE.rs -->`, or `<!-- ci: NAME -->` for the examples), or says why it is not
/// (`<!-- not run: REASON -->`).
#[test]
fn every_command_block_is_run_or_says_why_not() {
    let mut missing = Vec::new();
    for (path, text) in pages() {
        for b in blocks(&text) {
            let shell = matches!(b.lang.as_str(), "" | "sh" | "bash" | "console" | "shell");
            if !shell || !b.body.iter().any(|l| is_command(l)) {
                continue;
            }
            let here = format!("{}:{}", name(&path), b.line);
            match b.marker.as_deref() {
                Some(m) if m.starts_with("not run:") => {
                    let reason = m["not run:".len()..].trim();
                    assert!(reason.len() >= 10, "{here}: say why it is not run");
                }
                Some(m) if m.starts_with("run:") || m.starts_with("ci:") => {
                    let test = if let Some(t) = m.strip_prefix("run:") {
                        t.trim().to_string()
                    } else {
                        "tests/docs/readme_examples.rs".to_string()
                    };
                    let body = std::fs::read_to_string(root().join(&test))
                        .unwrap_or_else(|_| panic!("{here}: {test} does not exist"));
                    let file = path.file_name().expect("a name").to_string_lossy();
                    assert!(
                        body.contains(file.as_ref()),
                        "{here}: {test} does not read {file}"
                    );
                }
                _ => missing.push(here),
            }
        }
    }
    assert!(
        missing.is_empty(),
        "command blocks that are neither run by a test nor marked `<!-- not run: REASON -->`:\n{}",
        missing.join("\n")
    );
}

/// The `sendonce` command lines of a block, continuation lines joined.
fn sendonce_lines(body: &[String]) -> Vec<String> {
    let mut out: Vec<String> = Vec::new();
    // Whether the previous line was part of a `sendonce` command (its start or a continuation).
    let mut in_command = false;
    let mut continuing = false;
    for raw in body {
        let line = raw.split(" #").next().unwrap_or("");
        let t = line.trim();
        let starts_flag = t.starts_with("[--") || t.starts_with("--") || t.starts_with("(--");
        if continuing || (in_command && starts_flag && raw.starts_with(' ')) {
            if let Some(last) = out.last_mut() {
                last.push(' ');
                last.push_str(t);
            }
            in_command = true;
        } else if let Some(i) = find_sendonce(t) {
            out.push(t[i..].to_string());
            in_command = true;
        } else {
            in_command = false;
        }
        continuing = in_command && t.ends_with('\\');
    }
    out
}

/// Where the command `sendonce` starts in a line: at the start, or after variable assignments,
/// `$(`, `sudo`, `env` or `--` (not as an argument: `runuser -u sendonce`, `command -v sendonce`).
fn find_sendonce(line: &str) -> Option<usize> {
    let mut at = 0;
    let mut previous: Option<&str> = None;
    for word in line.split(' ') {
        let w = word.trim_start_matches("$(");
        let command_position = w.len() < word.len()
            || match previous {
                None => true,
                Some(p) => {
                    matches!(p, "sudo" | "env" | "--" | "&&" | ";" | "|" | "then" | "do")
                        || (p.contains('=') && !p.starts_with('-'))
                }
            };
        if w == "sendonce" && command_position {
            return Some(at + (word.len() - w.len()));
        }
        if !word.is_empty() {
            previous = Some(word);
        }
        at += word.len() + 1;
    }
    None
}

/// The long flags of a command and its ancestors' global ones.
fn flags(cmd: &clap::Command) -> BTreeSet<String> {
    let mut out: BTreeSet<String> = cmd
        .get_arguments()
        .flat_map(|a| {
            let mut names: Vec<String> = a.get_long().map(str::to_string).into_iter().collect();
            names.extend(
                a.get_all_aliases()
                    .unwrap_or_default()
                    .into_iter()
                    .map(str::to_string),
            );
            names
        })
        .collect();
    out.insert("help".into());
    out
}

/// Checks one command line against the CLI's definition; the problem, if any.
fn check_line(top: &clap::Command, line: &str) -> Option<String> {
    let words: Vec<&str> = line.split_whitespace().skip(1).collect();
    let mut cmd = top.clone();
    let mut allowed = flags(top);
    let mut i = 0;
    while let Some(w) = words.get(i) {
        // `add|list|update`: each alternative must exist; the first leads on.
        let alternatives: Vec<&str> = w.split('|').filter(|a| !a.is_empty()).collect();
        let subs: Vec<clap::Command> = alternatives
            .iter()
            .filter_map(|a| cmd.find_subcommand(a).cloned())
            .collect();
        if !subs.is_empty() && subs.len() != alternatives.len() {
            return Some(format!("`{w}` names a subcommand that does not exist"));
        }
        if subs.is_empty() {
            if cmd.has_subcommands() && cmd.get_name() != "help" && i == 0 {
                return Some(format!("`{w}` is not a subcommand"));
            }
            break;
        }
        cmd = subs[0].clone();
        allowed.extend(flags(&cmd));
        i += 1;
    }
    for w in &words[i..] {
        let w = w.trim_start_matches(['[', '(']);
        let Some(flag) = w.strip_prefix("--") else {
            continue;
        };
        let flag: String = flag
            .chars()
            .take_while(|c| c.is_ascii_alphanumeric() || *c == '-')
            .collect();
        if !flag.is_empty() && !allowed.contains(&flag) {
            return Some(format!("`--{flag}` is not a flag of `{}`", cmd.get_name()));
        }
    }
    None
}

#[test]
fn every_sendonce_command_line_names_real_commands_and_flags() {
    let top = sendonce::cli::args::Cli::command();
    let mut wrong = Vec::new();
    let mut checked = 0;
    for (path, text) in pages() {
        for b in blocks(&text) {
            if !matches!(
                b.lang.as_str(),
                "" | "sh" | "bash" | "console" | "shell" | "yaml"
            ) {
                continue;
            }
            for line in sendonce_lines(&b.body) {
                checked += 1;
                if let Some(problem) = check_line(&top, &line) {
                    wrong.push(format!("{}:{}: {problem}: {line}", name(&path), b.line));
                }
            }
        }
    }
    assert!(checked > 100, "only {checked} command lines found");
    assert!(wrong.is_empty(), "{}", wrong.join("\n"));
}

/// The checker itself: a made-up flag and a made-up subcommand are caught.
#[test]
fn the_command_line_check_catches_what_does_not_exist() {
    let top = sendonce::cli::args::Cli::command();
    assert_eq!(
        check_line(
            &top,
            "sendonce campaign approve 7 --at 2026-01-01T00:00:00Z"
        ),
        None
    );
    assert!(check_line(&top, "sendonce campaign approve 7 --when now").is_some());
    assert!(check_line(&top, "sendonce campaing list").is_some());
    assert!(check_line(&top, "sendonce suppress add|remov --account a").is_some());
    assert_eq!(
        check_line(&top, "sendonce suppress add|remove --account a x"),
        None
    );
    let joined = sendonce_lines(&[
        "sendonce run [--once] \\".to_string(),
        "     [--bogus N]".to_string(),
    ]);
    assert_eq!(joined.len(), 1, "{joined:?}");
    assert!(check_line(&top, &joined[0]).is_some(), "{joined:?}");
}
