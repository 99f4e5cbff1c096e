//! `anteroom probe`: fetches this instance's own liveness (`/__anteroom/healthz`) or
//! readiness (`/__anteroom/readyz`) endpoint, so a container's health check needs neither
//! curl in the image nor a port written twice: the address is the config's `listen` (the
//! same file, environment and flags the server reads), a wildcard address probed on
//! loopback. One HTTP/1.1 request, bounded by a timeout; the answer's status decides.

use std::net::{IpAddr, Ipv4Addr, Ipv6Addr, SocketAddr};
use std::time::Duration;

use http::{Request, StatusCode};
use http_body_util::{BodyExt, Empty, Limited};

/// Which endpoint a probe asks.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum Check {
    /// `healthz`: the process serves (what a restart policy needs).
    Live,
    /// `readyz`: it should get traffic (not draining, the store answers).
    Ready,
}

impl Check {
    /// The endpoint's path.
    pub fn path(self) -> &'static str {
        match self {
            Check::Live => "/__anteroom/healthz",
            Check::Ready => "/__anteroom/readyz",
        }
    }
}

/// Default bound on one probe, connection to answer.
pub const DEFAULT_TIMEOUT: Duration = Duration::from_secs(2);

/// The most of an answer's body read for the reason it gives.
const MAX_REASON: usize = 256;

/// Why a probe failed, in one line.
#[derive(Debug, thiserror::Error)]
pub enum ProbeError {
    /// Nothing answered the connection (not running, or another address).
    #[error("cannot connect to {addr}: {source}")]
    Connect {
        /// The address dialled.
        addr: SocketAddr,
        /// Why connecting failed.
        source: std::io::Error,
    },
    /// The connection or the HTTP exchange failed.
    #[error("{url}: {source}")]
    Http {
        /// The URL asked for.
        url: String,
        /// What hyper reported.
        source: hyper::Error,
    },
    /// No answer within the timeout.
    #[error("{url}: no answer within {timeout:?}")]
    TimedOut {
        /// The URL asked for.
        url: String,
        /// How long was waited.
        timeout: Duration,
    },
    /// An answer other than 200, with the first line of what it said.
    #[error("{url}: {status}{}", reason_suffix(.reason))]
    Status {
        /// The URL asked for.
        url: String,
        /// The status it answered with.
        status: StatusCode,
        /// The first line of its body, at most 256 bytes.
        reason: String,
    },
}

fn reason_suffix(reason: &str) -> String {
    if reason.is_empty() {
        String::new()
    } else {
        format!(" ({reason})")
    }
}

/// Where to probe a listener bound to `listen`: a wildcard address on the loopback of its
/// family, any other as it is.
pub fn probe_address(listen: SocketAddr) -> SocketAddr {
    let ip = match listen.ip() {
        IpAddr::V4(ip) if ip.is_unspecified() => IpAddr::V4(Ipv4Addr::LOCALHOST),
        IpAddr::V6(ip) if ip.is_unspecified() => IpAddr::V6(Ipv6Addr::LOCALHOST),
        ip => ip,
    };
    SocketAddr::new(ip, listen.port())
}

/// Asks `addr` for `check`'s endpoint; `Ok` with the answer's first line on a 200.
pub async fn probe(
    addr: SocketAddr,
    check: Check,
    timeout: Duration,
) -> Result<String, ProbeError> {
    let url = format!("http://{addr}{}", check.path());
    match tokio::time::timeout(timeout, ask(addr, check, &url)).await {
        Ok(answer) => answer,
        Err(_) => Err(ProbeError::TimedOut { url, timeout }),
    }
}

async fn ask(addr: SocketAddr, check: Check, url: &str) -> Result<String, ProbeError> {
    let http = |source| ProbeError::Http {
        url: url.to_owned(),
        source,
    };
    let stream = tokio::net::TcpStream::connect(addr)
        .await
        .map_err(|source| ProbeError::Connect { addr, source })?;
    let (mut sender, connection) =
        hyper::client::conn::http1::handshake(hyper_util::rt::TokioIo::new(stream))
            .await
            .map_err(http)?;
    tokio::spawn(connection);
    let request = Request::get(check.path())
        .header(http::header::HOST, addr.to_string())
        .header(http::header::USER_AGENT, "anteroom-probe")
        .body(Empty::<bytes::Bytes>::new())
        .expect("a fixed path and header values make a valid request");
    let response = sender.send_request(request).await.map_err(http)?;
    let status = response.status();
    // Only the start of the body: its first line is the reason ("draining").
    let body = Limited::new(response.into_body(), MAX_REASON)
        .collect()
        .await
        .map(|b| b.to_bytes())
        .unwrap_or_default();
    let text = String::from_utf8_lossy(&body);
    let first = text.lines().next().unwrap_or("").trim();
    let reason: String = first.chars().filter(|c| !c.is_control()).collect();
    if status == StatusCode::OK {
        Ok(reason)
    } else {
        Err(ProbeError::Status {
            url: url.to_owned(),
            status,
            reason,
        })
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn wildcard_listeners_are_probed_on_loopback() {
        let a = |s: &str| s.parse::<SocketAddr>().unwrap();
        assert_eq!(probe_address(a("0.0.0.0:8080")), a("127.0.0.1:8080"));
        assert_eq!(probe_address(a("[::]:9090")), a("[::1]:9090"));
        assert_eq!(probe_address(a("10.1.2.3:80")), a("10.1.2.3:80"));
    }

    #[tokio::test]
    async fn a_listener_that_never_answers_times_out() {
        // Connections wait in the backlog, never accepted.
        let silent = std::net::TcpListener::bind("127.0.0.1:0").unwrap();
        let addr = silent.local_addr().unwrap();
        let started = std::time::Instant::now();
        let e = probe(addr, Check::Live, Duration::from_millis(200))
            .await
            .unwrap_err();
        assert!(matches!(e, ProbeError::TimedOut { .. }), "{e}");
        assert!(started.elapsed() < Duration::from_secs(5));
        assert!(e.to_string().contains("no answer within"), "{e}");
    }
}
