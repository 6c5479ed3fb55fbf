//! SMS text helpers: E.164 checks, GSM-7 vs UCS-2 detection (GSM 03.38 default alphabet and
//! its extension table) and segment counting, so a campaign can report what a text will cost.
//!
//! One SMS carries 140 bytes: 160 GSM-7 septets or 70 UCS-2 (UTF-16) code units. A longer text
//! is split into concatenated parts whose header takes 6 bytes, leaving 153 septets or 67 code
//! units each. A character of the extension table (`€`, `{`, `[`…) is an escape plus a septet,
//! so it costs 2 and is never split across two parts; nor is a UTF-16 surrogate pair.

use crate::error::Result;
use serde::Serialize;
use std::fmt;

/// Septets in a single GSM-7 SMS, and in each part of a concatenated one.
pub const GSM7_SINGLE: usize = 160;
pub const GSM7_PART: usize = 153;
/// UTF-16 code units in a single UCS-2 SMS, and in each part of a concatenated one.
pub const UCS2_SINGLE: usize = 70;
pub const UCS2_PART: usize = 67;

/// The GSM 03.38 default alphabet (one septet each), in code order; the escape (0x1B) is left
/// out because it is never a character of its own.
const GSM7_BASIC: &str = "@£$¥èéùìòÇ\nØø\rÅåΔ_ΦΓΛΩΠΨΣΘΞÆæßÉ !\"#¤%&'()*+,-./0123456789:;<=>?\
¡ABCDEFGHIJKLMNOPQRSTUVWXYZÄÖÑÜ§¿abcdefghijklmnopqrstuvwxyzäöñüà";

/// The extension table: reached with an escape, so two septets each.
const GSM7_EXTENSION: &str = "\u{000C}^{}\\[~]|€";

/// How a text is encoded on the air.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Serialize)]
pub enum Encoding {
    /// Every character is in the GSM 03.38 default alphabet or its extension table.
    #[serde(rename = "GSM-7")]
    Gsm7,
    /// Anything else (emoji, most non-Latin scripts, curly quotes...): UTF-16.
    #[serde(rename = "UCS-2")]
    Ucs2,
}

impl fmt::Display for Encoding {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.write_str(match self {
            Encoding::Gsm7 => "GSM-7",
            Encoding::Ucs2 => "UCS-2",
        })
    }
}

/// Septets a character takes in GSM-7: 1 (default alphabet), 2 (extension table), or `None`
/// when it cannot be written in GSM-7 at all.
pub fn gsm7_septets(c: char) -> Option<usize> {
    if GSM7_BASIC.contains(c) {
        Some(1)
    } else if GSM7_EXTENSION.contains(c) {
        Some(2)
    } else {
        None
    }
}

/// GSM-7 when every character fits, UCS-2 otherwise.
pub fn encoding(text: &str) -> Encoding {
    if text.chars().all(|c| gsm7_septets(c).is_some()) {
        Encoding::Gsm7
    } else {
        Encoding::Ucs2
    }
}

/// What sending a text costs.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Serialize)]
pub struct Segments {
    pub encoding: Encoding,
    /// Characters as a person counts them (Unicode scalar values).
    pub characters: usize,
    /// Septets (GSM-7) or UTF-16 code units (UCS-2).
    pub units: usize,
    /// SMS parts the text is split into (an empty text still takes one).
    pub segments: usize,
}

impl fmt::Display for Segments {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        let unit = match self.encoding {
            Encoding::Gsm7 => "septets",
            Encoding::Ucs2 => "UTF-16 units",
        };
        write!(
            f,
            "{}, {} characters ({} {unit}), {} segment{}",
            self.encoding,
            self.characters,
            self.units,
            self.segments,
            if self.segments == 1 { "" } else { "s" }
        )
    }
}

/// Encoding, size and segment count of an SMS body.
pub fn segments(text: &str) -> Segments {
    let enc = encoding(text);
    let widths: Vec<usize> = match enc {
        Encoding::Gsm7 => text.chars().map(|c| gsm7_septets(c).unwrap_or(2)).collect(),
        Encoding::Ucs2 => text.chars().map(char::len_utf16).collect(),
    };
    let (single, part) = match enc {
        Encoding::Gsm7 => (GSM7_SINGLE, GSM7_PART),
        Encoding::Ucs2 => (UCS2_SINGLE, UCS2_PART),
    };
    let units: usize = widths.iter().sum();
    Segments {
        encoding: enc,
        characters: widths.len(),
        units,
        segments: if units <= single {
            1
        } else {
            pack(&widths, part)
        },
    }
}

/// Parts needed when no character may straddle two parts.
fn pack(widths: &[usize], capacity: usize) -> usize {
    let mut parts = 1;
    let mut used = 0;
    for &w in widths {
        if used + w > capacity {
            parts += 1;
            used = 0;
        }
        used += w;
    }
    parts
}

/// A one-line report for a campaign body, e.g. `GSM-7, 165 characters (165 septets), 2
/// segments`, for the CLI to print when an SMS campaign is created or shown.
pub fn body_report(body: &str) -> String {
    segments(body).to_string()
}

/// Check that a recipient is a valid E.164 number (`+`, the country code, a number its
/// numbering plan has) and return it normalised; the same rule the importer applies.
pub fn check_e164(number: &str) -> Result<String> {
    crate::address::normalize_phone(number)
}

/// True when `number` is already exactly in E.164 form (no spaces or punctuation to remove).
pub fn is_e164(number: &str) -> bool {
    check_e164(number).is_ok_and(|n| n == number)
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn alphabet_tables_have_the_documented_sizes() {
        // 128 code points minus the escape; 10 extension characters.
        assert_eq!(GSM7_BASIC.chars().count(), 127);
        assert_eq!(GSM7_EXTENSION.chars().count(), 10);
        let mut seen = std::collections::HashSet::new();
        assert!(GSM7_BASIC.chars().all(|c| seen.insert(c)), "no duplicates");
    }

    #[test]
    fn detection() {
        assert_eq!(
            encoding("Hello @ 10:30, £5 off! ¿Qué? Ñoño"),
            Encoding::Gsm7
        );
        assert_eq!(
            encoding("Price: 5€ [today] {only} ~ ^ | \\"),
            Encoding::Gsm7
        );
        assert_eq!(encoding("Olá, você"), Encoding::Ucs2); // á, ê are not in GSM-7
        assert_eq!(encoding("Thanks 🙂"), Encoding::Ucs2);
        assert_eq!(encoding("“quoted”"), Encoding::Ucs2);
        assert_eq!(encoding(""), Encoding::Gsm7);
    }

    #[test]
    fn gsm7_segment_boundaries() {
        let s = |n: usize| segments(&"a".repeat(n));
        assert_eq!(s(0).segments, 1);
        assert_eq!(s(160).segments, 1);
        assert_eq!(s(161).segments, 2);
        assert_eq!(s(306).segments, 2);
        assert_eq!(s(307).segments, 3);
        assert_eq!(s(459).segments, 3);
        assert_eq!(s(460).segments, 4);
        // Extension characters count twice.
        let euro = segments(&"€".repeat(80));
        assert_eq!((euro.units, euro.segments), (160, 1));
        let euro = segments(&"€".repeat(81));
        assert_eq!((euro.characters, euro.units, euro.segments), (81, 162, 2));
        // A single SMS has room for 160 septets, escape pairs included.
        let t = format!("{}€", "a".repeat(158));
        assert_eq!((segments(&t).units, segments(&t).segments), (160, 1));
        // An escape pair is never split: 306 septets would fill two parts exactly, but the €
        // at septets 153-154 moves to part two, and the last a spills into a third.
        let t = format!("{}€{}", "a".repeat(152), "a".repeat(152));
        assert_eq!((segments(&t).units, segments(&t).segments), (306, 3));
    }

    #[test]
    fn ucs2_segment_boundaries() {
        let s = |n: usize| segments(&"ж".repeat(n));
        assert_eq!(s(70).segments, 1);
        assert_eq!(s(71).segments, 2);
        assert_eq!(s(134).segments, 2);
        assert_eq!(s(135).segments, 3);
        // One non-GSM character makes the whole text UCS-2.
        let t = format!("{}ã", "a".repeat(69));
        assert_eq!(segments(&t).encoding, Encoding::Ucs2);
        assert_eq!(segments(&t).segments, 1);
        let t = format!("{}ã", "a".repeat(70));
        assert_eq!(segments(&t).segments, 2);
        // Emoji are surrogate pairs: 2 units each, never split.
        let e = segments(&"🙂".repeat(35));
        assert_eq!((e.characters, e.units, e.segments), (35, 70, 1));
        let e = segments(&format!("{}🙂", "a".repeat(66)));
        assert_eq!((e.units, e.segments), (68, 1));
        let e = segments(&format!("{}🙂", "a".repeat(69)));
        assert_eq!((e.units, e.segments), (71, 2));
    }

    #[test]
    fn report_line() {
        assert_eq!(
            body_report(&"a".repeat(165)),
            "GSM-7, 165 characters (165 septets), 2 segments"
        );
        assert_eq!(
            body_report("Olá"),
            "UCS-2, 3 characters (3 UTF-16 units), 1 segment"
        );
    }

    #[test]
    fn e164() {
        assert_eq!(check_e164("+1 (415) 555-0100").unwrap(), "+14155550100");
        assert!(is_e164("+14155550100"));
        assert!(!is_e164("+1 415 555 0100"));
        assert!(!is_e164("14155550100"));
        assert!(check_e164("+0123456789").is_err());
        assert!(check_e164("+12").is_err());
    }
}
