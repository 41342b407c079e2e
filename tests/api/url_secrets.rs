//! An MSS URL with a password and a token in its query string (`mss.url =
//! "http://user:PASSWORD@host/?token=TOKEN"`) through the real `serve` and `check-config`: the
//! broker's calls reach the simulator at the right paths (each with the query), and neither
//! secret is in the log (at debug), in `/readyz` while the MSS is down, in `check-config`'s
//! output, in a reload's refusal or in a configuration error.

use std::process::Command;
use std::time::{Duration, Instant};

use serde_json::Value;

use crate::helpers::{request, test_config, wait_final, SimProcess, BIN};
use crate::ready::serve_in;

/// Distinctive, so that finding them anywhere is a leak (not a request id's hex).
const PASSWORD: &str = "pw-s3cret";
const TOKEN: &str = "tok-qu3ry";

fn secret_url(sim: &SimProcess) -> String {
    let base = sim
        .url
        .replacen("http://", &format!("http://user:{PASSWORD}@"), 1);
    format!("{base}/?token={TOKEN}")
}

fn assert_hidden(what: &str, text: &str) {
    assert!(
        !text.contains(PASSWORD) && !text.contains(TOKEN),
        "{what} shows a secret of the MSS URL:\n{text}"
    );
}

/// `mssbroker check-config FILE`: (exit code, stdout and stderr).
fn check_config(file: &std::path::Path) -> (Option<i32>, String) {
    let out = Command::new(BIN)
        .arg("check-config")
        .arg(file)
        .output()
        .unwrap();
    let text =
        String::from_utf8_lossy(&out.stdout).into_owned() + &String::from_utf8_lossy(&out.stderr);
    (out.status.code(), text)
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn the_mss_urls_password_and_query_are_never_shown_and_its_calls_arrive() {
    let sim = SimProcess::start();
    let dir = tempfile::tempdir().unwrap();
    let config = test_config(Some(&secret_url(&sim)));

    // check-config shows where the broker talks to, without the secrets.
    let file = dir.path().join("check.toml");
    std::fs::write(&file, &config).unwrap();
    let (code, out) = check_config(&file);
    assert_eq!(code, Some(0), "{out}");
    assert_hidden("check-config", &out);
    assert!(out.contains("user:***@127.0.0.1"), "{out}");
    // A URL refused names its key, without the secrets.
    let bad = config.replacen("url = \"http://", "url = \"ftp://", 1);
    std::fs::write(&file, bad).unwrap();
    let (code, out) = check_config(&file);
    assert_eq!(code, Some(1), "{out}");
    assert!(out.contains("mss.url"), "{out}");
    assert_hidden("check-config's refusal", &out);

    let (broker, log) = serve_in(dir.path(), &config, &[("RUST_LOG", "debug")]);
    let client = reqwest::Client::new();
    // The calls reach the simulator's paths: the request is submitted, runs and ends.
    let resp = client
        .post(format!("{}/v1/requests", broker.base))
        .json(&request("u-1", "analysis", "higgs", 1_000_000))
        .send()
        .await
        .unwrap();
    assert_eq!(resp.status().as_u16(), 202);
    let id = resp.json::<Value>().await.unwrap()["id"].as_i64().unwrap();
    let done = wait_final(&client, &broker.base, &[id], Duration::from_secs(30)).await;
    assert_eq!(done[0]["state"], "done", "{}", done[0]);

    // A reload that would change the URL is refused, quoting both URLs without their secrets.
    let changed = config.replacen(TOKEN, "tok-other", 1);
    std::fs::write(dir.path().join("broker.toml"), changed).unwrap();
    let resp = client
        .post(format!("{}/v1/admin/reload", broker.base))
        .send()
        .await
        .unwrap();
    let status = resp.status().as_u16();
    let refusal = resp.text().await.unwrap();
    assert!((400..500).contains(&status), "{status} {refusal}");
    assert!(refusal.contains("mss.url"), "{refusal}");
    assert_hidden("the reload's refusal", &refusal);
    assert!(!refusal.contains("tok-other"), "{refusal}");

    // The MSS gone: /readyz says why, naming the call, without the secrets.
    drop(sim);
    let deadline = Instant::now() + Duration::from_secs(20);
    let body = loop {
        let resp = client
            .get(format!("{}/readyz", broker.base))
            .send()
            .await
            .unwrap();
        let status = resp.status().as_u16();
        let body = resp.text().await.unwrap();
        if status == 503 && body.contains("\"mss\"") && body.contains("url") {
            break body;
        }
        assert!(Instant::now() < deadline, "last answer {status} {body}");
        tokio::time::sleep(Duration::from_millis(50)).await;
    };
    assert_hidden("/readyz", &body);
    assert!(
        body.contains("?***"),
        "the call's query is shown hidden: {body}"
    );

    let text = std::fs::read_to_string(&log).unwrap();
    assert!(text.contains("user:***@"), "the log names the MSS: {text}");
    assert_hidden("the log", &text);
}
