//! Timing request heads and making room: keep-alive waits `idle_timeout`, an unfinished
//! head (HTTP/1) or header block (HTTP/2) gets `header_read_timeout`, and a full server
//! closes its longest-idle connection for a newcomer.

use super::*;

/// Limits under which a keep-alive connection's idle time (5 s) outlasts many header-read
/// timeouts (200 ms).
fn long_keep_alive() -> ServerLimits {
    ServerLimits {
        header_read_timeout: Duration::from_millis(200),
        idle_timeout: Duration::from_secs(5),
        ..limits()
    }
}

#[tokio::test]
async fn a_keep_alive_connection_waits_idle_timeout_not_the_header_read_timeout() {
    // A load balancer keeps its idle upstream connections for up to `idle_timeout`; closed
    // earlier, the one it reuses races the close and its visitor gets a 502.
    let server = start(long_keep_alive(), hello).await;
    let mut stream = TcpStream::connect(server.addr).await.unwrap();
    http1_round_trip(&mut stream).await;
    // The condition under test is time passing: three header-read timeouts with nothing sent.
    tokio::time::sleep(Duration::from_millis(600)).await;
    http1_round_trip(&mut stream).await;
    server.stop().await.unwrap();
}

#[tokio::test]
async fn a_next_request_head_left_unfinished_is_closed_after_the_header_read_timeout() {
    let server = start(long_keep_alive(), hello).await;
    let mut stream = TcpStream::connect(server.addr).await.unwrap();
    http1_round_trip(&mut stream).await;
    stream.write_all(b"GET /ind").await.unwrap();
    let started = Instant::now();
    let (_, eof) = read_to_eof(&mut stream, Duration::from_secs(3)).await;
    assert!(eof, "a half-sent second request kept its connection");
    assert!(started.elapsed() >= Duration::from_millis(150));
    server.stop().await.unwrap();
}

/// One HTTP/2 frame: its header and `payload`.
fn h2_frame(kind: u8, flags: u8, stream: u32, payload: &[u8]) -> Vec<u8> {
    let mut frame = (payload.len() as u32).to_be_bytes()[1..].to_vec();
    frame.extend_from_slice(&[kind, flags]);
    frame.extend_from_slice(&stream.to_be_bytes());
    frame.extend_from_slice(payload);
    frame
}

/// An HPACK integer with an `n`-bit prefix (RFC 7541 §5.1), the prefix's high bits 0.
fn hpack_int(mut value: usize, n: u32, out: &mut Vec<u8>) {
    let max = (1usize << n) - 1;
    if value < max {
        out.push(value as u8);
        return;
    }
    out.push(max as u8);
    value -= max;
    while value >= 128 {
        out.push((value % 128 + 128) as u8);
        value /= 128;
    }
    out.push(value as u8);
}

/// The header block of `GET /` over http, plus `pad` bytes in a header of its own (a literal
/// without indexing, RFC 7541 §6.2.2).
fn h2_get_block(pad: usize) -> Vec<u8> {
    // :method GET, :scheme http, :path / (static table 2, 6, 4), :authority "x" (index 1).
    let mut block = vec![0x82, 0x86, 0x84, 0x41, 0x01, b'x'];
    if pad > 0 {
        block.push(0x00);
        hpack_int(5, 7, &mut block);
        block.extend_from_slice(b"x-pad");
        hpack_int(pad, 7, &mut block);
        block.extend(std::iter::repeat_n(b'a', pad));
    }
    block
}

const END_STREAM: u8 = 0x1;
const END_HEADERS: u8 = 0x4;

/// Reads frames until stream `id` ends (a frame of it with END_STREAM).
async fn h2_read_until_end_of(stream: &mut TcpStream, id: u32) {
    loop {
        let mut head = [0u8; 9];
        tokio::time::timeout(Duration::from_secs(3), stream.read_exact(&mut head))
            .await
            .expect("a frame arrives")
            .unwrap();
        let len = u32::from_be_bytes([0, head[0], head[1], head[2]]) as usize;
        let mut payload = vec![0u8; len];
        stream.read_exact(&mut payload).await.unwrap();
        let of = u32::from_be_bytes([head[5], head[6], head[7], head[8]]) & 0x7fff_ffff;
        if of == id && head[4] & END_STREAM != 0 && matches!(head[3], 0x0 | 0x1) {
            return;
        }
    }
}

/// An h2c connection (prior knowledge) that has had one request on stream 1 answered.
async fn h2_served_once(addr: SocketAddr) -> TcpStream {
    let mut stream = TcpStream::connect(addr).await.unwrap();
    let mut hello = b"PRI * HTTP/2.0\r\n\r\nSM\r\n\r\n".to_vec();
    hello.extend(h2_frame(0x4, 0, 0, &[]));
    hello.extend(h2_frame(0x1, END_HEADERS | END_STREAM, 1, &h2_get_block(0)));
    stream.write_all(&hello).await.unwrap();
    h2_read_until_end_of(&mut stream, 1).await;
    stream
}

#[tokio::test]
async fn an_http2_connection_that_pings_waits_idle_timeout() {
    let server = start(long_keep_alive(), hello).await;
    let mut stream = h2_served_once(server.addr).await;
    // A quiet client's control frames are not a request on its way.
    stream
        .write_all(&h2_frame(0x6, 0, 0, b"12345678"))
        .await
        .unwrap();
    stream
        .write_all(&h2_frame(0x8, 0, 0, &1000u32.to_be_bytes()))
        .await
        .unwrap();
    tokio::time::sleep(Duration::from_millis(600)).await;
    let next = h2_frame(0x1, END_HEADERS | END_STREAM, 3, &h2_get_block(0));
    stream.write_all(&next).await.unwrap();
    h2_read_until_end_of(&mut stream, 3).await;
    server.stop().await.unwrap();
}

#[tokio::test]
async fn an_unfinished_http2_header_block_is_closed_after_the_header_read_timeout() {
    // Without the watchdog's head timer, h2 buffers the block (twice: its bytes and what is
    // decoded of them) until `idle_timeout`.
    let server = start(long_keep_alive(), hello).await;
    let mut stream = h2_served_once(server.addr).await;
    let block = h2_get_block(4000);
    // HEADERS without END_HEADERS: CONTINUATION frames are to follow, and never do.
    let started = Instant::now();
    stream
        .write_all(&h2_frame(0x1, END_STREAM, 3, &block))
        .await
        .unwrap();
    let (_, eof) = read_to_eof(&mut stream, Duration::from_secs(3)).await;
    assert!(eof, "an unfinished header block kept its connection");
    assert!(started.elapsed() >= Duration::from_millis(150));
    server.stop().await.unwrap();
}

#[tokio::test]
async fn an_unfinished_http2_header_block_beside_a_stream_in_flight_is_closed_too() {
    // A stream that lasts (a waiting page's live stream) must not shelter a held block.
    let endless = |_req: Request<Incoming>, _peer: SocketAddr| async {
        let body = http_body_util::StreamBody::new(futures_util::stream::pending::<
            Result<hyper::body::Frame<bytes::Bytes>, BoxError>,
        >());
        Response::new(BodyExt::boxed(body))
    };
    let server = start(long_keep_alive(), endless).await;
    let mut stream = TcpStream::connect(server.addr).await.unwrap();
    let mut hello = b"PRI * HTTP/2.0\r\n\r\nSM\r\n\r\n".to_vec();
    hello.extend(h2_frame(0x4, 0, 0, &[]));
    hello.extend(h2_frame(0x1, END_HEADERS | END_STREAM, 1, &h2_get_block(0)));
    stream.write_all(&hello).await.unwrap();
    // Stream 1's response head: the request is in flight, for good.
    loop {
        let mut head = [0u8; 9];
        tokio::time::timeout(Duration::from_secs(3), stream.read_exact(&mut head))
            .await
            .expect("a frame arrives")
            .unwrap();
        let mut payload = vec![0u8; u32::from_be_bytes([0, head[0], head[1], head[2]]) as usize];
        stream.read_exact(&mut payload).await.unwrap();
        if head[3] == 0x1 {
            break;
        }
    }
    let started = Instant::now();
    stream
        .write_all(&h2_frame(0x1, END_STREAM, 3, &h2_get_block(4000)))
        .await
        .unwrap();
    let (_, eof) = read_to_eof(&mut stream, Duration::from_secs(3)).await;
    assert!(
        eof,
        "a stream in flight sheltered an unfinished header block"
    );
    assert!(started.elapsed() >= Duration::from_millis(150));
    server.stop().await.unwrap();
}

#[tokio::test]
async fn at_the_cap_the_connection_idle_longest_makes_room_for_a_newcomer() {
    let server = start(
        ServerLimits {
            max_connections: 2,
            idle_timeout: Duration::from_secs(30),
            header_read_timeout: Duration::from_secs(5),
            ..limits()
        },
        hello,
    )
    .await;
    let mut oldest = TcpStream::connect(server.addr).await.unwrap();
    http1_round_trip(&mut oldest).await;
    let mut other = TcpStream::connect(server.addr).await.unwrap();
    http1_round_trip(&mut other).await;

    // Without room made it would wait for `idle_timeout` (30 s).
    let started = Instant::now();
    let mut newcomer = TcpStream::connect(server.addr).await.unwrap();
    http1_round_trip(&mut newcomer).await;
    assert!(started.elapsed() < Duration::from_secs(3));
    let (_, closed) = read_to_eof(&mut oldest, Duration::from_secs(1)).await;
    assert!(closed, "the connection idle longest was not the one closed");
    // One was enough: the other still serves.
    http1_round_trip(&mut other).await;
    server.stop().await.unwrap();
}

#[tokio::test]
async fn at_the_cap_a_request_in_flight_is_never_cut_to_make_room() {
    let slow = |req: Request<Incoming>, peer: SocketAddr| async move {
        if req.uri().path() == "/slow" {
            tokio::time::sleep(Duration::from_millis(1500)).await;
        }
        hello(req, peer).await
    };
    let server = start(
        ServerLimits {
            max_connections: 1,
            idle_timeout: Duration::from_secs(30),
            header_read_timeout: Duration::from_secs(5),
            ..limits()
        },
        slow,
    )
    .await;
    let mut busy = TcpStream::connect(server.addr).await.unwrap();
    busy.write_all(b"GET /slow HTTP/1.1\r\nHost: x\r\n\r\n")
        .await
        .unwrap();
    let mut newcomer = TcpStream::connect(server.addr).await.unwrap();
    newcomer
        .write_all(b"GET / HTTP/1.1\r\nHost: x\r\nConnection: close\r\n\r\n")
        .await
        .unwrap();
    let mut response = vec![0u8; 512];
    let n = tokio::time::timeout(Duration::from_secs(3), busy.read(&mut response))
        .await
        .expect("the slow response arrives")
        .unwrap();
    assert!(
        response[..n].starts_with(b"HTTP/1.1 200"),
        "{:?}",
        &response[..n]
    );
    // Idle from then on, the slow one's connection makes room within about a second.
    let (answer, eof) = read_to_eof(&mut newcomer, Duration::from_secs(4)).await;
    assert!(eof && answer.starts_with("HTTP/1.1 200"), "{answer}");
    server.stop().await.unwrap();
}
