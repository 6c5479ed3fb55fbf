//! Chaos by rule (`--chaos RULE`, repeatable): per provider API, a rate limit answered with a
//! chosen status and `Retry-After`, slow answers, failures at random or in bursts, and
//! accepted messages whose answer comes too late for the client (a timeout after accept).
//! Each rule draws from its own sequence seeded by `--seed` and its position, and bursts count
//! requests, so a run with the same seed and the same requests misbehaves the same way.
//! Tests read the rules and how often each fired, and replace them, at `GET|PUT|DELETE /chaos`.
//!
//! A rule is `key=value` pairs separated by commas:
//! - `provider=API` (optional): `webhook` (`/send`), `twilio`, `resend`, `postmark`, `ses`,
//!   `sendgrid`, `mailgun` or `brevo`; without it the rule applies to every API.
//! - one effect: `rate=N/s` (or `N/m`; `burst=N` requests may come at once, default one
//!   second's worth) refused past the rate with `then=STATUS` (default 429); `slow=DURATION`
//!   or `slow=MIN..MAX` before the answer; `status=STATUS` (a 4xx or 5xx answer instead of
//!   accepting), alone (every request, or a share with `p=`) or as bursts (`every=N,for=M`:
//!   the first M of every N requests); `after-accept=hang` with `for=DURATION` (the message is
//!   stored, then the connection stays silent that long and is closed: the client times out).
//! - `p=P` (optional, 0..1): the share of matching requests the rule fires on.
//!
//! A refusal is answered in the API's own error format and stores nothing.

use super::server::{reply, Body};
use hyper::{Response, StatusCode};
use sendonce_domain::error::{Error, Result};
use serde_json::{json, Value};
use std::sync::Mutex;
use std::time::{Duration, Instant};

/// The APIs a rule may name.
pub(crate) const APIS: &[&str] = &[
    "webhook", "twilio", "resend", "postmark", "ses", "sendgrid", "mailgun", "brevo",
];

#[derive(Debug, Clone, PartialEq)]
enum Effect {
    Rate {
        per_sec: f64,
        burst: f64,
        status: u16,
    },
    Slow {
        min: Duration,
        max: Duration,
    },
    Status {
        status: u16,
        /// `(every, for)`: the first `for` of every `every` requests.
        bursts: Option<(u64, u64)>,
    },
    Hang {
        hold: Duration,
    },
}

/// One rule and its state.
#[derive(Debug)]
struct Rule {
    text: String,
    api: Option<String>,
    effect: Effect,
    p: f64,
    /// The rule's own random sequence (splitmix64 state).
    rng: u64,
    /// Requests it matched, and how many it fired on.
    seen: u64,
    fired: u64,
    /// Rate limit: tokens and when they were counted.
    tokens: f64,
    at: Option<Instant>,
}

/// What the rules decided for one request.
#[derive(Debug, Default, Clone)]
pub(crate) struct Draw {
    /// Added before the answer.
    pub delay: Duration,
    /// Refused instead of accepted: the status and the `Retry-After` seconds.
    pub refuse: Option<(StatusCode, Option<u64>)>,
    /// Accepted, then the connection held silent this long and closed.
    pub hang: Option<Duration>,
}

/// The rules of one fake provider.
#[derive(Debug)]
pub(crate) struct Chaos {
    seed: u64,
    rules: Mutex<Vec<Rule>>,
}

fn splitmix(state: &mut u64) -> f64 {
    *state = state.wrapping_add(0x9E37_79B9_7F4A_7C15);
    let mut z = *state;
    z = (z ^ (z >> 30)).wrapping_mul(0xBF58_476D_1CE4_E5B9);
    z = (z ^ (z >> 27)).wrapping_mul(0x94D0_49BB_1331_11EB);
    ((z ^ (z >> 31)) >> 11) as f64 / (1u64 << 53) as f64
}

impl Chaos {
    /// The rules of `--chaos`, checked; `seed` is `--seed` (random without one).
    pub(crate) fn new(rules: &[String], seed: u64) -> Result<Chaos> {
        let chaos = Chaos {
            seed,
            rules: Mutex::new(Vec::new()),
        };
        chaos.replace(rules)?;
        Ok(chaos)
    }

    /// Replace every rule (their counts start again); nothing changes when one is invalid.
    pub(crate) fn replace(&self, rules: &[String]) -> Result<()> {
        let parsed = rules
            .iter()
            .enumerate()
            .map(|(i, r)| parse(r, self.seed.wrapping_add((i as u64 + 1) << 32)))
            .collect::<Result<Vec<_>>>()?;
        *self.rules.lock().unwrap_or_else(|p| p.into_inner()) = parsed;
        Ok(())
    }

    /// What the rules do to one request to `api`: every matching rule in order, delays added,
    /// the first refusal or hang kept.
    pub(crate) fn draw(&self, api: &str) -> Draw {
        let mut rules = self.rules.lock().unwrap_or_else(|p| p.into_inner());
        let mut d = Draw::default();
        let now = Instant::now();
        for r in rules.iter_mut() {
            if r.api.as_deref().is_some_and(|a| a != api) {
                continue;
            }
            r.seen += 1;
            let u = splitmix(&mut r.rng);
            let v = splitmix(&mut r.rng);
            if u >= r.p {
                continue;
            }
            if fire(r, &mut d, v, now) {
                r.fired += 1;
            }
        }
        d
    }

    /// `GET /chaos`: `{"seed", "rules": [{"rule", "provider", "matched", "fired"}]}`.
    pub(crate) fn describe(&self) -> Value {
        let rules = self.rules.lock().unwrap_or_else(|p| p.into_inner());
        json!({
            "seed": self.seed,
            "rules": rules.iter().map(|r| json!({
                "rule": r.text, "provider": r.api, "matched": r.seen, "fired": r.fired,
            })).collect::<Vec<_>>(),
        })
    }
}

/// Apply one rule that drew its chance; returns whether it did anything.
fn fire(r: &mut Rule, d: &mut Draw, v: f64, now: Instant) -> bool {
    match r.effect.clone() {
        Effect::Slow { min, max } => {
            d.delay += min + (max - min).mul_f64(v);
            true
        }
        Effect::Rate {
            per_sec,
            burst,
            status,
        } => {
            let elapsed = r.at.map_or(0.0, |t| now.duration_since(t).as_secs_f64());
            r.tokens = match r.at {
                None => burst,
                Some(_) => (r.tokens + elapsed * per_sec).min(burst),
            };
            r.at = Some(now);
            if r.tokens >= 1.0 {
                r.tokens -= 1.0;
                return false;
            }
            let wait = ((1.0 - r.tokens) / per_sec).ceil().max(1.0) as u64;
            refuse(d, status, Some(wait))
        }
        Effect::Status { status, bursts } => {
            let hit = bursts.is_none_or(|(every, len)| (r.seen - 1) % every < len);
            hit && refuse(d, status, None)
        }
        Effect::Hang { hold } => {
            let first = d.hang.is_none() && d.refuse.is_none();
            if first {
                d.hang = Some(hold);
            }
            first
        }
    }
}

fn refuse(d: &mut Draw, status: u16, retry_after: Option<u64>) -> bool {
    if d.refuse.is_some() {
        return false;
    }
    let status = StatusCode::from_u16(status).unwrap_or(StatusCode::SERVICE_UNAVAILABLE);
    d.refuse = Some((status, retry_after));
    true
}

/// One rule from its text.
fn parse(text: &str, seed: u64) -> Result<Rule> {
    let bad = |why: String| Error::invalid(format!("--chaos {text:?}: {why}"));
    let mut kv = std::collections::BTreeMap::new();
    for part in text.split(',').map(str::trim).filter(|p| !p.is_empty()) {
        let (k, v) = part
            .split_once('=')
            .ok_or_else(|| bad(format!("{part:?} is not key=value")))?;
        if kv.insert(k.trim(), v.trim()).is_some() {
            return Err(bad(format!("{k} is given twice")));
        }
    }
    let api = kv.remove("provider").map(str::to_string);
    if let Some(a) = &api {
        if !APIS.contains(&a.as_str()) {
            return Err(bad(format!(
                "unknown provider {a:?} (one of {})",
                APIS.join(", ")
            )));
        }
    }
    let p = match kv.remove("p") {
        Some(v) => v
            .parse::<f64>()
            .ok()
            .filter(|p| (0.0..=1.0).contains(p))
            .ok_or_else(|| bad(format!("p={v} is not a share between 0 and 1")))?,
        None => 1.0,
    };
    let effect = effect(&mut kv).map_err(bad)?;
    if let Some(k) = kv.keys().next() {
        return Err(bad(format!("{k} does not go with this rule's effect")));
    }
    Ok(Rule {
        text: text.to_string(),
        api,
        effect,
        p,
        rng: seed,
        seen: 0,
        fired: 0,
        tokens: 0.0,
        at: None,
    })
}

type Pairs<'a> = std::collections::BTreeMap<&'a str, &'a str>;

/// The rule's one effect, its keys taken out of `kv`.
fn effect(kv: &mut Pairs<'_>) -> std::result::Result<Effect, String> {
    let effects: Vec<&str> = ["rate", "slow", "status", "after-accept"]
        .into_iter()
        .filter(|k| kv.contains_key(k))
        .collect();
    let status = |v: &str| {
        v.parse::<u16>()
            .ok()
            .filter(|s| (400..=599).contains(s))
            .ok_or_else(|| format!("{v} is not a 4xx or 5xx status"))
    };
    match effects.as_slice() {
        ["rate"] => rate(kv, &status),
        ["slow"] => {
            let v = kv.remove("slow").unwrap_or_default();
            let (min, max) = match v.split_once("..") {
                Some((a, b)) => (duration(a)?, duration(b)?),
                None => (duration(v)?, duration(v)?),
            };
            if max < min {
                return Err(format!("slow={v}: the maximum is below the minimum"));
            }
            Ok(Effect::Slow { min, max })
        }
        ["status"] => {
            let s = status(kv.remove("status").unwrap_or_default())?;
            let bursts = match (kv.remove("every"), kv.remove("for")) {
                (None, None) => None,
                (Some(e), Some(f)) => {
                    let (every, len) = (count(e)?, count(f)?);
                    if len > every {
                        return Err(format!("for={len} is longer than every={every}"));
                    }
                    Some((every, len))
                }
                _ => return Err("every= and for= go together".into()),
            };
            Ok(Effect::Status { status: s, bursts })
        }
        ["after-accept"] => {
            let what = kv.remove("after-accept").unwrap_or_default();
            if what != "hang" {
                return Err(format!("after-accept={what}: the one behaviour is hang"));
            }
            let hold = duration(
                kv.remove("for")
                    .ok_or("after-accept=hang needs for=DURATION")?,
            )?;
            Ok(Effect::Hang { hold })
        }
        [] => Err("no effect: give rate=, slow=, status= or after-accept=".into()),
        many => Err(format!("one effect per rule, not {}", many.join(" and "))),
    }
}

fn rate(
    kv: &mut Pairs<'_>,
    status: &dyn Fn(&str) -> std::result::Result<u16, String>,
) -> std::result::Result<Effect, String> {
    let v = kv.remove("rate").unwrap_or_default();
    let (n, unit) = v
        .split_once('/')
        .ok_or(format!("rate={v}: write N/s or N/m"))?;
    let n: f64 = n
        .trim()
        .parse()
        .ok()
        .filter(|n: &f64| *n > 0.0 && n.is_finite())
        .ok_or(format!("rate={v}: N must be a positive number"))?;
    let per_sec = match unit.trim() {
        "s" => n,
        "m" => n / 60.0,
        u => return Err(format!("rate={v}: unknown unit {u:?} (s or m)")),
    };
    let burst = match kv.remove("burst") {
        Some(b) => count(b)? as f64,
        None => per_sec.ceil().max(1.0),
    };
    let status = match kv.remove("then") {
        Some(s) => status(s)?,
        None => 429,
    };
    Ok(Effect::Rate {
        per_sec,
        burst,
        status,
    })
}

fn duration(v: &str) -> std::result::Result<Duration, String> {
    sendonce_domain::clock::parse_duration(v.trim()).map_err(|e| e.message)
}

fn count(v: &str) -> std::result::Result<u64, String> {
    v.trim()
        .parse::<u64>()
        .ok()
        .filter(|n| *n > 0)
        .ok_or(format!("{v} is not a positive whole number"))
}

/// `GET|PUT|DELETE /chaos`: the rules and their counts; `PUT` with `{"rules": [...]}` replaces
/// them (all or nothing), `DELETE` removes every rule.
pub(crate) fn handle(chaos: &Chaos, method: &hyper::Method, body: &[u8]) -> Response<Body> {
    use hyper::Method;
    let replaced = match *method {
        Method::GET => Ok(()),
        Method::DELETE => chaos.replace(&[]),
        Method::PUT => match serde_json::from_slice::<Value>(body) {
            Ok(v) => match v["rules"].as_array().and_then(|a| {
                a.iter()
                    .map(|r| r.as_str().map(str::to_string))
                    .collect::<Option<Vec<_>>>()
            }) {
                Some(rules) => chaos.replace(&rules),
                None => Err(Error::invalid("send {\"rules\": [\"RULE\", ...]}")),
            },
            Err(e) => Err(Error::invalid(format!("the body is not JSON: {e}"))),
        },
        _ => {
            return reply(
                StatusCode::METHOD_NOT_ALLOWED,
                json!({"error": "method not allowed"}),
            )
        }
    };
    match replaced {
        Ok(()) => reply(StatusCode::OK, chaos.describe()),
        Err(e) => reply(StatusCode::BAD_REQUEST, json!({"error": e.message})),
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn rules_parse_and_bad_ones_name_the_problem() {
        let ok = [
            "provider=resend,rate=10/s,then=429",
            "rate=60/m,burst=5",
            "provider=ses,slow=100ms..2s,p=0.5",
            "status=503,every=10,for=3",
            "provider=mailgun,status=500,p=0.1",
            "after-accept=hang,for=30s",
        ];
        for r in ok {
            assert!(parse(r, 1).is_ok(), "{r}");
        }
        let bad = [
            ("provider=nope,status=500", "unknown provider"),
            ("rate=10", "N/s"),
            ("status=200", "4xx or 5xx"),
            ("status=503,every=3", "go together"),
            ("status=503,every=3,for=4", "longer than"),
            ("slow=2s..1s", "below"),
            ("rate=1/s,slow=1s", "one effect"),
            ("p=2,status=500", "between 0 and 1"),
            ("after-accept=close,for=1s", "hang"),
            ("status=500,burst=3", "does not go"),
            ("provider=ses", "no effect"),
        ];
        for (r, why) in bad {
            let e = parse(r, 1).expect_err(r).message;
            assert!(e.contains(why) && e.contains(r), "{r}: {e}");
        }
    }

    #[test]
    fn bursts_count_requests_and_a_seed_repeats_the_same_draws() {
        let c = Chaos::new(&["status=503,every=4,for=2".into()], 7).unwrap();
        let refused: Vec<bool> = (0..8).map(|_| c.draw("resend").refuse.is_some()).collect();
        assert_eq!(
            refused,
            [true, true, false, false, true, true, false, false]
        );
        let rules = ["status=500,p=0.3".to_string(), "slow=1ms..50ms".to_string()];
        let run = |seed| {
            let c = Chaos::new(&rules, seed).unwrap();
            (0..50)
                .map(|_| {
                    let d = c.draw("ses");
                    (d.refuse.is_some(), d.delay)
                })
                .collect::<Vec<_>>()
        };
        assert_eq!(run(42), run(42));
        assert_ne!(run(42), run(43));
        let fired = run(42).iter().filter(|(r, _)| *r).count();
        assert!((5..=25).contains(&fired), "about 30% of 50: {fired}");
    }

    #[test]
    fn a_rate_limit_refuses_past_its_burst_with_a_retry_after_and_spares_other_apis() {
        let c = Chaos::new(&["provider=resend,rate=2/s,burst=3".into()], 1).unwrap();
        let answers: Vec<_> = (0..5).map(|_| c.draw("resend").refuse).collect();
        assert_eq!(answers[..3], [None, None, None]);
        assert_eq!(answers[3], Some((StatusCode::TOO_MANY_REQUESTS, Some(1))));
        assert!(c.draw("postmark").refuse.is_none());
        let d = c.describe();
        assert_eq!(d["rules"][0]["matched"], 5);
        assert_eq!(d["rules"][0]["fired"], 2);
    }
}
