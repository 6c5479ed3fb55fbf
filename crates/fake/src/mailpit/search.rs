//! The subset of Mailpit's search syntax the fake understands, answered from the inbox index:
//! free words and `"quoted phrases"` (anywhere: subject, addresses, text, id), `to:`, `from:`,
//! `subject:`, `is:read`, `is:unread`, `is:tagged` and `tag:NAME`, each negated by a leading
//! `-` or `!`; every term must hold. Case-insensitive "contains" throughout, but `tag:`, which
//! is the tag's whole name.

use crate::index::{Entry, Needle, State};

#[derive(Debug, Default)]
pub(crate) struct Search {
    pub(super) terms: Vec<Term>,
    /// Each term's value, its searcher built once.
    needles: Vec<Needle>,
}

#[derive(Debug, PartialEq)]
pub(super) struct Term {
    pub(super) field: Field,
    pub(super) value: String,
    pub(super) negated: bool,
}

#[derive(Debug, Clone, Copy, PartialEq)]
pub(super) enum Field {
    Any,
    To,
    From,
    Subject,
    Read,
    Unread,
    Tagged,
    Tag,
}

/// A word's field: `to:`, `from:`, `subject:`, `tag:` and the `is:` flags; anything else is a
/// free word.
fn field_of(w: &str) -> (Field, &str) {
    let Some((k, v)) = w.split_once(':') else {
        return (Field::Any, w);
    };
    let k = k.to_ascii_lowercase();
    let flag = |f| (f, "-");
    match (k.as_str(), v.to_ascii_lowercase().as_str()) {
        ("to", _) => (Field::To, v),
        ("from", _) => (Field::From, v),
        ("subject", _) => (Field::Subject, v),
        ("tag", _) => (Field::Tag, v),
        ("is", "read") => flag(Field::Read),
        ("is", "unread") => flag(Field::Unread),
        ("is", "tagged") => flag(Field::Tagged),
        _ => (Field::Any, w),
    }
}

impl Search {
    pub(crate) fn parse(q: &str) -> Search {
        let mut words = Vec::new();
        let mut cur = String::new();
        let mut quoted = false;
        for c in q.chars() {
            match c {
                '"' => quoted = !quoted,
                c if c.is_whitespace() && !quoted => {
                    if !cur.is_empty() {
                        words.push(std::mem::take(&mut cur));
                    }
                }
                c => cur.push(c),
            }
        }
        if !cur.is_empty() {
            words.push(cur);
        }
        let terms = words
            .into_iter()
            .filter_map(|w| {
                let (negated, w) = match w.strip_prefix(['-', '!']) {
                    Some(rest) if !rest.is_empty() => (true, rest.to_string()),
                    _ => (false, w),
                };
                let (field, value) = field_of(&w);
                (!value.is_empty()).then(|| Term {
                    field,
                    value: value.to_lowercase(),
                    negated,
                })
            })
            .collect::<Vec<Term>>();
        let needles = terms.iter().map(|t| Needle::new(&t.value)).collect();
        Search { terms, needles }
    }

    /// Whether a delivery of the index matches (its text read from the log only when it is
    /// too long to be kept and no cheaper field decided).
    pub(crate) fn matches(&self, st: &State, e: &Entry) -> bool {
        self.terms.iter().zip(&self.needles).all(|(t, n)| {
            let v = t.value.as_str();
            let hit = match t.field {
                Field::To => n.is_in(e.mp_to()),
                Field::From => n.is_in(e.mp_from()),
                Field::Subject => n.is_in(e.subject_lc()),
                Field::Read => e.read,
                Field::Unread => !e.read,
                Field::Tagged => !e.tags.is_empty(),
                Field::Tag => e.tags.iter().any(|x| x.to_lowercase() == v),
                Field::Any => {
                    n.is_in(e.mp_to())
                        || n.is_in(e.mp_from())
                        || n.is_in(e.subject_lc())
                        || n.is_in(e.mp_other())
                        || same_id(e.id(), v)
                        || n.is_in(&st.text_lc(e))
                }
            };
            hit != t.negated
        })
    }
}

/// The id, lower-cased, is the word.
fn same_id(id: &str, word: &str) -> bool {
    if id.is_ascii() {
        id.eq_ignore_ascii_case(word)
    } else {
        id.to_lowercase() == word
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn search_syntax() {
        let s = Search::parse("to:kim \"big sale\" -subject:spam !from:x is:UNREAD -tag:\"a b\"");
        assert_eq!(s.terms.len(), 6);
        assert_eq!(s.terms[1].value, "big sale");
        assert!(s.terms[2].negated && s.terms[2].field == Field::Subject);
        assert!(s.terms[3].negated && s.terms[3].field == Field::From);
        assert_eq!(s.terms[4].field, Field::Unread);
        assert!(s.terms[5].negated && s.terms[5].field == Field::Tag);
        assert_eq!(s.terms[5].value, "a b");
        // An unknown flag is a free word.
        assert_eq!(Search::parse("is:starred").terms[0].field, Field::Any);
    }
}
