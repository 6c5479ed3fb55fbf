//! The worker's upkeep between claims: due campaigns, cancelled sweeps, WAL size, routes,
//! reconciliation of rows in doubt through `Provider::lookup`, and list building one chunk
//! (one transaction) per turn.

use super::engine::{blocking, signalled, Signal, Worker};
use super::Summary;
use super::TARGET;
use crate::provider::{Lookup, Message};
use crate::worker::routes::Route;
use sendonce_domain::error::Result;
use sendonce_domain::model::idempotency_key;
use sendonce_store::{ActiveCampaign, Ledger};
use std::collections::hash_map::Entry;
use std::future::Future;
use std::sync::Arc;
use std::time::Instant;

/// Rows in doubt are looked up at the provider only once they are this old, so that the
/// provider's search index has caught up with a message it accepted just before the doubt.
const RECONCILE_AFTER_MS: i64 = 60_000;

impl Worker {
    /// Maintenance: due campaigns, cancelled sweeps, WAL size, routes, reconciliation.
    pub(super) async fn maintain(&mut self) -> Result<()> {
        // Outcomes already in hand are confirmed first: maintenance (lookups at the provider
        // among it) must not keep a finished call unconfirmed.
        self.flush().await?;
        let now = sendonce_domain::clock::now_ms();
        let started = blocking(&self.ledger, move |l| l.start_due_campaigns(now)).await?;
        for id in &started {
            tracing::info!(target: TARGET, campaign_id = id, "campaign started sending");
        }
        self.summary.campaigns_started.extend(started);
        blocking(&self.ledger, move |l| l.sweep_cancelled(now)).await?;
        // Readers holding old snapshots stop automatic checkpoints from resetting the WAL.
        blocking(&self.ledger, |l| l.checkpoint_if_large()).await?;
        self.campaigns = blocking(&self.ledger, |l| l.active_campaigns()).await?;
        self.route_campaigns()?;
        for c in &self.campaigns {
            if !self.summary.campaigns_touched.contains(&c.id) {
                self.summary.campaigns_touched.push(c.id);
            }
            if let Some(r) = self.campaign_routes.get(&c.id) {
                if r.provider.capabilities().can_lookup {
                    reconcile(&self.ledger, r, c, &mut self.summary).await?;
                }
            }
        }
        self.last_maintenance = Some(Instant::now());
        Ok(())
    }

    /// The route of every campaign seen for the first time (a campaign keeps its route for the
    /// whole run).
    fn route_campaigns(&mut self) -> Result<()> {
        for c in &self.campaigns {
            if let Entry::Vacant(slot) = self.campaign_routes.entry(c.id) {
                let r = self
                    .routes
                    .for_campaign(c.account_id, &c.account_name, c.channel)
                    .map_err(|e| e.context(&format!("campaign {}", c.id)))?;
                if c.templated {
                    tracing::info!(target: TARGET, campaign_id = c.id, route = %r.name,
                        provider = %r.provider.capabilities().name, "campaign routed");
                }
                slot.insert(r);
            }
        }
        Ok(())
    }

    /// List building, one chunk (one transaction) per turn, so that a long list starts sending
    /// after its first chunk and a stop signal is heard between chunks. Returns true while a
    /// list is still incomplete.
    pub(super) async fn build_step<S: Future<Output = ()>>(
        &mut self,
        shutdown: Signal<'_, S>,
    ) -> Result<bool> {
        if self.stopping || self.campaigns.iter().all(|c| c.list_complete) {
            return Ok(false);
        }
        // Between chunks the loop does not wait on anything: look at the stop signal here.
        if signalled(shutdown).await {
            self.begin_stop();
            return Ok(false);
        }
        // Likewise, a list chunk (a long transaction) does not hold confirmations back.
        self.flush().await?;
        self.build_list_chunk().await?;
        Ok(self.campaigns.iter().any(|c| !c.list_complete))
    }

    /// One chunk of the first incomplete list.
    async fn build_list_chunk(&mut self) -> Result<()> {
        let Some(c) = self.campaigns.iter_mut().find(|c| !c.list_complete) else {
            return Ok(());
        };
        let (id, chunk) = (c.id, self.cfg.list_chunk);
        let started = *self.list_started.entry(id).or_insert_with(Instant::now);
        if blocking(&self.ledger, move |l| l.build_list_chunk(id, chunk)).await? {
            c.list_complete = true;
            tracing::info!(
                target: TARGET,
                campaign_id = id,
                ms = started.elapsed().as_millis() as u64,
                "recipient list built"
            );
        }
        Ok(())
    }
}

/// Ask the provider about rows in doubt it can look up: found means sent, an authoritative
/// "not found" means it may be sent again. Unknown answers leave the row for the operator.
async fn reconcile(
    ledger: &Arc<dyn Ledger>,
    route: &Arc<Route>,
    c: &ActiveCampaign,
    summary: &mut Summary,
) -> Result<()> {
    let (id, before) = (c.id, sendonce_domain::clock::now_ms() - RECONCILE_AFTER_MS);
    let rows = blocking(ledger, move |l| l.reconcilable(id, before, 100)).await?;
    for (send_id, job_id, address) in rows {
        let msg = Message {
            status_callback: None,
            reply_to: None,
            idempotency_key: idempotency_key(&job_id),
            job_id,
            channel: c.channel,
            from: c.sender.clone(),
            to: address,
            subject: None,
            body: String::new(),
            html: None,
            unsubscribe: None,
            attachments: Vec::new(),
        };
        let found = match route.provider.lookup(&msg).await {
            Lookup::Found { provider_id } => Some(provider_id),
            Lookup::NotFound => None,
            Lookup::Unknown { reason } => {
                tracing::debug!(target: TARGET, send_id, %reason, "lookup could not tell");
                continue;
            }
        };
        let sent = found.is_some();
        if blocking(ledger, move |l| l.settle_doubt(send_id, found.clone())).await? {
            tracing::info!(target: TARGET, send_id, sent,
                "in-doubt row reconciled with the provider");
            summary.reconciled += 1;
        }
    }
    Ok(())
}
