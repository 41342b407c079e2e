//! The real MSS adapters through the real broker: the stand-in `encp` script run by the encp
//! adapter (in process, and by the real `serve` binary killed mid-transfer), and the FTS3 and
//! WLCG Tape REST stand-in servers. What each stand-in received is checked against what the
//! broker decided.

use std::path::Path;
use std::process::{Command, Stdio};
use std::time::{Duration, Instant};

use mss_adapters::standin::encp::{self as encp_standin, Run};
use mss_adapters::standin::fts3::Delegation;
use mss_adapters::standin::tape_rest::{Form, TapeRestOptions};
use mss_adapters::standin::{Fts3Standin, Plan, TapeRestStandin};
use serde_json::{json, Value};

use crate::helpers::{
    check_config_refusal, open_db, request, run_ok, test_config, wait_final, ServeProcess, TestApp,
    BIN,
};

/// The test configuration with `mss` as its `[mss]` section.
pub(crate) fn config_with(mss: &str) -> String {
    let base = test_config(Some("http://127.0.0.1:9"));
    let head = &base[..base.find("[mss]").expect("an [mss] section")];
    format!(
        "{head}[mss]\nretry_base_ms = 50\nretry_max_ms = 500\nevent_wait_ms = 200\n\
         stale_after_ms = 400\n{mss}"
    )
}

/// `[mss]` for the stand-in encp, its records in `dir`: the admin build, which takes the
/// storage group of writes.
pub(crate) fn encp_mss(dir: &Path, max_processes: usize) -> String {
    format!(
        r#"adapter = "encp"
[mss.encp]
command = "{script}"
build = "admin"
max_processes = {max_processes}
read_dir = "{stage}"
local_roots = ["{dir}"]
storage_group = "cms"
env = {{ ENCP_STANDIN_DIR = "{dir}", ENCP_STANDIN_BUILD = "admin" }}
[mss.encp.classes."datataking"]
priority = 2000002
env = {{ ENCP_DAQ = "1" }}
"#,
        script = encp_standin::script().display(),
        stage = dir.join("stage").display(),
        dir = dir.display(),
    )
}

pub(crate) fn with(base: Value, extra: Value) -> Value {
    let mut v = base;
    for (k, x) in extra.as_object().unwrap() {
        v[k] = x.clone();
    }
    v
}

/// Poll until `f` holds, failing after `limit`.
async fn until(limit: Duration, what: &str, mut f: impl FnMut() -> bool) {
    let start = Instant::now();
    while !f() {
        assert!(start.elapsed() < limit, "{what} after {limit:?}");
        tokio::time::sleep(Duration::from_millis(50)).await;
    }
}

/// Poll the broker until three of `ids` are submitted, the fourth is still accepted and the
/// adapter reports no room: the process limit is what holds the fourth back.
async fn wait_fourth_held(client: &reqwest::Client, base: &str, ids: &[i64]) {
    let start = Instant::now();
    loop {
        let mut states = Vec::new();
        for id in ids {
            let r: Value = client
                .get(format!("{base}/v1/requests/{id}"))
                .send()
                .await
                .unwrap()
                .json()
                .await
                .unwrap();
            states.push(r["state"].as_str().unwrap_or_default().to_string());
        }
        let mss: Value = client
            .get(format!("{base}/v1/mss"))
            .send()
            .await
            .unwrap()
            .json()
            .await
            .unwrap();
        let submitted = states.iter().filter(|s| *s == "submitted").count();
        let waiting = states.iter().filter(|s| *s == "accepted").count();
        if submitted == 3 && waiting == 1 && mss["room"] == 0 {
            return;
        }
        assert!(
            start.elapsed() < Duration::from_secs(20),
            "the fourth request held by the process limit: {states:?}, room {}",
            mss["room"]
        );
        tokio::time::sleep(Duration::from_millis(50)).await;
    }
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn encp_runs_each_transfer_at_the_brokers_priority_and_reports_its_bytes() {
    let dir = tempfile::tempdir().unwrap();
    std::fs::create_dir_all(dir.path().join("stage")).unwrap();
    let app = TestApp::spawn(&config_with(&encp_mss(dir.path(), 3))).await;
    let (status, mss) = app.get("/v1/mss").await;
    assert_eq!(status, 200);
    assert_eq!(
        (mss["adapter"].as_str(), mss["priority"].as_str()),
        (Some("encp"), Some("direct"))
    );
    assert_eq!(
        (mss["min_priority"].clone(), mss["max_priority"].clone()),
        (json!(1), json!(1_000_001))
    );
    assert_eq!(mss["max_outstanding"], 3);
    assert_eq!(mss["reads_need_local_file"], false, "read_dir is set");
    // Stopping encp leaves its ticket queued at the library manager: no cancel_command.
    assert_eq!(
        (mss["cancel"].clone(), mss["cancel_reaches_mss"].clone()),
        (json!(true), json!(false))
    );

    // What the encp adapter cannot take is refused before anything is stored.
    let src = dir.path().join("up.dat");
    std::fs::write(&src, vec![1u8; 2_222]).unwrap();
    let write = with(request("w0", "mc", "x", 100), json!({"direction": "write"}));
    let src_path = src.display().to_string();
    let refused = [
        // A write needs the file to store.
        (write.clone(), "local_file", "is required for a write"),
        // A write has no bfid yet.
        (
            with(write.clone(), json!({"local_file": src_path, "bfid": "B1"})),
            "bfid",
            "only a read",
        ),
        // A station may not point encp at files outside local_roots.
        (
            with(write.clone(), json!({"local_file": "/etc/passwd"})),
            "local_file",
            "mss.encp.local_roots",
        ),
    ];
    for (body, field, why) in refused {
        let (status, answer) = app.post("/v1/requests", &body).await;
        assert_eq!(
            (status, answer["field"].as_str()),
            (422, Some(field)),
            "{answer}"
        );
        assert!(answer["error"].as_str().unwrap().contains(why), "{answer}");
    }
    let stored: i64 = open_db(&app.db)
        .query_row("SELECT COUNT(*) FROM requests", [], |r| r.get(0))
        .unwrap();
    assert_eq!(stored, 0);

    encp_standin::control(dir.path(), "daq1", "bytes 4000\n").unwrap();
    encp_standin::control(dir.path(), "an1", "bytes 3000\n").unwrap();
    let items = [
        request("daq1", "datataking", "cms", 4_000),
        request("an1", "analysis", "higgs", 3_000),
        with(
            request("w1", "mc", "x", 2_222),
            json!({"direction": "write", "local_file": src.display().to_string()}),
        ),
    ];
    let mut ids = Vec::new();
    for item in &items {
        let (status, body) = app.post("/v1/requests", item).await;
        assert_eq!(status, 202, "{body}");
        ids.push(body["id"].as_i64().unwrap());
    }
    let done = app.wait_final(&ids, Duration::from_secs(30)).await;
    let bytes: Vec<u64> = done
        .iter()
        .map(|r| r["bytes_done"].as_u64().unwrap())
        .collect();
    assert_eq!(bytes, [4_000, 3_000, 2_222], "{done:?}");
    assert!(done.iter().all(|r| r["state"] == "done"));
    assert!(done
        .iter()
        .all(|r| r["mss_id"].as_str().unwrap().starts_with("encp:")));

    let runs = encp_standin::runs(dir.path());
    assert_eq!(runs.len(), 3, "{runs:?}");
    let run_of = |source: &str| -> &Run {
        runs.iter()
            .find(|r| r.source() == Some(source))
            .unwrap_or_else(|| panic!("no run of {source}: {runs:?}"))
    };
    // Data taking: its class's admin priority through ENCP_DAQ.
    let daq = run_of("/pnfs/test/daq1");
    assert_eq!(daq.priority(), Some(2_000_002));
    assert_eq!(daq.env.get("ENCP_DAQ").map(String::as_str), Some("1"));
    // Fair share: exactly the priority the broker decided and recorded.
    let an = run_of("/pnfs/test/an1");
    assert_eq!(an.priority(), done[1]["mss_priority"].as_i64());
    assert!(!an.env.contains_key("ENCP_DAQ"));
    assert_eq!(
        an.args.last().map(String::as_str),
        Some(dir.path().join("stage/an1").to_str().unwrap()),
        "a read without local_file goes to read_dir"
    );
    let w = run_of(src.to_str().unwrap());
    assert!(w.args.windows(2).any(|p| p == ["--storage-group", "cms"]));
    assert_eq!(w.args.last().map(String::as_str), Some("/pnfs/test/w1"));
    // A staged file has nothing to release through encp.
    let (status, body) = app
        .post(&format!("/v1/requests/{}/release", ids[1]), &json!({}))
        .await;
    assert_eq!(status, 409, "{body}");
    assert!(body["error"]
        .as_str()
        .unwrap()
        .contains("keeps no disk copies"));
    app.stop().await;
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn killing_the_broker_stops_its_encp_runs_and_a_restart_runs_each_request_once() {
    let dir = tempfile::tempdir().unwrap();
    std::fs::create_dir_all(dir.path().join("stage")).unwrap();
    let config = dir.path().join("broker.toml");
    std::fs::write(&config, config_with(&encp_mss(dir.path(), 3))).unwrap();
    let db = dir.path().join("broker.db");
    let names = ["k1", "k2", "k3", "k4"];
    for n in names {
        // Queued at the "library manager" far longer than the test.
        encp_standin::control(dir.path(), n, "queued 60\n").unwrap();
    }
    let mut serve = ServeProcess::start(&config, &db);
    let client = reqwest::Client::new();
    // One batch, one commit: the dispatcher has all four ready when it chooses, so three
    // submitted and one accepted is the process limit choosing, not the fourth arriving late.
    let items: Vec<Value> = names
        .iter()
        .map(|n| request(n, "analysis", "higgs", 1_000))
        .collect();
    let resp = client
        .post(format!("{}/v1/requests/batch", serve.base))
        .json(&json!({ "requests": items }))
        .send()
        .await
        .unwrap();
    assert_eq!(resp.status(), 202);
    let body: Value = resp.json().await.unwrap();
    let ids: Vec<i64> = body["results"]
        .as_array()
        .unwrap()
        .iter()
        .map(|r| r["id"].as_i64().unwrap())
        .collect();
    until(Duration::from_secs(20), "three encp runs", || {
        encp_standin::runs(dir.path()).len() == 3
    })
    .await;
    // No more than max_processes: the fourth waits in the broker. Wait until the broker says
    // so (three submitted, the fourth accepted, the adapter without room), then count the runs.
    wait_fourth_held(&client, &serve.base, &ids).await;
    assert_eq!(encp_standin::runs(dir.path()).len(), 3);
    serve.kill();
    // The broker is gone: each of its encp runs got SIGTERM and stopped.
    until(Duration::from_secs(20), "the orphans stopped", || {
        let runs = encp_standin::runs(dir.path());
        runs.len() == 3 && runs.iter().all(|r| r.end.as_deref() == Some("killed TERM"))
    })
    .await;
    for n in names {
        encp_standin::control(dir.path(), n, "bytes 1000\n").unwrap();
    }
    let serve = ServeProcess::start(&config, &db);
    let final_states = wait_final(&client, &serve.base, &ids, Duration::from_secs(30)).await;
    assert!(
        final_states.iter().all(|r| r["state"] == "done"),
        "{final_states:?}"
    );
    let runs = encp_standin::runs(dir.path());
    for n in names {
        let source = format!("/pnfs/test/{n}");
        let mine: Vec<&Run> = runs
            .iter()
            .filter(|r| r.source() == Some(&source))
            .collect();
        let ok = mine
            .iter()
            .filter(|r| r.end.as_deref() == Some("exit 0"))
            .count();
        assert_eq!(ok, 1, "{n} ran to completion exactly once: {mine:?}");
    }
    let attempts: Vec<i64> = final_states
        .iter()
        .map(|r| r["attempt"].as_i64().unwrap())
        .collect();
    let mut sorted = attempts.clone();
    sorted.sort_unstable();
    assert_eq!(
        sorted,
        [1, 2, 2, 2],
        "the three stopped runs were new attempts"
    );
    // Charged once: the group's usage is exactly the bytes done.
    let usage: i64 = open_db(&db)
        .query_row(
            "SELECT CAST(usage_bytes AS INTEGER) FROM groups WHERE path = 'analysis/higgs'",
            [],
            |r| r.get(0),
        )
        .unwrap();
    assert_eq!(usage, 4_000);
    drop(serve);
}

/// The broker is SIGKILLed after encp said "File ... copied successfully." for a read (the file
/// is complete at the station: encp took it off its delete-at-exit list, Enstore's `src/encp.py`
/// `read_hsm_file`) but before it recorded the transfer's end. encp gets SIGTERM (the parent-
/// death signal) in its last moments and keeps the file. After the restart the adapter knows
/// nothing of that run, so the read comes back as attempt 2; encp would refuse the output that
/// is now there (USERERROR, final) and the request would end failed with its file staged. The
/// adapter finds the complete output of the earlier attempt instead: done, charged once, no
/// second encp run.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_read_copied_before_the_broker_was_killed_is_done_after_the_restart() {
    let dir = tempfile::tempdir().unwrap();
    std::fs::create_dir_all(dir.path().join("stage")).unwrap();
    let config = dir.path().join("broker.toml");
    std::fs::write(&config, config_with(&encp_mss(dir.path(), 3))).unwrap();
    let db = dir.path().join("broker.db");
    // Copied, then encp's final statistics and logging take far longer than the test.
    encp_standin::control(dir.path(), "c1", "bytes 1000\nfinish 600\n").unwrap();
    let mut serve = ServeProcess::start(&config, &db);
    let client = reqwest::Client::new();
    let resp = client
        .post(format!("{}/v1/requests", serve.base))
        .json(&request("c1", "analysis", "higgs", 1_000))
        .send()
        .await
        .unwrap();
    assert_eq!(resp.status(), 202);
    let id = resp.json::<Value>().await.unwrap()["id"].as_i64().unwrap();
    until(
        Duration::from_secs(20),
        "encp said the file was copied",
        || {
            let runs = encp_standin::runs(dir.path());
            runs.len() == 1 && runs[0].copied
        },
    )
    .await;
    serve.kill();
    until(Duration::from_secs(20), "the orphan stopped", || {
        encp_standin::runs(dir.path())[0].end.as_deref() == Some("killed TERM")
    })
    .await;
    let out = dir.path().join("stage").join("c1");
    assert_eq!(
        std::fs::metadata(&out).unwrap().len(),
        1_000,
        "encp kept the copied file"
    );
    let serve = ServeProcess::start(&config, &db);
    let final_states = wait_final(&client, &serve.base, &[id], Duration::from_secs(30)).await;
    let r = &final_states[0];
    assert_eq!(r["state"], "done", "{r}");
    assert_eq!(r["attempt"], 2, "the killed run's attempt was lost: {r}");
    let runs = encp_standin::runs(dir.path());
    assert_eq!(
        runs.len(),
        1,
        "no second encp for a file already staged: {runs:?}"
    );
    assert_eq!(std::fs::metadata(&out).unwrap().len(), 1_000);
    let usage: i64 = open_db(&db)
        .query_row(
            "SELECT CAST(usage_bytes AS INTEGER) FROM groups WHERE path = 'analysis/higgs'",
            [],
            |r| r.get(0),
        )
        .unwrap();
    assert_eq!(usage, 1_000, "charged once");
    drop(serve);
}

/// Issue 18, item 2: the `encp` users run is the user build, which refuses `--storage-group`
/// and `--library` (user2) and `--ignore-fair-share` (admin). `check-config` and `serve` refuse
/// a configuration passing them for the default build, naming key and option; with the build
/// that takes them, or with `--file-family` alone, it passes.
#[test]
fn check_config_and_serve_refuse_options_the_encp_build_does_not_take() {
    let dir = tempfile::tempdir().unwrap();
    std::fs::create_dir_all(dir.path().join("stage")).unwrap();
    let user = encp_mss(dir.path(), 2)
        .replace("build = \"admin\"\n", "")
        .replace(
            "storage_group = \"cms\"",
            "storage_group = \"cms\"\nlibrary = \"LTO8\"",
        )
        .replace(
            "env = { ENCP_DAQ = \"1\" }",
            "env = { ENCP_DAQ = \"1\" }\nargs = [\"--ignore-fair-share\"]",
        );
    let config = dir.path().join("user.toml");
    std::fs::write(&config, config_with(&user)).unwrap();
    let err = check_config_refusal(&config);
    for (key, option) in [
        ("mss.encp.storage_group", "--storage-group"),
        ("mss.encp.library", "--library"),
        (
            "mss.encp.classes.\"datataking\".args",
            "--ignore-fair-share",
        ),
    ] {
        let line = err
            .lines()
            .find(|l| l.contains(key))
            .unwrap_or_else(|| panic!("{key}: {err}"));
        assert!(
            line.contains(option) && line.contains("user build"),
            "{line}"
        );
    }
    // serve refuses it too, before listening.
    let err = serve_refusal(&config, &dir.path().join("b.db"));
    assert!(err.contains("mss.encp.storage_group"), "{err}");
    // The admin build takes them; the user build takes --file-family.
    let admin = user.replace("[mss.encp]\n", "[mss.encp]\nbuild = \"admin\"\n");
    std::fs::write(&config, config_with(&admin)).unwrap();
    crate::helpers::run_ok(&["check-config", config.to_str().unwrap()]);
    let family = encp_mss(dir.path(), 2)
        .replace("build = \"admin\"\n", "")
        .replace("storage_group = \"cms\"", "file_family = \"raw\"");
    std::fs::write(&config, config_with(&family)).unwrap();
    crate::helpers::run_ok(&["check-config", config.to_str().unwrap()]);
}

/// Run `serve` on `config`, insist it exits unsuccessfully before serving, and return its stderr.
fn serve_refusal(config: &Path, db: &Path) -> String {
    let mut serve = Command::new(BIN)
        .args(["serve", "--listen", "127.0.0.1:0", "--config"])
        .arg(config)
        .arg("--db")
        .arg(db)
        .stdout(Stdio::null())
        .stderr(Stdio::piped())
        .spawn()
        .unwrap();
    let start = Instant::now();
    let status = loop {
        if let Some(status) = serve.try_wait().unwrap() {
            break status;
        }
        if start.elapsed() > Duration::from_secs(20) {
            let _ = serve.kill();
            panic!("serve started with a configuration check-config refuses");
        }
        std::thread::sleep(Duration::from_millis(50));
    };
    assert!(!status.success());
    let mut err = String::new();
    std::io::Read::read_to_string(&mut serve.stderr.take().unwrap(), &mut err).unwrap();
    err
}

/// Issue 37, item 7: encp's parser reads `_` as `-` and a unique prefix as the option
/// (Enstore's `src/option.py`). `check-config` and `serve` refuse, naming the key, an option
/// encp would refuse (misspelt, ambiguous) and one the build refuses under another spelling,
/// so none is left to fail every run; a spelling encp takes passes.
#[test]
fn check_config_and_serve_refuse_options_encp_would_refuse_however_spelt() {
    let dir = tempfile::tempdir().unwrap();
    std::fs::create_dir_all(dir.path().join("stage")).unwrap();
    let spelt = |args: &str, class_args: &str| {
        encp_mss(dir.path(), 2)
            .replace("build = \"admin\"\n", "")
            .replace("storage_group = \"cms\"", &format!("args = {args}"))
            .replace(
                "env = { ENCP_DAQ = \"1\" }",
                &format!("env = {{ ENCP_DAQ = \"1\" }}\nargs = {class_args}"),
            )
    };
    let config = dir.path().join("spelt.toml");
    std::fs::write(
        &config,
        config_with(&spelt(
            r#"["--threded", "--stor", "cms"]"#,
            r#"["--ver", "4"]"#,
        )),
    )
    .unwrap();
    let err = check_config_refusal(&config);
    for (key, says) in [
        ("mss.encp.args", "option --threded not recognized"),
        (
            "mss.encp.classes.\"datataking\".args",
            "option --ver not a unique prefix",
        ),
    ] {
        let line = (err.lines())
            .find(|l| l.contains(key))
            .unwrap_or_else(|| panic!("{key}: {err}"));
        assert!(line.contains(says), "{line}");
    }
    let err = serve_refusal(&config, &dir.path().join("b.db"));
    assert!(err.contains("option --threded not recognized"), "{err}");
    // The same options spelt right: `--stor` is --storage-group, which the user build refuses.
    std::fs::write(
        &config,
        config_with(&spelt(r#"["--stor", "cms"]"#, r#"["--verb", "4"]"#)),
    )
    .unwrap();
    let err = check_config_refusal(&config);
    let line = (err.lines())
        .find(|l| l.contains("mss.encp.args"))
        .unwrap_or_else(|| panic!("{err}"));
    assert!(
        line.contains("--storage-group") && line.contains("user build"),
        "{line}"
    );
    assert!(!err.contains("classes"), "`--verb` is --verbose: {err}");
    std::fs::write(
        &config,
        config_with(&spelt(
            r#"["--file_family=raw", "--thr"]"#,
            r#"["--verb", "4"]"#,
        )),
    )
    .unwrap();
    crate::helpers::run_ok(&["check-config", config.to_str().unwrap()]);
}

/// Issue 18, item 5: encp exits 1 for every failure; the broker reads the STATUS line. A
/// STATUS=NOACCESS run ends the request `failed` at its first attempt, with encp's message; a
/// retryable STATUS (NET_ERROR) is retried until the run succeeds, though its path names a
/// fatal error (only the STATUS line counts).
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_noaccess_status_fails_at_once_while_a_retryable_status_is_retried() {
    let dir = tempfile::tempdir().unwrap();
    std::fs::create_dir_all(dir.path().join("stage")).unwrap();
    let mss = format!("retry_max_attempts = 50\n{}", encp_mss(dir.path(), 3));
    let app = TestApp::spawn(&config_with(&mss)).await;
    let standin = dir.path();
    encp_standin::control(
        standin,
        "fatal1",
        "status NOACCESS\nmessage volume VR1234 is NOACCESS\n",
    )
    .unwrap();
    encp_standin::control(
        standin,
        "flakyDELETED",
        "status NET_ERROR\nmessage mover gone\n",
    )
    .unwrap();
    let mut ids = Vec::new();
    for crid in ["fatal1", "flakyDELETED"] {
        let (status, body) = app
            .post("/v1/requests", &request(crid, "analysis", "higgs", 1_000))
            .await;
        assert_eq!(status, 202, "{body}");
        ids.push(body["id"].as_i64().unwrap());
    }
    let runs_of = |name: &str| {
        let source = format!("/pnfs/test/{name}");
        encp_standin::runs(standin)
            .into_iter()
            .filter(|r| r.source() == Some(source.as_str()) && r.end.is_some())
            .count()
    };
    until(Duration::from_secs(30), "flakyDELETED retried", || {
        runs_of("flakyDELETED") >= 2
    })
    .await;
    encp_standin::control(standin, "flakyDELETED", "bytes 1000\n").unwrap();
    let done = app.wait_final(&ids, Duration::from_secs(30)).await;
    assert_eq!(done[0]["state"], "failed", "{done:?}");
    assert_eq!(done[0]["attempt"], 1, "not retried: {done:?}");
    let error = done[0]["last_error"].as_str().unwrap_or_default();
    assert!(
        error.contains("STATUS=NOACCESS") && error.contains("volume VR1234 is NOACCESS"),
        "{error}"
    );
    assert_eq!(runs_of("fatal1"), 1);
    assert_eq!(done[1]["state"], "done", "{done:?}");
    assert!(done[1]["attempt"].as_i64().unwrap() >= 3, "{done:?}");
    app.stop().await;
}

/// Issue 18, item 2: a bfid read needs `--get-bfid`, which the user build refuses: with the
/// default build, `GET /v1/mss` says so and such a request is refused before anything is stored.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn the_user_build_takes_no_bfid_reads() {
    let dir = tempfile::tempdir().unwrap();
    std::fs::create_dir_all(dir.path().join("stage")).unwrap();
    let user = encp_mss(dir.path(), 2)
        .replace("build = \"admin\"\n", "")
        .replace("storage_group = \"cms\"\n", "")
        .replace(
            "ENCP_STANDIN_BUILD = \"admin\"",
            "ENCP_STANDIN_BUILD = \"user\"",
        );
    let app = TestApp::spawn(&config_with(&user)).await;
    let (_, caps) = app.get("/v1/mss").await;
    assert_eq!(caps["bfid"], false, "{caps}");
    let read = with(
        request("b1", "analysis", "higgs", 1_000),
        json!({"bfid": "CDMS105770745000000"}),
    );
    let (status, answer) = app.post("/v1/requests", &read).await;
    assert_eq!(
        (status, answer["field"].as_str()),
        (422, Some("bfid")),
        "{answer}"
    );
    // A plain read runs with the user build's options only.
    encp_standin::control(dir.path(), "p1", "bytes 1000\n").unwrap();
    let (status, body) = app
        .post("/v1/requests", &request("p1", "analysis", "higgs", 1_000))
        .await;
    assert_eq!(status, 202, "{body}");
    let done = app
        .wait_final(&[body["id"].as_i64().unwrap()], Duration::from_secs(20))
        .await;
    assert_eq!(done[0]["state"], "done", "{done:?}");
    app.stop().await;
}

/// Issue 18, items 7 and 8: "Mover called back" needs `--verbose` 4, and `ENCP_DAQ` gives admin
/// priority to every run that has it, so `check-config` refuses verbose 1 to 3 and a global
/// `ENCP_DAQ`, naming the key and why.
#[test]
fn check_config_refuses_a_verbose_that_hides_the_start_and_a_global_encp_daq() {
    let dir = tempfile::tempdir().unwrap();
    std::fs::create_dir_all(dir.path().join("stage")).unwrap();
    let mss = encp_mss(dir.path(), 2).replace(
        "env = { ENCP_STANDIN_DIR",
        "verbose = 2\nenv = { ENCP_DAQ = \"1\", ENCP_STANDIN_DIR",
    );
    let config = dir.path().join("broker.toml");
    std::fs::write(&config, config_with(&mss)).unwrap();
    let err = check_config_refusal(&config);
    let line = |key: &str| {
        err.lines()
            .find(|l| l.contains(key))
            .unwrap_or_else(|| panic!("{key}: {err}"))
            .to_string()
    };
    assert!(
        line("mss.encp.verbose").contains("--verbose 4 and above"),
        "{err}"
    );
    assert!(line("mss.encp.env").contains("per priority class"), "{err}");
}

/// Issue 18, item 9: with `cancel_command` (the admin build), cancelling a request whose encp
/// waits in the library manager's queue stops encp and deletes its ticket there, by the unique
/// id encp printed; `GET /v1/mss` says the cancel reaches the MSS.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn cancelling_a_queued_encp_request_deletes_its_ticket_at_the_library_manager() {
    let dir = tempfile::tempdir().unwrap();
    std::fs::create_dir_all(dir.path().join("stage")).unwrap();
    let record = dir.path().join("delete-work.log");
    let script = dir.path().join("enstore");
    std::fs::write(
        &script,
        format!("#!/bin/sh\necho \"$@\" >> {}\n", record.display()),
    )
    .unwrap();
    std::fs::set_permissions(&script, std::os::unix::fs::PermissionsExt::from_mode(0o755)).unwrap();
    let mss = encp_mss(dir.path(), 2).replace(
        "build = \"admin\"\n",
        &format!(
            "build = \"admin\"\nverbose = 11\ncancel_command = [\"{}\", \"library\", \
             \"--delete-work\", \"{{unique_id}}\", \"{{library}}\"]\n",
            script.display()
        ),
    );
    let app = TestApp::spawn(&config_with(&mss)).await;
    let (_, caps) = app.get("/v1/mss").await;
    assert_eq!(caps["cancel_reaches_mss"], true, "{caps}");
    encp_standin::control(dir.path(), "q1", "queued 60\nlibrary CD-LTO8F1\n").unwrap();
    let (status, body) = app
        .post("/v1/requests", &request("q1", "analysis", "higgs", 1_000))
        .await;
    assert_eq!(status, 202, "{body}");
    let id = body["id"].as_i64().unwrap();
    until(
        Duration::from_secs(20),
        "the ticket at the library manager",
        || {
            encp_standin::runs(dir.path())
                .first()
                .is_some_and(|r| r.ticket.is_some())
        },
    )
    .await;
    let (status, _) = app.delete(&format!("/v1/requests/{id}")).await;
    assert_eq!(status, 202);
    let r = &app.wait_final(&[id], Duration::from_secs(20)).await[0];
    assert_eq!(r["state"], "cancelled", "{r}");
    let run = &encp_standin::runs(dir.path())[0];
    assert_eq!(run.end.as_deref(), Some("killed TERM"));
    let ticket = run.ticket.clone().unwrap();
    assert_eq!(
        std::fs::read_to_string(&record).unwrap().trim(),
        format!("library --delete-work {ticket} CD-LTO8F1")
    );
    app.stop().await;
}

fn fts3_mss(url: &str) -> String {
    format!(
        r#"adapter = "fts3"
[mss.fts3]
url = "{url}"
vo = "cms"
tape_endpoint = "davs://tape.example.org:2880"
read_destination = "davs://disk.example.org:2880/stage"
poll_ms = 50
auth = {{ method = "none" }}
"#
    )
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn fts3_gets_one_job_per_request_at_the_banded_priority_and_cancels_reach_it() {
    let standin = Fts3Standin::start(
        "cms",
        None,
        Plan {
            queued: Duration::from_millis(100),
            active: Duration::from_millis(100),
        },
    )
    .await
    .unwrap();
    let app = TestApp::spawn(&config_with(&fts3_mss(&standin.url))).await;
    let (_, mss) = app.get("/v1/mss").await;
    assert_eq!(mss["priority"], "bands");
    let levels: Vec<i64> = mss["bands"]
        .as_array()
        .unwrap()
        .iter()
        .map(|b| b["level"].as_i64().unwrap())
        .collect();
    assert_eq!(levels, [1, 3, 5], "the default bands: back, front, classes");
    let mut ids = Vec::new();
    for item in [
        request("d1", "datataking", "cms", 5_000),
        request("a1", "analysis", "higgs", 6_000),
        request("a2", "analysis", "higgs", 7_000),
    ] {
        let (status, body) = app.post("/v1/requests", &item).await;
        assert_eq!(status, 202, "{body}");
        ids.push(body["id"].as_i64().unwrap());
    }
    let done = app.wait_final(&ids, Duration::from_secs(30)).await;
    assert!(done.iter().all(|r| r["state"] == "done"), "{done:?}");
    let jobs = standin.jobs();
    assert_eq!(jobs.len(), 3);
    for (r, job) in done.iter().zip(&jobs) {
        assert_eq!(r["mss_id"].as_str(), Some(job.job_id.as_str()));
        assert_eq!(r["bytes_done"].as_u64(), Some(job.files[0].filesize));
        let want = match r["mss_priority"].as_i64().unwrap() {
            100 => 5,
            20 => 3,
            10 => 1,
            other => panic!("priority {other}"),
        };
        assert_eq!(job.priority, want, "{r}");
        // No activity sent (one or none: FTS3's activity shares would re-order the broker's
        // decisions), so FTS3 files the job under "default".
        assert_eq!(job.files[0].activity, "default", "{r}");
    }
    // A request held at FTS3 is cancelled there and refunded.
    let (status, body) = app
        .post(
            "/v1/requests",
            &with(
                request("h1", "analysis", "top", 9_000),
                json!({"file": "/pnfs/hold/h1"}),
            ),
        )
        .await;
    assert_eq!(status, 202, "{body}");
    let id = body["id"].as_i64().unwrap();
    until(Duration::from_secs(20), "the job at FTS3", || {
        standin.jobs().len() == 4
    })
    .await;
    let (status, _) = app.delete(&format!("/v1/requests/{id}")).await;
    assert_eq!(status, 202);
    let r = &app.wait_final(&[id], Duration::from_secs(20)).await[0];
    assert_eq!(
        (r["state"].as_str(), r["charged"].as_u64()),
        (Some("cancelled"), Some(0))
    );
    assert_eq!(
        standin.job_state(&standin.jobs()[3].job_id).as_deref(),
        Some("CANCELED")
    );
    app.stop().await;
}

/// A stand-in plan: `queued_ms` queued, then 100 ms active.
fn fts3_plan(queued_ms: u64) -> Plan {
    Plan {
        queued: Duration::from_millis(queued_ms),
        active: Duration::from_millis(100),
    }
}

/// A reprocessing read of 5,000 bytes for `group` on volume VA at `position`.
fn on_va(crid: &str, group: &str, position: u64) -> Value {
    let mut body = request(crid, "reprocessing", group, 5_000);
    body["volume"] = "VA".into();
    body["position"] = position.into();
    body
}

/// Submit each body to `app`; their ids.
async fn submit_all(app: &TestApp, bodies: Vec<Value>) -> Vec<i64> {
    let mut ids = Vec::new();
    for body in bodies {
        let (status, r) = app.post("/v1/requests", &body).await;
        assert_eq!(status, 202, "{r}");
        ids.push(r["id"].as_i64().unwrap());
    }
    ids
}

/// In `volumes` mode a volume's batch is one FTS3 job (one bring-online request at FTS3), its
/// files in tape-position order, each request named by its file in the job and charged to its
/// own group.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn fts3_gets_a_volume_batch_as_one_job_in_tape_position_order() {
    let standin = Fts3Standin::start("cms", None, fts3_plan(100))
        .await
        .unwrap();
    let config = format!("{}{VOLUMES_AT_3}", config_with(&fts3_mss(&standin.url)));
    let app = TestApp::spawn(&config).await;
    let bodies = vec![
        on_va("a0", "higgs", 30),
        on_va("a1", "top", 10),
        on_va("a2", "higgs", 40),
    ];
    let ids = submit_all(&app, bodies).await;
    let done = app.wait_final(&ids, Duration::from_secs(30)).await;
    assert!(done.iter().all(|r| r["state"] == "done"), "{done:?}");
    let jobs = standin.jobs();
    assert_eq!(jobs.len(), 1, "one job for the volume");
    let files: Vec<&str> = jobs[0].files.iter().map(|f| f.source.as_str()).collect();
    let tape = |crid: &str| format!("davs://tape.example.org:2880/pnfs/test/{crid}");
    assert_eq!(
        files,
        [tape("a1"), tape("a0"), tape("a2")],
        "position order"
    );
    for (r, index) in done.iter().zip([1, 0, 2]) {
        let want = format!("{}:{index}", jobs[0].job_id);
        assert_eq!(r["mss_id"].as_str(), Some(want.as_str()), "{r}");
        assert_eq!(r["charged"].as_u64(), Some(5_000), "{r}");
    }
    app.stop().await;
}

/// A file FTS3 would refuse or misread is refused at the door, naming `file`, and nothing is
/// stored: a relative path (a URL without a path) and a `#` (FTS3's `urlparse` would end the
/// path there and stage another file). Should one reach FTS3 all the same (stored before an
/// upgrade), it fails alone: `adapters/tests/fts3.rs` pins the resend of its job-mates.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn fts3_refuses_at_the_door_a_file_it_would_refuse_or_misread() {
    let standin = Fts3Standin::start("cms", None, fts3_plan(100))
        .await
        .unwrap();
    let app = TestApp::spawn(&config_with(&fts3_mss(&standin.url))).await;
    for (file, says) in [
        ("r1.root", "absolute path"),
        ("/pnfs/test/r1#2", "FTS3 names files by URL"),
        ("/pnfs/test/r 1", "FTS3 names files by URL"),
    ] {
        let mut body = on_va("r1", "top", 2);
        body["file"] = file.into();
        let (status, r) = app.post("/v1/requests", &body).await;
        assert_eq!((status, r["field"].as_str()), (422, Some("file")), "{r}");
        assert!(r["error"].as_str().unwrap().contains(says), "{r}");
    }
    let (status, r) = app.post("/v1/requests", &on_va("r1", "top", 2)).await;
    assert_eq!(status, 202, "{r}");
    assert_eq!(
        r["id"].as_i64(),
        Some(1),
        "nothing was stored before it: {r}"
    );
    app.stop().await;
}

/// `[release]` in `volumes` mode, a volume eligible at 3 files, one in flight.
const VOLUMES_AT_3: &str = "\n[release]\nmode = \"volumes\"\n\n[release.volumes]\n\
    min_volume_bytes = 1000000000000000\nmin_volume_files = 3\nquiet_secs = 3600\n\
    max_age_secs = 7200\nbatch_max_files = 100\nmax_volumes = 1\n";

/// Cancelling one request of a volume batch at FTS3 cancels its file alone
/// (`DELETE /jobs/{id}/files/{file_id}`); its job-mates finish, and it is refunded.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn fts3_cancels_one_request_of_a_batch_by_its_file_and_the_others_finish() {
    let standin = Fts3Standin::start("cms", None, fts3_plan(100))
        .await
        .unwrap();
    let config = format!("{}{VOLUMES_AT_3}", config_with(&fts3_mss(&standin.url)));
    let app = TestApp::spawn(&config).await;
    let mut held = on_va("c1", "higgs", 2);
    // Stays queued at FTS3 until cancelled.
    held["file"] = "/pnfs/hold/c1".into();
    let bodies = vec![on_va("c0", "higgs", 1), held, on_va("c2", "higgs", 3)];
    let ids = submit_all(&app, bodies).await;
    until(Duration::from_secs(20), "the batch's job at FTS3", || {
        standin.jobs().len() == 1
    })
    .await;
    let (status, _) = app.delete(&format!("/v1/requests/{}", ids[1])).await;
    assert_eq!(status, 202);
    let done = app.wait_final(&ids, Duration::from_secs(30)).await;
    let states: Vec<&str> = done.iter().map(|r| r["state"].as_str().unwrap()).collect();
    assert_eq!(states, ["done", "cancelled", "done"], "{done:?}");
    assert_eq!(done[1]["charged"].as_u64(), Some(0), "refunded");
    let job = &standin.jobs()[0];
    let deleted = format!("/jobs/{}/files/{}", job.job_id, job.files[1].file_id);
    assert!(standin
        .calls()
        .iter()
        .any(|c| c.method == "DELETE" && c.path == deleted));
    assert!(!standin
        .calls()
        .iter()
        .any(|c| c.method == "DELETE" && c.path == format!("/jobs/{}", job.job_id)));
    assert_eq!(
        standin.file_states(&job.job_id),
        ["FINISHED", "CANCELED", "FINISHED"]
    );
    app.stop().await;
}

/// FTS3 creates a volume batch's job but its answer is lost (a proxy's 502), and the broker is
/// killed before it tries again: the restarted broker finds the job among its jobs in flight
/// and sends nothing twice; each request ends once, charged once.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_sigkill_after_fts3_took_a_batch_whose_answer_was_lost_queues_nothing_twice() {
    // The job stays queued for 5 s, so it is still in flight when the restarted broker reads
    // its jobs (with 300 ms, a loaded machine's restart found it finished, and a correct
    // resubmission answered 409 "sid duplicated" made a second POST).
    let standin = Fts3Standin::start("cms", None, fts3_plan(5_000))
        .await
        .unwrap();
    standin.lose_next_answers(1);
    let dir = tempfile::tempdir().unwrap();
    let config = format!("{}{VOLUMES_AT_3}", config_with(&fts3_mss(&standin.url)));
    // The first broker waits a minute after an unavailable MSS: it dies before trying again.
    let slow = config.replace(
        "retry_base_ms = 50\nretry_max_ms = 500",
        "retry_base_ms = 60000\nretry_max_ms = 60000",
    );
    assert_ne!(slow, config);
    let (slow_path, path, db) = (
        dir.path().join("slow.toml"),
        dir.path().join("broker.toml"),
        dir.path().join("broker.db"),
    );
    std::fs::write(&slow_path, slow).unwrap();
    std::fs::write(&path, &config).unwrap();
    let mut broker = ServeProcess::start(&slow_path, &db);
    let client = reqwest::Client::new();
    let mut ids = Vec::new();
    for (crid, position) in [("k0", 30), ("k1", 10), ("k2", 40)] {
        let body = on_va(crid, "higgs", position);
        let resp = client
            .post(format!("{}/v1/requests", broker.base))
            .json(&body)
            .send()
            .await
            .unwrap();
        assert_eq!(resp.status().as_u16(), 202);
        ids.push(resp.json::<Value>().await.unwrap()["id"].as_i64().unwrap());
    }
    until(
        Duration::from_secs(20),
        "FTS3 creating the batch's job",
        || standin.jobs().len() == 1,
    )
    .await;
    broker.kill();
    let states: Vec<String> = ids
        .iter()
        .map(|id| {
            open_db(&db)
                .query_row("SELECT state FROM requests WHERE id = ?1", [id], |r| {
                    r.get(0)
                })
                .unwrap()
        })
        .collect();
    assert_eq!(states, ["accepted"; 3], "the submission was never recorded");

    let broker = ServeProcess::start(&path, &db);
    let done = wait_final(&client, &broker.base, &ids, Duration::from_secs(60)).await;
    assert!(done.iter().all(|r| r["state"] == "done"), "{done:?}");
    let jobs = standin.jobs();
    assert_eq!(jobs.len(), 1, "one job, never a second");
    let posts = (standin.calls().iter())
        .filter(|c| c.method == "POST" && c.path == "/jobs")
        .count();
    assert_eq!(posts, 1, "found among the jobs in flight, not sent again");
    for (r, index) in done.iter().zip([1, 0, 2]) {
        let want = format!("{}:{index}", jobs[0].job_id);
        assert_eq!(r["mss_id"].as_str(), Some(want.as_str()), "{r}");
        assert_eq!(r["charged"].as_u64(), Some(5_000), "{r}");
    }
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn fts3_419_for_a_delegation_about_to_expire_is_retried_and_succeeds_once_renewed() {
    let standin = Fts3Standin::start("cms", None, Plan::default())
        .await
        .unwrap();
    standin.set_delegation(Delegation::Expiring);
    let app = TestApp::spawn(&config_with(&fts3_mss(&standin.url))).await;
    let (status, body) = app
        .post("/v1/requests", &request("r1", "analysis", "higgs", 5_000))
        .await;
    assert_eq!(status, 202, "{body}");
    let id = body["id"].as_i64().unwrap();
    let submissions = || {
        standin
            .calls()
            .iter()
            .filter(|c| c.method == "POST" && c.path == "/jobs")
            .count()
    };
    until(
        Duration::from_secs(20),
        "the broker trying again after 419",
        || submissions() >= 3,
    )
    .await;
    let (_, r) = app.get(&format!("/v1/requests/{id}")).await;
    assert_eq!(r["state"], "accepted", "a 419 is not a refusal: {r}");
    assert!(standin.jobs().is_empty());
    // The operator renews the proxy (fts-delegation-init): the next try goes through.
    standin.set_delegation(Delegation::Valid);
    let r = &app.wait_final(&[id], Duration::from_secs(30)).await[0];
    assert_eq!(r["state"], "done", "{r}");
    assert_eq!(standin.jobs().len(), 1);
    assert_eq!(
        r["mss_id"].as_str(),
        Some(standin.jobs()[0].job_id.as_str())
    );
    app.stop().await;
}

/// A priority-class read of a file a fair-share read is staging does not ride on it (no class
/// inversion), so both reach FTS3, to one destination. With `CheckDuplicates` for the VO, FTS3
/// answers the second 409 "The submission is duplicated" while the first is in flight: the
/// broker keeps it, sends it again, and once the first has ended FTS3 takes it, at the same
/// attempt.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_read_fts3_refuses_while_another_holds_its_destination_goes_once_that_one_ends() {
    let standin = Fts3Standin::start("cms", None, fts3_plan(100))
        .await
        .unwrap();
    standin.set_check_duplicates(&["cms"]);
    let app = TestApp::spawn(&config_with(&fts3_mss(&standin.url))).await;
    let file = json!({"file": "/pnfs/hold/x"});
    let fair = with(request("a1", "analysis", "higgs", 5_000), file.clone());
    let ids = submit_all(&app, vec![fair]).await;
    until(Duration::from_secs(20), "the first job at FTS3", || {
        standin.jobs().len() == 1
    })
    .await;
    let first = standin.jobs()[0].job_id.clone();
    let daq = with(request("d1", "datataking", "cms", 5_000), file);
    let (status, body) = app.post("/v1/requests", &daq).await;
    assert_eq!(status, 202, "{body}");
    assert_ne!(body["state"], "riding", "{body}");
    let id = body["id"].as_i64().unwrap();
    let submissions = || {
        (standin.calls().iter())
            .filter(|c| c.method == "POST" && c.path == "/jobs")
            .count()
    };
    // The 409, then at least one more try, answered by the adapter's hold on the destination
    // without a POST (each `submit_batch` with a deferral counts in `outcome="error"`).
    let mut tries = 0;
    for _ in 0..400 {
        tries = submit_batches_deferred(&app).await;
        if tries >= 2 {
            break;
        }
        tokio::time::sleep(Duration::from_millis(50)).await;
    }
    assert!(tries >= 2, "the broker tried {tries} times after the 409");
    let (_, r) = app.get(&format!("/v1/requests/{id}")).await;
    assert_eq!(
        r["state"], "accepted",
        "a destination held is no refusal: {r}"
    );
    assert_eq!(standin.jobs().len(), 1);
    assert_eq!(
        submissions(),
        2,
        "the tries after the 409 waited for the hold"
    );
    // A deferral is an answer: FTS3 is up, and so is the broker.
    let (status, ready) = app.get("/readyz").await;
    assert_eq!(status, 200, "{ready}");
    standin.release_held(&first);
    until(Duration::from_secs(20), "the second job at FTS3", || {
        standin.jobs().len() == 2
    })
    .await;
    standin.release_held(&standin.jobs()[1].job_id);
    let done = app.wait_final(&[ids[0], id], Duration::from_secs(30)).await;
    for r in &done {
        assert_eq!(
            (r["state"].as_str(), r["attempt"].as_i64()),
            (Some("done"), Some(1)),
            "{r}"
        );
    }
    assert_eq!(
        done[1]["mss_id"].as_str(),
        Some(standin.jobs()[1].job_id.as_str())
    );
    app.stop().await;
}

/// Reads FTS3 defers (their destinations held by transfers not ended) do not hold up the ready
/// requests behind them. With two transfers per submission, two data-taking reads (the highest
/// MSS priority, so first in every batch) to destinations two fair-share recalls hold would
/// otherwise fill every batch for as long as the recalls last, and a third read never go.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn reads_fts3_defers_do_not_hold_up_the_ready_requests_behind_them() {
    let standin = Fts3Standin::start("cms", None, fts3_plan(100))
        .await
        .unwrap();
    standin.set_check_duplicates(&["cms"]);
    let mss = format!("submit_batch = 2\n{}", fts3_mss(&standin.url));
    let app = TestApp::spawn(&config_with(&mss)).await;
    let files = ["/pnfs/hold/a", "/pnfs/hold/b"];
    let recalls: Vec<Value> = (files.iter().enumerate())
        .map(|(i, f)| {
            with(
                request(&format!("r{i}"), "analysis", "higgs", 5_000),
                json!({ "file": f }),
            )
        })
        .collect();
    let mut ids = submit_all(&app, recalls).await;
    until(Duration::from_secs(20), "both recalls at FTS3", || {
        standin.jobs().len() == 2
    })
    .await;
    let daq: Vec<Value> = (files.iter().enumerate())
        .map(|(i, f)| {
            with(
                request(&format!("d{i}"), "datataking", "cms", 5_000),
                json!({ "file": f }),
            )
        })
        .collect();
    ids.extend(submit_all(&app, daq).await);
    // The data-taking reads posted at least once (FTS3 answers a 409, the destinations held)
    // before the third read is asked for.
    until(Duration::from_secs(20), "the two reads deferred", || {
        let calls = standin.calls();
        let refused = (calls.iter()).filter(|c| c.method == "POST" && c.path == "/jobs");
        refused.count() >= 3
    })
    .await;
    let other = with(
        request("t1", "analysis", "top", 5_000),
        json!({"file": "/pnfs/other/c"}),
    );
    ids.extend(submit_all(&app, vec![other]).await);
    until(Duration::from_secs(20), "the third read at FTS3", || {
        (standin.jobs().iter()).any(|j| j.files.iter().any(|f| f.source.ends_with("/pnfs/other/c")))
    })
    .await;
    for id in &ids[2..4] {
        let (_, r) = app.get(&format!("/v1/requests/{id}")).await;
        assert_eq!(r["state"], "accepted", "still deferred: {r}");
        assert_eq!(r["attempt"], 1, "{r}");
    }
    for job in standin.jobs().iter().take(2) {
        standin.release_held(&job.job_id);
    }
    until(
        Duration::from_secs(20),
        "the deferred reads at FTS3",
        || standin.jobs().len() == 5,
    )
    .await;
    for job in standin.jobs() {
        standin.release_held(&job.job_id);
    }
    for r in app.wait_final(&ids, Duration::from_secs(30)).await {
        assert_eq!(
            (r["state"].as_str(), r["attempt"].as_i64()),
            (Some("done"), Some(1)),
            "{r}"
        );
    }
    app.stop().await;
}

/// How many `submit_batch` calls `/metrics` counts as not all taken (a deferral or a refusal).
async fn submit_batches_deferred(app: &TestApp) -> u64 {
    let text = (app.client.get(format!("{}/metrics", app.base)).send().await)
        .unwrap()
        .text()
        .await
        .unwrap();
    text.lines()
        .filter(|l| {
            l.starts_with("mssbroker_mss_call_seconds_count{")
                && l.contains("call=\"submit_batch\"")
                && l.contains("outcome=\"error\"")
        })
        .filter_map(|l| l.rsplit(' ').next()?.parse::<u64>().ok())
        .sum()
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn an_fts3_staging_failure_without_recoverable_is_final_when_its_reason_says_so() {
    let standin = Fts3Standin::start(
        "cms",
        None,
        Plan {
            queued: Duration::from_millis(100),
            active: Duration::from_millis(100),
        },
    )
    .await
    .unwrap();
    let app = TestApp::spawn(&config_with(&fts3_mss(&standin.url))).await;
    let mut ids = Vec::new();
    for (cid, file) in [("m1", "/pnfs/fatal/m1"), ("t1", "/pnfs/fail/t1")] {
        let (status, body) = app
            .post(
                "/v1/requests",
                &with(
                    request(cid, "analysis", "higgs", 5_000),
                    json!({"file": file}),
                ),
            )
            .await;
        assert_eq!(status, 202, "{body}");
        ids.push(body["id"].as_i64().unwrap());
    }
    let finals = app.wait_final(&ids, Duration::from_secs(60)).await;
    // FTS3 leaves `recoverable` null for a staging failure: "No such file or directory" is
    // final at the first attempt, "Connection timed out" is retried to the last.
    let missing = &finals[0];
    assert_eq!(
        (missing["state"].as_str(), missing["attempt"].as_i64()),
        (Some("failed"), Some(1)),
        "{missing}"
    );
    assert!(
        missing["last_error"]
            .as_str()
            .is_some_and(|e| e.contains("No such file or directory")),
        "{missing}"
    );
    let timed_out = &finals[1];
    assert_eq!(timed_out["state"], "failed", "{timed_out}");
    assert!(timed_out["attempt"].as_i64() > Some(1), "{timed_out}");
    app.stop().await;
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn tape_rest_stages_in_held_mode_refuses_writes_and_releases_staged_files() {
    let standin = TapeRestStandin::start(
        None,
        Plan {
            queued: Duration::from_millis(100),
            active: Duration::from_millis(100),
        },
    )
    .await
    .unwrap();
    let mss = format!(
        "adapter = \"tape_rest\"\n[mss.tape_rest]\nurl = \"{}\"\npoll_ms = 50\n\
         auth = {{ method = \"none\" }}\n",
        standin.url
    );
    let config =
        config_with(&mss).replace("[mss]", "[release]\nmode = \"held\"\nlimit = 2\n\n[mss]");
    let app = TestApp::spawn(&config).await;
    let write = with(request("w", "mc", "x", 10), json!({"direction": "write"}));
    let (status, body) = app.post("/v1/requests", &write).await;
    assert_eq!(
        (status, body["field"].as_str()),
        (422, Some("direction")),
        "{body}"
    );
    let mut ids = Vec::new();
    for crid in ["s1", "s2", "s3", "s4"] {
        let (status, body) = app
            .post("/v1/requests", &request(crid, "analysis", "top", 1_500))
            .await;
        assert_eq!(status, 202, "{body}");
        ids.push(body["id"].as_i64().unwrap());
    }
    let done = app.wait_final(&ids, Duration::from_secs(30)).await;
    assert!(done.iter().all(|r| r["state"] == "done"), "{done:?}");
    assert!(done.iter().all(|r| r["bytes_done"] == 1_500));
    // Held mode with limit 2: never more than two files staged in one request.
    let requests = standin.requests();
    assert!(requests.iter().all(|r| r.files.len() <= 2), "{requests:?}");
    let staged: usize = requests.iter().map(|r| r.files.len()).sum();
    assert_eq!(staged, 4);
    // Keyed by the sitename of the stand-in's discovery document.
    assert_eq!(
        requests[0].files[0]["targetedMetadata"],
        json!({"standin-tape-site": {"activity": "analysis/top"}})
    );
    // Release the first file's disk copy.
    let (status, body) = app
        .post(&format!("/v1/requests/{}/release", ids[0]), &json!({}))
        .await;
    assert_eq!(
        (status, &body),
        (200, &json!({"id": ids[0], "released": true}))
    );
    let released: Vec<String> = standin
        .requests()
        .iter()
        .flat_map(|r| r.released.iter().cloned())
        .collect();
    assert_eq!(released, ["/pnfs/test/s1"]);
    // A request that is not a finished read has nothing to release.
    let (status, body) = app
        .post(
            "/v1/requests",
            &with(request("h", "mc", "x", 5), json!({"file": "/pnfs/hold/h"})),
        )
        .await;
    assert_eq!(status, 202, "{body}");
    let (status, body) = app
        .post(&format!("/v1/requests/{}/release", body["id"]), &json!({}))
        .await;
    assert_eq!(status, 409, "{body}");
    app.stop().await;
}

/// A broker in held mode in front of a Tape REST stand-in started with `options`.
async fn tape_rest_app(options: TapeRestOptions) -> (TapeRestStandin, TestApp) {
    let plan = Plan {
        queued: Duration::from_millis(100),
        active: Duration::from_millis(100),
    };
    let standin = TapeRestStandin::start_with(None, plan, options)
        .await
        .unwrap();
    let mss = format!(
        "adapter = \"tape_rest\"\nretry_max_attempts = 3\n[mss.tape_rest]\nurl = \"{}\"\n\
         poll_ms = 50\nauth = {{ method = \"none\" }}\n",
        standin.url
    );
    let config =
        config_with(&mss).replace("[mss]", "[release]\nmode = \"held\"\nlimit = 4\n\n[mss]");
    (standin, TestApp::spawn(&config).await)
}

/// Post a read of `file`; its id.
async fn post_read(app: &TestApp, crid: &str, file: &str) -> i64 {
    let body = with(
        request(crid, "analysis", "top", 1_500),
        json!({"file": file}),
    );
    let (status, body) = app.post("/v1/requests", &body).await;
    assert_eq!(status, 202, "{body}");
    body["id"].as_i64().unwrap()
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn an_eos_recall_failure_ends_failed_with_the_servers_message() {
    // EOS-CTA answers {path, onDisk, error} with no state: the error must fail the file, not
    // leave it waiting forever with its slot held.
    let (standin, app) = tape_rest_app(TapeRestOptions {
        form: Form::Eos,
        ..TapeRestOptions::default()
    })
    .await;
    let failing = post_read(&app, "f", "/eos/fail/f.root").await;
    let fine = post_read(&app, "ok", "/eos/cta/ok.root").await;
    let done = app
        .wait_final(&[failing, fine], Duration::from_secs(30))
        .await;
    let f = &done[0];
    assert_eq!(
        (
            f["state"].as_str(),
            f["attempt"].as_i64(),
            f["charged"].as_u64()
        ),
        (Some("failed"), Some(3), Some(0)),
        "{f}"
    );
    let why = f["last_error"].as_str().unwrap();
    assert!(
        why.contains("staging failed: tape drive error: medium error"),
        "{why}"
    );
    assert_eq!(done[1]["state"], "done", "{}", done[1]);
    // Every stage request ended: all deleted.
    until(Duration::from_secs(10), "stage requests deleted", || {
        standin.requests().iter().all(|r| r.deleted)
    })
    .await;
    app.stop().await;
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn archiveinfo_finishes_files_on_disk_and_fails_lost_ones_without_staging() {
    let (standin, app) = tape_rest_app(TapeRestOptions::default()).await;
    let lost = post_read(&app, "l", "/pnfs/lost/l.root").await;
    let on_disk = post_read(&app, "d", "/pnfs/disk/d.root").await;
    let missing = post_read(&app, "m", "/pnfs/fatal/m.root").await;
    let done = app
        .wait_final(&[lost, on_disk, missing], Duration::from_secs(30))
        .await;
    let state = |r: &Value| {
        (
            r["state"].as_str().map(str::to_string),
            r["attempt"].as_i64(),
        )
    };
    assert_eq!(
        state(&done[0]),
        (Some("failed".into()), Some(1)),
        "{}",
        done[0]
    );
    assert!(done[0]["last_error"].as_str().unwrap().contains("LOST"));
    assert_eq!(
        state(&done[1]),
        (Some("done".into()), Some(1)),
        "{}",
        done[1]
    );
    assert_eq!(done[1]["bytes_done"], 1_500);
    assert_eq!(
        state(&done[2]),
        (Some("failed".into()), Some(1)),
        "{}",
        done[2]
    );
    assert!(done[2]["last_error"]
        .as_str()
        .unwrap()
        .contains("No such file or directory"));
    assert!(standin.requests().is_empty(), "nothing was staged");
    app.stop().await;
}

#[test]
fn check_config_refuses_a_disk_lifetime_dcache_cannot_parse() {
    // dCache reads diskLifetime with Java's Duration.parse: P2W would fail every stage request.
    let dir = tempfile::tempdir().unwrap();
    let file = dir.path().join("broker.toml");
    let write = |lifetime: &str| {
        let mss = format!(
            "adapter = \"tape_rest\"\n[mss.tape_rest]\nurl = \"https://dcache.example.org:3880/api/v1/tape\"\n\
             disk_lifetime = \"{lifetime}\"\nauth = {{ method = \"none\" }}\n"
        );
        let config = config_with(&mss).replace("[mss]", "[release]\nmode = \"held\"\n\n[mss]");
        std::fs::write(&file, config).unwrap();
        file.to_str().unwrap().to_string()
    };
    let err = check_config_refusal(Path::new(&write("P2W")));
    assert!(
        err.contains("mss.tape_rest.disk_lifetime")
            && err.contains("weeks")
            && err.contains("Duration.parse"),
        "{err}"
    );
    run_ok(&["check-config", &write("P14D")]);
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_path_the_tape_server_normalises_is_done_at_the_first_attempt() {
    // The server answers `/pnfs/a/b/c.root`; matched only raw, the file would be counted lost
    // by the stale sweep and staged again, attempt after attempt.
    let (standin, app) = tape_rest_app(TapeRestOptions::default()).await;
    let id = post_read(&app, "n", "/pnfs/a//b/c.root").await;
    let done = app.wait_final(&[id], Duration::from_secs(30)).await;
    assert_eq!(
        (done[0]["state"].as_str(), done[0]["attempt"].as_i64()),
        (Some("done"), Some(1)),
        "{}",
        done[0]
    );
    let requests = standin.requests();
    assert_eq!(requests.len(), 1, "staged once");
    assert_eq!(requests[0].files[0]["path"], "/pnfs/a/b/c.root");
    app.stop().await;
}

/// A volume batch's job is created at FTS3 but its answer is lost; before the broker sends the
/// batch again a job-mate (not the job's lead) is cancelled. The broker takes it as at the MSS
/// with no MSS id and settles it by key. FTS3 holds it in the batch's job: it must not end
/// cancelled and refunded while FTS3 still has its file to copy.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_cancelled_job_mate_of_a_batch_whose_answer_was_lost_is_not_refunded_while_fts3_holds_it()
{
    let standin = Fts3Standin::start("cms", None, fts3_plan(100))
        .await
        .unwrap();
    standin.lose_next_answers(1);
    let config = format!("{}{VOLUMES_AT_3}", config_with(&fts3_mss(&standin.url)));
    // After the lost answer the submit loop waits a minute: the cancel comes before the resend.
    let slow = config.replace(
        "retry_base_ms = 50\nretry_max_ms = 500",
        "retry_base_ms = 60000\nretry_max_ms = 60000",
    );
    assert_ne!(slow, config);
    let app = TestApp::spawn(&slow).await;
    let mut held = on_va("j1", "higgs", 2);
    held["file"] = "/pnfs/hold/j1".into();
    let ids = submit_all(
        &app,
        vec![on_va("j0", "higgs", 1), held, on_va("j2", "higgs", 3)],
    )
    .await;
    until(Duration::from_secs(20), "the batch's job at FTS3", || {
        standin.jobs().len() == 1
    })
    .await;
    let (_, r) = app.get(&format!("/v1/requests/{}", ids[1])).await;
    assert_eq!(r["state"], "accepted", "the answer was lost: {r}");
    let (status, _) = app.delete(&format!("/v1/requests/{}", ids[1])).await;
    assert_eq!(status, 202);
    let r = &app.wait_final(&ids[1..2], Duration::from_secs(20)).await[0];
    let job = &standin.jobs()[0];
    let at_fts3 = standin.file_states(&job.job_id)[1].clone();
    assert!(
        r["state"] != "cancelled" || at_fts3 == "CANCELED",
        "request {} ended {} charged {}, while FTS3 holds its file {at_fts3}",
        ids[1],
        r["state"],
        r["charged"]
    );
    app.stop().await;
}
