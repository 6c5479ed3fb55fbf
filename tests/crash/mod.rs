//! Tier 2 (`--features tier2`): real processes killed at named crash points (`workers`), damaged
//! files, power cuts, PostgreSQL hosts killed and cut, the transactional stream under kills,
//! events delivered to webhooks while workers are killed.

pub(crate) mod damage;
pub(crate) mod events;
pub(crate) mod pg_crash;
pub(crate) mod powerloss;
pub(crate) mod stream;
pub(crate) mod windows;
pub(crate) mod workers;
