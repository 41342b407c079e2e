//! The OpenAPI document served at /v1/openapi.json matches the router: every documented
//! operation reaches a handler, and every handler is documented.

use std::collections::BTreeSet;

use serde_json::Value;

use crate::helpers::{test_config, SimProcess, TestApp};

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn the_served_document_matches_the_router() {
    let sim = SimProcess::start();
    let app = TestApp::spawn(&test_config(Some(&sim.url))).await;
    let (status, doc) = app.get("/v1/openapi.json").await;
    assert_eq!(status, 200);
    assert!(doc["openapi"].as_str().unwrap().starts_with("3."));
    let mut documented = BTreeSet::new();
    for (path, item) in doc["paths"].as_object().unwrap() {
        for method in item.as_object().unwrap().keys() {
            documented.insert((method.to_uppercase(), path.clone()));
        }
    }
    let expected: BTreeSet<(String, String)> = [
        ("POST", "/v1/requests"),
        ("POST", "/v1/requests/batch"),
        ("GET", "/v1/requests/{id}"),
        ("DELETE", "/v1/requests/{id}"),
        ("POST", "/v1/requests/{id}/release"),
        ("POST", "/v1/requests/{id}/resend"),
        ("GET", "/v1/mss"),
        ("GET", "/v1/groups"),
        ("GET", "/v1/report"),
        ("GET", "/metrics"),
        ("GET", "/report"),
        ("GET", "/healthz"),
        ("GET", "/readyz"),
        ("POST", "/v1/admin/reload"),
        ("POST", "/v1/admin/cancel-group"),
    ]
    .iter()
    .map(|(m, p)| (m.to_string(), p.to_string()))
    .collect();
    assert_eq!(documented, expected);
    // Each documented operation is served by a handler, not the fallback.
    for (method, path) in &documented {
        let url = format!("{}{}", app.base, path.replace("{id}", "1"));
        let req = match method.as_str() {
            "GET" => app.client.get(url),
            "POST" => app
                .client
                .post(url)
                .header("content-type", "application/json")
                .body("{}"),
            _ => app.client.delete(url),
        };
        let resp = req.send().await.unwrap();
        let body: Value = resp.json().await.unwrap_or(Value::Null);
        assert_ne!(body["error"], "no such endpoint", "{method} {path}");
    }
    // A request id is documented as the handlers read it: at least 1, and 0 is refused
    // naming `id`.
    for (method, path) in documented.iter().filter(|(_, p)| p.contains("{id}")) {
        let op = &doc["paths"][path][method.to_lowercase()];
        let id = op["parameters"]
            .as_array()
            .unwrap()
            .iter()
            .find(|p| p["name"] == "id");
        assert_eq!(id.unwrap()["schema"]["minimum"], 1, "{method} {path}");
    }
    let (status, body) = app.get("/v1/requests/0").await;
    assert_eq!(
        (status, body["field"].as_str()),
        (400, Some("id")),
        "{body}"
    );
    // Where a queued request's position comes from is documented with its values.
    let schemas = &doc["components"]["schemas"];
    let basis = &schemas["RequestBody"]["properties"]["position_basis"];
    assert!(
        basis
            .to_string()
            .contains("#/components/schemas/PositionBasis"),
        "{basis}"
    );
    assert_eq!(
        schemas["PositionBasis"]["enum"],
        serde_json::json!(["ranking", "estimate", "not_ranked"]),
        "{}",
        schemas["PositionBasis"]
    );
    // And an undocumented path is the fallback.
    let (status, body) = app.get("/v1/nothing").await;
    assert_eq!(
        (status, body["error"].as_str()),
        (404, Some("no such endpoint"))
    );
    app.stop().await;
}
