//! Which context variables a template reads unguarded: the analysis behind `template::check`.
//! A variable printed, filtered, compared or iterated must be present for every recipient; one
//! behind `default(...)`, `is defined` or `{% if var %}` may be missing.
//!
//! It walks minijinja's syntax tree (the `unstable_machinery` feature, pinned to 2.24.x in
//! Cargo.toml because that API has no semver promise). A statement it does not follow makes
//! the whole template "opaque", and then every variable counts as unguarded: the walk may
//! refuse a template that would render, never accept one that would fail.

use minijinja::machinery::ast::{BinOpKind, Call, CallArg, Expr, ForLoop, IfExpr, Stmt};
use minijinja::machinery::{parse, WhitespaceConfig};
use minijinja::syntax::SyntaxConfig;
use std::collections::{BTreeSet, HashSet};

/// The names `source` reads where a missing value fails rendering under
/// `UndefinedBehavior::SemiStrict`, or `None` if the template uses a statement this walk does
/// not follow (macros, call blocks, imports, includes, extends, blocks): treat every variable
/// as unguarded then. A read is guarded, and not listed, when it is
/// - the value of a `default` (or `d`) filter: `{{ nickname | default("friend") }}`;
/// - the operand of `is defined` / `is undefined`;
/// - the condition of `{% if var %}` / `{% elif %}` / `x if var else y`, where the condition
///   is `var`, `var is defined`, or an `and` of those; then every read of those names in the
///   true branch is guarded too.
///
/// Names the template assigns itself (`set`, `for`, `with`) are not context reads; an
/// assignment inside a branch or loop body is forgotten at its end (the conservative choice).
// `SyntaxConfig` is a unit struct unless minijinja's `custom_syntax` feature is on.
#[allow(clippy::default_constructed_unit_structs)]
pub(super) fn unguarded(source: &str) -> Result<Option<BTreeSet<String>>, minijinja::Error> {
    let ast = parse(
        source,
        "<template>",
        SyntaxConfig::default(),
        WhitespaceConfig::default(),
    )?;
    let mut walk = Walk {
        scopes: vec![HashSet::new()],
        ..Walk::default()
    };
    walk.stmt(&ast);
    Ok((!walk.opaque).then_some(walk.out))
}

/// The condition names a guard: `var`, `var is defined`, `a and b` of guards.
fn guard_names<'s>(e: &Expr<'s>) -> Option<Vec<&'s str>> {
    match e {
        Expr::Var(v) => Some(vec![v.id]),
        Expr::Test(t) if t.name == "defined" && t.args.is_empty() => match &t.expr {
            Expr::Var(v) => Some(vec![v.id]),
            _ => None,
        },
        Expr::BinOp(b) if matches!(b.op, BinOpKind::ScAnd) => {
            let mut names = guard_names(&b.left)?;
            names.extend(guard_names(&b.right)?);
            Some(names)
        }
        _ => None,
    }
}

#[derive(Default)]
struct Walk<'s> {
    /// Names the template assigns, innermost scope last.
    scopes: Vec<HashSet<&'s str>>,
    /// Names known to be defined here (inside `{% if var %}`).
    guards: Vec<&'s str>,
    /// Unguarded reads of names the template does not assign.
    out: BTreeSet<String>,
    /// A statement the walk does not follow was seen.
    opaque: bool,
}

impl<'s> Walk<'s> {
    fn read(&mut self, id: &'s str) {
        if !self.guards.contains(&id) && !self.scopes.iter().any(|s| s.contains(id)) {
            self.out.insert(id.to_string());
        }
    }

    fn assign(&mut self, target: &Expr<'s>) {
        match target {
            Expr::Var(v) => {
                if let Some(scope) = self.scopes.last_mut() {
                    scope.insert(v.id);
                }
            }
            Expr::List(l) => l.items.iter().for_each(|x| self.assign(x)),
            // `ns.attr = ...` assigns no name.
            _ => {}
        }
    }

    fn scoped(&mut self, f: impl FnOnce(&mut Self)) {
        self.scopes.push(HashSet::new());
        f(self);
        self.scopes.pop();
    }

    /// `yes` with `names` known to be defined; `no` without.
    fn branch(&mut self, cond: &Expr<'s>, yes: impl FnOnce(&mut Self), no: impl FnOnce(&mut Self)) {
        match guard_names(cond) {
            Some(names) => {
                let n = self.guards.len();
                self.guards.extend(names);
                self.scoped(yes);
                self.guards.truncate(n);
            }
            None => {
                self.expr(cond);
                self.scoped(yes);
            }
        }
        self.scoped(no);
    }

    fn body(&mut self, stmts: &[Stmt<'s>]) {
        stmts.iter().for_each(|s| self.stmt(s));
    }

    fn stmt(&mut self, s: &Stmt<'s>) {
        match s {
            Stmt::Template(t) => self.body(&t.children),
            Stmt::EmitExpr(e) => self.expr(&e.expr),
            Stmt::EmitRaw(_) => {}
            Stmt::ForLoop(f) => self.for_loop(f),
            Stmt::IfCond(c) => {
                self.branch(&c.expr, |w| w.body(&c.true_body), |w| w.body(&c.false_body))
            }
            Stmt::WithBlock(b) => self.scoped(|w| {
                for (target, value) in &b.assignments {
                    w.expr(value);
                    w.assign(target);
                }
                w.body(&b.body);
            }),
            Stmt::Set(x) => {
                self.expr(&x.expr);
                self.assign(&x.target);
            }
            Stmt::SetBlock(x) => {
                self.scoped(|w| w.body(&x.body));
                if let Some(f) = &x.filter {
                    self.expr(f);
                }
                self.assign(&x.target);
            }
            Stmt::AutoEscape(a) => {
                self.expr(&a.enabled);
                self.scoped(|w| w.body(&a.body));
            }
            Stmt::FilterBlock(f) => {
                self.expr(&f.filter);
                self.scoped(|w| w.body(&f.body));
            }
            Stmt::Do(d) => self.call(&d.call),
            _ => self.opaque = true,
        }
    }

    fn for_loop(&mut self, f: &ForLoop<'s>) {
        self.expr(&f.iter);
        self.scoped(|w| {
            if let Some(scope) = w.scopes.last_mut() {
                scope.insert("loop");
            }
            w.assign(&f.target);
            if let Some(e) = &f.filter_expr {
                w.expr(e);
            }
            w.body(&f.body);
        });
        self.scoped(|w| w.body(&f.else_body));
    }

    fn if_expr(&mut self, x: &IfExpr<'s>) {
        self.branch(
            &x.test_expr,
            |w| w.expr(&x.true_expr),
            |w| {
                if let Some(e) = &x.false_expr {
                    w.expr(e);
                }
            },
        );
    }

    fn call(&mut self, c: &Call<'s>) {
        self.expr(&c.expr);
        self.args(&c.args);
    }

    fn args(&mut self, args: &[CallArg<'s>]) {
        for a in args {
            match a {
                CallArg::Pos(e) | CallArg::Kwarg(_, e) | CallArg::PosSplat(e) => self.expr(e),
                CallArg::KwargSplat(e) => self.expr(e),
            }
        }
    }

    fn expr(&mut self, e: &Expr<'s>) {
        match e {
            Expr::Var(v) => self.read(v.id),
            Expr::Const(_) => {}
            Expr::Filter(f) => {
                let defaulted =
                    matches!(f.name, "default" | "d") && matches!(f.expr, Some(Expr::Var(_)));
                if let Some(x) = f.expr.as_ref().filter(|_| !defaulted) {
                    self.expr(x);
                }
                self.args(&f.args);
            }
            Expr::Test(t) => {
                if !(matches!(t.name, "defined" | "undefined") && matches!(t.expr, Expr::Var(_))) {
                    self.expr(&t.expr);
                }
                self.args(&t.args);
            }
            Expr::IfExpr(x) => self.if_expr(x),
            Expr::UnaryOp(x) => self.expr(&x.expr),
            Expr::BinOp(x) => {
                self.expr(&x.left);
                self.expr(&x.right);
            }
            Expr::Compare(x) => {
                self.expr(&x.expr);
                x.ops.iter().for_each(|op| self.expr(&op.expr));
            }
            Expr::GetAttr(x) => self.expr(&x.expr),
            Expr::GetItem(x) => {
                self.expr(&x.expr);
                self.expr(&x.subscript_expr);
            }
            Expr::Slice(x) => {
                self.expr(&x.expr);
                [&x.start, &x.stop, &x.step]
                    .into_iter()
                    .flatten()
                    .for_each(|p| self.expr(p));
            }
            Expr::Call(x) => self.call(x),
            Expr::List(x) => x.items.iter().for_each(|i| self.expr(i)),
            Expr::Map(x) => x.keys.iter().chain(&x.values).for_each(|i| self.expr(i)),
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn reads(source: &str) -> Option<Vec<String>> {
        unguarded(source)
            .expect("parses")
            .map(|s| s.into_iter().collect())
    }

    #[test]
    fn guarded_reads_are_not_listed() {
        let cases: [(&str, &[&str]); 12] = [
            ("{{ a }} {{ b | upper }}", &["a", "b"]),
            ("{{ a | default('x') }} {{ b | d('y') | upper }}", &[]),
            ("{{ a | upper | default('x') }}", &["a"]),
            ("{{ a | default(b) }}", &["b"]),
            ("{% if a %}{{ a }}{% else %}{{ a }}{% endif %}", &["a"]),
            ("{% if a is defined and b %}{{ a }}{{ b }}{% endif %}", &[]),
            ("{% if a or b %}{{ a }}{% endif %}", &["a", "b"]),
            ("{% if a == 'x' %}{{ c }}{% endif %}", &["a", "c"]),
            ("{% if a %}{% elif b %}{{ b }}{{ a }}{% endif %}", &["a"]),
            ("{{ a if a else 'none' }} {{ c is defined }}", &[]),
            ("{% set x = a | default('z') %}{{ x }}", &[]),
            (
                "{% for i in items %}{{ i }}{{ loop.index }}{% endfor %}",
                &["items"],
            ),
        ];
        for (src, want) in cases {
            assert_eq!(
                reads(src),
                Some(want.iter().map(|s| s.to_string()).collect()),
                "{src}"
            );
        }
    }

    #[test]
    fn assignments_inside_a_branch_do_not_leak_and_macros_are_opaque() {
        assert_eq!(
            reads("{% if a %}{% set n = 'x' %}{% endif %}{{ n }}"),
            Some(vec!["n".to_string()])
        );
        assert_eq!(
            reads("{% macro m(x) %}{{ x }}{% endmacro %}{{ m(a) }}"),
            None
        );
    }
}
