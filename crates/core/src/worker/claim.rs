//! The turn's one commit: the outcomes of finished calls plus a claim sized to the call slots
//! free right now (worker cap, route cap, rate-limit tokens), whose rows carry their dispatch
//! marker; then a call task per claimed row.

use super::calls::Flight;
use super::engine::{blocking, Worker};
use super::TARGET;
use crate::provider::{CallResult, Capabilities, Message, Provider};
use crate::worker::routes::Route;
use sendonce_domain::attachment::Attachment;
use sendonce_domain::error::{Error, Result};
use sendonce_domain::model::idempotency_key;
use sendonce_domain::template::{CampaignVars, Compiled, Rendered, Sources};
use sendonce_store::{ClaimRequest, ClaimedRow};
use std::sync::Arc;
use std::time::Duration;

/// What one campaign (or stream) asks of the turn's claim: its route, its compiled template
/// and the call slots its route has this turn (rate-limit tokens already taken for them).
struct Ask {
    i: usize,
    route: Arc<Route>,
    tpl: Arc<Compiled>,
    slots: usize,
    /// Its route's place among the turn's routes: the asks on one route share its slots.
    pool: usize,
}

/// Identity of a route, for per-route in-flight counts.
fn route_key(r: &Arc<Route>) -> usize {
    Arc::as_ptr(r) as *const () as usize
}

fn random_token() -> i64 {
    (uuid::Uuid::new_v4().as_u128() as i64) & i64::MAX
}

impl Worker {
    /// One commit per turn: the outcomes of finished calls, and one claim across every
    /// campaign and stream with free call slots, sized to the slots free right now, whose rows
    /// carry their dispatch marker (they are called as soon as the commit returns). So at any
    /// moment at most `concurrency` rows are dispatched without a recorded outcome: that bounds
    /// what a crash can leave in doubt. The campaign asked first changes every turn, so none
    /// takes every slot turn after turn. Returns true when rows were claimed.
    pub(super) async fn cycle(&mut self) -> Result<bool> {
        self.rate_wait = None;
        let free = self.cfg.concurrency.saturating_sub(self.calls.len());
        let turn = match !self.stopping && free > 0 {
            true => self.asks(free).await?,
            false => Default::default(),
        };
        if !turn.0.is_empty() {
            return self.claim(turn, free).await;
        }
        // Outcomes that no claim carried this turn (stopping, or no free slot or token): their
        // own commit, so a confirmation never waits for the next claim.
        if !self.outcomes.is_empty() && !self.calls.is_empty() {
            self.flush().await?;
        }
        Ok(false)
    }

    /// What each campaign with a route that has free slots and rate-limit tokens asks of this
    /// turn's claim, starting with the next one in turn. The slots (and tokens) are taken once
    /// per route, and the campaigns on a route share them in the claim: a campaign with nothing
    /// due holds none of them. Returns the asks and each route's slots (the asks' `pool`).
    async fn asks(&mut self, free: usize) -> Result<(Vec<Ask>, Vec<(Arc<Route>, usize)>)> {
        let n = self.campaigns.len();
        let start = self.rr;
        self.rr = self.rr.wrapping_add(1);
        let mut pools: Vec<(Arc<Route>, usize)> = Vec::new();
        let mut asks = Vec::new();
        for k in 0..n {
            let i = (start + k) % n;
            let Some(route) = self.campaign_routes.get(&self.campaigns[i].id).cloned() else {
                continue;
            };
            let pool = match pools.iter().position(|(r, _)| Arc::ptr_eq(r, &route)) {
                Some(p) => p,
                None => {
                    let slots = self.slots(&route, free).await?;
                    pools.push((route.clone(), slots));
                    pools.len() - 1
                }
            };
            if pools[pool].1 == 0 {
                continue;
            }
            // The template is compiled before the claim: an error here must not leave freshly
            // dispatched rows behind (they would end in doubt, never called).
            let tpl = self.template(i)?;
            asks.push(Ask {
                i,
                route,
                tpl,
                slots: pools[pool].1,
                pool,
            });
        }
        Ok((asks, pools))
    }

    /// The turn's commit: the outcomes, and every ask's claim (at most `free` rows in all, at
    /// most its route's slots for the asks on a route); then the calls of every claimed row,
    /// and each route's unused tokens given back. Returns true when rows were claimed.
    async fn claim(
        &mut self,
        (asks, pools): (Vec<Ask>, Vec<(Arc<Route>, usize)>),
        free: usize,
    ) -> Result<bool> {
        let reqs: Vec<ClaimRequest> = asks
            .iter()
            .map(|a| self.claim_request(a.i, a.slots, a.route.provider.capabilities()))
            .collect();
        let pool_of: Vec<usize> = asks.iter().map(|a| a.pool).collect();
        let group = std::mem::take(&mut self.outcomes);
        let now = sendonce_domain::clock::now_ms();
        let cycle = blocking(&self.ledger, move |l| {
            l.cycle(&group, &reqs, &pool_of, free, now)
        })
        .await;
        let (stats, all) = match cycle {
            Ok(x) => x,
            Err(e) if e.stops_worker() => {
                self.stop_on_damage(e);
                return Ok(false);
            }
            Err(e) => return Err(e),
        };
        self.summary.add(&stats);
        let mut used = vec![0usize; pools.len()];
        let mut claimed_any = false;
        for (ask, got) in asks.into_iter().zip(all) {
            used[ask.pool] += got.rows.len();
            claimed_any |= self.start(ask, got);
        }
        for ((route, slots), used) in pools.iter().zip(used) {
            if let Some(l) = &route.limiter {
                // Tokens for slots the claim could not fill stay with this process.
                l.give_back(slots.saturating_sub(used) as u32).await;
            }
        }
        Ok(claimed_any)
    }

    /// One ask's share of the commit: its counts and a call per claimed row. Returns true when
    /// it claimed rows.
    fn start(&mut self, ask: Ask, got: sendonce_store::Claimed) -> bool {
        self.summary.suppressed += got.suppressed;
        crate::metrics::sends("suppressed", got.suppressed);
        self.summary.moved_in_doubt += got.in_doubt;
        if let Some(at) = got.held_until {
            let campaign_id = self.campaigns[ask.i].id;
            tracing::info!(target: TARGET, campaign_id, rows = got.held,
                opens = %sendonce_domain::clock::format_ms(at),
                "rows wait for their send window");
            self.summary.held_for_window += got.held;
            let opens = self.summary.window_opens.map_or(at, |o| o.min(at));
            self.summary.window_opens = Some(opens);
        }
        if got.rows.is_empty() {
            // Rows held for their window leave others due behind them: claim again now.
            return got.held > 0;
        }
        if self.summary.claimed == 0 {
            // `sendonce bench` times a restart up to this line.
            let campaign_id = self.campaigns[ask.i].id;
            tracing::info!(target: TARGET, campaign_id, rows = got.rows.len(), "first claim");
        }
        self.summary.claimed += got.rows.len() as u64;
        crate::metrics::claimed(got.rows.len() as u64);
        self.spawn_calls(ask.i, &ask.route, ask.tpl, got.rows);
        true
    }

    /// Call slots for the claims on `route`: the worker's free slots, at most a batch, within
    /// the route's cap and the rate-limit tokens it got (0: none).
    async fn slots(&mut self, route: &Arc<Route>, free: usize) -> Result<usize> {
        let mut slots = free.min(self.cfg.batch);
        if let Some(cap) = route.concurrency {
            slots = slots.min(cap.saturating_sub(self.calls.on_route(route_key(route))));
        }
        if slots == 0 {
            return Ok(0);
        }
        if let Some(l) = &route.limiter {
            let (granted, wait) = l.try_take(slots as u32).await?;
            if (granted as usize) < slots {
                crate::metrics::rate_limit_wait();
                let w = Duration::from_millis(wait as u64);
                self.rate_wait = Some(self.rate_wait.map_or(w, |x| x.min(w)));
            }
            slots = granted as usize;
        }
        Ok(slots)
    }

    /// Campaign `i`'s compiled template, compiled once per run.
    fn template(&mut self, i: usize) -> Result<Arc<Compiled>> {
        let c = &self.campaigns[i];
        if let Some(t) = self.templates.get(&c.id) {
            return Ok(t.clone());
        }
        let t = Arc::new(if c.templated {
            let src = Sources {
                subject: c.subject.as_deref(),
                text: Some(c.body.as_str()).filter(|b| !b.is_empty()),
                html: c.html.as_deref(),
            };
            let vars = CampaignVars {
                name: c.name.clone(),
                lists: c.list_names.clone(),
            };
            let t = Compiled::campaign(&src, &vars, c.sms_footer.as_deref())
                .map_err(|e| e.context(&format!("campaign {}", c.id)))?;
            if c.channel == sendonce_domain::address::Channel::Email
                && !c.transactional
                && self.cfg.links.is_none()
            {
                return Err(Error::invalid(format!(
                    "campaign {} is an email campaign that is not transactional: every message \
                     must carry a working List-Unsubscribe link, but this worker has no public \
                     URL: pass --public-url URL (or set public_url in the config file, or {}) \
                     and set {}; nothing of it was sent",
                    c.id,
                    sendonce_domain::links::PUBLIC_URL_ENV,
                    sendonce_domain::links::SECRET_ENV
                )));
            }
            if t.reads("unsubscribe_url") && self.cfg.links.is_none() {
                return Err(Error::invalid(format!(
                    "campaign {} prints {{{{ unsubscribe_url }}}}, but this worker has no public \
                     URL to point it at: pass --public-url URL (or set public_url in the config \
                     file, or {}) and set {}",
                    c.id,
                    sendonce_domain::links::PUBLIC_URL_ENV,
                    sendonce_domain::links::SECRET_ENV
                )));
            }
            t
        } else {
            Compiled::literal_message(c.subject.as_deref(), &c.body, c.html.as_deref())
                .map_err(|e| e.context(&format!("campaign {}", c.id)))?
        });
        self.templates.insert(c.id, t.clone());
        Ok(t)
    }

    fn claim_request(&self, i: usize, slots: usize, caps: &Capabilities) -> ClaimRequest {
        let c = &self.campaigns[i];
        ClaimRequest {
            campaign_id: c.id,
            account_id: c.account_id,
            channel: c.channel,
            batch: slots,
            lease_ms: self.cfg.lease.as_millis() as i64,
            token: random_token(),
            owner: self.cfg.worker_id.clone(),
            key_window_ms: caps.key_window.map(|w| w.as_millis() as i64),
            now: sendonce_domain::clock::now_ms(),
        }
    }

    /// Start the call of every claimed row at once (each renders its message in its own task,
    /// so the runtime's threads share the work).
    fn spawn_calls(
        &mut self,
        i: usize,
        route: &Arc<Route>,
        tpl: Arc<Compiled>,
        rows: Vec<ClaimedRow>,
    ) {
        let c = &self.campaigns[i];
        let caps = route.provider.capabilities();
        // A call must end well inside its lease: the claim set it to a whole lease.
        let call_timeout = caps.call_timeout.min(self.cfg.lease / 2);
        let k = route_key(route);
        // The link is sealed here, once per row, for email that is not transactional (its
        // List-Unsubscribe header) and for templates that print it.
        let header = c.channel == sendonce_domain::address::Channel::Email && !c.transactional;
        let links = self
            .cfg
            .links
            .as_ref()
            .filter(|_| header || tpl.reads("unsubscribe_url"));
        // SMS delivery reports come back to this server's Twilio webhook, naming the job.
        let status_callback = match (c.channel, self.cfg.links.as_ref()) {
            (sendonce_domain::address::Channel::Sms, Some(l)) => Some(format!(
                "{}/hooks/twilio/{}",
                l.base().trim_end_matches('/'),
                c.account_id
            )),
            _ => None,
        };
        // One target per batch; each row only puts its address in (no list copy per message).
        let mut target = sendonce_domain::links::Target {
            account_id: c.account_id,
            channel: c.channel,
            address: String::new(),
            lists: c.list_ids.clone(),
            campaign_id: c.id,
        };
        for mut row in rows {
            let flight = Flight {
                token: row.token,
                attempts: row.attempts + 1,
                maybe_delivered: row.maybe_delivered,
                idempotent: caps.key_window.is_some(),
                route: k,
            };
            let (id, p) = (row.id, route.provider.clone());
            let (source, from, reply_to, attachments) = source_of(row.content.take(), c, &tpl);
            let head = Head {
                channel: c.channel,
                from,
                reply_to,
                header,
                link: links.map(|l| {
                    target.address.clone_from(&row.address);
                    l.unsubscribe_url(&target)
                }),
                status_callback: status_callback.clone(),
                attachments,
            };
            let call = timed(route.name.clone(), call(p, source, row, head, call_timeout));
            self.calls.start(id, flight, call);
        }
    }
}

/// Where a row's message comes from, with its sender, reply-to and files: a stream row brings
/// its own content, a campaign's row takes its campaign's.
fn source_of(
    own: Option<sendonce_store::MessageContent>,
    c: &sendonce_store::ActiveCampaign,
    tpl: &Arc<Compiled>,
) -> (Source, Option<String>, Option<String>, Vec<Attachment>) {
    match own {
        Some(m) => (
            Source::Own {
                subject: m.subject,
                text: m.text,
                html: m.html,
                templated: m.templated,
            },
            m.from,
            m.reply_to,
            m.attachments,
        ),
        None => (
            Source::Campaign(tpl.clone()),
            c.sender.clone(),
            c.reply_to.clone(),
            Vec::new(),
        ),
    }
}

/// A call task that counts its outcome and latency in `crate::metrics` when it ends.
async fn timed(
    route: String,
    call: impl std::future::Future<Output = (i64, CallResult)>,
) -> (i64, CallResult) {
    let started = std::time::Instant::now();
    let answer = call.await;
    let outcome = crate::metrics::outcome_label(&answer.1);
    crate::metrics::provider_call(&route, outcome, started.elapsed());
    answer
}

/// What a message takes besides its templates and row.
struct Head {
    channel: sendonce_domain::address::Channel,
    from: Option<String>,
    reply_to: Option<String>,
    /// The link goes into List-Unsubscribe (email that is not transactional).
    header: bool,
    /// This recipient's `unsubscribe_url`, when the templates print it or the header needs it.
    link: Option<String>,
    /// `Message::status_callback`.
    status_callback: Option<String>,
    /// A stream message's files.
    attachments: Vec<sendonce_domain::attachment::Attachment>,
}

/// Where a row's message comes from.
enum Source {
    /// Its campaign's templates, compiled once per run.
    Campaign(Arc<Compiled>),
    /// A stream row's own subject, text and HTML: literal, or templates rendered with the row's
    /// variables (`templated`: a double opt-in confirmation).
    Own {
        subject: Option<String>,
        text: String,
        html: Option<String>,
        templated: bool,
    },
}

/// One recipient's message rendered on a blocking thread, never on the runtime's: a template
/// may run up to its rendering budget (`template::RENDER_FUEL`), CPU time the runtime's threads
/// owe to `/healthz`, the API and the other calls. A literal message whose text is given runs
/// nothing (its parts are taken as they are), so it skips the blocking thread's handoff. The
/// row is already claimed with its dispatch marker and no transaction is open, as for the
/// provider call that follows.
async fn render(source: Source, vars: String, link: Option<String>) -> Result<Rendered> {
    if let Source::Own {
        subject,
        text,
        html,
        templated: false,
    } = &source
    {
        if !text.is_empty() {
            return Compiled::literal_message(subject.as_deref(), text, html.as_deref())?
                .render_json(&vars, link.as_deref());
        }
    }
    tokio::task::spawn_blocking(move || match source {
        Source::Campaign(tpl) => tpl.render_json(&vars, link.as_deref()),
        Source::Own {
            subject,
            text,
            html,
            templated: false,
        } => Compiled::literal_message(subject.as_deref(), &text, html.as_deref())?
            .render_json(&vars, link.as_deref()),
        Source::Own {
            subject,
            text,
            html,
            templated: true,
        } => {
            let src = sendonce_domain::template::Sources {
                subject: subject.as_deref(),
                text: Some(&text),
                html: html.as_deref(),
            };
            Compiled::campaign(&src, &Default::default(), None)?.render_json(&vars, link.as_deref())
        }
    })
    .await
    .map_err(|e| Error::internal(format!("the rendering task failed: {e}")))?
}

/// One call task: render the row's message, call the provider within `timeout`.
async fn call(
    p: Arc<dyn Provider>,
    source: Source,
    mut row: ClaimedRow,
    head: Head,
    timeout: Duration,
) -> (i64, CallResult) {
    let id = row.id;
    let rendered = render(source, std::mem::take(&mut row.vars), head.link.clone()).await;
    let msg = match rendered {
        Ok(r) => Message {
            status_callback: head.status_callback,
            idempotency_key: idempotency_key(&row.job_id),
            job_id: row.job_id,
            channel: head.channel,
            from: head.from,
            reply_to: head.reply_to,
            to: row.address,
            subject: r.subject,
            body: r.text,
            html: r.html,
            unsubscribe: head.link.filter(|_| head.header),
            attachments: head.attachments,
        },
        // Variables are checked when the campaign is created; a row whose stored variables
        // cannot be rendered (or go over the rendering budget) is never called: it fails.
        Err(e) => {
            return (
                id,
                CallResult::Permanent {
                    error: format!("cannot render the message: {}", e.message),
                    suppress: None,
                },
            )
        }
    };
    let res = super::single::dispatch(p.as_ref(), &msg, timeout).await;
    if matches!(
        res,
        CallResult::Accepted { .. } | CallResult::AlreadyAccepted { .. }
    ) {
        sendonce_domain::crash::point("after_provider_accept");
    }
    (id, res)
}
