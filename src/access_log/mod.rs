//! The access log: where request lines go (`access_log: off | stdout | <file>`),
//! what one line says, and the one thread that writes them, so that a slow disk never
//! slows a request. A file is reopened on SIGHUP for logrotate ([`AccessLog::reopen`]).
//!
//! A request's line is sent when its response body is done: delivered in full, or dropped
//! because the client went away (`"completed": false`). The request path hands it over
//! with a bounded channel's `try_send`; when the writer is behind, the line is dropped and
//! counted (`anteroom_access_log_dropped_total`), never waited for. With `access_log: off`
//! there is no [`AccessLog`] at all and the request path does nothing for it.
//!
//! A banned client's lines are capped per client ([`banned`]); the rest are counted
//! (`anteroom_access_log_suppressed_total`).
//!
//! A line never holds the cookie, `Authorization` or any header value but the user agent
//! and the referer: the visitor is named by their 8-character reference, and the path and
//! the referer are logged without their query (where grants and tokens travel). The user
//! agent and the referer are the client's own bytes, so they are cut to [`MAX_HEADER`]
//! bytes, and written as JSON strings (control characters escaped, bytes that are not
//! UTF-8 replaced): a hostile value can make a line longer, never break it.
//!
//! What the request path adds per request for these is cheap on purpose: the two header
//! values are kept as clones (a reference count on the request head's bytes, no copy), the
//! protocol as the request's `Version`, and the origin's time as an [`OriginTime`] on the
//! response, set only while the log is on; formatting happens on the writer's thread. Only
//! a long-lived response (a live stream, a tunnel), whose line waits for as long as it
//! lasts, has the two values copied out (bounded), so a held stream does not keep its
//! request's head in memory.

use std::fmt;
use std::fs::File;
use std::io::{self, Write};
use std::net::{IpAddr, SocketAddr};
use std::path::PathBuf;
use std::sync::Arc;
use std::sync::atomic::{AtomicBool, Ordering};
use std::sync::mpsc::{Receiver, SyncSender, TrySendError};
use std::task::Context;
use std::time::{Duration, Instant, SystemTime};

use http::{HeaderValue, Method, Response, StatusCode, Version};
use http_body::Body as _;
use http_body_util::BodyExt;
use prometheus_client::metrics::counter::Counter;
use serde::Serialize;

mod banned;

use crate::http::body::{Body, BoxError, Watch, Watched};
use crate::http::pages::VisitorStatus;
use crate::log_limiter::LogLimiter;
use crate::queue::VisitorRef;

/// `access_log`: where the lines go.
#[derive(Clone, Debug, Default, PartialEq, Eq)]
pub enum Target {
    /// No access log (the default).
    #[default]
    Off,
    /// One line per request on standard output.
    Stdout,
    /// Appended to (created 0600), never through a symlink; reopened on SIGHUP.
    File(PathBuf),
}

impl Target {
    /// `access_log` as written: `off` (also empty or `false`), `stdout`, or a file path.
    /// A file is opened here as the writer will open it (created 0600 if missing), so a
    /// directory, a symlink or an unwritable path is refused when the config is loaded
    /// rather than when the first request is logged.
    pub fn parse(text: &str) -> Result<Target, crate::invalid::Invalid> {
        match text.trim() {
            "" | "off" | "false" => Ok(Target::Off),
            "stdout" => Ok(Target::Stdout),
            path => {
                let path = PathBuf::from(path);
                if path.is_dir() {
                    return Err(crate::invalid::Invalid(format!(
                        "{} is a directory (name a file in it, e.g. {}/access.log)",
                        path.display(),
                        path.display()
                    )));
                }
                open_file(&path)
                    .map_err(|e| crate::invalid::Invalid(describe_open_error(&path, &e)))?;
                Ok(Target::File(path))
            }
        }
    }
}

impl fmt::Display for Target {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        match self {
            Target::Off => f.write_str("off"),
            Target::Stdout => f.write_str("stdout"),
            Target::File(path) => write!(f, "{} (reopened on SIGHUP)", path.display()),
        }
    }
}

fn open_file(path: &std::path::Path) -> io::Result<File> {
    crate::fsutil::open_append(path)
}

fn describe_open_error(path: &std::path::Path, e: &io::Error) -> String {
    // O_NOFOLLOW reports a symlink as ELOOP, which reads as nonsense to an operator.
    if e.raw_os_error() == Some(libc::ELOOP) {
        return format!(
            "{} is a symbolic link, which is never followed (name the file itself)",
            path.display()
        );
    }
    format!("cannot open {} for appending: {e}", path.display())
}

/// Lines waiting for the writer; beyond this a line is dropped (and counted).
pub const CHANNEL_LINES: usize = 16_384;
/// Longest path logged, in bytes; a longer one is cut (the line stays bounded).
pub const MAX_PATH: usize = 2048;
/// Longest user agent or referer logged, in bytes (before escaping); a longer one is cut.
pub const MAX_HEADER: usize = 512;
/// The writer writes out once this much is buffered, and whenever the channel is empty.
const WRITE_CHUNK: usize = 64 * 1024;
/// After writing a batch, the writer rests this long before it looks again. A writer
/// parked on an empty channel is woken by every line (a futex wake and a context switch on
/// the request path's thread, tens of thousands a second under load); one that rests
/// between batches is woken by nobody and takes the lines in bulk. Lines reach the file at
/// most this much later; at 100,000 lines a second a rest fills an eighth of the channel.
const BATCH_PAUSE: Duration = Duration::from_millis(20);
/// Drops and write failures are reported at most this often.
const REPORT_EVERY: Duration = Duration::from_secs(10);

/// What the request path knows of a request when its head arrives.
pub struct Started {
    /// When the head arrived: the line's `time`.
    pub time: SystemTime,
    /// The same moment, for `duration_ms`.
    pub at: Instant,
    /// The request's id (`X-Request-Id`), as forwarded and logged.
    pub request_id: HeaderValue,
    /// The client as the request path sees it (behind trusted proxies, what they
    /// forwarded for).
    pub client: IpAddr,
    /// The direct peer.
    pub peer: SocketAddr,
    /// The request method.
    pub method: Method,
    /// The request's checked host (`name[:port]`), if it named a valid one.
    pub host: Option<String>,
    /// The path without the query ([`path_of`]).
    pub path: String,
    /// Index into the rooms the log was opened with.
    pub room: Option<usize>,
    /// The verified visitor's reference.
    pub reference: Option<VisitorRef>,
    /// The request's `User-Agent`, as sent.
    pub user_agent: Option<HeaderValue>,
    /// The request's `Referer`, as sent (its query is cut when the line is written).
    pub referer: Option<HeaderValue>,
    /// The protocol the request came over (HTTP/1.1 or HTTP/2, h2c).
    pub version: Version,
}

impl Started {
    /// Copies the header values kept out of the request head, at most [`MAX_HEADER`]
    /// bytes each, so the head's buffer is not held for as long as this line waits.
    fn own_headers(&mut self) {
        for value in [&mut self.user_agent, &mut self.referer]
            .into_iter()
            .flatten()
        {
            let bytes = value.as_bytes();
            if let Ok(copy) = HeaderValue::from_bytes(&bytes[..bytes.len().min(MAX_HEADER)]) {
                *value = copy;
            }
        }
    }
}

/// The classes whose response lasts as long as the client stays: a waiting page's live
/// stream (`events`) and an admitted visitor's stream or WebSocket tunnel (`stream`).
const LONG_LIVED: [&str; 2] = ["events", "stream"];

/// How long the origin took to send its response headers, noted on a proxied response (in
/// its extensions) for the line's `origin_ms`; absent when the request was not proxied.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub struct OriginTime(pub Duration);

/// `uri`'s path, without the query (grants and tokens travel there), at most [`MAX_PATH`]
/// bytes.
pub fn path_of(uri: &http::Uri) -> String {
    let path = uri.path();
    let mut end = path.len().min(MAX_PATH);
    while !path.is_char_boundary(end) {
        end -= 1;
    }
    path[..end].to_owned()
}

/// A decision the request path notes on a response (in its extensions) where the response
/// alone would not tell it; see [`decision_of`].
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub struct Noted(pub &'static str);

impl Noted {
    /// Let through to the origin because the store is down and the room fails open.
    pub const FAIL_OPEN: Noted = Noted("fail_open");
    /// Refused with 503 by `stream_cap` or `max_inflight`.
    pub const BUSY: Noted = Noted("busy");
}

/// The `X-Anteroom-Status` values, each a decision of the same name.
const VISITOR_STATUSES: [VisitorStatus; 6] = [
    VisitorStatus::Waiting,
    VisitorStatus::Refused,
    VisitorStatus::Closed,
    VisitorStatus::Stalled,
    VisitorStatus::Banned,
    VisitorStatus::Full,
];

/// The line's `decision`, from what the request path answered: a [`Noted`] decision;
/// else `admitted` for the origin's answer (`passed` for a bypass path or a preflight,
/// which skip the queue); else our `X-Anteroom-Status` (`waiting`, `refused`, `closed`,
/// `stalled`, `banned`, `full`); else `served` for anything else of ours below 400 and
/// `error` from 400 up.
pub fn decision_of(
    class: &'static str,
    proxied: bool,
    noted: Option<Noted>,
    visitor_status: Option<&HeaderValue>,
    status: StatusCode,
) -> &'static str {
    if let Some(Noted(decision)) = noted {
        return decision;
    }
    if proxied {
        return match class {
            "bypass" | "preflight" => "passed",
            _ => "admitted",
        };
    }
    if let Some(value) = visitor_status
        && let Some(known) = VISITOR_STATUSES
            .iter()
            .find(|s| s.as_str().as_bytes() == value.as_bytes())
    {
        return known.as_str();
    }
    if status.as_u16() < 400 {
        "served"
    } else {
        "error"
    }
}

/// One finished request, as the writer formats it.
struct Entry {
    started: Started,
    class: &'static str,
    decision: &'static str,
    status: u16,
    bytes: u64,
    duration: Duration,
    /// The origin's time to response headers, when the request was proxied.
    origin: Option<Duration>,
    completed: bool,
}

/// The JSON of one line, its fields in a fixed order.
#[derive(Serialize)]
struct Line<'a> {
    time: String,
    request_id: &'a str,
    client: IpAddr,
    peer: SocketAddr,
    method: &'a str,
    host: Option<&'a str>,
    path: &'a str,
    room: Option<&'a str>,
    class: &'a str,
    decision: &'a str,
    status: u16,
    bytes: u64,
    duration_ms: f64,
    origin_ms: Option<f64>,
    protocol: &'static str,
    user_agent: Option<std::borrow::Cow<'a, str>>,
    referer: Option<std::borrow::Cow<'a, str>>,
    #[serde(rename = "ref")]
    reference: Option<&'a str>,
    completed: bool,
}

/// The line's `protocol`, as the request line names it.
fn protocol(version: Version) -> &'static str {
    match version {
        Version::HTTP_09 => "HTTP/0.9",
        Version::HTTP_10 => "HTTP/1.0",
        Version::HTTP_11 => "HTTP/1.1",
        Version::HTTP_2 => "HTTP/2",
        Version::HTTP_3 => "HTTP/3",
        _ => "other",
    }
}

/// A client's header value as the line writes it: at most [`MAX_HEADER`] bytes, read as
/// UTF-8 with anything else replaced (JSON escapes the rest).
fn header_text(value: &[u8]) -> std::borrow::Cow<'_, str> {
    String::from_utf8_lossy(&value[..value.len().min(MAX_HEADER)])
}

/// A referer without its query or fragment (a grant or a token may be in them).
fn without_query(value: &[u8]) -> &[u8] {
    let end = value
        .iter()
        .position(|&b| b == b'?' || b == b'#')
        .unwrap_or(value.len());
    &value[..end]
}

/// Milliseconds with three decimals (microsecond precision).
fn millis(d: Duration) -> f64 {
    d.as_micros() as f64 / 1000.0
}

impl Entry {
    /// Appends this entry's line (JSON and a newline) to `out`.
    fn write_json(&self, out: &mut Vec<u8>, rooms: &[String]) {
        let s = &self.started;
        let reference = s.reference;
        let line = Line {
            time: humantime::format_rfc3339_millis(s.time).to_string(),
            // Ours are hex and a trusted proxy's are checked to be visible ASCII.
            request_id: s.request_id.to_str().unwrap_or("-"),
            client: s.client,
            peer: s.peer,
            method: s.method.as_str(),
            host: s.host.as_deref(),
            path: &s.path,
            room: s.room.and_then(|i| rooms.get(i)).map(String::as_str),
            class: self.class,
            decision: self.decision,
            status: self.status,
            bytes: self.bytes,
            duration_ms: millis(self.duration),
            origin_ms: self.origin.map(millis),
            protocol: protocol(s.version),
            user_agent: s.user_agent.as_ref().map(|v| header_text(v.as_bytes())),
            referer: s
                .referer
                .as_ref()
                .map(|v| header_text(without_query(v.as_bytes()))),
            reference: reference.as_ref().map(|r| r.as_str()),
            completed: self.completed,
        };
        // Serialising these plain fields into a Vec cannot fail.
        if serde_json::to_writer(&mut *out, &line).is_ok() {
            out.push(b'\n');
        }
    }
}

enum Msg {
    Line(Box<Entry>),
    /// Wakes the writer for a reopen (the flag says it is due).
    Wake,
}

/// The access log of one process: a handle on its writer thread. Cheap to clone.
#[derive(Clone)]
pub struct AccessLog {
    shared: Arc<Shared>,
}

struct Shared {
    tx: SyncSender<Msg>,
    /// Set by [`AccessLog::reopen`]; the writer reopens the file when it sees it.
    reopen: Arc<AtomicBool>,
    dropped: Counter,
    drops_reported: LogLimiter,
    banned_lines: banned::BannedLines,
    suppressed: Counter,
}

impl AccessLog {
    /// Starts the writer for `target` (`None` for [`Target::Off`]). `rooms` are the room
    /// names [`Started::room`] indexes (a reload adds to them); `dropped` counts lines dropped on a full channel,
    /// `suppressed` a banned client's lines beyond [`banned::LINES_PER_SEC`].
    pub fn open(
        target: &Target,
        rooms: Arc<arc_swap::ArcSwap<Vec<String>>>,
        dropped: Counter,
        suppressed: Counter,
    ) -> io::Result<Option<AccessLog>> {
        let sink = match target {
            Target::Off => return Ok(None),
            Target::Stdout => Sink::Stdout,
            Target::File(path) => Sink::File {
                file: open_file(path)
                    .map_err(|e| io::Error::new(e.kind(), describe_open_error(path, &e)))?,
                path: path.clone(),
            },
        };
        let (tx, rx) = std::sync::mpsc::sync_channel(CHANNEL_LINES);
        let reopen = Arc::new(AtomicBool::new(false));
        {
            let reopen = reopen.clone();
            std::thread::Builder::new()
                .name("access-log".into())
                .spawn(move || write_loop(rx, sink, &rooms, &reopen))?;
        }
        Ok(Some(AccessLog {
            shared: Arc::new(Shared {
                tx,
                reopen,
                dropped,
                drops_reported: LogLimiter::new(REPORT_EVERY),
                banned_lines: banned::BannedLines::new(),
                suppressed,
            }),
        }))
    }

    /// Asks the writer to reopen the file (SIGHUP, after logrotate moved it): lines already
    /// queued go to the old file, later ones to a fresh file at the configured path.
    /// Nothing for stdout.
    pub fn reopen(&self) {
        self.shared.reopen.store(true, Ordering::Release);
        // A full channel wakes the writer anyway; it checks the flag after every write.
        let _ = self.shared.tx.try_send(Msg::Wake);
    }

    /// `response` with its body watched: when the body is done (or dropped), the request's
    /// line is sent to the writer.
    pub fn finish(
        &self,
        mut started: Started,
        class: &'static str,
        decision: &'static str,
        response: Response<Body>,
    ) -> Response<Body> {
        if decision == VisitorStatus::Banned.as_str()
            && !self.shared.banned_lines.allow(started.client, started.at)
        {
            self.shared.suppressed.inc();
            return response;
        }
        if LONG_LIVED.contains(&class) {
            started.own_headers();
        }
        let origin = response
            .extensions()
            .get::<OriginTime>()
            .map(|OriginTime(took)| *took);
        let (parts, body) = response.into_parts();
        // hyper never polls a body that is already at its end, nor any body of an answer to
        // HEAD: those are complete once the head is written, which is when they are dropped.
        let complete_on_drop = started.method == Method::HEAD || body.is_end_stream();
        let watch = Finish {
            log: self.clone(),
            entry: Some(Box::new(Entry {
                started,
                class,
                decision,
                status: parts.status.as_u16(),
                bytes: 0,
                duration: Duration::ZERO,
                origin,
                completed: false,
            })),
            ended: None,
            complete_on_drop,
        };
        Response::from_parts(parts, Watched::new(body, watch).boxed())
    }

    fn send(&self, entry: Box<Entry>) {
        match self.shared.tx.try_send(Msg::Line(entry)) {
            Ok(()) => {}
            Err(TrySendError::Full(_) | TrySendError::Disconnected(_)) => {
                self.shared.dropped.inc();
                if let Some(suppressed) = self.shared.drops_reported.allow_counted() {
                    tracing::warn!(
                        dropped_total = self.shared.dropped.get(),
                        since_last_report = suppressed + 1,
                        "access log: the writer is behind; lines dropped"
                    );
                }
            }
        }
    }
}

/// The [`Watch`] on a logged response body: counts its bytes, notes its end, and sends
/// the line when it is dropped.
struct Finish {
    log: AccessLog,
    entry: Option<Box<Entry>>,
    /// When the body's end was delivered.
    ended: Option<Instant>,
    complete_on_drop: bool,
}

impl Watch for Finish {
    fn polled(&mut self, _ready: bool, _cx: &mut Context<'_>) -> Option<BoxError> {
        None
    }

    fn data(&mut self, len: usize) {
        if let Some(entry) = &mut self.entry {
            entry.bytes = entry.bytes.saturating_add(len as u64);
        }
    }

    fn ended(&mut self) {
        self.ended.get_or_insert_with(Instant::now);
    }
}

impl Drop for Finish {
    fn drop(&mut self) {
        let Some(mut entry) = self.entry.take() else {
            return;
        };
        let end = self.ended.unwrap_or_else(Instant::now);
        entry.duration = end.saturating_duration_since(entry.started.at);
        entry.completed = self.ended.is_some() || self.complete_on_drop;
        self.log.send(entry);
    }
}

/// Where the writer writes.
enum Sink {
    Stdout,
    File { path: PathBuf, file: File },
}

impl Sink {
    /// Writes out and empties `out`.
    fn write(&mut self, out: &mut Vec<u8>) -> io::Result<()> {
        if out.is_empty() {
            return Ok(());
        }
        let written = match self {
            Sink::Stdout => {
                let mut stdout = io::stdout().lock();
                stdout.write_all(out).and_then(|()| stdout.flush())
            }
            Sink::File { file, .. } => file.write_all(out),
        };
        out.clear();
        written
    }

    /// A fresh file at the configured path; on failure the old one is kept.
    fn reopen(&mut self) -> io::Result<()> {
        if let Sink::File { path, file } = self {
            *file = open_file(path)
                .map_err(|e| io::Error::new(e.kind(), describe_open_error(path, &e)))?;
            tracing::info!(path = %path.display(), "access log reopened");
        }
        Ok(())
    }
}

/// The writer thread: formats lines as they come, writes them out in chunks and whenever
/// the channel is empty, then rests [`BATCH_PAUSE`]; reopens when asked; returns once every
/// sender is gone.
fn write_loop(
    rx: Receiver<Msg>,
    mut sink: Sink,
    rooms: &arc_swap::ArcSwap<Vec<String>>,
    reopen: &AtomicBool,
) {
    let mut out = Vec::with_capacity(WRITE_CHUNK * 2);
    let failures = LogLimiter::new(REPORT_EVERY);
    let write_out = |sink: &mut Sink, out: &mut Vec<u8>| {
        if let Err(e) = sink.write(out)
            && failures.allow()
        {
            tracing::error!(error = %e, "access log: write failed; lines lost");
        }
        if reopen.swap(false, Ordering::AcqRel)
            && let Err(e) = sink.reopen()
        {
            tracing::error!(error = %e, "access log: reopen failed; still writing to the old file");
        }
    };
    while let Ok(first) = rx.recv() {
        // The names as they stand now: a room's index never changes, a reload only adds.
        let rooms = rooms.load();
        let mut next = Some(first);
        while let Some(msg) = next {
            if let Msg::Line(entry) = msg {
                entry.write_json(&mut out, &rooms);
                if out.len() >= WRITE_CHUNK {
                    write_out(&mut sink, &mut out);
                }
            }
            next = rx.try_recv().ok();
        }
        write_out(&mut sink, &mut out);
        std::thread::sleep(BATCH_PAUSE);
    }
    write_out(&mut sink, &mut out);
}

#[cfg(test)]
mod tests;
