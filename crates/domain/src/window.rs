//! Send windows and SMS quiet hours: daily local-time windows (`09:00-18:00`), the zones a
//! recipient may be in (a `tz` attribute, else the phone number's country, else the campaign's
//! zone), and the first instant at which every window is open. Local times come from the
//! tz database jiff bundles (the same on every host); no offset is computed here.

use crate::error::{Error, Result};
use jiff::civil::{DateTime, Time};
use jiff::tz::{AmbiguousOffset, TimeZone};
use jiff::Timestamp;
use std::collections::HashMap;
use std::fmt;
use std::sync::OnceLock;

/// How far ahead an opening is looked for. A daily window opens within a day in any one zone;
/// the rest covers DST changes and windows that must hold in several zones at once.
pub const HORIZON_MS: i64 = 8 * 24 * 3600 * 1000;

/// A daily window of local time, `start` included, `end` excluded, in minutes after midnight.
/// `end < start` crosses midnight (`22:00-06:00`).
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct Window {
    start: u16,
    end: u16,
}

impl Window {
    /// Parse `HH:MM-HH:MM` (24-hour clock; `24:00` allowed as an end).
    pub fn parse(s: &str) -> Result<Window> {
        let bad = |why: &str| {
            Error::invalid(format!(
                "invalid window {s:?}: {why} (write it like 09:00-18:00, local time)"
            ))
        };
        let (a, b) = s.trim().split_once('-').ok_or_else(|| bad("no '-'"))?;
        let start = minutes(a)
            .filter(|&m| m < 24 * 60)
            .ok_or_else(|| bad("bad start"))?;
        let end = minutes(b).ok_or_else(|| bad("bad end"))?;
        if start == end % (24 * 60) {
            return Err(bad("it starts where it ends"));
        }
        Ok(Window {
            start,
            end: end % (24 * 60),
        })
    }

    /// Whether a local time of day lies in the window.
    pub fn contains(&self, t: Time) -> bool {
        let m = t.hour() as u16 * 60 + t.minute() as u16;
        if self.start < self.end {
            self.start <= m && m < self.end
        } else {
            m >= self.start || m < self.end
        }
    }

    /// Whether two windows share some time of day (so both can hold in one zone).
    pub fn overlaps(&self, other: &Window) -> bool {
        (0..24 * 60).any(|m| {
            let t = Time::new((m / 60) as i8, (m % 60) as i8, 0, 0).unwrap_or(Time::midnight());
            self.contains(t) && other.contains(t)
        })
    }

    fn start_time(&self) -> Time {
        Time::new((self.start / 60) as i8, (self.start % 60) as i8, 0, 0)
            .unwrap_or(Time::midnight())
    }
}

/// `HH:MM` as minutes after midnight (at most 24:00).
fn minutes(s: &str) -> Option<u16> {
    let (h, m) = s.trim().split_once(':')?;
    let digits = |x: &str| x.bytes().all(|b| b.is_ascii_digit());
    if h.is_empty() || h.len() > 2 || m.len() != 2 || !digits(h) || !digits(m) {
        return None;
    }
    let (h, m): (u16, u16) = (h.parse().ok()?, m.parse().ok()?);
    (m < 60 && h * 60 + m <= 24 * 60).then_some(h * 60 + m)
}

impl fmt::Display for Window {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        let end = if self.end == 0 { 24 * 60 } else { self.end };
        write!(
            f,
            "{:02}:{:02}-{:02}:{:02}",
            self.start / 60,
            self.start % 60,
            end / 60,
            end % 60
        )
    }
}

/// The tz database every zone is read from: the copy built into the binary (jiff's bundled
/// tzdb), so every host that runs this binary, and every worker of a shared PostgreSQL store,
/// reads the same zones and names whatever its system has installed.
fn tzdb() -> &'static jiff::tz::TimeZoneDatabase {
    static DB: OnceLock<jiff::tz::TimeZoneDatabase> = OnceLock::new();
    DB.get_or_init(jiff::tz::TimeZoneDatabase::bundled)
}

/// A time zone by its IANA name (`Europe/Lisbon`, `UTC`); the error names the value.
pub fn zone(name: &str) -> Result<TimeZone> {
    let name = name.trim();
    if name.is_empty() {
        return Err(Error::invalid("empty time zone name"));
    }
    tzdb().get(name).map_err(|_| {
        Error::invalid(format!(
            "unknown time zone {name:?} (write an IANA name like Europe/Lisbon or America/New_York)"
        ))
    })
}

/// The zones of a country (ISO 3166 alpha-2, upper case) as the tz database's `zone.tab` lists
/// them; empty for a code it does not list.
pub fn country_zones(country: &str) -> &'static [&'static str] {
    static TABLE: OnceLock<HashMap<&'static str, Vec<&'static str>>> = OnceLock::new();
    let table = TABLE.get_or_init(|| {
        let mut t: HashMap<&str, Vec<&str>> = HashMap::new();
        for line in include_str!("../data/zone.tab").lines() {
            if line.starts_with('#') {
                continue;
            }
            let mut cols = line.split('\t');
            if let (Some(cc), Some(_), Some(name)) = (cols.next(), cols.next(), cols.next()) {
                t.entry(cc).or_default().push(name);
            }
        }
        t
    });
    table.get(country).map(Vec::as_slice).unwrap_or(&[])
}

/// The country (ISO 3166 alpha-2) of an E.164 number, by libphonenumber's metadata.
fn phone_country(e164: &str) -> Option<String> {
    let n = phonenumber::parse(None, e164).ok()?;
    n.country().id().map(|id| id.as_ref().to_string())
}

/// Where a recipient's zones came from.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
enum ZoneSource {
    /// The subscriber's `tz` attribute.
    Attribute,
    /// The phone number's country (every zone of it, when it has several).
    Country,
    /// Neither: the campaign's zone (its account's when it was created).
    Campaign,
}

/// The zones a recipient may be in: its `tz` attribute when it names a zone; else, for an SMS
/// recipient, every zone of its number's `country`; else the campaign's zone. The source says
/// which.
fn recipient_zones(
    tz_attr: Option<&str>,
    country: Option<&str>,
    campaign: &TimeZone,
) -> (Vec<TimeZone>, ZoneSource) {
    if let Some(tz) = tz_attr.and_then(|n| zone(n).ok()) {
        return (vec![tz], ZoneSource::Attribute);
    }
    let zones: Vec<TimeZone> = country
        .map(|cc| {
            country_zones(cc)
                .iter()
                .filter_map(|n| tzdb().get(n).ok())
                .collect()
        })
        .unwrap_or_default();
    if zones.is_empty() {
        (vec![campaign.clone()], ZoneSource::Campaign)
    } else {
        (zones, ZoneSource::Country)
    }
}

/// A window that must hold in each of some zones.
#[derive(Debug, Clone, Copy)]
pub struct Rule<'a> {
    pub window: Window,
    pub zones: &'a [TimeZone],
}

impl Rule<'_> {
    fn holds(&self, at: Timestamp) -> bool {
        self.zones
            .iter()
            .all(|z| self.window.contains(z.to_datetime(at).time()))
    }
}

/// The first instant at or after `now` (Unix ms) at which every rule holds, looked for up to
/// eight days ahead; `None` when there is none (windows that never meet across the zones).
///
/// The allowed instants are a union of intervals, and each interval starts either at `now` or
/// where some rule starts to hold: at a window's start in one zone (both occurrences in a
/// repeated hour), or at a zone's transition (the local clock jumps, maybe into the window:
/// a start inside a skipped hour opens at the jump). Those candidates are tried in order.
pub fn next_open(now: i64, rules: &[Rule<'_>]) -> Option<i64> {
    let now_ts = Timestamp::from_millisecond(now).ok()?;
    if rules.iter().all(|r| r.holds(now_ts)) {
        return Some(now);
    }
    let horizon = Timestamp::from_millisecond(now.saturating_add(HORIZON_MS)).ok()?;
    let mut candidates = Vec::new();
    for rule in rules {
        for z in rule.zones {
            openings(z, rule.window, now_ts, horizon, &mut candidates);
        }
    }
    candidates.retain(|&t| t > now_ts && t <= horizon);
    candidates.sort_unstable();
    candidates.dedup();
    candidates
        .into_iter()
        .find(|&t| rules.iter().all(|r| r.holds(t)))
        .map(Timestamp::as_millisecond)
}

/// Where `window` may open in zone `z` between `from` and `to`: each day's start (both
/// occurrences when the hour repeats; none when it is skipped) and every transition.
fn openings(
    z: &TimeZone,
    window: Window,
    from: Timestamp,
    to: Timestamp,
    out: &mut Vec<Timestamp>,
) {
    let mut day = z.to_datetime(from).date().yesterday().ok();
    while let Some(d) = day {
        let dt: DateTime = d.to_datetime(window.start_time());
        let amb = z.to_ambiguous_timestamp(dt);
        let offsets = match amb.offset() {
            AmbiguousOffset::Unambiguous { offset } => vec![offset],
            AmbiguousOffset::Fold { before, after } => vec![before, after],
            AmbiguousOffset::Gap { .. } => vec![],
        };
        let mut past = false;
        for off in offsets {
            if let Ok(t) = off.to_timestamp(dt) {
                past |= t > to;
                out.push(t);
            }
        }
        if past {
            break;
        }
        day = d.tomorrow().ok();
    }
    out.extend(
        z.following(from)
            .map(|tr| tr.timestamp())
            .take_while(|&t| t <= to),
    );
}

/// A campaign's (or step's) send policy: its window, its SMS quiet hours, and the zone used
/// when a recipient's own is unknown.
#[derive(Debug, Clone)]
pub struct Policy {
    pub window: Option<Window>,
    /// Applied only to SMS, and only where the recipient's zone is known (attribute or country).
    pub sms_hours: Option<Window>,
    pub zone: TimeZone,
    pub sms: bool,
}

impl Policy {
    /// The policy of a campaign row (`None`: it has no window and no quiet hours). A value
    /// that no longer parses is damage: the caller stops rather than send outside a window.
    pub fn from_columns(
        window: Option<&str>,
        sms_hours: Option<&str>,
        zone_name: Option<&str>,
        sms: bool,
    ) -> Result<Option<Policy>> {
        let window = window.map(Window::parse).transpose()?;
        let sms_hours = sms_hours.filter(|_| sms).map(Window::parse).transpose()?;
        if window.is_none() && sms_hours.is_none() {
            return Ok(None);
        }
        let zone = zone(zone_name.unwrap_or("UTC"))?;
        Ok(Some(Policy {
            window,
            sms_hours,
            zone,
            sms,
        }))
    }

    /// When a recipient may be sent to (`now` when it may now): `tz_attr` is its `tz`
    /// attribute, `country` its number's country (SMS). Quiet hours hold only in the recipient's own
    /// zones (attribute or country), never in a guess. A send window that is never open in
    /// every zone of the number's country at once is read in the campaign's zone instead;
    /// quiet hours never are: when nothing satisfies them, the row waits a horizon and is
    /// looked at again.
    pub fn open_at(&self, now: i64, tz_attr: Option<&str>, country: Option<&str>) -> i64 {
        let country = country.filter(|_| self.sms);
        let (zones, source) = recipient_zones(tz_attr, country, &self.zone);
        let hours_zones: &[TimeZone] = match source {
            ZoneSource::Campaign => &[],
            _ => &zones,
        };
        let attempt = |window_zones: &[TimeZone]| {
            let mut rules = Vec::with_capacity(2);
            if let Some(w) = self.window {
                rules.push(Rule {
                    window: w,
                    zones: window_zones,
                });
            }
            if let Some(w) = self.sms_hours.filter(|_| !hours_zones.is_empty()) {
                rules.push(Rule {
                    window: w,
                    zones: hours_zones,
                });
            }
            next_open(now, &rules)
        };
        let own = [self.zone.clone()];
        attempt(&zones)
            .or_else(|| attempt(&own))
            .unwrap_or(now.saturating_add(HORIZON_MS))
    }
}

/// [`Policy::open_at`] for many rows of one claim: recipients in the same zones share one
/// answer (`now` is the claim's).
pub struct Planner<'a> {
    policy: &'a Policy,
    now: i64,
    seen: HashMap<(Option<String>, Option<String>), i64>,
}

impl<'a> Planner<'a> {
    pub fn new(policy: &'a Policy, now: i64) -> Self {
        Planner {
            policy,
            now,
            seen: HashMap::new(),
        }
    }

    /// When the recipient of a row may be sent to: `vars` is the row's captured variables
    /// (its `tz` attribute is read from them), `address` its address.
    pub fn open_at(&mut self, vars: &str, address: &str) -> i64 {
        let tz = tz_of_vars(vars);
        // The number's country only matters without a zone of its own (parsing costs µs).
        let own_zone = tz.as_deref().is_some_and(|z| zone(z).is_ok());
        let country = (self.policy.sms && !own_zone)
            .then(|| phone_country(address))
            .flatten();
        let key = (tz, country);
        if let Some(&at) = self.seen.get(&key) {
            return at;
        }
        let at = self
            .policy
            .open_at(self.now, key.0.as_deref(), key.1.as_deref());
        self.seen.insert(key, at);
        at
    }
}

/// The `tz` attribute among a row's captured variables (a JSON object), if it is a string.
fn tz_of_vars(vars: &str) -> Option<String> {
    #[derive(serde::Deserialize)]
    struct Vars {
        tz: Option<serde_json::Value>,
    }
    let v: Vars = serde_json::from_str(vars).ok()?;
    match v.tz? {
        serde_json::Value::String(s) => Some(s),
        _ => None,
    }
}

/// Check a subscriber's `tz` attribute: it must name a zone, or nothing can honour it.
pub fn check_tz_attribute(attrs: &serde_json::Map<String, serde_json::Value>) -> Result<()> {
    match attrs.get("tz") {
        None | Some(serde_json::Value::Null) => Ok(()),
        Some(serde_json::Value::String(s)) => zone(s)
            .map(|_| ())
            .map_err(|e| e.context("attribute \"tz\"")),
        Some(_) => Err(Error::invalid(
            "attribute tz must be a time zone name like Europe/Lisbon",
        )),
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn ms(s: &str) -> i64 {
        s.parse::<Timestamp>()
            .map(Timestamp::as_millisecond)
            .unwrap_or(i64::MIN)
    }

    fn open(now: &str, window: &str, zones: &[&str]) -> Option<String> {
        let zones: Vec<TimeZone> = zones
            .iter()
            .map(|z| zone(z).unwrap_or(TimeZone::UTC))
            .collect();
        let w = Window::parse(window).ok()?;
        next_open(
            ms(now),
            &[Rule {
                window: w,
                zones: &zones,
            }],
        )
        .and_then(|t| Timestamp::from_millisecond(t).ok())
        .map(|t| t.to_string())
    }

    #[test]
    fn windows_parse_and_print() {
        assert_eq!(
            Window::parse("9:00-18:30").map(|w| w.to_string()).ok(),
            Some("09:00-18:30".into())
        );
        assert_eq!(
            Window::parse("22:00-06:00").map(|w| w.to_string()).ok(),
            Some("22:00-06:00".into())
        );
        assert_eq!(
            Window::parse("08:00-24:00").map(|w| w.to_string()).ok(),
            Some("08:00-24:00".into())
        );
        for bad in [
            "",
            "9-18",
            "09:00",
            "09:60-10:00",
            "25:00-26:00",
            "10:00-10:00",
            "00:00-24:00",
            "a:00-b:00",
        ] {
            assert!(Window::parse(bad).is_err(), "{bad:?} was accepted");
        }
    }

    #[test]
    fn inside_is_now_and_outside_waits_for_the_start() {
        assert_eq!(
            open("2026-01-10T12:00:00Z", "09:00-18:00", &["UTC"]).as_deref(),
            Some("2026-01-10T12:00:00Z")
        );
        assert_eq!(
            open("2026-01-10T19:00:00Z", "09:00-18:00", &["UTC"]).as_deref(),
            Some("2026-01-11T09:00:00Z")
        );
        assert_eq!(
            open("2026-01-10T05:00:00Z", "22:00-06:00", &["UTC"]).as_deref(),
            Some("2026-01-10T05:00:00Z")
        );
        assert_eq!(
            open("2026-01-10T07:00:00Z", "22:00-06:00", &["UTC"]).as_deref(),
            Some("2026-01-10T22:00:00Z")
        );
    }

    #[test]
    fn a_start_in_a_skipped_hour_opens_at_the_jump() {
        // New York skips 02:00-03:00 on 2026-03-08: a 02:30 start opens at 03:00 EDT.
        assert_eq!(
            open("2026-03-08T05:00:00Z", "02:30-05:00", &["America/New_York"]).as_deref(),
            Some("2026-03-08T07:00:00Z")
        );
    }

    #[test]
    fn several_zones_must_all_be_open() {
        // 08:00 in Honolulu is 13:00 in New York (winter): the later of the two opens it.
        assert_eq!(
            open(
                "2026-01-10T12:00:00Z",
                "08:00-21:00",
                &["America/New_York", "Pacific/Honolulu"]
            )
            .as_deref(),
            Some("2026-01-10T18:00:00Z")
        );
        assert_eq!(
            open(
                "2026-01-10T12:00:00Z",
                "09:00-10:00",
                &["Asia/Tokyo", "America/New_York"]
            ),
            None
        );
    }

    #[test]
    fn countries_and_attributes_pick_zones() {
        assert_eq!(country_zones("JP"), &["Asia/Tokyo"]);
        assert!(country_zones("US").len() > 10);
        assert_eq!(phone_country("+81312345678").as_deref(), Some("JP"));
        assert_eq!(phone_country("+12125550123").as_deref(), Some("US"));
        let utc = TimeZone::UTC;
        assert_eq!(
            recipient_zones(Some("Europe/Lisbon"), Some("JP"), &utc).1,
            ZoneSource::Attribute
        );
        assert_eq!(
            recipient_zones(Some("Mars/Base"), Some("JP"), &utc).1,
            ZoneSource::Country
        );
        assert_eq!(recipient_zones(None, None, &utc).1, ZoneSource::Campaign);
        assert_eq!(
            tz_of_vars(r#"{"tz":"Asia/Kathmandu","name":"x"}"#).as_deref(),
            Some("Asia/Kathmandu")
        );
        assert_eq!(tz_of_vars(r#"{"tz":5}"#), None);
    }

    #[test]
    fn every_zone_the_table_names_is_known() {
        for cc in ["US", "BR", "RU", "AU", "PT", "NP", "KI"] {
            for z in country_zones(cc) {
                assert!(zone(z).is_ok(), "{cc}: {z} is not in the database");
            }
        }
    }

    #[test]
    fn a_send_window_falls_back_to_the_campaigns_zone_but_quiet_hours_never_do() {
        let p = Policy::from_columns(
            Some("09:00-12:00"),
            Some("08:00-21:00"),
            Some("America/New_York"),
            true,
        );
        let Some(p) = p.ok().flatten() else {
            panic!("no policy")
        };
        let at = ms("2026-01-12T14:00:00Z"); // 09:00 in New York, 06:00 in Los Angeles
                                             // 09:00-12:00 never holds across the US at once; in New York it is open now, but the
                                             // quiet hours over every US zone (08:00 Honolulu is 18:00Z) are not: never before them.
        let open = p.open_at(at, None, phone_country("+14155550100").as_deref());
        assert!(open >= ms("2026-01-12T18:00:00Z"), "{open}");
        // Without quiet hours, the campaign's zone decides the window.
        let p = Policy::from_columns(Some("09:00-12:00"), None, Some("America/New_York"), true);
        let Some(p) = p.ok().flatten() else {
            panic!("no policy")
        };
        assert_eq!(
            p.open_at(at, None, phone_country("+14155550100").as_deref()),
            at
        );
        assert!(Window::parse("+9:00-18:00").is_err());
    }

    #[test]
    fn quiet_hours_apply_only_where_the_zone_is_known() {
        let p = Policy::from_columns(None, Some("08:00-21:00"), Some("UTC"), true)
            .ok()
            .flatten();
        let Some(p) = p else { panic!("no policy") };
        let night = ms("2026-01-10T02:00:00Z");
        // No attribute, no known country: the campaign's zone is no recipient's zone.
        assert_eq!(
            p.open_at(night, None, phone_country("+99912345").as_deref()),
            night
        );
        // Tokyo at 11:00 local: open; New York at 21:00 local: closed until 08:00 local.
        assert_eq!(
            p.open_at(night, None, phone_country("+81312345678").as_deref()),
            night
        );
        assert_eq!(
            p.open_at(night, Some("America/New_York"), None),
            ms("2026-01-10T13:00:00Z")
        );
    }
}
