//! The admin API's routes: the table every route is listed in ([`routes`], which the
//! placeholder page follows and the OpenAPI document is checked against), and [`find`],
//! which looks a path up in a `matchit` radix tree built from the table: the routes of
//! the path (one per method, for dispatch and the `Allow` of a 405) and the segments it
//! captured. A literal segment wins over a capture, so `…/bans/log` is the log's path
//! only, never `…/bans/{target}` with the target `log`; a capture is one non-empty
//! segment; the path must match whole (no trailing `/`).

use http::Method;

/// What a route does.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum Op {
    /// `GET …/api/openapi.json`: the OpenAPI document (no token needed).
    OpenApi,
    /// `GET …/api/status`: store health, fail-open state, the audit log, the version.
    Status,
    /// `GET …/api/metrics`: every room in Prometheus text format.
    Metrics,
    /// `GET …/api/rooms`: every room with its counters.
    Rooms,
    /// `GET …/api/rooms/{room}/stats`: one room's counters.
    RoomStats,
    /// `PUT …/api/rooms/{room}/config`: change a room's settings.
    RoomConfig,
    /// `GET …/api/rooms/{room}/config`: a room's settings in force.
    RoomSettings,
    /// `POST …/api/rooms/{room}/pause`: hold everyone where they are.
    Pause,
    /// `POST …/api/rooms/{room}/resume`: admit again.
    Resume,
    /// `POST …/api/rooms/{room}/flush`: empty the line.
    Flush,
    /// `GET …/api/bans`: the active bans.
    Bans,
    /// `POST …/api/bans`: ban an address or range.
    Ban,
    /// `DELETE …/api/bans/{target}`: lift a ban.
    Unban,
    /// `GET …/api/bans/log`: the ban log.
    BanLog,
    /// `GET …/api/rooms/{room}/queue`: the head of the line, or one visitor by reference.
    Queue,
    /// `POST …/api/rooms/{room}/visitors/{ref}/front`: move a waiting visitor to position 1.
    Front,
    /// `GET …/api/rooms/{room}/events`: the room's scheduled events.
    Events,
    /// `POST …/api/rooms/{room}/events`: schedule an event.
    CreateEvent,
    /// `PUT …/api/rooms/{room}/events/{id}`: replace an event.
    ReplaceEvent,
    /// `DELETE …/api/rooms/{room}/events/{id}`: delete an event.
    DeleteEvent,
}

/// One API route. `{room}` and `{ref}` in a path each match one path segment.
#[derive(Debug)]
pub struct Route {
    /// The method it answers.
    pub method: Method,
    /// The path pattern, under `/__anteroom/admin/api/`.
    pub path: &'static str,
    /// Whether the admin token is required.
    pub auth: bool,
    /// What it does.
    pub op: Op,
    /// One line for the placeholder page.
    pub summary: &'static str,
}

/// Every route the admin API serves. The OpenAPI document lists exactly these.
pub fn routes() -> &'static [Route] {
    static ROUTES: std::sync::LazyLock<Vec<Route>> = std::sync::LazyLock::new(|| {
        let route = |method, path, auth, op, summary| Route {
            method,
            path,
            auth,
            op,
            summary,
        };
        vec![
            route(
                Method::GET,
                "/__anteroom/admin/api/openapi.json",
                false,
                Op::OpenApi,
                "this API as an OpenAPI 3 document (no token needed)",
            ),
            route(
                Method::GET,
                "/__anteroom/admin/api/status",
                true,
                Op::Status,
                "queue-store health, fail-open state, version; answers while the store is down",
            ),
            route(
                Method::GET,
                "/__anteroom/admin/api/metrics",
                true,
                Op::Metrics,
                "every room in Prometheus text format",
            ),
            route(
                Method::GET,
                "/__anteroom/admin/api/rooms",
                true,
                Op::Rooms,
                "every room with its counters",
            ),
            route(
                Method::GET,
                "/__anteroom/admin/api/rooms/{room}/stats",
                true,
                Op::RoomStats,
                "one room's counters",
            ),
            route(
                Method::GET,
                "/__anteroom/admin/api/rooms/{room}/config",
                true,
                Op::RoomSettings,
                "a room's settings in force, and which the operator changed",
            ),
            route(
                Method::PUT,
                "/__anteroom/admin/api/rooms/{room}/config",
                true,
                Op::RoomConfig,
                "change any room setting (rate, max_active, title, paths, caps, shares, lottery, adaptive, mode, …)",
            ),
            route(
                Method::POST,
                "/__anteroom/admin/api/rooms/{room}/pause",
                true,
                Op::Pause,
                "hold everyone where they are",
            ),
            route(
                Method::POST,
                "/__anteroom/admin/api/rooms/{room}/resume",
                true,
                Op::Resume,
                "admit again",
            ),
            route(
                Method::POST,
                "/__anteroom/admin/api/rooms/{room}/flush",
                true,
                Op::Flush,
                "empty the line (sessions on the site are untouched)",
            ),
            route(
                Method::GET,
                "/__anteroom/admin/api/bans",
                true,
                Op::Bans,
                "active bans, newest first (limit, cursor)",
            ),
            route(
                Method::POST,
                "/__anteroom/admin/api/bans",
                true,
                Op::Ban,
                "ban an address or range: target, duration_secs (null: permanent), reason",
            ),
            route(
                Method::GET,
                "/__anteroom/admin/api/bans/log",
                true,
                Op::BanLog,
                "the ban log, newest first (limit, cursor)",
            ),
            route(
                Method::DELETE,
                "/__anteroom/admin/api/bans/{target}",
                true,
                Op::Unban,
                "lift the ban on target (URL-encoded address or CIDR)",
            ),
            route(
                Method::GET,
                "/__anteroom/admin/api/rooms/{room}/queue",
                true,
                Op::Queue,
                "the head of the line (limit, default 50, at most 1000), or one visitor by ref",
            ),
            route(
                Method::POST,
                "/__anteroom/admin/api/rooms/{room}/visitors/{ref}/front",
                true,
                Op::Front,
                "move a waiting visitor to position 1",
            ),
            route(
                Method::GET,
                "/__anteroom/admin/api/rooms/{room}/events",
                true,
                Op::Events,
                "the room's scheduled events, in the order they open, and the current one",
            ),
            route(
                Method::POST,
                "/__anteroom/admin/api/rooms/{room}/events",
                true,
                Op::CreateEvent,
                "schedule an event: queue_opens_at, admits_at, closes_at, overrides (rate, max_active, title, message, lottery)",
            ),
            route(
                Method::PUT,
                "/__anteroom/admin/api/rooms/{room}/events/{id}",
                true,
                Op::ReplaceEvent,
                "replace an event whole",
            ),
            route(
                Method::DELETE,
                "/__anteroom/admin/api/rooms/{room}/events/{id}",
                true,
                Op::DeleteEvent,
                "delete an event",
            ),
        ]
    });
    &ROUTES
}

/// The segments a route pattern captured.
#[derive(Clone, Copy, Debug, Default, PartialEq, Eq)]
pub(super) struct Captures<'a> {
    /// `{room}`.
    pub(super) room: Option<&'a str>,
    /// `{ref}`: a visitor's reference.
    pub(super) reference: Option<&'a str>,
    /// `{target}`: a ban's target (an address or CIDR), not a room.
    pub(super) target: Option<&'a str>,
    /// `{id}`: a scheduled event's id.
    pub(super) id: Option<&'a str>,
}

/// A path's routes (one per method it answers, in table order) and what it captured.
#[derive(Debug)]
pub(super) struct Found<'a> {
    /// The routes of the path's pattern.
    pub(super) routes: &'static [&'static Route],
    /// The pattern's captured segments.
    pub(super) captures: Captures<'a>,
}

/// The routes `path` names, or `None` when no route has it.
pub(super) fn find(path: &str) -> Option<Found<'_>> {
    static TREE: std::sync::LazyLock<matchit::Router<Vec<&'static Route>>> =
        std::sync::LazyLock::new(|| {
            let mut patterns: Vec<(&str, Vec<&'static Route>)> = Vec::new();
            for route in routes() {
                match patterns.iter_mut().find(|(p, _)| *p == route.path) {
                    Some((_, same)) => same.push(route),
                    None => patterns.push((route.path, vec![route])),
                }
            }
            let mut tree = matchit::Router::new();
            for (pattern, same) in patterns {
                tree.insert(pattern, same)
                    .expect("the route table's patterns do not conflict");
            }
            tree
        });
    let found = TREE.at(path).ok()?;
    Some(Found {
        routes: found.value.as_slice(),
        captures: Captures {
            room: found.params.get("room"),
            reference: found.params.get("ref"),
            target: found.params.get("target"),
            id: found.params.get("id"),
        },
    })
}
