//! A COMMIT that fails must leave no trace: the writer's memory goes back to where it was, so
//! the same command sent again (the disk freed, the file back) does exactly what it would have
//! done had the failure never happened. Two ledgers are driven by the same random sequence of
//! commands; before some commands, ledger A first gets the same command with its COMMIT failing
//! (`Fixture::commits_failing`: on SQLite the database file moved away, so
//! `identity::DbFile::check` fails right before `tx.commit()`; on PostgreSQL a deferred trigger
//! raises at COMMIT; either after every statement and every change to memory). After every step, both must have given
//! the same answers and hold the same rows. `FAULTS_COALESCE` (default `queued`: duplicates ride
//! on queued and in-flight reads; `off` leaves the carrier map out), `FAULTS_CONFIG`, `FAULTS_SEED` and
//! `FAULTS_ONLY` (the numbers of the faults to inject, comma separated) narrow a failure down.

use super::*;

use crate::ledger::db::tests::testdb::Rng;

/// One writer command.
#[derive(Debug, Clone)]
enum Op {
    Accept(Vec<NewRequest>),
    Sending(Vec<(i64, u32)>),
    Submitted(Vec<SubmittedTransfer>),
    Unsent(Vec<(i64, u32)>),
    Rejected(i64, u32),
    Events(Vec<MssEvent>, Option<EventCursor>),
    Lost(i64, u32),
    Cancel(i64),
    Release,
    Tick,
}

async fn apply(l: &Ledger, op: &Op) -> Result<String, LedgerError> {
    // An event names its request by id; each ledger of the pair has keys of its own.
    let keyed = |events: Vec<MssEvent>| -> Vec<MssEvent> {
        (events.into_iter())
            .map(|e| MssEvent {
                key: l.mss_key(e.key.parse().expect("an id")),
                ..e
            })
            .collect()
    };
    Ok(match op.clone() {
        Op::Accept(items) => format!("{:?}", l.accept_each(items).await?),
        Op::Sending(items) => format!("{:?}", l.mark_sending(items).await?),
        Op::Submitted(items) => format!("{:?}", l.submitted(items).await?),
        Op::Unsent(items) => format!("{:?}", l.mark_unsent(items).await?),
        Op::Rejected(id, a) => format!("{:?}", l.rejected(id, a, "no".into()).await?),
        Op::Events(events, Some(c)) => format!("{:?}", l.apply_events(keyed(events), c).await?),
        Op::Events(events, None) => {
            format!("{:?}", l.apply_status_events(keyed(events)).await?)
        }
        Op::Lost(id, a) => format!("{:?}", l.resubmit_lost(id, a, "lost".into()).await?),
        Op::Cancel(id) => format!("{:?}", l.cancel(id).await?),
        Op::Release => format!("{:?}", l.release_held().await?),
        Op::Tick => format!("{:?}", l.tick().await?),
    })
}

/// Every row of every table (but the database's random instance id and its incarnations'
/// nonces), as text.
fn dump(f: &Fixture) -> Vec<String> {
    (every_row(f).into_iter())
        .filter(|row| !row.contains("\"instance\"") && !row.starts_with("incarnations:"))
        .collect()
}

struct Pair {
    fa: Fixture,
    fb: Fixture,
    a: Option<(Ledger, std::thread::JoinHandle<()>)>,
    b: Option<(Ledger, std::thread::JoinHandle<()>)>,
    rng: Rng,
    ids: Vec<i64>,
    log: Vec<String>,
    seq: u64,
    faults: usize,
    nfault: usize,
}

impl Pair {
    fn la(&self) -> Ledger {
        self.a.as_ref().unwrap().0.clone()
    }
    fn lb(&self) -> Ledger {
        self.b.as_ref().unwrap().0.clone()
    }

    /// `op` on both ledgers; on A first with its COMMIT failing, sometimes.
    async fn run(&mut self, op: Op, fault: bool) -> String {
        let (la, lb) = (self.la(), self.lb());
        let skip = self.rng.below(2) == 0;
        self.nfault += usize::from(fault);
        let masked = std::env::var("FAULTS_ONLY")
            .ok()
            .is_some_and(|only| !only.split(',').any(|n| n == self.nfault.to_string()));
        if fault && masked && skip {
            return "[]".into();
        }
        if fault && !masked {
            let failed = self.fa.commits_failing(apply(&la, &op)).await;
            match failed {
                Err(_) => {
                    self.faults += 1;
                    self.log
                        .push(format!("  (failed commit #{} first: {op:?})", self.nfault));
                    if skip {
                        // Not sent again (the caller gave up): as if it never was.
                        self.log.push("  (not sent again)".into());
                        return "[]".into();
                    }
                }
                Ok(ra) => {
                    // Nothing to commit (answered without a transaction): it happened.
                    let rb = apply(&lb, &op).await.expect("b");
                    assert_eq!(ra, rb, "answers differ\n{}", self.log.join("\n"));
                    return ra;
                }
            }
        }
        let ra = apply(&la, &op).await.expect("a");
        let rb = apply(&lb, &op).await.expect("b");
        self.log.push(format!("{op:?} -> {ra}"));
        assert_eq!(
            ra,
            rb,
            "answers differ after a failed commit\n{}",
            self.log.join("\n")
        );
        ra
    }

    fn fault(&mut self) -> bool {
        self.rng.below(3) == 0
    }

    async fn step(&mut self, n: usize) {
        // A millisecond per step: `sticky_secs = 0` keeps a volume sticky only within its
        // millisecond, which a reload forgets (a_rolled_back_transaction_does_not_forget_a_sticky_volume).
        self.fa.clock.advance_ms(1);
        self.fb.clock.advance_ms(1);
        let fault = self.fault();
        match self.rng.below(100) {
            0..25 => {
                let groups = [
                    ("analysis", "higgs"),
                    ("analysis", "top"),
                    ("mc", "x"),
                    ("datataking", "raw"),
                ];
                let (mode, group) = groups[self.rng.below(4) as usize];
                let mut r =
                    self.fa
                        .request(&format!("r{n}"), mode, group, 100 + self.rng.below(600));
                r.input.station = format!("st{}", self.rng.below(2));
                r.input.client_request_id = format!("c{}", self.rng.below(40));
                r.input.file = format!("/pnfs/f{}", self.rng.below(3));
                r.input.volume = Some(format!("V{}", self.rng.below(2)));
                r.input.extras.position = Some(self.rng.below(1000));
                self.run(Op::Accept(vec![r]), fault).await;
                self.ids = all_ids(&self.fa);
            }
            25..45 => {
                // Each ledger keys its requests with a nonce of its own: compared without.
                let unkeyed = |v: Vec<ToSubmit>| -> Vec<ToSubmit> {
                    (v.into_iter())
                        .map(|r| ToSubmit {
                            key: String::new(),
                            ..r
                        })
                        .collect()
                };
                let ready = unkeyed(self.la().to_submit(0, i64::MAX / 2, 20).await.unwrap());
                let ready_b = unkeyed(self.lb().to_submit(0, i64::MAX / 2, 20).await.unwrap());
                assert_eq!(
                    ready,
                    ready_b,
                    "ready lists differ\n{}",
                    self.log.join("\n")
                );
                if ready.is_empty() {
                    return;
                }
                let t = ready[self.rng.below(ready.len() as u64) as usize].clone();
                let marked = self.run(Op::Sending(vec![(t.id, t.attempt)]), fault).await;
                if marked == "[]" {
                    return;
                }
                let first = marked.contains("true");
                let fault = self.fault();
                match self.rng.below(4) {
                    0 | 1 => {
                        let item = SubmittedTransfer {
                            id: t.id,
                            attempt: t.attempt,
                            mss_id: format!("m{}", t.id),
                        };
                        self.run(Op::Submitted(vec![item]), fault).await;
                    }
                    2 if first => {
                        self.run(Op::Unsent(vec![(t.id, t.attempt)]), fault).await;
                    }
                    2 => {}
                    _ => {
                        self.run(Op::Rejected(t.id, t.attempt), fault).await;
                    }
                }
            }
            45..70 => {
                let n = self.ids.len() as u64;
                if n == 0 {
                    return;
                }
                let id = self.ids[self.rng.below(n) as usize];
                let r = self.la().request(id).await.unwrap().unwrap();
                self.seq += 1;
                let kind = match self.rng.below(5) {
                    0 => EventKind::Started,
                    1 | 2 => EventKind::Done {
                        bytes: 100 + self.rng.below(600),
                    },
                    3 => EventKind::Failed {
                        reason: "x".into(),
                        retryable: self.rng.below(2) == 0,
                    },
                    _ => EventKind::Cancelled,
                };
                // Keyed by `apply`, for each ledger of the pair.
                let e = MssEvent {
                    seq: self.seq,
                    key: id.to_string(),
                    attempt: r.attempt,
                    at_ms: 0,
                    kind,
                };
                let cursor = (self.rng.below(2) == 0).then(|| EventCursor {
                    epoch: "e1".into(),
                    after: self.seq,
                });
                self.run(Op::Events(vec![e], cursor), fault).await;
            }
            70..76 => {
                let n = self.ids.len() as u64;
                if n == 0 {
                    return;
                }
                let id = self.ids[self.rng.below(n) as usize];
                let r = self.la().request(id).await.unwrap().unwrap();
                self.run(Op::Lost(id, r.attempt), fault).await;
            }
            76..86 => {
                let n = self.ids.len() as u64;
                if n == 0 {
                    return;
                }
                let id = self.ids[self.rng.below(n) as usize];
                self.run(Op::Cancel(id), fault).await;
            }
            86..91 => {
                self.run(Op::Release, fault).await;
            }
            _ => {
                let ms = self.rng.below(3_600_000) as i64;
                self.fa.clock.advance_ms(ms);
                self.fb.clock.advance_ms(ms);
                self.log.push(format!("wait {ms} ms"));
                self.run(Op::Tick, fault).await;
            }
        }
        let (da, db) = (dump(&self.fa), dump(&self.fb));
        if da != db {
            let only_a: Vec<_> = da.iter().filter(|r| !db.contains(r)).collect();
            let only_b: Vec<_> = db.iter().filter(|r| !da.contains(r)).collect();
            panic!(
                "rows differ after a failed commit\nonly in A (faulted): {only_a:#?}\n\
                 only in B: {only_b:#?}\n{}",
                self.log.join("\n")
            );
        }
    }
}

fn all_ids(f: &Fixture) -> Vec<i64> {
    f.with_db(|db| {
        db.query_rows(
            "SELECT id FROM requests ORDER BY id",
            crate::ledger::db::params![],
            |r| r.get(0),
        )
    })
    .expect("the ids")
}

async fn run(backend: Backend, config: &str, seed: u64, steps: usize) {
    let fa = Fixture::with_config_on(backend, config);
    let fb = Fixture::with_config_on(backend, config);
    let a = Some(fa.open());
    let b = Some(fb.open());
    let mut p = Pair {
        fa,
        fb,
        a,
        b,
        rng: Rng::new(seed),
        ids: Vec::new(),
        log: vec![format!("seed {seed}")],
        seq: 0,
        faults: 0,
        nfault: 0,
    };
    for n in 0..steps {
        p.step(n).await;
    }
    assert!(
        p.faults > 0 || std::env::var("FAULTS_ONLY").is_ok(),
        "no commit failed: the test injected nothing"
    );
    close(p.a.take().unwrap());
    close(p.b.take().unwrap());
}

fn configs() -> [String; 3] {
    let caps = "[targets.mc]\nfeasibility_cap = 1500\n";
    let coalesce = std::env::var("FAULTS_COALESCE").unwrap_or_else(|_| "queued".into());
    [
        format!("{CONFIG}{caps}[release]\ncoalesce = \"{coalesce}\"\n"),
        format!("{CONFIG}{caps}[release]\nmode = \"held\"\nlimit = 2\ncoalesce = \"{coalesce}\"\n"),
        format!(
            "{CONFIG}{caps}[release]\nmode = \"volumes\"\ncoalesce = \"{coalesce}\"\n\
             [release.volumes]\nmin_volume_bytes = 100\nmin_volume_files = 1000\n\
             quiet_secs = 600\nmax_age_secs = 14400\nbatch_max_bytes = 100000\n\
             batch_max_files = 100\nsticky_secs = 600\nmax_volumes = 1\n"
        ),
    ]
}

async fn a_failed_commit_then_the_same_command_equals_the_command_alone(backend: Backend) {
    let seeds = sequence_seeds(backend);
    let one = |k: &str| std::env::var(k).ok().and_then(|s| s.parse::<u64>().ok());
    for (i, config) in configs().iter().enumerate() {
        if one("FAULTS_CONFIG").is_some_and(|c| c != i as u64) {
            continue;
        }
        for seed in 0..seeds {
            if one("FAULTS_SEED").is_some_and(|s| s != seed) {
                continue;
            }
            eprintln!("config {i} seed {seed}");
            run(backend, config, seed, 150).await;
        }
    }
}

on_both_async!(a_failed_commit_then_the_same_command_equals_the_command_alone,);
