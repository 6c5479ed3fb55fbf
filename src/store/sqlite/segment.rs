//! An audience filter ([`Filter`]) compiled into a SQL condition on the subscriber row `s`,
//! every value and attribute path a bound parameter (`:seg0`, `:seg1`, ...): no text of the
//! filter ever becomes SQL. Each condition is two-valued (never NULL), so `NOT` is the plain
//! complement and a missing attribute is "not equal" rather than "unknown".

use crate::domain::segment::{Cond, Field, Filter};
use rusqlite::types::Value;
use rusqlite::ToSql;

/// A condition on `s` and the values of its parameters.
#[derive(Debug, Clone)]
pub(super) struct Compiled {
    pub sql: String,
    pub params: Vec<(String, Value)>,
}

impl Compiled {
    /// `fixed` (the statement's own named parameters) followed by the filter's, ready for
    /// `execute` or `query_row`.
    pub fn with<'a>(&'a self, fixed: &[(&'a str, &'a dyn ToSql)]) -> Vec<(&'a str, &'a dyn ToSql)> {
        let mut all = fixed.to_vec();
        all.extend(
            self.params
                .iter()
                .map(|(n, v)| (n.as_str(), v as &dyn ToSql)),
        );
        all
    }
}

/// Compile `f`; `None` compiles to no condition (`1`, every subscriber).
pub(super) fn compile(f: Option<&Filter>) -> Compiled {
    let mut c = Compiled {
        sql: String::new(),
        params: Vec::new(),
    };
    c.sql = match f {
        Some(f) => node(f, &mut c.params),
        None => "1".to_string(),
    };
    c
}

fn node(f: &Filter, p: &mut Vec<(String, Value)>) -> String {
    match f {
        Filter::Or(v) | Filter::And(v) => {
            let op = if matches!(f, Filter::Or(_)) {
                " OR "
            } else {
                " AND "
            };
            let parts: Vec<String> = v.iter().map(|x| node(x, p)).collect();
            format!("({})", parts.join(op))
        }
        Filter::Not(x) => format!("(NOT {})", node(x, p)),
        Filter::Cond(c) => cond(c, p),
    }
}

/// A new parameter holding `v`; its name.
fn bind(p: &mut Vec<(String, Value)>, v: Value) -> String {
    let name = format!(":seg{}", p.len());
    p.push((name.clone(), v));
    name
}

/// The SQL text value of a field (NULL when missing). Attributes are compared as text
/// whatever JSON type they hold; the path is bound (`$."key"`: a key label, quoted).
fn field(f: &Field, p: &mut Vec<(String, Value)>) -> String {
    match f {
        Field::Name => "s.name".to_string(),
        Field::Email => "s.email_norm".to_string(),
        Field::Phone => "s.phone".to_string(),
        Field::Attr(key) => {
            let path = bind(p, Value::Text(format!("$.\"{key}\"")));
            format!("CAST(json_extract(s.attrs, {path}) AS TEXT)")
        }
    }
}

fn list(values: &[String], p: &mut Vec<(String, Value)>) -> String {
    let names: Vec<String> = values
        .iter()
        .map(|v| bind(p, Value::Text(v.clone())))
        .collect();
    names.join(", ")
}

fn cond(c: &Cond, p: &mut Vec<(String, Value)>) -> String {
    match c {
        // `IS` is `=` that is false (not NULL) when the field is missing.
        Cond::Eq(f, v) => {
            let x = field(f, p);
            format!("({x} IS {})", bind(p, Value::Text(v.clone())))
        }
        Cond::Ne(f, v) => {
            let x = field(f, p);
            format!("({x} IS NOT {})", bind(p, Value::Text(v.clone())))
        }
        Cond::In(f, vs) => {
            let x = field(f, p);
            format!("coalesce({x} IN ({}), 0)", list(vs, p))
        }
        Cond::NotIn(f, vs) => {
            let x = field(f, p);
            format!("(NOT coalesce({x} IN ({}), 0))", list(vs, p))
        }
        Cond::Has(f) => format!("coalesce(trim({}) <> '', 0)", field(f, p)),
        Cond::CreatedAfter(ms) => format!("(s.created_at >= {})", bind(p, Value::Integer(*ms))),
        Cond::CreatedBefore(ms) => format!("(s.created_at < {})", bind(p, Value::Integer(*ms))),
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn values_and_paths_are_bound_never_spliced() {
        let f = Filter::parse(
            r#"city = "x' OR 1=1 --" and not (plan in ("pro", "team") or has zone)
               and created_after "2026-01-01""#,
        )
        .unwrap();
        let c = compile(Some(&f));
        assert!(!c.sql.contains("OR 1=1"), "{}", c.sql);
        assert!(
            !c.sql.contains("city") && !c.sql.contains("pro"),
            "{}",
            c.sql
        );
        assert_eq!(c.params.len(), 7, "{:?}", c.params);
        assert_eq!(c.params[0].1, Value::Text("$.\"city\"".into()));
        assert_eq!(c.params[1].1, Value::Text("x' OR 1=1 --".into()));
        assert_eq!(compile(None).sql, "1");
    }

    /// The compiled condition against an in-memory table: the missing-attribute rule and
    /// two-valued `not`.
    #[test]
    fn missing_attributes_never_equal() {
        let db = rusqlite::Connection::open_in_memory().unwrap();
        db.execute_batch(
            "CREATE TABLE subscribers (id INTEGER PRIMARY KEY, name TEXT, email_norm TEXT,
                                       phone TEXT, attrs TEXT, created_at INTEGER);
             INSERT INTO subscribers VALUES
               (1, 'Ann', 'ann@x.org', NULL, '{\"city\": \"Lisboa\", \"n\": 5}', 1000),
               (2, NULL, 'bob@x.org', '+351', '{\"city\": \"Porto\", \"zone\": \"  \"}', 2000),
               (3, 'Cy', 'cy@x.org', NULL, '{}', 3000);",
        )
        .unwrap();
        let ids = |text: &str| -> Vec<i64> {
            let f = Filter::parse(text).unwrap();
            let c = compile(Some(&f));
            let sql = format!("SELECT id FROM subscribers s WHERE {} ORDER BY id", c.sql);
            let mut st = db.prepare(&sql).unwrap();
            st.query_map(c.with(&[]).as_slice(), |r| r.get(0))
                .unwrap()
                .collect::<rusqlite::Result<Vec<i64>>>()
                .unwrap()
        };
        assert_eq!(ids(r#"city = "Lisboa""#), [1]);
        assert_eq!(ids(r#"city != "Lisboa""#), [2, 3]);
        assert_eq!(ids(r#"not city = "Lisboa""#), [2, 3]);
        assert_eq!(ids(r#"city in ("Lisboa", "Porto")"#), [1, 2]);
        assert_eq!(ids(r#"city not in ("Lisboa")"#), [2, 3]);
        assert_eq!(ids(r#"not city in ("Lisboa")"#), [2, 3]);
        assert_eq!(ids("has city"), [1, 2]);
        assert_eq!(ids("not has zone"), [1, 2, 3]);
        assert_eq!(ids("has name"), [1, 3]);
        assert_eq!(ids("has phone"), [2]);
        assert_eq!(ids(r#"n = "5""#), [1]);
        assert_eq!(ids(r#"email = "BOB@X.org" or name = "Cy""#), [2, 3]);
        assert_eq!(ids(r#"created_after "1970-01-01T00:00:02Z""#), [2, 3]);
        assert_eq!(ids(r#"created_before "1970-01-01T00:00:02Z""#), [1]);
    }
}
