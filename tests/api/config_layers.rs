//! Layered configuration through the real binary: `MSSBROKER__SECTION__KEY` variables override
//! the file, flags override both, `check-config` says where each value came from, and an
//! unknown key from the environment stops `serve` naming the variable.

use std::path::Path;
use std::process::Command;

use crate::helpers::{output_ok, test_config, BIN};
use crate::ready::serve_with;

/// A configuration whose own listen address and database would not do: `serve` only starts
/// (and makes the database named) when a layer above the file replaces them.
fn file_config(dir: &Path) -> String {
    let path = dir.join("broker.toml");
    let text =
        test_config(None).replacen("listen = \"127.0.0.1:0\"", "listen = \"192.0.2.1:8080\"", 1)
            + &format!(
                "\n[database]\npath = \"{}\"\n",
                dir.join("file.db").display()
            );
    std::fs::write(&path, text).unwrap();
    path.to_str().unwrap().to_string()
}

async fn healthz(base: &str) -> u16 {
    reqwest::get(format!("{base}/healthz"))
        .await
        .map(|r| r.status().as_u16())
        .unwrap_or(0)
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn the_environment_overrides_the_file_and_flags_override_both() {
    let dir = tempfile::tempdir().unwrap();
    let config = file_config(dir.path());
    let env_db = dir.path().join("env.db");
    let (file_db, flag_db) = (dir.path().join("file.db"), dir.path().join("flag.db"));
    let env_db_text = env_db.to_str().unwrap();

    let env = [
        ("MSSBROKER__SERVER__LISTEN", "127.0.0.1:0"),
        ("MSSBROKER__DATABASE__PATH", env_db_text),
    ];
    let log = dir.path().join("env.log");
    let mut broker = serve_with(&["--config", &config], &env, &log);
    assert_eq!(healthz(&broker.base).await, 200);
    assert!(env_db.exists(), "the database the environment names");
    assert!(!file_db.exists(), "not the file's");
    let text = std::fs::read_to_string(&log).unwrap();
    assert!(
        text.contains("env:MSSBROKER__DATABASE__PATH"),
        "serve logs what came from outside the file: {text}"
    );
    broker.kill();

    // The flags win over a variable that would not even be valid.
    let env = [
        ("MSSBROKER__SERVER__LISTEN", "not an address"),
        ("MSSBROKER__DATABASE__PATH", env_db_text),
    ];
    let flags = [
        "--config",
        &config,
        "--listen",
        "127.0.0.1:0",
        "--db",
        flag_db.to_str().unwrap(),
    ];
    let broker = serve_with(&flags, &env, &dir.path().join("flag.log"));
    assert_eq!(healthz(&broker.base).await, 200);
    assert!(flag_db.exists(), "the database the flag names");
    assert!(!file_db.exists(), "still not the file's");
}

#[test]
fn check_config_says_where_each_value_came_from() {
    let dir = tempfile::tempdir().unwrap();
    let config = file_config(dir.path());
    let flag_db = dir.path().join("flag.db");
    let text = output_ok(
        Command::new(BIN)
            .args(["check-config", &config, "--db", flag_db.to_str().unwrap()])
            .env("MSSBROKER__SERVER__LISTEN", "127.0.0.1:9")
            .env("MSSBROKER__SERVER__MAX_CONNECTIONS", "64")
            .env("MSSBROKER__DATABASE__PATH", "ignored.db"),
    );
    let line = |key: &str| {
        text.lines()
            .find(|l| l.trim_start().starts_with(&format!("{key} ")))
            .unwrap_or_else(|| panic!("{key} not listed: {text}"))
            .to_string()
    };
    let listen = line("server.listen");
    assert!(
        listen.contains("\"127.0.0.1:9\"") && listen.ends_with("<- env:MSSBROKER__SERVER__LISTEN"),
        "{listen}"
    );
    let max = line("server.max_connections");
    assert!(
        max.contains("= 64") && max.ends_with("<- env:MSSBROKER__SERVER__MAX_CONNECTIONS"),
        "{max}"
    );
    let db = line("database.path");
    assert!(
        db.contains("flag.db") && db.ends_with("<- flag:--db"),
        "{db}"
    );
    let p_front = line("policy.p_front");
    assert!(p_front.ends_with(&format!("<- file:{config}")), "{p_front}");
    assert!(
        !text.contains("ignored.db"),
        "an overridden value is not listed: {text}"
    );
}

#[test]
fn serve_refuses_an_unknown_key_from_the_environment_naming_the_variable() {
    let dir = tempfile::tempdir().unwrap();
    let config = file_config(dir.path());
    let out = Command::new(BIN)
        .args(["serve", "--config", &config, "--listen", "127.0.0.1:0"])
        .env("MSSBROKER__SERVER__LISEN", "127.0.0.1:0")
        .output()
        .unwrap();
    let err = String::from_utf8_lossy(&out.stderr);
    assert_eq!(out.status.code(), Some(1), "{err}");
    assert!(
        err.contains("server.lisen") && err.contains("env:MSSBROKER__SERVER__LISEN"),
        "{err}"
    );
    assert!(!dir.path().join("file.db").exists(), "nothing opened");
}

/// `shares` reads the configuration as `serve` does: a variable over the file changes a share.
#[test]
fn shares_applies_the_environment_over_the_file() {
    let dir = tempfile::tempdir().unwrap();
    let usage = dir.path().join("usage.json");
    std::fs::write(&usage, r#"{"usage": {}}"#).unwrap();
    let target = |env: &[(&str, &str)]| -> f64 {
        let out = output_ok(
            Command::new(BIN)
                .args(["shares", "--format", "json", "--usage"])
                .arg(&usage)
                .arg("--config")
                .arg(file_config(dir.path()))
                .envs(env.iter().copied()),
        );
        let v: serde_json::Value = serde_json::from_str(&out).unwrap();
        let groups = v["groups"].as_array().unwrap();
        let mc = groups.iter().find(|g| g["path"] == "mc").unwrap();
        mc["target_share"].as_f64().unwrap()
    };
    let file = target(&[]);
    let env = target(&[("MSSBROKER__SHARES__MC", "1000")]);
    assert!(env > file + 0.1, "file {file}, with the variable {env}");
}
