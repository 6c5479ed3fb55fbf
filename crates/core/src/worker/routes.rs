//! Which provider serves a campaign: one provider for everything (`--provider`), or the routes
//! of a config file, each with an optional durable rate limit and concurrency cap. Every
//! provider is built when the worker starts, so a bad spec fails before anything is claimed.

use crate::config::Config;
use crate::provider::{self, Provider};
use crate::worker::ratelimit::Limiter;
use sendonce_domain::address::Channel;
use sendonce_domain::error::{Error, Result};
use sendonce_store::prelude::*;
use sendonce_store::Store;
use std::sync::Arc;

/// A provider with the limits that apply to it.
pub struct Route {
    /// For logs: the route's position in the config, or "default".
    pub name: String,
    pub provider: Arc<dyn Provider>,
    /// Durable token bucket shared with every worker on the database.
    pub limiter: Option<Arc<Limiter>>,
    /// Calls in flight for this route (per worker), on top of the worker's own cap.
    pub concurrency: Option<usize>,
}

/// The routing table.
pub struct Routes {
    default: Option<Arc<Route>>,
    config: Option<Config>,
    routes: Vec<Arc<Route>>,
}

fn plain(name: &str, provider: Arc<dyn Provider>) -> Arc<Route> {
    Arc::new(Route {
        name: name.into(),
        provider,
        limiter: None,
        concurrency: None,
    })
}

impl Routes {
    /// One provider for every campaign.
    pub fn single(provider: Arc<dyn Provider>) -> Routes {
        Routes {
            default: Some(plain("default", provider)),
            config: None,
            routes: Vec::new(),
        }
    }

    /// Routes from a config file; `default_spec` (the `--provider` flag) overrides the file's
    /// default provider.
    pub fn from_config(
        config: Config,
        default_spec: Option<&str>,
        store: &Arc<Store>,
    ) -> Result<Routes> {
        let default = match default_spec.or(config.provider.as_deref()) {
            Some(spec) => Some(plain("default", provider::from_spec(spec)?)),
            None => None,
        };
        let mut routes = Vec::new();
        for (i, r) in config.route.iter().enumerate() {
            let name = format!("route {}", i + 1);
            // A route for an account that does not exist would be silently passed over and its
            // campaigns sent through the default provider: refuse at start.
            let exists = match &r.account {
                None => Ok(()),
                Some(crate::config::AccountRef::Id(id)) => store.account_exists(*id),
                Some(crate::config::AccountRef::Name(n)) => store.account_id_by_name(n).map(|_| ()),
            };
            exists.map_err(|e| {
                e.context(&format!(
                    "{name} of the config file names an account that does not exist"
                ))
            })?;
            let provider = provider::from_spec(&r.provider).map_err(|e| e.context(&name))?;
            let limiter = match &r.rate {
                Some(rate) => {
                    let per_sec = crate::worker::ratelimit::parse_rate(rate)?;
                    let burst = r.burst.unwrap_or((per_sec.ceil() as u32).max(1));
                    Some(Limiter::new(
                        store.clone(),
                        format!("{name}: {}", r.provider),
                        per_sec,
                        burst,
                    ))
                }
                None => None,
            };
            routes.push(Arc::new(Route {
                name,
                provider,
                limiter,
                concurrency: r.concurrency,
            }));
        }
        Ok(Routes {
            default,
            config: Some(config),
            routes,
        })
    }

    /// The route for a campaign's account and channel.
    pub fn for_campaign(
        &self,
        account_id: i64,
        account_name: &str,
        channel: Channel,
    ) -> Result<Arc<Route>> {
        if let Some(cfg) = &self.config {
            if let Some(i) = cfg.route_for(account_id, account_name, channel) {
                return Ok(self.routes[i].clone());
            }
        }
        self.default.clone().ok_or_else(|| {
            Error::invalid(format!(
                "no provider for account {account_name:?} ({account_id}), channel {channel}: \
                 add a route to the config file or pass --provider"
            ))
        })
    }
}
