//! The failover rounds (issue 42's goal, docs/ha.md "The failover rounds"): one PostgreSQL
//! cluster, two real `serve` processes on it (the same configuration and simulator), the real
//! simulator, and 8 clients that submit continuously, each request with a fresh
//! `client_request_id`, resubmitting the same one to the other broker on a 503 or a broken
//! connection (or no answer within 2 s). Rounds of three kinds of failure, under that load:
//!
//! - **kill**: SIGKILL of the leader, then started again (it stands by);
//! - **freeze**: SIGSTOP of the leader; SIGCONT once the standby has answered a 202. The resumed
//!   broker must acknowledge nothing new and serve as a standby;
//! - **database restart**: PostgreSQL stopped `-m immediate` and started again.
//!
//! After each round: every acknowledged request is in the ledger under its id and
//! `client_request_id`, and the simulator received no key twice. At the end, with the load
//! stopped, every request is done, the simulator received each once, and each group's usage is
//! the sum of its requests' charges. The takeover times are printed per kind (median and max).
//!
//! Bounds asserted: a 202 from the standby within [`KILL_BOUND`] of a kill; within the
//! server's `idle_session_timeout` ([`IDLE_SESSION_TIMEOUT`], which ends a frozen leader's
//! session and so frees the leadership lock) plus [`KILL_BOUND`] of a freeze; a 202 within
//! [`KILL_BOUND`] of the database's stop.
//!
//! Rounds: `MSSBROKER_FAILOVER_ROUNDS` of each kind (default 1; docs/ha.md has the soak
//! command with 10).

use std::collections::{HashMap, HashSet};
use std::path::{Path, PathBuf};
use std::sync::atomic::{AtomicBool, Ordering};
use std::sync::{Arc, Mutex};
use std::time::{Duration, Instant, SystemTime, UNIX_EPOCH};

use pg_cluster::Cluster;
use serde_json::Value;
use tokio::task::block_in_place;

use crate::helpers::{wait_final, BrokerFiles, ServeProcess, SimProcess};
use crate::postgres::{
    assert_each_key_once, assert_transferred_and_charged_once, get, ledger_ids, load_request,
    standing_by,
};

/// How soon a standby must acknowledge after the leader is killed (the goal). A kill
/// closes the leader's sockets, the server ends its session at once, and a standby tries the
/// lock every `contend_every` (1 s): the rest is the new term's opening and a client's retry.
const KILL_BOUND: Duration = Duration::from_secs(10);

/// The server's `idle_session_timeout` in this test (set with `ALTER SYSTEM`, as docs/ha.md
/// says to set it on the broker's role): a frozen leader's leadership session ends after it.
const IDLE_SESSION_TIMEOUT: Duration = Duration::from_secs(3);

/// Requests acknowledged in a round before its failure, so that it lands under load.
const PER_ROUND: usize = 100;

/// How long a client waits for an answer before it resubmits to the other broker (a frozen
/// broker accepts connections and never answers).
const CLIENT_TIMEOUT: Duration = Duration::from_secs(2);

#[derive(Debug, Clone, Copy, PartialEq, Eq, Hash)]
enum Failure {
    Kill,
    Freeze,
    DatabaseRestart,
}

/// An acknowledged request: by which broker (slot), when.
#[derive(Debug, Clone)]
struct Ack {
    crid: String,
    id: i64,
    slot: usize,
    at: Instant,
}

/// The two brokers' slots: each one's process, and the base URLs the clients read.
struct Brokers {
    files: BrokerFiles,
    db: String,
    logs: PathBuf,
    procs: [Option<ServeProcess>; 2],
    bases: Arc<Mutex<[String; 2]>>,
    starts: usize,
}

impl Brokers {
    fn start(files: BrokerFiles, cluster: &Cluster, logs: PathBuf) -> Brokers {
        let mut brokers = Brokers {
            files,
            db: cluster.url(),
            logs,
            procs: [None, None],
            bases: Arc::default(),
            starts: 0,
        };
        brokers.restart(0);
        brokers.restart(1);
        brokers
    }

    /// Start the broker of `slot` (again), its log to a file of its own.
    fn restart(&mut self, slot: usize) {
        self.starts += 1;
        let log = self.logs.join(format!("broker-{slot}-{}.log", self.starts));
        let process = ServeProcess::start_logged(&self.files.config, Path::new(&self.db), &log);
        self.bases.lock().unwrap()[slot] = process.base.clone();
        self.procs[slot] = Some(process);
    }

    fn base(&self, slot: usize) -> String {
        self.bases.lock().unwrap()[slot].clone()
    }

    fn process(&mut self, slot: usize) -> &mut ServeProcess {
        self.procs[slot].as_mut().expect("a broker in the slot")
    }
}

/// The clients' load: acknowledgements, and answers no client expected.
struct Load {
    acks: Arc<Mutex<Vec<Ack>>>,
    unexpected: Arc<Mutex<Vec<String>>>,
    stop: Arc<AtomicBool>,
    clients: Vec<tokio::task::JoinHandle<()>>,
}

impl Load {
    fn start(bases: Arc<Mutex<[String; 2]>>) -> Load {
        let client = reqwest::Client::builder()
            .timeout(CLIENT_TIMEOUT)
            .build()
            .unwrap();
        let load = Load {
            acks: Arc::default(),
            unexpected: Arc::default(),
            stop: Arc::default(),
            clients: Vec::new(),
        };
        let clients = (0..8u64)
            .map(|c| {
                let station = Station {
                    client: client.clone(),
                    bases: bases.clone(),
                    acks: load.acks.clone(),
                    unexpected: load.unexpected.clone(),
                    stop: load.stop.clone(),
                };
                tokio::spawn(station.submit_from(c))
            })
            .collect();
        Load { clients, ..load }
    }

    fn acks(&self) -> Vec<Ack> {
        self.acks.lock().unwrap().clone()
    }

    /// Wait until `more` requests have been acknowledged beyond `since` of them.
    async fn progress(&self, since: usize, more: usize, limit: Duration) {
        let start = Instant::now();
        while self.acks.lock().unwrap().len() < since + more {
            assert!(
                start.elapsed() < limit,
                "the load made no progress: {} acknowledged; unexpected answers {:?}",
                self.acks.lock().unwrap().len(),
                self.unexpected.lock().unwrap()
            );
            tokio::time::sleep(Duration::from_millis(20)).await;
        }
    }

    /// The first acknowledgement after `t0` (from `slot`, or any slot), waited for up to
    /// `limit`: how long after `t0` it came.
    async fn first_ack_after(&self, t0: Instant, slot: Option<usize>, limit: Duration) -> Duration {
        loop {
            let found = (self.acks.lock().unwrap().iter())
                .filter(|a| a.at > t0 && slot.is_none_or(|s| a.slot == s))
                .map(|a| a.at)
                .min();
            if let Some(at) = found {
                return at - t0;
            }
            assert!(
                t0.elapsed() < limit,
                "no acknowledgement within {limit:?} (from slot {slot:?}); unexpected answers {:?}",
                self.unexpected.lock().unwrap()
            );
            tokio::time::sleep(Duration::from_millis(10)).await;
        }
    }

    async fn stop(self) -> Vec<Ack> {
        self.stop.store(true, Ordering::Relaxed);
        for c in self.clients {
            c.await.expect("a client");
        }
        assert_eq!(
            self.unexpected.lock().unwrap().as_slice(),
            &[] as &[String],
            "every answer is a 202 or a 503"
        );
        let acks = self.acks.lock().unwrap().clone();
        acks
    }
}

/// One client: requests with fresh ids, each resubmitted until a 202.
struct Station {
    client: reqwest::Client,
    bases: Arc<Mutex<[String; 2]>>,
    acks: Arc<Mutex<Vec<Ack>>>,
    unexpected: Arc<Mutex<Vec<String>>>,
    stop: Arc<AtomicBool>,
}

impl Station {
    async fn submit_from(self, c: u64) {
        let mut slot = (c % 2) as usize;
        let mut n = c * 10_000_000;
        while !self.stop.load(Ordering::Relaxed) {
            n += 1;
            let crid = format!("f-{n}");
            let body = load_request(&crid, n);
            let mut refused = 0;
            // The same request until it is acknowledged (or the test ends: then it may or may
            // not be in the ledger, which the checks read in full).
            while !self.stop.load(Ordering::Relaxed) {
                let base = self.bases.lock().unwrap()[slot].clone();
                let sent = self
                    .client
                    .post(format!("{base}/v1/requests"))
                    .json(&body)
                    .send()
                    .await;
                let answer = match sent {
                    Ok(resp) => {
                        let status = resp.status().as_u16();
                        resp.json::<Value>().await.ok().map(|v| (status, v))
                    }
                    Err(_) => None,
                };
                match answer {
                    Some((202, v)) => {
                        let id = v["id"].as_i64().expect("an id");
                        let at = Instant::now();
                        let crid = crid.clone();
                        self.acks.lock().unwrap().push(Ack { crid, id, slot, at });
                        break;
                    }
                    // A standby (or a broken or silent connection): the other broker.
                    Some((503, _)) | None => {
                        slot ^= 1;
                        refused += 1;
                        // Both refused: give the takeover a moment, as a station would.
                        if refused % 2 == 0 {
                            tokio::time::sleep(Duration::from_millis(20)).await;
                        }
                    }
                    Some((status, v)) => {
                        let line = format!("{crid} at {base}: {status} {v}");
                        self.unexpected.lock().unwrap().push(line);
                        break;
                    }
                }
            }
        }
    }
}

fn rounds() -> usize {
    std::env::var("MSSBROKER_FAILOVER_ROUNDS")
        .ok()
        .and_then(|v| v.parse().ok())
        .unwrap_or(1)
}

/// The slot whose broker leads (`/readyz` 200) while the other stands by (503 naming
/// "standby"), waited for up to `limit`.
async fn leader(client: &reqwest::Client, brokers: &Brokers, limit: Duration) -> usize {
    let start = Instant::now();
    loop {
        let mut answers = Vec::new();
        for slot in 0..2 {
            answers.push(get(client, &brokers.base(slot), "/readyz").await);
        }
        let standby =
            |a: &Option<(u16, Value)>| matches!(a, Some((503, v)) if v.get("standby").is_some());
        match (&answers[0], &answers[1]) {
            (Some((200, _)), b) if standby(b) => return 0,
            (a, Some((200, _))) if standby(a) => return 1,
            _ => {}
        }
        assert!(
            start.elapsed() < limit,
            "no one leader after {limit:?}: {answers:?}"
        );
        tokio::time::sleep(Duration::from_millis(50)).await;
    }
}

/// Every request of the ledger, `id -> client_request_id`, read from the database.
fn ledger_crids(cluster: &Cluster) -> HashMap<i64, String> {
    let rows = (cluster.psql("SELECT id, client_request_id FROM requests")).expect("the requests");
    rows.lines()
        .map(|l| {
            let (id, crid) = l.split_once('|').expect("id|crid");
            (id.parse().expect("an id"), crid.to_string())
        })
        .collect()
}

/// The groups (and classes) whose usage is not the sum of their requests' charges, read in one
/// statement (one snapshot: the load goes on meanwhile): `path usage sum` lines.
const USAGE_NOT_CHARGES: &str =
    "SELECT g.path || ' ' || g.usage || ' ' || COALESCE(SUM(r.charged), 0) \
     FROM groups g LEFT JOIN requests r ON r.group_path = g.path \
     GROUP BY g.path, g.usage HAVING g.usage <> COALESCE(SUM(r.charged), 0)";

/// Nothing acknowledged is lost (each 202'd id is in the ledger with its
/// `client_request_id`), no request is stored twice, the simulator received no key twice, and
/// every group's usage is the sum of its requests' charges.
async fn assert_nothing_lost_nothing_twice(cluster: &Cluster, sim: &SimProcess, acks: &[Ack]) {
    let stored = block_in_place(|| ledger_crids(cluster));
    for a in acks {
        assert_eq!(stored.get(&a.id), Some(&a.crid), "acknowledged {a:?}");
    }
    let distinct: HashSet<&String> = stored.values().collect();
    assert_eq!(
        distinct.len(),
        stored.len(),
        "a client_request_id stored twice"
    );
    assert_each_key_once(&sim.received().await);
    let mismatched = block_in_place(|| cluster.psql(USAGE_NOT_CHARGES)).expect("the usage");
    assert_eq!(
        mismatched, "",
        "groups whose usage is not the sum of charges"
    );
}

fn now_ms() -> i64 {
    SystemTime::now()
        .duration_since(UNIX_EPOCH)
        .unwrap()
        .as_millis() as i64
}

/// The median and the largest of `times`.
fn median_max(times: &[Duration]) -> (Duration, Duration) {
    let mut sorted = times.to_vec();
    sorted.sort();
    (sorted[sorted.len() / 2], sorted[sorted.len() - 1])
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn failover_rounds_lose_no_acknowledged_request_and_send_none_twice() {
    let rounds = rounds();
    let cluster = Cluster::start().expect("a PostgreSQL cluster");
    let timeout = format!("{}s", IDLE_SESSION_TIMEOUT.as_secs());
    for setting in [
        "idle_session_timeout",
        "idle_in_transaction_session_timeout",
    ] {
        (cluster.psql(&format!("ALTER SYSTEM SET {setting} = '{timeout}'")))
            .expect("the server's timeouts");
    }
    cluster.psql("SELECT pg_reload_conf()").expect("reloaded");
    let sim = SimProcess::start();
    let files = BrokerFiles::for_sim(&sim);
    let logs = std::env::var_os("MSSBROKER_FAILOVER_LOGS")
        .map(PathBuf::from)
        .unwrap_or_else(|| files._dir.path().to_path_buf());
    let mut brokers = block_in_place(|| Brokers::start(files, &cluster, logs));
    let client = reqwest::Client::new();
    let first = leader(&client, &brokers, Duration::from_secs(30)).await;
    eprintln!("slot {first} leads first");
    let load = Load::start(brokers.bases.clone());

    let kinds = [Failure::Kill, Failure::Freeze, Failure::DatabaseRestart];
    let mut takeovers: HashMap<Failure, Vec<Duration>> = HashMap::new();
    for round in 0..rounds {
        for kind in kinds {
            let slot = leader(&client, &brokers, Duration::from_secs(30)).await;
            let other = slot ^ 1;
            load.progress(load.acks().len(), PER_ROUND, Duration::from_secs(60))
                .await;
            let t0 = Instant::now();
            let took = match kind {
                Failure::Kill => {
                    block_in_place(|| brokers.process(slot).kill());
                    let took = load.first_ack_after(t0, Some(other), KILL_BOUND).await;
                    block_in_place(|| brokers.restart(slot));
                    standing_by(&client, &brokers.base(slot), Duration::from_secs(30)).await;
                    took
                }
                Failure::Freeze => {
                    let old = brokers.base(slot);
                    brokers.process(slot).signal("STOP");
                    let bound = IDLE_SESSION_TIMEOUT + KILL_BOUND;
                    let took = load.first_ack_after(t0, Some(other), bound).await;
                    let resumed = Instant::now();
                    let resumed_ms = now_ms();
                    brokers.process(slot).signal("CONT");
                    standing_by(&client, &old, Duration::from_secs(30)).await;
                    assert_serves_as_a_standby(&client, &old).await;
                    assert_resumed_acknowledged_nothing_new(
                        &client,
                        &brokers.base(other),
                        &load.acks(),
                        slot,
                        resumed,
                        resumed_ms,
                    )
                    .await;
                    took
                }
                Failure::DatabaseRestart => {
                    block_in_place(|| {
                        cluster.stop_immediately().expect("stopped");
                        cluster.start_again().expect("started again");
                    });
                    let back = Instant::now();
                    let limit = KILL_BOUND.saturating_sub(back - t0);
                    load.first_ack_after(back, None, limit).await + (back - t0)
                }
            };
            eprintln!("round {round}, {kind:?} of slot {slot}: a 202 after {took:?}");
            takeovers.entry(kind).or_default().push(took);
            assert_nothing_lost_nothing_twice(&cluster, &sim, &load.acks()).await;
        }
    }

    let acks = load.stop().await;
    let slot = leader(&client, &brokers, Duration::from_secs(30)).await;
    let base = brokers.base(slot);
    assert_nothing_lost_nothing_twice(&cluster, &sim, &acks).await;
    let all = block_in_place(|| ledger_ids(&cluster));
    let done = wait_final(&client, &base, &all, Duration::from_secs(180)).await;
    assert_transferred_and_charged_once(&client, &base, &sim, &done).await;
    for kind in kinds {
        let (median, max) = median_max(&takeovers[&kind]);
        eprintln!(
            "takeover after {kind:?}: median {median:?}, max {max:?} ({} rounds)",
            takeovers[&kind].len()
        );
    }
    let received = sim.received().await;
    eprintln!(
        "{} requests acknowledged, {} in the ledger, all done; the simulator received {} \
         transfers (each key once) and answered {} resubmissions as duplicates; {} broker starts",
        acks.len(),
        all.len(),
        received.received.len(),
        received.duplicates,
        brokers.starts
    );
}

/// The broker at `base` serves as a standby: a write answers 503 with `Retry-After`, and its
/// metrics say it holds no term.
async fn assert_serves_as_a_standby(client: &reqwest::Client, base: &str) {
    let body = load_request("standby-probe", 0);
    let resp = (client
        .post(format!("{base}/v1/requests"))
        .json(&body)
        .send())
    .await
    .expect("an answer");
    assert_eq!(resp.status().as_u16(), 503, "a write to a standby");
    assert!(resp.headers().contains_key("retry-after"), "{resp:?}");
    let metrics = (client.get(format!("{base}/metrics")).send().await)
        .expect("metrics")
        .text()
        .await
        .expect("a body");
    assert!(metrics.contains("mssbroker_leader 0"), "{metrics}");
}

/// A resumed old leader acknowledges nothing it did not commit before it was frozen: every
/// 202 it answered after `resumed` is for a request created before then (`created_ms`, as the
/// leader at `base` shows it). A request it had created after its resumption would have been
/// committed at its stale epoch.
async fn assert_resumed_acknowledged_nothing_new(
    client: &reqwest::Client,
    base: &str,
    acks: &[Ack],
    slot: usize,
    resumed: Instant,
    resumed_ms: i64,
) {
    for a in (acks.iter()).filter(|a| a.slot == slot && a.at > resumed) {
        let (status, r) = get(client, base, &format!("/v1/requests/{}", a.id))
            .await
            .expect("an answer");
        assert_eq!(status, 200, "{r}");
        let created = r["created_ms"].as_i64().unwrap();
        assert!(
            created < resumed_ms,
            "the resumed old leader acknowledged {a:?}, created at {created} after it resumed at {resumed_ms}"
        );
    }
}
