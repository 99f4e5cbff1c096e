//! The admin listener apart from the public one, and `admin_allow`.

use super::*;

const METRICS_TOKEN: &str = "prometheus-reads-only-0123";

/// An anteroom with its own admin listener and a metrics token, plus `top` YAML.
async fn with_admin_listener(top: &str) -> (Origin, tempfile::TempDir, Running) {
    let origin = Origin::start().await;
    let dir = tempfile::tempdir().unwrap();
    let yaml = format!(
        "listen: \"127.0.0.1:0\"\nadmin_listen: \"127.0.0.1:0\"\nmetrics_token: \"{METRICS_TOKEN}\"\n{top}\nadmit_interval: 100ms\ncookie_secret: \"{COOKIE_SECRET}\"\nadmin_token: \"{ADMIN_TOKEN}\"\ndata_dir: \"{}\"\nrooms:\n  main:\n    origin: {}\n",
        dir.path().display(),
        origin.url()
    );
    let cfg = anteroom::config::from_yaml_str(&yaml, "test.yaml").unwrap();
    let ar = start(&cfg).await;
    (origin, dir, ar)
}

async fn status_of(request: reqwest::RequestBuilder) -> u16 {
    request.send().await.unwrap().status().as_u16()
}

#[tokio::test]
async fn the_admin_listener_serves_the_admin_and_the_public_one_answers_404() {
    let (_origin, _dir, ar) = with_admin_listener("").await;
    let admin = ar.admin_addr.expect("an admin listener");
    assert_ne!(admin, ar.addr);
    let http = client();
    let public = |p: &str| format!("http://{}{p}", ar.addr);
    let private = |p: &str| format!("http://{admin}{p}");

    // Public: nothing of the admin, with or without the token; the site still works.
    for path in [
        "/__anteroom/admin",
        "/__anteroom/admin/",
        "/__anteroom/admin/api/status",
    ] {
        assert_eq!(
            status_of(http.get(public(path)).bearer_auth(ADMIN_TOKEN)).await,
            404,
            "{path}"
        );
    }
    let pause = public("/__anteroom/admin/api/rooms/main/pause");
    assert_eq!(
        status_of(http.post(&pause).bearer_auth(ADMIN_TOKEN)).await,
        404
    );
    assert_eq!(status_of(http.get(public("/"))).await, 200);

    // Admin listener: the control room, the API, the metrics at both paths; never the site.
    assert_eq!(
        status_of(http.get(private("/__anteroom/admin/"))).await,
        200
    );
    let status = http
        .get(private("/__anteroom/admin/api/status"))
        .bearer_auth(ADMIN_TOKEN)
        .send()
        .await
        .unwrap();
    assert_eq!(status.status(), 200);
    assert_eq!(status.json::<Value>().await.unwrap()["store"]["up"], true);
    assert_eq!(status_of(http.get(private("/"))).await, 404);
    assert_eq!(
        status_of(http.get(private("/__anteroom/healthz"))).await,
        200
    );
    assert_eq!(
        status_of(http.get(private("/__anteroom/readyz"))).await,
        200
    );
    for path in ["/metrics", "/__anteroom/admin/api/metrics"] {
        assert_eq!(
            status_of(http.get(private(path))).await,
            401,
            "{path} needs a token"
        );
        for token in [METRICS_TOKEN, ADMIN_TOKEN] {
            let response = http
                .get(private(path))
                .bearer_auth(token)
                .send()
                .await
                .unwrap();
            assert_eq!(response.status(), 200, "{path}");
            let (_, samples) = parse_prometheus(&response.text().await.unwrap());
            assert_eq!(
                sample(&samples, "anteroom_waiting", &[("room", "main")]),
                Some(0.0)
            );
        }
    }

    // The metrics token reads the metrics and nothing else: 403, and nothing changes.
    let admin_pause = private("/__anteroom/admin/api/rooms/main/pause");
    let response = http
        .post(&admin_pause)
        .bearer_auth(METRICS_TOKEN)
        .send()
        .await
        .unwrap();
    assert_eq!(response.status(), 403);
    assert_eq!(problem(response).await["title"], "Forbidden");
    for path in [
        "/__anteroom/admin/api/status",
        "/__anteroom/admin/api/rooms",
    ] {
        assert_eq!(
            status_of(http.get(private(path)).bearer_auth(METRICS_TOKEN)).await,
            403,
            "{path}"
        );
    }
    let flush = private("/__anteroom/admin/api/rooms/main/flush");
    assert_eq!(
        status_of(http.post(&flush).bearer_auth(METRICS_TOKEN)).await,
        403
    );
    let rooms: Value = http
        .get(private("/__anteroom/admin/api/rooms"))
        .bearer_auth(ADMIN_TOKEN)
        .send()
        .await
        .unwrap()
        .json()
        .await
        .unwrap();
    assert_eq!(
        rooms["rooms"][0]["paused"], false,
        "the metrics token paused nothing"
    );
    // The admin token still can.
    assert_eq!(
        status_of(http.post(&admin_pause).bearer_auth(ADMIN_TOKEN)).await,
        200
    );
    ar.shutdown().await.unwrap();
}

#[tokio::test]
async fn admin_allow_refuses_other_clients_with_403_and_believes_only_trusted_proxies() {
    // Loopback is not allowed; 10.9.0.0/16 is, but only when a trusted proxy says so.
    let (_origin, _dir, ar) = with_admin_listener("admin_allow: [10.9.0.0/16]").await;
    let admin = ar.admin_addr.unwrap();
    let http = client();
    let status = format!("http://{admin}/__anteroom/admin/api/status");
    assert_eq!(
        status_of(http.get(&status).bearer_auth(ADMIN_TOKEN)).await,
        403
    );
    assert_eq!(
        status_of(http.get(format!("http://{admin}/__anteroom/admin/"))).await,
        403
    );
    assert_eq!(
        status_of(
            http.get(format!("http://{admin}/metrics"))
                .bearer_auth(METRICS_TOKEN)
        )
        .await,
        403
    );
    // An untrusted peer cannot claim an allowed address.
    let spoofed = http
        .get(&status)
        .bearer_auth(ADMIN_TOKEN)
        .header("x-forwarded-for", "10.9.1.1");
    assert_eq!(status_of(spoofed).await, 403);
    ar.shutdown().await.unwrap();

    // Behind a trusted proxy (loopback here), the forwarded client is what is checked.
    let (_origin, _dir, ar) =
        with_admin_listener("trusted_proxies: [127.0.0.1]\nadmin_allow: [10.9.0.0/16]").await;
    let admin = ar.admin_addr.unwrap();
    let status = format!("http://{admin}/__anteroom/admin/api/status");
    let forwarded = |ip: &str| {
        http.get(&status)
            .bearer_auth(ADMIN_TOKEN)
            .header("x-forwarded-for", ip.to_string())
    };
    assert_eq!(status_of(forwarded("10.9.1.1")).await, 200);
    assert_eq!(status_of(forwarded("192.0.2.7")).await, 403);
    ar.shutdown().await.unwrap();
}

#[tokio::test]
async fn admin_allow_applies_on_the_public_listener_too() {
    let origin = Origin::start().await;
    let dir = tempfile::tempdir().unwrap();
    let mut cfg = config(&origin.url(), dir.path(), "");
    cfg.admin_allow = vec!["10.9.0.0/16".parse().unwrap()];
    let ar = start(&cfg).await;
    let http = client();
    let url = |p: &str| format!("http://{}{p}", ar.addr);
    assert_eq!(
        status_of(
            http.get(url("/__anteroom/admin/api/status"))
                .bearer_auth(ADMIN_TOKEN)
        )
        .await,
        403
    );
    assert_eq!(status_of(http.get(url("/__anteroom/admin/"))).await, 403);
    assert_eq!(
        status_of(http.get(url("/"))).await,
        200,
        "the site is not the admin"
    );
    ar.shutdown().await.unwrap();

    cfg.admin_allow = vec!["127.0.0.0/8".parse().unwrap()];
    let ar = start(&cfg).await;
    let url = |p: &str| format!("http://{}{p}", ar.addr);
    assert_eq!(
        status_of(
            http.get(url("/__anteroom/admin/api/status"))
                .bearer_auth(ADMIN_TOKEN)
        )
        .await,
        200
    );
    ar.shutdown().await.unwrap();
}
