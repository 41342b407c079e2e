//! The command line: check-config, submit and status against a running `serve`.

use std::process::{Command, Stdio};

use crate::helpers::BIN;

#[test]
fn check_config_prints_the_tree_or_names_the_keys() {
    let shipped = concat!(env!("CARGO_MANIFEST_DIR"), "/config/broker.toml");
    let out = Command::new(BIN)
        .args(["check-config", shipped])
        .output()
        .unwrap();
    assert!(out.status.success());
    let text = String::from_utf8(out.stdout).unwrap();
    assert!(text.contains("higgs") && text.contains("(1/15)"), "{text}");
    let dir = tempfile::tempdir().unwrap();
    let bad = dir.path().join("bad.toml");
    let broken = std::fs::read_to_string(shipped)
        .unwrap()
        .replace("p_back = 10", "p_back = 50");
    std::fs::write(&bad, broken).unwrap();
    let out = Command::new(BIN)
        .arg("check-config")
        .arg(&bad)
        .output()
        .unwrap();
    assert_eq!(out.status.code(), Some(1));
    let err = String::from_utf8(out.stderr).unwrap();
    assert!(err.contains("policy.p_back"), "{err}");
}

#[test]
fn submit_and_status_talk_to_a_running_broker() {
    let dir = tempfile::tempdir().unwrap();
    let mut serve = Command::new(BIN)
        .args(["serve", "--listen", "127.0.0.1:0", "--db"])
        .arg(dir.path().join("b.db"))
        .current_dir(env!("CARGO_MANIFEST_DIR"))
        .stdout(Stdio::piped())
        .stderr(Stdio::null())
        .spawn()
        .unwrap();
    let mut line = String::new();
    std::io::BufRead::read_line(
        &mut std::io::BufReader::new(serve.stdout.take().unwrap()),
        &mut line,
    )
    .unwrap();
    let url = line.trim().rsplit(' ').next().unwrap().to_string();
    let out = Command::new(BIN)
        .env("MSSBROKER_TOKEN", "demo-station-fnal-cms")
        .args([
            "submit",
            "--url",
            &url,
            "--client-request-id",
            "cli-1",
            "--station",
            "fnal-cms",
            "--user",
            "u",
        ])
        .args([
            "--file",
            "/pnfs/x",
            "--size-bytes",
            "1000",
            "--access-mode",
            "datataking",
            "--physics-group",
            "daq",
        ])
        .output()
        .unwrap();
    assert!(
        out.status.success(),
        "{}",
        String::from_utf8_lossy(&out.stderr)
    );
    let answer: serde_json::Value = serde_json::from_slice(&out.stdout).unwrap();
    assert_eq!(answer["class"], "priority");
    let id = answer["id"].as_i64().unwrap();
    let out = Command::new(BIN)
        .args(["status", &id.to_string(), "--url", &url])
        .args(["--token", "demo-station-fnal-cms"])
        .output()
        .unwrap();
    assert!(out.status.success());
    let status: serde_json::Value = serde_json::from_slice(&out.stdout).unwrap();
    assert_eq!(status["client_request_id"], "cli-1");
    // Without a token the broker answers 401 and the command exits 1.
    let out = Command::new(BIN)
        .args(["status", &id.to_string(), "--url", &url])
        .env_remove("MSSBROKER_TOKEN")
        .output()
        .unwrap();
    assert_eq!(out.status.code(), Some(1));
    let answer: serde_json::Value = serde_json::from_slice(&out.stdout).unwrap();
    assert_eq!(answer["field"], "authorization");
    // A refused submission exits 1 and prints the broker's error naming the field.
    let out = Command::new(BIN)
        .env("MSSBROKER_TOKEN", "demo-station-fnal-cms")
        .args([
            "submit",
            "--url",
            &url,
            "--client-request-id",
            "cli-2",
            "--station",
            "fnal-cms",
            "--user",
            "u",
        ])
        .args([
            "--file",
            "/pnfs/x",
            "--size-bytes",
            "0",
            "--access-mode",
            "mc",
            "--physics-group",
            "top",
        ])
        .output()
        .unwrap();
    assert_eq!(out.status.code(), Some(1));
    let answer: serde_json::Value = serde_json::from_slice(&out.stdout).unwrap();
    assert_eq!(answer["field"], "size_bytes");
    let _ = serve.kill();
    let _ = serve.wait();
}

/// A database from a newer build is refused by every command that opens it, with the path and
/// both versions, and is left as it was.
#[test]
fn a_database_from_a_newer_build_is_refused_by_every_command() {
    let dir = tempfile::tempdir().unwrap();
    let db = dir.path().join("newer.db");
    {
        let conn = rusqlite::Connection::open(&db).unwrap();
        conn.execute_batch("CREATE TABLE future (x); PRAGMA user_version = 1000;")
            .unwrap();
    }
    let shipped = concat!(env!("CARGO_MANIFEST_DIR"), "/config/broker.toml");
    let db_arg = db.to_str().unwrap();
    for args in [
        vec!["shares", "--config", shipped, "--db", db_arg],
        vec!["report", "--config", shipped, "--db", db_arg],
        vec![
            "serve",
            "--config",
            shipped,
            "--listen",
            "127.0.0.1:0",
            "--db",
            db_arg,
        ],
    ] {
        let mut child = Command::new(BIN)
            .args(&args)
            .stdout(Stdio::null())
            .stderr(Stdio::piped())
            .spawn()
            .unwrap();
        let what = format!("`{}` did not refuse the newer database", args[0]);
        let status = exit_within_30_s(&mut child, &what);
        let mut err = String::new();
        std::io::Read::read_to_string(&mut child.stderr.take().unwrap(), &mut err).unwrap();
        assert!(!status.success(), "{}: {err}", args[0]);
        assert!(err.contains("schema version 1000"), "{}: {err}", args[0]);
        assert!(err.contains("newer than this build"), "{}: {err}", args[0]);
    }
    let conn = rusqlite::Connection::open(&db).unwrap();
    let version: i64 = conn
        .query_row("PRAGMA user_version", [], |r| r.get(0))
        .unwrap();
    assert_eq!(version, 1000, "the newer database is left as it was");
}

/// `trace gen` through the real binary: the shipped example's parameters give the shipped trace
/// byte for byte, and a parameters file with a misspelt key is refused naming it.
#[test]
fn trace_gen_regenerates_the_shipped_example_and_refuses_an_unknown_key() {
    let root = env!("CARGO_MANIFEST_DIR");
    let dir = tempfile::tempdir().unwrap();
    let out_path = dir.path().join("mixed.jsonl");
    let out = Command::new(BIN)
        .args(["trace", "gen", "--summary-json", "--params"])
        .arg(format!("{root}/examples/traces/mixed.params.toml"))
        .arg("--out")
        .arg(&out_path)
        .output()
        .unwrap();
    assert!(
        out.status.success(),
        "{}",
        String::from_utf8_lossy(&out.stderr)
    );
    let shipped = std::fs::read(format!("{root}/examples/traces/mixed.jsonl")).unwrap();
    assert_eq!(std::fs::read(&out_path).unwrap(), shipped);
    let summary: serde_json::Value = serde_json::from_slice(&out.stderr).unwrap();
    let lines = shipped.iter().filter(|&&b| b == b'\n').count() as u64;
    assert_eq!(summary["records"].as_u64(), Some(lines), "{summary}");

    let bad = dir.path().join("bad.toml");
    std::fs::write(&bad, "sede = 9\n").unwrap();
    let out = Command::new(BIN)
        .args(["trace", "gen", "--params"])
        .arg(&bad)
        .output()
        .unwrap();
    assert_eq!(out.status.code(), Some(1));
    let err = String::from_utf8(out.stderr).unwrap();
    assert!(err.contains("sede"), "{err}");
}

/// A generation that fails part way (arrivals past the latest time a trace may hold: seed 1 of
/// these parameters gets there after 989 records) leaves no partial trace at `--out`, and a
/// file already there as it was.
#[test]
fn a_trace_gen_that_fails_part_way_leaves_no_partial_trace() {
    let dir = tempfile::tempdir().unwrap();
    let params = dir.path().join("late.toml");
    std::fs::write(
        &params,
        "requests = 1000\nrate_per_s = 1.0101e-6\n[burst]\nratio = 1.0\n\
         [data_taking]\nrate_per_s = 0.0\n",
    )
    .unwrap();
    let run = |out: &std::path::Path| {
        Command::new(BIN)
            .args(["trace", "gen", "--seed", "1", "--params"])
            .arg(&params)
            .arg("--out")
            .arg(out)
            .output()
            .unwrap()
    };
    let fresh = dir.path().join("fresh.jsonl");
    let out = run(&fresh);
    let err = String::from_utf8_lossy(&out.stderr);
    assert_eq!(out.status.code(), Some(1), "{err}");
    assert!(err.contains("past t = 1e9 s"), "{err}");
    assert!(!fresh.exists(), "a partial trace was left");
    let older = dir.path().join("older.jsonl");
    std::fs::write(&older, "kept\n").unwrap();
    assert_eq!(run(&older).status.code(), Some(1));
    assert_eq!(std::fs::read_to_string(&older).unwrap(), "kept\n");
    let left: Vec<_> = std::fs::read_dir(dir.path()).unwrap().collect();
    assert_eq!(
        left.len(),
        2,
        "only the params and the older file: {left:?}"
    );
}

/// `mss-sim` and `simulate` read their library flags through one struct: a failure rate
/// outside 0..1 is refused by both with the same message naming the flag (`mss-sim` said only
/// "every --*-rate within 0..1"), before the simulator listens.
#[test]
fn mss_sim_refuses_a_failure_rate_outside_zero_to_one_as_simulate_does() {
    let mut child = Command::new(BIN)
        .args([
            "mss-sim",
            "--listen",
            "127.0.0.1:0",
            "--failure-rate",
            "1.5",
        ])
        .stdin(Stdio::null())
        .stdout(Stdio::null())
        .stderr(Stdio::piped())
        .spawn()
        .unwrap();
    // A simulator that took the flag would listen until stopped: wait for an exit, not forever.
    let status = exit_within_30_s(
        &mut child,
        "mss-sim took --failure-rate 1.5 and kept running",
    );
    let out = child.wait_with_output().unwrap();
    assert!(!status.success());
    let stderr = String::from_utf8_lossy(&out.stderr);
    assert!(stderr.contains("--failure-rate 1.5"), "{stderr}");
}

/// Wait for `child` to exit; a process still running after 30 s is killed and the test fails
/// with `what` (a command that should have refused to start and did not).
fn exit_within_30_s(child: &mut std::process::Child, what: &str) -> std::process::ExitStatus {
    let deadline = std::time::Instant::now() + std::time::Duration::from_secs(30);
    loop {
        if let Some(status) = child.try_wait().unwrap() {
            return status;
        }
        if std::time::Instant::now() > deadline {
            let _ = child.kill();
            panic!("{what}");
        }
        std::thread::sleep(std::time::Duration::from_millis(20));
    }
}

/// `serve --db` takes a PostgreSQL URL for `database.url`: one beyond loopback is refused
/// before anything starts (no `sslmode=verify-full`), naming the key and the host, never the
/// password.
#[test]
fn serve_db_takes_a_postgresql_url_and_refuses_one_beyond_loopback_without_its_password() {
    let shipped = concat!(env!("CARGO_MANIFEST_DIR"), "/config/broker.toml");
    let url = "postgresql://broker:pw-s3cret@db.example.org:5432/mss";
    let mut child = Command::new(BIN)
        .args(["serve", "--config", shipped, "--listen", "127.0.0.1:0"])
        .args(["--db", url])
        .stdout(Stdio::piped())
        .stderr(Stdio::piped())
        .spawn()
        .unwrap();
    let status = exit_within_30_s(&mut child, "serve took a database beyond loopback");
    let output = child.wait_with_output().unwrap();
    let stderr = String::from_utf8_lossy(&output.stderr);
    let stdout = String::from_utf8_lossy(&output.stdout);
    assert!(!status.success());
    assert!(stderr.contains("database.url"), "{stderr}");
    assert!(stderr.contains("db.example.org"), "{stderr}");
    assert!(
        !stderr.contains("s3cret") && !stdout.contains("s3cret"),
        "{stderr}{stdout}"
    );
}

/// `check-config` says where the ledger is: the SQLite file, or the PostgreSQL database (shown
/// without its password or query) and whether its connections are TLS; with
/// `sslmode=verify-full` a host beyond this machine is taken, and an unreadable CA file is
/// refused naming the key and the file.
#[test]
fn check_config_says_where_the_ledger_is_and_whether_postgresql_is_reached_over_tls() {
    let dir = tempfile::tempdir().unwrap();
    let config = dir.path().join("broker.toml");
    std::fs::write(&config, crate::helpers::test_config(None)).unwrap();
    let check = |url: Option<&str>| {
        let mut command = Command::new(BIN);
        command.arg("check-config").arg(&config);
        if let Some(url) = url {
            command.env("MSSBROKER__DATABASE__URL", url);
        }
        let out = command.output().unwrap();
        let said = format!(
            "{}{}",
            String::from_utf8_lossy(&out.stdout),
            String::from_utf8_lossy(&out.stderr)
        );
        assert!(!said.contains("pw-s3cret"), "{said}");
        (out.status.success(), said)
    };
    let line = |said: &str| {
        said.lines()
            .find(|l| l.starts_with("database:"))
            .unwrap_or_else(|| panic!("no database line in {said}"))
            .to_string()
    };
    let (ok, said) = check(None);
    assert!(ok && line(&said).starts_with("database: SQLite "), "{said}");

    let (ok, said) = check(Some("postgresql://broker:pw-s3cret@127.0.0.1:5432/mss"));
    assert!(ok, "{said}");
    assert_eq!(
        line(&said),
        "database: PostgreSQL postgresql://broker@127.0.0.1:5432/mss (plain text, this machine \
         only); every broker on it contends for the leadership, one leads"
    );

    let key = rcgen::KeyPair::generate().unwrap();
    let mut params = rcgen::CertificateParams::new(Vec::<String>::new()).unwrap();
    params.is_ca = rcgen::IsCa::Ca(rcgen::BasicConstraints::Unconstrained);
    let ca_file = dir.path().join("db-ca.pem");
    std::fs::write(&ca_file, params.self_signed(&key).unwrap().pem()).unwrap();
    let remote = format!(
        "postgresql://broker:pw-s3cret@db1.example.org:5432,db2.example.org:5432/mss?target_session_attrs=read-write&sslmode=verify-full&sslrootcert={}",
        ca_file.display()
    );
    let (ok, said) = check(Some(&remote));
    assert!(ok, "{said}");
    assert!(
        line(&said).starts_with(
            "database: PostgreSQL postgresql://broker@db1.example.org:5432,db2.example.org:5432/mss \
             (TLS, server certificate and name checked)"
        ),
        "{said}"
    );

    let missing = remote.replace("db-ca.pem", "no-such-ca.pem");
    let (ok, said) = check(Some(&missing));
    assert!(!ok, "{said}");
    assert!(
        said.contains("database.url")
            && said.contains("sslrootcert")
            && said.contains("no-such-ca.pem"),
        "{said}"
    );
}
