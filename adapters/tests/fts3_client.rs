//! CERN's own FTS3 client as the oracle for the adapter's job bodies: for the same inputs, the
//! bodies `fts3.rest.client.easy.new_transfer` and `new_job` build (PyPI `fts3`, run by
//! `python3` on `oracle/fts3_client_bodies.py`) must mean what `fts3::job_body`'s mean, key by
//! key, a key left out or null read as FTS3 reads it; and the FTS3 stand-in must accept both.
//! Needs `python3` with the `fts3` package (`scripts/test` installs it): without them the test
//! fails and says so.

use std::io::Write;
use std::path::Path;
use std::process::{Command, Stdio};

use mss_adapters::fts3::{job_body, Fts3Config, RawFts3Config};
use mss_adapters::standin::{Fts3Standin, Plan};
use mss_adapters::{Direction, Transfer};
use serde_json::{json, Value};

/// What FTS3 reads a `params` key as when it is missing or null: fts-rest-flask
/// `fts3rest/lib/JobBuilder_utils.py` `DEFAULT_PARAMS`, and `JobBuilder.py` for the keys it
/// reads with `.get(key, default)`.
fn fts3_default(key: &str) -> Value {
    match key {
        "bring_online" | "archive_timeout" | "copy_pin_lifetime" => json!(-1),
        "gridftp" | "source_spacetoken" | "destination_spacetoken" => json!(""),
        "retry" | "retry_delay" | "max_time_in_queue" => json!(0),
        "priority" => json!(3),
        "id_generator" => json!("standard"),
        "verify_checksum"
        | "overwrite"
        | "overwrite_on_retry"
        | "overwrite_when_only_on_disk"
        | "overwrite_hop"
        | "dst_file_report"
        | "multihop"
        | "s3alternate"
        | "strict_copy"
        | "disable_cleanup"
        | "unmanaged_tokens" => json!(false),
        _ => Value::Null,
    }
}

/// Keys where the client's own default differs from leaving the key out, on purpose:
/// `nostreams` (the client always asks for 1 TCP stream; left out, FTS3's optimizer chooses).
const CLIENT_CHOICES: &[&str] = &["nostreams"];

fn effective(params: &Value, key: &str) -> Value {
    match params.get(key) {
        None | Some(Value::Null) => fts3_default(key),
        Some(v) => v.clone(),
    }
}

fn config(bring_online: i64, archive: i64, activity: Option<&str>) -> Fts3Config {
    let raw: RawFts3Config = serde_json::from_value(json!({
        "url": "https://fts3.example.org:8446",
        "vo": "cms",
        "tape_endpoint": "davs://tape.example.org:2880",
        "read_destination": "davs://disk.example.org:2880/stage",
        "bring_online_secs": bring_online,
        "copy_pin_lifetime_secs": 7200,
        "archive_timeout_secs": archive,
        "activity": activity,
        "auth": {"method": "none"},
    }))
    .expect("an [mss.fts3] table");
    raw.validate(Path::new("/"), Vec::new())
        .expect("a valid [mss.fts3]")
}

struct Case {
    cfg: Fts3Config,
    transfer: Transfer,
    level: i64,
    sid: &'static str,
    /// The same inputs, as the client takes them.
    client: Value,
}

fn transfer(key: &str, file: &str, direction: Direction, local: Option<&str>) -> Transfer {
    Transfer {
        key: key.into(),
        attempt: 2,
        file: file.into(),
        size_bytes: 3_000_000_000,
        priority: 20,
        volume: None,
        group: "analysis/higgs".into(),
        direction,
        local_file: local.map(str::to_string),
        bfid: None,
        position: None,
        offset_bytes: None,
    }
}

fn cases() -> Vec<Case> {
    let tape = "davs://tape.example.org:2880";
    let stage = "davs://disk.example.org:2880/stage";
    let meta = |key: &str| json!({"mssbroker_key": key, "attempt": 2});
    vec![
        // A read staged from tape, no activity.
        Case {
            cfg: config(3600, 0, None),
            transfer: transfer("1", "/cms/a.root", Direction::Read, None),
            level: 3,
            sid: "mssbroker-x-1-2",
            client: json!({"source": format!("{tape}/cms/a.root"),
                "destination": format!("{stage}/cms/a.root"), "filesize": 3_000_000_000u64,
                "metadata": meta("1"), "priority": 3, "sid": "mssbroker-x-1-2",
                "bring_online": 3600, "copy_pin_lifetime": 7200}),
        },
        // A write archived to tape, with the one activity the site chose.
        Case {
            cfg: config(3600, 7200, Some("Data Taking")),
            transfer: transfer(
                "2",
                "/cms/raw/r.dat",
                Direction::Write,
                Some("https://daq.example.org/buf/r.dat"),
            ),
            level: 5,
            sid: "mssbroker-x-2-2",
            client: json!({"source": "https://daq.example.org/buf/r.dat",
                "destination": format!("{tape}/cms/raw/r.dat"), "filesize": 3_000_000_000u64,
                "activity": "data taking", "metadata": meta("2"), "priority": 5,
                "sid": "mssbroker-x-2-2", "archive_timeout": 7200}),
        },
        // A read from an endpoint that is not tape, to the station's own destination.
        Case {
            cfg: config(0, 0, None),
            transfer: transfer(
                "3",
                "/cms/b.root",
                Direction::Read,
                Some("davs://station.example.org/in/b.root"),
            ),
            level: 1,
            sid: "mssbroker-x-3-2",
            client: json!({"source": format!("{tape}/cms/b.root"),
                "destination": "davs://station.example.org/in/b.root",
                "filesize": 3_000_000_000u64, "metadata": meta("3"), "priority": 1,
                "sid": "mssbroker-x-3-2"}),
        },
    ]
}

/// The client's bodies for `inputs`, or a failure saying what is missing.
fn client_bodies(inputs: &[Value]) -> Vec<Value> {
    let script = Path::new(env!("CARGO_MANIFEST_DIR")).join("tests/oracle/fts3_client_bodies.py");
    let mut child = Command::new("python3")
        .arg(&script)
        .stdin(Stdio::piped())
        .stdout(Stdio::piped())
        .stderr(Stdio::piped())
        .spawn()
        .unwrap_or_else(|e| {
            panic!(
                "this test needs python3 with CERN's fts3 client (scripts/test installs it: \
                 python3 -m pip install fts3): cannot run python3: {e}"
            )
        });
    let mut stdin = child.stdin.take().expect("piped stdin");
    stdin
        .write_all(&serde_json::to_vec(inputs).expect("JSON"))
        .expect("write the cases");
    drop(stdin);
    let out = child.wait_with_output().expect("python3's output");
    assert!(
        out.status.success(),
        "the fts3 client oracle failed ({}); scripts/test installs it with \
         `python3 -m pip install fts3`: {}",
        out.status,
        String::from_utf8_lossy(&out.stderr)
    );
    serde_json::from_slice(&out.stdout).expect("the client's bodies as JSON")
}

async fn accepted(standin: &Fts3Standin, body: &Value) -> Value {
    let resp = reqwest::Client::new()
        .post(format!("{}/jobs", standin.url))
        .json(body)
        .send()
        .await
        .expect("the stand-in answers");
    let status = resp.status();
    let answer: Value = resp.json().await.expect("a JSON answer");
    assert!(status.is_success(), "{status}: {answer} for {body}");
    answer
}

#[tokio::test]
async fn the_adapters_bodies_mean_what_the_fts3_clients_mean_and_the_standin_takes_both() {
    let cases = cases();
    let inputs: Vec<Value> = cases.iter().map(|c| c.client.clone()).collect();
    let theirs = client_bodies(&inputs);
    assert_eq!(theirs.len(), cases.len());
    for (case, client) in cases.iter().zip(&theirs) {
        let ours = job_body(&case.cfg, case.sid, case.level, &case.transfer).expect("a body");
        assert_eq!(
            ours["files"], client["files"],
            "the files, case {}",
            case.sid
        );
        let keys: std::collections::BTreeSet<&String> = ours["params"]
            .as_object()
            .into_iter()
            .chain(client["params"].as_object())
            .flat_map(|m| m.keys())
            .collect();
        for key in keys {
            if CLIENT_CHOICES.contains(&key.as_str()) {
                continue;
            }
            assert_eq!(
                effective(&ours["params"], key),
                effective(&client["params"], key),
                "params.{key}, case {}: ours {} theirs {}",
                case.sid,
                ours["params"],
                client["params"]
            );
        }
        // The stand-in takes both, and files them under the same job id.
        let a = Fts3Standin::start("cms", None, Plan::default())
            .await
            .expect("a stand-in");
        let b = Fts3Standin::start("cms", None, Plan::default())
            .await
            .expect("a stand-in");
        assert_eq!(
            accepted(&a, &ours).await["job_id"],
            accepted(&b, client).await["job_id"]
        );
        let (ja, jb) = (&a.jobs()[0], &b.jobs()[0]);
        assert_eq!(
            (ja.retries, ja.staging, &ja.files[0].activity, ja.priority),
            (jb.retries, jb.staging, &jb.files[0].activity, jb.priority)
        );
    }
}
