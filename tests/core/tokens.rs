//! API tokens end to end: `token create` through the real binary prints a token that
//! `app::tokens::authenticate` accepts for its account and scope; the database files never hold
//! the token's text; revoking works within the account only; a changed token fails;
//! `token list` never shows a token; `last_used_at` is written at most once a minute.

use crate::common::Env;
use base64::engine::general_purpose::URL_SAFE_NO_PAD;
use base64::Engine;
use sendonce::app::tokens::{authenticate, Caller};
use sendonce::domain::token::Scope;
use sendonce::error::ErrorKind;
use sendonce::store::Store;
use serde_json::Value;
use std::sync::Arc;

/// init, accounts `acme` (1) and `other` (2).
fn setup() -> Env {
    let env = Env::new();
    assert_eq!(env.setup_account(), "1");
    assert_eq!(env.ok(&["account", "add", "other"]), "2");
    env
}

fn store(env: &Env) -> Arc<Store> {
    sendonce::store::open(
        &sendonce::store::Target::File(env.db.clone()),
        &Default::default(),
    )
    .unwrap()
}

fn json(env: &Env, args: &[&str]) -> Value {
    let mut all = vec!["--json"];
    all.extend_from_slice(args);
    serde_json::from_str(&env.ok(&all)).unwrap()
}

/// `token create --json` for `account` with `extra` flags; returns (id, token).
fn create(env: &Env, account: &str, extra: &[&str]) -> (i64, String) {
    let mut args = vec!["token", "create", "--account", account];
    args.extend_from_slice(extra);
    let v = json(env, &args);
    (
        v["id"].as_i64().unwrap(),
        v["token"].as_str().unwrap().to_string(),
    )
}

/// The error `authenticate` gives for `presented`, checked to be `Unauthorized` and not to
/// quote it.
fn refused(s: &Store, presented: &str) -> String {
    let e = authenticate(s, presented).expect_err("the token must be refused");
    assert_eq!(e.kind, ErrorKind::Unauthorized, "{}", e.message);
    let quoted = !presented.trim().is_empty() && e.message.contains(presented.trim());
    assert!(!quoted, "{}", e.message);
    e.message
}

#[test]
fn create_prints_a_token_that_authenticates_to_its_account_and_scope() {
    let env = setup();
    let r = env.run(&[
        "token",
        "create",
        "--account",
        "other",
        "--scope",
        "read",
        "--name",
        "ci",
    ]);
    assert_eq!(r.code, 0, "{}", r.stderr);
    let token = r.stdout.trim();
    assert_eq!(r.stdout, format!("{token}\n"), "the token alone on stdout");
    assert!(token.starts_with("so_") && token.len() == 46, "{token}");
    assert!(r.stderr.contains("will not be shown again"), "{}", r.stderr);
    assert!(!r.stderr.contains(token), "{}", r.stderr);
    let s = store(&env);
    let caller = authenticate(&s, token).unwrap();
    assert_eq!(caller.account_id, 2);
    assert_eq!(caller.scope, Scope::Read);
    assert!(caller.require(Scope::Read).is_ok());
    let e = caller.require(Scope::Send).unwrap_err();
    assert_eq!(e.kind, ErrorKind::Forbidden);

    // --json: the defaults (scope send, name "api") and every field of the answer.
    let v = json(&env, &["token", "create", "--account", "acme"]);
    let token = v["token"].as_str().unwrap();
    assert_eq!(v["scope"], "send");
    assert_eq!(v["name"], "api");
    assert_eq!(v["account_id"], 1);
    assert_eq!(v["prefix"], token[..9]);
    let caller = authenticate(&s, token).unwrap();
    let id = v["id"].as_i64().unwrap();
    assert_eq!(
        caller,
        Caller {
            account_id: 1,
            token_id: id,
            scope: Scope::Send
        }
    );
}

#[test]
fn the_database_holds_no_token_text() {
    let env = setup();
    let (_, token) = create(&env, "acme", &["--scope", "admin"]);
    authenticate(&store(&env), &token).unwrap();
    let body = token.strip_prefix("so_").unwrap();
    let raw = URL_SAFE_NO_PAD.decode(body).unwrap();
    let needles: [&[u8]; 4] = [
        token.as_bytes(),
        body.as_bytes(),
        &body.as_bytes()[6..],
        &raw,
    ];
    let mut looked = 0;
    for entry in std::fs::read_dir(env.dir.path()).unwrap() {
        let path = entry.unwrap().path();
        if !path
            .file_name()
            .unwrap()
            .to_string_lossy()
            .starts_with("t.db")
        {
            continue;
        }
        // The -wal and -shm files go when the pool's last connection closes, which may be
        // between the listing and the read: a file that is gone holds nothing.
        let bytes = match std::fs::read(&path) {
            Ok(b) => b,
            Err(e) if e.kind() == std::io::ErrorKind::NotFound => continue,
            Err(e) => panic!("read {}: {e}", path.display()),
        };
        looked += bytes.len();
        for needle in needles {
            assert!(
                !bytes.windows(needle.len()).any(|w| w == needle),
                "{} holds the token",
                path.display()
            );
        }
    }
    assert!(looked > 0, "the database files were read");
    // What it does hold: the hash and the prefix.
    let hash: Vec<u8> = env
        .sqlite()
        .query_row("SELECT hash FROM api_tokens", [], |r| r.get(0))
        .unwrap();
    assert_eq!(hash.len(), 32);
}

#[test]
fn revoking_works_within_the_account_only() {
    let env = setup();
    let (id, token) = create(&env, "acme", &[]);
    let s = store(&env);
    // Through account B: not found, and the token still works.
    let r = env.run(&["token", "revoke", "--account", "other", &id.to_string()]);
    assert_eq!(r.code, 2, "{}", r.stdout);
    assert!(
        r.stderr.contains(&format!("unknown token id {id}")),
        "{}",
        r.stderr
    );
    let e = sendonce::app::tokens::revoke(&s, "other", id).unwrap_err();
    assert_eq!(e.kind, ErrorKind::NotFound);
    assert_eq!(authenticate(&s, &token).unwrap().account_id, 1);

    let out = env.ok(&["token", "revoke", "--account", "acme", &id.to_string()]);
    assert_eq!(out, format!("token {id} (\"api\") revoked"));
    let message = refused(&s, &token);
    assert_eq!(message, "unknown or revoked API token");
    // A second revoke says so and keeps the first time.
    let before: i64 = env.count("SELECT revoked_at FROM api_tokens");
    let v = json(
        &env,
        &["token", "revoke", "--account", "acme", &id.to_string()],
    );
    assert_eq!(v["already_revoked"], true);
    assert_eq!(env.count("SELECT revoked_at FROM api_tokens"), before);
    refused(&s, &token);
}

#[test]
fn a_changed_or_malformed_token_fails() {
    let env = setup();
    let (_, token) = create(&env, "acme", &[]);
    let s = store(&env);
    for at in [0, 2, 3, 20, token.len() - 1] {
        let mut bytes = token.clone().into_bytes();
        bytes[at] = if bytes[at] == b'A' { b'B' } else { b'A' };
        refused(&s, &String::from_utf8(bytes).unwrap());
    }
    refused(&s, &token[..token.len() - 1]);
    refused(&s, &format!("{token}A"));
    refused(&s, &format!("Bearer {token}"));
    refused(&s, "");
    let m = refused(&s, "so_not-a-token");
    assert!(m.starts_with("malformed API token"), "{m}");
    // The real one, with the newline a file adds, still works.
    authenticate(&s, &format!("{token}\n")).unwrap();
}

#[test]
fn token_list_never_shows_a_token() {
    let env = setup();
    let (a, token_a) = create(&env, "acme", &["--name", "deploy"]);
    let (b, token_b) = create(&env, "acme", &["--scope", "read"]);
    create(&env, "other", &[]);
    env.ok(&["token", "revoke", "--account", "acme", &b.to_string()]);
    let text = env.ok(&["token", "list", "--account", "acme"]);
    let v = json(&env, &["token", "list", "--account", "acme"]);
    for token in [&token_a, &token_b] {
        assert!(!text.contains(&token[3..]), "{text}");
        assert!(!v.to_string().contains(&token[3..]), "{v}");
        assert!(text.contains(&token[..9]), "the prefix is shown: {text}");
    }
    let lines: Vec<&str> = text.lines().collect();
    assert_eq!(lines.len(), 3, "header and acme's two tokens: {text}");
    assert_eq!(
        lines[0],
        "ID\tNAME\tSCOPE\tPREFIX\tCREATED\tLAST_USED\tREVOKED"
    );
    assert!(lines[1].starts_with(&format!("{a}\tdeploy\tsend\t")));
    assert!(lines[1].ends_with("\t-\t-"), "{}", lines[1]);
    assert!(!lines[2].ends_with("\t-"), "revoked: {}", lines[2]);
    let tokens = v["tokens"].as_array().unwrap();
    assert_eq!(tokens.len(), 2);
    assert!(tokens[0].get("hash").is_none() && tokens[0].get("token").is_none());
    assert_eq!(tokens[1]["scope"], "read");
    assert!(tokens[1]["revoked_at"].is_string());
}

#[test]
fn last_used_at_is_written_at_most_once_a_minute() {
    let env = setup();
    let (id, token) = create(&env, "acme", &[]);
    let s = store(&env);
    let last_used = || -> Option<i64> {
        env.sqlite()
            .query_row(
                "SELECT last_used_at FROM api_tokens WHERE id = ?1",
                [id],
                |r| r.get(0),
            )
            .unwrap()
    };
    assert_eq!(last_used(), None);
    authenticate(&s, &token).unwrap();
    let first = last_used().expect("set by the first use");
    let v = json(&env, &["token", "list", "--account", "acme"]);
    assert!(v["tokens"][0]["last_used_at"].is_string(), "{v}");
    std::thread::sleep(std::time::Duration::from_millis(5));
    authenticate(&s, &token).unwrap();
    assert_eq!(
        last_used(),
        Some(first),
        "not written again within a minute"
    );
    // A minute later (moved back by hand), the next use writes it again.
    let old = first - 61_000;
    env.sqlite()
        .execute(
            "UPDATE api_tokens SET last_used_at = ?1 WHERE id = ?2",
            [old, id],
        )
        .unwrap();
    authenticate(&s, &token).unwrap();
    assert!(last_used().unwrap() >= first, "written again");
}
