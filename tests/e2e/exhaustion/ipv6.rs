//! One IPv6 /64 is one client: many addresses of one prefix made local on `lo` share one
//! per-client connection cap.

use super::*;

/// A prefix made local on `lo` for one test (`ip -6 route add local <prefix> dev lo`):
/// every address in it can be bound (with `IPV6_FREEBIND`) and connected to. The route is
/// removed on drop, so also when the test fails; one that was already there (another run's)
/// is used and left as it was.
struct LocalRoute {
    prefix: &'static str,
    added: bool,
}

impl LocalRoute {
    fn add(prefix: &'static str) -> LocalRoute {
        let out = Command::new("ip")
            .args(["-6", "route", "add", "local", prefix, "dev", "lo"])
            .output()
            .unwrap_or_else(|e| panic!("cannot run `ip` to make {prefix} local: {e}"));
        let stderr = String::from_utf8_lossy(&out.stderr);
        let added = if out.status.success() {
            true
        } else if stderr.contains("File exists") {
            false
        } else {
            panic!(
                "`ip -6 route add local {prefix} dev lo` failed (this test needs root or \
                 CAP_NET_ADMIN): {stderr}"
            );
        };
        LocalRoute { prefix, added }
    }
}

impl Drop for LocalRoute {
    fn drop(&mut self) {
        if !self.added {
            return;
        }
        let removed = Command::new("ip")
            .args(["-6", "route", "del", "local", self.prefix, "dev", "lo"])
            .status();
        if !matches!(removed, Ok(s) if s.success()) {
            eprintln!(
                "could not remove the route: ip -6 route del local {} dev lo",
                self.prefix
            );
        }
    }
}

/// An IPv6 socket that may bind an address of a [`LocalRoute`] prefix: such addresses are
/// routed locally but not configured on an interface, which `bind` otherwise refuses.
fn freebind_v6() -> TcpSocket {
    let socket = socket2::Socket::new(socket2::Domain::IPV6, socket2::Type::STREAM, None).unwrap();
    socket.set_freebind_v6(true).expect("IPV6_FREEBIND");
    socket.set_nonblocking(true).unwrap();
    TcpSocket::from_std_stream(socket.into())
}

async fn connect_from_v6(addr: SocketAddr, ip: Ipv6Addr) -> TcpStream {
    let socket = freebind_v6();
    socket.bind(SocketAddr::new(ip.into(), 0)).unwrap();
    socket
        .connect(addr)
        .await
        .unwrap_or_else(|e| panic!("connect from {ip}: {e}"))
}

/// Sends `GET /__anteroom/healthz` on `stream` and reads the response head, or `None` if
/// the server closed or said nothing within `limit`.
async fn healthz_on(stream: &mut TcpStream, limit: Duration) -> Option<String> {
    let request = b"GET /__anteroom/healthz HTTP/1.1\r\nHost: anteroom.test\r\n\r\n";
    let asked = async {
        stream.write_all(request).await.ok()?;
        let mut buf = vec![0u8; 2048];
        match stream.read(&mut buf).await {
            Ok(n) if n > 0 => Some(String::from_utf8_lossy(&buf[..n]).into_owned()),
            _ => None,
        }
    };
    tokio::time::timeout(limit, asked).await.ok().flatten()
}

/// A health probe on a new connection from `ip`, bounded by `limit` (connect included).
async fn healthz_from(addr: SocketAddr, ip: Ipv6Addr, limit: Duration) -> Option<String> {
    let asked = async {
        let mut stream = connect_from_v6(addr, ip).await;
        healthz_on(&mut stream, limit).await
    };
    tokio::time::timeout(limit, asked).await.ok().flatten()
}

/// The `n`th attacker address: all in 2001:db8:1::/64, differing across the whole interface
/// identifier (not just its last bits), never the server's 2001:db8:1::1.
fn attacker_ip(n: u16) -> Ipv6Addr {
    Ipv6Addr::new(
        0x2001,
        0xdb8,
        1,
        0,
        0x0400 * n + 1,
        0xa000 ^ n,
        n.wrapping_mul(0x3d),
        0x100 + n,
    )
}

/// One IPv6 /64 is one client: a subscriber holds the whole /64, so connections
/// from 40 distinct addresses of 2001:db8:1::/64 share one `max_connections_per_client` of 8
/// and cannot take `max_connections`. Beyond 8 they are closed at accept, and a health probe
/// from the neighbouring /64 (2001:db8:1:1::/64) is answered meanwhile. Counted per address
/// instead, all 40 would be kept (each address holds one) and the test fails.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn one_ipv6_64_shares_one_per_client_cap() {
    const CAP: usize = 8;
    const ATTACKERS: u16 = 40;
    let _attacker_net = LocalRoute::add("2001:db8:1::/64");
    let _neighbour_net = LocalRoute::add("2001:db8:1:1::/64");
    let origin = Origin::start().await;
    let dir = tempfile::tempdir().unwrap();
    let cfg = config(
        &origin.url(),
        dir.path(),
        &format!(
            "  max_connections: 100\n  max_connections_per_client: {CAP}\n  header_read_timeout: 30s"
        ),
        "",
    );
    // Listening on an address of the attacker's /64 itself, not on [::] (all interfaces).
    let server_ip: Ipv6Addr = "2001:db8:1::1".parse().unwrap();
    let socket = freebind_v6();
    socket.bind(SocketAddr::new(server_ip.into(), 0)).unwrap();
    let listener = socket.listen(1024).unwrap();
    let store = anteroom::run::open_store(&cfg).await.unwrap();
    let ar = anteroom::run::start(&cfg, store, listener, false)
        .await
        .unwrap();
    let addr = ar.addr;

    // Every connection completes its handshake in the kernel's backlog; the server keeps the
    // first CAP it accepts from the /64 and drops the rest at accept.
    let mut held = Vec::new();
    for n in 0..ATTACKERS {
        held.push(connect_from_v6(addr, attacker_ip(n)).await);
    }
    let started = Instant::now();
    let closed: Vec<bool> = futures_util::future::join_all(
        held.iter_mut()
            .map(|stream| closed_within(stream, Duration::from_secs(2))),
    )
    .await;
    let refused = closed.iter().filter(|&&c| c).count();
    assert_eq!(
        refused,
        usize::from(ATTACKERS) - CAP,
        "{CAP} of {ATTACKERS} connections from one /64 kept, the rest closed at accept \
         (0 closed means the cap is counted per address, not per /64)"
    );
    // The kept ones are served: the /64 has its share, no more and no less.
    let mut kept: Vec<TcpStream> = held
        .into_iter()
        .zip(&closed)
        .filter(|(_, closed)| !**closed)
        .map(|(stream, _)| stream)
        .collect();
    for stream in &mut kept {
        let head = healthz_on(stream, Duration::from_secs(3)).await;
        assert!(
            head.as_deref()
                .is_some_and(|h| h.starts_with("HTTP/1.1 200")),
            "a kept connection is served: {head:?}"
        );
    }
    // One more address of the /64, never seen before, is over the cap too.
    let fresh = "2001:db8:1:0:ffff:ffff:ffff:fffe".parse().unwrap();
    let mut stream = connect_from_v6(addr, fresh).await;
    assert!(
        closed_within(&mut stream, Duration::from_secs(2)).await,
        "a new address of a full /64 is closed at accept"
    );
    assert!(
        started.elapsed() < Duration::from_secs(10),
        "refusals took {:?}",
        started.elapsed()
    );

    // Another /64, even the adjacent one in the same /48, is another client: answered at
    // once while the attacker's /64 is full.
    let asked = Instant::now();
    let probe = healthz_from(
        addr,
        "2001:db8:1:1::1".parse().unwrap(),
        Duration::from_secs(3),
    )
    .await;
    assert!(
        probe
            .as_deref()
            .is_some_and(|h| h.starts_with("HTTP/1.1 200")),
        "health probe from another /64 while one /64 is at its cap: {probe:?}"
    );
    assert!(
        asked.elapsed() < Duration::from_secs(3),
        "took {:?}",
        asked.elapsed()
    );

    // The /64 gets its connections back as its open ones close (bounded polling).
    drop(kept);
    let until = Instant::now() + Duration::from_secs(5);
    let again = loop {
        let head = healthz_from(addr, attacker_ip(0), Duration::from_millis(500)).await;
        if head.is_some() || Instant::now() >= until {
            break head;
        }
        tokio::time::sleep(Duration::from_millis(50)).await;
    };
    assert!(
        again
            .as_deref()
            .is_some_and(|h| h.starts_with("HTTP/1.1 200")),
        "the /64 is served again once its connections closed: {again:?}"
    );
    ar.shutdown().await.unwrap();
}
