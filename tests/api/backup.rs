//! `mssbroker backup` against the real `serve` process under load: the copy opens, passes
//! SQLite's integrity check, and holds every request acknowledged before the backup began; an
//! existing destination is refused and left as it was.

use std::collections::HashMap;
use std::path::Path;
use std::process::Command;
use std::sync::atomic::{AtomicBool, Ordering};
use std::sync::{Arc, Mutex};
use std::time::Duration;

use serde_json::Value;

use crate::helpers::{open_db, request, run_ok, test_config, ServeProcess, BIN};

/// crid -> id of every request answered 202.
type Acks = Arc<Mutex<HashMap<String, i64>>>;

/// Submit requests until `stop`, recording each 202.
fn load(
    base: String,
    worker: usize,
    acks: Acks,
    stop: Arc<AtomicBool>,
) -> tokio::task::JoinHandle<()> {
    let client = reqwest::Client::new();
    tokio::spawn(async move {
        let modes = [("analysis", "higgs"), ("analysis", "top"), ("mc", "x")];
        let mut n = 0usize;
        while !stop.load(Ordering::Relaxed) {
            n += 1;
            let (mode, group) = modes[n % modes.len()];
            let crid = format!("b{worker}-{n}");
            let body = request(&crid, mode, group, 1_000_000_000);
            let Ok(resp) = client
                .post(format!("{base}/v1/requests"))
                .json(&body)
                .send()
                .await
            else {
                return;
            };
            let status = resp.status().as_u16();
            let Ok(v) = resp.json::<Value>().await else {
                return;
            };
            if status == 202 {
                let id = v["id"].as_i64().expect("an id with the 202");
                acks.lock().expect("acks").insert(crid, id);
            } else {
                // Busy: let the writer catch up before the next one.
                tokio::time::sleep(Duration::from_millis(20)).await;
            }
        }
    })
}

fn backup_cmd(db: &Path, to: &Path) -> std::process::Output {
    Command::new(BIN)
        .arg("backup")
        .arg("--db")
        .arg(db)
        .arg("--to")
        .arg(to)
        // Small steps, so the copy spans many of the broker's commits.
        .args(["--pages-per-step", "2", "--pause-ms", "2"])
        .output()
        .expect("run mssbroker backup")
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_backup_under_load_holds_every_acknowledged_request() {
    let dir = tempfile::tempdir().expect("tempdir");
    let config = dir.path().join("broker.toml");
    std::fs::write(&config, test_config(None)).expect("config");
    let db = dir.path().join("broker.db");
    let copy = dir.path().join("copy.db");
    let broker = ServeProcess::start(&config, &db);

    let acks: Acks = Arc::default();
    let stop = Arc::new(AtomicBool::new(false));
    let workers: Vec<_> = (0..4)
        .map(|w| load(broker.base.clone(), w, acks.clone(), stop.clone()))
        .collect();
    let deadline = tokio::time::Instant::now() + Duration::from_secs(60);
    while acks.lock().expect("acks").len() < 200 {
        assert!(
            tokio::time::Instant::now() < deadline,
            "only {} requests acknowledged in 60 s",
            acks.lock().expect("acks").len()
        );
        tokio::time::sleep(Duration::from_millis(5)).await;
    }

    // Everything acknowledged before the backup starts must be in the copy.
    let before = acks.lock().expect("acks").clone();
    let out = {
        let (db, copy) = (db.clone(), copy.clone());
        tokio::task::spawn_blocking(move || backup_cmd(&db, &copy))
            .await
            .expect("backup task")
    };
    let during = acks.lock().expect("acks").len() - before.len();
    stop.store(true, Ordering::Relaxed);
    for w in workers {
        w.await.expect("load task");
    }
    let stdout = String::from_utf8_lossy(&out.stdout);
    assert!(
        out.status.success(),
        "backup: {}",
        String::from_utf8_lossy(&out.stderr)
    );
    assert!(
        stdout.contains(" pages, ") && stdout.contains(" bytes, "),
        "{stdout}"
    );
    eprintln!("{stdout}{during} requests acknowledged while the backup ran");

    let (config_s, copy_s) = (
        config.to_str().expect("utf-8"),
        copy.to_str().expect("utf-8"),
    );
    run_ok(&["shares", "--config", config_s, "--db", copy_s]);
    assert!(mssbroker::ledger::LedgerReader::open(&copy).is_ok());
    let conn = open_db(&copy);
    let check: String = conn
        .query_row("PRAGMA integrity_check", [], |r| r.get(0))
        .expect("integrity_check");
    assert_eq!(check, "ok");
    let mut stmt = conn
        .prepare("SELECT client_request_id FROM requests WHERE id = ?1")
        .expect("prepare");
    let missing: Vec<_> = before
        .iter()
        .filter(|(crid, id)| {
            stmt.query_row([**id], |r| r.get::<_, String>(0))
                .ok()
                .as_deref()
                != Some(crid.as_str())
        })
        .collect();
    assert!(
        missing.is_empty(),
        "{} of {} acknowledged requests missing from the copy: {:?}",
        missing.len(),
        before.len(),
        missing.iter().take(5).collect::<Vec<_>>()
    );
    drop(broker);
}

#[test]
fn an_existing_destination_or_a_missing_source_is_refused() {
    let dir = tempfile::tempdir().expect("tempdir");
    let db = dir.path().join("broker.db");
    let to = dir.path().join("copy.db");

    let out = backup_cmd(&db, &to);
    let err = String::from_utf8_lossy(&out.stderr);
    assert!(
        !out.status.success() && err.contains("no database at"),
        "{err}"
    );
    assert!(!to.exists());

    // A real ledger file, from a broker started and stopped on it.
    let config = dir.path().join("broker.toml");
    std::fs::write(&config, test_config(None)).expect("config");
    drop(ServeProcess::start(&config, &db));
    std::fs::write(&to, b"an older backup").expect("write");
    let out = backup_cmd(&db, &to);
    let err = String::from_utf8_lossy(&out.stderr);
    assert!(
        !out.status.success() && err.contains("already exists"),
        "{err}"
    );
    assert_eq!(std::fs::read(&to).expect("read"), b"an older backup");
}

/// The table report's heading prints its instants as given (upper-case `T` and `Z`).
#[test]
fn the_report_heading_keeps_the_instants_case() {
    let dir = tempfile::tempdir().expect("tempdir");
    let config = dir.path().join("broker.toml");
    std::fs::write(&config, test_config(None)).expect("config");
    let db = dir.path().join("broker.db");
    drop(ServeProcess::start(&config, &db));
    let (config_s, db_s) = (config.to_str().expect("utf-8"), db.to_str().expect("utf-8"));
    let out = run_ok(&[
        "report",
        "--config",
        config_s,
        "--db",
        db_s,
        "--since",
        "2026-11-16T02:00:00Z",
        "--until",
        "2026-11-16T05:00:00Z",
    ]);
    let first = out.lines().next().unwrap_or_default();
    assert!(
        first.starts_with("report 2026-11-16T02:00:00") && first.contains(".. 2026-11-16T05:00:00"),
        "{first}"
    );
}

/// Given a PostgreSQL database (as `serve --db` takes one), `backup` refuses before touching
/// anything: exit 1, a message naming PostgreSQL's own tools and where the docs say more,
/// never the URL's password, and no file written (the URL is not taken for a path: the
/// working directory stays empty).
#[test]
fn a_postgresql_database_is_refused_naming_its_tools_and_nothing_is_written() {
    let dir = tempfile::tempdir().expect("tempdir");
    let url = "postgresql://broker:s3cret-pw@127.0.0.1:5432/mss";
    for (db, to) in [(url, "copy.db"), ("broker.db", url)] {
        let out = Command::new(BIN)
            .current_dir(dir.path())
            .args(["backup", "--db", db, "--to", to])
            .output()
            .expect("run mssbroker backup");
        let err = String::from_utf8_lossy(&out.stderr);
        assert_eq!(out.status.code(), Some(1), "{err}");
        for named in ["pg_dump", "pg_basebackup", "PITR", "docs/ha.md"] {
            assert!(err.contains(named), "{named}: {err}");
        }
        let flag = if db == url { "--db" } else { "--to" };
        assert!(err.contains(flag), "{flag}: {err}");
        assert!(!err.contains("s3cret-pw"), "{err}");
        let left: Vec<_> = std::fs::read_dir(dir.path()).expect("dir").collect();
        assert!(left.is_empty(), "written: {left:?}");
    }
}
