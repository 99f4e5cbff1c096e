//! Fairness from outside the library: `anteroom verify-draw` run as a process against a
//! published draw (file and http:// URL), and the origin snippets of docs/origin-verify/
//! (shown in docs/fairness.md; Node's built-in `crypto`, Python's `cryptography`) verifying
//! tokens the Rust code signed.

use std::io::{Read, Write};
use std::process::{Command, Output};

use anteroom::fairness::admission_token::{AdmissionClaims, AdmissionKey};
use anteroom::fairness::draw::{DrawDocument, commitment};
use anteroom::queue::VisitorId;

const BIN: &str = env!("CARGO_BIN_EXE_anteroom");

fn verify_draw(args: &[&str]) -> Output {
    Command::new(BIN)
        .arg("verify-draw")
        .args(args)
        .output()
        .expect("run anteroom verify-draw")
}

fn text(o: &Output) -> String {
    format!(
        "{}{}",
        String::from_utf8_lossy(&o.stdout),
        String::from_utf8_lossy(&o.stderr)
    )
}

struct Draw {
    salt: String,
    commitment: String,
    entrants: Vec<VisitorId>,
    doc: DrawDocument,
    file: tempfile::NamedTempFile,
}

fn published_draw(n: u8) -> Draw {
    let salt = [0x42u8; 16];
    let entrants: Vec<VisitorId> = (0..n).map(|i| VisitorId([i; 16])).collect();
    let doc = DrawDocument::after_doors(
        "drop",
        &salt,
        DrawDocument::hashes_of(&salt, entrants.iter().copied()),
        None,
    );
    let file = tempfile::NamedTempFile::new().unwrap();
    std::fs::write(file.path(), serde_json::to_vec(&doc).unwrap()).unwrap();
    Draw {
        salt: hex::encode(salt),
        commitment: commitment(&salt),
        entrants,
        doc,
        file,
    }
}

#[test]
fn verify_draw_places_every_entrant_from_the_published_file() {
    let d = published_draw(30);
    let path = d.file.path().to_str().unwrap();
    let mut places = Vec::new();
    for v in &d.entrants {
        let out = verify_draw(&[
            "--salt",
            &d.salt,
            "--commitment",
            &d.commitment,
            "--visitor-id",
            &v.to_hex(),
            "--draw",
            path,
        ]);
        assert_eq!(out.status.code(), Some(0), "{}", text(&out));
        let report = text(&out);
        assert!(report.contains("salt matches the commitment"), "{report}");
        let place: u64 = report
            .split("place ")
            .nth(1)
            .and_then(|r| r.split_whitespace().next())
            .and_then(|p| p.parse().ok())
            .unwrap_or_else(|| panic!("no place in {report}"));
        places.push(place);
    }
    places.sort_unstable();
    assert_eq!(places, (1..=30).collect::<Vec<u64>>());
    assert_eq!(d.doc.entrants, 30);
}

#[test]
fn verify_draw_exits_non_zero_on_any_mismatch() {
    let d = published_draw(5);
    let path = d.file.path().to_str().unwrap();
    let me = d.entrants[0].to_hex();
    // A salt that is not the committed one.
    let out = verify_draw(&[
        "--salt",
        "00112233",
        "--commitment",
        &d.commitment,
        "--visitor-id",
        &me,
    ]);
    assert_eq!(out.status.code(), Some(1), "{}", text(&out));
    assert!(text(&out).contains("FAIL salt matches the commitment"));
    // Someone who is not in the published list.
    let stranger = VisitorId([0xee; 16]).to_hex();
    let out = verify_draw(&[
        "--salt",
        &d.salt,
        "--commitment",
        &d.commitment,
        "--visitor-id",
        &stranger,
        "--draw",
        path,
    ]);
    assert_eq!(out.status.code(), Some(1), "{}", text(&out));
    assert!(text(&out).contains("not in the published list"));
    // Without a published draw only the salt and hash are checked.
    let out = verify_draw(&[
        "--salt",
        &d.salt,
        "--commitment",
        &d.commitment,
        "--visitor-id",
        &me,
    ]);
    assert_eq!(out.status.code(), Some(0), "{}", text(&out));
    // Input that cannot be checked at all.
    let out = verify_draw(&[
        "--salt",
        "xyz",
        "--commitment",
        &d.commitment,
        "--visitor-id",
        &me,
    ]);
    assert_eq!(out.status.code(), Some(2), "{}", text(&out));
    let out = verify_draw(&[
        "--salt",
        &d.salt,
        "--commitment",
        &d.commitment,
        "--visitor-id",
        &me,
        "--draw",
        "/nonexistent/draw.json",
    ]);
    assert_eq!(out.status.code(), Some(2), "{}", text(&out));
}

#[test]
fn verify_draw_fetches_the_published_draw_over_http() {
    let d = published_draw(8);
    let body = serde_json::to_vec(&d.doc).unwrap();
    let listener = std::net::TcpListener::bind("127.0.0.1:0").unwrap();
    let url = format!(
        "http://{}/__anteroom/rooms/drop/draw",
        listener.local_addr().unwrap()
    );
    // One request, one answer: enough for the CLI.
    let server = std::thread::spawn(move || {
        let (mut conn, _) = listener.accept().unwrap();
        let mut buf = [0u8; 4096];
        let _ = conn.read(&mut buf);
        let head = format!(
            "HTTP/1.1 200 OK\r\ncontent-type: application/json\r\ncontent-length: {}\r\nconnection: close\r\n\r\n",
            body.len()
        );
        conn.write_all(head.as_bytes()).unwrap();
        conn.write_all(&body).unwrap();
    });
    let out = verify_draw(&[
        "--salt",
        &d.salt,
        "--commitment",
        &d.commitment,
        "--visitor-id",
        &d.entrants[3].to_hex(),
        "--draw",
        &url,
    ]);
    server.join().unwrap();
    assert_eq!(out.status.code(), Some(0), "{}", text(&out));
    assert!(text(&out).contains("of 8"));
}

/// Runs an interpreter if it is installed; `None` (with a loud message) if it is not.
fn run_snippet(interpreter: &str, args: &[&str], env: &[(&str, &str)]) -> Option<Output> {
    let mut cmd = Command::new(interpreter);
    cmd.args(args);
    // Only what the test passes: a ROOM from the caller's environment would hide a missing one.
    cmd.env_remove("ROOM");
    for (k, v) in env {
        cmd.env(k, v);
    }
    match cmd.output() {
        Ok(out) => Some(out),
        Err(e) if e.kind() == std::io::ErrorKind::NotFound => {
            eprintln!("SKIPPED: {interpreter} is not installed, so its origin snippet was not run");
            None
        }
        Err(e) => panic!("cannot run {interpreter}: {e}"),
    }
}

fn snippet(name: &str) -> String {
    format!("{}/docs/origin-verify/{name}", env!("CARGO_MANIFEST_DIR"))
}

/// The tokens and the public key as the origin gets them: a genuine token for room `drop`,
/// and ones the origin of `drop` must refuse.
struct OriginFixture {
    pem: String,
    good: String,
    expired: String,
    forged: String,
    /// Genuine and unexpired, signed by the same key, but minted for room `other`.
    other_room: String,
}

fn origin_fixture() -> OriginFixture {
    let key = AdmissionKey::generate().unwrap();
    let now = std::time::SystemTime::now()
        .duration_since(std::time::UNIX_EPOCH)
        .unwrap()
        .as_secs();
    let claims = AdmissionClaims {
        kid: String::new(),
        room: "drop".to_owned(),
        visitor_ref: "7KQ2M9XD".to_owned(),
        admitted_at: now - 5,
        exp: now + 600,
    };
    let good = key.sign(&claims);
    let expired = key.sign(&AdmissionClaims {
        exp: now - 1,
        ..claims.clone()
    });
    let other_room = key.sign(&AdmissionClaims {
        room: "other".to_owned(),
        ..claims.clone()
    });
    let forged = AdmissionKey::generate().unwrap().sign(&claims);
    OriginFixture {
        pem: key.public().to_pem(),
        good,
        expired,
        forged,
        other_room,
    }
}

fn check_origin(interpreter: &str, script: &str) {
    let f = origin_fixture();
    // The snippet as the origin of `room` runs it (`None`: no ROOM at all).
    let run_as = |room: Option<&str>, token: &str| {
        let mut env = vec![
            ("ANTEROOM_PUBLIC_KEY_PEM", f.pem.as_str()),
            ("TOKEN", token),
        ];
        if let Some(room) = room {
            env.push(("ROOM", room));
        }
        run_snippet(interpreter, &[&snippet(script)], &env)
    };
    let run = |token: &str| run_as(Some("drop"), token);
    let Some(ok) = run(&f.good) else { return };
    assert_eq!(ok.status.code(), Some(0), "{}", text(&ok));
    let claims: serde_json::Value =
        serde_json::from_slice(&ok.stdout).unwrap_or_else(|e| panic!("{e}: {}", text(&ok)));
    assert_eq!(claims["room"], "drop");
    assert_eq!(claims["ref"], "7KQ2M9XD");
    for (what, token) in [
        ("expired", &f.expired),
        ("forged", &f.forged),
        ("junk", &"v1.x.y".to_owned()),
        ("minted for room other", &f.other_room),
    ] {
        let out = run(token).unwrap();
        assert_eq!(out.status.code(), Some(1), "{what}: {}", text(&out));
    }
    // A token genuine for `drop` is refused by the origin of another room, and the token
    // for `other` is accepted there: the room claim is what decides, not the key.
    let elsewhere = run_as(Some("other"), &f.good).unwrap();
    assert_eq!(
        elsewhere.status.code(),
        Some(1),
        "drop's token at other's origin: {}",
        text(&elsewhere)
    );
    let theirs = run_as(Some("other"), &f.other_room).unwrap();
    assert_eq!(theirs.status.code(), Some(0), "{}", text(&theirs));
    let claims: serde_json::Value =
        serde_json::from_slice(&theirs.stdout).unwrap_or_else(|e| panic!("{e}: {}", text(&theirs)));
    assert_eq!(claims["room"], "other");
    // The room is required: without one the snippet refuses to run rather than accept a
    // token for any room.
    let unset = run_as(None, &f.good).unwrap();
    assert_eq!(unset.status.code(), Some(2), "no ROOM: {}", text(&unset));
    assert!(unset.stdout.is_empty(), "no ROOM: {}", text(&unset));
}

#[test]
fn node_origin_snippet_verifies_the_admission_header() {
    check_origin("node", "verify.mjs");
}

#[test]
fn python_origin_snippet_verifies_the_admission_header() {
    // The snippet needs the `cryptography` package; say so loudly rather than pass.
    if let Some(out) = run_snippet("python3", &["-c", "import cryptography"], &[]) {
        assert!(
            out.status.success(),
            "python3 is here but `cryptography` is not: python3 -m pip install cryptography"
        );
        check_origin("python3", "verify.py");
    }
}

// ---------------------------------------------------------------------------------------
// The admission header end to end: a real origin that trusts only what the public key at
// /__anteroom/admission-key verifies, and ends sessions with X-Anteroom-End-Session.

use crate::common;

use std::sync::{Arc, Mutex};
use std::time::Duration;

use anteroom::fairness::admission_token::AdmissionPublicKey;
use common::AsVisitor;
use http::{Request as HttpRequest, Response as HttpResponse};
use hyper::body::Incoming;
use hyper_util::rt::{TokioExecutor, TokioIo};

/// An origin that verifies `X-Anteroom-Admission` with the public key it is given (and
/// nothing else): 200 `ok <room> <ref>` when genuine, 403 `unverified: …` otherwise.
/// `/logout` answers with `X-Anteroom-End-Session: 1`.
async fn verifying_origin(key: Arc<Mutex<Option<AdmissionPublicKey>>>) -> std::net::SocketAddr {
    let listener = tokio::net::TcpListener::bind("127.0.0.1:0").await.unwrap();
    let addr = listener.local_addr().unwrap();
    tokio::spawn(async move {
        while let Ok((stream, _)) = listener.accept().await {
            let key = key.clone();
            tokio::spawn(async move {
                let service = hyper::service::service_fn(move |req: HttpRequest<Incoming>| {
                    let key = key.lock().unwrap().clone();
                    async move {
                        let now = std::time::SystemTime::now()
                            .duration_since(std::time::UNIX_EPOCH)
                            .unwrap()
                            .as_secs();
                        let token = req
                            .headers()
                            .get("x-anteroom-admission")
                            .and_then(|v| v.to_str().ok())
                            .unwrap_or("");
                        let verdict = match key {
                            None => Err("no key".to_owned()),
                            Some(k) => k.verify(token, now).map_err(|e| e.to_string()),
                        };
                        let mut b = HttpResponse::builder();
                        if req.uri().path() == "/logout" {
                            b = b.header("x-anteroom-end-session", "1");
                        }
                        let r = match verdict {
                            Ok(c) => b.status(200).body(anteroom::http::body::full(format!(
                                "ok {} {}",
                                c.room, c.visitor_ref
                            ))),
                            Err(e) => b
                                .status(403)
                                .body(anteroom::http::body::full(format!("unverified: {e}"))),
                        };
                        Ok::<_, std::convert::Infallible>(r.unwrap())
                    }
                });
                let _ = hyper_util::server::conn::auto::Builder::new(TokioExecutor::new())
                    .serve_connection(TokioIo::new(stream), service)
                    .await;
            });
        }
    });
    addr
}

fn config_with_key(
    origin: &str,
    dir: &std::path::Path,
    key: &str,
    room: &str,
) -> anteroom::config::Config {
    let yaml = format!(
        "listen: \"127.0.0.1:0\"\nadmit_interval: 100ms\ncookie_secret: \"{}\"\nadmin_token: \"{}\"\nadmission_key: \"{key}\"\ndata_dir: \"{}\"\nrooms:\n  main:\n    origin: {origin}\n{room}\n",
        common::COOKIE_SECRET,
        common::ADMIN_TOKEN,
        dir.display()
    );
    anteroom::config::from_yaml_str(&yaml, "test.yaml").unwrap()
}

#[tokio::test]
async fn origin_verifies_admission_with_the_public_key_and_ends_sessions() {
    let key = AdmissionKey::generate().unwrap();
    let origin_key = Arc::new(Mutex::new(None));
    let origin = verifying_origin(origin_key.clone()).await;
    let dir = tempfile::tempdir().unwrap();
    let config = config_with_key(
        &format!("http://{origin}"),
        dir.path(),
        &key.to_config_text(),
        "    rate: 100\n    max_active: 1",
    );
    let ar = common::start(&config).await;
    let base = format!("http://{}", ar.addr);
    let client = common::client();

    // The origin learns the public key from the public document, and only that.
    let doc: serde_json::Value = client
        .get(format!("{base}/__anteroom/admission-key"))
        .send()
        .await
        .unwrap()
        .json()
        .await
        .unwrap();
    assert_eq!(doc["alg"], "Ed25519");
    assert_eq!(doc["kid"], key.public().kid());
    assert!(doc.get("private_key").is_none() && !doc.to_string().contains(&*key.to_config_text()));
    let public = AdmissionPublicKey::parse(doc["public_key_pem"].as_str().unwrap()).unwrap();
    *origin_key.lock().unwrap() = Some(public.clone());

    // A request sent straight to the origin is told apart (no header, or a forged one).
    let direct = client
        .get(format!("http://{origin}/"))
        .send()
        .await
        .unwrap();
    assert_eq!(direct.status(), 403);
    let forged = client
        .get(format!("http://{origin}/"))
        .header("x-anteroom-admission", "v1.e30.AAAA")
        .send()
        .await
        .unwrap();
    assert_eq!(forged.status(), 403);

    // Visitor A is admitted; the origin verifies every request, even one where A tried to
    // send a header of their own (it is replaced).
    let a = client.get(format!("{base}/")).send().await.unwrap();
    assert_eq!(a.status(), 200, "{:?}", a.headers());
    let a_cookie = common::visitor_cookie(&a).unwrap();
    let body = a.text().await.unwrap();
    assert!(body.starts_with("ok main "), "{body}");
    let a_ref = body.rsplit(' ').next().unwrap().to_owned();
    assert_eq!(
        a_ref,
        common::reference_of(&a_cookie),
        "the token's ref is the reference the visitor's page shows and the access log writes"
    );
    let again = client
        .get(format!("{base}/page"))
        .visitor(&a_cookie)
        .header("x-anteroom-admission", "v1.forged.sig")
        .send()
        .await
        .unwrap();
    assert_eq!(again.status(), 200);
    assert_eq!(again.text().await.unwrap(), format!("ok main {a_ref}"));

    // Visitor B waits behind A's slot (max_active 1) for several passes.
    let b = client
        .get(format!("{base}/"))
        .header("accept", "application/json")
        .send()
        .await
        .unwrap();
    let b_cookie = common::visitor_cookie(&b).unwrap();
    assert_eq!(common::status_header(&b).as_deref(), Some("waiting"));
    tokio::time::sleep(Duration::from_millis(400)).await;
    let b = client
        .get(format!("{base}/"))
        .visitor(&b_cookie)
        .header("accept", "application/json")
        .send()
        .await
        .unwrap();
    assert_eq!(common::status_header(&b).as_deref(), Some("waiting"));

    // The origin ends A's session; the visitor never sees the header.
    let out = client
        .get(format!("{base}/logout"))
        .visitor(&a_cookie)
        .send()
        .await
        .unwrap();
    assert_eq!(out.status(), 200);
    assert!(out.headers().get("x-anteroom-end-session").is_none());

    // B gets the freed slot on a following pass (100 ms each), with a verified header.
    let deadline = std::time::Instant::now() + Duration::from_secs(5);
    loop {
        let b = client
            .get(format!("{base}/"))
            .visitor(&b_cookie)
            .header("accept", "application/json")
            .send()
            .await
            .unwrap();
        if b.status() == 200 && common::status_header(&b).is_none() {
            let body = b.text().await.unwrap();
            assert!(body.starts_with("ok main "), "{body}");
            assert_ne!(body, format!("ok main {a_ref}"));
            break;
        }
        assert!(std::time::Instant::now() < deadline, "B was never admitted");
        tokio::time::sleep(Duration::from_millis(100)).await;
    }
    // A's session is gone: coming back, A is a newcomer behind B's slot.
    let a = client
        .get(format!("{base}/"))
        .visitor(&a_cookie)
        .header("accept", "application/json")
        .send()
        .await
        .unwrap();
    assert_eq!(common::status_header(&a).as_deref(), Some("waiting"));
    ar.shutdown().await.unwrap();
}

#[tokio::test]
async fn no_admission_key_means_no_header_and_a_404_document() {
    let (origin, _dir, ar) = common::front("").await;
    let client = common::client();
    let base = format!("http://{}", ar.addr);
    let r = client
        .get(format!("{base}/__anteroom/admission-key"))
        .send()
        .await
        .unwrap();
    assert_eq!(r.status(), 404);
    // A visitor's own header never reaches the origin, key or not.
    let r = client
        .get(format!("{base}/"))
        .header("x-anteroom-admission", "v1.forged.sig")
        .send()
        .await
        .unwrap();
    let seen: serde_json::Value = r.json().await.unwrap();
    assert!(
        seen["headers"].get("x-anteroom-admission").is_none(),
        "{seen}"
    );
    assert!(origin.hits() >= 1);
    ar.shutdown().await.unwrap();
}

// Traffic classes and the admission header: an admitted visitor's asset is
// one of their proxied requests and carries a verified token; a bypass path is nobody's,
// so it carries none (and a forged one is still removed).
#[tokio::test]
async fn an_admitted_visitors_asset_carries_the_admission_header_and_a_bypass_does_not() {
    let key = AdmissionKey::generate().unwrap();
    let origin_key = Arc::new(Mutex::new(Some(key.public().clone())));
    let origin = verifying_origin(origin_key).await;
    let dir = tempfile::tempdir().unwrap();
    let config = config_with_key(
        &format!("http://{origin}"),
        dir.path(),
        &key.to_config_text(),
        "    rate: 100\n    max_active: 1\n    asset_paths: [\"*.css\"]\n    bypass_paths: [\"/webhooks/**\"]",
    );
    let ar = common::start(&config).await;
    let base = format!("http://{}", ar.addr);
    let client = common::client();

    let a = client.get(format!("{base}/")).send().await.unwrap();
    let a_cookie = common::visitor_cookie(&a).unwrap();
    let page = a.text().await.unwrap();
    assert!(page.starts_with("ok main "), "{page}");
    let css = client
        .get(format!("{base}/static/app.css"))
        .visitor(&a_cookie)
        .send()
        .await
        .unwrap();
    assert_eq!(css.status(), 200);
    assert_eq!(
        css.text().await.unwrap(),
        page,
        "the asset carries A's token"
    );

    let hook = client
        .post(format!("{base}/webhooks/pay"))
        .header("x-anteroom-admission", "v1.forged.sig")
        .body("{}")
        .send()
        .await
        .unwrap();
    assert_eq!(
        hook.status(),
        403,
        "no token on a bypass, and no forged one"
    );
    assert!(common::visitor_cookie(&hook).is_none());
    ar.shutdown().await.unwrap();
}
