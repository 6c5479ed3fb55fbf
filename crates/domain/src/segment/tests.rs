//! Unit tests of the filter language: the grammar, its bounds, its error messages, and hostile
//! input that must never panic.

use super::*;

fn attr(s: &str) -> Field {
    Field::Attr(s.to_string())
}

fn eq(f: &str, v: &str) -> Filter {
    Filter::Cond(Cond::Eq(attr(f), v.to_string()))
}

fn err(text: &str) -> String {
    match Filter::parse(text) {
        Ok(f) => panic!("{text:?} parsed as {f:?}"),
        Err(e) => {
            assert_eq!(e.kind, crate::error::ErrorKind::Invalid, "{e}");
            e.message
        }
    }
}

#[test]
fn conditions() {
    assert_eq!(
        Filter::parse(r#"city = "Lisboa""#).unwrap(),
        eq("city", "Lisboa")
    );
    assert_eq!(
        Filter::parse(r#"city != "Lisboa""#).unwrap(),
        Filter::Cond(Cond::Ne(attr("city"), "Lisboa".into()))
    );
    assert_eq!(
        Filter::parse(r#"plan in ("pro","team")"#).unwrap(),
        Filter::Cond(Cond::In(attr("plan"), vec!["pro".into(), "team".into()]))
    );
    assert_eq!(
        Filter::parse(r#"plan NOT IN ("free")"#).unwrap(),
        Filter::Cond(Cond::NotIn(attr("plan"), vec!["free".into()]))
    );
    assert_eq!(
        Filter::parse("has phone").unwrap(),
        Filter::Cond(Cond::Has(Field::Phone))
    );
    assert_eq!(
        Filter::parse("HAS first-name").unwrap(),
        Filter::Cond(Cond::Has(attr("first-name")))
    );
    assert_eq!(
        Filter::parse(r#"created_after "2026-01-01""#).unwrap(),
        Filter::Cond(Cond::CreatedAfter(1_767_225_600_000))
    );
    assert_eq!(
        Filter::parse(r#"Created_Before "2026-01-01T00:00:01Z""#).unwrap(),
        Filter::Cond(Cond::CreatedBefore(1_767_225_601_000))
    );
    // email is compared normalised: the value is lower-cased like the stored address.
    assert_eq!(
        Filter::parse(r#"email = "Ann@Example.ORG""#).unwrap(),
        Filter::Cond(Cond::Eq(Field::Email, "ann@example.org".into()))
    );
    assert_eq!(
        Filter::parse(r#"name = "Ann""#).unwrap(),
        Filter::Cond(Cond::Eq(Field::Name, "Ann".into()))
    );
}

#[test]
fn precedence_and_nesting() {
    // and binds tighter than or; not binds tightest.
    let f = Filter::parse(r#"a = "1" or b = "2" and not c = "3""#).unwrap();
    assert_eq!(
        f,
        Filter::Or(vec![
            eq("a", "1"),
            Filter::And(vec![eq("b", "2"), Filter::Not(Box::new(eq("c", "3")))]),
        ])
    );
    let f = Filter::parse(r#"not (a = "1" or b = "2") AND c = "3""#).unwrap();
    assert_eq!(
        f,
        Filter::And(vec![
            Filter::Not(Box::new(Filter::Or(vec![eq("a", "1"), eq("b", "2")]))),
            eq("c", "3"),
        ])
    );
    assert_eq!(Filter::parse(r#"((a = "1"))"#).unwrap(), eq("a", "1"));
    let fields =
        Filter::parse(r#"a = "1" or (has name and b in ("x")) or created_after "2026-01-01""#)
            .unwrap()
            .fields();
    assert_eq!(
        fields.into_iter().collect::<Vec<_>>(),
        vec!["a", "b", "name"]
    );
}

#[test]
fn strings_and_escapes() {
    assert_eq!(
        Filter::parse(r#"city = "say \"hi\" \\ o/""#).unwrap(),
        eq("city", r#"say "hi" \ o/"#)
    );
    assert_eq!(Filter::parse(r#"city = """#).unwrap(), eq("city", ""));
    assert_eq!(
        Filter::parse("city = \"x' OR 1=1 --\"").unwrap(),
        eq("city", "x' OR 1=1 --")
    );
    assert_eq!(
        Filter::parse("city = \"Zürich 東京\"").unwrap(),
        eq("city", "Zürich 東京")
    );
    let m = err(r#"city = "a\nb""#);
    assert!(m.contains("column 10") && m.contains(r"expected \"), "{m}");
    let m = err(r#"city = "Lisboa"#);
    assert!(
        m.contains("column 8") && m.contains("no closing double quote"),
        "{m}"
    );
}

#[test]
fn errors_name_the_column_and_what_was_expected() {
    let cases: &[(&str, usize, &str)] = &[
        (
            r#"city "Lisboa""#,
            6,
            r#"expected "=", "!=", "in" or "not in" after the field city"#,
        ),
        (r#"city = Lisboa"#, 8, "expected a string"),
        (r#"city = "a" and"#, 15, "found the end of the filter"),
        (r#"city = "a" "b""#, 12, r#"expected "and", "or""#),
        (r#"(city = "a""#, 12, r#"expected ")""#),
        (r#"plan in "pro""#, 9, r#"expected "(" after "in""#),
        (r#"plan in ()"#, 10, "expected a string"),
        (r#"plan in ("a" "b")"#, 14, r#"expected "," or ")""#),
        (r#"plan not "a""#, 10, r#"expected "in" after "not""#),
        (r#"city == "a""#, 7, "expected a string"),
        (r#"city = 'a'"#, 8, "unexpected character '\\''"),
        (r#"and = "a""#, 1, "keyword \"and\""),
        (r#"has "x""#, 5, "expected a field name"),
        (r#"created_after "yesterday""#, 15, "expected a date"),
        (r#"created_after "2026-13-01""#, 15, "expected a date"),
        ("", 1, "expected a field name"),
        // Columns count characters, not bytes.
        ("cité = \"x\"", 4, "'é'"),
    ];
    for (text, col, want) in cases {
        let m = err(text);
        assert!(
            m.contains(&format!("at column {col}:")) && m.contains(want),
            "{text:?}: {m}"
        );
    }
}

#[test]
fn bounds() {
    let long = format!("city = \"{}\"", "x".repeat(MAX_TEXT_BYTES));
    assert!(err(&long).contains("more than the limit of 4096"));
    let deep = format!("{}city = \"a\"{}", "(".repeat(16), ")".repeat(16));
    assert!(Filter::parse(&deep).is_ok());
    let deeper = format!("{}city = \"a\"{}", "(".repeat(17), ")".repeat(17));
    assert!(err(&deeper).contains("deeper than 16"));
    let nots = format!("{}city = \"a\"", "not ".repeat(17));
    assert!(err(&nots).contains("deeper than 16"));
    // Depth is nesting, not count: many sibling groups are fine.
    let siblings = vec!["(a = \"1\")"; 40].join(" or ");
    assert!(Filter::parse(&siblings).is_ok());
    let values = |n: usize| {
        let v: Vec<String> = (0..n).map(|i| format!("\"{i}\"")).collect();
        format!("plan in ({})", v.join(","))
    };
    assert!(Filter::parse(&values(256)).is_ok());
    assert!(err(&values(257)).contains("more than 256 values"));
    let conds = |n: usize| vec!["a = \"1\""; n].join(" and ");
    assert!(Filter::parse(&conds(64)).is_ok());
    assert!(err(&conds(65)).contains("more than 64 conditions"));
}

#[test]
fn unknown_fields_are_listed_with_the_available_ones() {
    let attrs: BTreeSet<String> = ["city", "plan"].iter().map(|s| s.to_string()).collect();
    let f = Filter::parse(r#"city = "a" and (cty = "b" or has zone) and email != "x""#).unwrap();
    let m = f.check_fields(&attrs).unwrap_err().message;
    assert!(m.contains("unknown field(s) cty:"), "{m}");
    assert!(m.contains("have city, plan"), "{m}");
    assert!(m.contains("`not has`"), "{m}");
    // A field only tested with `has` may be one nobody has yet: a guard written ahead of time.
    assert!(Filter::parse("not has churned and city = \"a\"")
        .unwrap()
        .check_fields(&attrs)
        .is_ok());
    assert!(Filter::parse("churned = \"yes\"")
        .unwrap()
        .check_fields(&attrs)
        .is_err());
    assert!(Filter::parse(r#"has name and plan = "x""#)
        .unwrap()
        .check_fields(&attrs)
        .is_ok());
    let m = f.check_fields(&BTreeSet::new()).unwrap_err().message;
    assert!(
        m.contains("no subscriber of the account has attributes"),
        "{m}"
    );
}

#[test]
fn a_stored_filter_that_no_longer_parses_is_damage() {
    let e = Filter::parse_stored("city = ", 7).unwrap_err();
    assert_eq!(e.kind, crate::error::ErrorKind::Damaged);
    assert!(e.message.contains("campaign 7"), "{}", e.message);
}

/// xorshift64*: a fixed sequence, so a failure is reproducible.
struct Rng(u64);

impl Rng {
    fn next(&mut self) -> u64 {
        self.0 ^= self.0 >> 12;
        self.0 ^= self.0 << 25;
        self.0 ^= self.0 >> 27;
        self.0.wrapping_mul(0x2545_F491_4F6C_DD1D)
    }

    fn pick<'a>(&mut self, from: &[&'a str]) -> &'a str {
        from[(self.next() % from.len() as u64) as usize]
    }
}

const PIECES: &[&str] = &[
    "city",
    "plan",
    "name",
    "email",
    "phone",
    "has",
    "not",
    "in",
    "and",
    "or",
    "AND",
    "Or",
    "created_after",
    "created_before",
    "=",
    "!=",
    "!",
    "(",
    ")",
    ",",
    "\"",
    "\\",
    "\\\"",
    "\"Lisboa\"",
    "\"2026-01-01\"",
    "\"x' OR 1=1 --\"",
    "'; DROP TABLE subscribers; --",
    "'",
    ";",
    "--",
    "/*",
    "*/",
    "é",
    "東京",
    "\u{2028}",
    "\u{0}",
    "\u{feff}",
    "𝔘",
    "\u{301}",
    " ",
    "\t",
    "\n",
    "-",
    "_",
    "0",
    "$.a",
    "\"\"",
    "((((",
    "))))",
];

/// Random token soup, mutations of valid filters and very long inputs: parse returns `Ok` or
/// `Err` and never panics; whatever parses reports its fields.
#[test]
fn hostile_input_never_panics() {
    let mut rng = Rng(0x9E37_79B9_7F4A_7C15);
    let valid = [
        r#"city = "Lisboa" and not (plan in ("pro", "team") or has phone)"#,
        r#"created_after "2026-01-01" or email != "a@b.c""#,
    ];
    for round in 0..20_000 {
        let text = if round % 4 == 0 {
            // Cut a valid filter anywhere (on a char boundary) and splice in a piece.
            let base = valid[round % 2];
            let cut = (rng.next() as usize) % (base.len() + 1);
            let cut = (0..=cut)
                .rev()
                .find(|&i| base.is_char_boundary(i))
                .unwrap_or(0);
            format!("{}{}{}", &base[..cut], rng.pick(PIECES), &base[cut..])
        } else {
            let n = (rng.next() % 24) as usize;
            let mut s = String::new();
            for _ in 0..n {
                s.push_str(rng.pick(PIECES));
                if rng.next().is_multiple_of(2) {
                    s.push(' ');
                }
            }
            s
        };
        if let Ok(f) = Filter::parse(&text) {
            let _ = f.fields();
        }
    }
    for piece in PIECES {
        let long = piece.repeat(MAX_TEXT_BYTES / piece.len().max(1));
        let _ = Filter::parse(&long);
        let _ = Filter::parse(&format!("city = \"{}\"", long));
    }
    let _ = Filter::parse(&"not ".repeat(1000));
    let _ = Filter::parse(&"(".repeat(4000));
}
