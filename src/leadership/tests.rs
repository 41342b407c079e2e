//! Against a real PostgreSQL (pg-cluster): each test waits for a state (a role, a refusal
//! count, a backend waiting on a lock), never for a length of time.

use std::time::{Duration, Instant};

use pg_cluster::Cluster;
use tokio_postgres::{Client, NoTls};

use super::*;

/// Longest any state is waited for before the test fails.
const WAIT: Duration = Duration::from_secs(30);

fn fast() -> Timing {
    Timing {
        contend_every: Duration::from_millis(50),
        heartbeat_every: Duration::from_millis(100),
        heartbeat_timeout: Duration::from_secs(2),
        after_resigning: Duration::from_millis(50),
    }
}

fn contender(cluster: &Cluster, name: &str) -> Contender {
    let url = DatabaseUrl::parse(&cluster.url()).expect("the cluster's url");
    let identity = Identity {
        holder: name.to_string(),
        advertised_url: format!("http://{name}.example:8080"),
    };
    Contender::start(url, identity, fast()).expect("a loopback cluster")
}

/// No TLS yet: a contender refuses a host beyond loopback before connecting, naming the key,
/// as the ledger's connection does (a leader's session would carry its password and queries in
/// clear text). No runtime is needed: nothing is spawned.
#[test]
fn a_host_beyond_loopback_is_refused_before_any_connection() {
    let url = DatabaseUrl::parse("postgresql://broker:secret@db.example.org/mss").unwrap();
    let identity = Identity {
        holder: "a".to_string(),
        advertised_url: "http://a.example:8080".to_string(),
    };
    let refused = Contender::start(url, identity, fast())
        .err()
        .expect("refused")
        .to_string();
    assert!(
        refused.starts_with("database.url:") && refused.contains("db.example.org"),
        "{refused}"
    );
    assert!(!refused.contains("secret"), "{refused}");
}

async fn admin(cluster: &Cluster) -> Client {
    let (client, connection) = tokio_postgres::connect(&cluster.url(), NoTls)
        .await
        .expect("an admin connection");
    tokio::spawn(connection);
    client
}

/// Poll `check` (a state) until it holds; fails the test after `WAIT`.
async fn until<T>(what: &str, mut check: impl FnMut() -> Option<T>) -> T {
    let deadline = Instant::now() + WAIT;
    loop {
        if let Some(found) = check() {
            return found;
        }
        assert!(Instant::now() < deadline, "waited {WAIT:?} for {what}");
        tokio::time::sleep(Duration::from_millis(5)).await;
    }
}

fn role(c: &Contender) -> Role {
    *c.role().borrow()
}

/// The index of the one leading (and its epoch), once one does.
async fn one_leads(cs: &[&Contender]) -> (usize, i64) {
    until("a leader", || {
        cs.iter()
            .enumerate()
            .find_map(|(i, c)| role(c).leading().map(|e| (i, e)))
    })
    .await
}

/// Wait until `c` has been refused the lock `more` times past now.
async fn refused_again(c: &Contender, more: u64) {
    let from = c.refusals();
    until("refusals", || (c.refusals() >= from + more).then_some(())).await;
}

/// The backends holding the leadership lock.
async fn lock_holders(admin: &Client) -> Vec<i32> {
    admin
        .query(
            "SELECT pid FROM pg_locks WHERE locktype = 'advisory' AND granted
             AND classid = $1 AND objid = $2 AND objsubid = 1",
            &[&((LOCK_KEY >> 32) as u32), &(LOCK_KEY as u32)],
        )
        .await
        .expect("pg_locks")
        .iter()
        .map(|r| r.get(0))
        .collect()
}

/// Wait until a backend's increment of the epoch waits for a lock.
async fn increment_waits(admin: &Client) {
    let deadline = Instant::now() + WAIT;
    loop {
        let waiting: i64 = admin
            .query_one(
                "SELECT count(*) FROM pg_stat_activity
                 WHERE wait_event_type = 'Lock' AND query LIKE 'INSERT INTO leader%'",
                &[],
            )
            .await
            .expect("pg_stat_activity")
            .get(0);
        if waiting > 0 {
            return;
        }
        assert!(
            Instant::now() < deadline,
            "waited {WAIT:?} for the increment to wait"
        );
        tokio::time::sleep(Duration::from_millis(5)).await;
    }
}

async fn terminate(admin: &Client, pid: i32) {
    let done: bool = admin
        .query_one("SELECT pg_terminate_backend($1)", &[&pid])
        .await
        .expect("pg_terminate_backend")
        .get(0);
    assert!(done, "backend {pid} was not terminated");
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn of_two_contenders_exactly_one_leads() {
    let cluster = Cluster::start().expect("a cluster");
    let (a, b) = (contender(&cluster, "a"), contender(&cluster, "b"));
    let (i, epoch) = one_leads(&[&a, &b]).await;
    assert_eq!(epoch, 1, "the first leader's epoch");
    let (leader, other) = if i == 0 { (&a, &b) } else { (&b, &a) };
    // The other has tried (and been refused) twice since: still a standby, the leader unchanged.
    refused_again(other, 2).await;
    assert_eq!(role(other), Role::Standby);
    assert_eq!(role(leader), Role::Leader { epoch: 1 });
    let admin = admin(&cluster).await;
    assert_eq!(lock_holders(&admin).await.len(), 1);
    let (recorded, holder, url) = current(&admin).await.expect("read").expect("a leader row");
    let name = if i == 0 { "a" } else { "b" };
    assert_eq!((recorded, holder.as_str()), (1, name));
    assert_eq!(url, format!("http://{name}.example:8080"));
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_terminated_leader_reports_lost_and_the_other_leads_at_the_next_epoch() {
    let cluster = Cluster::start().expect("a cluster");
    let (a, b) = (contender(&cluster, "a"), contender(&cluster, "b"));
    let (i, epoch) = one_leads(&[&a, &b]).await;
    let (old, new) = if i == 0 { (&a, &b) } else { (&b, &a) };
    let admin = admin(&cluster).await;
    let holders = lock_holders(&admin).await;
    assert_eq!(holders.len(), 1);

    let killed = Instant::now();
    terminate(&admin, holders[0]).await;
    until("the old leader's loss", || {
        (role(old) == Role::Lost { epoch }).then_some(())
    })
    .await;
    let lost_after = killed.elapsed();
    until("the takeover", || {
        (role(new) == Role::Leader { epoch: epoch + 1 }).then_some(())
    })
    .await;
    eprintln!(
        "leadership: backend terminated -> old leader lost after {lost_after:?}, \
         new leader after {:?} (contend_every {:?})",
        killed.elapsed(),
        fast().contend_every
    );
    // The old leader contends again and is refused: it stays lost, never leads at its epoch.
    refused_again(old, 2).await;
    assert_eq!(role(old), Role::Lost { epoch });
    let recorded = current(&admin).await.expect("read").expect("a row").0;
    assert_eq!(recorded, epoch + 1);
}

/// A leader whose term cannot open resigns: it reports `Lost`, its lock is free and the standby
/// takes office at the next epoch, while the resigned one stands aside (it contends again only
/// after `after_resigning`: here longer than the test, so it is never seen trying). A
/// resignation of an epoch no longer held changes nothing.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_leader_that_resigns_stands_aside_and_a_standby_takes_office() {
    let cluster = Cluster::start().expect("a cluster");
    let url = DatabaseUrl::parse(&cluster.url()).expect("the cluster's url");
    let aside = Timing {
        after_resigning: WAIT * 2,
        ..fast()
    };
    let start = |name: &str| {
        let identity = Identity {
            holder: name.to_string(),
            advertised_url: format!("http://{name}.example:8080"),
        };
        Contender::start(url.clone(), identity, aside).expect("a loopback cluster")
    };
    let (a, b) = (start("a"), start("b"));
    let (i, epoch) = one_leads(&[&a, &b]).await;
    let (old, new) = if i == 0 { (&a, &b) } else { (&b, &a) };
    let tried = old.refusals();
    old.resigner().resign(epoch);
    until("the resignation", || {
        (role(old) == Role::Lost { epoch }).then_some(())
    })
    .await;
    until("the takeover", || {
        (role(new) == Role::Leader { epoch: epoch + 1 }).then_some(())
    })
    .await;

    // The new leader is told to resign the old epoch: it keeps office while a third contender
    // is refused the lock twice.
    new.resigner().resign(epoch);
    let witness = contender(&cluster, "c");
    refused_again(&witness, 2).await;
    assert_eq!(role(new), Role::Leader { epoch: epoch + 1 });
    assert_eq!(role(old), Role::Lost { epoch });
    assert_eq!(
        old.refusals(),
        tried,
        "the resigned broker contended at once"
    );
    let admin = admin(&cluster).await;
    let (recorded, holder, _) = current(&admin).await.expect("read").expect("a row");
    assert_eq!(
        (recorded, holder.as_str()),
        (epoch + 1, if i == 0 { "b" } else { "a" })
    );
}

/// A write transaction as the ledger's writer will run it: fence first, write, commit.
async fn write_fenced(client: &mut Client, epoch: i64, n: i32) -> Result<(), FenceError> {
    let tx = client.transaction().await?;
    fence(&tx, epoch).await?;
    tx.execute("INSERT INTO writes VALUES ($1)", &[&n]).await?;
    tx.commit().await?;
    Ok(())
}

async fn rows(admin: &Client) -> Vec<i32> {
    admin
        .query("SELECT n FROM writes ORDER BY n", &[])
        .await
        .expect("writes")
        .iter()
        .map(|r| r.get(0))
        .collect()
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_stale_epoch_commits_nothing() {
    let cluster = Cluster::start().expect("a cluster");
    let admin = admin(&cluster).await;
    admin
        .batch_execute("CREATE TABLE writes (n int)")
        .await
        .expect("a table");
    let mut writer = self::admin(&cluster).await;
    // No leader yet: a write is refused too.
    assert!(matches!(
        write_fenced(&mut writer, 1, 0).await,
        Err(FenceError::NoLeader)
    ));

    let (a, b) = (contender(&cluster, "a"), contender(&cluster, "b"));
    let (i, epoch) = one_leads(&[&a, &b]).await;
    let (old, new) = if i == 0 { (&a, &b) } else { (&b, &a) };
    write_fenced(&mut writer, epoch, 1)
        .await
        .expect("the leader's write");

    // A transaction of the old epoch, fenced before the takeover and still open.
    let in_flight = writer.transaction().await.expect("a transaction");
    fence(&in_flight, epoch)
        .await
        .expect("fenced at the current epoch");
    in_flight
        .execute("INSERT INTO writes VALUES (2)", &[])
        .await
        .expect("insert");
    terminate(&admin, lock_holders(&admin).await[0]).await;
    // The new leader holds the lock but its increment waits for the open transaction's share
    // lock on the epoch row: it is not leading yet.
    increment_waits(&admin).await;
    assert_eq!(role(new), Role::Standby);
    in_flight
        .commit()
        .await
        .expect("the old epoch's last commit");
    until("the takeover", || {
        (role(new) == Role::Leader { epoch: epoch + 1 }).then_some(())
    })
    .await;
    assert_eq!(role(old), Role::Lost { epoch });

    // From now on the old epoch commits nothing; the new one commits.
    match write_fenced(&mut writer, epoch, 3).await {
        Err(FenceError::Fenced { ours, current }) => {
            assert_eq!((ours, current), (epoch, epoch + 1))
        }
        other => panic!("a stale epoch's write was not fenced: {other:?}"),
    }
    write_fenced(&mut writer, epoch + 1, 4)
        .await
        .expect("the new leader's write");
    assert_eq!(rows(&admin).await, vec![1, 2, 4]);
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn after_an_immediate_restart_of_postgresql_exactly_one_leads_at_a_higher_epoch() {
    let cluster = Cluster::start().expect("a cluster");
    let (a, b) = (contender(&cluster, "a"), contender(&cluster, "b"));
    let (i, epoch) = one_leads(&[&a, &b]).await;
    let old = if i == 0 { &a } else { &b };
    let stopped = Instant::now();
    cluster.stop_immediately().expect("stopped");
    until("the leader's loss", || {
        (role(old) == Role::Lost { epoch }).then_some(())
    })
    .await;
    let lost_after = stopped.elapsed();
    cluster.start_again().expect("started again");
    let (j, again) = one_leads(&[&a, &b]).await;
    eprintln!(
        "leadership: PostgreSQL stopped -> leader lost after {lost_after:?}, \
         a leader again {:?} after the stop (restart included)",
        stopped.elapsed()
    );
    assert!(again > epoch, "epoch {again} after {epoch}");
    let other = if j == 0 { &b } else { &a };
    refused_again(other, 2).await;
    assert!(other.role().borrow().leading().is_none());
    assert_eq!(
        role(if j == 0 { &a } else { &b }),
        Role::Leader { epoch: again }
    );
    let admin = admin(&cluster).await;
    assert_eq!(lock_holders(&admin).await.len(), 1);
    assert_eq!(
        current(&admin).await.expect("read").expect("a row").0,
        again
    );
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_leader_whose_backend_freezes_reports_lost_when_its_heartbeat_goes_unanswered() {
    let cluster = Cluster::start().expect("a cluster");
    let a = contender(&cluster, "a");
    let (_, epoch) = one_leads(&[&a]).await;
    let admin = admin(&cluster).await;
    let pid = lock_holders(&admin).await[0];
    // SIGSTOP the leader's backend: its connection stays open, nothing answers.
    let stop = std::process::Command::new("kill")
        .args(["-STOP", &pid.to_string()])
        .status()
        .expect("kill -STOP");
    assert!(stop.success());
    let frozen = Instant::now();
    until("the frozen leader's loss", || {
        (role(&a) == Role::Lost { epoch }).then_some(())
    })
    .await;
    eprintln!(
        "leadership: backend frozen -> leader lost after {:?} (heartbeat every {:?}, timeout {:?})",
        frozen.elapsed(),
        fast().heartbeat_every,
        fast().heartbeat_timeout
    );
    let cont = std::process::Command::new("kill")
        .args(["-CONT", &pid.to_string()])
        .status()
        .expect("kill -CONT");
    assert!(cont.success());
    // Its old session is dropped; it contends anew and leads again only at a higher epoch.
    let (_, again) = one_leads(&[&a]).await;
    assert_eq!(again, epoch + 1);
}

#[test]
fn the_lock_key_is_the_documented_one() {
    // docs/ha.md and this module's documentation give these numbers to operators.
    assert_eq!(LOCK_KEY, 7886774239119764338);
    assert_eq!(
        ((LOCK_KEY >> 32) as u32, LOCK_KEY as u32),
        (1836282722, 1919904626)
    );
}
