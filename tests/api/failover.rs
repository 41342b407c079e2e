//! The failover rounds (issue 42's goal, docs/ha.md "The failover rounds"): one PostgreSQL
//! cluster, two real `serve` processes on it (the same configuration and simulator), the real
//! simulator, and 8 clients that submit continuously, each request with a fresh
//! `client_request_id`, resubmitting the same one to the other broker on a 503 or a broken
//! connection (or no answer within 2 s). Rounds of three kinds of failure, under that load:
//!
//! - **kill**: SIGKILL of the leader, then started again (it stands by);
//! - **freeze**: SIGSTOP of the leader; once the standby has answered a 202, 8 requests with
//!   fresh `client_request_id`s are written straight to the frozen broker, then SIGCONT. The
//!   resumed broker must serve as a standby, answer none of the 8 with a 202 and commit none of
//!   them;
//! - **database restart**: PostgreSQL stopped `-m immediate` and started again.
//!
//! After each round: every acknowledged request is in the ledger under its id and
//! `client_request_id`, and the simulator received no request more than once (counted by
//! request id, so a second key for one request counts) and only the ledger's. At the end, with
//! the load stopped, every request is done, the simulator received each exactly once (as many
//! transfers as requests), and each group's usage is the sum of its requests' charges. The
//! takeover times are printed per kind (median and max).
//!
//! Bounds asserted: a 202 from the standby within [`KILL_BOUND`] of a kill; within the
//! server's `idle_session_timeout` ([`IDLE_SESSION_TIMEOUT`], which ends a frozen leader's
//! session and so frees the leadership lock) plus [`KILL_BOUND`] of a freeze; a 202 within
//! [`KILL_BOUND`] of the restarted database accepting connections (its restart's own length is
//! printed, not bounded). Every other wait is for a state, given up after [`PATIENCE`].
//!
//! Rounds: `MSSBROKER_FAILOVER_ROUNDS` of each kind (default 1; docs/ha.md has the soak
//! command with 10).

use std::collections::{HashMap, HashSet};
use std::path::{Path, PathBuf};
use std::sync::atomic::{AtomicBool, Ordering};
use std::sync::{Arc, Mutex};
use std::time::{Duration, Instant};

use pg_cluster::Cluster;
use serde_json::Value;
use tokio::io::{AsyncReadExt, AsyncWriteExt};
use tokio::net::TcpStream;
use tokio::task::block_in_place;

use crate::helpers::{wait_final, BrokerFiles, ServeProcess, SimProcess};
use crate::postgres::{
    assert_each_request_at_most_once, assert_transferred_and_charged_once, get, ledger_ids,
    load_request, standing_by, PATIENCE,
};

/// How soon a standby must acknowledge after the leader is killed (the goal). A kill
/// closes the leader's sockets, the server ends its session at once, and a standby tries the
/// lock every `contend_every` (1 s): the rest is the new term's opening and a client's retry.
const KILL_BOUND: Duration = Duration::from_secs(10);

/// The server's `idle_session_timeout` in this test (set with `ALTER SYSTEM`, as docs/ha.md
/// says to set it on the broker's role): a frozen leader's leadership session ends after it.
/// It stays well above the heartbeat (1 s) so that a live leader descheduled on a loaded
/// machine keeps its session.
const IDLE_SESSION_TIMEOUT: Duration = Duration::from_secs(5);

/// Fresh requests sent straight to the frozen leader just before it is resumed.
const FROZEN_PROBES: usize = 8;

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
/// `client_request_id`), no request is stored twice, the simulator received no request more
/// than once (by request id, whatever the key) and only the ledger's, and every group's usage
/// is the sum of its requests' charges.
async fn assert_nothing_lost_nothing_twice(cluster: &Cluster, sim: &SimProcess, acks: &[Ack]) {
    // The simulator first: whatever it received was committed before, so the ledger read next
    // holds it even while the load goes on.
    let received = sim.received().await;
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
    let ids: HashSet<i64> = stored.keys().copied().collect();
    assert_each_request_at_most_once(&received, &ids);
    let mismatched = block_in_place(|| cluster.psql(USAGE_NOT_CHARGES)).expect("the usage");
    assert_eq!(
        mismatched, "",
        "groups whose usage is not the sum of charges"
    );
}

/// Fresh requests written straight to a frozen broker, each whole on a connection of its own
/// (the kernel accepts the connection and takes the bytes while the process is stopped); their
/// answers are read by spawned tasks once it resumes.
struct Probes {
    crids: Vec<String>,
    answers: Vec<tokio::task::JoinHandle<Option<u16>>>,
}

impl Probes {
    /// Write `n` requests with `client_request_id`s no client has used to the broker at
    /// `base`; returns once each is written.
    async fn send(base: &str, round: usize, n: usize) -> Probes {
        let addr = base.trim_start_matches("http://").to_string();
        let mut probes = Probes {
            crids: Vec::new(),
            answers: Vec::new(),
        };
        for i in 0..n {
            let crid = format!("frozen-{round}-{i}");
            let body = load_request(&crid, i as u64).to_string();
            let http = format!(
                "POST /v1/requests HTTP/1.1\r\nHost: {addr}\r\ncontent-type: application/json\r\n\
                 content-length: {}\r\nconnection: close\r\n\r\n{body}",
                body.len()
            );
            let mut stream = (TcpStream::connect(&addr).await).expect("the kernel accepts");
            stream.write_all(http.as_bytes()).await.expect("written");
            probes.answers.push(tokio::spawn(status_of_answer(stream)));
            probes.crids.push(crid);
        }
        probes
    }

    /// Each probe's `client_request_id` and the status it was answered (`None`: the
    /// connection closed without an answer).
    async fn answered(self) -> Vec<(String, Option<u16>)> {
        let mut answered = Vec::new();
        for (crid, answer) in self.crids.into_iter().zip(self.answers) {
            answered.push((crid, answer.await.expect("a probe")));
        }
        answered
    }
}

/// The status of the answer on `stream` (read to its end: the request said `connection:
/// close`); panics if none comes within [`PATIENCE`].
async fn status_of_answer(mut stream: TcpStream) -> Option<u16> {
    let mut answer = Vec::new();
    let read = tokio::time::timeout(PATIENCE, stream.read_to_end(&mut answer)).await;
    assert!(read.is_ok(), "no answer within {PATIENCE:?}");
    let text = String::from_utf8_lossy(&answer);
    text.split(' ').nth(1)?.parse().ok()
}

/// A resumed old leader commits nothing: none of the requests written to it while it was
/// frozen is answered 202, and none of them is in the ledger. Called once it stands by.
async fn assert_resumed_committed_nothing(cluster: &Cluster, probes: Probes) {
    let answered = probes.answered().await;
    eprintln!("the frozen broker's answers once resumed: {answered:?}");
    let accepted: Vec<&(String, Option<u16>)> =
        (answered.iter()).filter(|(_, s)| *s == Some(202)).collect();
    assert_eq!(
        accepted,
        Vec::<&(String, Option<u16>)>::new(),
        "the resumed old leader acknowledged"
    );
    let list = (answered.iter().map(|(crid, _)| format!("'{crid}'")))
        .collect::<Vec<_>>()
        .join(",");
    let sql = format!("SELECT client_request_id FROM requests WHERE client_request_id IN ({list})");
    let stored = block_in_place(|| cluster.psql(&sql)).expect("the probes' rows");
    assert_eq!(stored, "", "the resumed old leader committed these");
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
    let first = leader(&client, &brokers, PATIENCE).await;
    eprintln!("slot {first} leads first");
    let load = Load::start(brokers.bases.clone());

    let kinds = [Failure::Kill, Failure::Freeze, Failure::DatabaseRestart];
    let mut takeovers: HashMap<Failure, Vec<Duration>> = HashMap::new();
    let mut restarts: Vec<Duration> = Vec::new();
    for round in 0..rounds {
        for kind in kinds {
            let slot = leader(&client, &brokers, PATIENCE).await;
            let other = slot ^ 1;
            load.progress(load.acks().len(), PER_ROUND, PATIENCE).await;
            let t0 = Instant::now();
            let took = match kind {
                Failure::Kill => {
                    block_in_place(|| brokers.process(slot).kill());
                    let took = load.first_ack_after(t0, Some(other), KILL_BOUND).await;
                    block_in_place(|| brokers.restart(slot));
                    standing_by(&client, &brokers.base(slot), PATIENCE).await;
                    took
                }
                Failure::Freeze => {
                    let old = brokers.base(slot);
                    brokers.process(slot).signal("STOP");
                    let bound = IDLE_SESSION_TIMEOUT + KILL_BOUND;
                    let took = load.first_ack_after(t0, Some(other), bound).await;
                    let probes = Probes::send(&old, round, FROZEN_PROBES).await;
                    brokers.process(slot).signal("CONT");
                    standing_by(&client, &old, PATIENCE).await;
                    assert_serves_as_a_standby(&client, &old).await;
                    assert_resumed_committed_nothing(&cluster, probes).await;
                    took
                }
                Failure::DatabaseRestart => {
                    // The bound runs from the moment the database accepts connections again
                    // (`pg_ctl start -w` returns then): how long PostgreSQL takes to stop,
                    // recover and start is the machine's, printed apart.
                    let restart = block_in_place(|| {
                        cluster.stop_immediately().expect("stopped");
                        cluster.start_again().expect("started again");
                        t0.elapsed()
                    });
                    eprintln!(
                        "round {round}: PostgreSQL stopped and accepting again after {restart:?}"
                    );
                    restarts.push(restart);
                    load.first_ack_after(Instant::now(), None, KILL_BOUND).await
                }
            };
            eprintln!("round {round}, {kind:?} of slot {slot}: a 202 after {took:?}");
            takeovers.entry(kind).or_default().push(took);
            assert_nothing_lost_nothing_twice(&cluster, &sim, &load.acks()).await;
        }
    }

    let acks = load.stop().await;
    let slot = leader(&client, &brokers, PATIENCE).await;
    let base = brokers.base(slot);
    assert_nothing_lost_nothing_twice(&cluster, &sim, &acks).await;
    let all = block_in_place(|| ledger_ids(&cluster));
    let done = wait_final(&client, &base, &all, PATIENCE * 3).await;
    assert_transferred_and_charged_once(&client, &base, &sim, &done).await;
    for kind in kinds {
        let (median, max) = median_max(&takeovers[&kind]);
        eprintln!(
            "takeover after {kind:?}: median {median:?}, max {max:?} ({} rounds)",
            takeovers[&kind].len()
        );
    }
    let (median, max) = median_max(&restarts);
    eprintln!("PostgreSQL's restart (stop, recovery, start): median {median:?}, max {max:?}");
    let received = sim.received().await;
    eprintln!(
        "{} requests acknowledged, {} in the ledger, all done; the simulator received {} \
         transfers (each request once) and answered {} resubmissions as duplicates; {} broker starts",
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
