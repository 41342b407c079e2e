//! Random sequences of everything that can happen to requests, through the writer and a real
//! SQLite file or PostgreSQL database: accepts of shared files (so reads coalesce) across groups and data taking,
//! sends answered, unanswered, unreachable or refused, MSS events (started, done, failed,
//! cancelled), losses, cancels, releases, time passing and restarts, in `pass_through`, `held`
//! and `volumes` with a feasibility cap. After every step the ledger's books must hold
//! (`check`); at the end the MSS does everything it is given and every request must be final.
//! `MSSBROKER_SEQUENCE_SEEDS` sets the seeds per configuration (the suite runs 8 on SQLite and 2
//! on PostgreSQL; docs/testing.md).

use super::*;
use crate::ledger::db::{params, Db};
use crate::ledger::wide::Wide;

use crate::ledger::db::tests::testdb::Rng;

fn count(c: &Db<'_>, sql: &str, path: &str) -> i64 {
    c.query_one(sql, params![path], |r| r.get(0))
        .expect("count")
}

/// The books: per group, usage is the sum of the requests' charges, `pending` the requests not
/// final, `held` those held; no rider waits on a carrier that ended or is held; queued and
/// held requests are uncharged, and those at or bound for the MSS are charged.
fn check(f: &Fixture, log: &[String]) {
    f.with_db(|c| books(c, log));
}

fn books(c: &Db<'_>, log: &[String]) {
    let groups: Vec<(String, Wide, i64, i64)> = c
        .query_rows(
            "SELECT path, usage, pending, held FROM groups",
            params![],
            |r| Ok((r.get(0)?, r.get(1)?, r.get(2)?, r.get(3)?)),
        )
        .expect("the groups");
    let log = log.join("\n");
    for (path, usage, pending, held) in groups {
        let charged = count(
            c,
            "SELECT COALESCE(SUM(charged), 0) FROM requests WHERE group_path = ?1",
            &path,
        );
        let open = count(
            c,
            "SELECT COUNT(*) FROM requests WHERE group_path = ?1 \
             AND state NOT IN ('done', 'failed', 'cancelled')",
            &path,
        );
        let nheld = count(
            c,
            "SELECT COUNT(*) FROM requests WHERE group_path = ?1 AND state = 'held'",
            &path,
        );
        assert_eq!(usage.0, i128::from(charged), "usage of {path}\n{log}");
        assert_eq!(
            (pending, held),
            (open, nheld),
            "pending, held of {path}\n{log}"
        );
    }
    let wrong: Vec<i64> = c
        .query_rows(
            "SELECT r.id FROM requests r JOIN requests c ON c.id = r.rides_on \
             WHERE r.state = 'riding' \
             AND c.state NOT IN ('queued', 'accepted', 'submitted', 'running') \
             UNION ALL SELECT id FROM requests \
             WHERE (state IN ('queued', 'held') AND charged != 0) \
             OR (state IN ('accepted', 'submitted', 'running') AND charged_ms IS NULL)",
            params![],
            |r| r.get(0),
        )
        .expect("the orphans");
    assert!(
        wrong.is_empty(),
        "orphan riders or charges {wrong:?}\n{log}"
    );
}

struct Sequence {
    f: Fixture,
    opened: Option<(Ledger, std::thread::JoinHandle<()>)>,
    rng: Rng,
    ids: Vec<i64>,
    log: Vec<String>,
    seq: u64,
    /// Configurations a step may reload to (none: no reloads).
    reloads: Vec<String>,
}

impl Sequence {
    fn ledger(&self) -> Ledger {
        self.opened.as_ref().expect("open").0.clone()
    }

    fn any_id(&mut self) -> Option<i64> {
        let n = self.ids.len() as u64;
        (n > 0).then(|| self.ids[self.rng.below(n) as usize])
    }

    async fn accept_one(&mut self, n: usize) {
        let groups = [
            ("analysis", "higgs"),
            ("analysis", "top"),
            ("mc", "x"),
            ("datataking", "raw"),
        ];
        let (mode, group) = groups[self.rng.below(4) as usize];
        let mut r = self
            .f
            .request(&format!("r{n}"), mode, group, 100 + self.rng.below(600));
        r.input.station = format!("st{n}");
        r.input.file = format!("/pnfs/f{}", self.rng.below(3));
        r.input.volume = Some(format!("V{}", self.rng.below(2)));
        r.input.extras.position = Some(self.rng.below(1000));
        let a = match self.ledger().accept(vec![r]).await {
            Err(LedgerError::OverQueuedCap(refused)) => {
                self.log
                    .push(format!("accept {mode} refused: {}", refused.field));
                return;
            }
            other => other.expect("accepted"),
        };
        self.log
            .push(format!("accept {} {mode} -> {:?}", a[0].id, a[0].state));
        self.ids.push(a[0].id);
        if a[0].state == RequestState::Riding {
            self.rides_as_configured(a[0].id);
        }
    }

    /// A request that just rode on another did so as the configuration in force allows: not
    /// with `coalesce = "off"`, not on a request still queued in the broker with `"in_flight"`,
    /// on a read of the same file, and a priority-class one only on a priority-class one.
    fn rides_as_configured(&self, id: i64) {
        let (file, class, carrier_file, carrier_class, carrier_state): (
            String,
            String,
            String,
            String,
            String,
        ) = self
            .f
            .with_db(|c| {
                c.query_one(
                    "SELECT r.file, r.class, c.file, c.class, c.state FROM requests r \
                     JOIN requests c ON c.id = r.rides_on WHERE r.id = ?1",
                    params![id],
                    |r| Ok((r.get(0)?, r.get(1)?, r.get(2)?, r.get(3)?, r.get(4)?)),
                )
            })
            .expect("a rider and its carrier");
        let log = self.log.join("\n");
        let coalesce = self.f.settings.policy.order.release.coalesce;
        use crate::domain::order::Coalesce;
        assert_ne!(
            coalesce,
            Coalesce::Off,
            "{id} rode with coalesce off\n{log}"
        );
        if coalesce == Coalesce::InFlight {
            assert_ne!(carrier_state, "queued", "{id} rode on a queued read\n{log}");
        }
        assert_eq!(file, carrier_file, "{id}\n{log}");
        if class == "priority" {
            assert_eq!(carrier_class, "priority", "{id}\n{log}");
        }
    }

    /// One ready request is marked and sent; the MSS takes it, does not answer, cannot be
    /// reached, or refuses it.
    async fn send_one(&mut self) {
        let l = self.ledger();
        let ready = l.to_submit(0, i64::MAX / 2, 20).await.expect("ready");
        if ready.is_empty() {
            return;
        }
        let t = &ready[self.rng.below(ready.len() as u64) as usize];
        let marked = l
            .mark_sending(vec![(t.id, t.attempt)])
            .await
            .expect("marked");
        let Some(&(_, first)) = marked.first() else {
            return;
        };
        let outcome = match self.rng.below(4) {
            0 => {
                submit(&l, t.id, t.attempt).await;
                "taken"
            }
            1 => "unanswered",
            2 => {
                if first {
                    l.mark_unsent(vec![(t.id, t.attempt)])
                        .await
                        .expect("unsent");
                }
                "unreachable"
            }
            _ => {
                l.rejected(t.id, t.attempt, "no".into())
                    .await
                    .expect("rejected");
                "refused"
            }
        };
        self.log
            .push(format!("send {} a{} {outcome}", t.id, t.attempt));
    }

    async fn event_one(&mut self) {
        let Some(id) = self.any_id() else { return };
        let l = self.ledger();
        let r = l.request(id).await.expect("read").expect("stored");
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
        self.log.push(format!(
            "event {id} a{} {kind:?} ({:?})",
            r.attempt, r.state
        ));
        let e = event(&l, id, r.attempt, self.seq, kind);
        l.apply_status_events(vec![e]).await.expect("applied");
    }

    async fn lose_or_cancel_one(&mut self, lose: bool) {
        let Some(id) = self.any_id() else { return };
        let l = self.ledger();
        if lose {
            let r = l.request(id).await.expect("read").expect("stored");
            let changed = l
                .resubmit_lost(id, r.attempt, "lost".into())
                .await
                .expect("lost");
            self.log
                .push(format!("lost {id} ({:?}) -> {changed}", r.state));
        } else {
            let o = l.cancel(id).await.expect("cancel");
            self.log.push(format!("cancel {id} -> {o:?}"));
        }
    }

    async fn step(&mut self, n: usize) {
        match self.rng.below(100) {
            0..25 => self.accept_one(n).await,
            25..45 => self.send_one().await,
            45..65 => self.event_one().await,
            65..72 => self.lose_or_cancel_one(true).await,
            72..84 => self.lose_or_cancel_one(false).await,
            84..88 => {
                self.ledger().release_held().await.expect("released");
                self.log.push("release".into());
            }
            88..95 => {
                let ms = self.rng.below(3_600_000) as i64;
                self.f.clock.advance_ms(ms);
                self.ledger().tick().await.expect("tick");
                self.log.push(format!("wait {ms} ms"));
            }
            92..99 if !self.reloads.is_empty() => {
                let k = self.rng.below(self.reloads.len() as u64) as usize;
                let settings = Settings::parse(&self.reloads[k], "test").expect("valid");
                match self.ledger().reload(settings.policy.clone()).await {
                    Ok(()) => {
                        // Classified under it from now on, and reopened with it.
                        self.f.settings = settings;
                        self.log.push(format!("reload to configuration {k}"));
                    }
                    Err(e @ LedgerError::RemovedGroups(_)) => {
                        self.log
                            .push(format!("reload to configuration {k} refused: {e}"));
                    }
                    Err(e) => panic!("reload to configuration {k}: {e}\n{}", self.log.join("\n")),
                }
            }
            _ => {
                close(self.opened.take().expect("open"));
                self.opened = Some(self.f.open());
                self.log.push("restart".into());
            }
        }
        check(&self.f, &self.log);
        let wrong = self.ledger().audit().await.expect("audited");
        assert!(
            wrong.is_empty(),
            "memory against the rows: {wrong:?}\n{}",
            self.log.join("\n")
        );
    }

    /// The MSS does everything it is given, an hour at a time.
    async fn drain(&mut self) {
        let l = self.ledger();
        for _ in 0..40 {
            self.f.clock.advance_ms(3_600_000);
            l.release_held().await.expect("released");
            l.tick().await.expect("tick");
            let ready = l.to_submit(0, i64::MAX / 2, 1000).await.expect("ready");
            let marked = l
                .mark_sending(ready.iter().map(|t| (t.id, t.attempt)).collect())
                .await
                .expect("marked");
            for (id, _) in marked {
                if let Some(t) = ready.iter().find(|t| t.id == id) {
                    submit(&l, id, t.attempt).await;
                }
            }
            for i in l.in_flight().await.expect("in flight") {
                self.seq += 1;
                let e = event(
                    &l,
                    i.id,
                    i.attempt,
                    self.seq,
                    EventKind::Done { bytes: 300 },
                );
                l.apply_status_events(vec![e]).await.expect("applied");
            }
        }
        check(&self.f, &self.log);
    }
}

/// Requests not final once the MSS has done everything (those a feasibility cap holds are
/// waiting for usage that never decays under the cumulative model).
fn never_final(f: &Fixture) -> Vec<(i64, String)> {
    f.with_db(|c| {
        c.query_rows(
            "SELECT id, state FROM requests \
             WHERE state NOT IN ('done', 'failed', 'cancelled', 'held')",
            params![],
            |r| Ok((r.get(0)?, r.get(1)?)),
        )
    })
    .expect("the requests not final")
}

async fn run(backend: Backend, config: &str, seed: u64, steps: usize) {
    run_reloading(backend, config, &[], seed, steps).await
}

async fn run_reloading(
    backend: Backend,
    config: &str,
    reloads: &[String],
    seed: u64,
    steps: usize,
) {
    let f = Fixture::with_config_on(backend, config);
    let opened = Some(f.open());
    let mut s = Sequence {
        f,
        opened,
        rng: Rng::new(seed),
        ids: Vec::new(),
        log: vec![format!("seed {seed}")],
        seq: 0,
        reloads: reloads.to_vec(),
    };
    for n in 0..steps {
        s.step(n).await;
    }
    s.drain().await;
    let open = never_final(&s.f);
    assert!(
        open.is_empty(),
        "never final: {open:?}\n{}",
        s.log.join("\n")
    );
    close(s.opened.take().expect("open"));
    // The recomputation models pass-through's hours only (a held release counts as held once).
    if !config.contains("[release]") && reloads.is_empty() {
        let (stored, _) = stored_aggregates(&s.f);
        let (recomputed, _) = recompute_aggregates(&s.f);
        assert_eq!(
            stored,
            recomputed,
            "report aggregates\n{}",
            s.log.join("\n")
        );
    }
}

/// The feasibility cap every configuration has.
const CAPS: &str = "[targets.mc]\nfeasibility_cap = 1500\n";

fn configs() -> [String; 3] {
    let caps = CAPS;
    [
        format!("{CONFIG}{caps}"),
        format!("{CONFIG}{caps}[release]\nmode = \"held\"\nlimit = 2\ncoalesce = \"queued\"\n"),
        format!(
            "{CONFIG}{caps}[release]\nmode = \"volumes\"\ncoalesce = \"queued\"\n\
             [release.volumes]\nmin_volume_bytes = 100\nmin_volume_files = 1000\n\
             quiet_secs = 600\nmax_age_secs = 14400\nbatch_max_bytes = 100000\n\
             batch_max_files = 100\nsticky_secs = 0\nmax_volumes = 1\n"
        ),
    ]
}

async fn random_sequences_keep_the_books_and_end_every_request(backend: Backend) {
    let seeds = sequence_seeds(backend);
    for config in configs() {
        for seed in 0..seeds {
            run(backend, &config, seed, 150).await;
        }
    }
}

/// The same sequences with reloads among the steps: each to one of the configurations, which
/// differ in the release mode, its limit, `coalesce` and `[release.volumes]`. The books must
/// hold after each step and every request must end once the MSS does everything.
async fn random_sequences_with_reloads_keep_the_books_and_end_every_request(backend: Backend) {
    let seeds = sequence_seeds(backend);
    let caps = CAPS;
    let mut reloads = configs().to_vec();
    reloads.extend([
        format!("{CONFIG}{caps}[release]\ncoalesce = \"queued\"\n"),
        format!("{CONFIG}{caps}[release]\nmode = \"held\"\nlimit = 1\ncoalesce = \"off\"\n"),
        format!(
            "{CONFIG}{caps}[release]\nmode = \"volumes\"\ncoalesce = \"in_flight\"\n\
             [release.volumes]\nmin_volume_bytes = 1\nmin_volume_files = 1\n\
             quiet_secs = 0\nmax_age_secs = 600\nbatch_max_bytes = 1000\n\
             batch_max_files = 2\nsticky_secs = 60\nmax_volumes = 2\n"
        ),
    ]);
    // Another tree (a new group first: every group id changes), other caps, other policies.
    let tree = CONFIG.replace("[shares]\n", "[shares]\nnew = 2\n");
    let fbsng = CONFIG.replace("[policy]\n", "[policy]\nalgorithm = \"fbsng\"\n");
    let fair_tree = CONFIG.replace("[policy]\n", "[policy]\nalgorithm = \"fair_tree\"\n");
    let queued_caps = "[targets.analysis]\nmax_queued_bytes = 1500\n\
        [limits]\nmax_queued_bytes_per_user = 2500\n";
    reloads.extend([
        format!("{tree}{caps}[release]\nmode = \"held\"\nlimit = 2\ncoalesce = \"queued\"\n"),
        format!(
            "{fbsng}[targets.mc]\nfeasibility_cap = 400\n[release]\nmode = \"held\"\nlimit = 3\n"
        ),
        format!(
            "{fair_tree}{caps}{queued_caps}[release]\nmode = \"volumes\"\ncoalesce = \"queued\"\n"
        ),
        format!("{tree}{queued_caps}"),
    ]);
    // A group changes kind: mc a priority class, datataking a share (its path stays
    // configured, so its unfinished requests do not refuse the reload).
    let kinds = CONFIG
        .replace(
            "[[priority_classes]]\naccess_mode = \"datataking\"\nmss_priority = 100\n",
            "[[priority_classes]]\naccess_mode = \"mc\"\nmss_priority = 90\n",
        )
        .replace("mc = 3\n", "datataking = 2\n");
    assert_ne!(kinds, CONFIG);
    let volumes = "[release.volumes]\nmin_volume_bytes = 100\nmin_volume_files = 1000\n\
        quiet_secs = 600\nmax_age_secs = 14400\nbatch_max_bytes = 100000\n\
        batch_max_files = 100\nsticky_secs = 0\nmax_volumes = 1\n";
    reloads.extend([
        format!("{kinds}[release]\nmode = \"held\"\nlimit = 2\ncoalesce = \"queued\"\n"),
        format!("{kinds}[release]\nmode = \"volumes\"\ncoalesce = \"queued\"\n{volumes}"),
        format!("{kinds}[release]\ncoalesce = \"queued\"\n"),
    ]);
    for config in configs() {
        for seed in 0..seeds {
            run_reloading(backend, &config, &reloads, seed, 200).await;
        }
    }
}

on_both_async!(
    random_sequences_keep_the_books_and_end_every_request,
    random_sequences_with_reloads_keep_the_books_and_end_every_request,
);
