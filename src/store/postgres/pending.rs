//! The traits not on PostgreSQL yet: every method answers an error that says so ("not yet on
//! PostgreSQL"), never a silent default and never a panic. Each moves out of this file into its
//! own module as it is written (`admin.rs` and `ledger.rs` show the pattern).
#![allow(unused_variables, unused_imports)]

use super::{not_yet, PgStore};
use crate::domain::address::Channel;
use crate::domain::links::Links;
use crate::domain::model::CampaignStatus;
use crate::domain::model::SendStatus;
use crate::domain::segment::Filter;
use crate::domain::token::{Hash, Scope};
use crate::domain::webhook::{Event, Source};
use crate::error::{Error, Result};
use crate::store::*;
use serde::Serialize;
use std::collections::BTreeMap;
use std::collections::BTreeSet;
use std::collections::HashMap;
use std::path::Path;
use std::sync::Arc;
use std::time::Duration;

impl crate::store::Directory for PgStore {
    fn resolve_account(&self, key: &str) -> Result<i64> {
        Err(not_yet("Directory::resolve_account"))
    }
    fn account_id_by_name(&self, name: &str) -> Result<i64> {
        Err(not_yet("Directory::account_id_by_name"))
    }
    fn accounts(&self) -> Result<Vec<AccountRow>> {
        Err(not_yet("Directory::accounts"))
    }
    fn sms_footer(&self, account: i64) -> Result<Option<String>> {
        Err(not_yet("Directory::sms_footer"))
    }
    fn set_sms_footer(&self, account: i64, footer: Option<&str>) -> Result<()> {
        Err(not_yet("Directory::set_sms_footer"))
    }
    fn list_campaigns(
        &self,
        account: Option<i64>,
        status: Option<CampaignStatus>,
    ) -> Result<Vec<CampaignRow>> {
        Err(not_yet("Directory::list_campaigns"))
    }
    fn list_subscribers(
        &self,
        account: i64,
        status: Option<&str>,
        after_id: i64,
        limit: usize,
    ) -> Result<Vec<SubscriberRow>> {
        Err(not_yet("Directory::list_subscribers"))
    }
    fn find_subscriber(&self, account: i64, key: &str) -> Result<SubscriberRow> {
        Err(not_yet("Directory::find_subscriber"))
    }
    fn update_subscriber(
        &self,
        account: i64,
        id: i64,
        ch: &SubscriberChanges,
    ) -> Result<SubscriberRow> {
        Err(not_yet("Directory::update_subscriber"))
    }
    fn remove_subscriber(&self, account: i64, id: i64) -> Result<()> {
        Err(not_yet("Directory::remove_subscriber"))
    }
}

impl crate::store::Lists for PgStore {
    fn link_state(
        &self,
        account_id: i64,
        channel: Channel,
        address: &str,
        lists: &[i64],
    ) -> Result<LinkState> {
        Err(not_yet("Lists::link_state"))
    }
    fn unsubscribe(&self, r: &UnsubscribeRequest<'_>) -> Result<UnsubscribeChange> {
        Err(not_yet("Lists::unsubscribe"))
    }
    fn create_list(&self, l: &NewList<'_>) -> Result<i64> {
        Err(not_yet("Lists::create_list"))
    }
    fn update_list(&self, account_id: i64, list_id: i64, change: &ListChange<'_>) -> Result<()> {
        Err(not_yet("Lists::update_list"))
    }
    fn lists(&self, account_id: i64) -> Result<Vec<ListRow>> {
        Err(not_yet("Lists::lists"))
    }
    fn find_list(&self, account_id: i64, key: &str) -> Result<ListRow> {
        Err(not_yet("Lists::find_list"))
    }
    fn remove_list(&self, account_id: i64, list_id: i64) -> Result<u64> {
        Err(not_yet("Lists::remove_list"))
    }
    fn campaign_lists(&self, campaign_id: i64) -> Result<Vec<i64>> {
        Err(not_yet("Lists::campaign_lists"))
    }
    fn audience_counts(&self, campaign_id: i64) -> Result<AudienceCounts> {
        Err(not_yet("Lists::audience_counts"))
    }
    fn variable_counts_for(
        &self,
        q: &AudienceQuery<'_>,
    ) -> Result<crate::domain::template::VarCounts> {
        Err(not_yet("Lists::variable_counts_for"))
    }
    fn audience_counts_for(&self, q: &AudienceQuery<'_>) -> Result<AudienceCounts> {
        Err(not_yet("Lists::audience_counts_for"))
    }
}

impl crate::store::Notifications for PgStore {
    fn prepare_notification(
        &self,
        key: &str,
        channel: Channel,
        from: Option<&str>,
        subject: Option<&str>,
        body: &str,
        addresses: &[String],
    ) -> Result<i64> {
        Err(not_yet("Notifications::prepare_notification"))
    }
    fn notification_rows(
        &self,
        key: &str,
        channel: Channel,
        addresses: &[String],
    ) -> Result<Vec<NotifyRow>> {
        Err(not_yet("Notifications::notification_rows"))
    }
}

impl crate::store::Optin for PgStore {
    fn confirmation(&self, key: &MemberKey<'_>) -> Result<Option<Confirmation>> {
        Err(not_yet("Optin::confirmation"))
    }
    fn confirm(&self, key: &MemberKey<'_>, now: i64) -> Result<Option<Confirmation>> {
        Err(not_yet("Optin::confirm"))
    }
    fn public_list(&self, list_id: i64) -> Result<Option<crate::store::ListRow>> {
        Err(not_yet("Optin::public_list"))
    }
}

impl crate::store::RateLimits for PgStore {
    fn take_tokens(
        &self,
        name: &str,
        want: u32,
        rate_per_sec: f64,
        burst: u32,
        now: i64,
    ) -> Result<Grant> {
        Err(not_yet("RateLimits::take_tokens"))
    }
}

impl crate::store::Tokens for PgStore {
    fn create_token(&self, t: &NewToken<'_>) -> Result<i64> {
        Err(not_yet("Tokens::create_token"))
    }
    fn tokens(&self, account_id: i64) -> Result<Vec<TokenRow>> {
        Err(not_yet("Tokens::tokens"))
    }
    fn revoke_token(&self, account_id: i64, id: i64, now: i64) -> Result<(TokenRow, bool)> {
        Err(not_yet("Tokens::revoke_token"))
    }
    fn authenticate(&self, hash: &Hash, now: i64) -> Result<Option<TokenRow>> {
        Err(not_yet("Tokens::authenticate"))
    }
}

impl crate::store::Webhooks for PgStore {
    fn apply_webhook(
        &self,
        account_id: i64,
        source: Source,
        event: &Event,
        body_sha256: &str,
        now: i64,
    ) -> Result<Applied> {
        Err(not_yet("Webhooks::apply_webhook"))
    }
}
