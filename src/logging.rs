//! The diagnostic log on stderr (text or JSON lines) and the request id every line about a
//! request carries.
//!
//! The id is a tokio task-local set around the request's future ([`in_request`]), and the
//! formatter adds it to each line logged while that future runs: `request_id=…` at the end of
//! a text line, a top-level `"request_id"` in a JSON one. Why not a `tracing` span per
//! request: it costs about 5 % of an admitted request's instructions (creating the span
//! formats its field into a string, and every poll enters and leaves it). The id is the only
//! context our lines need, and a line about a request is rare; so the cost falls on the
//! line, not on the request.

use std::fmt;
use std::future::Future;

use http::HeaderValue;
use tracing::{Event, Subscriber};
use tracing_subscriber::fmt::format::{Format, Full, Json, JsonFields, Writer};
use tracing_subscriber::fmt::{FmtContext, FormatEvent, FormatFields};
use tracing_subscriber::registry::LookupSpan;

use crate::cli::LogFormat;

tokio::task_local! {
    static REQUEST_ID: HeaderValue;
}

/// `request` with `id` on every line logged while it runs.
pub fn in_request<F: Future>(id: HeaderValue, request: F) -> impl Future<Output = F::Output> {
    REQUEST_ID.scope(id, request)
}

/// Installs the global subscriber: `filter` (an `EnvFilter` directive such as `info`, which
/// `ANTEROOM_LOG` overrides) on stderr, colored when stderr is a terminal.
pub fn init(default_filter: &str, format: LogFormat) {
    let filter = tracing_subscriber::EnvFilter::try_from_env("ANTEROOM_LOG")
        .unwrap_or_else(|_| tracing_subscriber::EnvFilter::new(default_filter));
    let ansi = std::io::IsTerminal::is_terminal(&std::io::stderr());
    let builder = tracing_subscriber::fmt()
        .with_env_filter(filter)
        .with_writer(std::io::stderr)
        .with_ansi(ansi);
    match format {
        LogFormat::Text => builder
            .event_format(WithRequestId(Format::default().with_ansi(ansi)))
            .init(),
        LogFormat::Json => builder
            .fmt_fields(JsonFields::new())
            .event_format(WithRequestId(Format::default().json()))
            .init(),
    }
}

/// A line format that appends the request id, when there is one, to what `F` writes.
pub struct WithRequestId<F>(pub F);

/// How a format ends its line, so the id can be added just before the end.
pub trait LineEnd {
    /// Writes `line` (as the inner format wrote it, newline included) with `id` added.
    fn write_with_id(line: &str, id: &str, out: &mut Writer<'_>) -> fmt::Result;
}

impl LineEnd for Format<Full> {
    fn write_with_id(line: &str, id: &str, out: &mut Writer<'_>) -> fmt::Result {
        let body = line.strip_suffix('\n').unwrap_or(line);
        writeln!(out, "{body} request_id={id}")
    }
}

impl LineEnd for Format<Json> {
    fn write_with_id(line: &str, id: &str, out: &mut Writer<'_>) -> fmt::Result {
        let body = line.strip_suffix('\n').unwrap_or(line);
        let Some(object) = body.strip_suffix('}') else {
            // Not an object after all: the line as written, never a broken one.
            return out.write_str(line);
        };
        let id = serde_json::to_string(id).map_err(|_| fmt::Error)?;
        writeln!(out, "{object},\"request_id\":{id}}}")
    }
}

impl<S, N, F> FormatEvent<S, N> for WithRequestId<F>
where
    S: Subscriber + for<'a> LookupSpan<'a>,
    N: for<'a> FormatFields<'a> + 'static,
    F: FormatEvent<S, N> + LineEnd,
{
    fn format_event(
        &self,
        ctx: &FmtContext<'_, S, N>,
        mut out: Writer<'_>,
        event: &Event<'_>,
    ) -> fmt::Result {
        let Ok(id) = REQUEST_ID.try_with(HeaderValue::clone) else {
            return self.0.format_event(ctx, out, event);
        };
        let mut line = String::new();
        self.0.format_event(ctx, Writer::new(&mut line), event)?;
        // Ids are visible ASCII (ours, or a trusted proxy's after `sane_request_id`).
        let id = id.to_str().unwrap_or("-");
        F::write_with_id(&line, id, &mut out)
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use std::sync::{Arc, Mutex};

    /// Everything a subscriber with `format` writes while `run` runs.
    fn lines_of(format: LogFormat, run: impl FnOnce()) -> String {
        #[derive(Clone, Default)]
        struct Sink(Arc<Mutex<Vec<u8>>>);
        impl std::io::Write for Sink {
            fn write(&mut self, buf: &[u8]) -> std::io::Result<usize> {
                self.0.lock().unwrap().extend_from_slice(buf);
                Ok(buf.len())
            }
            fn flush(&mut self) -> std::io::Result<()> {
                Ok(())
            }
        }
        let sink = Sink::default();
        let writer = {
            let sink = sink.clone();
            move || sink.clone()
        };
        let builder = tracing_subscriber::fmt()
            .with_writer(writer)
            .with_ansi(false);
        match format {
            LogFormat::Text => tracing::subscriber::with_default(
                builder
                    .event_format(WithRequestId(Format::default().with_ansi(false)))
                    .finish(),
                run,
            ),
            LogFormat::Json => tracing::subscriber::with_default(
                builder
                    .fmt_fields(JsonFields::new())
                    .event_format(WithRequestId(Format::default().json()))
                    .finish(),
                run,
            ),
        }
        String::from_utf8(sink.0.lock().unwrap().clone()).unwrap()
    }

    /// Logs one line outside a request and one inside a request with id `id`.
    fn outside_and_inside(id: &'static str) {
        let runtime = tokio::runtime::Builder::new_current_thread()
            .build()
            .unwrap();
        tracing::warn!(n = 1, "outside");
        runtime.block_on(in_request(HeaderValue::from_static(id), async {
            tokio::task::yield_now().await;
            tracing::warn!(n = 2, "inside");
        }));
    }

    #[test]
    fn text_lines_in_a_request_end_with_its_id() {
        let out = lines_of(LogFormat::Text, || outside_and_inside("0123abcd"));
        let lines: Vec<&str> = out.lines().collect();
        assert_eq!(lines.len(), 2, "{out}");
        assert!(lines[0].contains("outside n=1"), "{out}");
        assert!(!lines[0].contains("request_id"), "{out}");
        assert!(
            lines[1].ends_with("inside n=2 request_id=0123abcd"),
            "{out}"
        );
        assert!(lines[1].contains("WARN"), "{out}");
    }

    #[test]
    fn json_lines_in_a_request_carry_its_id_as_a_field() {
        // A trusted proxy's id may hold quotes and backslashes: still one valid object.
        let out = lines_of(LogFormat::Json, || outside_and_inside(r#"a"b\c"#));
        let lines: Vec<serde_json::Value> = out
            .lines()
            .map(|l| serde_json::from_str(l).unwrap_or_else(|e| panic!("{e}: {l}")))
            .collect();
        assert_eq!(lines.len(), 2, "{out}");
        assert_eq!(lines[0]["fields"]["message"], "outside");
        assert!(lines[0].get("request_id").is_none(), "{out}");
        assert_eq!(lines[1]["fields"]["message"], "inside");
        assert_eq!(lines[1]["fields"]["n"], 2);
        assert_eq!(lines[1]["request_id"], r#"a"b\c"#);
        assert_eq!(lines[1]["level"], "WARN");
    }
}
