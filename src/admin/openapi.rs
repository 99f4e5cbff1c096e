//! The admin API's OpenAPI document, generated: the operations are the handlers'
//! `#[utoipa::path]` declarations, the schemas the types of [`super::api`], and the
//! responses every operation shares (401, 403, 405, 429, …) are declared once here.
//! [`document`] is what `GET …/api/openapi.json` serves.
//!
//! A copy is committed as `src/admin/openapi.json`, for readers and tools that do not run
//! the server (the control room's TypeScript types are generated from it). A unit test
//! fails when the copy differs from what the code generates; running it with
//! `ANTEROOM_WRITE_OPENAPI=1` rewrites the copy instead:
//!
//! ```text
//! ANTEROOM_WRITE_OPENAPI=1 cargo test --lib admin::openapi
//! ```

use std::collections::BTreeMap;
use std::sync::LazyLock;

use serde_json::Value;
use utoipa::openapi::content::ContentBuilder;
use utoipa::openapi::header::HeaderBuilder;
use utoipa::openapi::response::{Response, ResponseBuilder};
use utoipa::openapi::schema::{Object, Type};
use utoipa::openapi::security::{HttpAuthScheme, HttpBuilder, SecurityScheme};
use utoipa::openapi::{InfoBuilder, RefOr};
use utoipa::{IntoResponses, Modify, OpenApi, PartialSchema, ToResponse, ToSchema};

use super::api::{BannedClient, Problem};
use super::{bans, events, queue, rooms, status};

/// The content type of every refusal.
pub const PROBLEM_JSON: &str = "application/problem+json";

/// The API as an OpenAPI 3.1 document, pretty-printed with a final newline: the bytes
/// the server serves and the committed copy holds.
pub fn document() -> &'static str {
    static DOCUMENT: LazyLock<String> = LazyLock::new(generate);
    &DOCUMENT
}

fn generate() -> String {
    let doc = ApiDoc::openapi();
    let mut value = serde_json::to_value(&doc).expect("the OpenAPI document serializes");
    require_headers(&mut value);
    unwrap_descriptions(&mut value);
    let mut text = serde_json::to_string_pretty(&value).expect("JSON serializes");
    text.push('\n');
    text
}

/// Every response header the API documents is one it always sends with that response;
/// utoipa's header type has no `required`, so it is set on the JSON.
fn require_headers(doc: &mut Value) {
    if let Some(responses) = doc
        .pointer_mut("/components/responses")
        .and_then(Value::as_object_mut)
    {
        for response in responses.values_mut() {
            if let Some(headers) = response.get_mut("headers").and_then(Value::as_object_mut) {
                for header in headers.values_mut() {
                    header["required"] = Value::Bool(true);
                }
            }
        }
    }
}

/// Descriptions come from doc comments wrapped at the source's width; each paragraph
/// becomes one line, as a reader of the document (or of the generated TypeScript) wants.
fn unwrap_descriptions(value: &mut Value) {
    match value {
        Value::Object(map) => {
            for (key, v) in map.iter_mut() {
                match v {
                    Value::String(text) if key == "description" || key == "summary" => {
                        *text = text
                            .split("\n\n")
                            .map(|p| p.split('\n').map(str::trim).collect::<Vec<_>>().join(" "))
                            .collect::<Vec<_>>()
                            .join("\n\n");
                    }
                    _ => unwrap_descriptions(v),
                }
            }
        }
        Value::Array(items) => items.iter_mut().for_each(unwrap_descriptions),
        _ => {}
    }
}

#[derive(OpenApi)]
#[openapi(
    paths(
        serve,
        status::status,
        status::metrics,
        rooms::rooms,
        rooms::stats,
        rooms::config,
        rooms::configure,
        rooms::pause,
        rooms::resume,
        rooms::flush,
        bans::bans,
        bans::ban,
        bans::ban_log,
        bans::unban,
        queue::queue,
        queue::front,
        events::events,
        events::create,
        events::replace,
        events::delete,
    ),
    components(
        schemas(BannedClient),
        responses(
            Unauthorized,
            Forbidden,
            UnknownRoom,
            MethodNotAllowed,
            StoreUnavailable,
            TooManyRequests,
            BodyTooLarge,
            BodyTooSlow,
            BadQuery
        )
    ),
    security(("adminToken" = [])),
    modifiers(&Finish)
)]
struct ApiDoc;

/// `GET …/api/openapi.json`: [`document`], with no token.
#[utoipa::path(
    get,
    path = "/__anteroom/admin/api/openapi.json",
    operation_id = "openapi",
    summary = "This document",
    security(()),
    responses(
        (status = 200, description = "OpenAPI 3 document", body = inline(OpenApiDocument)),
        (status = 403, response = Forbidden),
        (status = 405, response = MethodNotAllowed),
        (status = 429, response = TooManyRequests),
    )
)]
pub(super) fn serve() -> &'static str {
    document()
}

/// The document's own schema: a JSON object.
struct OpenApiDocument;

impl PartialSchema for OpenApiDocument {
    fn schema() -> RefOr<utoipa::openapi::schema::Schema> {
        Object::with_type(Type::Object).into()
    }
}

impl ToSchema for OpenApiDocument {}

/// What the derive cannot say: the document's info, the security scheme, no tags, and
/// no token for the document itself.
struct Finish;

impl Modify for Finish {
    fn modify(&self, doc: &mut utoipa::openapi::OpenApi) {
        doc.info = InfoBuilder::new()
            .title("anteroom admin API")
            .version("1")
            .description(Some(
                "The control room's API (docs/admin-api.md). Every operation except \
                 openapi.json needs `Authorization: Bearer <admin_token>`. Errors are \
                 application/problem+json; input errors carry a `field` member naming the \
                 input at fault, and a refused request changes nothing. Reads come from a \
                 one-second statistics cache; changes go to the queue store and apply on \
                 the next admission pass. Every change is appended to data_dir/audit.log.",
            ))
            .build();
        let components = doc.components.get_or_insert_with(Default::default);
        components.add_security_scheme(
            "adminToken",
            SecurityScheme::Http(
                HttpBuilder::new()
                    .scheme(HttpAuthScheme::Bearer)
                    .description(Some(
                        "The admin_token from the config (or ANTEROOM_ADMIN_TOKEN).",
                    ))
                    .build(),
            ),
        );
        doc.tags = None;
        for item in doc.paths.paths.values_mut() {
            for op in [
                &mut item.get,
                &mut item.put,
                &mut item.post,
                &mut item.delete,
            ]
            .into_iter()
            .flatten()
            {
                op.tags = None;
                if op.operation_id.as_deref() == Some("openapi") {
                    op.security = Some(Vec::new());
                }
            }
        }
    }
}

/// A problem+json response with `description`.
fn problem(description: &str) -> ResponseBuilder {
    ResponseBuilder::new().description(description).content(
        PROBLEM_JSON,
        ContentBuilder::new()
            .schema(Some(Problem::schema_ref()))
            .build(),
    )
}

/// A refusal that is either a problem or, for a banned client, the banned page (JSON when
/// asked for, else HTML).
fn problem_or_banned(description: &str) -> ResponseBuilder {
    problem(description)
        .content(
            "application/json",
            ContentBuilder::new()
                .schema(Some(BannedClient::schema_ref()))
                .build(),
        )
        .content(
            "text/html; charset=utf-8",
            ContentBuilder::new()
                .schema(Some(Object::with_type(Type::String)))
                .build(),
        )
}

trait SchemaRef {
    fn schema_ref() -> RefOr<utoipa::openapi::schema::Schema>;
}

impl<T: ToSchema> SchemaRef for T {
    fn schema_ref() -> RefOr<utoipa::openapi::schema::Schema> {
        RefOr::Ref(utoipa::openapi::Ref::from_schema_name(T::name()))
    }
}

fn string_header(description: &str) -> utoipa::openapi::header::Header {
    HeaderBuilder::new()
        .schema(Some(Object::with_type(Type::String)))
        .description(Some(description))
        .build()
}

/// Declares a shared response: a unit type whose [`ToResponse`] is `build`.
macro_rules! shared_response {
    ($(#[$doc:meta])* $name:ident => $build:expr) => {
        $(#[$doc])*
        pub(super) struct $name;

        impl<'r> ToResponse<'r> for $name {
            fn response() -> (&'r str, RefOr<Response>) {
                (stringify!($name), RefOr::T($build))
            }
        }
    };
}

shared_response!(
    /// 401 with `WWW-Authenticate`.
    Unauthorized => problem("Missing or wrong admin token")
        .header("WWW-Authenticate", string_header("Bearer realm=\"anteroom admin\""))
        .build()
);

shared_response!(
    /// 403: outside `admin_allow`, the metrics token misused, a named token's role
    /// refused, or banned for good.
    Forbidden => problem_or_banned(
        "The caller is outside admin_allow, used the metrics token for anything but GET \
         …/metrics, or used a named token whose role does not allow the request (viewer: \
         GET only; operator: no bans) (problem+json), or is banned permanently (the banned \
         page: JSON when asked for, else HTML)",
    )
    .build()
);

shared_response!(
    /// 404 naming the room.
    UnknownRoom => problem("No such room (`field`: room)").build()
);

shared_response!(
    /// 405 with `Allow`.
    MethodNotAllowed => problem("Wrong method; `Allow` lists the right ones")
        .header("Allow", string_header("The methods the path answers"))
        .build()
);

shared_response!(
    /// 503: the queue store did not answer.
    StoreUnavailable => problem("The queue store did not answer; nothing was changed").build()
);

shared_response!(
    /// 429 with `Retry-After`: too many wrong tokens, or banned for a while.
    TooManyRequests => problem_or_banned(
        "This address sent too many wrong admin tokens and none is compared for now \
         (problem+json), or is banned for a while (the banned page: JSON when asked for, \
         else HTML); Retry-After says for how long",
    )
    .header(
        "Retry-After",
        HeaderBuilder::new()
            .schema(Some(Object::with_type(Type::Integer)))
            .description(Some("Seconds"))
            .build(),
    )
    .build()
);

shared_response!(
    /// 413: the body is over the limit.
    BodyTooLarge => problem(
        "Body larger than 64 KiB (`field`: body); the connection is closed",
    )
    .build()
);

shared_response!(
    /// 408: the body did not arrive in time.
    BodyTooSlow => problem(
        "The body did not arrive in full within server.body_timeout (`field`: body); the \
         connection is closed",
    )
    .build()
);

shared_response!(
    /// 422 for a list's query.
    BadQuery => problem(
        "A bad query parameter; `field` names it (limit out of 1..1000, a cursor that is \
         not a whole number)",
    )
    .build()
);

/// The shared responses `shared` lists (status, component name), each as a reference to
/// its component under its status.
fn refer(shared: &[(u16, &str)]) -> BTreeMap<String, RefOr<Response>> {
    shared
        .iter()
        .map(|(status, name)| {
            (
                status.to_string(),
                RefOr::Ref(utoipa::openapi::Ref::from_response_name(*name)),
            )
        })
        .collect()
}

/// Declares a group of shared responses an operation lists as one: a unit type whose
/// [`IntoResponses`] refers to each of `$response` (named by [`shared_response!`]) under
/// its status. So a refusal every operation can give is written once, here.
macro_rules! shared_responses {
    ($(#[$doc:meta])* $name:ident => [$(($status:literal, $response:ident)),* $(,)?]) => {
        $(#[$doc])*
        pub(super) struct $name;

        impl IntoResponses for $name {
            fn responses() -> BTreeMap<String, RefOr<Response>> {
                refer(&[$(($status, stringify!($response))),*])
            }
        }
    };
}

shared_responses!(
    /// What any operation can answer before it looks at the request: 401, 403, 405, 429.
    Guarded => [
        (401, Unauthorized),
        (403, Forbidden),
        (405, MethodNotAllowed),
        (429, TooManyRequests),
    ]
);

shared_responses!(
    /// [`Guarded`]'s, and what an operation on a room can answer: 404 for an unknown room,
    /// 503 when the store does not answer.
    InRoom => [
        (401, Unauthorized),
        (403, Forbidden),
        (404, UnknownRoom),
        (405, MethodNotAllowed),
        (429, TooManyRequests),
        (503, StoreUnavailable),
    ]
);

shared_responses!(
    /// What an operation with a body can answer of it: 408 (too slow) and 413 (too large).
    WithBody => [(408, BodyTooSlow), (413, BodyTooLarge)]
);

#[cfg(test)]
mod tests {
    use super::*;

    /// The committed copy is what the code generates; `ANTEROOM_WRITE_OPENAPI=1` rewrites
    /// it.
    #[test]
    fn the_committed_openapi_json_is_the_generated_document() {
        let path = concat!(env!("CARGO_MANIFEST_DIR"), "/src/admin/openapi.json");
        if std::env::var_os("ANTEROOM_WRITE_OPENAPI").is_some() {
            std::fs::write(path, document()).expect("write src/admin/openapi.json");
            return;
        }
        let committed = std::fs::read_to_string(path).unwrap_or_default();
        assert!(
            committed == document(),
            "src/admin/openapi.json is not what the code generates; regenerate it with\n\
             \n    ANTEROOM_WRITE_OPENAPI=1 cargo test --lib admin::openapi\n\n\
             then `cd web && npm run generate:api-types` for the control room's types"
        );
    }

    #[test]
    fn every_shared_response_is_problem_json() {
        let doc: Value = serde_json::from_str(document()).unwrap();
        let responses = doc["components"]["responses"].as_object().unwrap();
        assert!(responses.len() >= 9);
        for (name, r) in responses {
            assert!(r["content"][PROBLEM_JSON].is_object(), "{name}");
        }
        assert_eq!(
            doc["paths"]["/__anteroom/admin/api/openapi.json"]["get"]["security"],
            serde_json::json!([])
        );
    }
}
