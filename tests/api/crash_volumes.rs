//! Nothing lost, nothing transferred or charged twice, in the configuration the pass-through
//! crash test (`crash.rs`) does not reach: `[release] mode = "volumes"` with
//! `coalesce = "queued"`. The real `serve` process is killed with SIGKILL at seeded points of
//! a load (counted in acknowledgements, not time) of reads of a small pool of files, on volumes
//! at positions, from several stations and groups (so duplicates ride on queued and decided
//! carriers), with cancels of acknowledged requests (carriers, riders, queued, at the MSS)
//! sent during the load and, in some rounds, the simulator process killed and restarted (an
//! MSS outage that loses what it held). After the rounds a last broker drains the work and the
//! database and what the simulator received are checked.
//!
//! Replay a failure with its seed: `MSSBROKER_VOLUME_KILL_SEED=N` (printed at the start);
//! `MSSBROKER_VOLUME_KILL_ROUNDS` sets the rounds (default 3, a few seconds; a soak sets more).
//! The requests each worker sends and the kill points are the seed's; the interleaving of the
//! workers is the machine's.

use std::collections::{HashMap, HashSet};
use std::sync::{Arc, Mutex};
use std::time::Duration;

use mss_adapters::protocol::{Faults, Received};
use serde_json::{json, Value};

use crate::helpers::{
    key_id, open_db, request, set_faults, test_config, wait_for_count, ServeProcess, SimProcess,
};

/// Distinct files the load reads: few, so duplicates are the rule.
const POOL: u64 = 24;
/// The simulator's virtual seconds per second: a 1 GB file (5 s mount, 2 s read) takes 35 ms,
/// long enough for cancels and duplicates to find transfers at the MSS.
const TIME_SCALE: f64 = 200.0;
const STATIONS: [&str; 3] = ["st-a", "st-b", "st-c"];
const MODES: [(&str, &str); 4] = [
    ("analysis", "higgs"),
    ("analysis", "top"),
    ("mc", "x"),
    ("reprocessing", "r"),
];

/// xorshift64: a failing seed replays the same requests and kill points.
#[derive(Clone, Copy)]
struct Rng(u64);

impl Rng {
    fn new(seed: u64) -> Rng {
        Rng(seed.max(1))
    }
    fn next(&mut self) -> u64 {
        self.0 ^= self.0 << 13;
        self.0 ^= self.0 >> 7;
        self.0 ^= self.0 << 17;
        self.0
    }
    fn below(&mut self, n: u64) -> u64 {
        self.next() % n
    }
}

/// Volumes eligible at 3 files or after a quiet second (so the drain needs no more than
/// that), two volumes in flight of the simulator's four drives, small batches so a volume is
/// read in several, duplicates riding on queued carriers too.
fn config(sim_url: &str) -> String {
    format!(
        "{}\n[release]\nmode = \"volumes\"\ncoalesce = \"queued\"\n\n[release.volumes]\n\
         min_volume_bytes = 1000000000000000\nmin_volume_files = 3\nquiet_secs = 1\n\
         max_age_secs = 2\nbatch_max_bytes = 1000000000000000\nbatch_max_files = 4\n\
         sticky_secs = 1\nmax_volumes = 2\n",
        // Outages lose transfers (a new attempt each): room for a few in a soak.
        test_config(Some(sim_url))
            .replace("retry_base_ms", "retry_max_attempts = 50\nretry_base_ms")
    )
}

/// A read of pool file `f` by `station` for `mode`/`group`: the file's volume, position and
/// size are the file's own; one in five asks for a station-side copy of its own (never
/// coalesced with another station's).
fn read_of(crid: &str, f: u64, station: &str, (mode, group): (&str, &str), local: bool) -> Value {
    let mut body = request(crid, mode, group, (1 + f % 8) * 1_000_000_000);
    body["station"] = station.into();
    body["file"] = format!("/pnfs/pool/f{f}.dat").into();
    if f % 7 != 6 {
        body["volume"] = format!("V{}", f % 4).into();
        body["position"] = (f * 100).into();
    }
    if local {
        body["local_file"] = format!("/data/{station}/f{f}.dat").into();
    }
    body
}

/// What the load did, shared by the workers and kept across rounds.
#[derive(Default)]
struct Book {
    /// crid -> (id, body, the state the 202 named).
    acks: HashMap<String, (i64, Value, String)>,
    /// id -> the answer to each cancel sent for it (0: no answer, the broker died).
    cancels: HashMap<i64, Vec<u16>>,
    /// Per worker, the ids it got 202s for, in order, and whether each was answered riding
    /// (its cancels pick among the last 48: queued, riding, at the MSS or done).
    mine: Vec<Vec<(i64, bool)>>,
    /// Acknowledged submissions and answered cancels, the kill points' count.
    answered: usize,
    /// Answers a live broker should not give.
    unexpected: Vec<String>,
}

type BookHandle = Arc<Mutex<Book>>;

/// One worker: seeded submissions and cancels until the broker dies.
async fn worker(
    base: String,
    client: reqwest::Client,
    book: BookHandle,
    w: usize,
    seed: u64,
    tag: String,
) {
    let mut rng = Rng::new(seed);
    let mut n = 0u64;
    loop {
        n += 1;
        // Half the cancels go to carriers (answered not riding: queued, or at the MSS).
        let carriers_only = rng.below(2) == 0;
        let recent = {
            let b = book.lock().unwrap();
            (b.mine[w].iter().rev())
                .filter(|(_, riding)| !(carriers_only && *riding))
                .take(48)
                .map(|(id, _)| *id)
                .collect::<Vec<i64>>()
        };
        if !recent.is_empty() && rng.below(5) == 0 {
            let id = recent[rng.below(recent.len() as u64) as usize];
            loop {
                let Ok(resp) = client
                    .delete(format!("{base}/v1/requests/{id}"))
                    .send()
                    .await
                else {
                    book.lock().unwrap().cancels.entry(id).or_default().push(0);
                    return;
                };
                let status = resp.status().as_u16();
                let Ok(v) = resp.json::<Value>().await else {
                    book.lock().unwrap().cancels.entry(id).or_default().push(0);
                    return;
                };
                if status == 503 {
                    tokio::time::sleep(Duration::from_millis(20)).await;
                    continue;
                }
                let mut b = book.lock().unwrap();
                b.cancels.entry(id).or_default().push(status);
                b.answered += 1;
                let fine = match status {
                    200 => v["state"] == "cancelled",
                    202 => v["cancel_requested"] == true,
                    409 => true,
                    _ => false,
                };
                if !fine {
                    b.unexpected.push(format!("cancel {id}: {status} {v}"));
                }
                break;
            }
            continue;
        }
        let f = rng.below(POOL);
        let station = STATIONS[rng.below(3) as usize];
        let who = if rng.below(12) == 0 {
            ("datataking", "daq")
        } else {
            MODES[rng.below(4) as usize]
        };
        let local = rng.below(5) == 0;
        let crid = format!("{tag}-w{w}-{n}");
        let body = read_of(&crid, f, station, who, local);
        loop {
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
            match status {
                202 => {
                    let id = v["id"].as_i64().unwrap();
                    let state = v["state"].as_str().unwrap_or_default().to_string();
                    let mut b = book.lock().unwrap();
                    b.mine[w].push((id, state == "riding"));
                    b.acks.insert(crid, (id, body, state));
                    b.answered += 1;
                    break;
                }
                503 => tokio::time::sleep(Duration::from_millis(20)).await,
                _ => {
                    book.lock()
                        .unwrap()
                        .unexpected
                        .push(format!("{crid}: {status} {v}"));
                    break;
                }
            }
        }
    }
}

/// Stop the simulator the way an MSS dies (its queue and event log lost) and start a fresh
/// one on the same address; what the old one received is kept in `history`. The old one is
/// made to refuse every call first, so nothing reaches it between reading its record and the
/// kill.
async fn restart_sim(sim: SimProcess, history: &mut Vec<Received>) -> SimProcess {
    let down = Faults {
        down_for_ms: 600_000,
        ..Faults::default()
    };
    set_faults(&sim, &down).await;
    history.extend(sim.received().await.received);
    let listen = sim.url.trim_start_matches("http://").to_string();
    drop(sim);
    SimProcess::start_on(&listen, 4, TIME_SCALE)
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn sigkill_in_volumes_mode_with_queued_coalescing_and_cancels_moves_and_charges_each_once() {
    let rounds: u64 = std::env::var("MSSBROKER_VOLUME_KILL_ROUNDS")
        .ok()
        .and_then(|v| v.parse().ok())
        .unwrap_or(3);
    let seed: u64 = std::env::var("MSSBROKER_VOLUME_KILL_SEED")
        .ok()
        .and_then(|v| v.parse().ok())
        .unwrap_or(0x005e_ed0f_c0a1_e5ce);
    eprintln!("MSSBROKER_VOLUME_KILL_SEED={seed} MSSBROKER_VOLUME_KILL_ROUNDS={rounds}");
    let mut rng = Rng::new(seed);
    let mut sim = SimProcess::start_with(4, TIME_SCALE);
    let dir = tempfile::tempdir().unwrap();
    let (config_path, db) = (dir.path().join("broker.toml"), dir.path().join("broker.db"));
    std::fs::write(&config_path, config(&sim.url)).unwrap();
    let workers = 6usize;
    let book: BookHandle = Arc::new(Mutex::new(Book {
        mine: vec![Vec::new(); workers],
        ..Book::default()
    }));
    let client = reqwest::Client::new();
    // What earlier simulator processes received.
    let mut history: Vec<Received> = Vec::new();
    let (mut kills, mut sim_restarts) = (0usize, 0usize);

    for round in 0..rounds {
        let broker = ServeProcess::start(&config_path, &db);
        let before = book.lock().unwrap().answered;
        let mut tasks = Vec::new();
        for w in 0..workers {
            let worker_seed = rng.next();
            tasks.push(tokio::spawn(worker(
                broker.base.clone(),
                client.clone(),
                book.clone(),
                w,
                worker_seed,
                format!("r{round}"),
            )));
        }
        let target = 20 + rng.below(100) as usize;
        let extra = rng.below(25);
        // The MSS dies mid-round in round 1 and in a seeded third of the others.
        let mut sim_dies_at = (round == 1 || rng.below(3) == 0).then_some(target / 2);
        let deadline = tokio::time::Instant::now() + Duration::from_secs(60);
        loop {
            let got = book.lock().unwrap().answered - before;
            if sim_dies_at.is_some_and(|at| got >= at) {
                sim_dies_at = None;
                sim = restart_sim(sim, &mut history).await;
                sim_restarts += 1;
            }
            if got >= target {
                break;
            }
            assert!(
                tokio::time::Instant::now() < deadline,
                "round {round}: {got} of {target} answers in 60 s; unexpected: {:?}",
                book.lock().unwrap().unexpected
            );
            tokio::time::sleep(Duration::from_millis(2)).await;
        }
        tokio::time::sleep(Duration::from_millis(extra)).await;
        let mut broker = broker;
        broker.kill();
        kills += 1;
        for t in tasks {
            t.await.unwrap();
        }
        eprintln!(
            "round {round}: killed {extra} ms after {target} answers; {} acknowledged so far",
            book.lock().unwrap().acks.len()
        );
    }

    // A last broker: replays of acknowledged requests are the same requests, then the drain.
    let broker = ServeProcess::start(&config_path, &db);
    let book = Arc::try_unwrap(book).ok().unwrap().into_inner().unwrap();
    assert_eq!(
        book.unexpected,
        [] as [String; 0],
        "answers of a live broker"
    );
    let mut crids: Vec<&String> = book.acks.keys().collect();
    crids.sort();
    for crid in crids.iter().step_by(7) {
        let (id, body, _) = &book.acks[*crid];
        let v: Value = (client
            .post(format!("{}/v1/requests", broker.base))
            .json(body))
        .send()
        .await
        .unwrap()
        .json()
        .await
        .unwrap();
        assert_eq!(
            (v["id"].as_i64(), &v["duplicate"]),
            (Some(*id), &json!(true)),
            "{crid}: {v}"
        );
    }
    wait_for_count(
        &db,
        "SELECT COUNT(*) FROM requests WHERE state NOT IN ('done', 'failed', 'cancelled')",
        0,
        Duration::from_secs(120),
    )
    .await;
    let mut received = history;
    received.extend(sim.received().await.received);
    drop(broker);
    let stats = check(&db, &book, &received);
    eprintln!(
        "{rounds} rounds, {kills} broker kills, {sim_restarts} MSS restarts: {} acknowledged, {stats}",
        book.acks.len()
    );
}

/// A request's row, as the checks read it.
#[derive(Debug, Clone)]
struct Row {
    id: i64,
    crid: String,
    file: String,
    local: Option<String>,
    size: i64,
    group: String,
    class: String,
    state: String,
    attempt: i64,
    rides_on: Option<i64>,
    bytes_done: i64,
    charged: i64,
    charged_bytes: i64,
    created_ms: i64,
    finished_ms: Option<i64>,
}

/// Every check of the drained database against what the load was told and what the MSS
/// received; a summary of what happened.
fn check(db: &std::path::Path, book: &Book, received: &[Received]) -> String {
    let conn = open_db(db);
    let rows: Vec<Row> = conn
        .prepare(
            "SELECT id, client_request_id, file, local_file, size_bytes, group_path, class, state, \
             attempt, rides_on, bytes_done, charged, charged_bytes, created_ms, finished_ms \
             FROM requests ORDER BY id",
        )
        .unwrap()
        .query_map([], |r| {
            Ok(Row {
                id: r.get(0)?,
                crid: r.get(1)?,
                file: r.get(2)?,
                local: r.get(3)?,
                size: r.get(4)?,
                group: r.get(5)?,
                class: r.get(6)?,
                state: r.get(7)?,
                attempt: r.get(8)?,
                rides_on: r.get(9)?,
                bytes_done: r.get(10)?,
                charged: r.get(11)?,
                charged_bytes: r.get(12)?,
                created_ms: r.get(13)?,
                finished_ms: r.get(14)?,
            })
        })
        .unwrap()
        .map(Result::unwrap)
        .collect();
    let by_id: HashMap<i64, &Row> = rows.iter().map(|r| (r.id, r)).collect();

    // Every 202 is stored once, under its id; no (station, client_request_id) twice.
    for (crid, (id, body, _)) in &book.acks {
        let (count, stored): (i64, Option<i64>) = conn
            .query_row(
                "SELECT COUNT(*), MIN(id) FROM requests WHERE station = ?1 AND client_request_id = ?2",
                [body["station"].as_str().unwrap(), crid],
                |r| Ok((r.get(0)?, r.get(1)?)),
            )
            .unwrap();
        assert_eq!((count, stored), (1, Some(*id)), "request {crid}");
    }
    let distinct: i64 = conn
        .query_row(
            "SELECT COUNT(*) FROM (SELECT DISTINCT station, client_request_id FROM requests)",
            [],
            |r| r.get(0),
        )
        .unwrap();
    assert_eq!(
        distinct as usize,
        rows.len(),
        "a (station, client_request_id) stored twice"
    );

    // Each (key, attempt) reached the MSS at most once, and only keys of stored requests.
    let mut seen = HashSet::new();
    let mut at_mss: HashMap<i64, HashSet<i64>> = HashMap::new();
    for t in received {
        assert!(
            seen.insert((t.key.clone(), t.attempt)),
            "the MSS queued {} attempt {} twice",
            t.key,
            t.attempt
        );
        let id = key_id(&t.key);
        assert!(by_id.contains_key(&id), "the MSS got {id}, never stored");
        at_mss.entry(id).or_default().insert(i64::from(t.attempt));
    }

    let cancel_sent = |id: i64| book.cancels.contains_key(&id);
    let answered_state = |r: &Row| book.acks.get(&r.crid).map(|(_, _, s)| s.as_str());
    let (mut riders_done, mut carried_done, mut cancelled) = (0, 0, 0);
    for r in &rows {
        // Final: done, or cancelled if a cancel was sent; never failed (no failure is injected
        // and attempts are plenty).
        match r.state.as_str() {
            "done" => {
                assert_eq!(
                    (r.bytes_done, r.charged_bytes, r.charged),
                    (r.size, r.size, r.size),
                    "done, charged its bytes once: {r:?}"
                );
            }
            "cancelled" => {
                cancelled += 1;
                assert!(cancel_sent(r.id), "cancelled without a cancel: {r:?}");
                assert_eq!(
                    (r.charged, r.charged_bytes),
                    (0, 0),
                    "a cancelled request is refunded: {r:?}"
                );
            }
            _ => panic!("not done nor cancelled: {r:?}"),
        }
        if book.cancels.get(&r.id).is_some_and(|c| c.contains(&200)) {
            assert_eq!(
                r.state, "cancelled",
                "a cancel answered 200 ends cancelled: {r:?}"
            );
        }
        match r.rides_on {
            // A rider never reached the MSS itself; it ended with its carrier, which moved the
            // file (and ended done, or cancelled by its caller once the riders had the result).
            Some(c) => {
                assert!(
                    !at_mss.contains_key(&r.id),
                    "a rider was transferred: {r:?}"
                );
                let carrier = by_id[&c];
                assert_eq!(
                    (&carrier.file, &carrier.local),
                    (&r.file, &r.local),
                    "rides on another file: {r:?} {carrier:?}"
                );
                assert!(
                    carrier.rides_on.is_none(),
                    "rides on a rider: {r:?} {carrier:?}"
                );
                if r.class == "priority" {
                    assert_eq!(
                        carrier.class, "priority",
                        "a priority-class read rides on a fair-share one: {r:?} {carrier:?}"
                    );
                }
                if r.state == "done" {
                    riders_done += 1;
                    assert!(
                        at_mss.contains_key(&c),
                        "a rider done with a carrier never at the MSS: {r:?} {carrier:?}"
                    );
                    assert!(
                        carrier.state == "done" || (carrier.state == "cancelled" && cancel_sent(c)),
                        "a rider done with a carrier that was not: {r:?} {carrier:?}"
                    );
                }
            }
            // Done on its own: its last attempt is the MSS's.
            None if r.state == "done" => {
                carried_done += 1;
                assert!(
                    at_mss.get(&r.id).is_some_and(|a| a.contains(&r.attempt)),
                    "done without its attempt at the MSS: {r:?} {:?}",
                    at_mss.get(&r.id)
                );
            }
            None => {}
        }
    }

    // Duplicates coalesced where the rules say they must: two reads of one file and local copy
    // that each carried their own transfer (answered not riding, never cancelled, so neither
    // was promoted nor stopped carrying) did not overlap, unless the later is a priority-class
    // read and the earlier not (it may not ride behind a lower class).
    let carriers: Vec<&Row> = rows
        .iter()
        .filter(|r| r.rides_on.is_none() && !cancel_sent(r.id))
        .filter(|r| answered_state(r).is_some_and(|s| s != "riding"))
        .collect();
    let mut by_file: HashMap<(&str, Option<&str>), Vec<&Row>> = HashMap::new();
    for r in &carriers {
        by_file
            .entry((&r.file, r.local.as_deref()))
            .or_default()
            .push(r);
    }
    for list in by_file.values() {
        for (i, a) in list.iter().enumerate() {
            for b in &list[i + 1..] {
                let may_ride = b.class != "priority" || a.class == "priority";
                let overlap = a.finished_ms.is_some_and(|f| f > b.created_ms + 5);
                assert!(
                    !(may_ride && overlap),
                    "{} arrived while {} carried its file, and did not ride: {a:?} {b:?}\n\
                     every read of the file: {:#?}",
                    b.id,
                    a.id,
                    rows.iter()
                        .filter(|r| r.file == a.file && r.local == a.local)
                        .map(|r| (r, answered_state(r), book.cancels.get(&r.id)))
                        .collect::<Vec<_>>()
                );
            }
        }
    }

    // Each group's usage is what its own done requests moved; nothing pending or held.
    let groups: Vec<(String, i64, i64, i64, i64)> = conn
        .prepare("SELECT path, CAST(usage AS INTEGER), CAST(usage_bytes AS INTEGER), pending, held FROM groups")
        .unwrap()
        .query_map([], |r| Ok((r.get(0)?, r.get(1)?, r.get(2)?, r.get(3)?, r.get(4)?)))
        .unwrap()
        .map(Result::unwrap)
        .collect();
    for (path, usage, usage_bytes, pending, held) in groups {
        let done: i64 = rows
            .iter()
            .filter(|r| r.group == path && r.state == "done")
            .map(|r| r.bytes_done)
            .sum();
        assert_eq!(
            (usage, usage_bytes, pending, held),
            (done, done, 0, 0),
            "group {path}"
        );
    }
    let answers = |status: u16| {
        book.cancels
            .values()
            .flatten()
            .filter(|&&s| s == status)
            .count()
    };
    let done_after_202 = (rows.iter())
        .filter(|r| r.state == "done" && book.cancels.get(&r.id).is_some_and(|c| c.contains(&202)))
        .count();
    format!(
        "{} stored, {carried_done} done by their own transfer, {riders_done} done riding, \
         {cancelled} cancelled of {} with cancels sent (answers: {} 200, {} 202 of which \
         {done_after_202} ended done, {} 409, {} lost in a kill), {} transfers at the MSS",
        rows.len(),
        book.cancels.len(),
        answers(200),
        answers(202),
        answers(409),
        answers(0),
        received.len()
    )
}
