//! An audience filter ([`Filter`]) compiled once, for both stores, into a SQL condition on the
//! subscriber row `s`: every value and attribute path a bound parameter (numbered from the
//! statement's own, `?first`, `?first+1`, ...), so no text of the filter ever becomes SQL. Each
//! condition is two-valued (never NULL), so `NOT` is the plain complement and a missing
//! attribute is "not equal" rather than "unknown". What differs per dialect (how an attribute
//! is read as text, the two-valued text comparison) is asked of the [`Dialect`]; PostgreSQL
//! reads an attribute as the text SQLite's `CAST(json_extract(..) AS TEXT)` gives, so both
//! stores pick the same subscribers.

use crate::sql::{Arg, Dialect};
use sendonce_domain::segment::{Cond, Field, Filter};

/// One bound value of a compiled filter, owned.
#[derive(Debug, Clone, PartialEq)]
pub(crate) enum Param {
    Text(String),
    Int(i64),
}

/// A condition on `s` and the values of its parameters.
#[derive(Debug, Clone)]
pub(crate) struct Compiled {
    pub sql: String,
    pub params: Vec<Param>,
}

impl Compiled {
    /// `fixed` (the statement's own parameters, `?1..`) followed by the filter's.
    pub fn with<'a>(&'a self, fixed: &[Arg<'a>]) -> Vec<Arg<'a>> {
        let mut all = fixed.to_vec();
        all.extend(self.params.iter().map(|p| match p {
            Param::Text(t) => Arg::Text(t),
            Param::Int(i) => Arg::Int(*i),
        }));
        all
    }
}

/// Compile `f` for dialect `d`, its parameters numbered from `first` (one past the
/// statement's own); `None` compiles to no condition (`TRUE`, every subscriber).
pub(crate) fn compile(d: &Dialect, f: Option<&Filter>, first: usize) -> Compiled {
    let mut b = Binder {
        d,
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

struct Binder<'d> {
    d: &'d Dialect,
    first: usize,
    params: Vec<Param>,
}

impl Binder<'_> {
    /// A new parameter holding the text `v`; its placeholder, typed.
    fn text(&mut self, v: String) -> String {
        format!("CAST({} AS TEXT)", self.bind(Param::Text(v)))
    }

    /// A new parameter holding `v`; its placeholder (`?n`).
    fn bind(&mut self, v: Param) -> String {
        let n = self.first + self.params.len();
        self.params.push(v);
        format!("?{n}")
    }
}

fn node(f: &Filter, b: &mut Binder<'_>) -> String {
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

/// The SQL text value of a field (NULL when missing). Attributes are compared as text
/// whatever JSON type they hold; the path (or key) is bound.
fn field(f: &Field, b: &mut Binder<'_>) -> String {
    match f {
        Field::Name => "s.name".to_string(),
        Field::Email => "s.email_norm".to_string(),
        Field::Phone => "s.phone".to_string(),
        Field::Attr(key) => {
            let param = b.bind(Param::Text((b.d.attr_param)(key)));
            (b.d.attr_text)(&param)
        }
    }
}

fn list(values: &[String], b: &mut Binder<'_>) -> String {
    let names: Vec<String> = values.iter().map(|v| b.text(v.clone())).collect();
    names.join(", ")
}

fn cond(c: &Cond, b: &mut Binder<'_>) -> String {
    match c {
        // Two-valued `=`: false (not NULL) when the field is missing.
        Cond::Eq(f, v) | Cond::Ne(f, v) => {
            let x = field(f, b);
            let (same, different) = b.d.same_text;
            let op = if matches!(c, Cond::Eq(..)) {
                same
            } else {
                different
            };
            format!("({x} {op} {})", b.text(v.clone()))
        }
        Cond::In(f, vs) => {
            let x = field(f, b);
            format!("coalesce({x} IN ({}), FALSE)", list(vs, b))
        }
        Cond::NotIn(f, vs) => {
            let x = field(f, b);
            format!("(NOT coalesce({x} IN ({}), FALSE))", list(vs, b))
        }
        // trim() strips spaces only, on both stores.
        Cond::Has(f) => format!("coalesce(trim({}) <> '', FALSE)", field(f, b)),
        Cond::CreatedAfter(ms) => format!(
            "(s.created_at >= CAST({} AS BIGINT))",
            b.bind(Param::Int(*ms))
        ),
        Cond::CreatedBefore(ms) => format!(
            "(s.created_at < CAST({} AS BIGINT))",
            b.bind(Param::Int(*ms))
        ),
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::postgres::dialect::POSTGRES;
    use crate::sqlite::dialect::SQLITE;

    #[test]
    fn values_and_paths_are_bound_never_spliced() {
        let f = Filter::parse(
            r#"city = "x' OR 1=1 --" and not (plan in ("pro", "team") or has zone)
               and created_after "2026-01-01""#,
        )
        .unwrap();
        for d in [&SQLITE, &POSTGRES] {
            let c = compile(d, Some(&f), 5);
            assert!(!c.sql.contains("OR 1=1"), "{}", c.sql);
            assert!(
                !c.sql.contains("city") && !c.sql.contains("pro") && !c.sql.contains("zone"),
                "{}",
                c.sql
            );
            assert_eq!(c.params.len(), 7, "{:?}", c.params);
            assert_eq!(c.params[1], Param::Text("x' OR 1=1 --".into()));
            assert!(c.sql.contains("?5") && c.sql.contains("?11"), "{}", c.sql);
            assert!(!c.sql.contains("?12"), "{}", c.sql);
            assert_eq!(compile(d, None, 1).sql, "TRUE");
        }
        let c = compile(&SQLITE, Some(&f), 1);
        assert_eq!(c.params[0], Param::Text("$.\"city\"".into()));
        let c = compile(&POSTGRES, Some(&f), 1);
        assert_eq!(c.params[0], Param::Text("city".into()));
    }
}
