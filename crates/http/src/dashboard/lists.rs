//! `/admin/lists`: the account's lists, one list's members (searched by address prefix, paged
//! by keyset), adding a subscriber, unsubscribing one from the list (with a confirmation page),
//! and a CSV import previewed by the import's own parser before anything is written. Each member
//! links to its subscriber page (`subscribers.rs`).

use super::{fail, page, same_origin, see_other, Posted, Signed};
use crate::{blocking, AppState};
use axum::extract::{DefaultBodyLimit, Multipart, Path, Query, State};
use axum::http::HeaderMap;
use axum::response::Response;
use axum::routing::{get, post};
use base64::Engine;
use minijinja::context;
use sendonce_core::app::import::{self, CsvFormat, Encoding};
use sendonce_core::app::lists::{self, MembersQuery, NewListRequest};
use sendonce_core::app::privacy;
use sendonce_core::app::subscribers::{self, UploadRequest};
use sendonce_domain::error::{Error, Result};
use sendonce_store::ConfirmContent;
use serde::Deserialize;

pub const ROUTES: &[(&str, &str)] = &[
    ("GET", "/admin/lists"),
    ("GET", "/admin/lists/new"),
    ("POST", "/admin/lists/new"),
    ("GET", "/admin/lists/{list}"),
    ("POST", "/admin/lists/{list}/subscribers"),
    (
        "GET",
        "/admin/lists/{list}/subscribers/{subscriber}/unsubscribe",
    ),
    (
        "POST",
        "/admin/lists/{list}/subscribers/{subscriber}/unsubscribe",
    ),
    ("GET", "/admin/lists/{list}/import"),
    ("POST", "/admin/lists/{list}/import"),
    ("POST", "/admin/lists/{list}/import/commit"),
];

/// The largest import body: the file (or its base64 in the commit form) and the small fields.
const IMPORT_BODY_LIMIT: usize = import::MAX_CSV / 3 * 4 + 256 * 1024;

pub fn routes() -> axum::Router<AppState> {
    axum::Router::new()
        .route("/admin/lists", get(all))
        .route("/admin/lists/new", get(new_form).post(create))
        .route("/admin/lists/{list}", get(show))
        .route("/admin/lists/{list}/subscribers", post(add))
        .route(
            "/admin/lists/{list}/subscribers/{subscriber}/unsubscribe",
            get(unsubscribe_confirm).post(unsubscribe),
        )
        .route(
            "/admin/lists/{list}/import",
            get(import_form)
                .post(import_preview)
                .layer(DefaultBodyLimit::max(IMPORT_BODY_LIMIT)),
        )
        .route(
            "/admin/lists/{list}/import/commit",
            post(import_commit).layer(DefaultBodyLimit::max(IMPORT_BODY_LIMIT)),
        )
}

/// An id in a path: anything but a number is "not found", as an id of another account is.
fn id(text: &str) -> Result<i64> {
    text.parse::<i64>()
        .map_err(|_| Error::not_found(format!("no list or subscriber {text:?}")))
}

#[derive(Debug, Default, Deserialize)]
struct Flash {
    #[serde(default)]
    done: Option<String>,
}

async fn all(
    State(st): State<AppState>,
    Signed(session): Signed,
    Query(f): Query<Flash>,
) -> Response {
    let acct = session.admin.account_id.to_string();
    match blocking(&st, move |s| lists::list(s, &acct)).await {
        Ok(l) => page(
            &session,
            "lists",
            "admin/lists.html",
            context! { title => "Lists", lists => l.lists, done => f.done },
        ),
        Err(e) => fail(Some(&session), &e),
    }
}

async fn new_form(Signed(session): Signed) -> Response {
    page(
        &session,
        "lists",
        "admin/list_new.html",
        context! { title => "New list" },
    )
}

#[derive(Debug, Deserialize)]
struct NewList {
    #[serde(default)]
    name: String,
    #[serde(default)]
    description: String,
    #[serde(default)]
    optin: String,
    #[serde(default)]
    public: Option<String>,
    #[serde(default)]
    confirm_from: String,
}

async fn create(State(st): State<AppState>, Posted(session, f): Posted<NewList>) -> Response {
    let acct = session.admin.account_id.to_string();
    let res = blocking(&st, move |s| {
        if f.name.trim().is_empty() {
            return Err(Error::invalid("the list needs a name"));
        }
        let optin = if f.optin.is_empty() {
            "single"
        } else {
            &f.optin
        };
        lists::create(
            s,
            &NewListRequest {
                account: &acct,
                name: f.name.trim(),
                description: Some(f.description.as_str()),
                optin,
                public: f.public.is_some(),
                confirm: ConfirmContent {
                    from: Some(f.confirm_from.as_str()),
                    subject: None,
                    body: None,
                },
            },
        )
    })
    .await;
    match res {
        Ok(l) => see_other(&format!("/admin/lists/{}?done=created", l.id)),
        Err(e) => fail(Some(&session), &e),
    }
}

#[derive(Debug, Default, Deserialize)]
struct Browse {
    #[serde(default)]
    q: Option<String>,
    #[serde(default)]
    status: Option<String>,
    #[serde(default)]
    after: Option<String>,
    #[serde(default)]
    done: Option<String>,
    #[serde(default)]
    imported: Option<u64>,
    #[serde(default)]
    skipped: Option<u64>,
}

async fn show(
    State(st): State<AppState>,
    Signed(session): Signed,
    Path(list): Path<String>,
    Query(b): Query<Browse>,
) -> Response {
    let acct = session.admin.account_id.to_string();
    let (q, status) = (b.q.clone(), b.status.clone());
    let res = blocking(&st, move |s| {
        let list = id(&list)?;
        let shown = lists::show(s, &acct, &list.to_string())?;
        let members = lists::members(
            s,
            &MembersQuery {
                account: &acct,
                list,
                search: b.q.as_deref(),
                membership: b.status.as_deref(),
                after: b.after.as_deref(),
            },
        )?;
        Ok((shown, members))
    })
    .await;
    let next_query = |next: &str| {
        form_urlencoded::Serializer::new(String::new())
            .append_pair("q", q.as_deref().unwrap_or(""))
            .append_pair("status", status.as_deref().unwrap_or(""))
            .append_pair("after", next)
            .finish()
    };
    match res {
        Ok((list, members)) => page(
            &session,
            "lists",
            "admin/list.html",
            context! {
                title => list.name.clone(),
                list => list,
                members => members.members,
                next => members.next.as_deref().map(next_query),
                q => q, status => status,
                done => b.done, imported => b.imported, skipped => b.skipped,
            },
        ),
        Err(e) => fail(Some(&session), &e),
    }
}

#[derive(Debug, Deserialize)]
struct NewMember {
    #[serde(default)]
    email: String,
    #[serde(default)]
    phone: String,
    #[serde(default)]
    name: String,
    /// `key=value`, one a line.
    #[serde(default)]
    attrs: String,
}

async fn add(
    State(st): State<AppState>,
    Path(list): Path<String>,
    Posted(session, f): Posted<NewMember>,
) -> Response {
    let acct = session.admin.account_id.to_string();
    let links = st.links.clone();
    let res = blocking(&st, move |s| {
        let list = id(&list)?;
        lists::show(s, &acct, &list.to_string())?;
        let attrs = f
            .attrs
            .lines()
            .filter(|l| !l.trim().is_empty())
            .map(import::parse_attr)
            .collect::<Result<Vec<_>>>()?;
        let mut new = import::subscriber(
            Some(f.email.as_str()),
            Some(f.phone.as_str()),
            Some(f.name.as_str()),
            None,
            &attrs,
        )?;
        new.consent = privacy::declared("dashboard", None)?;
        subscribers::add(s, &acct, &new, &[list.to_string()], links.as_deref())?;
        Ok(list)
    })
    .await;
    match res {
        Ok(list) => see_other(&format!("/admin/lists/{list}?done=added")),
        Err(e) => fail(Some(&session), &e),
    }
}

async fn unsubscribe_confirm(
    State(st): State<AppState>,
    Signed(session): Signed,
    Path((list, sub)): Path<(String, String)>,
) -> Response {
    let acct = session.admin.account_id.to_string();
    let res = blocking(&st, move |s| {
        lists::membership(s, &acct, id(&list)?, id(&sub)?)
    })
    .await;
    match res {
        Ok(m) => page(
            &session,
            "lists",
            "admin/list_unsubscribe.html",
            context! { title => "Unsubscribe", m => m },
        ),
        Err(e) => fail(Some(&session), &e),
    }
}

#[derive(Debug, Deserialize)]
struct Nothing {}

async fn unsubscribe(
    State(st): State<AppState>,
    Path((list, sub)): Path<(String, String)>,
    Posted(session, _): Posted<Nothing>,
) -> Response {
    let acct = session.admin.account_id.to_string();
    let res = blocking(&st, move |s| {
        let list = id(&list)?;
        lists::unsubscribe_member(s, &acct, list, id(&sub)?)?;
        Ok(list)
    })
    .await;
    match res {
        Ok(list) => see_other(&format!("/admin/lists/{list}?done=unsubscribed")),
        Err(e) => fail(Some(&session), &e),
    }
}

async fn import_form(
    State(st): State<AppState>,
    Signed(session): Signed,
    Path(list): Path<String>,
) -> Response {
    let acct = session.admin.account_id.to_string();
    let res = blocking(&st, move |s| lists::show(s, &acct, &id(&list)?.to_string())).await;
    match res {
        Ok(list) => page(
            &session,
            "lists",
            "admin/import.html",
            context! { title => "Import", list => list, limit => import::size(import::MAX_CSV as u64) },
        ),
        Err(e) => fail(Some(&session), &e),
    }
}

/// The fields of an import form (multipart), read whole (bounded by the route's body limit).
#[derive(Debug, Default)]
struct ImportForm {
    csrf: String,
    file_name: String,
    file: Vec<u8>,
    delimiter: String,
    encoding: String,
}

impl ImportForm {
    async fn read(mut m: Multipart) -> Result<ImportForm> {
        let mut f = ImportForm::default();
        let too_large = || {
            Error::too_large(format!(
                "the upload is larger than the {} limit for a CSV file",
                import::size(import::MAX_CSV as u64)
            ))
        };
        while let Some(field) = m.next_field().await.map_err(|_| too_large())? {
            let name = field.name().unwrap_or_default().to_string();
            let file_name = field.file_name().map(str::to_string);
            let bytes = field.bytes().await.map_err(|_| too_large())?;
            let text = || String::from_utf8_lossy(&bytes).into_owned();
            match name.as_str() {
                "csrf" => f.csrf = text(),
                "delimiter" => f.delimiter = text(),
                "encoding" => f.encoding = text(),
                "file_name" => f.file_name = text(),
                "file" => {
                    f.file_name = file_name.unwrap_or_else(|| "the file".to_string());
                    f.file = bytes.to_vec();
                }
                "csv" => {
                    f.file = base64::engine::general_purpose::STANDARD
                        .decode(bytes.as_ref())
                        .map_err(|_| {
                            Error::invalid("the previewed file did not come back whole")
                        })?;
                }
                _ => {}
            }
        }
        Ok(f)
    }

    fn format(&self) -> Result<CsvFormat> {
        let delimiter = match self.delimiter.as_str() {
            "" => b',',
            d => import::parse_delimiter(d)?,
        };
        let encoding = match self.encoding.as_str() {
            "" => Encoding::Utf8,
            e => Encoding::parse(e)?,
        };
        Ok(CsvFormat {
            delimiter,
            encoding,
        })
    }
}

/// An import form's session checks, before anything is read from the store: same origin, the
/// CSRF token, then the fields.
async fn import_fields(
    st: &AppState,
    session: &sendonce_core::app::admins::Session,
    h: &HeaderMap,
    m: Multipart,
) -> std::result::Result<ImportForm, Response> {
    same_origin(h, st).map_err(|e| fail(Some(session), &e))?;
    let f = ImportForm::read(m)
        .await
        .map_err(|e| fail(Some(session), &e))?;
    session
        .check_csrf(&f.csrf)
        .map_err(|e| fail(Some(session), &e))?;
    Ok(f)
}

async fn import_preview(
    State(st): State<AppState>,
    Signed(session): Signed,
    Path(list): Path<String>,
    h: HeaderMap,
    m: Multipart,
) -> Response {
    let f = match import_fields(&st, &session, &h, m).await {
        Ok(f) => f,
        Err(res) => return res,
    };
    let acct = session.admin.account_id.to_string();
    let res = blocking(&st, move |s| {
        let list = lists::show(s, &acct, &id(&list)?.to_string())?;
        if f.file.is_empty() {
            return Err(Error::invalid("choose a CSV file to import"));
        }
        let format = f.format()?;
        let csv = base64::engine::general_purpose::STANDARD.encode(&f.file);
        let preview = import::preview(&f.file_name, f.file, format)?;
        Ok((list, preview, csv, f.file_name, f.delimiter, f.encoding))
    })
    .await;
    match res {
        Ok((list, preview, csv, file_name, delimiter, encoding)) => page(
            &session,
            "lists",
            "admin/import_preview.html",
            context! {
                title => "Import preview", list => list, preview => preview, csv => csv,
                file_name => file_name, delimiter => delimiter, encoding => encoding,
            },
        ),
        Err(e) => fail(Some(&session), &e),
    }
}

async fn import_commit(
    State(st): State<AppState>,
    Signed(session): Signed,
    Path(list): Path<String>,
    h: HeaderMap,
    m: Multipart,
) -> Response {
    let f = match import_fields(&st, &session, &h, m).await {
        Ok(f) => f,
        Err(res) => return res,
    };
    let acct = session.admin.account_id.to_string();
    let links = st.links.clone();
    let res = blocking(&st, move |s| {
        let list = lists::show(s, &acct, &id(&list)?.to_string())?;
        let format = f.format()?;
        let lists = [list.id.to_string()];
        let done = subscribers::import_upload(
            s,
            UploadRequest {
                account: &acct,
                name: &f.file_name,
                bytes: f.file,
                skip_invalid: true,
                format,
                lists: &lists,
                links: links.as_deref(),
                consent: privacy::declared("dashboard", None)?,
            },
        )?;
        Ok((list.id, done))
    })
    .await;
    match res {
        Ok((list, done)) => see_other(&format!(
            "/admin/lists/{list}?imported={}&skipped={}",
            done.imported + done.existing,
            done.skipped.len()
        )),
        Err(e) => fail(Some(&session), &e),
    }
}
