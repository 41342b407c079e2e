//! `mssbroker simulate` in the volumes release mode through the real binary: `--compare` alone
//! runs the three modes, `--sweep ... --chart` writes the tradeoff chart, bad flags are refused
//! naming what is wrong.

use serde_json::Value;

use crate::simulate::{example_requests as requests, files_done, simulate_example as simulate};

#[test]
fn compare_alone_runs_held_volumes_and_pass_through() {
    let out = simulate(&["--policy", "fair_tree", "--compare", "--format", "json"]);
    assert!(
        out.status.success(),
        "{}",
        String::from_utf8_lossy(&out.stderr)
    );
    let report: Value = serde_json::from_slice(&out.stdout).unwrap();
    let runs = report["runs"].as_array().expect("runs");
    let modes: Vec<&str> = runs.iter().map(|r| r["mode"].as_str().unwrap()).collect();
    assert_eq!(modes, ["held", "volumes", "pass_through"]);
    for run in runs {
        assert_eq!(run["policy"], "fair_tree");
        assert_eq!(
            files_done(run),
            requests(),
            "every request done in {}",
            run["mode"]
        );
        let batched = run["mode"] == "volumes";
        assert_eq!(run["batches"].is_null(), !batched, "{run}");
        for g in run["groups"].as_array().unwrap() {
            let (p95, p99) = (g["wait_p95_s"].as_f64(), g["wait_p99_s"].as_f64());
            assert!(p99.unwrap() >= p95.unwrap(), "{g}");
        }
    }
    let v = &runs[1];
    let batches = v["batches"].as_u64().unwrap();
    assert!(batches >= 1);
    // Batches hold at least one request each, so fewer batches than requests means some
    // requests went to the library together.
    assert!(v["batch_mean_files"].as_f64().unwrap() >= 1.0);
}

#[test]
fn a_sweep_prints_every_run_and_draws_the_chart() {
    let dir = tempfile::tempdir().unwrap();
    let chart = dir.path().join("tradeoff.svg");
    let out = simulate(&[
        "--policy",
        "fair_tree",
        "--sweep",
        "batch_max_bytes=1e10,1e11",
        "--sweep",
        "min_volume_bytes=5e11",
        "--chart",
        chart.to_str().unwrap(),
    ]);
    assert!(
        out.status.success(),
        "{}",
        String::from_utf8_lossy(&out.stderr)
    );
    let table = String::from_utf8(out.stdout).unwrap();
    for run in [
        "held",
        "pass_through",
        "batch_max_bytes=10000000000 min_volume_bytes=500000000000",
        "batch_max_bytes=100000000000 min_volume_bytes=500000000000",
    ] {
        assert!(
            table.lines().any(|l| l.starts_with(run)),
            "{run} in\n{table}"
        );
    }
    // Every figure a default is chosen on is a column, and a row's figures are its run's: the
    // 100 GB / 500 GB point is the shipped `[release.volumes]`, so `--mode volumes` runs it.
    let header: Vec<&str> = table.lines().next().unwrap().split_whitespace().collect();
    for column in [
        "mounts_per_tb",
        "share_err_max_pp",
        "makespan_s",
        "prio_wait_p99_s",
    ] {
        assert!(header.contains(&column), "{column} in {header:?}");
    }
    let cell = |row: &str, column: &str| -> f64 {
        let at = header.iter().position(|h| *h == column).unwrap();
        let line = table.lines().find(|l| l.starts_with(row)).unwrap();
        let cells: Vec<&str> = line[row.len()..].split_whitespace().collect();
        cells[at - 1].parse().unwrap()
    };
    let single = simulate(&[
        "--policy",
        "fair_tree",
        "--mode",
        "volumes",
        "--format",
        "json",
    ]);
    let report: Value = serde_json::from_slice(&single.stdout).unwrap();
    let run = &report["runs"][0];
    let row = "batch_max_bytes=100000000000 min_volume_bytes=500000000000";
    for (column, key) in [
        ("makespan_s", "makespan_s"),
        ("prio_wait_p99_s", "priority_wait_p99_s"),
    ] {
        let whole = run[key].as_f64().unwrap();
        assert!(
            (cell(row, column) - whole).abs() <= 0.5,
            "{column}: {whole}"
        );
    }
    let svg = std::fs::read_to_string(&chart).expect("the chart is written");
    assert!(svg.starts_with("<svg"));
    for name in [
        "volumes batch_max_bytes=10000000000",
        "volumes batch_max_bytes=100000000000",
        "held",
        "pass_through",
    ] {
        assert!(svg.contains(name), "{name} in the chart");
    }
}

#[test]
fn bad_volumes_flags_are_refused_naming_the_problem() {
    let cases: [(&[&str], &str); 5] = [
        (&["--sweep", "colour=1"], "colour"),
        (&["--sweep", "batch_max_bytes=1.5"], "batch_max_bytes"),
        (&["--chart", "/tmp/never-written.svg"], "--sweep"),
        (&["--mode", "tapes"], "tapes"),
        (
            &["--sweep", "max_volumes=2", "--mode", "held"],
            "--sweep runs its own modes",
        ),
    ];
    for (args, named) in cases {
        let out = simulate(args);
        let stderr = String::from_utf8_lossy(&out.stderr);
        assert!(!out.status.success(), "{args:?} accepted");
        assert!(stderr.contains(named), "{args:?}: {stderr}");
        assert!(out.stdout.is_empty(), "{args:?} printed a report");
    }
    assert!(!std::path::Path::new("/tmp/never-written.svg").exists());
}

#[test]
fn the_baselines_refuse_the_volumes_mode() {
    let out = simulate(&["--policy", "fifo", "--mode", "volumes"]);
    assert!(!out.status.success());
    assert!(String::from_utf8_lossy(&out.stderr).contains("volumes"));
}
