//! The provider calls in flight: their tasks, the row and route each is for, and the outcome
//! each turns into (a provider's answer through the retry policy) when it finishes.

use super::TARGET;
use crate::provider::CallResult;
use sendonce_domain::retry::{self, Attempt, Failure, Next, Policy};
use sendonce_store::{Outcome, Record};
use std::collections::HashMap;
use std::future::Future;
use tokio::task::{Id, JoinError, JoinSet};

/// A call in flight.
pub(super) struct Flight {
    pub token: i64,
    pub attempts: i64,
    pub maybe_delivered: bool,
    /// The provider honours idempotency keys: an ambiguous outcome is retried with the key.
    pub idempotent: bool,
    /// `route_key` of the route the call went to.
    pub route: usize,
}

/// What a call task returns: its row and the provider's answer.
type Answer = (i64, CallResult);
/// A call task as it ends: its task id and answer, or how it failed.
pub(super) type Joined = std::result::Result<(Id, Answer), JoinError>;

/// Every call in flight. Its length is what bounds the rows dispatched without an outcome.
#[derive(Default)]
pub(super) struct Calls {
    tasks: JoinSet<Answer>,
    /// Which row each call task is for (to settle a task that panicked).
    task_rows: HashMap<Id, i64>,
    flights: HashMap<i64, Flight>,
    /// Calls in flight per route (`route_key`).
    per_route: HashMap<usize, usize>,
}

impl Calls {
    pub fn len(&self) -> usize {
        self.tasks.len()
    }

    pub fn is_empty(&self) -> bool {
        self.tasks.is_empty()
    }

    /// Calls in flight on one route.
    pub fn on_route(&self, route: usize) -> usize {
        self.per_route.get(&route).copied().unwrap_or(0)
    }

    /// Start the call for row `id`.
    pub fn start(
        &mut self,
        id: i64,
        flight: Flight,
        call: impl Future<Output = Answer> + Send + 'static,
    ) {
        *self.per_route.entry(flight.route).or_default() += 1;
        self.flights.insert(id, flight);
        let task = self.tasks.spawn(call);
        self.task_rows.insert(task.id(), id);
    }

    /// The next call to finish (None when none is in flight).
    pub async fn next(&mut self) -> Option<Joined> {
        self.tasks.join_next_with_id().await
    }

    /// A call that has already finished, without waiting.
    pub fn ready(&mut self) -> Option<Joined> {
        self.tasks.try_join_next_with_id()
    }

    /// One finished call task: its outcome, and its slot freed. A task that panicked (or was
    /// cancelled) is found by its task id and recorded as ambiguous, so its slot is never
    /// leaked and its row is settled like any other unknown outcome.
    pub fn finish(&mut self, joined: Joined, policy: &Policy) -> Option<Record> {
        let (id, res) = match joined {
            Ok((task, (id, res))) => {
                self.task_rows.remove(&task);
                (id, res)
            }
            Err(e) => {
                let id = self.task_rows.remove(&e.id())?;
                tracing::error!(target: TARGET, send_id = id, error = %e,
                    "a provider call task failed");
                (
                    id,
                    CallResult::Ambiguous {
                        error: format!("the call task failed: {e}"),
                    },
                )
            }
        };
        if let CallResult::AlreadyAccepted { detail } = &res {
            tracing::warn!(target: TARGET, send_id = id, %detail,
                "the provider says this key was already accepted with other content; \
                 recorded as sent and not resent");
        }
        let f = self.flights.remove(&id)?;
        if let Some(n) = self.per_route.get_mut(&f.route) {
            *n = n.saturating_sub(1);
        }
        let now = sendonce_domain::clock::now_ms();
        let outcome = outcome(res, &f, policy, now);
        // At -vv, every call that did not go through, with the provider's (secret-free) error.
        match &outcome {
            Outcome::Accepted { .. } => {}
            Outcome::Retry { error, .. } => {
                tracing::debug!(target: TARGET, send_id = id, %error, "call not sent; retrying")
            }
            Outcome::Failed { error, .. } => {
                tracing::debug!(target: TARGET, send_id = id, %error, "call failed")
            }
            Outcome::InDoubt { error } => {
                tracing::debug!(target: TARGET, send_id = id, %error, "call outcome unknown: in doubt")
            }
        }
        Some(Record {
            id,
            token: f.token,
            outcome,
        })
    }

    /// Give up on every call still in flight (the drain deadline passed): each is aborted and
    /// recorded as ambiguous, as its outcome is unknown.
    pub async fn abandon(&mut self, policy: &Policy) -> Vec<Record> {
        tracing::warn!(
            target: TARGET,
            abandoned = self.flights.len(),
            "drain deadline passed; abandoning in-flight calls"
        );
        self.tasks.abort_all();
        let now = sendonce_domain::clock::now_ms();
        let records = self
            .flights
            .drain()
            .map(|(id, f)| {
                let res = CallResult::Ambiguous {
                    error: "call abandoned at shutdown".into(),
                };
                Record {
                    id,
                    token: f.token,
                    outcome: outcome(res, &f, policy, now),
                }
            })
            .collect();
        self.per_route.clear();
        self.task_rows.clear();
        while self.tasks.join_next().await.is_some() {}
        records
    }
}

/// Turn a provider's answer into what the ledger records: acceptances and permanent refusals
/// as they are, everything else through the retry policy.
fn outcome(res: CallResult, f: &Flight, policy: &Policy, now: i64) -> Outcome {
    let (failure, error) = match res {
        CallResult::Accepted {
            provider_id,
            replay,
        } => {
            return Outcome::Accepted {
                provider_id: Some(provider_id),
                note: replay.then(|| "provider replayed the idempotency key".to_string()),
            }
        }
        CallResult::AlreadyAccepted { detail } => {
            return Outcome::Accepted {
                provider_id: None,
                note: Some(format!(
                    "provider reports the key was already accepted: {detail}"
                )),
            }
        }
        CallResult::Permanent { error, suppress } => return Outcome::Failed { error, suppress },
        CallResult::NotSent { error, retry_after } => (Failure::NotSent { retry_after }, error),
        CallResult::Ambiguous { error } => (Failure::Ambiguous, error),
    };
    let attempt = Attempt {
        attempts: f.attempts,
        maybe_delivered: f.maybe_delivered,
        idempotent: f.idempotent,
    };
    match retry::decide(failure, attempt, policy, now) {
        Next::Retry {
            at,
            maybe_delivered,
        } => Outcome::Retry {
            error,
            retry_at: at,
            maybe_delivered,
        },
        Next::GiveUp { in_doubt } => {
            let error = format!("gave up after {} attempts: {error}", f.attempts);
            if in_doubt {
                Outcome::InDoubt { error }
            } else {
                Outcome::Failed {
                    error,
                    suppress: None,
                }
            }
        }
        Next::InDoubt => Outcome::InDoubt { error },
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::worker::Config;
    use std::time::Duration;

    /// The policy as the worker applies it to a provider's answer.
    fn decide(
        result: CallResult,
        attempts: i64,
        maybe_delivered: bool,
        idempotent: bool,
        cfg: &Config,
        now: i64,
    ) -> Outcome {
        let f = Flight {
            token: 1,
            attempts,
            maybe_delivered,
            idempotent,
            route: 0,
        };
        outcome(result, &f, &cfg.retry_policy(), now)
    }

    #[test]
    fn policy() {
        let cfg = Config::default();
        let amb = || CallResult::Ambiguous {
            error: "timeout".into(),
        };
        assert!(matches!(
            decide(amb(), 1, false, false, &cfg, 0),
            Outcome::InDoubt { .. }
        ));
        assert!(matches!(
            decide(amb(), 1, false, true, &cfg, 0),
            Outcome::Retry {
                maybe_delivered: true,
                ..
            }
        ));
        let ns = |ra| CallResult::NotSent {
            error: "429".into(),
            retry_after: ra,
        };
        match decide(
            ns(Some(Duration::from_secs(7))),
            1,
            false,
            false,
            &cfg,
            1000,
        ) {
            Outcome::Retry {
                retry_at,
                maybe_delivered: false,
                ..
            } => assert_eq!(retry_at, 8000),
            o => panic!("{o:?}"),
        }
        match decide(ns(None), 3, false, false, &cfg, 0) {
            Outcome::Retry { retry_at, .. } => assert_eq!(retry_at, 4000),
            o => panic!("{o:?}"),
        }
        assert!(matches!(
            decide(ns(None), 8, false, false, &cfg, 0),
            Outcome::Failed { .. }
        ));
        assert!(matches!(
            decide(ns(None), 8, true, true, &cfg, 0),
            Outcome::InDoubt { .. }
        ));
        assert!(matches!(
            decide(
                CallResult::AlreadyAccepted {
                    detail: "409".into()
                },
                2,
                false,
                true,
                &cfg,
                0
            ),
            Outcome::Accepted {
                provider_id: None,
                ..
            }
        ));
    }

    #[test]
    fn giving_up_says_so() {
        let cfg = Config::default();
        let ns = CallResult::NotSent {
            error: "429".into(),
            retry_after: None,
        };
        match decide(ns, 8, false, false, &cfg, 0) {
            Outcome::Failed { error, .. } => assert_eq!(error, "gave up after 8 attempts: 429"),
            o => panic!("{o:?}"),
        }
    }
}
