//! Events out to the user's webhook endpoints, pure: the event types an endpoint may listen to,
//! each endpoint's signing secret (derived, never stored), Standard Webhooks signatures over
//! what is sent, the retry schedule, and the address rules that keep a delivery from reaching
//! inside the operator's network (SSRF). The worker (`worker::hooks`) does the I/O.
//!
//! The secret of an endpoint is HMAC-SHA256 under a key derived from the link secret
//! (`SENDONCE_UNSUBSCRIBE_SECRET`, `links::Keys`) over the endpoint's salt, a random value kept
//! in its row: the database alone does not give it away. While an old link secret is still in
//! its period, and until the date a rotated endpoint salt keeps, deliveries carry one
//! signature per valid secret, as the Standard Webhooks header allows.

use crate::links::Keys;
use base64::engine::general_purpose::STANDARD;
use base64::Engine;
use hmac::{Hmac, Mac};
use sha2::Sha256;
use std::net::IpAddr;
use std::time::Duration;

/// Every event type, by family. An endpoint or a feed read may name a type or `family.*`.
pub const TYPES: &[&str] = &[
    "send.sent",
    "send.failed",
    "send.suppressed",
    "send.in_doubt",
    "send.delivered",
    "send.bounced",
    "address.bounced",
    "address.complained",
    "subscriber.subscribed",
    "subscriber.confirmed",
    "subscriber.unsubscribed",
    "subscriber.bounced",
    "subscriber.erased",
    "campaign.started",
    "campaign.paused",
    "campaign.resumed",
    "campaign.finished",
    "campaign.cancelled",
    "suppression.added",
    "suppression.removed",
];

/// How long events are kept by default (`events.retention`).
pub const DEFAULT_RETENTION: Duration = Duration::from_secs(30 * 24 * 3600);
/// How long a delivery is retried before it is dropped (at least three days).
pub const RETRY_WINDOW: Duration = Duration::from_secs(3 * 24 * 3600);
/// An endpoint that has failed every call for this long is turned off (`broken`).
pub const BREAKER: Duration = Duration::from_secs(5 * 24 * 3600);
/// The first retry's delay by default (`events.retry_base`); it doubles per attempt up to
/// [`MAX_DELAY`].
pub const FIRST_DELAY: Duration = Duration::from_secs(5);
const MAX_DELAY: Duration = Duration::from_secs(6 * 3600);

/// Check a list of event types or families; the error names the first unknown one.
pub fn check_types(types: &[String]) -> Result<(), String> {
    for t in types {
        let known = match t.strip_suffix(".*") {
            Some(family) => TYPES
                .iter()
                .any(|k| k.split_once('.').is_some_and(|(f, _)| f == family)),
            None => TYPES.contains(&t.as_str()),
        };
        if !known {
            return Err(format!(
                "unknown event type {t:?} (known: {}, or a family such as send.*)",
                TYPES.join(", ")
            ));
        }
    }
    Ok(())
}

type HmacSha256 = Hmac<Sha256>;

fn mac(key: &[u8]) -> HmacSha256 {
    match HmacSha256::new_from_slice(key) {
        Ok(m) => m,
        Err(_) => unreachable!("HMAC accepts keys of any length"),
    }
}

fn secret_bytes(key: &[u8; 32], salt: &str) -> [u8; 32] {
    let mut m = mac(key);
    m.update(b"sendonce-hooks-v1 endpoint\0");
    m.update(salt.as_bytes());
    m.finalize().into_bytes().into()
}

/// The endpoint's secret under the current link secret, as the receiver configures it
/// (`whsec_` and the base64 key).
pub fn secret(keys: &Keys, salt: &str, now_ms: i64) -> String {
    let key = keys.hook_keys(now_ms).next();
    let bytes = key.map(|k| secret_bytes(k, salt)).unwrap_or_default();
    format!(
        "{}{}",
        crate::webhook::SECRET_PREFIX,
        STANDARD.encode(bytes)
    )
}

/// A fresh salt: 16 random bytes, hex.
pub fn new_salt() -> Result<String, String> {
    let mut b = [0u8; 16];
    ring::rand::SecureRandom::fill(&ring::rand::SystemRandom::new(), &mut b)
        .map_err(|_| "the system's random source failed".to_string())?;
    Ok(data_encoding::HEXLOWER.encode(&b))
}

/// The `webhook-signature` header: `v1,<base64>` for each secret valid at `now_ms` (the
/// endpoint's salt, and its old salt until its date, under each link key in its period),
/// space-separated, over `{id}.{timestamp}.{body}`.
pub fn signature(
    keys: &Keys,
    salts: (&str, Option<(&str, i64)>),
    now_ms: i64,
    signed: (&str, i64, &[u8]),
) -> String {
    let (salt, old) = salts;
    let mut all = vec![salt];
    if let Some((old, until)) = old {
        if now_ms < until {
            all.push(old);
        }
    }
    let (id, ts, body) = signed;
    let mut out = Vec::new();
    for key in keys.hook_keys(now_ms) {
        for s in &all {
            let mut m = mac(&secret_bytes(key, s));
            m.update(id.as_bytes());
            m.update(b".");
            m.update(ts.to_string().as_bytes());
            m.update(b".");
            m.update(body);
            out.push(format!("v1,{}", STANDARD.encode(m.finalize().into_bytes())));
        }
    }
    out.join(" ")
}

/// When to try a delivery again after its `attempts`-th failed call (`first` after the first,
/// doubling), or None when its retry window (from `created_at`) is over. `jitter` in [0, 1)
/// spreads the retries of many deliveries (±25%).
pub fn next_attempt(
    attempts: i64,
    first: Duration,
    (created_at, now): (i64, i64),
    jitter: f64,
) -> Option<i64> {
    let window = RETRY_WINDOW.as_millis() as i64;
    if now - created_at >= window {
        return None;
    }
    let exp = u32::try_from(attempts.clamp(1, 32) - 1).unwrap_or(31);
    let base = first
        .saturating_mul(2u32.saturating_pow(exp))
        .min(MAX_DELAY)
        .as_millis() as f64;
    let delay = (base * (0.75 + jitter.clamp(0.0, 1.0) * 0.5)) as i64;
    Some((now + delay).min(created_at + window))
}

/// Networks a delivery may reach although they are private, from the operator's
/// `events.allow` setting (`127.0.0.1/32, 10.0.0.0/8`).
#[derive(Debug, Clone, Default, PartialEq)]
pub struct Allow(Vec<ipnet::IpNet>);

impl Allow {
    /// Parse a comma- or space-separated list of networks (a bare address is one host).
    pub fn parse(list: &str) -> Result<Allow, String> {
        let mut nets = Vec::new();
        for item in list
            .split(|c: char| c == ',' || c.is_whitespace())
            .filter(|s| !s.is_empty())
        {
            let net = item
                .parse::<ipnet::IpNet>()
                .or_else(|_| item.parse::<IpAddr>().map(ipnet::IpNet::from))
                .map_err(|_| format!("events.allow: {item:?} is not an address or a network"))?;
            nets.push(net);
        }
        Ok(Allow(nets))
    }

    fn allows(&self, ip: IpAddr) -> bool {
        self.0.iter().any(|n| n.contains(&ip))
    }

    /// Why a delivery must not go to `ip`, or None when it may.
    pub fn refuses(&self, ip: IpAddr) -> Option<&'static str> {
        let why = inside(ip)?;
        (!self.allows(ip)).then_some(why)
    }
}

/// What kind of inside address `ip` is (loopback, private, link-local with the clouds'
/// metadata service, shared, unspecified, multicast, documentation), or None for a public one.
fn inside(ip: IpAddr) -> Option<&'static str> {
    match ip {
        IpAddr::V4(v4) => {
            let [a, b, ..] = v4.octets();
            if v4.is_loopback() {
                Some("a loopback address")
            } else if v4.is_private() {
                Some("a private address")
            } else if v4.is_link_local() {
                Some("a link-local address (the clouds' metadata service is one)")
            } else if a == 100 && (64..128).contains(&b) {
                Some("a shared (carrier-grade NAT) address")
            } else if v4.is_unspecified() || a == 0 {
                Some("an unspecified address")
            } else if v4.is_multicast() || v4.is_broadcast() || a >= 240 {
                Some("a multicast or reserved address")
            } else if v4.is_documentation() {
                Some("a documentation address")
            } else {
                None
            }
        }
        IpAddr::V6(v6) => {
            if let Some(v4) = embedded_v4(v6) {
                return inside(IpAddr::V4(v4));
            }
            let first = v6.segments()[0];
            if first == 0x2001 && v6.segments()[1] == 0 {
                Some("a Teredo address (it tunnels to IPv4)")
            } else if first & 0xffc0 == 0xfec0 {
                Some("a site-local address")
            } else if v6.is_loopback() {
                Some("a loopback address")
            } else if v6.is_unspecified() {
                Some("an unspecified address")
            } else if first & 0xfe00 == 0xfc00 {
                Some("a private (unique local) address")
            } else if first & 0xffc0 == 0xfe80 {
                Some("a link-local address")
            } else if v6.is_multicast() {
                Some("a multicast address")
            } else {
                None
            }
        }
    }
}

/// The IPv4 address an IPv6 one carries and reaches: mapped (`::ffff:a.b.c.d`), compatible
/// (`::a.b.c.d`), SIIT (`::ffff:0:a.b.c.d`), NAT64 (`64:ff9b::/96`, `64:ff9b:1::/48`), 6to4
/// (`2002:AABB:CCDD::/16`).
fn embedded_v4(v6: std::net::Ipv6Addr) -> Option<std::net::Ipv4Addr> {
    let s = v6.segments();
    let tail = || std::net::Ipv4Addr::from((u32::from(s[6]) << 16) | u32::from(s[7]));
    if let Some(v4) = v6.to_ipv4_mapped() {
        return Some(v4);
    }
    let zeros = |n: usize| s[..n].iter().all(|x| *x == 0);
    let compatible = zeros(6) && !(s[6] == 0 && s[7] <= 1);
    let siit = zeros(4) && s[4] == 0xffff && s[5] == 0;
    let nat64 = s[0] == 0x64 && s[1] == 0xff9b && s[2..6].iter().all(|x| *x == 0);
    let nat64_local = s[0] == 0x64 && s[1] == 0xff9b && s[2] == 1;
    if compatible || siit || nat64 || nat64_local {
        return Some(tail());
    }
    if s[0] == 0x2002 {
        return Some(std::net::Ipv4Addr::from(
            (u32::from(s[1]) << 16) | u32::from(s[2]),
        ));
    }
    None
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::links::Secret;

    fn keys() -> Keys {
        Keys::new(Secret::new(b"0123456789abcdef0123456789abcdef".to_vec()).unwrap())
    }

    #[test]
    fn inside_addresses_are_refused_unless_allowed() {
        let none = Allow::default();
        for ip in [
            "127.0.0.1",
            "10.1.2.3",
            "172.16.0.1",
            "192.168.1.1",
            "169.254.169.254",
            "100.64.0.1",
            "0.0.0.0",
            "::1",
            "fd00::1",
            "fe80::1",
            "::ffff:127.0.0.1",
            "::127.0.0.1",
            "::ffff:0:10.0.0.1",
            "64:ff9b::7f00:1",
            "64:ff9b:1::a00:1",
            "2002:a9fe:a9fe::1",
            "2001:0:4136:e378::1",
            "fec0::1",
        ] {
            let ip: IpAddr = ip.parse().unwrap();
            assert!(none.refuses(ip).is_some(), "{ip} should be refused");
        }
        assert_eq!(none.refuses("93.184.216.34".parse().unwrap()), None);
        for public in ["2606:4700::1111", "64:ff9b::5db8:d822", "2002:5db8:d822::1"] {
            assert_eq!(none.refuses(public.parse().unwrap()), None, "{public}");
        }
        let allow = Allow::parse("127.0.0.1, 10.0.0.0/8").unwrap();
        assert_eq!(allow.refuses("127.0.0.1".parse().unwrap()), None);
        assert_eq!(allow.refuses("10.9.9.9".parse().unwrap()), None);
        assert!(allow.refuses("127.0.0.2".parse().unwrap()).is_some());
        assert!(Allow::parse("10.0.0.0/33").is_err());
    }

    #[test]
    fn retries_back_off_and_stop_after_the_window() {
        let day = 86_400_000;
        let f = FIRST_DELAY;
        assert_eq!(next_attempt(1, f, (0, 0), 0.5), Some(5_000));
        assert_eq!(next_attempt(2, f, (0, 0), 0.5), Some(10_000));
        assert_eq!(next_attempt(30, f, (0, 0), 0.5), Some(6 * 3_600_000));
        assert_eq!(next_attempt(30, f, (0, 3 * day - 1), 0.5), Some(3 * day));
        assert_eq!(next_attempt(31, f, (0, 3 * day), 0.5), None);
        let low = next_attempt(3, f, (0, 0), 0.0).unwrap();
        let high = next_attempt(3, f, (0, 0), 0.999).unwrap();
        assert!(low == 15_000 && high > 24_000, "{low} {high}");
    }

    #[test]
    fn signatures_verify_with_the_secret_shown_and_cover_the_old_salt_until_its_date() {
        let k = keys();
        let shown = secret(&k, "salt-a", 0);
        let key = STANDARD
            .decode(shown.strip_prefix("whsec_").unwrap())
            .unwrap();
        let header = signature(&k, ("salt-a", None), 0, ("msg_1", 1700000000, b"{}"));
        let mut m = mac(&key);
        m.update(b"msg_1.1700000000.{}");
        let want = format!("v1,{}", STANDARD.encode(m.finalize().into_bytes()));
        assert_eq!(header, want);
        let both = signature(&k, ("salt-b", Some(("salt-a", 10))), 5, ("msg_1", 1, b"x"));
        assert_eq!(both.split(' ').count(), 2);
        let after = signature(&k, ("salt-b", Some(("salt-a", 10))), 10, ("msg_1", 1, b"x"));
        assert_eq!(after.split(' ').count(), 1);
    }

    #[test]
    fn types_are_checked() {
        assert!(check_types(&["send.failed".into(), "campaign.*".into()]).is_ok());
        let e = check_types(&["send.opened".into()]).unwrap_err();
        assert!(e.contains("send.opened"), "{e}");
        assert!(check_types(&["nope.*".into()]).is_err());
    }
}
