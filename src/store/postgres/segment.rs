//! An audience filter ([`Filter`]) compiled into a PostgreSQL condition on the subscriber row
//! `s`, every value and attribute name a bound parameter (`$first`, `$first+1`, ...): no text
//! of the filter ever becomes SQL. The same rules as `sqlite/segment.rs`, so both stores pick
//! the same subscribers: each condition is two-valued (`IS NOT DISTINCT FROM`, `coalesce`),
//! so `NOT` is the plain complement and a missing attribute is "not equal"; and an attribute is
//! compared as the text SQLite's `CAST(json_extract(attrs, '$."key"') AS TEXT)` gives (see
//! [`ATTR_TEXT`]).

use crate::domain::segment::{Cond, Field, Filter};
use tokio_postgres::types::ToSql;

/// One bound value, owned (it moves onto the store's runtime with its statement).
pub(super) type Param = Box<dyn ToSql + Sync + Send>;

/// A condition on `s` and the values of its parameters.
#[derive(Debug)]
pub(super) struct Compiled {
    pub sql: String,
    pub params: Vec<Param>,
}

impl Compiled {
    /// `fixed` (the statement's own parameters, `$1..`) followed by the filter's.
    pub fn with<'a>(&'a self, fixed: &[&'a (dyn ToSql + Sync)]) -> Vec<&'a (dyn ToSql + Sync)> {
        let mut all = fixed.to_vec();
        all.extend(self.params.iter().map(|p| &**p as &(dyn ToSql + Sync)));
        all
    }
}

/// Compile `f` with its parameters numbered from `$first` (one past the statement's own);
/// `None` compiles to no condition (`TRUE`, every subscriber).
pub(super) fn compile(f: Option<&Filter>, first: usize) -> Compiled {
    let mut b = Binder {
        first,
        params: Vec::new(),
    };
    let sql = match f {
        Some(f) => node(f, &mut b),
        None => "TRUE".to_string(),
    };
    Compiled {
        sql,
        params: b.params,
    }
}

struct Binder {
    first: usize,
    params: Vec<Param>,
}

impl Binder {
    /// A new parameter holding `v`; its placeholder with `cast` (`$7::text`).
    fn bind(&mut self, v: Param, cast: &str) -> String {
        let n = self.first + self.params.len();
        self.params.push(v);
        format!("${n}::{cast}")
    }
}

fn node(f: &Filter, b: &mut Binder) -> String {
    match f {
        Filter::Or(v) | Filter::And(v) => {
            let op = if matches!(f, Filter::Or(_)) {
                " OR "
            } else {
                " AND "
            };
            let parts: Vec<String> = v.iter().map(|x| node(x, b)).collect();
            format!("({})", parts.join(op))
        }
        Filter::Not(x) => format!("(NOT {})", node(x, b)),
        Filter::Cond(c) => cond(c, b),
    }
}

/// The text SQLite's `CAST(json_extract(s.attrs, '$."key"') AS TEXT)` gives, for the JSON
/// value `v` of the key (`{key}`: the bound key): a string unescaped; `true`/`false` as `1`/`0`
/// (json_extract makes them integers); an integer that fits 64 bits as its decimal text; any
/// other number as SQLite prints a REAL (`5.0`, `2.5`, `1000.0` for `1e3`; beyond 10^15 or with
/// more than 15 significant digits the two may print differently); JSON `null` and a missing
/// key as NULL; an object or array as its JSON text. `json` rather than `jsonb` because `json`
/// keeps a number's text as written (jsonb would turn `1e3` into `1000`, and SQLite makes that
/// a REAL).
const ATTR_TEXT: &str = "(SELECT CASE json_typeof(v)
        WHEN 'string' THEN v #>> '{}'
        WHEN 'boolean' THEN CASE WHEN v::text = 'true' THEN '1' ELSE '0' END
        WHEN 'number' THEN CASE
            WHEN v::text ~ '^-?[0-9]+$'
                 AND v::text::numeric BETWEEN -9223372036854775808 AND 9223372036854775807
                THEN v::text::numeric::text
            WHEN v::text::float8 = trunc(v::text::float8) AND abs(v::text::float8) < 1e15
                THEN trunc(v::text::float8)::numeric::text || '.0'
            ELSE v::text::float8::text END
        WHEN 'null' THEN NULL
        ELSE v::text END
     FROM (SELECT s.attrs::json -> {key} AS v) attr)";

/// The SQL text value of a field (NULL when missing).
fn field(f: &Field, b: &mut Binder) -> String {
    match f {
        Field::Name => "s.name".to_string(),
        Field::Email => "s.email_norm".to_string(),
        Field::Phone => "s.phone".to_string(),
        Field::Attr(key) => {
            let key = b.bind(Box::new(key.clone()), "text");
            ATTR_TEXT.replace("{key}", &key)
        }
    }
}

fn cond(c: &Cond, b: &mut Binder) -> String {
    match c {
        // `IS NOT DISTINCT FROM` is `=` that is false (not NULL) when the field is missing:
        // SQLite's `IS`.
        Cond::Eq(f, v) => {
            let x = field(f, b);
            let v = b.bind(Box::new(v.clone()), "text");
            format!("({x} IS NOT DISTINCT FROM {v})")
        }
        Cond::Ne(f, v) => {
            let x = field(f, b);
            let v = b.bind(Box::new(v.clone()), "text");
            format!("({x} IS DISTINCT FROM {v})")
        }
        Cond::In(f, vs) => {
            let x = field(f, b);
            let vs = b.bind(Box::new(vs.clone()), "text[]");
            format!("coalesce({x} = ANY({vs}), FALSE)")
        }
        Cond::NotIn(f, vs) => {
            let x = field(f, b);
            let vs = b.bind(Box::new(vs.clone()), "text[]");
            format!("(NOT coalesce({x} = ANY({vs}), FALSE))")
        }
        // trim() strips spaces only, on both stores.
        Cond::Has(f) => format!("coalesce(btrim({}) <> '', FALSE)", field(f, b)),
        Cond::CreatedAfter(ms) => {
            format!("(s.created_at >= {})", b.bind(Box::new(*ms), "bigint"))
        }
        Cond::CreatedBefore(ms) => {
            format!("(s.created_at < {})", b.bind(Box::new(*ms), "bigint"))
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn values_and_names_are_bound_never_spliced() {
        let f = Filter::parse(
            r#"city = "x' OR 1=1 --" and not (plan in ("pro", "team") or has zone)
               and created_after "2026-01-01""#,
        )
        .unwrap();
        let c = compile(Some(&f), 5);
        assert!(!c.sql.contains("OR 1=1"), "{}", c.sql);
        assert!(
            !c.sql.contains("city") && !c.sql.contains("pro") && !c.sql.contains("zone"),
            "{}",
            c.sql
        );
        // city, its value, plan, its values (one array), zone, the date.
        assert_eq!(c.params.len(), 6, "{:?}", c.params);
        assert!(
            c.sql.contains("$5::text") && c.sql.contains("$10::bigint"),
            "{}",
            c.sql
        );
        assert!(!c.sql.contains("$11"), "{}", c.sql);
        assert_eq!(compile(None, 1).sql, "TRUE");
    }
}
