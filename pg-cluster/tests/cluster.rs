//! The helper against the machine's real PostgreSQL: start, stop, restart, removal, and how
//! long a start takes.

use std::time::Duration;

use pg_cluster::Cluster;

#[test]
fn a_cluster_starts_accepts_connections_and_restarts() {
    let cluster = Cluster::start().expect("a cluster");
    assert_eq!(cluster.psql("SELECT 40 + 2").expect("psql"), "42");
    cluster
        .psql("CREATE TABLE kept (n int); INSERT INTO kept VALUES (7)")
        .expect("a table");
    cluster.stop_immediately().expect("stopped");
    assert!(
        cluster.psql("SELECT 1").is_err(),
        "a stopped cluster answered"
    );
    cluster.start_again().expect("started again");
    // Crash recovery kept the committed row.
    assert_eq!(cluster.psql("SELECT n FROM kept").expect("psql"), "7");
}

#[test]
fn a_dropped_cluster_leaves_nothing_behind() {
    let cluster = Cluster::start().expect("a cluster");
    let dir = cluster.socket_dir().to_path_buf();
    let pid_file = std::fs::read_to_string(dir.join("data").join("postmaster.pid"))
        .expect("the server's pid file");
    let pid = pid_file.lines().next().expect("a pid").trim().to_string();
    assert!(runs(&pid));
    drop(cluster);
    assert!(!dir.exists(), "{} is still there", dir.display());
    assert!(!runs(&pid), "the server, pid {pid}, still runs");
}

/// Whether process `pid` runs: in /proc and not a zombie (where PID 1 reaps late, an exited
/// server stays one for a while).
fn runs(pid: &str) -> bool {
    let stat = std::fs::read_to_string(std::path::Path::new("/proc").join(pid).join("stat"));
    stat.is_ok_and(|s| {
        s.rsplit_once(')')
            .is_some_and(|(_, rest)| !rest.trim_start().starts_with('Z'))
    })
}

#[test]
fn a_cluster_starts_in_under_a_second() {
    // The first start of a process may make the template (initdb); later ones copy it. The
    // fastest of three is held under a second: the others run beside the rest of the suite,
    // whose load is not the helper's.
    let first = Cluster::start().expect("a cluster");
    let later: Vec<Duration> = (0..3)
        .map(|_| Cluster::start().expect("a cluster").started_in())
        .collect();
    eprintln!(
        "pg-cluster: first start {:?}, then {later:?}",
        first.started_in()
    );
    let fastest = later.iter().min().copied().unwrap_or(Duration::MAX);
    assert!(fastest < Duration::from_secs(1), "took {later:?}");
}
