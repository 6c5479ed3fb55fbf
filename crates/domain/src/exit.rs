//! Exit codes, decided here and nowhere else (documented in docs/campaigns.md, "Exit codes").

use crate::error::{Error, ErrorKind};

/// Everything worked.
pub const SUCCESS: i32 = 0;
/// An operational failure: database, disk, provider, a refused state transition.
pub const FAILURE: i32 = 1;
/// A usage error: bad flags or invalid input; nothing was written.
pub const USAGE: i32 = 2;
/// The command finished, but some sends are in doubt and need `sendonce doubts`.
pub const IN_DOUBT: i32 = 3;
/// The command finished, but some sends failed permanently.
pub const PERMANENT_FAILURE: i32 = 4;
/// Sending refused until an operator acts: the database is a copy, went back in time, or is
/// damaged (the systemd unit does not restart on it).
pub const GUARDED: i32 = 5;

/// `sendonce bounce` only: a failure the MTA should retry later (sysexits' EX_TEMPFAIL: the
/// MTA keeps the DSN queued instead of returning it).
pub const TEMPFAIL: i32 = 75;

/// The exit code of `sendonce bounce`, run by an MTA: an operational failure (database busy,
/// unavailable, disk, guarded; the command reports what the operator must configure as
/// unavailable) is `TEMPFAIL` so the DSN is delivered again once fixed; a refusal of the DSN
/// itself is `USAGE` as for any command (the MTA returns it to its postmaster); damage and
/// conflicts stay `FAILURE`.
pub fn for_mta_error(err: &Error) -> i32 {
    match err.kind {
        ErrorKind::Busy
        | ErrorKind::Unavailable
        | ErrorKind::Database
        | ErrorKind::Io
        | ErrorKind::Guarded => TEMPFAIL,
        _ => for_error(err),
    }
}

/// The exit code for an error that stopped a command.
pub fn for_error(err: &Error) -> i32 {
    match err.kind {
        ErrorKind::Invalid
        | ErrorKind::NotFound
        | ErrorKind::Unauthorized
        | ErrorKind::Forbidden
        | ErrorKind::KeyReused
        | ErrorKind::TooLarge
        | ErrorKind::Limited => USAGE,
        ErrorKind::ClosedOutput => SUCCESS,
        ErrorKind::Conflict
        | ErrorKind::Busy
        | ErrorKind::Unavailable
        | ErrorKind::Database
        | ErrorKind::Io
        | ErrorKind::Provider
        | ErrorKind::Damaged
        | ErrorKind::Internal => FAILURE,
        ErrorKind::Guarded => GUARDED,
    }
}

/// What a finished command reports about its sends.
#[derive(Debug, Default, Clone, Copy)]
pub struct Outcome {
    pub in_doubt: u64,
    pub failed: u64,
}

/// The exit code for a command that ran to its end.
pub fn for_outcome(o: Outcome) -> i32 {
    if o.in_doubt > 0 {
        IN_DOUBT
    } else if o.failed > 0 {
        PERMANENT_FAILURE
    } else {
        SUCCESS
    }
}

/// The exit code for a check that reached a verdict (`sendonce check`): a failed check is a
/// failure of the command, so scripts and CI can stop on it.
pub fn for_verdict(pass: bool) -> i32 {
    if pass {
        SUCCESS
    } else {
        FAILURE
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn an_mta_retries_what_the_operator_can_fix_and_returns_what_is_refused() {
        let code = |k| for_mta_error(&Error::new(k, "x"));
        for k in [
            ErrorKind::Busy,
            ErrorKind::Unavailable,
            ErrorKind::Database,
            ErrorKind::Io,
            ErrorKind::Guarded,
        ] {
            assert_eq!(code(k), TEMPFAIL, "{k:?}");
        }
        assert_eq!(code(ErrorKind::Unauthorized), USAGE);
        assert_eq!(code(ErrorKind::Invalid), USAGE);
        assert_eq!(code(ErrorKind::Conflict), FAILURE);
        assert_eq!(code(ErrorKind::Damaged), FAILURE);
    }
}
