//! The ledger's contract, run against every storage backend through the traits only
//! (`Store`, no SQL): claims, fences, in-doubt, suppression at claim, completion and the
//! one-commit worker cycle; lists, audiences (counts, template variables, filters) and what a
//! campaign knows of one recipient. A second backend must pass these same tests.

use crate::common;
use crate::common::accepted;
use crate::common::CycleOne;
use sendonce::domain::address::Channel;
use sendonce::domain::clock::now_ms;
use sendonce::store::prelude::*;
use sendonce::store::{ClaimRequest, Claimed, OpenOptions, Outcome, Record, Store};
use std::collections::HashSet;
use std::sync::Arc;

/// One backend: a name for the failure messages and how to open a fresh, empty store.
struct Backend {
    name: &'static str,
    fresh: fn(&common::Env) -> Arc<Store>,
}

/// SQLite alone (the reference the `same_on_both` scripts' hard-coded answers are checked on).
/// PostgreSQL (issue 17) runs the ledger's part and the lists, audience, opt-in and unsubscribe
/// tests ([`ledger_backends`]).
fn backends() -> Vec<Backend> {
    vec![Backend {
        name: "sqlite (file)",
        fresh: |env| {
            let opts = OpenOptions {
                create: true,
                ..Default::default()
            };
            sendonce::store::open(&sendonce::store::Target::File(env.db.clone()), &opts)
                .expect("open a fresh SQLite store")
        },
    }]
}

/// The backends the ledger's part of the contract runs against (claims, fences, in-doubt,
/// suppression at claim, completion, the one-commit cycle): SQLite and PostgreSQL, a new
/// database on the test process's throwaway cluster (`common::pg`) for each test.
/// PostgreSQL is tier 1 (docs/testing.md): plain `cargo test` runs the contract on SQLite alone.
fn ledger_backends() -> Vec<Backend> {
    #[allow(unused_mut)]
    let mut all = backends();
    #[cfg(feature = "tier1")]
    all.push(Backend {
        name: "postgresql",
        fresh: |_env| {
            let opts = OpenOptions {
                create: true,
                ..Default::default()
            };
            let url = common::pg::shared().fresh_url();
            sendonce::store::open(
                &sendonce::store::Target::parse(std::path::Path::new(&url)),
                &opts,
            )
            .expect("open a fresh PostgreSQL store")
        },
    });
    all
}

/// A store with one campaign in `sending`, its list of `n` email subscribers
/// (`u0@x.com`…) built.
struct Fixture {
    _env: common::Env,
    backend: &'static str,
    s: Arc<Store>,
    acct: i64,
    cid: i64,
}

impl Fixture {
    fn new(b: &Backend, n: usize) -> Fixture {
        let f = Fixture::unbuilt(b, n);
        while !f.s.build_list_chunk(f.cid, 7).unwrap() {}
        f
    }

    /// As `new`, with the list not built yet.
    fn unbuilt(b: &Backend, n: usize) -> Fixture {
        let env = common::Env::new();
        let s = (b.fresh)(&env);
        let (acct, cid) = common::started_campaign(&*s, n);
        Fixture {
            _env: env,
            backend: b.name,
            s,
            acct,
            cid,
        }
    }

    fn req(&self, batch: usize, token: i64, now: i64, window: Option<i64>) -> ClaimRequest {
        ClaimRequest {
            campaign_id: self.cid,
            account_id: self.acct,
            channel: Channel::Email,
            batch,
            lease_ms: 1000,
            token,
            owner: format!("worker-{token}"),
            key_window_ms: window,
            now,
        }
    }

    fn claim(&self, batch: usize, token: i64, now: i64, window: Option<i64>) -> Claimed {
        self.s.claim(&self.req(batch, token, now, window)).unwrap()
    }

    /// How many of the campaign's rows are in `state`.
    fn count(&self, state: &str) -> u64 {
        let counts = self.s.status_counts(self.cid).unwrap().counts;
        counts.get(state).copied().unwrap_or(0)
    }

    fn status(&self) -> String {
        self.s
            .campaign(self.cid)
            .unwrap()
            .status
            .as_str()
            .to_string()
    }
}

fn keys(c: &Claimed) -> Vec<(i64, i64)> {
    c.rows.iter().map(|r| (r.id, r.token)).collect()
}

fn failed(id: i64, token: i64) -> Record {
    Record {
        id,
        token,
        outcome: Outcome::Failed {
            error: "rejected".into(),
            suppress: None,
        },
    }
}

#[test]
fn a_claim_leases_at_most_a_batch_with_its_fence_token() {
    for b in ledger_backends() {
        let f = Fixture::new(&b, 10);
        let t0 = now_ms();
        let a = f.claim(3, 41, t0, None);
        assert_eq!(a.rows.len(), 3, "{}: the batch bounds the claim", f.backend);
        assert!(a.rows.iter().all(|r| r.token == 41), "{}", f.backend);
        assert!(a.rows.iter().all(|r| !r.maybe_delivered), "{}", f.backend);
        assert_eq!((a.suppressed, a.in_doubt), (0, 0), "{}", f.backend);
        assert_eq!(
            (f.count("leased"), f.count("queued")),
            (3, 7),
            "{}",
            f.backend
        );
        // The marker needs the row's own token: a wrong one is fenced out.
        let wrong: Vec<(i64, i64)> = a.rows.iter().map(|r| (r.id, 40)).collect();
        let held = f.s.mark_dispatched(&wrong, t0, 1000).unwrap();
        assert!(
            held.is_empty(),
            "{}: a wrong token holds nothing",
            f.backend
        );
        let held = f.s.mark_dispatched(&keys(&a), t0, 1000).unwrap();
        assert_eq!(held.len(), 3, "{}", f.backend);
    }
}

#[test]
fn two_claims_never_hold_the_same_row() {
    for b in ledger_backends() {
        let f = Fixture::new(&b, 10);
        let t0 = now_ms();
        let a = f.claim(4, 1, t0, None);
        let b2 = f.claim(100, 2, t0, None);
        let c = f.claim(100, 3, t0, None);
        assert_eq!((a.rows.len(), b2.rows.len()), (4, 6), "{}", f.backend);
        assert!(c.rows.is_empty(), "{}: every row is held", f.backend);
        let ids: HashSet<i64> = a.rows.iter().chain(&b2.rows).map(|r| r.id).collect();
        assert_eq!(ids.len(), 10, "{}: no row leased twice", f.backend);
        let addrs: HashSet<&str> = a
            .rows
            .iter()
            .chain(&b2.rows)
            .map(|r| r.address.as_str())
            .collect();
        assert_eq!(addrs.len(), 10, "{}", f.backend);
    }
}

#[test]
fn a_row_is_not_claimed_before_it_is_due() {
    for b in ledger_backends() {
        let f = Fixture::new(&b, 1);
        let t0 = now_ms();
        let a = f.claim(1, 1, t0, None);
        let retry = Record {
            id: a.rows[0].id,
            token: 1,
            outcome: Outcome::Retry {
                error: "busy".into(),
                retry_at: t0 + 60_000,
                maybe_delivered: false,
            },
        };
        let st = f.s.record(&[retry], t0).unwrap();
        assert_eq!(st.retried, 1, "{}", f.backend);
        assert_eq!(f.count("queued"), 1, "{}", f.backend);
        assert_eq!(
            f.s.next_visible(f.cid).unwrap(),
            Some(t0 + 60_000),
            "{}",
            f.backend
        );
        assert!(
            f.claim(1, 2, t0 + 59_999, None).rows.is_empty(),
            "{}",
            f.backend
        );
        let due = f.claim(1, 3, t0 + 60_000, None);
        assert_eq!(due.rows.len(), 1, "{}: due at retry_at", f.backend);
        assert_eq!(due.rows[0].id, a.rows[0].id, "{}", f.backend);
    }
}

#[test]
fn a_live_lease_is_not_claimed_again_and_an_expired_one_is() {
    for b in ledger_backends() {
        let f = Fixture::new(&b, 2);
        let t0 = now_ms();
        assert_eq!(f.claim(2, 1, t0, None).rows.len(), 2, "{}", f.backend);
        // The lease (1 s) runs from when the claim took the rows: after t0, by t1.
        let t1 = now_ms();
        assert!(
            f.claim(2, 2, t0 + 999, None).rows.is_empty(),
            "{}",
            f.backend
        );
        let again = f.claim(2, 3, t1 + 1_000, None);
        assert_eq!(again.rows.len(), 2, "{}: undispatched rows", f.backend);
        assert!(again.rows.iter().all(|r| r.token == 3), "{}", f.backend);
    }
}

#[test]
fn a_stale_acceptance_is_recorded_as_a_late_confirmation() {
    for b in ledger_backends() {
        let f = Fixture::new(&b, 1);
        let t0 = now_ms();
        let a = f.claim(1, 111, t0, None);
        let id = a.rows[0].id;
        // A stalls past its lease before dispatching; B re-leases the row.
        let b2 = f.claim(1, 222, t0 + 5_000, None);
        assert_eq!(b2.rows.len(), 1, "{}", f.backend);
        // A's marker is fenced out ...
        let held = f.s.mark_dispatched(&[(id, 111)], t0 + 5_001, 1000).unwrap();
        assert!(held.is_empty(), "{}: A must not call", f.backend);
        // ... but a yes that reaches A anyway is never dropped.
        let st = f.s.record(&[accepted(id, 111)], t0 + 5_002).unwrap();
        assert_eq!((st.sent, st.late_confirmations), (0, 1), "{}", f.backend);
        assert_eq!(
            (f.count("sent"), f.count("leased")),
            (1, 0),
            "{}",
            f.backend
        );
        // The row is sent: B may not call for it either.
        let held = f.s.mark_dispatched(&[(id, 222)], t0 + 5_003, 1000).unwrap();
        assert!(held.is_empty(), "{}: B must not send it again", f.backend);
    }
}

#[test]
fn a_stale_failure_or_retry_is_fenced_out() {
    for b in ledger_backends() {
        let f = Fixture::new(&b, 2);
        let t0 = now_ms();
        let a = f.claim(2, 1, t0, None);
        let (x, y) = (a.rows[0].id, a.rows[1].id);
        let b2 = f.claim(2, 2, t0 + 5_000, None);
        assert_eq!(b2.rows.len(), 2, "{}", f.backend);
        let retry = Record {
            id: y,
            token: 1,
            outcome: Outcome::Retry {
                error: "timeout".into(),
                retry_at: t0,
                maybe_delivered: false,
            },
        };
        let st = f.s.record(&[failed(x, 1), retry], t0 + 5_001).unwrap();
        assert_eq!(st.fenced_out, 2, "{}", f.backend);
        assert_eq!((st.failed, st.retried, st.sent), (0, 0, 0), "{}", f.backend);
        assert_eq!(f.count("leased"), 2, "{}: B still holds both", f.backend);
        // The holder's outcomes count.
        let st =
            f.s.record(&[failed(x, 2), accepted(y, 2)], t0 + 5_002)
                .unwrap();
        assert_eq!(
            (st.failed, st.sent, st.fenced_out),
            (1, 1, 0),
            "{}",
            f.backend
        );
        assert_eq!(
            (f.count("failed"), f.count("sent")),
            (1, 1),
            "{}",
            f.backend
        );
    }
}

#[test]
fn an_expired_dispatched_row_goes_in_doubt_without_a_key_window() {
    for b in ledger_backends() {
        let f = Fixture::new(&b, 3);
        let t0 = now_ms();
        let a = f.claim(3, 1, t0, None);
        // The worker dies with two calls in flight.
        let held = f.s.mark_dispatched(&keys(&a)[..2], t0, 1000).unwrap();
        assert_eq!(held.len(), 2, "{}", f.backend);
        let b2 = f.claim(10, 2, t0 + 10_000, None);
        assert_eq!(b2.in_doubt, 2, "{}: dispatched rows are parked", f.backend);
        assert_eq!(b2.rows.len(), 1, "{}: the other is re-leased", f.backend);
        assert_eq!(b2.rows[0].id, a.rows[2].id, "{}", f.backend);
        assert!(!b2.rows[0].maybe_delivered, "{}", f.backend);
        assert_eq!(f.count("in_doubt"), 2, "{}", f.backend);
        // Looked up at the provider: one was delivered, the other never accepted.
        let doubt = f.s.reconcilable(f.cid, t0 + 20_000, 10).unwrap();
        assert_eq!(doubt.len(), 2, "{}", f.backend);
        assert!(f.s.settle_doubt(doubt[0].0, Some("p".into())).unwrap());
        assert!(f.s.settle_doubt(doubt[1].0, None).unwrap());
        assert!(
            !f.s.settle_doubt(doubt[1].0, None).unwrap(),
            "{}",
            f.backend
        );
        assert_eq!(
            (f.count("sent"), f.count("queued")),
            (1, 1),
            "{}",
            f.backend
        );
    }
}

#[test]
fn inside_the_key_window_an_expired_dispatched_row_is_retried_with_the_same_key() {
    for b in ledger_backends() {
        let f = Fixture::new(&b, 1);
        let t0 = now_ms();
        let window = Some(60_000);
        let a = f.claim(1, 1, t0, window);
        let row = a.rows[0].clone();
        f.s.mark_dispatched(&[(row.id, 1)], t0, 1000).unwrap();
        let b2 = f.claim(1, 2, t0 + 5_000, window);
        assert_eq!((b2.rows.len(), b2.in_doubt), (1, 0), "{}", f.backend);
        assert!(b2.rows[0].maybe_delivered, "{}: flagged", f.backend);
        assert_eq!(b2.rows[0].job_id, row.job_id, "{}: same key", f.backend);
        // Past the window (counted from the first dispatch) it is parked instead.
        f.s.mark_dispatched(&[(row.id, 2)], t0 + 5_000, 1000)
            .unwrap();
        let c = f.claim(1, 3, t0 + 61_000, window);
        assert!(c.rows.is_empty(), "{}", f.backend);
        assert_eq!(c.in_doubt, 1, "{}", f.backend);
    }
}

#[test]
fn a_suppression_committed_before_the_claim_wins() {
    for b in ledger_backends() {
        let f = Fixture::new(&b, 10);
        let t0 = now_ms();
        assert_eq!(f.claim(3, 1, t0, None).rows.len(), 3, "{}", f.backend);
        // u7 opts out after the list was built (its row is still queued).
        let added =
            f.s.suppress(f.acct, Channel::Email, "u7@x.com", "unsubscribed", "test");
        assert!(added.unwrap(), "{}", f.backend);
        let rest = f.claim(100, 2, t0, None);
        assert_eq!(rest.suppressed, 1, "{}", f.backend);
        assert_eq!(rest.rows.len(), 6, "{}", f.backend);
        assert!(
            rest.rows.iter().all(|r| r.address != "u7@x.com"),
            "{}",
            f.backend
        );
        assert_eq!(f.count("suppressed"), 1, "{}", f.backend);
    }
}

#[test]
fn a_failure_that_says_never_again_suppresses_its_address_only_under_its_lease() {
    for b in ledger_backends() {
        let f = Fixture::new(&b, 4);
        let t0 = now_ms();
        let c = f.claim(4, 1, t0, None);
        assert_eq!(c.rows.len(), 4, "{}", f.backend);
        let (hit, stale) = (&c.rows[0], &c.rows[1]);
        let never = |id, token| Record {
            id,
            token,
            outcome: Outcome::Failed {
                error: "recipient opted out".into(),
                suppress: Some("opted out".into()),
            },
        };
        // The second failure carries a token the row never had: fenced out, nothing suppressed.
        let stats =
            f.s.record(&[never(hit.id, 1), never(stale.id, 9)], t0)
                .unwrap();
        assert_eq!((stats.failed, stats.fenced_out), (1, 1), "{}", f.backend);
        assert_eq!(f.count("failed"), 1, "{}", f.backend);
        let suppressed: Vec<(String, String, String)> =
            f.s.suppressions(f.acct)
                .unwrap()
                .into_iter()
                .map(|r| (r.address, r.reason, r.source))
                .collect();
        assert_eq!(
            suppressed,
            vec![(hit.address.clone(), "opted out".into(), "provider".into())],
            "{}",
            f.backend
        );
        assert!(
            !f.s.is_suppressed(f.acct, Channel::Email, &stale.address)
                .unwrap(),
            "{}",
            f.backend
        );
    }
}

#[test]
fn a_campaign_is_sent_only_when_its_list_is_complete_and_every_row_settled() {
    for b in ledger_backends() {
        let f = Fixture::unbuilt(&b, 4);
        assert!(!f.s.build_list_chunk(f.cid, 2).unwrap(), "{}", f.backend);
        let t0 = now_ms();
        let a = f.claim(10, 1, t0, None);
        assert_eq!(a.rows.len(), 2, "{}", f.backend);
        let recs: Vec<Record> = a.rows.iter().map(|r| accepted(r.id, 1)).collect();
        f.s.record(&recs, t0).unwrap();
        assert!(
            !f.s.try_complete(f.cid, t0).unwrap(),
            "{}: list incomplete",
            f.backend
        );
        while !f.s.build_list_chunk(f.cid, 2).unwrap() {}
        // The new rows are due from when they were added.
        let t0 = now_ms();
        assert!(
            !f.s.try_complete(f.cid, t0).unwrap(),
            "{}: queued",
            f.backend
        );
        let b2 = f.claim(10, 2, t0, None);
        assert_eq!(b2.rows.len(), 2, "{}", f.backend);
        assert!(
            !f.s.try_complete(f.cid, t0).unwrap(),
            "{}: leased",
            f.backend
        );
        f.s.mark_dispatched(&keys(&b2), t0, 1000).unwrap();
        f.s.record(&[accepted(b2.rows[0].id, 2)], t0).unwrap();
        let c = f.claim(10, 3, t0 + 10_000, None);
        assert_eq!(c.in_doubt, 1, "{}", f.backend);
        assert!(
            !f.s.try_complete(f.cid, t0 + 10_000).unwrap(),
            "{}: in doubt",
            f.backend
        );
        assert_eq!(f.status(), "sending", "{}", f.backend);
        f.s.resolve_doubt(b2.rows[1].id, true).unwrap();
        assert_eq!(
            f.status(),
            "sent",
            "{}: the last settlement completes it",
            f.backend
        );
        assert_eq!(f.count("sent"), 4, "{}", f.backend);
        assert!(
            !f.s.try_complete(f.cid, t0).unwrap(),
            "{}: only once",
            f.backend
        );
    }
}

/// A turn claims across a campaign and a stream in one commit: each claim takes at most its
/// batch, claims on one route at most its slots together, all of them at most the budget (the
/// worker's free call slots), in the order asked;
/// a stream's rows bring their content, a campaign's do not; every row has its marker.
#[test]
fn one_cycle_claims_across_a_campaign_and_a_stream_within_the_budget() {
    for b in ledger_backends() {
        let f = Fixture::new(&b, 5);
        let to: Vec<String> = ["a@x.com", "b@x.com", "c@x.com"]
            .iter()
            .map(|a| a.to_string())
            .collect();
        let stream =
            f.s.prepare_notification("k", Channel::Email, Some("me@x.com"), Some("s"), "b", &to)
                .unwrap();
        let account =
            f.s.active_campaigns()
                .unwrap()
                .into_iter()
                .find(|c| c.id == stream)
                .expect("the notify stream is active")
                .account_id;
        let t0 = now_ms();
        let on_stream = |batch, token, now| ClaimRequest {
            campaign_id: stream,
            account_id: account,
            ..f.req(batch, token, now, None)
        };
        // On one route (one pool) the claims share its slots: the campaign takes both.
        let claims = [f.req(2, 7, t0, None), on_stream(2, 8, t0)];
        let (_, got) = f.s.cycle(&[], &claims, &[0, 0], 10, t0).unwrap();
        let sizes: Vec<usize> = got.iter().map(|c| c.rows.len()).collect();
        assert_eq!(sizes, [2, 0], "{}: one route's slots, shared", f.backend);
        let claims = [f.req(4, 1, t0, None), on_stream(4, 2, t0)];
        let (_, got) = f.s.cycle(&[], &claims, &[0, 1], 4, t0).unwrap();
        let sizes: Vec<usize> = got.iter().map(|c| c.rows.len()).collect();
        assert_eq!(
            sizes,
            [3, 1],
            "{}: the budget ends the stream's share",
            f.backend
        );
        assert!(
            got[0].rows.iter().all(|r| r.content.is_none()),
            "{}",
            f.backend
        );
        assert!(
            got[1].rows.iter().all(|r| r.content.is_some()),
            "{}",
            f.backend
        );
        // The next turn asks the stream first: it takes what is left of it, the campaign the
        // rest of the budget.
        let claims = [on_stream(4, 3, t0), f.req(4, 4, t0, None)];
        let (_, got) = f.s.cycle(&[], &claims, &[0, 1], 3, t0).unwrap();
        let sizes: Vec<usize> = got.iter().map(|c| c.rows.len()).collect();
        assert_eq!(sizes, [2, 0], "{}", f.backend);
        assert_eq!(f.count("leased"), 5, "{}", f.backend);
        // Every leased row carries its dispatch marker: expired, they go in doubt.
        let later = t0 + 10_000;
        let (_, after) =
            f.s.cycle(
                &[],
                &[f.req(10, 5, later, None), on_stream(10, 6, later)],
                &[0, 1],
                20,
                later,
            )
            .unwrap();
        let parked: u64 = after.iter().map(|c| c.in_doubt).sum();
        assert_eq!(parked, 8, "{}", f.backend);
    }
}

#[test]
fn one_cycle_records_outcomes_and_claims_with_dispatch_markers() {
    for b in ledger_backends() {
        let f = Fixture::new(&b, 5);
        let t0 = now_ms();
        let (st, first) =
            f.s.cycle_one(&[], Some(&f.req(2, 1, t0, None)), t0)
                .unwrap();
        assert_eq!((st.sent, first.rows.len()), (0, 2), "{}", f.backend);
        let done: Vec<Record> = first.rows.iter().map(|r| accepted(r.id, 1)).collect();
        let (st, second) =
            f.s.cycle_one(&done, Some(&f.req(2, 2, t0, None)), t0)
                .unwrap();
        assert_eq!((st.sent, second.rows.len()), (2, 2), "{}", f.backend);
        assert_eq!(
            (f.count("sent"), f.count("leased")),
            (2, 2),
            "{}",
            f.backend
        );
        // The cycle's claim wrote the dispatch markers: once the lease is lost, those rows
        // are in doubt (no key window), never silently re-sent.
        let (_, later) =
            f.s.cycle_one(&[], Some(&f.req(10, 3, t0 + 10_000, None)), t0 + 10_000)
                .unwrap();
        assert_eq!(later.in_doubt, 2, "{}", f.backend);
        assert_eq!(later.rows.len(), 1, "{}", f.backend);
        // Without a claim a cycle only records.
        let last = [accepted(later.rows[0].id, 3)];
        let (st, none) = f.s.cycle_one(&last, None, t0 + 10_001).unwrap();
        assert_eq!((st.sent, none.rows.len()), (1, 0), "{}", f.backend);
        assert_eq!(
            (f.count("sent"), f.count("in_doubt")),
            (3, 2),
            "{}",
            f.backend
        );
    }
}

// ---------------------------------------------------------------------------------------------
// Lists, audiences and recipients: the same rules on every backend.

/// An account with lists `a` and `b` and subscribers: u0 in a, u1 in a and b (its address
/// differently cased in the second join), u2 in b with city Porto, u3 in no list, u4 in a but
/// unconfirmed, u5 in a and suppressed. Returns (store, account, list a, list b).
fn lists_fixture(b: &Backend, env: &common::Env) -> (Arc<Store>, i64, i64, i64) {
    use sendonce::store::{NewList, OptIn};
    let s = (b.fresh)(env);
    let acct = s.add_account("t").unwrap();
    let list = |name: &str| {
        s.create_list(&NewList {
            account_id: acct,
            name,
            description: None,
            optin: OptIn::Single,
            public: false,
            confirm: Default::default(),
        })
        .unwrap()
    };
    let (la, lb) = (list("a"), list("b"));
    let add = |email: &str, status: &str, city: Option<&str>, lists: &[i64]| {
        let attrs: Vec<(String, String)> = city
            .map(|c| vec![("city".to_string(), c.to_string())])
            .unwrap_or_default();
        let sub = sendonce::app::import::subscriber(Some(email), None, None, Some(status), &attrs)
            .unwrap();
        s.add_subscriber(acct, &sub, lists).unwrap()
    };
    add("u0@x.com", "confirmed", Some("Lisboa"), &[la]);
    let u1 = add("u1@x.com", "confirmed", Some("Lisboa"), &[la]);
    assert_eq!(
        add("U1@X.com", "confirmed", None, &[lb]),
        u1,
        "one subscriber per address"
    );
    add("u2@x.com", "confirmed", Some("Porto"), &[lb]);
    add("u3@x.com", "confirmed", None, &[]);
    add("u4@x.com", "pending", Some("Faro"), &[la]);
    add("u5@x.com", "confirmed", Some("Faro"), &[la]);
    s.suppress(acct, Channel::Email, "u5@x.com", "test", "test")
        .unwrap();
    (s, acct, la, lb)
}

#[test]
fn lists_are_unique_per_account_and_found_by_id_or_name() {
    use sendonce::store::{NewList, OptIn};
    for b in ledger_backends() {
        let env = common::Env::new();
        let (s, acct, la, _) = lists_fixture(&b, &env);
        let again = s.create_list(&NewList {
            account_id: acct,
            name: "a",
            description: None,
            optin: OptIn::Double,
            public: false,
            confirm: Default::default(),
        });
        let e = again.expect_err(b.name);
        assert_eq!(e.kind, sendonce::error::ErrorKind::Conflict, "{}", b.name);
        assert_eq!(s.find_list(acct, "a").unwrap().id, la, "{}", b.name);
        assert_eq!(s.find_list(acct, &la.to_string()).unwrap().name, "a");
        let a = s.find_list(acct, "a").unwrap();
        assert_eq!(a.subscribed, 4, "{}: u0, u1, u4, u5", b.name);
        assert!(s.find_list(acct, "nope").is_err(), "{}", b.name);
    }
}

#[test]
fn the_audience_counts_each_address_once_and_say_why_the_others_are_left_out() {
    use sendonce::domain::segment::Filter;
    use sendonce::store::AudienceQuery;
    for b in ledger_backends() {
        let env = common::Env::new();
        let (s, acct, la, lb) = lists_fixture(&b, &env);
        let q = |lists: &[i64], filter: Option<&Filter>| {
            s.audience_counts_for(&AudienceQuery {
                account_id: acct,
                channel: Channel::Email,
                lists,
                filter,
            })
            .unwrap()
        };
        let both = q(&[la, lb], None);
        assert_eq!(both.would_receive, 3, "{}: u0, u1, u2", b.name);
        assert_eq!(both.suppressed, 1, "{}: u5", b.name);
        assert_eq!(both.unconfirmed, 1, "{}: u4", b.name);
        assert_eq!(both.duplicates, 0, "{}", b.name);
        let whole = q(&[], None);
        assert_eq!(whole.would_receive, 4, "{}: u3 too", b.name);
        let lisboa = Filter::parse("city = \"Lisboa\"").unwrap();
        let f = q(&[la, lb], Some(&lisboa));
        assert_eq!(
            (f.would_receive, f.filtered_out),
            (2, 2),
            "{}: u2, u5 out",
            b.name
        );
        // The variables the templates may print are counted over the same audience.
        let v = s
            .variable_counts_for(&AudienceQuery {
                account_id: acct,
                channel: Channel::Email,
                lists: &[lb],
                filter: None,
            })
            .unwrap();
        assert_eq!(v.total, 2, "{}: u1, u2", b.name);
        assert_eq!(v.present.get("city"), Some(&2), "{}", b.name);
        let v = s
            .variable_counts_for(&AudienceQuery {
                account_id: acct,
                channel: Channel::Email,
                lists: &[],
                filter: None,
            })
            .unwrap();
        assert_eq!(
            (v.total, v.present.get("city")),
            (5, Some(&4)),
            "{}",
            b.name
        );
    }
}

#[test]
fn a_list_campaign_builds_one_row_per_address_and_a_recipient_knows_why() {
    for b in ledger_backends() {
        let env = common::Env::new();
        let (s, acct, la, lb) = lists_fixture(&b, &env);
        let cid = s
            .create_campaign(&sendonce::store::NewCampaign {
                account_id: acct,
                name: "c",
                channel: Channel::Email,
                sender: None,
                subject: Some("s"),
                body: "b",
                html: None,
                reply_to: None,
                filter: Some("city != \"Porto\""),
                sms_footer: None,
                lists: &[la, lb],
                transactional: false,
                windows: &Default::default(),
            })
            .unwrap();
        assert_eq!(s.campaign_lists(cid).unwrap(), vec![la, lb], "{}", b.name);
        let u2 = s.find_subscriber(acct, "u2@x.com").unwrap().id;
        let r = s.recipient(cid, u2).unwrap();
        assert!(r.targeted && !r.matches_filter, "{}", b.name);
        s.approve_campaign(cid, 0).unwrap();
        assert_eq!(s.start_due_campaigns(now_ms()).unwrap(), vec![cid]);
        while !s.build_list_chunk(cid, 2).unwrap() {}
        let counts = s.status_counts(cid).unwrap();
        assert_eq!(counts.total, 3, "{}: u0, u1 (once), u5 suppressed", b.name);
        assert_eq!(counts.counts.get("suppressed"), Some(&1), "{}", b.name);
        let u1 = s.find_subscriber(acct, "u1@x.com").unwrap().id;
        let r = s.recipient(cid, u1).unwrap();
        let (job, status) = r.send.expect("u1 has a row");
        assert!(
            job.starts_with(&format!("campaign:{cid}:sub:{u1}@")),
            "{job}"
        );
        assert_eq!(status.as_str(), "queued", "{}", b.name);
        // A targeted list cannot be removed while the campaign is sending.
        let e = s.remove_list(acct, lb).expect_err(b.name);
        assert_eq!(e.kind, sendonce::error::ErrorKind::Conflict, "{}", b.name);
    }
}

// Double opt-in: the same rules on every backend.

/// A pending membership of a double opt-in list gets one confirmation however often the
/// subscriber is added; without links nothing is written; confirming moves pending to
/// subscribed once and never an unsubscribed membership; a member whose only membership is
/// pending is left out of a campaign to the whole account.
#[test]
fn double_opt_in_confirms_once_and_pending_members_get_no_campaign() {
    use sendonce::domain::links::{Keys, Links, Secret};
    use sendonce::store::{ConfirmContent, MemberKey, MemberState, NewList, OptIn};
    for b in ledger_backends() {
        let env = common::Env::new();
        let s = (b.fresh)(&env);
        let acct = s.add_account("t").unwrap();
        let list = s
            .create_list(&NewList {
                account_id: acct,
                name: "news",
                description: None,
                optin: OptIn::Double,
                public: true,
                confirm: ConfirmContent {
                    from: Some("news@example.org"),
                    ..Default::default()
                },
            })
            .unwrap();
        let links = Links::new(
            "https://x.example.org",
            Keys::new(Secret::new(b"contract-secret-0123456789".to_vec()).unwrap()),
        )
        .unwrap();
        let sub = |email: &str| {
            sendonce::app::import::subscriber(Some(email), None, None, Some("confirmed"), &[])
                .unwrap()
        };
        let e = s
            .add_subscriber_with(acct, &sub("a@x.com"), &[list], None)
            .expect_err(b.name);
        assert_eq!(e.kind, sendonce::error::ErrorKind::Invalid, "{}", b.name);
        assert!(
            s.find_subscriber(acct, "a@x.com").is_err(),
            "{}: nothing written",
            b.name
        );
        let a = s
            .add_subscriber_with(acct, &sub("a@x.com"), &[list], Some(&links))
            .unwrap();
        let again = s
            .add_subscriber_with(acct, &sub("A@x.com"), &[list], Some(&links))
            .unwrap();
        assert_eq!(again, a, "{}: one subscriber per address", b.name);
        s.add_subscriber_with(acct, &sub("b@x.com"), &[list], Some(&links))
            .unwrap();
        s.add_subscriber(acct, &sub("c@x.com"), &[]).unwrap();
        assert_eq!(s.public_list(list).unwrap().map(|l| l.id), Some(list));
        let key = |addr: &'static str| MemberKey {
            account_id: acct,
            list_id: list,
            channel: Channel::Email,
            address: addr,
        };
        let found = s.confirmation(&key("a@x.com")).unwrap().unwrap();
        assert_eq!(
            (found.list_name.as_str(), found.state),
            ("news", Some(MemberState::Pending))
        );
        let other = MemberKey {
            account_id: acct + 1,
            ..key("a@x.com")
        };
        assert!(s.confirmation(&other).unwrap().is_none(), "{}", b.name);
        let first = s.confirm(&key("a@x.com"), 1).unwrap().unwrap();
        assert_eq!(first.state, Some(MemberState::Pending), "{}", b.name);
        let again = s.confirm(&key("a@x.com"), 2).unwrap().unwrap();
        assert_eq!(again.state, Some(MemberState::Subscribed), "{}", b.name);
        assert_eq!(s.find_list(acct, "news").unwrap().subscribed, 1);
        assert_eq!(s.find_list(acct, "news").unwrap().pending, 1);

        // The whole account: a (subscribed) and c (in no list), never b (only pending).
        let counts = s
            .audience_counts_for(&sendonce::store::AudienceQuery {
                account_id: acct,
                channel: Channel::Email,
                lists: &[],
                filter: None,
            })
            .unwrap();
        assert_eq!(
            (counts.would_receive, counts.unconfirmed),
            (2, 1),
            "{}: {counts:?}",
            b.name
        );
    }
}

#[test]
fn an_unsubscribe_link_changes_memberships_and_suppressions_once_and_only_its_accounts() {
    use sendonce::error::ErrorKind;
    use sendonce::store::{NewList, OptIn, UnsubscribeRequest};
    for b in ledger_backends() {
        let env = common::Env::new();
        let (s, acct, la, lb) = lists_fixture(&b, &env);
        let n = b.name;
        let state = |lists: &[i64]| s.link_state(acct, Channel::Email, "u1@x.com", lists);
        let st = state(&[la, lb]).unwrap();
        let statuses: Vec<Option<&str>> = st.lists.iter().map(|l| l.status.as_deref()).collect();
        assert_eq!(statuses, vec![Some("subscribed"); 2], "{n}");
        assert!(!st.suppressed, "{n}");
        fn req(account_id: i64, lists: &[i64], everything: bool) -> UnsubscribeRequest<'_> {
            UnsubscribeRequest {
                account_id,
                channel: Channel::Email,
                address: "u1@x.com",
                lists,
                everything,
                source: "unsubscribe-link",
            }
        }
        let only_a = [la];
        let c = s.unsubscribe(&req(acct, &only_a, false)).unwrap();
        assert_eq!((c.memberships, c.suppressed), (1, false), "{n}");
        let c = s.unsubscribe(&req(acct, &only_a, false)).unwrap();
        assert_eq!((c.memberships, c.suppressed), (0, false), "{n}: idempotent");
        let st = state(&[la, lb]).unwrap();
        let statuses: Vec<Option<&str>> = st.lists.iter().map(|l| l.status.as_deref()).collect();
        assert_eq!(
            statuses,
            vec![Some("unsubscribed"), Some("subscribed")],
            "{n}"
        );
        // Everything: the suppression and the remaining membership, once.
        let c = s.unsubscribe(&req(acct, &[], true)).unwrap();
        assert_eq!((c.memberships, c.suppressed), (1, true), "{n}");
        let c = s.unsubscribe(&req(acct, &[], true)).unwrap();
        assert_eq!((c.memberships, c.suppressed), (0, false), "{n}");
        let sup = s.suppressions(acct).unwrap();
        assert!(
            sup.iter().any(|x| x.address == "u1@x.com"
                && x.reason == "unsubscribed"
                && x.source == "unsubscribe-link"),
            "{n}"
        );
        // Another account's list, or no such account: refused, nothing written.
        let other = s.add_account("other").unwrap();
        let theirs = s
            .create_list(&NewList {
                account_id: other,
                name: "theirs",
                description: None,
                optin: OptIn::Single,
                public: false,
                confirm: Default::default(),
            })
            .unwrap();
        let foreign = [theirs];
        assert_eq!(
            state(&foreign).unwrap_err().kind,
            ErrorKind::NotFound,
            "{n}"
        );
        let mut r = req(acct, &foreign, true);
        r.address = "u2@x.com";
        assert_eq!(
            s.unsubscribe(&r).unwrap_err().kind,
            ErrorKind::NotFound,
            "{n}"
        );
        r.account_id = 999_999;
        r.lists = &[];
        assert_eq!(
            s.unsubscribe(&r).unwrap_err().kind,
            ErrorKind::NotFound,
            "{n}"
        );
        assert!(
            !s.suppressions(acct)
                .unwrap()
                .iter()
                .any(|x| x.address == "u2@x.com"),
            "{n}"
        );
        // A removed list is left out (its members are gone), not refused.
        let gone = s
            .create_list(&NewList {
                account_id: acct,
                name: "gone",
                description: None,
                optin: OptIn::Single,
                public: false,
                confirm: Default::default(),
            })
            .unwrap();
        s.remove_list(acct, gone).unwrap();
        assert!(state(&[gone]).unwrap().lists.is_empty(), "{n}");
    }
}

/// A list unsubscribe withdraws the subscriber's rows still queued in the account's list
/// campaigns that no longer reach it through any of their lists; a row that still reaches it
/// through another list stays queued.
#[test]
fn a_list_unsubscribe_withdraws_rows_still_queued() {
    use sendonce::store::UnsubscribeRequest;
    for b in backends() {
        let env = common::Env::new();
        let (s, acct, la, lb) = lists_fixture(&b, &env);
        let n = b.name;
        let lists = [la, lb];
        let cid = s
            .create_campaign(&sendonce::store::NewCampaign {
                account_id: acct,
                name: "c",
                channel: Channel::Email,
                sender: None,
                subject: Some("s"),
                body: "b",
                html: None,
                reply_to: None,
                filter: None,
                sms_footer: None,
                lists: &lists,
                transactional: false,
                windows: &Default::default(),
            })
            .unwrap();
        s.approve_campaign(cid, 0).unwrap();
        s.start_due_campaigns(sendonce::domain::clock::now_ms())
            .unwrap();
        while !s.build_list_chunk(cid, 1000).unwrap() {}
        let queued = |s: &Arc<Store>| {
            s.status_counts(cid)
                .unwrap()
                .counts
                .get("queued")
                .copied()
                .unwrap_or(0)
        };
        // u0 (a), u1 (a and b), u2 (b); u4 pending, u5 suppressed.
        assert_eq!(queued(&s), 3, "{n}");
        let unsub = |addr: &str, lists: &[i64]| {
            s.unsubscribe(&UnsubscribeRequest {
                account_id: acct,
                channel: Channel::Email,
                address: addr,
                lists,
                everything: false,
                source: "unsubscribe-link",
            })
            .unwrap()
        };
        unsub("u1@x.com", &[la]);
        assert_eq!(queued(&s), 3, "{n}: u1 is still reached through b");
        unsub("u1@x.com", &[lb]);
        assert_eq!(queued(&s), 2, "{n}: u1 withdrawn");
        unsub("u0@x.com", &[la]);
        assert_eq!(queued(&s), 1, "{n}: u0 withdrawn");
        let report = s.report_page(cid, 0, 100).unwrap();
        let u0 = report.iter().find(|r| r.address == "u0@x.com").unwrap();
        assert_eq!(u0.status.as_str(), "suppressed", "{n}");

        // u2 signs up to a double opt-in list; its confirmation (a hidden campaign that targets
        // that list, where u2 is only pending) is not withdrawn by leaving list b.
        use sendonce::domain::links::{Keys, Links, Secret};
        use sendonce::store::{ConfirmContent, NewList, OptIn};
        let d = s
            .create_list(&NewList {
                account_id: acct,
                name: "d",
                description: None,
                optin: OptIn::Double,
                public: false,
                confirm: ConfirmContent {
                    from: Some("news@example.org"),
                    ..Default::default()
                },
            })
            .unwrap();
        let links = Links::new(
            "https://x.example.org",
            Keys::new(Secret::new(b"contract-secret-0123456789".to_vec()).unwrap()),
        )
        .unwrap();
        let u2 =
            sendonce::app::import::subscriber(Some("u2@x.com"), None, None, None, &[]).unwrap();
        s.add_subscriber_with(acct, &u2, &[d], Some(&links))
            .unwrap();
        let confirmations = || {
            env.sqlite()
                .query_row(
                    "SELECT count(*) FROM sends WHERE job_id LIKE 'confirm:%' AND status = 'queued'",
                    [],
                    |r| r.get::<_, i64>(0),
                )
                .unwrap()
        };
        assert_eq!(confirmations(), 1, "{n}");
        unsub("u2@x.com", &[lb]);
        assert_eq!(queued(&s), 0, "{n}: u2's campaign row withdrawn");
        assert_eq!(
            confirmations(),
            1,
            "{n}: the confirmation for d stays queued"
        );
    }
}

// ---- Directory, Suppressions, Tokens, RateLimits: the same script on every backend ----------
//
// Each test runs one script of calls on SQLite and on PostgreSQL and compares what they
// answered (rows without their wall-clock times, errors as kind and message): a port that
// differs from SQLite in an answer, an error or an order fails here.

/// An answer or an error, as text.
fn said<T: std::fmt::Debug>(r: sendonce::error::Result<T>) -> String {
    match r {
        Ok(v) => format!("ok {v:?}"),
        Err(e) => format!("err {:?}: {}", e.kind, e.message),
    }
}

/// Run `script` on SQLite and PostgreSQL and require the same transcript.
fn same_on_both(script: fn(&Store) -> Vec<String>) {
    let mut transcripts: Vec<(&str, Vec<String>)> = Vec::new();
    for b in ledger_backends() {
        let env = common::Env::new();
        let s = (b.fresh)(&env);
        transcripts.push((b.name, script(&s)));
    }
    let (first, want) = &transcripts[0];
    for (name, got) in &transcripts[1..] {
        for (i, (w, g)) in want.iter().zip(got).enumerate() {
            assert_eq!(w, g, "step {i}: {first} said the first, {name} the second");
        }
        assert_eq!(want.len(), got.len(), "{first} vs {name}");
    }
}

fn subscriber_text(r: &sendonce::store::SubscriberRow) -> String {
    format!(
        "#{} acct {} {:?} {:?} {:?} {} {}",
        r.id, r.account_id, r.email, r.phone, r.name, r.status, r.attrs
    )
}

#[test]
fn the_directory_answers_the_same_on_every_backend() {
    use sendonce::domain::model::CampaignStatus;
    use sendonce::store::SubscriberChanges;
    same_on_both(|s| {
        let mut t = Vec::new();
        let (acct, _cid) = common::started_campaign(s, 3);
        let other = s.add_account("other").unwrap();
        for key in ["t", " t ", &acct.to_string(), "other", "nope", "99", "T"] {
            t.push(said(s.resolve_account(key)));
        }
        t.push(said(s.account_id_by_name("other")));
        t.push(said(s.account_id_by_name("nope")));
        assert_eq!(s.account_count().unwrap(), 2);
        assert_eq!(s.account_name(other).unwrap(), "other");
        t.push(said(s.account_count()));
        for id in [acct, other, 99] {
            t.push(said(s.account_name(id)));
        }
        let accounts = |t: &mut Vec<String>| {
            for a in s.accounts().unwrap() {
                t.push(format!(
                    "{} {} subs {} campaigns {} footer {:?}",
                    a.id, a.name, a.subscribers, a.campaigns, a.sms_footer
                ));
            }
        };
        accounts(&mut t);
        t.push(said(s.set_sms_footer(acct, Some("STOP to end"))));
        t.push(said(s.sms_footer(acct)));
        t.push(said(s.sms_footer(other)));
        t.push(said(s.set_sms_footer(acct, None)));
        t.push(said(s.sms_footer(acct)));
        t.push(said(s.set_sms_footer(99, Some("x"))));
        t.push(said(s.sms_footer(99)));
        for (a, st) in [
            (None, None),
            (Some(acct), Some(CampaignStatus::Sending)),
            (Some(acct), Some(CampaignStatus::Draft)),
            (Some(other), None),
        ] {
            let rows = s.list_campaigns(a, st).unwrap();
            t.push(format!(
                "{:?}",
                rows.iter()
                    .map(|c| (
                        c.id,
                        c.account_id,
                        &c.account,
                        &c.name,
                        &c.channel,
                        &c.status,
                        c.scheduled_for.is_some()
                    ))
                    .collect::<Vec<_>>()
            ));
        }
        let page = |t: &mut Vec<String>, status: Option<&str>, after: i64, limit: usize| {
            let rows = s.list_subscribers(acct, status, after, limit).unwrap();
            t.push(
                rows.iter()
                    .map(subscriber_text)
                    .collect::<Vec<_>>()
                    .join(" | "),
            );
        };
        page(&mut t, None, 0, 2);
        page(&mut t, None, 1, 10);
        page(&mut t, Some("confirmed"), 0, usize::MAX);
        page(&mut t, Some("pending"), 0, 10);
        let u1 = s.find_subscriber(acct, " U1@X.com ").unwrap();
        t.push(subscriber_text(&u1));
        t.push(said(
            s.find_subscriber(acct, &u1.id.to_string()).map(|r| r.id),
        ));
        t.push(said(s.find_subscriber(other, "u1@x.com").map(|r| r.id)));
        t.push(said(s.find_subscriber(acct, "nope").map(|r| r.id)));
        // Attributes merge as SQLite's json_patch does: kept key order, new keys appended,
        // null removes, nested objects merged; the stored text is the same bytes.
        let change =
            |name: Option<&str>, status: Option<&str>, attrs: Option<&str>| SubscriberChanges {
                name: name.map(str::to_string),
                status: status.map(str::to_string),
                attrs: attrs.map(str::to_string),
            };
        for ch in [
            change(
                Some("Ann"),
                None,
                Some(r#"{"z":1,"a":{"x":1,"y":[1,2]},"m":"é"}"#),
            ),
            change(
                None,
                Some("bounced"),
                Some(r#"{"a":{"x":null,"w":true},"z":null,"n":2.50}"#),
            ),
            change(None, None, None),
        ] {
            t.push(said(
                s.update_subscriber(acct, u1.id, &ch)
                    .map(|r| subscriber_text(&r)),
            ));
        }
        t.push(said(
            s.update_subscriber(other, u1.id, &change(Some("x"), None, None))
                .map(|r| r.id),
        ));
        t.push(said(
            s.update_subscriber(acct, 999, &change(Some("x"), None, None))
                .map(|r| r.id),
        ));
        // Removal: blanked, listed nowhere, its address suppressed; twice is not found.
        t.push(said(s.remove_subscriber(acct, u1.id)));
        t.push(said(s.remove_subscriber(acct, u1.id)));
        t.push(said(s.remove_subscriber(other, 1)));
        t.push(said(s.is_suppressed(acct, Channel::Email, "u1@x.com")));
        t.push(said(s.find_subscriber(acct, "u1@x.com").map(|r| r.id)));
        page(&mut t, None, 0, 10);
        accounts(&mut t);
        t.push(said(
            s.update_subscriber(acct, u1.id, &change(Some("x"), None, None))
                .map(|r| r.id),
        ));
        t
    });
}

#[test]
fn suppressions_answer_the_same_on_every_backend() {
    same_on_both(|s| {
        let mut t = Vec::new();
        let acct = s.add_account("t").unwrap();
        let other = s.add_account("other").unwrap();
        for (ch, a) in [
            (Channel::Email, "b@x.com"),
            (Channel::Email, "B@x.com"),
            (Channel::Email, "a@x.com"),
            (Channel::Sms, "+15550001"),
            (Channel::Email, "b@x.com"),
        ] {
            t.push(said(s.suppress(acct, ch, a, "why", "test")));
        }
        t.push(said(s.suppress(
            99,
            Channel::Email,
            "a@x.com",
            "why",
            "test",
        )));
        let list = |t: &mut Vec<String>, account: i64| {
            t.push(said(s.suppressions(account).map(|rows| {
                rows.iter()
                    .map(|r| format!("{} {} {} {}", r.channel, r.address, r.reason, r.source))
                    .collect::<Vec<_>>()
            })));
        };
        list(&mut t, acct);
        list(&mut t, other);
        list(&mut t, 99);
        t.push(said(s.is_suppressed(acct, Channel::Email, "b@x.com")));
        t.push(said(s.is_suppressed(acct, Channel::Sms, "b@x.com")));
        t.push(said(s.is_suppressed(other, Channel::Email, "b@x.com")));
        t.push(said(s.is_suppressed(99, Channel::Email, "b@x.com")));
        t.push(said(s.unsuppress(acct, Channel::Email, "b@x.com")));
        t.push(said(s.unsuppress(acct, Channel::Email, "b@x.com")));
        t.push(said(s.unsuppress(acct, Channel::Email, "+15550001")));
        t.push(said(s.unsuppress(other, Channel::Sms, "+15550001")));
        t.push(said(s.unsuppress(99, Channel::Sms, "+15550001")));
        t.push(said(s.is_suppressed(acct, Channel::Email, "b@x.com")));
        list(&mut t, acct);
        t
    });
}

#[test]
fn tokens_answer_the_same_on_every_backend() {
    use sendonce::domain::token::{Scope, LAST_USED_EVERY_MS};
    use sendonce::store::NewToken;
    same_on_both(|s| {
        let mut t = Vec::new();
        let acct = s.add_account("t").unwrap();
        let other = s.add_account("other").unwrap();
        let (h1, h2, h3) = ([1u8; 32], [2u8; 32], [3u8; 32]);
        let new = |account_id, name, scope, hash| NewToken {
            account_id,
            name,
            scope,
            prefix: "so_abc",
            hash,
            created_at: 1_000,
        };
        t.push(said(s.create_token(&new(acct, "ci", Scope::Send, &h1))));
        t.push(said(s.create_token(&new(acct, "dash", Scope::Read, &h2))));
        t.push(said(s.create_token(&new(99, "nobody", Scope::Admin, &h3))));
        t.push(said(s.create_token(&new(other, "ops", Scope::Admin, &h3))));
        t.push(said(s.tokens(acct)));
        t.push(said(s.tokens(other)));
        t.push(said(s.tokens(99)));
        let now = 10_000_000;
        t.push(said(s.authenticate(&h1, now)));
        t.push(said(s.authenticate(&h1, now + LAST_USED_EVERY_MS - 1)));
        t.push(said(s.authenticate(&h1, now + LAST_USED_EVERY_MS)));
        t.push(said(s.authenticate(&[9u8; 32], now)));
        t.push(said(s.revoke_token(other, 1, now)));
        t.push(said(s.revoke_token(acct, 1, now + 5)));
        t.push(said(s.revoke_token(acct, 1, now + 6)));
        t.push(said(s.revoke_token(acct, 99, now)));
        t.push(said(s.authenticate(&h1, now + 10 * LAST_USED_EVERY_MS)));
        t.push(said(s.authenticate(&h2, now)));
        t.push(said(s.tokens(acct)));
        // Last: a refused insert uses up an id on PostgreSQL (an identity is not rolled back),
        // which SQLite hands out again; ids are never promised to be gap-free.
        t.push(said(s.create_token(&new(
            other,
            "again",
            Scope::Admin,
            &h1,
        ))));
        t
    });
}

#[test]
fn rate_limits_answer_the_same_on_every_backend() {
    same_on_both(|s| {
        let mut t = Vec::new();
        let t0 = 1_000_000;
        for (name, want, rate, burst, now) in [
            ("smtp", 5, 1.0, 5, t0),
            ("smtp", 1, 1.0, 5, t0),
            ("smtp", 1, 1.0, 5, t0 + 400),
            ("smtp", 10, 1.0, 5, t0 + 3_000),
            ("smtp", 10, 1.0, 5, t0 + 3_600_000),
            ("smtp", 2, 2.5, 5, t0 + 3_600_300),
            ("sms", 3, 0.0, 0, t0),
            ("sms", 1, 0.0, 0, t0 + 60_000),
            ("back", 1, 1.0, 2, t0),
            ("back", 5, 1.0, 2, t0 - 10_000),
        ] {
            t.push(format!(
                "{name} {want}: {}",
                said(s.take_tokens(name, want, rate, burst, now))
            ));
        }
        t
    });
}

/// Hosts taking from one new bucket at once: the burst is granted once in all, never once per
/// host (on PostgreSQL the bucket's row is made before it is read for update).
#[test]
fn a_new_bucket_taken_from_at_once_grants_its_burst_once() {
    for b in ledger_backends() {
        let env = common::Env::new();
        let s = (b.fresh)(&env);
        let now = now_ms();
        let granted: u32 = std::thread::scope(|scope| {
            let workers: Vec<_> = (0..8)
                .map(|_| {
                    let s = s.clone();
                    scope.spawn(move || s.take_tokens("new", 2, 0.0, 5, now).unwrap().granted)
                })
                .collect();
            workers.into_iter().map(|w| w.join().unwrap()).sum()
        });
        assert_eq!(granted, 5, "{}", b.name);
    }
}

// Campaign management and the checker's reads: the same rules on every backend.

/// Pause puts undispatched leases back in the queue and keeps dispatched ones; resume and
/// cancel are compare-and-sets that say why they refused; cancel withdraws what cannot be in
/// flight and keeps what may be; an unknown campaign is not found.
#[test]
fn pause_resume_and_cancel_are_compare_and_sets_on_every_backend() {
    use sendonce::error::ErrorKind;
    for b in ledger_backends() {
        let f = Fixture::new(&b, 10);
        let t0 = now_ms();
        let a = f.claim(4, 1, t0, None);
        let held = f.s.mark_dispatched(&keys(&a)[..2], t0, 60_000).unwrap();
        assert_eq!(held.len(), 2, "{}", f.backend);
        let c = f.s.pause_campaign(f.cid).unwrap();
        assert_eq!(c.status.as_str(), "paused", "{}", f.backend);
        assert_eq!(
            (f.count("leased"), f.count("queued")),
            (2, 8),
            "{}: undispatched leases go back to the queue",
            f.backend
        );
        let e = f.s.pause_campaign(f.cid).unwrap_err();
        assert_eq!(e.kind, ErrorKind::Conflict, "{}", f.backend);
        assert!(
            e.message
                .contains(&format!("cannot pause campaign {}: it is paused", f.cid)),
            "{}: {}",
            f.backend,
            e.message
        );
        let c = f.s.resume_campaign(f.cid).unwrap();
        assert_eq!(c.status.as_str(), "sending", "{}", f.backend);
        let e = f.s.resume_campaign(f.cid).unwrap_err();
        assert_eq!(e.kind, ErrorKind::Conflict, "{}", f.backend);
        assert!(e.message.contains("it is sending"), "{}", e.message);
        let c = f.s.cancel_campaign(f.cid).unwrap();
        assert_eq!(c.status.as_str(), "cancelled", "{}", f.backend);
        assert!(c.finished_at.is_some(), "{}", f.backend);
        assert_eq!(
            (f.count("leased"), f.count("cancelled"), f.count("queued")),
            (2, 8, 0),
            "{}: rows that may be in flight keep their lease",
            f.backend
        );
        let e = f.s.cancel_campaign(f.cid).unwrap_err();
        assert_eq!(e.kind, ErrorKind::Conflict, "{}", f.backend);
        assert!(e.message.contains("it is cancelled"), "{}", e.message);
        let e = f.s.resume_campaign(f.cid).unwrap_err();
        assert_eq!(e.kind, ErrorKind::Conflict, "{}", f.backend);
        // The kept leases are swept once they expire, not before: dispatched, so in doubt.
        assert_eq!(
            f.s.sweep_cancelled(t0 + 59_000).unwrap(),
            0,
            "{}",
            f.backend
        );
        assert_eq!(
            f.s.sweep_cancelled(t0 + 60_001).unwrap(),
            2,
            "{}",
            f.backend
        );
        assert_eq!(
            (f.count("leased"), f.count("in_doubt")),
            (0, 2),
            "{}: expired leases of a cancelled campaign",
            f.backend
        );
        for e in [
            f.s.pause_campaign(4242).unwrap_err(),
            f.s.resume_campaign(4242).unwrap_err(),
            f.s.cancel_campaign(4242).unwrap_err(),
        ] {
            assert_eq!(e.kind, ErrorKind::NotFound, "{}", f.backend);
            assert!(
                e.message.contains("unknown campaign id 4242"),
                "{}",
                e.message
            );
        }
    }
}

/// Reports (streamed and paged), the in-doubt queue, a send's account and one recipient read
/// the same on every backend.
#[test]
fn reports_doubts_and_a_recipient_read_the_same_on_every_backend() {
    use sendonce::error::ErrorKind;
    for b in ledger_backends() {
        let f = Fixture::new(&b, 3);
        let t0 = now_ms();
        let a = f.claim(3, 1, t0, None);
        f.s.mark_dispatched(&keys(&a)[..2], t0, 1000).unwrap();
        let b2 = f.claim(10, 2, t0 + 10_000, None);
        assert_eq!(b2.in_doubt, 2, "{}", f.backend);
        let stats =
            f.s.record(&[accepted(b2.rows[0].id, 2)], t0 + 10_001)
                .unwrap();
        let _ = stats;

        let doubts = f.s.doubts(f.cid).unwrap();
        assert_eq!(doubts.len(), 2, "{}", f.backend);
        assert!(doubts[0].send_id < doubts[1].send_id, "{}", f.backend);
        assert!(
            doubts
                .iter()
                .all(|d| d.doubt_since.is_some() && d.attempts >= 1),
            "{}",
            f.backend
        );

        let all = f.s.report_page(f.cid, 0, 100).unwrap();
        assert_eq!(all.len(), 3, "{}", f.backend);
        assert!(all.windows(2).all(|w| w[0].send_id < w[1].send_id));
        let first = f.s.report_page(f.cid, 0, 2).unwrap();
        let rest = f.s.report_page(f.cid, first[1].send_id, 2).unwrap();
        assert_eq!((first.len(), rest.len()), (2, 1), "{}", f.backend);
        assert_eq!(rest[0].send_id, all[2].send_id, "{}", f.backend);
        let sent: Vec<_> = all.iter().filter(|r| r.status == "sent").collect();
        assert_eq!(sent.len(), 1, "{}", f.backend);
        assert!(sent[0].sent_at.is_some(), "{}", f.backend);
        assert_eq!(
            sent[0].provider_message_id.as_deref(),
            Some(format!("p{}", sent[0].send_id).as_str()),
            "{}",
            f.backend
        );
        let mut streamed = Vec::new();
        f.s.report(f.cid, &mut |r| {
            streamed.push((r.send_id, r.job_id, r.status));
            Ok(())
        })
        .unwrap();
        let paged: Vec<_> = all
            .iter()
            .map(|r| (r.send_id, r.job_id.clone(), r.status.clone()))
            .collect();
        assert_eq!(streamed, paged, "{}", f.backend);
        // A callback's error stops the report and is what it answers.
        let e =
            f.s.report(f.cid, &mut |_| Err(sendonce::error::Error::invalid("stop")))
                .unwrap_err();
        assert_eq!(e.message, "stop", "{}", f.backend);
        assert!(f.s.report_page(4242, 0, 10).is_err(), "{}", f.backend);

        assert_eq!(
            f.s.send_account(all[0].send_id).unwrap(),
            Some(f.acct),
            "{}",
            f.backend
        );
        assert_eq!(f.s.send_account(4242).unwrap(), None, "{}", f.backend);

        // The first subscriber of a fresh store has id 1 on both.
        let r = f.s.recipient(f.cid, 1).unwrap();
        assert_eq!(r.subscriber_id, 1, "{}", f.backend);
        let address = r.address.clone().expect("an email address");
        assert!(address.ends_with("@x.com"), "{address}");
        let (job, _) = r.send.clone().expect("the list holds it");
        assert!(all
            .iter()
            .any(|row| row.job_id == job && row.address == address));
        assert!(
            r.targeted && !r.suppressed && r.matches_filter,
            "{}",
            f.backend
        );
        let vars: serde_json::Value = serde_json::from_str(&r.vars).unwrap();
        assert_eq!(
            vars["email"].as_str(),
            Some(address.as_str()),
            "{}",
            f.backend
        );
        f.s.suppress(f.acct, Channel::Email, &address, "test", "test")
            .unwrap();
        assert!(f.s.recipient(f.cid, 1).unwrap().suppressed, "{}", f.backend);
        let e = f.s.recipient(f.cid, 4242).unwrap_err();
        assert_eq!(e.kind, ErrorKind::NotFound, "{}", f.backend);
        assert!(
            e.message.contains(&format!(
                "subscriber 4242 is not in account {} (campaign {})",
                f.acct, f.cid
            )),
            "{}",
            e.message
        );
    }
}

/// The checker's snapshot and the ledger invariants read the same on every backend.
#[test]
fn the_audit_snapshot_and_invariants_read_the_same_on_every_backend() {
    for b in ledger_backends() {
        let f = Fixture::new(&b, 3);
        let t0 = now_ms();
        let a = f.claim(1, 1, t0, None);
        f.s.record(&[accepted(a.rows[0].id, 1)], t0).unwrap();
        f.s.suppress(f.acct, Channel::Email, "u2@x.com", "test", "test")
            .unwrap();
        let snap = f.s.audit_snapshot(f.cid).unwrap();
        assert_eq!(
            (snap.campaign_id, snap.account_id),
            (f.cid, f.acct),
            "{}",
            f.backend
        );
        assert_eq!(snap.campaign_status, "sending", "{}", f.backend);
        let mut eligible = snap.eligible.clone();
        eligible.sort();
        assert_eq!(
            eligible,
            vec!["u0@x.com", "u1@x.com", "u2@x.com"],
            "{}",
            f.backend
        );
        assert_eq!(snap.rows.len(), 3, "{}", f.backend);
        let sent: Vec<_> = snap.rows.values().filter(|r| r.status == "sent").collect();
        assert_eq!(sent.len(), 1, "{}", f.backend);
        assert!(sent[0].claimed_at.is_some(), "{}", f.backend);
        let reported = f.s.report_page(f.cid, 0, 10).unwrap();
        let row = reported
            .iter()
            .find(|r| r.job_id == sent[0].job_id)
            .unwrap();
        assert_eq!(
            (row.attempts, row.address.as_str()),
            (sent[0].attempts, sent[0].address.as_str()),
            "{}",
            f.backend
        );
        assert_eq!(
            snap.suppressed_at.keys().collect::<Vec<_>>(),
            vec!["u2@x.com"],
            "{}",
            f.backend
        );
        assert_eq!(
            f.s.invariant_violations(f.cid).unwrap(),
            Vec::<String>::new(),
            "{}",
            f.backend
        );
        assert!(f.s.audit_snapshot(4242).is_err(), "{}", f.backend);
    }
}

/// An API message: created once per key, in progress until its answer is saved, then replayed;
/// another request under the same key is a mismatch; it reads back per account.
#[test]
fn an_api_message_is_created_once_per_key_on_every_backend() {
    use sendonce::store::{NewMessage, Submitted};
    for b in ledger_backends() {
        let env = common::Env::new();
        let s = (b.fresh)(&env);
        let acct = s.add_account("t").unwrap();
        let msg = |hash: &'static str| NewMessage {
            account_id: acct,
            idempotency_key: "k1",
            request_hash: hash,
            channel: Channel::Email,
            to: "a@x.com",
            from: Some("me@x.com"),
            reply_to: None,
            subject: Some("s"),
            text: "hello",
            html: None,
            template: None,
            attachments: &[],
            metadata: None,
            now: 1000,
            answer: None,
        };
        let Submitted::Created { row, .. } = s.submit_message(&msg("h1")).unwrap() else {
            panic!("{}: not created", b.name)
        };
        let id = row.id;
        match s.submit_message(&msg("h1")).unwrap() {
            Submitted::InProgress { id: i, since } => assert_eq!((i, since), (id, 1000)),
            other => panic!("{}: {other:?}", b.name),
        }
        match s.submit_message(&msg("h2")).unwrap() {
            Submitted::Mismatch { id: i } => assert_eq!(i, id),
            other => panic!("{}: {other:?}", b.name),
        }
        s.save_answer(acct, id, 202, "{\"ok\":1}").unwrap();
        s.save_answer(acct, id, 500, "later").unwrap(); // the first answer stays
        match s.submit_message(&msg("h1")).unwrap() {
            Submitted::Replay {
                id: i,
                status,
                body,
            } => {
                assert_eq!(
                    (i, status, body.as_str()),
                    (id, 202, "{\"ok\":1}"),
                    "{}",
                    b.name
                )
            }
            other => panic!("{}: {other:?}", b.name),
        }
        let m = s.message(acct, id).unwrap();
        assert_eq!(
            (
                m.idempotency_key.as_str(),
                m.to.as_str(),
                m.channel,
                m.status.as_str()
            ),
            ("k1", "a@x.com", Channel::Email, "queued"),
            "{}",
            b.name
        );
        assert!(
            m.job_id.contains(&id.to_string()),
            "{}: {}",
            b.name,
            m.job_id
        );
        assert_eq!(m.created_at, 1000, "{}", b.name);
        let e = s.message(acct + 1, id).unwrap_err();
        assert_eq!(e.kind, sendonce::error::ErrorKind::NotFound, "{}", b.name);
        let mut other = msg("h1");
        other.account_id = 4242;
        assert!(s.submit_message(&other).is_err(), "{}", b.name);
    }
}

/// Templates keep every version; a message stored with a template version and two files reads
/// back with both, and its stream's claim carries the files in order, byte for byte.
#[test]
fn templates_and_attachments_read_back_the_same_on_every_backend() {
    use sendonce::domain::attachment::decode;
    use sendonce::store::{NewMessage, NewTemplate, Submitted};
    same_on_both(|s| {
        let mut t = Vec::new();
        let acct = s.add_account("t").unwrap();
        for subject in ["one", "two"] {
            let r = s.save_template(&NewTemplate {
                account_id: acct,
                name: "r",
                subject: Some(subject),
                text: Some("x {{ a }}"),
                html: None,
                now: 5,
            });
            t.push(said(r.map(|r| (r.name, r.version, r.subject))));
        }
        t.push(said(s.template(acct, "r", Some(1)).map(|r| r.subject)));
        t.push(said(s.template(acct, "r", None).map(|r| r.version)));
        t.push(said(s.template(acct, "r", Some(3)).map(|r| r.version)));
        t.push(said(s.template(acct + 1, "r", None).map(|r| r.version)));
        t.push(said(s.templates(acct).map(|v| v.len())));
        let tpl = s.template(acct, "r", Some(1)).unwrap();
        let files = vec![
            decode("a.bin", None, "AAEC", None).unwrap(),
            decode("b.png", None, "/w==", Some("logo")).unwrap(),
        ];
        let m = NewMessage {
            account_id: acct,
            idempotency_key: "k1",
            request_hash: "h",
            channel: Channel::Email,
            to: "a@x.com",
            from: Some("me@x.com"),
            reply_to: None,
            subject: Some("one"),
            text: "x 1",
            html: None,
            template: Some(&tpl),
            attachments: &files,
            metadata: None,
            now: 1000,
            answer: None,
        };
        let Submitted::Created { row, .. } = s.submit_message(&m).unwrap() else {
            panic!("not created")
        };
        t.push(format!("created {:?} {}", row.template, row.attachments));
        let read = s.message(acct, row.id).unwrap();
        t.push(format!("read {:?} {}", read.template, read.attachments));
        // The dashboard's search: a recipient's start (byte order on both), a state, paging.
        for (prefix, states) in [
            (Some("a@"), None),
            (Some("a@y"), None),
            (Some("A"), None),
            (
                None,
                Some(&[sendonce::domain::model::SendStatus::Queued][..]),
            ),
            (None, Some(&[sendonce::domain::model::SendStatus::Sent][..])),
        ] {
            let page = s.messages_page(&sendonce::store::MessageSearch {
                account_id: acct,
                to_prefix: prefix,
                states,
                provider_id: None,
                before: None,
                limit: 10,
            });
            t.push(said(
                page.map(|p| p.iter().map(|m| m.id).collect::<Vec<_>>()),
            ));
        }
        let stream = s.active_campaigns().unwrap()[0].id;
        let claimed = s
            .claim(&ClaimRequest {
                campaign_id: stream,
                account_id: acct,
                channel: Channel::Email,
                batch: 10,
                lease_ms: 10_000,
                token: 1,
                owner: "w".into(),
                key_window_ms: None,
                now: 2000,
            })
            .unwrap();
        let content = claimed.rows[0].content.clone().expect("content");
        t.push(format!("claimed {:?}", content.attachments));
        let bytes: Vec<Vec<u8>> = content
            .attachments
            .iter()
            .map(|a| a.data.to_vec())
            .collect();
        assert_eq!(bytes, vec![vec![0u8, 1, 2], vec![255u8]]);
        t
    });
}

// ---- Notifications and Webhooks: the same script on every backend ----------------------------

/// One notification row as the transcript prints it.
fn notify_line(r: &sendonce::store::NotifyRow) -> String {
    format!(
        "{} {} {} {} attempts {} sent {} id {:?}",
        r.job_id,
        r.address,
        r.channel,
        r.status,
        r.attempts,
        r.sent_at.is_some(),
        r.provider_message_id
    )
}

/// `sendonce notify`'s rows: rows of the `notify` account's stream for their channel, a row per
/// recipient made once, one content per key and channel taken from the first call (the claim
/// reads it), a later recipient queued in the stream, which never completes.
#[test]
fn notifications_answer_the_same_on_every_backend() {
    same_on_both(|s| {
        let mut t = Vec::new();
        let rows = |t: &mut Vec<String>, key: &str, ch: Channel, to: &[&str]| {
            let to: Vec<String> = to.iter().map(|a| a.to_string()).collect();
            t.push(said(
                s.notification_rows(key, ch, &to)
                    .map(|rows| rows.iter().map(notify_line).collect::<Vec<_>>()),
            ));
        };
        let to = |v: &[&str]| v.iter().map(|a| a.to_string()).collect::<Vec<_>>();
        rows(&mut t, "k1", Channel::Email, &["a@x.com"]);
        let cid = s
            .prepare_notification(
                "k1",
                Channel::Email,
                Some("me@x.com"),
                Some("deploy"),
                "deploy ok",
                &to(&["a@x.com", "b@x.com"]),
            )
            .unwrap();
        t.push(format!("stream {cid}"));
        // A retry with other content finds the same stream; its content stays the first.
        t.push(said(s.prepare_notification(
            "k1",
            Channel::Email,
            None,
            Some("other"),
            "other text",
            &to(&["b@x.com", "a@x.com"]),
        )));
        rows(
            &mut t,
            "k1",
            Channel::Email,
            &["b@x.com", "nope@x.com", "a@x.com"],
        );
        rows(&mut t, "k1", Channel::Sms, &["a@x.com"]);
        t.push(said(s.prepare_notification(
            "k1",
            Channel::Sms,
            None,
            None,
            "deploy ok",
            &to(&["+15550001"]),
        )));
        t.push(said(s.prepare_notification(
            "k2",
            Channel::Email,
            None,
            Some("s"),
            "two",
            &to(&["a@x.com"]),
        )));
        let active = s.active_campaigns().unwrap();
        for c in &active {
            t.push(format!(
                "active {} acct {} {} {:?} {:?} {:?} {}",
                c.id, c.account_id, c.channel, c.sender, c.subject, c.body, c.name
            ));
        }
        // Send the email stream's rows (k1's two, k2's one); it stays open for a later one.
        let acct = active[0].account_id;
        let now = now_ms();
        let claimed = s
            .claim(&ClaimRequest {
                campaign_id: cid,
                account_id: acct,
                channel: Channel::Email,
                batch: 10,
                lease_ms: 10_000,
                token: 1,
                owner: "w".into(),
                key_window_ms: None,
                now,
            })
            .unwrap();
        t.push(format!("claimed {}", claimed.rows.len()));
        for r in &claimed.rows {
            let c = r.content.as_ref().expect("a stream row brings its content");
            t.push(format!("content {:?} {:?} {:?}", c.from, c.subject, c.text));
        }
        let done: Vec<Record> = claimed.rows.iter().map(|r| accepted(r.id, 1)).collect();
        s.record(&done, now).unwrap();
        t.push(said(s.try_complete(cid, now)));
        rows(&mut t, "k1", Channel::Email, &["a@x.com", "b@x.com"]);
        let status = |t: &mut Vec<String>| {
            let c = s.campaign(cid).unwrap();
            t.push(format!("status {}", c.status.as_str()));
        };
        status(&mut t);
        t.push(said(s.prepare_notification(
            "k1",
            Channel::Email,
            None,
            None,
            "x",
            &to(&["a@x.com"]),
        )));
        status(&mut t);
        t.push(said(s.prepare_notification(
            "k1",
            Channel::Email,
            None,
            None,
            "x",
            &to(&["c@x.com"]),
        )));
        status(&mut t);
        rows(
            &mut t,
            "k1",
            Channel::Email,
            &["a@x.com", "b@x.com", "c@x.com"],
        );
        // What both must say, not only the same thing.
        let all = t.join("\n");
        assert!(
            all.contains(&format!("ok {cid}")),
            "a retry finds the same stream:\n{all}"
        );
        assert!(
            all.contains("claimed 3"),
            "k1's two rows and k2's one:\n{all}"
        );
        let first = "content Some(\"me@x.com\") Some(\"deploy\") \"deploy ok\"";
        assert_eq!(
            all.matches(first).count(),
            2,
            "the first call's content:\n{all}"
        );
        let statuses: Vec<&String> = t.iter().filter(|l| l.starts_with("status")).collect();
        assert_eq!(
            statuses,
            ["status sending", "status sending", "status sending"],
            "{all}"
        );
        assert!(
            all.contains("notify:k1:c@x.com c@x.com email queued"),
            "a later recipient is queued:\n{all}"
        );
        t
    });
}

/// Provider webhook events: recorded once (a replay changes nothing, another body under the
/// same id is a conflict), suppressions added and lifted only where the provider put them, rows
/// in doubt settled (and the campaign completed), other delivery reports kept or ignored.
#[test]
fn webhooks_answer_the_same_on_every_backend() {
    same_on_both(webhooks_script);
}

/// The webhook script on one backend: events, delivery reports, the campaign, the checks.
fn webhooks_script(s: &Store) -> Vec<String> {
    let mut t = Vec::new();
    let (acct, cid, other) = webhooks_setup(s);
    webhook_events_suppress_and_lift(s, &mut t, acct, other);
    let (a, b, now) = webhook_rows_in_doubt(s, &mut t, acct, cid);
    let j0 = webhook_delivery_reports(s, &mut t, acct, other, &a);
    webhook_campaign_completes(s, &mut t, cid, &b, now);
    webhooks_checked(&t, &j0);
    t
}

/// A campaign of three rows in sending, its list built, and a second account.
fn webhooks_setup(s: &Store) -> (i64, i64, i64) {
    let (acct, cid) = common::started_campaign(s, 3);
    while !s.build_list_chunk(cid, 7).unwrap() {}
    let other = s.add_account("other").unwrap();
    (acct, cid, other)
}

/// A webhook event `id` about a@x.com, of `job` when given, with `effect`.
fn webhook_event(
    id: &str,
    job: Option<&str>,
    effect: sendonce::domain::webhook::Effect,
) -> sendonce::domain::webhook::Event {
    use sendonce::domain::webhook::Event;
    Event {
        event_id: id.into(),
        kind: "test.kind".into(),
        job_id: job.map(str::to_string),
        address: Some("a@x.com".into()),
        effect,
    }
}

/// The effect suppressing the email address `a` as bounced.
fn webhook_suppress(a: &str) -> sendonce::domain::webhook::Effect {
    use sendonce::domain::webhook::Effect;
    Effect::Suppress {
        channel: Channel::Email,
        address: a.into(),
        reason: "bounced".into(),
    }
}

/// The effect lifting the suppression of the email address `a`.
fn webhook_lift(a: &str) -> sendonce::domain::webhook::Effect {
    use sendonce::domain::webhook::Effect;
    Effect::Unsuppress {
        channel: Channel::Email,
        address: a.into(),
    }
}

/// A delivery report of `job` naming the provider's message (`re-` and the job before its scope).
fn webhook_delivery(job: &str, sent: bool) -> sendonce::domain::webhook::Effect {
    use sendonce::domain::webhook::Effect;
    Effect::Delivery {
        job_id: job.into(),
        sent,
        provider_id: Some(format!("re-{}", job.split('@').next().unwrap_or(job))),
    }
}

/// Apply `e` from `src` to account `a` with body hash `hash`, and note the answer.
fn webhook_apply(
    s: &Store,
    t: &mut Vec<String>,
    a: i64,
    src: sendonce::domain::webhook::Source,
    e: &sendonce::domain::webhook::Event,
    hash: &str,
) {
    t.push(said(s.apply_webhook(a, src, e, hash, 1000)));
}

/// Note the suppressions of account `a`.
fn webhook_suppressions(s: &Store, t: &mut Vec<String>, a: i64) {
    t.push(said(s.suppressions(a).map(|rows| {
        rows.iter()
            .map(|r| format!("{} {} {} {}", r.channel, r.address, r.reason, r.source))
            .collect::<Vec<_>>()
    })));
}

/// Events recorded once (replays, conflicts, other sources and accounts), suppressions lifted.
fn webhook_events_suppress_and_lift(s: &Store, t: &mut Vec<String>, acct: i64, other: i64) {
    use sendonce::domain::webhook::{Effect, Source};
    let e1 = webhook_event("e1", None, webhook_suppress("a@x.com"));
    webhook_apply(s, t, acct, Source::Standard, &e1, "h1");
    webhook_apply(s, t, acct, Source::Standard, &e1, "h1");
    webhook_apply(s, t, acct, Source::Standard, &e1, "h2");
    // The same id from another source, or at another account, is another event.
    webhook_apply(s, t, acct, Source::Resend, &e1, "h2");
    webhook_apply(s, t, other, Source::Standard, &e1, "h1");
    webhook_suppressions(s, t, acct);
    webhook_suppressions(s, t, other);
    // A provider's opt-in lifts only what that provider (or the worker's `provider`) put.
    webhook_apply(
        s,
        t,
        acct,
        Source::Twilio,
        &webhook_event("e2", None, webhook_lift("a@x.com")),
        "h",
    );
    webhook_suppressions(s, t, acct);
    s.suppress(acct, Channel::Email, "op@x.com", "asked", "operator")
        .unwrap();
    webhook_apply(
        s,
        t,
        acct,
        Source::Standard,
        &webhook_event("e3", None, webhook_lift("op@x.com")),
        "h",
    );
    webhook_apply(
        s,
        t,
        acct,
        Source::Standard,
        &webhook_event("e4", None, webhook_lift("a@x.com")),
        "h",
    );
    webhook_suppressions(s, t, acct);
    webhook_apply(
        s,
        t,
        acct,
        Source::Standard,
        &webhook_event("e5", None, Effect::Nothing),
        "h",
    );
}

/// Two rows dispatched and their leases expired: the next claim parks them in doubt.
fn webhook_rows_in_doubt(
    s: &Store,
    t: &mut Vec<String>,
    acct: i64,
    cid: i64,
) -> (Claimed, Claimed, i64) {
    // Delivery reports: rows in doubt settled, a leased row's report kept, unknown jobs
    // and other accounts' jobs ignored.
    let now = now_ms();
    let req = |token: i64, now: i64| ClaimRequest {
        campaign_id: cid,
        account_id: acct,
        channel: Channel::Email,
        batch: 10,
        lease_ms: 1000,
        token,
        owner: format!("w{token}"),
        key_window_ms: None,
        now,
    };
    let a = s.claim(&req(1, now)).unwrap();
    let held: Vec<(i64, i64)> = a.rows.iter().map(|r| (r.id, r.token)).collect();
    s.mark_dispatched(&held[..2], now, 1000).unwrap();
    let b = s.claim(&req(2, now + 10_000)).unwrap();
    t.push(format!(
        "in doubt {} re-leased {}",
        b.in_doubt,
        b.rows.len()
    ));
    (a, b, now)
}

/// Delivery reports of the first claim's jobs, a replay, another account's and an unknown job.
fn webhook_delivery_reports(
    s: &Store,
    t: &mut Vec<String>,
    acct: i64,
    other: i64,
    a: &Claimed,
) -> String {
    use sendonce::domain::webhook::Source;
    let job = |i: usize| a.rows[i].job_id.clone();
    let (j0, j1, j2) = (job(0), job(1), job(2));
    webhook_apply(
        s,
        t,
        acct,
        Source::Resend,
        &webhook_event("d0", Some(&j0), webhook_delivery(&j0, true)),
        "h",
    );
    webhook_apply(
        s,
        t,
        acct,
        Source::Resend,
        &webhook_event("d0", Some(&j0), webhook_delivery(&j0, true)),
        "h",
    );
    webhook_apply(
        s,
        t,
        other,
        Source::Resend,
        &webhook_event("d1", Some(&j1), webhook_delivery(&j1, true)),
        "h",
    );
    webhook_apply(
        s,
        t,
        acct,
        Source::Resend,
        &webhook_event("d2", Some(&j2), webhook_delivery(&j2, true)),
        "h",
    );
    webhook_apply(
        s,
        t,
        acct,
        Source::Resend,
        &webhook_event("d3", None, webhook_delivery("nope:1", true)),
        "h",
    );
    webhook_apply(
        s,
        t,
        acct,
        Source::Resend,
        &webhook_event("d4", Some(&j1), webhook_delivery(&j1, false)),
        "h",
    );
    j0
}

/// The re-leased row sent: the campaign completes, and its report is noted row by row.
fn webhook_campaign_completes(s: &Store, t: &mut Vec<String>, cid: i64, b: &Claimed, now: i64) {
    t.push(format!(
        "campaign {}",
        s.campaign(cid).unwrap().status.as_str()
    ));
    s.record(&[accepted(b.rows[0].id, 2)], now + 10_001)
        .unwrap();
    t.push(said(s.try_complete(cid, now + 10_002)));
    t.push(format!(
        "campaign {}",
        s.campaign(cid).unwrap().status.as_str()
    ));
    for r in s.report_page(cid, 0, 10).unwrap() {
        t.push(format!(
            "{} {} attempts {} sent {} {:?} {:?}",
            r.address,
            r.status,
            r.attempts,
            r.sent_at.is_some(),
            r.provider_message_id,
            r.reason
        ));
    }
}

/// What both backends must say, not only the same thing, and the provider ids the rows keep.
fn webhooks_checked(t: &[String], j0: &str) {
    let all = t.join("\n");
    for want in [
        "ok New(Suppressed)",
        "ok Replay(Suppressed)",
        "err Conflict",
        "ok New(Unsuppressed)",
        "ok New(SettledSent)",
        "ok Replay(SettledSent)",
        "ok New(SettledFailed)",
        "ok New(Recorded)",
        "ok New(Ignored)",
        "in doubt 2 re-leased 1",
        "email a@x.com bounced standard",
        "op@x.com asked operator",
    ] {
        assert!(all.contains(want), "{want:?} missing:\n{all}");
    }
    // The row in doubt settled as sent by d0 keeps d0's provider id; the one settled as
    // failed (d4) none.
    let j0_head = j0.split('@').next().unwrap_or(j0);
    let settled = format!("sent true Some(\"re-{j0_head}\")");
    assert!(all.contains(&settled), "{settled:?} missing:\n{all}");
    let failed = t
        .iter()
        .filter(|l| l.contains(" failed attempts "))
        .collect::<Vec<_>>();
    assert!(
        !failed.is_empty() && failed.iter().all(|l| l.contains(" None ")),
        "{all}"
    );
}

/// Every way a delivery report settles a row as sent gives the row the provider's message id
/// the report named (the first such report's), unless the row has one; a failure gives none:
/// the report arriving while the row is in doubt, a report kept while the row was leased and
/// then read by the worker parking it in doubt, or by the claim finding its lease expired.
#[test]
fn a_report_that_settles_a_row_as_sent_gives_it_its_provider_id_on_every_backend() {
    use sendonce::domain::webhook::{Effect, Event, Source};
    same_on_both(|s| {
        let mut t = Vec::new();
        let (acct, cid) = common::started_campaign(s, 5);
        while !s.build_list_chunk(cid, 7).unwrap() {}
        let req = |token: i64, now: i64| ClaimRequest {
            campaign_id: cid,
            account_id: acct,
            channel: Channel::Email,
            batch: 10,
            lease_ms: 1000,
            token,
            owner: format!("w{token}"),
            key_window_ms: None,
            now,
        };
        let report = |event: &str, job: &str, sent: bool, id: Option<&str>| {
            let e = Event {
                event_id: event.into(),
                kind: "test.kind".into(),
                job_id: Some(job.into()),
                address: None,
                effect: Effect::Delivery {
                    job_id: job.into(),
                    sent,
                    provider_id: id.map(str::to_string),
                },
            };
            format!(
                "{event}: {}",
                said(s.apply_webhook(acct, Source::Standard, &e, "h", now_ms()))
            )
        };
        let in_doubt = |r: &sendonce::store::ClaimedRow| Record {
            id: r.id,
            token: r.token,
            outcome: Outcome::InDoubt {
                error: "timed out".into(),
            },
        };
        let now = now_ms();
        let a = s.claim(&req(1, now)).unwrap();
        assert_eq!(a.rows.len(), 5);
        s.mark_dispatched(&keys(&a), now, 1000).unwrap();
        let job = |i: usize| a.rows[i].job_id.clone();
        // 0: parked in doubt by its worker, then reported delivered.
        t.push(said(s.record(&[in_doubt(&a.rows[0])], now + 1)));
        t.push(report("r0", &job(0), true, Some("pid-0")));
        // 1: reported delivered while leased, then parked in doubt by its worker.
        t.push(report("r1", &job(1), true, Some("pid-1")));
        t.push(said(s.record(&[in_doubt(&a.rows[1])], now + 2)));
        // 2: two reports while leased (the first names the message), the lease expires.
        t.push(report("r2a", &job(2), true, Some("pid-2")));
        t.push(report("r2b", &job(2), true, Some("pid-2-later")));
        // 3: a report naming no message, then one that does.
        t.push(report("r3a", &job(3), true, None));
        t.push(report("r3b", &job(3), true, Some("pid-3")));
        // 4: a failure naming the message.
        t.push(report("r4", &job(4), false, Some("pid-4")));
        let b = s.claim(&req(2, now + 10_000)).unwrap();
        t.push(format!(
            "claim: settled by webhook {} in doubt {} leased {}",
            b.settled_by_webhook,
            b.in_doubt,
            b.rows.len()
        ));
        let rows = s.report_page(cid, 0, 10).unwrap();
        let ids: Vec<(String, Option<String>)> = rows
            .iter()
            .map(|r| (r.status.clone(), r.provider_message_id.clone()))
            .collect();
        for r in &rows {
            t.push(format!(
                "{} {} {:?}",
                r.address, r.status, r.provider_message_id
            ));
        }
        let want = |st: &str, id: Option<&str>| (st.to_string(), id.map(str::to_string));
        assert_eq!(
            ids,
            vec![
                want("sent", Some("pid-0")),
                want("sent", Some("pid-1")),
                want("sent", Some("pid-2")),
                want("sent", Some("pid-3")),
                want("failed", None),
            ],
            "{t:#?}"
        );
        t
    });
}

// ---- Audience filters and `Audience` with lists: the same answers on every backend ----------
//
// Each store compiles a filter for its own dialect (`store/segment.rs`); these scripts seed the
// same subscribers, with attributes of every JSON type, on both stores and require the same
// audience counts, the same recipients built, and the same `matches_filter` for each filter.

/// The filters compared: every operator, missing and null attributes, `not`, nesting, numbers
/// against strings, booleans, dates, case and non-ASCII letters.
const FILTERS: &[&str] = &[
    r#"city = "Lisboa""#,
    r#"city != "Lisboa""#,
    r#"not city = "Lisboa""#,
    r#"city in ("Lisboa", "Porto")"#,
    r#"city not in ("Lisboa")"#,
    r#"not city in ("Lisboa", "Faro")"#,
    "has city",
    "has zone",
    "not has zone",
    "has name",
    "has phone",
    "has note",
    r#"note = "null""#,
    r#"n = "5""#,
    r#"n = "5.0""#,
    r#"n = "1000.0""#,
    r#"n != "5""#,
    r#"n in ("05", "-3", "7")"#,
    r#"score = "2.5" or score = "19.99""#,
    r#"vip = "1""#,
    r#"vip = "0" or vip = "true""#,
    r#"plan = "pro""#,
    r#"plan in ("PRO", "team")"#,
    r#"email = "BOB@x.org""#,
    r#"city = "évora""#,
    r#"city = "Évora" or name = "ÉLODIE""#,
    r#"name = "Ann" or (city = "Porto" and not has zone)"#,
    r#"(city = "Lisboa" or city = "Porto") and not (plan = "pro" or n = "5")"#,
    r#"tags = "[\"a\",\"b\"]" or has obj"#,
    r#"created_after "2000-01-01" and not created_before "2000-01-01T00:00:00Z""#,
    r#"created_after "2999-01-01""#,
];

/// An account with subscribers whose attributes hold strings, integers, reals, booleans,
/// `null`, an array and an object; one pending, one SMS only, one suppressed. Returns the
/// account and the subscribers' (id, email or phone).
fn filter_fixture(s: &Store) -> (i64, Vec<(i64, String)>) {
    use sendonce::store::NewSubscriber;
    let acct = s.add_account("f").unwrap();
    /// (email, phone, name, status, attrs)
    type Row<'a> = (
        Option<&'a str>,
        Option<&'a str>,
        Option<&'a str>,
        &'a str,
        &'a str,
    );
    let rows: [Row<'_>; 9] = [
        (
            Some("ann@x.org"),
            None,
            Some("Ann"),
            "confirmed",
            r#"{"city":"Lisboa","plan":"pro","n":5,"score":2.5,"vip":true}"#,
        ),
        (
            Some("Bob@X.org"),
            Some("+351910000001"),
            None,
            "confirmed",
            r#"{"city":"Porto","zone":"  ","n":"5","plan":"team"}"#,
        ),
        (Some("cy@x.org"), None, Some("Cy"), "confirmed", "{}"),
        (
            Some("elo@x.org"),
            None,
            Some("Élodie"),
            "confirmed",
            r#"{"city":"Évora","n":1e3,"score":19.99,"vip":false,"tags":["a","b"]}"#,
        ),
        (
            Some("dan@x.org"),
            None,
            Some("Dan"),
            "pending",
            r#"{"city":"évora","n":-3,"note":null}"#,
        ),
        (
            Some("eve@x.org"),
            Some("+351910000002"),
            None,
            "confirmed",
            r#"{"city":"Lisboa","n":5.0,"plan":"PRO","zone":"z"}"#,
        ),
        (
            None,
            Some("+351910000003"),
            Some("Sol"),
            "confirmed",
            r#"{"city":"Faro","n":7,"obj":{"k":1}}"#,
        ),
        (
            Some("fay@x.org"),
            None,
            Some("Fay"),
            "confirmed",
            r#"{"city":"Lisboa","plan":"pro","n":"05"}"#,
        ),
        (
            Some("sup@x.org"),
            None,
            None,
            "confirmed",
            r#"{"city":"Porto","n":5}"#,
        ),
    ];
    let mut out = Vec::new();
    for (email, phone, name, status, attrs) in rows {
        let sub = NewSubscriber {
            email: email.map(|e| (e.to_string(), e.to_lowercase())),
            phone: phone.map(str::to_string),
            name: name.map(str::to_string),
            status: status.to_string(),
            attrs: attrs.to_string(),
            consent: None,
        };
        let id = s.add_subscriber(acct, &sub, &[]).unwrap();
        out.push((id, email.or(phone).unwrap_or_default().to_lowercase()));
    }
    s.suppress(acct, Channel::Email, "sup@x.org", "test", "test")
        .unwrap();
    (acct, out)
}

/// For each filter: the audience counts on both channels, `matches_filter` of every
/// subscriber, and the recipients list building produces (address and state).
fn filter_script(s: &Store) -> Vec<String> {
    use sendonce::domain::segment::Filter;
    use sendonce::store::{AudienceQuery, NewCampaign};
    let (acct, subs) = filter_fixture(s);
    let mut out = Vec::new();
    for text in FILTERS {
        let f = Filter::parse(text).unwrap();
        for channel in [Channel::Email, Channel::Sms] {
            let q = AudienceQuery {
                account_id: acct,
                channel,
                lists: &[],
                filter: Some(&f),
            };
            out.push(format!(
                "{text} {channel:?}: {}",
                said(s.audience_counts_for(&q))
            ));
            let v = s.variable_counts_for(&q).map(|v| (v.total, v.present));
            out.push(format!("{text} {channel:?} vars: {}", said(v)));
        }
        let cid = s
            .create_campaign(&NewCampaign {
                account_id: acct,
                name: text,
                channel: Channel::Email,
                sender: None,
                subject: Some("s"),
                body: "b",
                html: None,
                reply_to: None,
                filter: Some(text),
                sms_footer: None,
                lists: &[],
                transactional: false,
                windows: &Default::default(),
            })
            .unwrap();
        let matching: Vec<&str> = subs
            .iter()
            .filter(|(id, _)| s.recipient(cid, *id).unwrap().matches_filter)
            .map(|(_, a)| a.as_str())
            .collect();
        out.push(format!("{text} matches: {matching:?}"));
        s.approve_campaign(cid, 0).unwrap();
        s.start_due_campaigns(now_ms()).unwrap();
        while !s.build_list_chunk(cid, 3).unwrap() {}
        let mut built: Vec<String> = Vec::new();
        s.report(cid, &mut |r| {
            built.push(format!("{} {}", r.address, r.status));
            Ok(())
        })
        .unwrap();
        built.sort();
        out.push(format!("{text} built: {built:?}"));
    }
    out
}

#[test]
fn audience_filters_pick_the_same_subscribers_on_every_backend() {
    // What SQLite answers for a few of them, so the comparison is not of two wrong answers.
    let env = common::Env::new();
    let s = (backends()[0].fresh)(&env);
    let got = filter_script(&s);
    let matches = |text: &str| -> String {
        let prefix = format!("{text} matches: ");
        got.iter()
            .find_map(|l| l.strip_prefix(&prefix).map(str::to_string))
            .unwrap()
    };
    assert_eq!(
        matches(r#"n = "5""#),
        r#"["ann@x.org", "bob@x.org", "sup@x.org"]"#
    );
    assert_eq!(matches(r#"n = "5.0""#), r#"["eve@x.org"]"#);
    assert_eq!(matches(r#"n = "1000.0""#), r#"["elo@x.org"]"#);
    assert_eq!(matches(r#"vip = "1""#), r#"["ann@x.org"]"#);
    assert_eq!(matches(r#"city = "évora""#), r#"["dan@x.org"]"#);
    assert_eq!(matches("has note"), "[]");
    assert_eq!(
        matches(r#"not city in ("Lisboa", "Faro")"#),
        r#"["bob@x.org", "cy@x.org", "elo@x.org", "dan@x.org", "sup@x.org"]"#
    );
    same_on_both(filter_script);
}

/// `Audience` with lists: adding into lists (an existing address only joins), importing into
/// lists with and without `skip_invalid`, double opt-in refused without links, a removed
/// subscriber added back under its id with its removal's suppression gone, attribute names,
/// and campaigns targeting lists (an unknown list refused).
fn audience_script(s: &Store) -> Vec<String> {
    use sendonce::store::{NewCampaign, NewList, OptIn};
    let mut out = Vec::new();
    let acct = s.add_account("a").unwrap();
    let other = s.add_account("other").unwrap();
    let list = |account: i64, name: &str, optin: OptIn| {
        s.create_list(&NewList {
            account_id: account,
            name,
            description: None,
            optin,
            public: false,
            confirm: Default::default(),
        })
        .unwrap()
    };
    let (la, lb) = (
        list(acct, "a", OptIn::Single),
        list(acct, "b", OptIn::Single),
    );
    let ld = list(acct, "d", OptIn::Double);
    let lo = list(other, "o", OptIn::Single);
    let sub = |email: &str, attrs: &[(&str, &str)]| {
        let attrs: Vec<(String, String)> = attrs
            .iter()
            .map(|(k, v)| (k.to_string(), v.to_string()))
            .collect();
        sendonce::app::import::subscriber(Some(email), None, None, Some("confirmed"), &attrs)
    };
    let x = s
        .add_subscriber_with(
            acct,
            &sub("x@x.org", &[("city", "Porto")]).unwrap(),
            &[la],
            None,
        )
        .unwrap();
    let again = s.add_subscriber_with(acct, &sub("X@x.org", &[]).unwrap(), &[lb], None);
    out.push(format!(
        "same subscriber joins: {}",
        said(again.map(|id| id == x))
    ));
    out.push(format!(
        "plain duplicate: {}",
        said(s.add_subscriber_with(acct, &sub("x@x.org", &[]).unwrap(), &[], None))
    ));
    out.push(format!(
        "list of another account: {}",
        said(s.add_subscriber_with(acct, &sub("y@x.org", &[]).unwrap(), &[lo], None))
    ));
    out.push(format!(
        "double opt-in without links: {}",
        said(s.add_subscriber_with(acct, &sub("y@x.org", &[]).unwrap(), &[ld], None))
    ));
    let rows = |bad: bool| {
        let mut v = vec![
            (2, sub("i1@x.org", &[("plan", "pro")])),
            (3, sub("x@x.org", &[])),
            (4, sub("i1@x.org", &[])),
        ];
        if bad {
            v.push((5, sub("not an address", &[])));
        }
        v
    };
    out.push(format!(
        "import all-or-nothing: {}",
        said(s.import_subscribers_with(acct, rows(true), false, &[lb], None))
    ));
    out.push(format!(
        "i1 after the failed import: {}",
        said(s.find_subscriber(acct, "i1@x.org").map(|r| r.email))
    ));
    let report = s.import_subscribers_with(acct, rows(true), true, &[lb], None);
    out.push(format!(
        "import skipping: {}",
        said(report.map(|r| (r.imported, r.existing, r.skipped)))
    ));
    out.push(format!(
        "lists: {}",
        said(s.lists(acct).map(|ls| {
            ls.iter()
                .map(|l| (l.name.clone(), l.subscribed, l.pending))
                .collect::<Vec<_>>()
        }))
    ));
    out.push(format!(
        "attribute names: {}",
        said(s.attribute_names(acct))
    ));
    out.push(format!("no attributes: {}", said(s.attribute_names(other))));
    // A removed subscriber comes back under its id, its removal's suppression gone.
    s.remove_subscriber(acct, x).unwrap();
    out.push(format!(
        "suppressed after removal: {}",
        said(s.suppressions(acct).map(|v| v.len()))
    ));
    let back = s.add_subscriber_with(
        acct,
        &sub("x@x.org", &[("city", "Faro")]).unwrap(),
        &[],
        None,
    );
    out.push(format!(
        "back under its id: {}",
        said(back.map(|id| id == x))
    ));
    out.push(format!(
        "suppressed after return: {}",
        said(s.suppressions(acct).map(|v| v.len()))
    ));
    out.push(format!(
        "returned row: {}",
        said(
            s.find_subscriber(acct, "x@x.org")
                .map(|r| (r.status, r.attrs))
        )
    ));
    let campaign = |lists: &[i64]| {
        s.create_campaign(&NewCampaign {
            account_id: acct,
            name: "c",
            channel: Channel::Email,
            sender: None,
            subject: Some("s"),
            body: "b",
            html: None,
            reply_to: None,
            filter: None,
            sms_footer: None,
            lists,
            transactional: false,
            windows: &Default::default(),
        })
    };
    out.push(format!(
        "campaign to another account's list: {}",
        said(campaign(&[la, lo]))
    ));
    let cid = campaign(&[lb, la]).unwrap();
    out.push(format!(
        "campaign lists: {}",
        said(s.campaign_lists(cid).map(|v| v == vec![la, lb]))
    ));
    out.push(format!("audience: {}", said(s.audience_counts(cid))));
    out
}

#[test]
fn audience_with_lists_answers_the_same_on_every_backend() {
    let env = common::Env::new();
    let s = (backends()[0].fresh)(&env);
    let got = audience_script(&s);
    assert_eq!(got[0], "same subscriber joins: ok true", "{got:#?}");
    assert!(
        got.iter().any(|l| l == "back under its id: ok true"),
        "{got:#?}"
    );
    same_on_both(audience_script);
}

/// An import row the database itself refuses (its email names a removed subscriber, revived
/// with a phone another subscriber has: a unique index says no) is skipped with
/// `skip_invalid` on SQLite, whose transaction goes on; on PostgreSQL the refused statement
/// ended the transaction, so the import fails whole and writes nothing (it never reports rows
/// as imported that its commit did not keep).
#[test]
fn an_import_row_the_database_refuses_is_skipped_only_where_the_transaction_goes_on() {
    for b in ledger_backends() {
        let env = common::Env::new();
        let s = (b.fresh)(&env);
        let acct = s.add_account("a").unwrap();
        let new = |email: Option<&str>, phone: Option<&str>| {
            sendonce::app::import::subscriber(email, phone, None, Some("confirmed"), &[]).unwrap()
        };
        let gone = s
            .add_subscriber(acct, &new(Some("a@x.org"), None), &[])
            .unwrap();
        s.add_subscriber(acct, &new(None, Some("+351912345678")), &[])
            .unwrap();
        s.remove_subscriber(acct, gone).unwrap();
        let rows = vec![
            (2, Ok(new(Some("a@x.org"), Some("+351912345678")))),
            (3, Ok(new(Some("c@x.org"), None))),
        ];
        let report = s.import_subscribers(acct, rows, true, &[]);
        let kept = s.find_subscriber(acct, "c@x.org").map(|r| r.id);
        if b.name == "postgresql" {
            let e = report.expect_err("PostgreSQL cannot go on after a refused statement");
            assert_eq!(
                e.kind,
                sendonce::error::ErrorKind::Database,
                "{}",
                e.message
            );
            assert!(kept.is_err(), "{}: {kept:?}", b.name);
        } else {
            let r = report.expect("SQLite skips the refused row");
            assert_eq!((r.imported, r.existing, r.skipped.len()), (1, 0, 1));
            assert_eq!(r.skipped[0].line, 2);
            assert!(kept.is_ok(), "{}: {kept:?}", b.name);
        }
    }
}

// ---- Logins: the dashboard's admins and sessions, on both backends --------------------------

/// The `Logins` contract with a clock the test holds (the `now` arguments): create (duplicate
/// name, unknown account), list per account, sessions that expire, go idle and have their
/// `last_seen_at` written at most once per `seen_every`, a new password and a removal that end
/// every session, and a removed admin that cannot be found to log in.
#[test]
fn logins_and_sessions_keep_their_contract_on_every_backend() {
    use sendonce::error::ErrorKind;
    use sendonce::store::NewLogin;
    for b in ledger_backends() {
        let env = common::Env::new();
        let s = (b.fresh)(&env);
        let name = b.name;
        let acme = s.add_account("acme").unwrap();
        let other = s.add_account("other").unwrap();
        let new = |account_id, name, password_hash| NewLogin {
            account_id,
            name,
            password_hash,
            created_at: 1_000,
            operator: false,
        };
        let ana = s.create_login(&new(acme, "ana", "$argon2id$h1")).unwrap();
        let al = s.create_login(&new(acme, "al", "$argon2id$h2")).unwrap();
        let bo = s
            .create_login(&NewLogin {
                operator: true,
                ..new(other, "bo", "$argon2id$h3")
            })
            .unwrap();
        let operators: Vec<(String, bool)> = s
            .logins(None)
            .unwrap()
            .into_iter()
            .map(|r| (r.name, r.operator))
            .collect();
        assert_eq!(
            operators,
            [
                ("ana".into(), false),
                ("al".into(), false),
                ("bo".into(), true)
            ],
            "{name}"
        );
        let dup = s
            .create_login(&new(other, "ana", "$argon2id$h4"))
            .unwrap_err();
        assert_eq!(dup.kind, ErrorKind::Conflict, "{name}: {dup}");
        let nobody = s
            .create_login(&new(9_999, "zed", "$argon2id$h5"))
            .unwrap_err();
        assert_eq!(nobody.kind, ErrorKind::NotFound, "{name}: {nobody}");
        let names = |acct| -> Vec<String> {
            s.logins(acct)
                .unwrap()
                .into_iter()
                .map(|r| r.name)
                .collect()
        };
        assert_eq!(names(Some(acme)), ["ana", "al"], "{name}");
        assert_eq!(names(Some(other)), ["bo"], "{name}");
        assert_eq!(names(None), ["ana", "al", "bo"], "{name}");
        let row = s.login_by_name("ana").unwrap().expect("ana");
        assert_eq!(
            (row.id, row.account_id, row.password_hash.as_str()),
            (ana, acme, "$argon2id$h1"),
            "{name}"
        );
        assert!(s.login_by_name("nobody").unwrap().is_none(), "{name}");

        // A session: live until it expires or idles, last_seen_at written at most once per
        // `seen_every`.
        let (idle, every) = (10_000, 1_000);
        let t0 = 5_000_000;
        let h1 = [1u8; 32];
        s.create_session(ana, &h1, t0, t0 + 50_000).unwrap();
        let seen = |now| {
            s.session(&h1, now, idle, every)
                .unwrap()
                .map(|r| r.last_seen_at)
        };
        let live = s.session(&h1, t0 + 10, idle, every).unwrap().expect("live");
        assert_eq!(
            (
                live.login.id,
                live.created_at,
                live.expires_at,
                live.last_seen_at
            ),
            (ana, t0, t0 + 50_000, t0),
            "{name}"
        );
        assert_eq!(seen(t0 + every - 1), Some(t0), "{name}: written too soon");
        assert_eq!(seen(t0 + every), Some(t0 + every), "{name}: not written");
        assert_eq!(seen(t0 + every + 500), Some(t0 + every), "{name}");
        let last = t0 + every;
        assert_eq!(seen(last + idle - 1), Some(last + idle - 1), "{name}");
        let last = last + idle - 1;
        assert_eq!(seen(last + idle), None, "{name}: idle too long, still live");
        // Expiry: seen often enough, the session still ends at expires_at.
        let h2 = [2u8; 32];
        s.create_session(al, &h2, t0, t0 + 3 * every).unwrap();
        for k in 1..3 {
            assert!(
                s.session(&h2, t0 + k * every, idle, every)
                    .unwrap()
                    .is_some(),
                "{name}"
            );
        }
        assert!(
            s.session(&h2, t0 + 3 * every, idle, every)
                .unwrap()
                .is_none(),
            "{name}: expired, still live"
        );
        assert!(
            s.session(&[9u8; 32], t0, idle, every).unwrap().is_none(),
            "{name}"
        );

        // end_session ends one session only; an unknown hash is no error.
        let (h3, h4) = ([3u8; 32], [4u8; 32]);
        s.create_session(bo, &h3, t0, t0 + 50_000).unwrap();
        s.create_session(bo, &h4, t0, t0 + 50_000).unwrap();
        s.end_session(&h3).unwrap();
        s.end_session(&[8u8; 32]).unwrap();
        assert!(
            s.session(&h3, t0 + 1, idle, every).unwrap().is_none(),
            "{name}"
        );
        assert!(
            s.session(&h4, t0 + 1, idle, every).unwrap().is_some(),
            "{name}"
        );

        // A new password ends every session of its admin (not another admin's).
        let h5 = [5u8; 32];
        s.create_session(ana, &h5, t0, t0 + 50_000).unwrap();
        s.create_session(al, &[6u8; 32], t0, t0 + 50_000).unwrap();
        let changed = s.set_password("ana", "$argon2id$new").unwrap();
        assert_eq!(changed.id, ana, "{name}");
        assert!(
            s.session(&h5, t0 + 1, idle, every).unwrap().is_none(),
            "{name}"
        );
        assert!(
            s.session(&[6u8; 32], t0 + 1, idle, every)
                .unwrap()
                .is_some(),
            "{name}"
        );
        let row = s.login_by_name("ana").unwrap().expect("ana");
        assert_eq!(row.password_hash, "$argon2id$new", "{name}");
        let e = s.set_password("nobody", "$argon2id$x").unwrap_err();
        assert_eq!(e.kind, ErrorKind::NotFound, "{name}: {e}");

        // Removal: sessions end, no login by name, still listed, the name is not reused.
        let removed = s.remove_login("bo", t0 + 7).unwrap();
        assert_eq!(
            (removed.id, removed.removed_at),
            (bo, Some(t0 + 7)),
            "{name}"
        );
        assert!(
            s.session(&h4, t0 + 2, idle, every).unwrap().is_none(),
            "{name}"
        );
        assert!(s.login_by_name("bo").unwrap().is_none(), "{name}");
        let listed = s.logins(Some(other)).unwrap();
        assert_eq!(listed.len(), 1, "{name}");
        assert_eq!(listed[0].removed_at, Some(t0 + 7), "{name}");
        for e in [
            s.remove_login("bo", t0 + 8).unwrap_err(),
            s.set_password("bo", "$argon2id$y").unwrap_err(),
        ] {
            assert_eq!(e.kind, ErrorKind::NotFound, "{name}: {e}");
        }
        let again = s
            .create_login(&new(other, "bo", "$argon2id$z"))
            .unwrap_err();
        assert_eq!(again.kind, ErrorKind::Conflict, "{name}: {again}");
        // A session made for a removed admin is not live either.
        let _ = s.create_session(bo, &[7u8; 32], t0, t0 + 50_000);
        assert!(
            s.session(&[7u8; 32], t0 + 1, idle, every)
                .unwrap()
                .is_none(),
            "{name}"
        );
    }
}

/// The dashboard's recipients search (`report_search`): an address prefix (a range, never a
/// LIKE pattern), a send state, both, keyset pages on the send id, the same on every backend.
#[test]
fn a_report_search_narrows_by_prefix_and_state_the_same_on_every_backend() {
    use sendonce::domain::model::SendStatus;
    use sendonce::store::ReportSearch;
    for b in ledger_backends() {
        let f = Fixture::new(&b, 12);
        let t0 = now_ms();
        let a = f.claim(12, 1, t0, None);
        let u1 = a.rows.iter().find(|r| r.address == "u1@x.com").unwrap();
        let u3 = a.rows.iter().find(|r| r.address == "u3@x.com").unwrap();
        f.s.record(&[failed(u1.id, 1), accepted(u3.id, 1)], t0 + 1)
            .unwrap();
        let search = |prefix: Option<&str>, status: Option<SendStatus>, after: i64, limit| {
            let q = ReportSearch {
                prefix: prefix.map(str::to_string),
                status,
                after,
                limit,
            };
            let rows = f.s.report_search(f.cid, &q).unwrap();
            assert!(rows.windows(2).all(|w| w[0].send_id < w[1].send_id));
            rows.into_iter()
                .map(|r| (r.send_id, r.address, r.status))
                .collect::<Vec<_>>()
        };
        let ones = search(Some("u1"), None, 0, 100);
        let addrs: HashSet<&str> = ones.iter().map(|r| r.1.as_str()).collect();
        assert_eq!(
            addrs,
            HashSet::from(["u1@x.com", "u10@x.com", "u11@x.com"]),
            "{}",
            f.backend
        );
        let first = search(Some("u1"), None, 0, 2);
        let rest = search(Some("u1"), None, first[1].0, 2);
        assert_eq!((first.len(), rest.len()), (2, 1), "{}", f.backend);
        assert_eq!(rest[0], ones[2], "{}", f.backend);
        assert_eq!(
            search(None, Some(SendStatus::Failed), 0, 100),
            vec![(u1.id, "u1@x.com".to_string(), "failed".to_string())],
            "{}",
            f.backend
        );
        assert_eq!(search(None, Some(SendStatus::Sent), 0, 100).len(), 1);
        assert_eq!(search(None, Some(SendStatus::Leased), 0, 100).len(), 10);
        assert_eq!(
            search(Some("u1"), Some(SendStatus::Leased), 0, 100).len(),
            2
        );
        assert!(search(Some("u_"), None, 0, 100).is_empty(), "{}", f.backend);
        assert!(search(Some("u%"), None, 0, 100).is_empty(), "{}", f.backend);
        assert!(search(Some("x"), None, 0, 100).is_empty(), "{}", f.backend);
        assert_eq!(search(None, None, 0, 100).len(), 12, "{}", f.backend);
        assert_eq!(
            f.s.report_search(4242, &ReportSearch::default())
                .unwrap_err()
                .kind,
            sendonce::error::ErrorKind::NotFound,
            "{}",
            f.backend
        );
    }
}

/// A row waiting to retry a call that may have been delivered (`doubt_since`) goes in doubt
/// when its campaign is cancelled, not cancelled: it may have gone. The other queued rows are
/// cancelled.
#[test]
fn cancelling_a_campaign_puts_a_retry_that_may_have_gone_in_doubt_on_every_backend() {
    for b in ledger_backends() {
        let f = Fixture::new(&b, 3);
        let t0 = now_ms();
        let c = f.claim(1, 1, t0, None);
        f.s.mark_dispatched(&keys(&c), t0, 60_000).unwrap();
        let retry = Record {
            id: c.rows[0].id,
            token: c.rows[0].token,
            outcome: Outcome::Retry {
                error: "timed out after the request was sent".into(),
                retry_at: t0 + 3_600_000,
                maybe_delivered: true,
            },
        };
        f.s.record(&[retry], t0).unwrap();
        assert_eq!(f.count("queued"), 3, "{}", f.backend);
        f.s.cancel_campaign(f.cid).unwrap();
        assert_eq!(
            (f.count("in_doubt"), f.count("cancelled"), f.count("queued")),
            (1, 2, 0),
            "{}: the retry that may have gone is in doubt",
            f.backend
        );
        let doubt = f.s.account_doubts(f.acct, (0, 0), 10).unwrap();
        assert_eq!(doubt.len(), 1, "{}", f.backend);
        assert_eq!(doubt[0].send_id, c.rows[0].id, "{}", f.backend);
        let why = doubt[0].reason.as_deref().unwrap_or_default();
        assert!(
            why.contains("cancelled while a retry"),
            "{}: {why}",
            f.backend
        );
    }
}

/// The dashboard's account-wide queue of rows in doubt: paged by (campaign, send) on every
/// backend, never another account's rows; delivery reports looked up per job.
#[test]
fn rows_in_doubt_of_an_account_are_paged_on_every_backend() {
    for b in ledger_backends() {
        let f = Fixture::new(&b, 5);
        let t0 = now_ms();
        let c = f.claim(10, 1, t0, None);
        assert_eq!(c.rows.len(), 5, "{}", f.backend);
        f.s.mark_dispatched(&keys(&c), t0, 1000).unwrap();
        let later = f.claim(10, 2, t0 + 10_000, None);
        assert_eq!(later.in_doubt, 5, "{}", f.backend);
        let mut seen = Vec::new();
        let mut after = (0, 0);
        loop {
            let page = f.s.account_doubts(f.acct, after, 2).unwrap();
            assert!(page.len() <= 2, "{}", f.backend);
            let Some(last) = page.last() else { break };
            after = (last.campaign_id, last.send_id);
            for r in &page {
                assert_eq!(r.campaign_id, f.cid, "{}", f.backend);
                assert_eq!(r.channel, "email", "{}", f.backend);
                assert_eq!(r.attempts, 1, "{}", f.backend);
                assert!(r.doubt_since.is_some(), "{}", f.backend);
            }
            seen.extend(page.iter().map(|r| r.send_id));
        }
        let mut want: Vec<i64> = c.rows.iter().map(|r| r.id).collect();
        want.sort();
        assert_eq!(seen, want, "{}: every row once, in order", f.backend);
        assert!(
            f.s.account_doubts(f.acct + 1000, (0, 0), 10)
                .unwrap()
                .is_empty(),
            "{}",
            f.backend
        );
        let first = f.s.account_doubts(f.acct, (0, 0), 10).unwrap();
        let jobs: Vec<String> = first.iter().map(|r| r.job_id.clone()).collect();
        assert!(f.s.delivery_events(f.acct, &jobs).unwrap().is_empty());
        let too_many = vec!["j".to_string(); 101];
        assert!(
            f.s.delivery_events(f.acct, &too_many).is_err(),
            "{}",
            f.backend
        );
        f.s.resolve_doubt_by(want[0], true, "ana (dashboard)")
            .unwrap();
        let rest = f.s.account_doubts(f.acct, (0, 0), 10).unwrap();
        assert_eq!(rest.len(), 4, "{}", f.backend);
        assert_eq!(rest[0].send_id, want[1], "{}", f.backend);
    }
}

/// The dashboard's keyset pages: a list's members in id order and by address prefix, and
/// suppressions in key order and by prefix, each page after the previous one's last key.
fn pages_script(s: &Store) -> Vec<String> {
    use sendonce::store::{MemberOrder, MemberPage, NewList, OptIn, SuppressionPage};
    let mut out = Vec::new();
    let acct = s.add_account("acme").unwrap();
    let other = s.add_account("other").unwrap();
    let list = s
        .create_list(&NewList {
            account_id: acct,
            name: "news",
            description: None,
            optin: OptIn::Single,
            public: false,
            confirm: Default::default(),
        })
        .unwrap();
    for (i, e) in ["bob@x.org", "ann@x.org", "abe@y.org", "carl@x.org"]
        .iter()
        .enumerate()
    {
        let sub = sendonce::app::import::subscriber(
            Some(e),
            Some(&format!("+4520123{i:03}")),
            None,
            None,
            &[],
        )
        .unwrap();
        s.add_subscriber(acct, &sub, &[list]).unwrap();
    }
    let outsider =
        sendonce::app::import::subscriber(Some("ann@z.org"), None, None, None, &[]).unwrap();
    s.add_subscriber(other, &outsider, &[]).unwrap();
    let page = |order, limit| {
        s.list_members(&MemberPage {
            account_id: acct,
            list_id: list,
            membership: None,
            order,
            limit,
        })
        .map(|rows| {
            rows.iter()
                .map(|r| format!("{:?} {}", r.email_norm, r.membership))
                .collect::<Vec<_>>()
        })
    };
    out.push(format!(
        "ids: {}",
        said(page(MemberOrder::Id { after: 0 }, 2))
    ));
    out.push(format!(
        "ids after 2: {}",
        said(page(MemberOrder::Id { after: 2 }, 2))
    ));
    for (prefix, after) in [
        ("a", None),
        ("a", Some("abe@y.org")),
        ("an", None),
        ("z", None),
    ] {
        out.push(format!(
            "email {prefix} after {after:?}: {}",
            said(page(MemberOrder::Email { prefix, after }, 10))
        ));
    }
    out.push(format!(
        "phone: {}",
        said(page(
            MemberOrder::Phone {
                prefix: "+452012300",
                after: Some("+4520123000")
            },
            10
        ))
    ));
    for a in ["b@x.org", "a@x.org", "ab@x.org", "c@x.org"] {
        s.suppress(acct, Channel::Email, a, "r", "manual").unwrap();
    }
    s.suppress(acct, Channel::Sms, "+4511", "r", "manual")
        .unwrap();
    s.suppress(other, Channel::Email, "a@other.org", "r", "manual")
        .unwrap();
    let sup = |search, after, limit| {
        s.suppressions_page(&SuppressionPage {
            account_id: acct,
            search,
            after,
            limit,
        })
        .map(|rows| {
            rows.iter()
                .map(|r| format!("{} {}", r.channel, r.address))
                .collect::<Vec<_>>()
        })
    };
    out.push(format!("sup: {}", said(sup(None, None, 3))));
    out.push(format!(
        "sup after: {}",
        said(sup(None, Some((Channel::Email, "b@x.org")), 3))
    ));
    out.push(format!(
        "sup a: {}",
        said(sup(Some((Channel::Email, "a")), None, 10))
    ));
    out.push(format!(
        "sup a after a@x.org: {}",
        said(sup(
            Some((Channel::Email, "a")),
            Some((Channel::Email, "a@x.org")),
            10
        ))
    ));
    // Prefixes whose byte-order upper bound ("z" -> "{", "zoe9" -> "zoe:") sorts before the
    // prefix under a linguistic collation (ICU puts punctuation before digits and letters).
    let zoe = sendonce::app::import::subscriber(Some("zoe9@x.org"), None, None, None, &[]).unwrap();
    s.add_subscriber(acct, &zoe, &[list]).unwrap();
    s.suppress(acct, Channel::Email, "z9@x.org", "r", "manual")
        .unwrap();
    for prefix in ["z", "zoe9"] {
        out.push(format!(
            "email {prefix}: {}",
            said(page(
                MemberOrder::Email {
                    prefix,
                    after: None
                },
                10
            ))
        ));
    }
    for prefix in ["z", "z9"] {
        out.push(format!(
            "sup {prefix}: {}",
            said(sup(Some((Channel::Email, prefix)), None, 10))
        ));
    }
    out
}

#[test]
fn dashboard_pages_answer_the_same_on_every_backend() {
    let env = common::Env::new();
    let s = (backends()[0].fresh)(&env);
    let got = pages_script(&s);
    assert_eq!(
        got[3], "email a after Some(\"abe@y.org\"): ok [\"Some(\\\"ann@x.org\\\") subscribed\"]",
        "{got:#?}"
    );
    assert_eq!(
        got[9], "sup a: ok [\"email a@x.org\", \"email ab@x.org\"]",
        "{got:#?}"
    );
    assert_eq!(
        got[got.len() - 3],
        "email zoe9: ok [\"Some(\\\"zoe9@x.org\\\") subscribed\"]",
        "{got:#?}"
    );
    assert_eq!(
        got[got.len() - 1],
        "sup z9: ok [\"email z9@x.org\"]",
        "{got:#?}"
    );
    same_on_both(pages_script);
}

/// The same pages on a PostgreSQL database whose collation is linguistic (ICU, en-US), where a
/// prefix is not a range of the column's order: they must still find every match, in the
/// order SQLite gives.
#[cfg(feature = "tier1")]
#[test]
fn dashboard_pages_are_exact_under_a_linguistic_collation() {
    let env = common::Env::new();
    let want = pages_script(&(backends()[0].fresh)(&env));
    let pg = common::pg::shared();
    pg.psql(
        "postgres",
        "CREATE DATABASE icu_pages TEMPLATE template0 LOCALE_PROVIDER icu ICU_LOCALE 'en-US'
         LOCALE 'C.utf8'",
    );
    let opts = OpenOptions {
        create: true,
        ..Default::default()
    };
    let s = sendonce::store::open(
        &sendonce::store::Target::parse(std::path::Path::new(&pg.url("icu_pages"))),
        &opts,
    )
    .expect("open the ICU database");
    assert_eq!(
        pg.psql("icu_pages", "SELECT 'zoe:' < 'zoe9' AND 'z{' < 'za'")
            .trim(),
        "t",
        "the database's collation must put punctuation first for this test to mean anything"
    );
    let got = pages_script(&s);
    for (i, (w, g)) in want.iter().zip(&got).enumerate() {
        assert_eq!(
            w, g,
            "step {i}: SQLite said the first, PostgreSQL (ICU) the second"
        );
    }
    assert_eq!(want.len(), got.len());
}

/// A started email campaign with its list built, to `people` (address, `tz` attribute), sent
/// only between 09:00 and 17:00 in each one's zone (else `zone`); and how to ask it for a
/// claim at `now` with fence `token` and the provider's key window.
struct Windowed {
    s: Arc<Store>,
    acct: i64,
    cid: i64,
}

impl Windowed {
    fn new(b: &Backend, env: &common::Env, people: &[(&str, Option<&str>)], zone: &str) -> Self {
        use sendonce::store::SendWindows;
        let s = (b.fresh)(env);
        let acct = s.add_account("t").unwrap();
        let rows = people
            .iter()
            .enumerate()
            .map(|(i, (email, tz))| {
                let attrs: Vec<(String, String)> = tz
                    .iter()
                    .map(|z| ("tz".to_string(), z.to_string()))
                    .collect();
                let sub = sendonce::app::import::subscriber(Some(email), None, None, None, &attrs);
                (i as u64 + 2, sub)
            })
            .collect();
        s.import_subscribers(acct, rows, false, &[]).unwrap();
        let windows = SendWindows {
            tz: Some(zone.into()),
            window: Some("09:00-17:00".into()),
            sms_hours: None,
        };
        let cid = s
            .create_campaign(&sendonce::store::NewCampaign {
                account_id: acct,
                name: "w",
                channel: Channel::Email,
                sender: None,
                subject: Some("s"),
                body: "b",
                html: None,
                reply_to: None,
                filter: None,
                sms_footer: None,
                lists: &[],
                transactional: false,
                windows: &windows,
            })
            .unwrap();
        assert_eq!(s.campaign(cid).unwrap().windows, windows, "{}", b.name);
        s.approve_campaign(cid, 0).unwrap();
        s.start_due_campaigns(now_ms()).unwrap();
        while !s.build_list_chunk(cid, 10).unwrap() {}
        Windowed { s, acct, cid }
    }

    fn claim(&self, now: &str, token: i64, key_window_ms: Option<i64>) -> Claimed {
        let req = ClaimRequest {
            campaign_id: self.cid,
            account_id: self.acct,
            channel: Channel::Email,
            batch: 10,
            lease_ms: 1000,
            token,
            owner: format!("w{token}"),
            key_window_ms,
            now: at(now),
        };
        self.s.claim(&req).unwrap()
    }

    /// Dispatch (call) row `id` under `token` at `now`, with a one-second lease.
    fn dispatch(&self, id: i64, token: i64, now: &str) {
        self.s
            .mark_dispatched(&[(id, token)], at(now), 1000)
            .unwrap();
    }
}

/// Unix ms of an RFC 3339 instant.
fn at(s: &str) -> i64 {
    sendonce::domain::clock::parse_rfc3339_ms(s).unwrap()
}

fn addresses(c: &Claimed) -> Vec<&str> {
    c.rows.iter().map(|r| r.address.as_str()).collect()
}

/// Send windows at claim, on every backend, with the clock the caller gives the claim: a row
/// whose recipient is outside the campaign's window (in its `tz` attribute's zone, else the
/// campaign's) is not leased and becomes due exactly when the window opens there; a lease that
/// expired undispatched is held the same way.
#[test]
fn a_claim_holds_rows_outside_their_send_window_until_it_opens() {
    for b in ledger_backends() {
        let env = common::Env::new();
        let people = [
            ("utc@x.com", None),
            ("tokyo@x.com", Some("Asia/Tokyo")),
            ("la@x.com", Some("America/Los_Angeles")),
        ];
        let w = Windowed::new(&b, &env, &people, "UTC");
        // 20:00 UTC: 12:00 in Los Angeles (open), 05:00 in Tokyo, 20:00 for the one without tz.
        let c = w.claim("2027-01-10T20:00:00Z", 1, None);
        assert_eq!(addresses(&c), ["la@x.com"], "{}", b.name);
        let first_open = Some(at("2027-01-11T00:00:00Z"));
        assert_eq!((c.held, c.held_until), (2, first_open), "{}", b.name);
        // Los Angeles' row is dispatched, then its worker dies: its lease expires.
        let la = c.rows[0].id;
        w.dispatch(la, 1, "2027-01-10T20:00:00Z");
        // 23:59 UTC: Tokyo is not due yet; LA's row, possibly delivered, is 15:59 there:
        // inside, retried under the same key.
        let year = Some(365 * 24 * 3_600_000);
        let c = w.claim("2027-01-10T23:59:00Z", 2, year);
        assert_eq!(addresses(&c), ["la@x.com"], "{}", b.name);
        assert!(c.rows[0].maybe_delivered, "{}", b.name);
        w.dispatch(la, 2, "2027-01-10T23:59:00Z");
        // 00:00 UTC: 09:00 in Tokyo. LA's retry expired again, without a key window now.
        let c = w.claim("2027-01-11T00:00:00Z", 3, None);
        assert_eq!(c.in_doubt, 1, "{}: LA's row", b.name);
        assert_eq!(addresses(&c), ["tokyo@x.com"], "{}", b.name);
        assert_eq!(c.held, 0, "{}", b.name);
        let tokyo = c.rows[0].id;
        // 08:59 UTC: the one without tz is still not due; Tokyo's row, leased at 00:00 and
        // never dispatched (its worker died), is 17:59 there: held until tomorrow 09:00.
        let c = w.claim("2027-01-11T08:59:59Z", 4, None);
        assert!(c.rows.is_empty(), "{}", b.name);
        let tomorrow = Some(at("2027-01-12T00:00:00Z"));
        assert_eq!((c.held, c.held_until), (1, tomorrow), "{}", b.name);
        // The hold gave that lease up: its old holder can no longer dispatch it.
        let late =
            w.s.mark_dispatched(&[(tokyo, 3)], at("2027-01-11T09:00:00Z"), 1000);
        assert_eq!(late.unwrap(), Vec::<i64>::new(), "{}", b.name);
        let c = w.claim("2027-01-11T09:00:00Z", 5, None);
        assert_eq!(addresses(&c), ["utc@x.com"], "{}", b.name);
    }
}

/// A possibly delivered row whose window is closed when its lease expires is held, not
/// retried, even inside the key window; when the window opens after the provider's key window
/// it goes in doubt instead of being called again.
#[test]
fn a_possibly_delivered_row_outside_its_window_waits_and_then_goes_in_doubt() {
    for b in ledger_backends() {
        let env = common::Env::new();
        let w = Windowed::new(&b, &env, &[("u@x.com", None)], "Europe/Lisbon");
        let three_hours = Some(3 * 3_600_000);
        // 16:59 in Lisbon (winter: UTC): leased and dispatched; the lease expires.
        let c = w.claim("2027-01-11T16:59:00Z", 1, three_hours);
        assert_eq!(c.rows.len(), 1, "{}", b.name);
        w.dispatch(c.rows[0].id, 1, "2027-01-11T16:59:00Z");
        // 17:30: inside the key window but outside the send window: held, not retried.
        let c = w.claim("2027-01-11T17:30:00Z", 2, three_hours);
        assert!(c.rows.is_empty(), "{}", b.name);
        assert_eq!((c.held, c.in_doubt), (1, 0), "{}", b.name);
        let opens = Some(at("2027-01-12T09:00:00Z"));
        assert_eq!(w.s.next_visible(w.cid).unwrap(), opens, "{}", b.name);
        // 09:00 next day: the key window (3 h) has passed: in doubt, never called again.
        let c = w.claim("2027-01-12T09:00:00Z", 3, three_hours);
        assert!(c.rows.is_empty(), "{}", b.name);
        assert_eq!(c.in_doubt, 1, "{}", b.name);
    }
}
