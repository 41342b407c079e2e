//! Where a file lies when the station does not say (issue 38), through the real service in the
//! `volumes` mode and the real simulator process: requests without a volume are looked up in a
//! real layer-4 tree laid out as pnfs/Chimera presents it (`dir/.(use)(4)(name)`, eleven lines
//! as Enstore's `set_xreference` writes them), or by a real site script; those found go to the
//! MSS as one batch on their tape in tape order, and explain says where the volume came from; a
//! lookup that fails, is garbled or times out leaves the request without a volume, and it is
//! still transferred.

use std::path::Path;
use std::time::{Duration, Instant};

use mss_adapters::protocol::ReceivedResponse;
use serde_json::Value;

use crate::helpers::{key_id, received_all, request, test_config, SimProcess, TestApp};

/// Small: every transfer ends within the test.
const SIZE: u64 = 1_000_000;

/// Volumes eligible at 3 files (never by quiet or age within a test), `lookup` appended to
/// `[mss]`.
fn config(sim: &SimProcess, lookup: &str) -> String {
    format!(
        "{}\n[mss.volume_lookup]\n{lookup}\n\n[release]\nmode = \"volumes\"\n\n\
         [release.volumes]\nmin_volume_bytes = 1000000000000000\nmin_volume_files = 3\n\
         quiet_secs = 3600\nmax_age_secs = 7200\nbatch_max_bytes = 1000000000000000\n\
         batch_max_files = 100\nsticky_secs = 0\nmax_volumes = 4\n",
        test_config(Some(&sim.url))
    )
}

/// Layer 4 of a file on `volume` at tape file `n`: Enstore's eleven lines.
fn layer4(volume: &str, n: u64, name: &str) -> String {
    format!(
        "{volume}\n0000_000000000_{n:07}\n{SIZE}\ntest-family\n/pnfs/test/{name}\n\
         /pnfs/test/volmap/test-family/{volume}/0000_000000000_{n:07}\n\
         000088A8F1B1A3C04AB5AF2C1E5F4B6D3A21\n\nCDMS171234567800000\nmover3:/dev/rmt/tps0d0n\n\
         1234567\n"
    )
}

async fn submit(app: &TestApp, crid: &str) -> i64 {
    let (status, r) = app
        .post("/v1/requests", &request(crid, "analysis", "higgs", SIZE))
        .await;
    assert_eq!(status, 202, "{r}");
    r["id"].as_i64().unwrap()
}

/// `ids` reached the MSS in one call, in this order, on `volume` at `positions`.
fn one_batch(r: &ReceivedResponse, ids: &[i64], volume: &str, positions: &[u64]) {
    let at: Vec<usize> = (r.received.iter().enumerate())
        .filter(|(_, t)| ids.contains(&key_id(&t.key)))
        .map(|(i, _)| i)
        .collect();
    let got: Vec<i64> = at.iter().map(|&i| key_id(&r.received[i].key)).collect();
    assert_eq!(got, ids, "in tape order: {r:?}");
    let mut end = 0;
    let calls: Vec<usize> = (r.calls.iter())
        .map(|&n| {
            end += n;
            end
        })
        .collect();
    let call_of = |i: usize| calls.iter().position(|&e| i < e).unwrap();
    assert!(
        at.iter().all(|&i| call_of(i) == call_of(at[0])),
        "one call: {r:?}"
    );
    for (&i, &p) in at.iter().zip(positions) {
        let t = &r.received[i];
        assert_eq!(
            (t.volume.as_deref(), t.position),
            (Some(volume), Some(p)),
            "{t:?}"
        );
    }
}

async fn explain(app: &TestApp, id: i64) -> Value {
    let (status, body) = app.get(&format!("/v1/requests/{id}")).await;
    assert_eq!(status, 200, "{body}");
    body
}

fn assert_found(body: &Value, volume: &str, position: u64, method: &str) {
    assert_eq!(body["volume"], volume, "{body}");
    assert_eq!(body["position"], position, "{body}");
    assert_eq!(body["volume_source"], "lookup", "{body}");
    assert_eq!(body["volume_lookup"], method, "{body}");
}

/// A request whose lookup failed: no volume, said so, and transferred all the same.
fn assert_failed_and_done(body: &Value) {
    assert_eq!(body["state"], "done", "{body}");
    assert_eq!(body["volume"], Value::Null, "{body}");
    assert_eq!(body["volume_source"], "none", "{body}");
    assert_eq!(body["volume_lookup"], "failed", "{body}");
}

#[tokio::test]
async fn requests_without_a_volume_are_batched_on_the_tape_their_layer_4_names() {
    let sim = SimProcess::start_with(2, 1000.0);
    let ns = tempfile::tempdir().unwrap();
    for (name, n) in [("l0", 30), ("l1", 10), ("l2", 20)] {
        let layer = ns.path().join(format!(".(use)(4)({name})"));
        std::fs::write(layer, layer4("VL0001", n, name)).unwrap();
    }
    // Garbled: a disk location cookie (a file inside a package has no tape place of its own).
    let garbled = layer4("VL0001", 5, "g0").replace("0000_000000000_0000005", "/cache/pkg/g0");
    std::fs::write(ns.path().join(".(use)(4)(g0)"), garbled).unwrap();
    // `m0` has no layer 4 at all (not on tape yet).
    let lookup = format!(
        "method = \"enstore-layer4\"\nnamespace_mount = \"{}\"\npath_prefix = \"/pnfs/test\"\n\
         timeout_secs = 5\nwait_secs = 600",
        ns.path().display()
    );
    let app = TestApp::spawn(&config(&sim, &lookup)).await;
    let l: Vec<i64> = vec![submit(&app, "l0").await, submit(&app, "l1").await];
    let (g0, m0) = (submit(&app, "g0").await, submit(&app, "m0").await);
    let l2 = submit(&app, "l2").await;

    // Tape order: l1 (file 10), l2 (20), l0 (30), in one call on their tape.
    let r = received_all(&sim, &[l[0], l[1], l2, g0, m0]).await;
    one_batch(&r, &[l[1], l2, l[0]], "VL0001", &[10, 20, 30]);
    let done = app
        .wait_final(&[l[0], l[1], l2, g0, m0], Duration::from_secs(20))
        .await;
    assert_found(&done[0], "VL0001", 30, "enstore-layer4");
    assert_found(&done[1], "VL0001", 10, "enstore-layer4");
    assert_found(&done[2], "VL0001", 20, "enstore-layer4");
    assert_failed_and_done(&done[3]);
    assert_failed_and_done(&done[4]);

    let metrics = (reqwest::get(format!("{}/metrics", app.base)).await.unwrap())
        .text()
        .await
        .unwrap();
    for line in [
        "mssbroker_volume_lookups_total{method=\"enstore-layer4\",outcome=\"found\"} 3",
        "mssbroker_volume_lookups_total{method=\"enstore-layer4\",outcome=\"failed\"} 2",
    ] {
        assert!(metrics.contains(line), "{line} in {metrics}");
    }
}

/// A site script: `NAME` -> `VC0001 N` for c-files, a garbled line for `cbad`, a hang for
/// `cslow`, exit 1 for anything else. It appends each path it is given to `calls`.
fn script(dir: &Path) -> std::path::PathBuf {
    let path = dir.join("where-is");
    let calls = dir.join("calls");
    std::fs::write(
        &path,
        format!(
            "#!/bin/sh\necho \"$2\" >> {calls}\ncase \"$2\" in\n\
             */c0) echo \"$1 7\";;\n*/c1) echo \"$1 0000_000000000_0000003\";;\n\
             */c2) echo \"$1 5\";;\n*/cbad) echo 'VC0001 five';;\n\
             */cslow) exec sleep 30;;\n*) exit 1;;\nesac\n",
            calls = calls.display()
        ),
    )
    .unwrap();
    use std::os::unix::fs::PermissionsExt;
    std::fs::set_permissions(&path, std::fs::Permissions::from_mode(0o755)).unwrap();
    path
}

#[tokio::test]
async fn a_site_command_finds_the_volume_and_a_failing_garbled_or_hung_one_does_not_refuse() {
    let sim = SimProcess::start_with(2, 1000.0);
    let dir = tempfile::tempdir().unwrap();
    let program = script(dir.path());
    let lookup = format!(
        "method = \"command\"\ncommand = [\"{}\", \"VC0001\"]\ntimeout_secs = 1\nwait_secs = 600",
        program.display()
    );
    let app = TestApp::spawn(&config(&sim, &lookup)).await;
    let c: Vec<i64> = vec![
        submit(&app, "c0").await,
        submit(&app, "c1").await,
        submit(&app, "cbad").await,
        submit(&app, "cslow").await,
        submit(&app, "cnone").await,
        submit(&app, "c2").await,
    ];
    let r = received_all(&sim, &c).await;
    // c1 (3), c2 (5), c0 (7).
    one_batch(&r, &[c[1], c[5], c[0]], "VC0001", &[3, 5, 7]);
    let done = app.wait_final(&c, Duration::from_secs(20)).await;
    assert_found(&done[0], "VC0001", 7, "command");
    assert_found(&done[1], "VC0001", 3, "command");
    assert_found(&done[5], "VC0001", 5, "command");
    for failed in &done[2..5] {
        assert_failed_and_done(failed);
    }
    // Each path was asked once, as the last argument.
    let calls = std::fs::read_to_string(dir.path().join("calls")).unwrap();
    let mut asked: Vec<&str> = calls.lines().collect();
    asked.sort();
    let want = ["c0", "c1", "c2", "cbad", "cnone", "cslow"].map(|n| format!("/pnfs/test/{n}"));
    assert_eq!(asked, want.iter().map(String::as_str).collect::<Vec<_>>());
}

#[tokio::test]
async fn a_request_waits_for_its_lookup_and_explain_says_so() {
    let sim = SimProcess::start_with(2, 1000.0);
    let dir = tempfile::tempdir().unwrap();
    let program = script(dir.path());
    // The hung lookup holds `cslow` for its timeout: meanwhile explain shows it waiting.
    let lookup = format!(
        "method = \"command\"\ncommand = [\"{}\", \"VC0001\"]\ntimeout_secs = 30\nwait_secs = 600",
        program.display()
    );
    let app = TestApp::spawn(&config(&sim, &lookup)).await;
    // The 202 does not wait for the lookup (which hangs for 30 s), nor does the next one.
    let started = Instant::now();
    let id = submit(&app, "cslow").await;
    submit(&app, "c0").await;
    assert!(
        started.elapsed() < Duration::from_secs(10),
        "{:?}",
        started.elapsed()
    );
    let body = explain(&app, id).await;
    assert_eq!(body["state"], "queued", "{body}");
    assert_eq!(body["volume_source"], "none", "{body}");
    assert_eq!(body["volume_lookup"], Value::Null, "{body}");
    let w = &body["volume_wait"];
    assert_eq!(w["rule"], "waiting_volume_lookup", "{body}");
    assert_eq!(w["eligible"], false, "{body}");
    assert_eq!(
        w["eligible_at_ms"].as_i64(),
        body["created_ms"].as_i64().map(|t| t + 600_000),
        "{body}"
    );
}
