//! The OpenAPI document against the routes and the server's answers.

use super::*;

#[tokio::test]
async fn the_openapi_document_matches_the_routes_and_the_server() {
    let h = Harness::start("").await;
    // Served without a token, and the same as the built-in document.
    let response = h
        .http
        .get(h.url("/__anteroom/admin/api/openapi.json"))
        .send()
        .await
        .unwrap();
    assert_eq!(response.status(), 200);
    let doc: Value = response.json().await.unwrap();
    assert_eq!(
        doc,
        serde_json::from_str::<Value>(admin::openapi_json()).unwrap()
    );
    assert!(doc["openapi"].as_str().unwrap().starts_with("3."));

    // Every documented path+method is routed, and every route is documented.
    let mut documented = BTreeSet::new();
    for (path, item) in doc["paths"].as_object().unwrap() {
        for (method, op) in item.as_object().unwrap() {
            if method == "parameters" {
                continue;
            }
            let needs_token = op.get("security") != Some(&json!([]));
            documented.insert((method.to_uppercase(), path.clone(), needs_token));
        }
    }
    let routed: BTreeSet<_> = admin::routes()
        .iter()
        .map(|r| (r.method.to_string(), r.path.to_owned(), r.auth))
        .collect();
    assert_eq!(documented, routed);

    // The real server answers with documented status codes.
    let documented_status = |method: &str, path: &str, status: u16| -> bool {
        let responses = &doc["paths"][path][method.to_lowercase()]["responses"];
        responses.get(status.to_string()).is_some()
    };
    let mut checked = 0;
    for route in admin::routes() {
        let method = reqwest::Method::from_bytes(route.method.as_str().as_bytes()).unwrap();
        // A route of one visitor needs one waiting (the room paused, so nobody is let in).
        let waiting_ref = if route.path.contains("{ref}") {
            assert_eq!(h.post("/rooms/main/pause").await.status(), 200);
            let (body, _) = h.visit(None).await;
            assert_eq!(body["status"], "waiting");
            let line = h.get("/rooms/main/queue").await;
            line["entries"][0]["ref"].as_str().unwrap().to_owned()
        } else {
            String::new()
        };
        // A route of one event needs one: the POST route made it just before.
        let event_id = if route.path.contains("{id}") {
            let list = h.get("/rooms/main/events").await;
            list["events"][0]["id"].as_str().unwrap().to_owned()
        } else {
            String::new()
        };
        let path_of = |room: &str| {
            route
                .path
                .replace("{room}", room)
                .replace("{ref}", &waiting_ref)
                .replace("{id}", &event_id)
                // `{target}`: the ban the POST route made just before (routes are in order).
                .replace("{target}", "192.0.2.1")
        };
        let body = match route.op {
            admin::Op::RoomConfig => r#"{"rate": 20}"#,
            admin::Op::Ban => r#"{"target": "192.0.2.1", "duration_secs": 60, "reason": "t"}"#,
            admin::Op::CreateEvent | admin::Op::ReplaceEvent => {
                r#"{"queue_opens_at": "2099-01-01T10:00:00Z", "admits_at": "2099-01-01T11:00:00Z"}"#
            }
            _ => "",
        };
        let send = |room: &str, token: Option<&str>, body: String| {
            let mut request = h
                .http
                .request(method.clone(), h.url(&path_of(room)))
                .body(body);
            if let Some(token) = token {
                request = request.bearer_auth(token);
            }
            request.send()
        };
        let ok = match route.op {
            admin::Op::Ban | admin::Op::CreateEvent => 201,
            admin::Op::DeleteEvent => 204,
            _ => 200,
        };
        let mut expect = vec![(
            send("main", Some(ADMIN_TOKEN), body.into()).await.unwrap(),
            ok,
        )];
        if route.auth {
            expect.push((send("main", None, body.into()).await.unwrap(), 401));
        }
        if route.path.contains("{room}") {
            expect.push((
                send("nope", Some(ADMIN_TOKEN), body.into()).await.unwrap(),
                404,
            ));
        }
        if route.op == admin::Op::RoomConfig {
            expect.push((
                send("main", Some(ADMIN_TOKEN), r#"{"rate": -1}"#.into())
                    .await
                    .unwrap(),
                400,
            ));
            expect.push((
                send("main", Some(ADMIN_TOKEN), "x".repeat(65 * 1024 + 1))
                    .await
                    .unwrap(),
                413,
            ));
        }
        if route.op == admin::Op::Queue {
            for bad in ["?limit=0", "?limit=1001", "?ref=x", "?sort=1"] {
                let url = format!("{}{bad}", h.url(&path_of("main")));
                let response = h
                    .http
                    .get(url)
                    .bearer_auth(ADMIN_TOKEN)
                    .send()
                    .await
                    .unwrap();
                expect.push((response, 422));
            }
        }
        if route.op == admin::Op::Front {
            let stranger = anteroom::queue::VisitorId::random().reference().to_string();
            let unknown = route
                .path
                .replace("{room}", "main")
                .replace("{ref}", &stranger);
            expect.push((h.post(&unknown.replace(API, "")).await, 404));
            let malformed = route.path.replace("{room}", "main").replace("{ref}", "x");
            expect.push((h.post(&malformed.replace(API, "")).await, 422));
        }
        let wrong_method = h
            .http
            .request(reqwest::Method::PATCH, h.url(&path_of("main")))
            .bearer_auth(ADMIN_TOKEN)
            .send()
            .await
            .unwrap();
        expect.push((wrong_method, 405));
        for (response, want) in expect {
            let got = response.status().as_u16();
            assert_eq!(got, want, "{} {}", route.method, route.path);
            assert!(
                documented_status(route.method.as_str(), route.path, got),
                "{} {} answered {got}, which the document does not list",
                route.method,
                route.path
            );
            checked += 1;
        }
    }
    assert!(checked >= 30, "{checked}");
    h.ar.shutdown().await.unwrap();
}
