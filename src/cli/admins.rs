//! `sendonce admin ...`: dashboard admins. The password comes from `SENDONCE_ADMIN_PASSWORD`,
//! from the first line of standard input (`--password-stdin`), or from a prompt on the terminal
//! with echo off; never from a flag (flags show in `ps`), and it is never printed.

use super::args::{AdminCmd, Cli, PasswordInput};
use super::{open, open_read_only, to_json, Output};
use sendonce_core::app::admins::{self, Admin};
use sendonce_domain::clock;
use sendonce_domain::error::{Error, Result};
use sendonce_domain::login::Password;
use std::io::{BufRead, IsTerminal, Write};

/// The environment variable a password may come from.
pub const PASSWORD_ENV: &str = "SENDONCE_ADMIN_PASSWORD";

pub(super) fn command(cli: &Cli, cmd: &AdminCmd) -> Result<Output> {
    match cmd {
        AdminCmd::Create {
            account,
            name,
            operator,
            password,
        } => {
            let password = read_password(password)?;
            let a = admins::create(&*open(cli)?, account, name, &password, *operator)?;
            let text = format!(
                "admin {} ({:?}) of account {} created, role {}; log in at /admin/ of \
                 `sendonce serve`",
                a.id, a.name, a.account_id, a.role
            );
            Ok(Output::ok(to_json(&a), text))
        }
        AdminCmd::List { account } => {
            let all = admins::list(&*open_read_only(cli)?, account.as_deref())?;
            let mut text = String::from("ID\tACCOUNT\tNAME\tROLE\tCREATED\tREMOVED");
            for a in &all.admins {
                text.push_str(&format!("\n{}", row(a)));
            }
            Ok(Output::ok(to_json(&all), text))
        }
        AdminCmd::Password { name, password } => {
            let password = read_password(password)?;
            let a = admins::set_password(&*open(cli)?, name, &password)?;
            let text = format!("admin {:?}: password changed, sessions ended", a.name);
            Ok(Output::ok(to_json(&a), text))
        }
        AdminCmd::Remove { name } => {
            let a = admins::remove(&*open(cli)?, name)?;
            Ok(Output::ok(
                to_json(&a),
                format!("admin {:?} removed, sessions ended", a.name),
            ))
        }
    }
}

fn row(a: &Admin) -> String {
    format!(
        "{}\t{}\t{}\t{}\t{}\t{}",
        a.id,
        a.account_id,
        a.name,
        a.role,
        clock::format_ms(a.created_at),
        a.removed_at
            .map_or_else(|| "-".to_string(), clock::format_ms)
    )
}

/// The password, from the first source that has one, checked against the policy.
fn read_password(input: &PasswordInput) -> Result<Password> {
    if input.password_stdin {
        let mut line = String::new();
        std::io::stdin()
            .lock()
            .read_line(&mut line)
            .map_err(|e| Error::io("cannot read the password from standard input", e))?;
        return Password::new(line.trim_end_matches(['\n', '\r']).to_string());
    }
    if let Ok(text) = std::env::var(PASSWORD_ENV) {
        return Password::new(text);
    }
    if !std::io::stdin().is_terminal() {
        return Err(Error::invalid(format!(
            "no password: set {PASSWORD_ENV}, pass --password-stdin, or run on a terminal"
        )));
    }
    let first = prompt("Password: ")?;
    let again = prompt("Again: ")?;
    if first != again {
        return Err(Error::invalid("the two passwords differ"));
    }
    Password::new(first)
}

/// One line read from the terminal with echo off (restored even when reading fails).
fn prompt(label: &str) -> Result<String> {
    let mut err = std::io::stderr();
    let _ = write!(err, "{label}");
    let _ = err.flush();
    let fd = libc::STDIN_FILENO;
    // SAFETY: termios is plain old data; tcgetattr fills it for a terminal (checked above).
    let mut old: libc::termios = unsafe { std::mem::zeroed() };
    // SAFETY: fd is standard input and `old` a valid termios to fill.
    let have = unsafe { libc::tcgetattr(fd, &mut old) } == 0;
    if have {
        let mut quiet = old;
        quiet.c_lflag &= !libc::ECHO;
        quiet.c_lflag |= libc::ECHONL;
        // SAFETY: the same fd, with a termios copied from the one it has.
        unsafe { libc::tcsetattr(fd, libc::TCSANOW, &quiet) };
    }
    let mut line = String::new();
    let read = std::io::stdin().lock().read_line(&mut line);
    if have {
        // SAFETY: restores the settings read above.
        unsafe { libc::tcsetattr(fd, libc::TCSANOW, &old) };
    }
    read.map_err(|e| Error::io("cannot read the password", e))?;
    Ok(line.trim_end_matches(['\n', '\r']).to_string())
}
