//! The dashboard's sessions: admins made by `sendonce admin`, login through the form in a real
//! browser and over HTTP, cookies, CSRF, logout, rate limits. (Each group of pages has its own
//! file: dashboard_*.rs.)

use crate::common::dashboard::{create_admin, scenario, Admin, PASSWORD};
use crate::common::{output_dir, Env, Server};
use serde_json::json;

fn setup() -> (Env, Server) {
    let env = Env::new();
    env.ok(&["init"]);
    env.ok(&["account", "add", "acme"]);
    create_admin(&env, "acme", "ana");
    let server = Server::start(&env, &[]);
    (env, server)
}

#[test]
fn an_admin_logs_in_with_the_keyboard_and_out_again() {
    let (_env, server) = setup();
    let out = output_dir("dashboard");
    let v = scenario(
        &server.base,
        &out,
        360,
        json!([
            {"goto": "/admin/campaigns"},
            {"expect_text": "sendonce dashboard"},
            {"screenshot": "login-360"},
            {"no_overflow": true},
            {"login": ["ana", PASSWORD]},
            {"expect_text": "Campaigns"},
            {"expect_text": "ana"},
            {"no_overflow": true},
            {"click": "Log out", "keyboard": true},
            {"expect_text": "sendonce dashboard"},
            {"goto": "/admin/campaigns"},
            {"expect_text": "Log in"},
        ]),
    );
    assert_eq!(v["statuses"][0], 200);
    crate::common::assert_png(&out.join("login-360.png"), 2000, None);
}

#[test]
fn sessions_cookies_and_refusals() {
    let (_env, server) = setup();
    let anon = Admin::anonymous(&server.base);
    let r = anon.get("/admin/campaigns?status=sent");
    assert_eq!(r.status, 303);
    assert_eq!(
        r.location(),
        Some("/admin/login?next=%2Fadmin%2Fcampaigns%3Fstatus%3Dsent")
    );
    let wrong = anon.try_login("ana", "not the password at all");
    assert_eq!(wrong.status, 401, "{}", wrong.body);
    assert!(wrong.body.contains("Wrong name or password"));
    let nobody = anon.try_login("bo", PASSWORD);
    assert_eq!(nobody.status, 401);
    let ok = anon.try_login("ana", PASSWORD);
    assert_eq!(ok.status, 303);
    let cookie = ok
        .headers
        .get_all("set-cookie")
        .iter()
        .map(|v| v.to_str().unwrap().to_string())
        .find(|c| c.starts_with("sendonce_session="))
        .unwrap();
    for part in ["HttpOnly", "SameSite=Strict", "Path=/admin"] {
        assert!(cookie.contains(part), "{cookie}");
    }
    assert!(!cookie.contains("Secure"), "plain HTTP: {cookie}");
    let a = Admin::login(&server.base, "ana", PASSWORD);
    // The logout form without its CSRF token: refused, the session lives on.
    assert_eq!(a.post_raw("/admin/logout", &[]).status, 403);
    assert_eq!(a.get("/admin/campaigns").status, 200);
    assert_eq!(a.post("/admin/logout", &[]).status, 303);
    assert_eq!(a.get("/admin/campaigns").status, 303);
}
