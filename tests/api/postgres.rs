//! The broker end to end on PostgreSQL (issue 42, docs/ha.md step 4's last check): a throwaway
//! cluster (pg-cluster), the real `mssbroker serve --db postgresql://…` process and the real
//! simulator process. Submissions (single and a batch) are acknowledged, answered by `GET`,
//! transferred once and charged once; a broker killed with SIGKILL under load and started again
//! on the same database loses nothing and sends nothing twice. The helpers here serve the
//! failover rounds too (`failover.rs`).

use std::collections::{HashMap, HashSet};
use std::path::Path;
use std::sync::{Arc, Mutex};
use std::time::{Duration, Instant};

use mss_adapters::protocol::ReceivedResponse;
use pg_cluster::Cluster;
use serde_json::{json, Value};
use tokio::task::block_in_place;

use crate::helpers::{
    key_id, request, test_config, wait_final, BrokerFiles, ServeProcess, SimProcess,
};

/// `serve` on the cluster's database (`--db` takes the URL as it takes a file's path).
pub fn serve_on(files: &BrokerFiles, cluster: &Cluster) -> ServeProcess {
    ServeProcess::start(&files.config, Path::new(&cluster.url()))
}

/// `GET base path`: the status and the JSON body (`None`: no answer, the broker is down).
pub async fn get(client: &reqwest::Client, base: &str, path: &str) -> Option<(u16, Value)> {
    let resp = client.get(format!("{base}{path}")).send().await.ok()?;
    let status = resp.status().as_u16();
    Some((status, resp.json().await.unwrap_or(Value::Null)))
}

/// `POST base path body`, as `get`.
pub async fn post(
    client: &reqwest::Client,
    base: &str,
    path: &str,
    body: &Value,
) -> Option<(u16, Value)> {
    let resp = client
        .post(format!("{base}{path}"))
        .json(body)
        .send()
        .await
        .ok()?;
    let status = resp.status().as_u16();
    Some((status, resp.json().await.unwrap_or(Value::Null)))
}

/// Poll `/readyz` until it answers 200 (the broker leads and is ready); panics after `limit`
/// with the last answer.
pub async fn wait_ready(client: &reqwest::Client, base: &str, limit: Duration) {
    let start = Instant::now();
    loop {
        let answer = get(client, base, "/readyz").await;
        if matches!(answer, Some((200, _))) {
            return;
        }
        assert!(
            start.elapsed() < limit,
            "{base} not ready after {limit:?}: {answer:?}"
        );
        tokio::time::sleep(Duration::from_millis(50)).await;
    }
}

/// Wait until the broker at `base` answers `/readyz` as a standby (503 naming "standby").
pub async fn standing_by(client: &reqwest::Client, base: &str, limit: Duration) {
    let start = Instant::now();
    loop {
        let answer = get(client, base, "/readyz").await;
        if matches!(&answer, Some((503, v)) if v.get("standby").is_some()) {
            return;
        }
        assert!(
            start.elapsed() < limit,
            "{base} not a standby after {limit:?}: {answer:?}"
        );
        tokio::time::sleep(Duration::from_millis(50)).await;
    }
}

/// How long a wait that no bound of the sets may take before the test gives up (a
/// broker's start, a standby's settling, a few hundred requests finishing): generous, for a
/// loaded 2-core machine running the whole suite. Only the 10 s of the takeover bound
/// is a claim; these are patience.
pub const PATIENCE: Duration = Duration::from_secs(120);

/// How many transfers the simulator received for each request (`key_id` of each key): a
/// request sent twice under two keys counts 2, as much as one key received twice.
pub fn transfers_per_request(received: &ReceivedResponse) -> HashMap<i64, usize> {
    let mut counts: HashMap<i64, usize> = HashMap::new();
    for t in &received.received {
        *counts.entry(key_id(&t.key)).or_default() += 1;
    }
    counts
}

/// The simulator received no request more than once (by request id, whatever its key or
/// attempt: these tests inject no failure, so no request has a second attempt), and only
/// requests of the ledger (`ledger`, read after `received`: a request is committed before it is
/// sent).
pub fn assert_each_request_at_most_once(received: &ReceivedResponse, ledger: &HashSet<i64>) {
    let counts = transfers_per_request(received);
    let twice: HashMap<&i64, &usize> = counts.iter().filter(|(_, &n)| n > 1).collect();
    assert_eq!(
        twice,
        HashMap::new(),
        "requests the MSS received more than once (id: transfers)"
    );
    let strangers: Vec<&i64> = counts.keys().filter(|id| !ledger.contains(id)).collect();
    assert_eq!(
        strangers,
        Vec::<&i64>::new(),
        "requests the MSS received that the ledger does not hold"
    );
}

/// The simulator received each of the ledger's requests exactly once (counted by request id,
/// so a second transfer under another key counts) and nothing else: as many transfers as the
/// ledger has requests.
pub fn assert_each_request_exactly_once(received: &ReceivedResponse, ledger: &HashSet<i64>) {
    let counts = transfers_per_request(received);
    let not_once: Vec<(i64, usize)> = (ledger.iter())
        .map(|id| (*id, counts.get(id).copied().unwrap_or(0)))
        .filter(|(_, n)| *n != 1)
        .collect();
    assert_eq!(
        not_once,
        Vec::<(i64, usize)>::new(),
        "requests the MSS did not receive exactly once (id, transfers)"
    );
    assert_eq!(
        received.received.len(),
        ledger.len(),
        "the MSS received as many transfers as the ledger has requests"
    );
    assert_each_request_at_most_once(received, ledger);
}

/// Every request is done, each charged its size, each sent to the MSS exactly once and only the
/// broker's requests there; and each group's (and priority class's) usage as `GET /v1/groups`
/// shows it equals the sum of its requests' charges. `requests` are `GET /v1/requests/{id}`
/// answers, all of the ledger's requests.
pub async fn assert_transferred_and_charged_once(
    client: &reqwest::Client,
    base: &str,
    sim: &SimProcess,
    requests: &[Value],
) {
    for r in requests {
        assert_eq!(r["state"], "done", "{r}");
        assert_eq!(r["charged"], r["size_bytes"], "charged its size once: {r}");
    }
    let ids: HashSet<i64> = requests.iter().map(|r| r["id"].as_i64().unwrap()).collect();
    assert_eq!(
        ids.len(),
        requests.len(),
        "each request once in {requests:?}"
    );
    assert_each_request_exactly_once(&sim.received().await, &ids);
    let mut charges: HashMap<String, i64> = HashMap::new();
    for r in requests {
        let group = r["group"].as_str().unwrap().to_string();
        *charges.entry(group).or_default() += r["charged"].as_i64().unwrap();
    }
    let (status, groups) = get(client, base, "/v1/groups").await.expect("an answer");
    assert_eq!(status, 200, "{groups}");
    let leaves = (groups["groups"].as_array().unwrap().iter()).filter(|g| g["leaf"] == true);
    let classes = groups["priority_classes"].as_array().unwrap().iter();
    let mut usage: HashMap<String, i64> = HashMap::new();
    for g in leaves.chain(classes) {
        let used = g["usage"].as_i64().unwrap();
        if used != 0 {
            usage.insert(g["path"].as_str().unwrap().to_string(), used);
        }
    }
    assert_eq!(
        usage, charges,
        "each group's usage is the sum of its charges"
    );
}

/// A request of the load: its mode and group follow `n`.
pub fn load_request(crid: &str, n: u64) -> Value {
    const MODES: [(&str, &str); 4] = [
        ("analysis", "higgs"),
        ("analysis", "top"),
        ("mc", "x"),
        ("datataking", "daq"),
    ];
    let (mode, group) = MODES[(n % 4) as usize];
    request(crid, mode, group, 1_000_000 + n % 977)
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_broker_on_postgresql_acknowledges_transfers_and_charges_once_across_a_kill() {
    let cluster = Cluster::start().expect("a PostgreSQL cluster");
    let sim = SimProcess::start();
    let files = BrokerFiles::for_sim(&sim);
    let client = reqwest::Client::new();
    let broker = serve_on(&files, &cluster);
    let base = broker.base.clone();
    wait_ready(&client, &base, PATIENCE).await;

    // One request, then a batch: each acknowledged with its id.
    let single = request("single-1", "mc", "x", 7_000_000);
    let (status, first) = post(&client, &base, "/v1/requests", &single).await.unwrap();
    assert_eq!(status, 202, "{first}");
    let first_id = first["id"].as_i64().unwrap();
    let batch: Vec<Value> = (0..20)
        .map(|n| load_request(&format!("b-{n}"), n))
        .collect();
    let (status, answer) = post(
        &client,
        &base,
        "/v1/requests/batch",
        &json!({ "requests": batch }),
    )
    .await
    .unwrap();
    assert_eq!(status, 202, "{answer}");
    assert_eq!(answer["accepted"], 20, "{answer}");
    let mut ids: Vec<i64> = (answer["results"].as_array().unwrap().iter())
        .map(|r| r["id"].as_i64().unwrap())
        .collect();
    ids.push(first_id);
    let done = wait_final(&client, &base, &ids, PATIENCE).await;
    assert_transferred_and_charged_once(&client, &base, &sim, &done).await;
    // A resubmission is the same request, answered as a duplicate.
    let (status, again) = post(&client, &base, "/v1/requests", &single).await.unwrap();
    assert_eq!(status, 202, "{again}");
    assert_eq!(
        (again["id"].as_i64(), &again["duplicate"]),
        (Some(first_id), &json!(true))
    );
    let (status, one) = get(&client, &base, &format!("/v1/requests/{first_id}"))
        .await
        .unwrap();
    assert_eq!(
        (status, &one["client_request_id"]),
        (200, &json!("single-1"))
    );

    // Under load from 8 clients, SIGKILL, then the same database again.
    let acknowledged: Arc<Mutex<HashMap<String, i64>>> = Arc::default();
    let mut clients = Vec::new();
    for c in 0..8u64 {
        let (client, base, acks) = (client.clone(), base.clone(), acknowledged.clone());
        clients.push(tokio::spawn(async move {
            for n in (c * 1_000_000).. {
                let crid = format!("k-{n}");
                match post(&client, &base, "/v1/requests", &load_request(&crid, n)).await {
                    Some((202, v)) => {
                        acks.lock().unwrap().insert(crid, v["id"].as_i64().unwrap());
                    }
                    Some((status, v)) => panic!("{crid}: {status} {v}"),
                    None => return,
                }
            }
        }));
    }
    let deadline = Instant::now() + PATIENCE;
    while acknowledged.lock().unwrap().len() < 100 {
        assert!(Instant::now() < deadline, "the load was not acknowledged");
        tokio::time::sleep(Duration::from_millis(5)).await;
    }
    let mut broker = broker;
    broker.kill();
    for c in clients {
        c.await.expect("a client ends when the broker is gone");
    }
    let broker = serve_on(&files, &cluster);
    let base = broker.base.clone();
    wait_ready(&client, &base, PATIENCE).await;
    let acks = acknowledged.lock().unwrap().clone();
    // Every acknowledged request is there under its id, and a client resubmitting after the
    // crash gets that id back.
    for (crid, id) in &acks {
        let n: u64 = crid.trim_start_matches("k-").parse().unwrap();
        let (status, v) = post(&client, &base, "/v1/requests", &load_request(crid, n))
            .await
            .unwrap();
        assert_eq!((status, v["id"].as_i64()), (202, Some(*id)), "{crid}: {v}");
        assert_eq!(v["duplicate"], true, "{crid}: {v}");
    }
    // Everything the ledger holds (the acknowledged and those in flight at the kill)
    // finishes, each sent and charged once.
    let (status, metrics) = get_text(&client, &base, "/metrics").await;
    assert_eq!(status, 200);
    assert!(metrics.contains("mssbroker_leader 1"), "{metrics}");
    let all = ledger_ids(&cluster);
    assert!(ids.iter().chain(acks.values()).all(|id| all.contains(id)));
    let done = wait_final(&client, &base, &all, PATIENCE * 2).await;
    assert_transferred_and_charged_once(&client, &base, &sim, &done).await;
    // The share report counts each done request once.
    let (status, report) = get(&client, &base, "/v1/report").await.unwrap();
    assert_eq!(status, 200, "{report}");
    let files_done: i64 = (report["groups"].as_array().unwrap().iter())
        .filter(|g| g["leaf"] == true)
        .map(|g| g["files_done"].as_i64().unwrap())
        .sum();
    assert_eq!(files_done, done.len() as i64, "{report}");
    let (status, page) = get_text(&client, &base, "/report").await;
    assert_eq!(status, 200, "{page}");
    eprintln!(
        "{} requests on PostgreSQL, {} acknowledged under load before the kill",
        done.len(),
        acks.len()
    );
    drop(broker);
}

/// `GET base path` as text.
async fn get_text(client: &reqwest::Client, base: &str, path: &str) -> (u16, String) {
    let resp = client.get(format!("{base}{path}")).send().await.unwrap();
    (resp.status().as_u16(), resp.text().await.unwrap())
}

/// End the backends of `application` (`pg_terminate_backend`) and wait until they are gone
/// from `pg_stat_activity` (the call only signals them): their pids.
fn end_backends(cluster: &Cluster, application: &str) -> Vec<i64> {
    let pids = cluster
        .psql(&format!(
            "WITH ours AS MATERIALIZED (SELECT pid FROM pg_stat_activity \
             WHERE application_name = '{application}') \
             SELECT pid FROM ours WHERE pg_terminate_backend(pid)"
        ))
        .expect("terminated");
    let pids: Vec<i64> = pids.lines().map(|l| l.parse().expect("a pid")).collect();
    let list = (pids.iter().map(i64::to_string))
        .collect::<Vec<_>>()
        .join(",");
    let start = Instant::now();
    while !pids.is_empty() {
        let left = cluster
            .psql(&format!(
                "SELECT count(*) FROM pg_stat_activity WHERE pid IN ({list})"
            ))
            .expect("the backends left");
        if left == "0" {
            break;
        }
        assert!(
            start.elapsed() < PATIENCE,
            "{left} of the backends {list} still there after {PATIENCE:?}"
        );
        std::thread::sleep(Duration::from_millis(20));
    }
    pids
}

/// Every request id the ledger holds, read from the database itself.
pub fn ledger_ids(cluster: &Cluster) -> Vec<i64> {
    let ids = cluster
        .psql("SELECT id FROM requests ORDER BY id")
        .expect("the requests' ids");
    ids.lines().map(|l| l.parse().expect("an id")).collect()
}

/// A leader whose ledger connections the server ends (an administrator's
/// `pg_terminate_backend`, say) acknowledges nothing more, ends its term and resigns: the
/// standby takes office and takes the resubmission. (Before, the leader kept its leadership
/// with a writer whose every group failed: no broker took writes again.)
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_leader_whose_ledger_connections_end_resigns_and_the_standby_takes_office() {
    let cluster = Cluster::start().expect("a PostgreSQL cluster");
    let sim = SimProcess::start();
    let files = BrokerFiles::for_sim(&sim);
    let client = reqwest::Client::new();
    let first = serve_on(&files, &cluster);
    wait_ready(&client, &first.base, PATIENCE).await;
    let second = serve_on(&files, &cluster);
    standing_by(&client, &second.base, PATIENCE).await;
    let one = request("r-1", "mc", "x", 3_000_000);
    let (status, r1) = post(&client, &first.base, "/v1/requests", &one)
        .await
        .unwrap();
    assert_eq!(status, 202, "{r1}");
    // Only a leader has a ledger open: these are the first broker's. The server ends them;
    // `pg_terminate_backend` only signals, so wait until the backends have exited.
    let ended = block_in_place(|| end_backends(&cluster, "mssbroker ledger"));
    assert!(!ended.is_empty(), "the leader had no ledger connection");
    let two = request("r-2", "mc", "x", 4_000_000);
    let (status, refused) = post(&client, &first.base, "/v1/requests", &two)
        .await
        .unwrap();
    assert_eq!(status, 503, "{refused}");
    // The standby takes office; the client resubmits there.
    wait_ready(&client, &second.base, PATIENCE).await;
    standing_by(&client, &first.base, PATIENCE).await;
    let (status, r2) = post(&client, &second.base, "/v1/requests", &two)
        .await
        .unwrap();
    assert_eq!(status, 202, "{r2}");
    let ids = ledger_ids(&cluster);
    assert_eq!(ids.len(), 2, "{ids:?}");
    let done = wait_final(&client, &second.base, &ids, PATIENCE).await;
    assert_transferred_and_charged_once(&client, &second.base, &sim, &done).await;
}

/// A broker whose contender already leads when the broker is built (it won before `serve`
/// built the application) opens its first term off the async threads: PostgreSQL's blocking
/// client may not run on them (before, the build panicked: "Cannot start a runtime from
/// within a runtime").
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_broker_leading_before_it_is_built_opens_its_term_and_acknowledges() {
    use mssbroker::database_url::DatabaseUrl;
    use mssbroker::leadership::{Contender, Identity, Timing};
    use mssbroker::startup::{Application, Leadership};

    let cluster = Cluster::start().expect("a PostgreSQL cluster");
    let sim = SimProcess::start();
    let url = DatabaseUrl::parse(&cluster.url()).expect("a url");
    let mut settings =
        mssbroker::config::Settings::parse(&test_config(Some(&sim.url)), "test").expect("settings");
    settings.database.url = Some(url.clone());
    let identity = Identity {
        holder: "a test".into(),
        advertised_url: "http://127.0.0.1:1".into(),
    };
    let contender = Contender::start(url, identity, Timing::default()).expect("contending");
    let mut role = contender.role();
    role.wait_for(|r| r.leading().is_some())
        .await
        .expect("it leads");
    let leadership = Leadership {
        role: contender.role(),
        resigner: Some(contender.resigner()),
    };
    let clock = std::sync::Arc::new(mssbroker::clock::SystemClock);
    let app = Application::build_with_role(&settings, clock, leadership)
        .await
        .expect("built");
    let base = format!("http://{}", app.local_addr());
    let (stop, stopped) = tokio::sync::oneshot::channel::<()>();
    let served = tokio::spawn(app.run_until_stopped(async {
        let _ = stopped.await;
    }));
    let client = reqwest::Client::new();
    wait_ready(&client, &base, PATIENCE).await;
    let one = request("early-1", "mc", "x", 5_000_000);
    let (status, r) = post(&client, &base, "/v1/requests", &one).await.unwrap();
    assert_eq!(status, 202, "{r}");
    let done = wait_final(&client, &base, &[r["id"].as_i64().unwrap()], PATIENCE).await;
    assert_transferred_and_charged_once(&client, &base, &sim, &done).await;
    let _ = stop.send(());
    served.await.expect("served").expect("stopped cleanly");
    drop(contender);
}

/// The commands that read or write a SQLite ledger file refuse a PostgreSQL URL in `--db`,
/// saying what to do instead, and never show it: it may hold a password (before, they printed
/// "no database at postgresql://broker:<password>@...").
#[test]
fn the_sqlite_file_commands_refuse_a_postgresql_url_without_showing_it() {
    let secret = "S3cret-pw";
    let dir = tempfile::tempdir().unwrap();
    let file = dir.path().join("copy.db");
    let file = file.to_str().unwrap();
    let urls = [
        format!("postgresql://broker:{secret}@127.0.0.1:1/mss"),
        format!("host=127.0.0.1 port=1 user=broker password={secret} dbname=mss"),
    ];
    for args in urls.iter().flat_map(|url| {
        [
            vec!["report", "--db", url],
            vec!["shares", "--db", url],
            vec!["backup", "--db", url, "--to", file],
            vec!["restore", "--from", file, "--db", url],
            vec!["unknown-keys", "--db", url],
            vec!["trace", "export", "--db", url, "--out", file],
        ]
    }) {
        let out = std::process::Command::new(crate::helpers::BIN)
            .args(&args)
            .output()
            .expect("run mssbroker");
        let (stdout, stderr) = (
            String::from_utf8_lossy(&out.stdout),
            String::from_utf8_lossy(&out.stderr),
        );
        assert!(!out.status.success(), "{args:?}: {stdout}");
        assert!(
            stderr.contains("--db:") && stderr.contains("PostgreSQL URL"),
            "{args:?}: {stderr}"
        );
        assert!(
            !stderr.contains(secret) && !stdout.contains(secret),
            "{args:?} showed the password: {stderr}"
        );
        assert!(!Path::new(file).exists(), "{args:?} wrote {file}");
    }
}
