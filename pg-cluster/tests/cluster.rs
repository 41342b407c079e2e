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
    let port = cluster.port();
    drop(cluster);
    assert!(!dir.exists(), "{} is still there", dir.display());
    // Its port is free again: nothing listens.
    assert!(std::net::TcpStream::connect(("127.0.0.1", port)).is_err());
}

#[test]
fn a_cluster_starts_in_under_a_second() {
    // The first start of a process may make the template (initdb); the next is a copy.
    let first = Cluster::start().expect("a cluster");
    let second = Cluster::start().expect("a second cluster");
    eprintln!(
        "pg-cluster: first start {:?}, second {:?}",
        first.started_in(),
        second.started_in()
    );
    assert!(
        second.started_in() < Duration::from_secs(1),
        "took {:?}",
        second.started_in()
    );
}
