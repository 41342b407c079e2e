//! `mssbroker trace export` through the real binary, beside a real `serve`: every accepted
//! request is in the trace with its fields, in arrival order, `t` from 0 and never decreasing;
//! `--since`/`--until` filter; a missing or newer database is refused. And the first half of
//! issue 15's replay test: the exported trace, classified with the broker's configuration,
//! gives every request the group the live broker recorded.

use std::collections::HashMap;
use std::path::{Path, PathBuf};
use std::process::Command;

use mssbroker::clock::{Clock, SystemClock};
use mssbroker::config::Settings;
use mssbroker::policy::{classify, RequestFields};
use mssbroker::trace::{read_trace, Direction, TraceRecord};
use serde_json::{json, Value};

use crate::helpers::{open_db, request, run_ok, test_config, wait_final, ServeProcess, BIN};

/// Rules and a default group on top of the test configuration, so classification looks at the
/// station and the file as well as the access mode and physics group.
const CLASSIFICATION: &str = r#"
[classification]
default_group = "reprocessing"

[[classification.rules]]
station = "cdf-farm"
access_mode = "mc"
group = "analysis/top"

[[classification.rules]]
path_prefix = "/pnfs/special/"
group = "analysis/higgs"
"#;

struct Broker {
    _dir: tempfile::TempDir,
    config: PathBuf,
    db: PathBuf,
    serve: ServeProcess,
    client: reqwest::Client,
}

impl Broker {
    fn start() -> Broker {
        let dir = tempfile::tempdir().unwrap();
        let config = dir.path().join("broker.toml");
        std::fs::write(&config, test_config(None) + CLASSIFICATION).unwrap();
        let db = dir.path().join("broker.db");
        let serve = ServeProcess::start(&config, &db);
        Broker {
            _dir: dir,
            config,
            db,
            serve,
            client: reqwest::Client::new(),
        }
    }

    async fn send(&self, method: reqwest::Method, path: &str, body: Option<&Value>) -> Value {
        let mut req = self
            .client
            .request(method, format!("{}{path}", self.serve.base));
        if let Some(body) = body {
            req = req.json(body);
        }
        let resp = req.send().await.unwrap();
        let status = resp.status().as_u16();
        let body: Value = resp.json().await.unwrap();
        assert!(status == 200 || status == 202, "{path}: {status} {body}");
        body
    }

    /// Submits `singles` one by one, then `batch` in one call; returns each accepted id in
    /// submission order.
    async fn submit(&self, singles: &[Value], batch: &[Value]) -> Vec<i64> {
        let mut ids = Vec::new();
        for r in singles {
            let body = self
                .send(reqwest::Method::POST, "/v1/requests", Some(r))
                .await;
            ids.push(body["id"].as_i64().unwrap());
        }
        if batch.is_empty() {
            return ids;
        }
        let body = self
            .send(
                reqwest::Method::POST,
                "/v1/requests/batch",
                Some(&json!({ "requests": batch })),
            )
            .await;
        for result in body["results"].as_array().unwrap() {
            assert_eq!(result["duplicate"], false, "{result}");
            ids.push(result["id"].as_i64().unwrap());
        }
        ids
    }

    async fn request(&self, id: i64) -> Value {
        self.send(reqwest::Method::GET, &format!("/v1/requests/{id}"), None)
            .await
    }

    /// Submit `load()`'s single requests, kill the broker, and change its ledger with `sql`,
    /// which must change `rows` rows.
    async fn stopped_and_changed(sql: &str, rows: usize) -> Broker {
        let mut broker = Broker::start();
        let (singles, _) = load();
        broker.submit(&singles, &[]).await;
        broker.serve.kill();
        let conn = rusqlite::Connection::open(&broker.db).unwrap();
        assert_eq!(conn.execute(sql, []).unwrap(), rows, "{sql}");
        broker
    }

    fn export(&self, extra: &[&str]) -> Vec<TraceRecord> {
        let out = self._dir.path().join("export.jsonl");
        let mut args = vec![
            "trace",
            "export",
            "--db",
            self.db.to_str().unwrap(),
            "--out",
            out.to_str().unwrap(),
        ];
        args.extend_from_slice(extra);
        run_ok(&args);
        let file = std::fs::File::open(&out).unwrap();
        read_trace(std::io::BufReader::new(file)).unwrap()
    }
}

fn with(mut base: Value, extra: Value) -> Value {
    for (k, v) in extra.as_object().unwrap() {
        base[k] = v.clone();
    }
    base
}

/// Singles (with and without a volume and a byte offset, from two stations and several users, one a write of
/// the data-taking class) and a batch over several groups, some caught by the rules.
fn load() -> (Vec<Value>, Vec<Value>) {
    let singles = vec![
        with(
            request("s-0", "analysis", "higgs", 1_000_000),
            json!({"volume": "VR000001", "position": 37, "offset_bytes": 74_000_000_000u64}),
        ),
        with(
            request("s-1", "mc", "top", 2_000_000),
            json!({"station": "cdf-farm", "user": "bob"}),
        ),
        with(
            request("s-2", "datataking", "raw", 4_000_000),
            json!({"direction": "write", "volume": "DT000001"}),
        ),
        with(
            request("s-3", "analysis", "top", 3_000_000),
            json!({"file": "/pnfs/special/s-3"}),
        ),
        request("s-4", "unknown-mode", "nobody", 5_000_000),
    ];
    let modes = [
        ("analysis", "higgs"),
        ("analysis", "top"),
        ("reprocessing", "any"),
        ("mc", "x"),
    ];
    let batch = (0..12u64)
        .map(|i| {
            let (mode, group) = modes[(i % 4) as usize];
            let r = request(&format!("b-{i}"), mode, group, 1_000_000 + i * 10_000);
            match i % 3 {
                0 => with(
                    r,
                    json!({"volume": format!("VR00010{}", i % 2), "offset_bytes": i * 1_000_000_000}),
                ),
                1 => with(r, json!({"station": "cdf-farm", "user": format!("u{i}")})),
                _ => r,
            }
        })
        .collect();
    (singles, batch)
}

/// The classification of a trace record under `settings`, as a group path.
fn group_of(settings: &Settings, r: &TraceRecord) -> String {
    let fields = RequestFields {
        access_mode: &r.access_mode,
        physics_group: &r.physics_group,
        station: &r.station,
        user: &r.user,
        file: &r.file,
    };
    let id = classify(&settings.policy, &fields).unwrap();
    settings.policy.group(id).path.as_str().to_string()
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn the_export_of_a_live_broker_holds_every_request_and_classifies_as_it_did() {
    let broker = Broker::start();
    let (singles, batch) = load();
    let ids = broker.submit(&singles, &batch).await;
    let sent: Vec<&Value> = singles.iter().chain(&batch).collect();
    assert_eq!(ids.len(), sent.len());
    assert!(
        ids.windows(2).all(|w| w[0] < w[1]),
        "ids in submission order"
    );

    // Beside the running broker: every request is durable before its 202.
    let trace = broker.export(&[]);
    assert_eq!(trace.len(), sent.len(), "one record per request");
    assert_eq!(trace[0].t, 0.0, "t counts from the first request");
    let created: Vec<i64> = ids
        .iter()
        .map(|id| {
            open_db(&broker.db)
                .query_row("SELECT created_ms FROM requests WHERE id = ?1", [id], |r| {
                    r.get(0)
                })
                .unwrap()
        })
        .collect();
    for (i, (record, r)) in trace.iter().zip(&sent).enumerate() {
        let crid = r["client_request_id"].as_str().unwrap();
        assert_eq!(
            record.client_request_id, crid,
            "record {i} in arrival order"
        );
        assert_eq!(record.station, r["station"].as_str().unwrap(), "{crid}");
        assert_eq!(record.user, r["user"].as_str().unwrap(), "{crid}");
        assert_eq!(record.file, r["file"].as_str().unwrap(), "{crid}");
        assert_eq!(
            record.volume.as_deref(),
            r["volume"].as_str(),
            "{crid}: its volume, left out where it named none"
        );
        assert_eq!(
            record.position,
            r["position"].as_u64(),
            "{crid}: its position, left out where it gave none"
        );
        assert_eq!(
            record.offset_bytes,
            r["offset_bytes"].as_u64(),
            "{crid}: its byte offset, left out where it gave none"
        );
        assert_eq!(Some(record.size_bytes), r["size_bytes"].as_u64(), "{crid}");
        assert_eq!(record.access_mode, r["access_mode"].as_str().unwrap());
        assert_eq!(record.physics_group, r["physics_group"].as_str().unwrap());
        let write = r["direction"] == "write";
        assert_eq!(record.direction == Direction::Write, write, "{crid}");
        let t_ms = (record.t * 1000.0).round() as i64;
        assert_eq!(t_ms, created[i] - created[0], "{crid}: t from created_ms");
    }
    assert!(
        trace.windows(2).all(|w| w[0].t <= w[1].t),
        "t never decreases"
    );

    // The replay's classification: the same group the live broker recorded, for every request.
    let settings = Settings::load(&broker.config).unwrap();
    let mut groups: HashMap<String, usize> = HashMap::new();
    for (record, id) in trace.iter().zip(&ids) {
        let live = broker.request(*id).await;
        let replayed = group_of(&settings, record);
        assert_eq!(
            live["group"],
            replayed.as_str(),
            "{}",
            record.client_request_id
        );
        *groups.entry(replayed).or_default() += 1;
    }
    for g in [
        "analysis/higgs",
        "analysis/top",
        "reprocessing",
        "mc",
        "datataking",
    ] {
        assert!(groups.contains_key(g), "the load reaches {g}: {groups:?}");
    }
}

/// The requests' (client id, created_ms), in id order.
fn stored(db: &Path) -> Vec<(String, i64)> {
    let conn = open_db(db);
    let mut stmt = conn
        .prepare("SELECT client_request_id, created_ms FROM requests ORDER BY id")
        .unwrap();
    stmt.query_map([], |r| Ok((r.get(0)?, r.get(1)?)))
        .unwrap()
        .collect::<Result<_, _>>()
        .unwrap()
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn since_and_until_export_the_requests_accepted_in_between() {
    let broker = Broker::start();
    let (singles, batch) = load();
    broker.submit(&singles, &[]).await;
    let first = stored(&broker.db);
    let (s_min, s_max) = (first[0].1, first[first.len() - 1].1);
    // The batch is accepted in a later millisecond than every single.
    while SystemClock.now_ms() <= s_max {
        tokio::task::yield_now().await;
    }
    broker.submit(&[], &batch).await;
    let all = stored(&broker.db);
    let b_min = all[singles.len()].1;
    assert!(b_min > s_max);
    let crids = |rs: &[Value]| -> Vec<String> {
        rs.iter()
            .map(|r| r["client_request_id"].as_str().unwrap().to_string())
            .collect()
    };
    let rfc = |ms: i64| jiff::Timestamp::from_millisecond(ms).unwrap().to_string();
    let cases = [
        (vec!["--since".to_string(), rfc(b_min)], crids(&batch)),
        (vec!["--until".to_string(), rfc(b_min)], crids(&singles)),
        (
            vec!["--since".into(), (s_min + 1).to_string()],
            all.iter()
                .filter(|(_, ms)| *ms > s_min)
                .map(|(crid, _)| crid.clone())
                .collect(),
        ),
        (
            vec![
                "--since".into(),
                s_min.to_string(),
                "--until".into(),
                (s_max + 1).to_string(),
            ],
            crids(&singles),
        ),
        (vec!["--until".to_string(), s_min.to_string()], vec![]),
    ];
    for (args, want) in cases {
        let args: Vec<&str> = args.iter().map(String::as_str).collect();
        let trace = broker.export(&args);
        let got: Vec<&str> = trace.iter().map(|r| r.client_request_id.as_str()).collect();
        assert_eq!(got, want, "{args:?}");
        if let Some(first) = trace.first() {
            assert_eq!(first.t, 0.0, "{args:?}: t from the first exported request");
        }
    }
    // A bound that is not an instant is refused, naming the option.
    let err = refused(&["--db", broker.db.to_str().unwrap(), "--since", "yesterday"]);
    assert!(err.contains("--since"), "{err}");
}

/// Runs `mssbroker trace export ARGS`, insists it fails, and returns its stderr.
fn refused(args: &[&str]) -> String {
    let out = Command::new(BIN)
        .args(["trace", "export"])
        .args(args)
        .output()
        .unwrap();
    let err = String::from_utf8_lossy(&out.stderr).into_owned();
    assert!(!out.status.success(), "{args:?} succeeded: {err}");
    assert!(out.stdout.is_empty(), "{args:?} wrote a trace");
    err
}

#[test]
fn a_missing_or_newer_database_is_refused() {
    let dir = tempfile::tempdir().unwrap();
    let missing = dir.path().join("missing.db");
    let err = refused(&["--db", missing.to_str().unwrap()]);
    assert!(err.contains("no database at"), "{err}");
    assert!(!missing.exists(), "nothing created");

    let newer = dir.path().join("newer.db");
    {
        let conn = rusqlite::Connection::open(&newer).unwrap();
        conn.execute_batch("CREATE TABLE future (x); PRAGMA user_version = 1000;")
            .unwrap();
    }
    let err = refused(&["--db", newer.to_str().unwrap()]);
    assert!(err.contains("schema version 1000"), "{err}");
    assert!(err.contains("newer than this build"), "{err}");
}

/// Arrival order is the ledger's id order; where the wall clock stepped back between two
/// commits, `t` keeps its previous value instead of going back.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_clock_that_stepped_back_keeps_t_from_going_back() {
    let broker = Broker::stopped_and_changed(
        "UPDATE requests SET created_ms = created_ms - 5000 \
         WHERE client_request_id IN ('s-1', 's-3')",
        2,
    )
    .await;
    let created: Vec<i64> = stored(&broker.db).iter().map(|(_, ms)| *ms).collect();
    let trace = broker.export(&[]);
    let got: Vec<&str> = trace.iter().map(|r| r.client_request_id.as_str()).collect();
    assert_eq!(got, ["s-0", "s-1", "s-2", "s-3", "s-4"], "id order");
    let mut last = created[0];
    for (record, ms) in trace.iter().zip(&created) {
        last = last.max(*ms);
        let t_ms = (record.t * 1000.0).round() as i64;
        assert_eq!(t_ms, last - created[0], "{}", record.client_request_id);
    }
    assert_eq!(
        trace[1].t, 0.0,
        "s-1 is before the first request: t stays at 0"
    );
}

/// A site whose `limits.max_size_bytes` allows files over the trace format's bound (1 PB) still
/// gets a trace it can replay: those requests are left out and counted on stderr.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn requests_over_the_trace_formats_size_bound_are_left_out_and_counted() {
    let broker = Broker::stopped_and_changed(
        "UPDATE requests SET size_bytes = 2000000000000000 WHERE client_request_id = 's-2'",
        1,
    )
    .await;
    let out = broker._dir.path().join("big.jsonl");
    let run = Command::new(BIN)
        .args(["trace", "export", "--db"])
        .arg(&broker.db)
        .arg("--out")
        .arg(&out)
        .output()
        .unwrap();
    let err = String::from_utf8_lossy(&run.stderr);
    assert!(run.status.success(), "{err}");
    assert!(err.contains("4 requests exported"), "{err}");
    assert!(err.contains("1 requests left out"), "{err}");
    let trace = read_trace(std::io::BufReader::new(std::fs::File::open(&out).unwrap())).unwrap();
    let got: Vec<&str> = trace.iter().map(|r| r.client_request_id.as_str()).collect();
    assert_eq!(got, ["s-0", "s-1", "s-3", "s-4"]);
}

/// The trace format's second version: a request the client cancelled carries `cancelled_t`,
/// when it ended cancelled (`finished_ms`) on the trace's clock; one not cancelled (done, or
/// cancelled too late) carries none. Every request of the load is cancelled as soon as it is
/// accepted: those still queued at the broker or the MSS end cancelled, those already read end
/// done. Each file is 1 TB (two seconds of the simulator's drive at its time scale), so most
/// still wait at the MSS when their cancel comes.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_cancelled_request_is_exported_with_when_it_was_cancelled() {
    let broker = Broker::start();
    let (singles, batch) = load();
    let large = |r: &Value| with(r.clone(), json!({"size_bytes": 1_000_000_000_000u64}));
    let singles: Vec<Value> = singles.iter().map(large).collect();
    let batch: Vec<Value> = batch.iter().map(large).collect();
    let ids = broker.submit(&singles, &batch).await;
    for id in &ids {
        let url = format!("{}/v1/requests/{id}", broker.serve.base);
        let status = broker.client.delete(url).send().await.unwrap().status();
        assert!(
            status.is_success() || status.as_u16() == 409,
            "{id}: {status}"
        );
    }
    let finals = wait_final(
        &broker.client,
        &broker.serve.base,
        &ids,
        std::time::Duration::from_secs(30),
    )
    .await;
    let conn = open_db(&broker.db);
    let mut stmt = conn
        .prepare("SELECT created_ms, state, finished_ms FROM requests ORDER BY id")
        .unwrap();
    let rows: Vec<(i64, String, Option<i64>)> = stmt
        .query_map([], |r| Ok((r.get(0)?, r.get(1)?, r.get(2)?)))
        .unwrap()
        .collect::<Result<_, _>>()
        .unwrap();
    assert_eq!(rows.len(), finals.len());
    let trace = broker.export(&[]);
    assert_eq!(trace.len(), rows.len());
    let origin = rows[0].0;
    let mut cancelled = 0;
    for (record, (created_ms, state, finished_ms)) in trace.iter().zip(&rows) {
        let want = (state == "cancelled").then(|| {
            let end = finished_ms
                .expect("a cancelled request has ended")
                .max(*created_ms);
            (end - origin) as f64 / 1000.0
        });
        assert_eq!(
            record.cancelled_t, want,
            "{} ({state})",
            record.client_request_id
        );
        cancelled += usize::from(want.is_some());
    }
    assert!(cancelled > 0, "no request was cancelled in time: {rows:?}");
}
