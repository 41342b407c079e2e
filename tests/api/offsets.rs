//! A byte offset from the station to the tape (issue 38): `offset_bytes` through the real
//! service to the real simulator process, which places the file by it (seen in the simulator's
//! own event times: the locate it costs), beside a file sequence number that is the same for
//! both files; bad offsets are refused naming the field, changing nothing; and `mss-sim
//! --config` runs the configuration's `[mss.simulator]`, its flags over it.

use std::time::Duration;

use mss_adapters::protocol::{EventKind, EventsResponse};
use mss_adapters::sim::library::DriveKind;
use serde_json::{json, Value};

use crate::helpers::{mss_key, open_db, request, test_config, SimProcess, TestApp};

/// Virtual seconds per real second: an event time (whole milliseconds) is good to 0.1 s.
const TIME_SCALE: f64 = 100.0;

/// 1 GB: two seconds of streaming at the test's 500 MB/s.
const SIZE: u64 = 1_000_000_000;

/// A configuration whose `[mss.simulator]` is the Enstore model on LTO-9 drives with no mover
/// poll (a drive starts a transfer when it arrives), at [`TIME_SCALE`]: written to `dir`.
fn simulator_config(dir: &std::path::Path) -> std::path::PathBuf {
    let text = test_config(None)
        .replace("time_scale = 1000.0", &format!("time_scale = {TIME_SCALE}"))
        + "model = \"enstore\"\ndrive = \"lto9\"\nmover_poll_seconds = 0.0\n";
    let path = dir.join("sim.toml");
    std::fs::write(&path, text).unwrap();
    path
}

/// A read of 1 GB on `volume` at file sequence number 1 starting `offset` bytes in.
fn placed(crid: &str, volume: &str, offset: u64) -> Value {
    let mut r = request(crid, "mc", "top", SIZE);
    r["volume"] = json!(volume);
    r["position"] = json!(1);
    r["offset_bytes"] = json!(offset);
    r
}

/// Virtual seconds from the simulator's `started` to its `done` event for `key`.
fn took(events: &EventsResponse, key: &str) -> f64 {
    let at = |started: bool| {
        events
            .events
            .iter()
            .find(|e| {
                e.key == key
                    && match e.kind {
                        EventKind::Started => started,
                        EventKind::Done { .. } => !started,
                        _ => false,
                    }
            })
            .unwrap_or_else(|| panic!("no event of {key}: {:?}", events.events))
            .at_ms
    };
    (at(false) - at(true)) as f64 / 1e3 * TIME_SCALE
}

/// Far from the start of tape: nine tenths along the first wrap of an LTO-9 cartridge.
fn far_offset() -> u64 {
    let (_, tape) = DriveKind::Lto9.profile();
    tape.capacity_bytes / tape.wraps * 9 / 10
}

/// One read at offset 0 (where the head is after the mount) and one at [`far_offset`], on two
/// volumes (two drives, each mounting its own), through `serve` to `sim`; the two requests'
/// bodies as `GET` shows them and each transfer's time at the simulator, in seconds.
async fn near_and_far(sim: &SimProcess) -> ([Value; 2], [f64; 2]) {
    let app = TestApp::spawn(&test_config(Some(&sim.url))).await;
    let (status, near) = app.post("/v1/requests", &placed("near", "VA", 0)).await;
    assert_eq!(status, 202, "{near}");
    let batch = json!({"requests": [placed("far", "VB", far_offset())]});
    let (status, far) = app.post("/v1/requests/batch", &batch).await;
    assert_eq!(status, 202, "{far}");
    let ids = [
        near["id"].as_i64().unwrap(),
        far["results"][0]["id"].as_i64().unwrap(),
    ];
    let done = app.wait_final(&ids, Duration::from_secs(60)).await;
    assert!(done.iter().all(|r| r["state"] == "done"), "{done:?}");
    let events: EventsResponse = reqwest::get(format!("{}/v1/events?after=0", sim.url))
        .await
        .unwrap()
        .json()
        .await
        .unwrap();
    let near_key = mss_key(&app, ids[0]).await;
    let far_key = mss_key(&app, ids[1]).await;
    let times = [took(&events, &near_key), took(&events, &far_key)];
    app.stop().await;
    ([done[0].clone(), done[1].clone()], times)
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn an_offset_is_shown_and_places_the_file_at_the_simulator() {
    let dir = tempfile::tempdir().unwrap();
    let sim = SimProcess::start_with_config(&simulator_config(dir.path()), &[]);
    let ([near, far], [near_s, far_s]) = near_and_far(&sim).await;
    // Shown as given, beside the sequence number, in the single and the batch request.
    assert_eq!(
        (near["position"].clone(), near["offset_bytes"].clone()),
        (json!(1), json!(0))
    );
    assert_eq!(
        (far["position"].clone(), far["offset_bytes"].clone()),
        (json!(1), json!(far_offset()))
    );
    // The same file number, the same size, a fresh mount each: the far one costs the model's
    // locate from the start of tape to its offset, and only the offset tells them apart.
    let (_, tape) = DriveKind::Lto9.profile();
    let locate = tape.locate_micros(0, far_offset()) as f64 / 1e6;
    assert!(locate > 10.0, "a locate along a wrap: {locate} s");
    let extra = far_s - near_s;
    assert!(
        (extra - locate).abs() <= 0.5,
        "the far file took {extra} s more, the model's locate is {locate} s ({near_s} s, {far_s} s)"
    );
}

/// `--model priority` over the configuration's `enstore`: a flag overrides its key, and the
/// priority model has no tape geometry, so the two files take the same time.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn mss_sim_flags_override_the_configurations_simulator() {
    let dir = tempfile::tempdir().unwrap();
    let config = simulator_config(dir.path());
    let sim = SimProcess::start_with_config(&config, &["--model", "priority"]);
    let (_, [near_s, far_s]) = near_and_far(&sim).await;
    assert!((far_s - near_s).abs() <= 0.5, "{near_s} s and {far_s} s");
    // `[mss.simulator] mount_seconds` (5) and `rate_mb_per_sec` (500) of the file, read.
    let expected = 5.0 + SIZE as f64 / 500e6;
    assert!(
        (near_s - expected).abs() <= 0.5,
        "{near_s} s, expected {expected} s"
    );
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn bad_offsets_are_refused_naming_the_field_and_change_nothing() {
    let sim = SimProcess::start();
    let app = TestApp::spawn(&test_config(Some(&sim.url))).await;
    let (_, groups_before) = app.get("/v1/groups").await;
    let mut write = placed("w", "VA", 0);
    write["direction"] = json!("write");
    let cases: [(Value, &str); 5] = [
        (json!(-1), "must be 0 or more"),
        (json!("12"), "must be an integer, got a string"),
        (json!(1.5), "must be a whole number of bytes"),
        (
            json!(1_000_000_000_000_001u64),
            "may be at most 1000000000000000",
        ),
        (json!(u64::MAX), "may be at most 1000000000000000"),
    ];
    for (value, says) in cases {
        let mut body = placed("bad", "VA", 0);
        body["offset_bytes"] = value.clone();
        let (status, answer) = app.post("/v1/requests", &body).await;
        assert_eq!(
            (status, answer["field"].as_str()),
            (422, Some("offset_bytes")),
            "{value}: {answer}"
        );
        let error = answer["error"].as_str().unwrap_or_default();
        assert!(error.contains(says), "{value}: {answer}");
        let batch = json!({"requests": [body]});
        let (status, answer) = app.post("/v1/requests/batch", &batch).await;
        assert_eq!(status, 422, "{value}: {answer}");
        assert_eq!(
            answer["results"][0]["field"], "requests[0].offset_bytes",
            "{answer}"
        );
    }
    let (status, answer) = app.post("/v1/requests", &write).await;
    assert_eq!(
        (status, answer["field"].as_str()),
        (422, Some("offset_bytes")),
        "{answer}"
    );
    assert!(
        answer["error"]
            .as_str()
            .unwrap_or_default()
            .contains("end of data"),
        "{answer}"
    );
    // Nothing recorded, nothing charged; then the largest offset taken is accepted.
    let count: i64 = open_db(&app.db)
        .query_row("SELECT COUNT(*) FROM requests", [], |r| r.get(0))
        .unwrap();
    assert_eq!(count, 0);
    let (_, groups_after) = app.get("/v1/groups").await;
    assert_eq!(
        groups_before["fair_share_usage"],
        groups_after["fair_share_usage"]
    );
    let (status, answer) = app
        .post("/v1/requests", &placed("edge", "VA", 1_000_000_000_000_000))
        .await;
    assert_eq!(status, 202, "{answer}");
    app.stop().await;
}

/// A configuration without `[mss.simulator]` gives `mss-sim --config` nothing to run: it
/// refuses to start, naming the table, and a bad flag over a good file is refused by name.
#[test]
fn mss_sim_refuses_a_configuration_without_a_simulator() {
    let dir = tempfile::tempdir().unwrap();
    let without = dir.path().join("no-sim.toml");
    std::fs::write(&without, test_config(Some("http://127.0.0.1:1"))).unwrap();
    let refused = |args: &[&str]| {
        let out = std::process::Command::new(crate::helpers::BIN)
            .arg("mss-sim")
            .args(args)
            .output()
            .unwrap();
        assert!(!out.status.success(), "{args:?} started");
        String::from_utf8_lossy(&out.stderr).to_string()
    };
    let said = refused(&["--config", without.to_str().unwrap()]);
    assert!(said.contains("[mss.simulator]"), "{said}");
    let with = simulator_config(dir.path());
    let said = refused(&["--config", with.to_str().unwrap(), "--order", "zigzag"]);
    assert!(said.contains("--order"), "{said}");
}
