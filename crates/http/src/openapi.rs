//! `GET /v1/openapi.json`: the OpenAPI 3.1 document of every route `http::route_list()` serves,
//! built by hand with serde_json (no crate: a few routes, and the test compares the document
//! with `route_list()` so a route added without its description fails).

use super::AppState;
use axum::response::{IntoResponse, Response};
use axum::Json;
use serde_json::{json, Value};

/// The routes of this module, as (method, path).
pub const ROUTES: &[(&str, &str)] = &[("GET", "/v1/openapi.json")];

pub fn routes() -> axum::Router<AppState> {
    axum::Router::new().route("/v1/openapi.json", axum::routing::get(serve))
}

pub async fn serve() -> Response {
    Json(document()).into_response()
}

/// The whole document.
pub fn document() -> Value {
    let mut paths = ops_paths();
    for more in [
        message_paths(),
        resource_paths(),
        optin_paths(),
        page_paths(),
        hook_paths(),
    ] {
        if let (Some(p), Value::Object(m)) = (paths.as_object_mut(), more) {
            p.extend(m);
        }
    }
    json!({
        "openapi": "3.1.0",
        "info": {
            "title": "sendonce",
            "version": env!("CARGO_PKG_VERSION"),
            "description": "Transactional email and SMS through an exactly-once send ledger. \
                Every /v1 route takes a bearer token (`sendonce token create`) scoped to one \
                account; errors share one shape.",
        },
        "security": [{"bearer": []}],
        "paths": paths,
        "components": {
            "securitySchemes": {"bearer": {"type": "http", "scheme": "bearer"}},
            "schemas": schemas(),
            "responses": error_responses(),
        },
    })
}

/// An answer with an `Error` body.
fn error_ref(name: &str) -> Value {
    json!({"$ref": format!("#/components/responses/{name}")})
}

/// Answers in the one error shape, by name.
fn error_responses() -> Value {
    let one = |d: &str| {
        json!({"description": d, "content": {"application/json": {
            "schema": {"$ref": "#/components/schemas/Error"}}}})
    };
    json!({
        "Invalid": one("The request is invalid (`invalid`)."),
        "Unauthorized": one("No token, or not a valid one (`unauthorized`)."),
        "Forbidden": one("The token's scope does not allow this (`forbidden`)."),
        "NotFound": one("No such thing in the token's account (`not_found`)."),
        "Conflict": one("A request with this Idempotency-Key is still in progress (`conflict`)."),
        "KeyReused": one("The Idempotency-Key was used with another body (`idempotency_key_reused`)."),
        "TooLarge": one("The body is larger than the server's limit (`too_large`)."),
    })
}

/// `/healthz`, `/readyz`, `/metrics` and this document: no authentication.
fn ops_paths() -> Value {
    let open = |summary: &str, content: Value| {
        json!({"get": {"summary": summary, "security": [],
            "responses": {"200": {"description": "OK", "content": content}}}})
    };
    let any = json!({"application/json": {"schema": {"type": "object"}}});
    let mut ready = open(
        "Ready: database writable, schema version, in-process worker running.",
        json!({"application/json": {"schema": {"$ref": "#/components/schemas/Ready"}}}),
    );
    ready["get"]["responses"]["503"] = json!({"description": "Not ready",
        "content": {"application/json": {"schema": {"$ref": "#/components/schemas/Ready"}}}});
    json!({
        "/healthz": open("The process answers.", any.clone()),
        "/readyz": ready,
        "/metrics": open("Metrics in the Prometheus text format (0.0.4).",
            json!({"text/plain": {"schema": {"type": "string"}}})),
        "/v1/openapi.json": open("This document.", any),
    })
}

/// The double opt-in confirm page and the public signup form: HTML for people, no token.
fn optin_paths() -> Value {
    let html = |summary: &str, codes: &[(&str, &str)]| {
        let mut responses = serde_json::Map::new();
        for (code, what) in codes {
            responses.insert(
                code.to_string(),
                json!({"description": what, "content": {"text/html": {"schema": {"type": "string"}}}}),
            );
        }
        json!({"summary": summary, "security": [], "responses": responses})
    };
    let token = json!([{"name": "token", "in": "path", "required": true,
        "schema": {"type": "string"}}]);
    let list = json!([{"name": "list", "in": "path", "required": true,
        "schema": {"type": "string"}, "description": "The id of a public list."}]);
    let form = json!({"required": true, "content": {"application/x-www-form-urlencoded": {
        "schema": {"type": "object", "required": ["list", "email"], "properties": {
            "list": {"type": "string", "description": "The list's id."},
            "email": {"type": "string"},
            "name": {"type": "string"},
            "website": {"type": "string", "description": "Honeypot: leave empty."}}}}}});
    let mut get_c = html(
        "The confirm page of a double opt-in link: list, masked address, a button. Changes nothing.",
        &[("200", "The page"), ("404", "Link not valid"), ("503", "Links not set up")],
    );
    get_c["parameters"] = token.clone();
    let mut post_c = html(
        "Confirm: the pending membership becomes subscribed (never from unsubscribed).",
        &[
            ("200", "What happened"),
            ("404", "Link not valid"),
            ("503", "Links not set up"),
        ],
    );
    post_c["parameters"] = token;
    let mut get_s = html(
        "A public list's signup form.",
        &[("200", "The form"), ("404", "No such public list")],
    );
    get_s["parameters"] = list;
    let mut post_s = html(
        "Sign up to a public list: always the same answer, whether or not the address was known.",
        &[
            (
                "200",
                "Check your inbox (double opt-in) or subscribed (single)",
            ),
            ("400", "The form is incomplete or the address is not valid"),
            ("404", "No such public list"),
            ("429", "Too many signups from this client address"),
        ],
    );
    post_s["requestBody"] = form;
    json!({
        "/c/{token}": {"get": get_c, "post": post_c},
        "/subscribe/{list}": {"get": get_s},
        "/subscribe": {"post": post_s},
    })
}

/// `POST /hooks/{source}/{account}`: provider webhooks, verified by the provider's own
/// signature (no bearer token).
fn hook_paths() -> Value {
    let account = json!([{"name": "account", "in": "path", "required": true,
        "description": "The account's name or id, as in its [[webhook]] entry.",
        "schema": {"type": "string"}}]);
    let one = |summary: &str, body: Value, ok: Value| {
        json!({"post": {
            "summary": summary, "security": [], "parameters": account.clone(),
            "requestBody": {"required": true, "content": body},
            "responses": {
                "200": {"description": "Recorded (or a replay of a recorded event)",
                        "content": ok},
                "400": error_ref("Invalid"),
                "401": error_ref("Unauthorized"),
                "403": error_ref("Forbidden"),
                "404": error_ref("NotFound"),
                "409": {"description": "The same event id came before with another body",
                        "content": {"application/json": {"schema": {"$ref": "#/components/schemas/Error"}}}},
                "413": error_ref("TooLarge"),
            },
        }})
    };
    let receipt_schema = json!({"type": "object", "properties": {
        "source": {"type": "string"}, "event_id": {"type": "string"},
        "action": {"type": "string", "enum": ["suppressed", "unsuppressed", "settled_sent",
            "settled_failed", "recorded", "ignored"]},
        "replay": {"type": "boolean"}}});
    let receipt = json!({"application/json": {"schema": receipt_schema.clone()}});
    let many = json!({"type": "object", "properties": {
        "source": {"type": "string"},
        "events": {"type": "array", "items": receipt_schema}}});
    let subscription = json!({"type": "object", "properties": {
        "source": {"type": "string"}, "kind": {"type": "string"},
        "topic_arn": {"type": "string"}, "subscribe_url": {"type": "string"},
        "note": {"type": "string"}}});
    let receipts = json!({"application/json": {"schema": many.clone()}});
    let sns_reply = json!({"application/json": {"schema": {"oneOf": [many, subscription]}}});
    let object = json!({"application/json": {"schema": {"type": "object"}}});
    let array = json!({"application/json": {"schema": {"type": "array",
        "items": {"type": "object"}}}});
    let sns = json!({"text/plain": {"schema": {"type": "string"}},
                     "application/json": {"schema": {"type": "object"}}});
    let form = json!({"application/x-www-form-urlencoded": {"schema": {"type": "object"}}});
    let twiml = json!({"text/xml": {"schema": {"type": "string"}}});
    json!({
        "/hooks/twilio/{account}": one(
            "Twilio inbound messages (STOP/START) and status callbacks; X-Twilio-Signature.",
            form, twiml),
        "/hooks/postmark/{account}": one(
            "Postmark bounce, spam complaint, subscription change and delivery webhooks; \
             Basic auth.", object.clone(), receipt.clone()),
        "/hooks/resend/{account}": one(
            "Resend email events; Svix signature (svix-id, svix-timestamp, svix-signature).",
            object.clone(), receipt.clone()),
        "/hooks/standard/{account}": one(
            "Standard Webhooks (webhook-id, webhook-timestamp, webhook-signature) with \
             {type: message.bounced|complained|delivered|failed, data: {job_id, to, channel}}.",
            object.clone(), receipt.clone()),
        "/hooks/mailgun/{account}": one(
            "Mailgun webhooks (delivered, failed, complained, unsubscribed); the body's \
             signature: HMAC-SHA256 of timestamp and token with the webhook signing key.",
            object.clone(), receipt.clone()),
        "/hooks/sendgrid/{account}": one(
            "SendGrid Event Webhook batches; ECDSA P-256 signature \
             (X-Twilio-Email-Event-Webhook-Signature, -Timestamp) with the verification key.",
            array, receipts),
        "/hooks/brevo/{account}": one(
            "Brevo transactional webhooks; Basic auth or a bearer token on the webhook URL.",
            object, receipt),
        "/hooks/ses/{account}": one(
            "Amazon SES notifications through SNS (SubscriptionConfirmation, Notification); \
             SNS signature versions 1 and 2 with the configured certificate and topic.",
            sns, sns_reply),
    })
}

/// `POST /v1/messages`, `POST /v1/messages/batch` and `GET /v1/messages/{id}`.
fn message_paths() -> Value {
    let view = json!({"application/json": {"schema": {"$ref": "#/components/schemas/Message"}}});
    json!({
        "/v1/messages": {"post": {
            "summary": "Send one transactional email or SMS (scope send).",
            "description": "Same Idempotency-Key and body: the first answer again, with \
                `Idempotent-Replayed: true`; never a second send.",
            "parameters": [
                {"name": "Idempotency-Key", "in": "header", "required": true,
                 "schema": {"type": "string", "minLength": 1}},
                {"name": "wait", "in": "query", "required": false,
                 "description": "Wait up to this long (e.g. 5s, 500ms; at most 30s) for the outcome.",
                 "schema": {"type": "string"}},
            ],
            "requestBody": {"required": true, "content": {"application/json": {
                "schema": {"$ref": "#/components/schemas/MessageRequest"}}}},
            "responses": {
                "200": {"description": "Settled (sent, suppressed, failed or in doubt).", "content": view},
                "202": {"description": "Queued.", "content": view},
                "400": error_ref("Invalid"), "401": error_ref("Unauthorized"),
                "403": error_ref("Forbidden"), "409": error_ref("Conflict"),
                "413": error_ref("TooLarge"), "422": error_ref("KeyReused"),
            },
        }},
        "/v1/messages/batch": {"post": {
            "summary": "Send up to 500 transactional messages in one request (scope send).",
            "description": "Each message has its own Idempotency-Key: `idempotency_keys` (one \
                per message, in order) or the Idempotency-Key header (message i gets KEY#i), \
                never both. Each message is checked and answered on its own, as a single POST \
                would be (202 and the message, a replay of its key's first answer, or an \
                error); one refused message does not stop the others. 400 only when the \
                batch itself is malformed.",
            "parameters": [
                {"name": "Idempotency-Key", "in": "header", "required": false,
                 "schema": {"type": "string", "minLength": 1}},
            ],
            "requestBody": {"required": true, "content": {"application/json": {"schema": {
                "type": "object", "additionalProperties": false, "required": ["messages"],
                "properties": {
                    "messages": {"type": "array", "minItems": 1, "maxItems": 500,
                                 "items": {"$ref": "#/components/schemas/MessageRequest"}},
                    "idempotency_keys": {"type": "array", "items": {"type": "string"}},
                }}}}},
            "responses": {
                "200": {"description": "One result per message, in order.",
                        "content": {"application/json": {"schema": {
                    "type": "object", "required": ["accepted", "refused", "results"],
                    "properties": {
                        "accepted": {"type": "integer"}, "refused": {"type": "integer"},
                        "results": {"type": "array", "items": {"type": "object",
                            "required": ["index", "status"],
                            "properties": {
                                "index": {"type": "integer"}, "status": {"type": "integer"},
                                "replayed": {"type": "boolean"},
                                "message": {"$ref": "#/components/schemas/Message"},
                                "error": {"type": "object"}}}}}}}}},
                "400": error_ref("Invalid"), "401": error_ref("Unauthorized"),
                "403": error_ref("Forbidden"), "413": error_ref("TooLarge"),
            },
        }},
        "/v1/messages/{id}": {"get": {
            "summary": "A message of the token's account (scope send or read).",
            "parameters": [{"name": "id", "in": "path", "required": true,
                            "schema": {"type": "integer"}}],
            "responses": {
                "200": {"description": "The message.", "content": view},
                "401": error_ref("Unauthorized"), "403": error_ref("Forbidden"),
                "404": error_ref("NotFound"),
            },
        }},
    })
}

/// The resource routes (`resources::ROUTES`): JSON objects in and out, described loosely; the
/// docs/api.md lists their fields. Reads need scope read, writes admin.
fn resource_paths() -> Value {
    let mut paths = serde_json::Map::new();
    for (method, path) in super::resources::ROUTES {
        let params: Vec<Value> = path
            .split('/')
            .filter_map(|seg| seg.strip_prefix('{')?.strip_suffix('}'))
            .map(|name| {
                json!({"name": name, "in": "path", "required": true,
                               "schema": {"type": "string"}})
            })
            .collect();
        let obj = json!({"application/json": {"schema": {"type": "object"}}});
        let write = *method != "GET";
        let mut op = json!({
            "summary": format!("{method} {path} (scope {})", if write { "admin" } else { "read" }),
            "parameters": params,
            "responses": {
                "200": {"description": "OK", "content": obj.clone()},
                "400": error_ref("Invalid"), "401": error_ref("Unauthorized"),
                "403": error_ref("Forbidden"), "404": error_ref("NotFound"),
                "409": error_ref("Conflict"),
            },
        });
        if *method == "POST" {
            op["responses"]["201"] = json!({"description": "Created", "content": obj.clone()});
        }
        if matches!(*method, "POST" | "PATCH") {
            op["requestBody"] = json!({"required": false, "content": obj});
        }
        let entry = paths.entry(path.to_string()).or_insert_with(|| json!({}));
        entry[method.to_ascii_lowercase()] = op;
    }
    Value::Object(paths)
}

/// The unsubscribe page (`/u/{token}`, in `pages::route_list`): HTML, no bearer token (the
/// link's sealed token is its own authority). A form POST takes url-encoded or multipart fields.
fn page_paths() -> Value {
    let mut paths = serde_json::Map::new();
    let html = json!({"text/html": {"schema": {"type": "string"}}});
    let page = |d: &str| json!({"description": d, "content": html.clone()});
    let routes = super::pages::route_list();
    for (method, path) in routes.iter().filter(|(_, p)| p.starts_with("/u/")) {
        let params: Vec<Value> = path
            .split('/')
            .filter_map(|seg| seg.strip_prefix('{')?.strip_suffix('}'))
            .map(|name| {
                json!({"name": name, "in": "path", "required": true,
                               "schema": {"type": "string"}})
            })
            .collect();
        let mut op = json!({
            "summary": format!("{method} {path}: a page for recipients (HTML)"),
            "security": [],
            "parameters": params,
            "responses": {
                "200": page("The page (or, for an RFC 8058 one-click POST, a short text)."),
                "400": page("A malformed link or form."),
                "404": page("The link is not valid."),
                "503": page("Not set up on this server, or try again later."),
            },
        });
        if *method == "POST" {
            let form = json!({"schema": {"type": "object"}});
            op["requestBody"] = json!({"required": false, "content": {
                "application/x-www-form-urlencoded": form.clone(),
                "multipart/form-data": form}});
        }
        let entry = paths.entry(path.to_string()).or_insert_with(|| json!({}));
        entry[method.to_ascii_lowercase()] = op;
    }
    Value::Object(paths)
}

fn schemas() -> Value {
    let text = |d: &str| json!({"type": ["string", "null"], "description": d});
    json!({
        "Error": {"type": "object", "required": ["error"], "properties": {"error": {
            "type": "object", "required": ["code", "message", "request_id"],
            "properties": {"code": {"type": "string"}, "message": {"type": "string"},
                           "request_id": {"type": "string"}}}}},
        "Ready": {"type": "object", "properties": {
            "status": {"enum": ["ready", "not_ready"]},
            "database": {"enum": ["ok", "unavailable"]},
            "schema_version": {"type": "integer"},
            "worker": {"enum": ["none", "running", "stopped"]}}},
        "MessageRequest": {"type": "object", "additionalProperties": false, "required": ["to"],
            "properties": {
                "to": {"type": "string", "description": "An email address or an E.164 number."},
                "channel": {"enum": ["email", "sms", null],
                            "description": "Default: from the shape of `to`."},
                "from": text("Sender address (email) or id (SMS)."),
                "reply_to": text("Reply-To address (email)."),
                "subject": text("Subject (email)."),
                "text": text("The text part (SMS: the whole message)."),
                "html": text("The HTML part (email); alone, the text part is generated from it."),
                "template": text("A stored template's name (POST /v1/templates), instead of \
                    subject, text and html; rendered with `data` when the message is accepted."),
                "template_version": {"type": ["integer", "null"],
                    "description": "Default: the latest version when the message is accepted."},
                "data": {"type": ["object", "null"], "description": "The template's variables."},
                "attachments": {"type": "array", "maxItems": 20,
                    "description": "Email only; the files in base64 plus the text and HTML \
                        at most 10,000,000 bytes (Postmark's limit).",
                    "items": {"$ref": "#/components/schemas/Attachment"}},
            }},
        "Attachment": {"type": "object", "additionalProperties": false,
            "required": ["filename", "content"],
            "properties": {
                "filename": {"type": "string"},
                "content_type": text("Default: from the file name's extension."),
                "content": {"type": "string", "contentEncoding": "base64"},
                "content_id": text("For an inline image the HTML shows as cid:... (at most \
                    127 characters)."),
            }},
        "Message": {"type": "object",
            "required": ["id", "status", "channel", "to", "idempotency_key", "job_id",
                         "attempts", "created_at"],
            "properties": {
                "id": {"type": "integer"},
                "status": {"enum": ["queued", "sent", "suppressed", "failed", "in_doubt"]},
                "channel": {"enum": ["email", "sms"]},
                "to": {"type": "string"},
                "idempotency_key": {"type": "string"},
                "job_id": {"type": "string"},
                "attempts": {"type": "integer"},
                "provider_message_id": text("The provider's id once sent."),
                "reason": text("Why it failed, was suppressed or is in doubt."),
                "created_at": {"type": "string", "format": "date-time"},
                "sent_at": {"type": ["string", "null"], "format": "date-time"},
                "template": {"type": "string", "description": "The stored template it was \
                    rendered from (absent: its own content)."},
                "template_version": {"type": "integer"},
                "attachments": {"type": "integer", "description": "How many files it carries."},
                "subject": {"type": "string", "description": "Its subject (email)."},
            }},
    })
}
