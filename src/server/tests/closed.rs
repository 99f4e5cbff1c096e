//! Every connection the server closes is counted by its reason (`Census::closed`, the
//! metric `anteroom_connections_closed_total`), and only by that one.

use super::*;

/// The census's closed counters, in [`Closed::ALL`]'s order.
fn counts(census: &Census) -> [u64; Closed::ALL.len()] {
    Closed::ALL.map(|reason| census.closed(reason))
}

/// Waits (at most 5 s) until `reason`'s counter reads 1, then checks every other reads 0.
async fn closed_once_for(census: &Census, reason: Closed) {
    let deadline = Instant::now() + Duration::from_secs(5);
    while census.closed(reason) == 0 && Instant::now() < deadline {
        tokio::time::sleep(Duration::from_millis(10)).await;
    }
    let mut expected = [0; Closed::ALL.len()];
    expected[reason as usize] = 1;
    assert_eq!(counts(census), expected, "closed for {}", reason.as_str());
}

/// A server on `limits`, and the census it counts into.
async fn counted(limits: ServerLimits) -> (TestServer, Census) {
    let census = limits.census.clone();
    (start(limits, hello).await, census)
}

#[tokio::test]
async fn a_connection_that_never_sends_a_head_is_a_head_timeout() {
    let (server, census) = counted(limits()).await;
    let mut silent = TcpStream::connect(server.addr).await.unwrap();
    let (_, eof) = read_to_eof(&mut silent, Duration::from_secs(3)).await;
    assert!(eof);
    closed_once_for(&census, Closed::HeadTimeout).await;
    server.stop().await.unwrap();
}

#[tokio::test]
async fn a_next_head_left_unfinished_is_a_head_timeout_not_an_idle_one() {
    let (server, census) = counted(ServerLimits {
        header_read_timeout: Duration::from_millis(200),
        idle_timeout: Duration::from_secs(5),
        ..limits()
    })
    .await;
    let mut stream = TcpStream::connect(server.addr).await.unwrap();
    http1_round_trip(&mut stream).await;
    stream.write_all(b"GET / HT").await.unwrap();
    let (_, eof) = read_to_eof(&mut stream, Duration::from_secs(3)).await;
    assert!(eof);
    closed_once_for(&census, Closed::HeadTimeout).await;
    server.stop().await.unwrap();
}

#[tokio::test]
async fn a_quiet_keep_alive_connection_is_an_idle_timeout() {
    let (server, census) = counted(ServerLimits {
        header_read_timeout: Duration::from_secs(5),
        idle_timeout: Duration::from_millis(200),
        ..limits()
    })
    .await;
    let mut stream = TcpStream::connect(server.addr).await.unwrap();
    http1_round_trip(&mut stream).await;
    let (_, eof) = read_to_eof(&mut stream, Duration::from_secs(3)).await;
    assert!(eof);
    closed_once_for(&census, Closed::IdleTimeout).await;
    server.stop().await.unwrap();
}

#[tokio::test]
async fn a_head_over_max_header_bytes_is_head_too_large() {
    let (server, census) = counted(limits()).await;
    let mut stream = TcpStream::connect(server.addr).await.unwrap();
    let request = format!(
        "GET / HTTP/1.1\r\nHost: x\r\nX-Big: {}\r\n\r\n",
        "a".repeat(64 * 1024)
    );
    let _ = stream.write_all(request.as_bytes()).await;
    let (response, _) = read_to_eof(&mut stream, Duration::from_secs(3)).await;
    assert!(response.starts_with("HTTP/1.1 431"), "{response:.80}");
    closed_once_for(&census, Closed::HeadTooLarge).await;
    server.stop().await.unwrap();
}

#[tokio::test]
async fn a_head_that_does_not_parse_is_malformed() {
    let (server, census) = counted(limits()).await;
    let mut stream = TcpStream::connect(server.addr).await.unwrap();
    stream
        .write_all(b"\x01\x02 nonsense\r\n\r\n")
        .await
        .unwrap();
    let (response, _) = read_to_eof(&mut stream, Duration::from_secs(3)).await;
    assert!(response.starts_with("HTTP/1.1 400"), "{response:.80}");
    closed_once_for(&census, Closed::Malformed).await;
    server.stop().await.unwrap();
}

#[tokio::test]
async fn a_connection_over_the_clients_cap_is_over_client_cap() {
    let (server, census) = counted(ServerLimits {
        max_connections_per_client: 1,
        header_read_timeout: Duration::from_secs(5),
        ..limits()
    })
    .await;
    let mut first = TcpStream::connect(server.addr).await.unwrap();
    http1_round_trip(&mut first).await;
    let mut second = TcpStream::connect(server.addr).await.unwrap();
    let (response, eof) = read_to_eof(&mut second, Duration::from_secs(3)).await;
    assert!(eof && response.is_empty(), "{response:.80}");
    closed_once_for(&census, Closed::OverClientCap).await;
    // The client's own connection is untouched.
    http1_round_trip(&mut first).await;
    server.stop().await.unwrap();
}

#[tokio::test]
async fn a_connection_closed_for_a_newcomer_at_the_cap_is_made_room() {
    let (server, census) = counted(ServerLimits {
        max_connections: 1,
        idle_timeout: Duration::from_secs(30),
        header_read_timeout: Duration::from_secs(5),
        ..limits()
    })
    .await;
    let mut idle = TcpStream::connect(server.addr).await.unwrap();
    http1_round_trip(&mut idle).await;
    let mut newcomer = TcpStream::connect(server.addr).await.unwrap();
    http1_round_trip(&mut newcomer).await;
    let (_, eof) = read_to_eof(&mut idle, Duration::from_secs(1)).await;
    assert!(eof);
    closed_once_for(&census, Closed::MadeRoom).await;
    server.stop().await.unwrap();
}

#[tokio::test]
async fn a_head_begun_near_the_idle_timeout_is_not_cut_off_by_it() {
    // A load balancer reusing its connection just before `idle_timeout`: once its head has
    // begun, the head has `header_read_timeout` from its first byte.
    let (server, census) = counted(ServerLimits {
        header_read_timeout: Duration::from_secs(3),
        idle_timeout: Duration::from_millis(400),
        ..limits()
    })
    .await;
    let mut stream = TcpStream::connect(server.addr).await.unwrap();
    http1_round_trip(&mut stream).await;
    // The conditions under test are times: the head begins before `idle_timeout` and ends
    // well after it.
    tokio::time::sleep(Duration::from_millis(250)).await;
    stream.write_all(b"GET / HTTP/1.1\r\n").await.unwrap();
    tokio::time::sleep(Duration::from_millis(600)).await;
    stream.write_all(b"Host: x\r\n\r\n").await.unwrap();
    let mut response = vec![0u8; 512];
    let n = tokio::time::timeout(Duration::from_secs(3), stream.read(&mut response))
        .await
        .expect("an answer")
        .unwrap();
    assert!(
        response[..n].starts_with(b"HTTP/1.1 200"),
        "cut off mid-head: {:?}",
        String::from_utf8_lossy(&response[..n])
    );
    assert_eq!(counts(&census), [0; Closed::ALL.len()]);
    server.stop().await.unwrap();
}
