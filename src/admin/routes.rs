//! The admin API's routes: the table every route is listed in ([`routes`], which the
//! OpenAPI document and the placeholder page both follow), and the matcher that finds a
//! path's routes and the segments it captured.

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
    /// `PUT …/api/rooms/{room}/config`: change a room's runtime settings.
    RoomConfig,
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
                Method::PUT,
                "/__anteroom/admin/api/rooms/{room}/config",
                true,
                Op::RoomConfig,
                "change rate, max_active, session_ttl_secs, abandon_after_secs",
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
}

impl Captures<'_> {
    /// How many segments were captured.
    pub(super) fn count(&self) -> usize {
        [
            self.room.is_some(),
            self.reference.is_some(),
            self.target.is_some(),
        ]
        .into_iter()
        .filter(|&c| c)
        .count()
    }
}

/// Matches `path` against a route pattern; returns the `{room}`, `{ref}` and `{target}`
/// segments.
pub(super) fn matches<'a>(pattern: &str, path: &'a str) -> Option<Captures<'a>> {
    let mut captures = Captures::default();
    let mut pattern_parts = pattern.split('/');
    let mut path_parts = path.split('/');
    loop {
        match (pattern_parts.next(), path_parts.next()) {
            (None, None) => return Some(captures),
            (Some("{room}"), Some(segment)) if !segment.is_empty() => captures.room = Some(segment),
            (Some("{ref}"), Some(segment)) if !segment.is_empty() => {
                captures.reference = Some(segment)
            }
            (Some("{target}"), Some(segment)) if !segment.is_empty() => {
                captures.target = Some(segment)
            }
            (Some(p), Some(s)) if p == s => {}
            _ => return None,
        }
    }
}
