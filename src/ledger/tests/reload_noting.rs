//! The writer notes every `requests` row it changes while a reload is prepared
//! (`writer/noted.rs`): random steps through every path that writes a row (accepts that ride
//! and that are held, releases, sends marked, deferred, unsent, refused and taken, MSS events,
//! losses, cancels, confirmations, new MSS priorities, volume lookups, time passing) run between
//! a reload's preparation and its install, in `pass_through`, `held` and `volumes`. In debug
//! builds the install compares every row of its snapshot with the row now and panics on a
//! changed row nobody noted; the test also audits the memory against the rows after each
//! install.

use super::*;
use crate::ledger::VolumeFound;

use crate::ledger::db::tests::testdb::Rng;

fn configs() -> [String; 3] {
    let caps = "[targets.mc]\nfeasibility_cap = 1500\n";
    [
        format!("{CONFIG}{caps}"),
        format!("{CONFIG}{caps}[release]\nmode = \"held\"\nlimit = 2\ncoalesce = \"queued\"\n"),
        format!(
            "{CONFIG}{caps}[release]\nmode = \"volumes\"\ncoalesce = \"queued\"\n\
             [release.volumes]\nmin_volume_bytes = 100\nmin_volume_files = 2\n\
             quiet_secs = 0\nmax_age_secs = 600\nbatch_max_bytes = 100000\n\
             batch_max_files = 3\nsticky_secs = 0\nmax_volumes = 1\n"
        ),
    ]
}

/// One random step through the ledger's writing commands.
async fn step(f: &Fixture, l: &Ledger, rng: &mut Rng, n: u64, ids: &mut Vec<i64>) {
    let any = |rng: &mut Rng, ids: &[i64]| ids[rng.below(ids.len() as u64) as usize];
    let groups = [("analysis", "higgs"), ("mc", "x"), ("datataking", "raw")];
    match rng.below(10) {
        0..3 => {
            let (mode, group) = groups[rng.below(3) as usize];
            let mut r = f.request(&format!("r{n}"), mode, group, 100 + rng.below(600));
            r.input.file = format!("/pnfs/f{}", rng.below(3));
            if let Ok(a) = l.accept(vec![r]).await {
                ids.push(a[0].id);
            }
        }
        3 => {
            l.release_held().await.expect("released");
        }
        4 => {
            let ready = l.to_submit(0, i64::MAX / 2, 20).await.expect("ready");
            let items: Vec<(i64, u32)> = ready.iter().map(|t| (t.id, t.attempt)).collect();
            let marked = l.mark_sending(items.clone()).await.expect("marked");
            for (id, attempt) in items
                .into_iter()
                .filter(|i| marked.iter().any(|m| m.0 == i.0))
            {
                match rng.below(5) {
                    0 => l.mark_unsent(vec![(id, attempt)]).await.expect("unsent"),
                    1 => (l
                        .deferred(vec![(id, attempt)], 5_000_000, "busy".into())
                        .await)
                        .expect("deferred"),
                    2 => l
                        .rejected(id, attempt, "no".into())
                        .await
                        .expect("rejected"),
                    _ => submit(l, id, attempt).await,
                }
            }
        }
        5 if !ids.is_empty() => {
            // Mostly a request at the MSS, which an event changes.
            let flying: Vec<i64> = (l.in_flight().await.expect("in flight").iter())
                .map(|i| i.id)
                .collect();
            let id = match flying.is_empty() || rng.below(4) == 0 {
                true => any(rng, ids),
                false => any(rng, &flying),
            };
            let r = l.request(id).await.expect("read").expect("stored");
            let kind = match rng.below(4) {
                0 => EventKind::Started,
                1 => EventKind::Done { bytes: 300 },
                2 => EventKind::Failed {
                    reason: "x".into(),
                    retryable: rng.below(2) == 0,
                },
                _ => EventKind::Cancelled,
            };
            let e = event(l, id, r.attempt, 1_000 + n, kind);
            l.apply_status_events(vec![e]).await.expect("applied");
        }
        6 if !ids.is_empty() => {
            let id = any(rng, ids);
            if rng.below(2) == 0 {
                l.cancel(id).await.expect("cancelled");
            } else {
                let r = l.request(id).await.expect("read").expect("stored");
                (l.resubmit_lost(id, r.attempt, "lost".into()).await).expect("lost");
            }
        }
        7 => {
            // One at a time: confirming every request at the MSS would note them all and hide
            // a forgotten noting elsewhere.
            let flying: Vec<i64> = (l.in_flight().await.expect("in flight").iter())
                .map(|i| i.id)
                .collect();
            if !flying.is_empty() {
                let one = any(rng, &flying);
                l.confirm_in_flight(vec![one]).await.expect("confirmed");
            }
            let priorities = l.reprioritise(10).await.expect("reprioritise");
            l.reprioritised(priorities).await.expect("reprioritised");
        }
        8 => {
            let unlocated = l.unlocated(0, 10).await.expect("unlocated");
            let found = (unlocated.into_iter())
                .map(|(id, _)| VolumeFound {
                    id,
                    found: (id % 3 != 0).then(|| (format!("V{}", id % 2), id as u64)),
                    source: "test",
                })
                .collect();
            l.located(found).await.expect("located");
        }
        _ => {
            f.clock.advance_ms(rng.below(900_000) as i64);
            l.tick().await.expect("tick");
        }
    }
}

async fn every_row_changed_while_a_reload_is_prepared_is_noted(backend: Backend) {
    for config in configs() {
        for seed in 1..=4u64 {
            let f = Fixture::with_config_on(backend, &config);
            let (l, handle) = f.open();
            let mut rng = Rng(seed.wrapping_mul(0x9E37_79B9_7F4A_7C15));
            let mut ids = Vec::new();
            for round in 0..8u64 {
                let prepared =
                    (l.prepare_reload(f.settings.policy.clone()).await).expect("prepared");
                for k in 0..20 {
                    step(&f, &l, &mut rng, round * 100 + k, &mut ids).await;
                }
                l.install_reload(prepared).await.unwrap_or_else(|e| {
                    panic!("install (seed {seed}, round {round}): {e}\n{config}")
                });
                let wrong = l.audit().await.expect("audited");
                assert!(wrong.is_empty(), "seed {seed}, round {round}: {wrong:?}");
            }
            close((l, handle));
        }
    }
}

on_both_async!(every_row_changed_while_a_reload_is_prepared_is_noted,);
