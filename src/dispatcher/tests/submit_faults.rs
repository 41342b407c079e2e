//! The dispatcher, a real ledger on a SQLite file and the real Tape REST adapter in front of its
//! stand-in: when the ledger cannot commit what the MSS took (a full disk, an I/O error), the
//! requests stay `accepted` and marked, and the next step sends them again with the same key
//! and attempt. Tape REST has no idempotency key, so the adapter must answer that resend from
//! the transfers it follows (`tape_rest/stage.rs`), not make a second stage request (and pin)
//! of the same files.

use std::path::PathBuf;
use std::sync::atomic::{AtomicBool, AtomicUsize, Ordering};
use std::sync::Mutex;
use std::time::Duration;

use mss_adapters::standin::{Plan, TapeRestStandin};
use mss_adapters::tape_rest::TapeRestAdapter;
use mss_adapters::{
    Capabilities, EventBatch, EventCursor, MssAdapter, MssError, Submitted, Transfer, TransferRef,
    TransferStatus,
};

use super::super::cancels::CancelsToRetry;
use super::super::*;
use crate::clock::ManualClock;
use crate::config::Settings;
use crate::domain::mss::AdapterSettings;
use crate::domain::RequestState;
use crate::ledger::{CancelOutcome, LedgerOptions, NewRequest, RequestInput};
use crate::live_settings::{ConfigStamp, LiveSettings};
use crate::tests::BASE;

/// The real adapter, with the database file moved away right after the MSS took a batch (the
/// writer's identity check then fails the next COMMIT, as a full disk would), once, when armed.
/// Told to, it has a request cancelled while its batch is out, before the stage request exists.
struct DiskGoneAfterSubmit {
    inner: TapeRestAdapter,
    db: PathBuf,
    armed: AtomicBool,
    batches: AtomicUsize,
    /// A request to cancel while the next batch is out, through this ledger.
    cancel_while_out: Mutex<Option<(Ledger, i64)>>,
    /// Answer the last transfer of the next batch `Unreachable` (not sent), as an adapter that
    /// answers per transfer may (a connection refused for one job of several).
    unreachable_last: AtomicBool,
}

impl DiskGoneAfterSubmit {
    /// A station's cancel of request `id`, with the batch sent and not answered yet: the ledger
    /// takes it as at the MSS (`cancel_maybe_at_mss`), and the cancel loop carries it at once,
    /// by what the ledger lists, which the endpoint cannot take yet (no stage request exists).
    async fn cancel_now(&self, ledger: &Ledger, id: i64) {
        let asked = ledger.cancel(id).await.expect("the cancel committed");
        let want = CancelOutcome::Requested(RequestState::Submitted);
        assert_eq!(asked, want, "taken as at the MSS");
        let listed = (ledger.cancelling_one(id).await)
            .expect("read")
            .expect("a cancel to carry");
        assert_eq!(listed.transfer.mss_id, None, "no answer has named it yet");
        let early = self.inner.cancel(&listed.transfer).await;
        assert!(matches!(early, Err(MssError::Rejected(_))), "{early:?}");
    }
}

#[async_trait::async_trait]
impl MssAdapter for DiskGoneAfterSubmit {
    fn name(&self) -> &'static str {
        self.inner.name()
    }

    async fn submit(&self, transfer: &Transfer) -> Result<Submitted, MssError> {
        self.inner.submit(transfer).await
    }

    async fn submit_batch(&self, transfers: &[Transfer]) -> Vec<Result<Submitted, MssError>> {
        self.batches.fetch_add(1, Ordering::SeqCst);
        let cancel = (self.cancel_while_out.lock())
            .unwrap_or_else(|e| e.into_inner())
            .take();
        if let Some((ledger, id)) = cancel {
            self.cancel_now(&ledger, id).await;
        }
        let cut = self.unreachable_last.swap(false, Ordering::SeqCst) && transfers.len() > 1;
        let sent = if cut {
            &transfers[..transfers.len() - 1]
        } else {
            transfers
        };
        let mut answers = self.inner.submit_batch(sent).await;
        if cut {
            answers.push(Err(MssError::Unreachable("connection refused".into())));
        }
        if self.armed.swap(false, Ordering::SeqCst) {
            std::fs::rename(&self.db, self.db.with_extension("away")).expect("moved away");
        }
        answers
    }

    fn capabilities(&self) -> Capabilities {
        self.inner.capabilities()
    }

    async fn cancel(&self, transfer: &TransferRef) -> Result<(), MssError> {
        self.inner.cancel(transfer).await
    }

    async fn status(&self, transfer: &TransferRef) -> Result<Option<TransferStatus>, MssError> {
        self.inner.status(transfer).await
    }

    async fn events(&self, cursor: &EventCursor, wait: Duration) -> Result<EventBatch, MssError> {
        self.inner.events(cursor, wait).await
    }
}

/// The settings of a broker in front of a Tape REST endpoint at `url` (Tape REST takes no
/// priority: the broker orders requests itself, in held mode).
fn tape_rest_settings(url: &str) -> Settings {
    let text = format!(
        "{BASE}[release]\nmode = \"held\"\nlimit = 4\n[mss]\nadapter = \"tape_rest\"\n\
         [mss.tape_rest]\nurl = \"{url}\"\nauth = {{ method = \"none\" }}\n"
    );
    Settings::parse(&text, "test").expect("settings")
}

/// A read of `file` by group `mc/x`.
fn read_of(settings: &Settings, file: &str) -> NewRequest {
    let fields = crate::policy::RequestFields {
        access_mode: "mc",
        physics_group: "x",
        station: "st1",
        user: "u",
        file,
    };
    NewRequest {
        input: RequestInput {
            station: "st1".into(),
            client_request_id: "r1".into(),
            user: "u".into(),
            file: file.into(),
            size_bytes: 1_000,
            access_mode: "mc".into(),
            physics_group: "x".into(),
            volume: None,
            direction: mss_adapters::Direction::Read,
            extras: Default::default(),
        },
        group: crate::policy::classify(&settings.policy, &fields).expect("a group"),
        benefit: 1_000,
    }
}

/// The dispatcher of `ledger` and `adapter` under `settings`.
fn dispatcher_of(
    ledger: &Ledger,
    adapter: Arc<dyn MssAdapter>,
    settings: &Settings,
    clock: &ManualClock,
) -> Dispatcher {
    let stamp = ConfigStamp {
        origin: "test".into(),
        sha256: String::new(),
        loaded_at_ms: 0,
    };
    let live = Arc::new(LiveSettings::new(crate::startup::reload::live_of(
        settings,
        crate::live_settings::Identities::none(),
        stamp,
        None,
    )));
    Dispatcher::new(
        ledger.clone(),
        adapter,
        settings.mss.clone(),
        live,
        Arc::new(clock.clone()),
        Arc::new(crate::metrics::Metrics::new()),
    )
}

/// A ledger on a file in `dir`, the Tape REST stand-in, and a dispatcher in front of it whose
/// adapter moves the database file away right after the stand-in takes the first batch.
struct Rig {
    standin: TapeRestStandin,
    settings: Settings,
    db: PathBuf,
    clock: ManualClock,
    adapter: Arc<DiskGoneAfterSubmit>,
    ledger: Ledger,
    writer: std::thread::JoinHandle<()>,
    dispatcher: Dispatcher,
}

async fn rig(dir: &std::path::Path) -> Rig {
    let plan = Plan {
        queued: Duration::from_secs(60),
        active: Duration::from_secs(60),
    };
    let standin = TapeRestStandin::start(None, plan).await.expect("stand-in");
    let settings = tape_rest_settings(&standin.url);
    Rig::open(
        standin,
        settings,
        dir.join("ledger.db"),
        ManualClock::new(1_000_000),
    )
}

impl Rig {
    /// The broker (ledger, adapter, dispatcher) on `db` in front of `standin`.
    fn open(standin: TapeRestStandin, settings: Settings, db: PathBuf, clock: ManualClock) -> Rig {
        let AdapterSettings::TapeRest(cfg) = &settings.mss.adapter else {
            panic!("a tape_rest configuration: {:?}", settings.mss.adapter);
        };
        let adapter = Arc::new(DiskGoneAfterSubmit {
            inner: TapeRestAdapter::new(cfg.clone()).expect("adapter"),
            db: db.clone(),
            armed: AtomicBool::new(true),
            batches: AtomicUsize::new(0),
            cancel_while_out: Mutex::new(None),
            unreachable_last: AtomicBool::new(false),
        });
        let options = LedgerOptions {
            path: db.clone(),
            commit_batch_max: 64,
            url: None,
            epoch: 1,
            retry: settings.mss.retry,
            metrics: Arc::new(crate::ledger::NoObserver),
            read_outputs: settings.mss.read_outputs(),
        };
        let (ledger, writer) =
            Ledger::open(&options, settings.policy.clone(), Arc::new(clock.clone()))
                .expect("ledger");
        let dispatcher = dispatcher_of(&ledger, adapter.clone(), &settings, &clock);
        Rig {
            standin,
            settings,
            db,
            clock,
            adapter,
            ledger,
            writer,
            dispatcher,
        }
    }

    /// The broker stops (the cancels its loops handed the cancel loop and not yet carried go
    /// with it) and starts again on the same file, its adapter following nothing.
    fn restart(self) -> Rig {
        let Rig {
            standin,
            settings,
            db,
            clock,
            adapter,
            ledger,
            writer,
            dispatcher,
        } = self;
        drop((dispatcher, ledger, adapter));
        writer.join().expect("writer");
        let rig = Rig::open(standin, settings, db, clock);
        rig.adapter.armed.store(false, Ordering::SeqCst);
        rig
    }

    /// Cancel request `id` while the next batch is out.
    fn cancel_while_out(&self, id: i64) {
        let mut slot = (self.adapter.cancel_while_out.lock()).unwrap_or_else(|e| e.into_inner());
        *slot = Some((self.ledger.clone(), id));
    }

    /// Run the cancels the dispatcher's loops handed the cancel loop, as it would; how many.
    async fn run_cancels(&mut self) -> usize {
        let mut handed = Vec::new();
        if let Some(jobs) = self.dispatcher.cancel_jobs_rx.as_mut() {
            while let Ok(job) = jobs.try_recv() {
                handed.push(job);
            }
        }
        let (n, mut retry) = (handed.len(), CancelsToRetry::default());
        for job in handed {
            self.dispatcher.run_job(job, &mut retry).await;
        }
        assert!(retry.is_empty(), "the stand-in took every cancel");
        n
    }

    /// The cancel loop's start: every cancel the ledger has pending, carried.
    async fn carry_over(&self) {
        let mut retry = CancelsToRetry::default();
        self.dispatcher.carried_over(&mut retry).await;
        assert!(retry.is_empty(), "the stand-in took every cancel");
    }

    /// The stale sweep, once every in-flight request is past `mss.stale_after`.
    async fn stale_sweep(&self) {
        let after = self.settings.mss.stale_after.as_millis() as i64;
        self.clock.advance_ms(after + 1);
        let step = self.dispatcher.check_stale_once().await;
        assert!(matches!(step, Ok(Step::Worked(_))), "{step:?}");
    }

    /// Whether the stand-in's stage requests holding `file` have it cancelled.
    fn cancelled_at_mss(&self, file: &str) -> bool {
        let requests = self.standin.requests();
        let mut holding = (requests.iter()).filter(|r| r.files.iter().any(|f| f["path"] == file));
        holding.any(|r| r.cancelled.contains(file))
    }
    async fn accept(&self, crid: &str, file: &str) -> i64 {
        let mut request = read_of(&self.settings, file);
        request.input.client_request_id = crid.into();
        self.ledger.accept(vec![request]).await.expect("accepted")[0].id
    }

    async fn state_of(&self, id: i64) -> (RequestState, Option<String>) {
        let r = self
            .ledger
            .request(id)
            .await
            .expect("read")
            .expect("stored");
        (r.state, r.mss_id)
    }

    /// The database file is back.
    fn disk_back(&self) {
        std::fs::rename(self.db.with_extension("away"), &self.db).expect("moved back");
    }

    /// Stage requests at the stand-in that hold `file`.
    fn staged(&self, file: &str) -> Vec<String> {
        let holds = |r: &mss_adapters::standin::tape_rest::StageRequest| {
            r.files.iter().any(|f| f["path"] == file)
        };
        let requests = self.standin.requests();
        requests
            .iter()
            .filter(|r| holds(r))
            .map(|r| r.id.clone())
            .collect()
    }

    fn close(self) {
        drop(self.dispatcher);
        drop(self.ledger);
        self.writer.join().expect("writer");
    }
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_resend_after_a_failed_commit_is_no_second_stage_request() {
    let dir = tempfile::tempdir().expect("temp dir");
    let rig = rig(dir.path()).await;
    let id = rig.accept("r1", "/pnfs/test/r1").await;
    // The stand-in takes the file; recording that fails with the file away.
    assert!(
        rig.dispatcher.submit_once().await.is_err(),
        "the commit failed"
    );
    assert_eq!(rig.staged("/pnfs/test/r1").len(), 1, "one stage request");
    assert_eq!(
        rig.state_of(id).await.0,
        RequestState::Accepted,
        "not recorded yet"
    );
    // The disk is back: the next step sends it again, and the adapter answers from what it
    // follows.
    rig.disk_back();
    let step = rig.dispatcher.submit_once().await;
    assert!(matches!(step, Ok(Step::Worked(1))), "sent again: {step:?}");
    assert_eq!(rig.adapter.batches.load(Ordering::SeqCst), 2);
    let staged = rig.staged("/pnfs/test/r1");
    assert_eq!(staged.len(), 1, "still one stage request");
    let want = (RequestState::Submitted, Some(staged[0].clone()));
    assert_eq!(
        rig.state_of(id).await,
        want,
        "under the stage request the stand-in made"
    );
    rig.close();
}

/// The same with a refusal in the batch (a path the endpoint refuses, stored before the door
/// refused relative paths): the refused one is asked again and fails, the taken one is not
/// staged twice.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn with_a_refusal_in_the_batch_the_taken_file_is_not_staged_twice() {
    let dir = tempfile::tempdir().expect("temp dir");
    let rig = rig(dir.path()).await;
    let taken = rig.accept("r1", "/pnfs/test/r1").await;
    let refused = rig.accept("r2", "r2.root").await;
    assert!(
        rig.dispatcher.submit_once().await.is_err(),
        "the commit failed"
    );
    assert_eq!(
        rig.staged("/pnfs/test/r1").len(),
        1,
        "r1 staged, r2 refused"
    );
    rig.disk_back();
    rig.dispatcher.submit_once().await.expect("a step");
    let staged = rig.staged("/pnfs/test/r1");
    assert_eq!(staged.len(), 1, "r1 not staged again");
    let want = (RequestState::Submitted, Some(staged[0].clone()));
    assert_eq!(rig.state_of(taken).await, want);
    assert_eq!(rig.state_of(refused).await.0, RequestState::Failed);
    rig.close();
}

/// A cancel asked while the submission was out is taken as at the MSS (`cancel_maybe_at_mss`);
/// the cancel loop carries it at once, too early (no stage request exists yet), and the MSS's
/// answer hands it to the cancel loop again once recorded. When recording that answer fails to
/// commit, the request is not sent again (it is `submitted` already), so its answer must still
/// be recorded: otherwise its cancel never reaches the MSS, which stages the file (and the
/// request is charged for it, or, unnamed after a restart, refunded: see the next test).
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_cancel_asked_while_the_submission_was_out_reaches_the_mss_after_a_failed_commit() {
    let dir = tempfile::tempdir().expect("temp dir");
    let mut rig = rig(dir.path()).await;
    // `/hold/`: the stand-in keeps it queued until it is cancelled.
    let file = "/pnfs/test/hold/r1";
    let id = rig.accept("r1", file).await;
    rig.cancel_while_out(id);
    assert!(
        rig.dispatcher.submit_once().await.is_err(),
        "the commit failed"
    );
    let staged = rig.staged(file);
    assert_eq!(staged.len(), 1, "the stand-in took it");
    rig.disk_back();
    rig.dispatcher.submit_once().await.expect("a step");
    assert_eq!(
        rig.adapter.batches.load(Ordering::SeqCst),
        1,
        "not sent again"
    );
    rig.run_cancels().await;
    assert!(
        rig.cancelled_at_mss(file),
        "the cancel reached the MSS: {:?}",
        rig.standin.requests()
    );
    let want = (RequestState::Submitted, Some(staged[0].clone()));
    assert_eq!(rig.state_of(id).await, want, "named by its stage request");
    // The MSS's status settles it: cancelled, nothing charged.
    rig.stale_sweep().await;
    assert_eq!(rig.state_of(id).await.0, RequestState::Cancelled);
    let groups = rig.ledger.groups().await.expect("groups");
    assert!(groups.iter().all(|g| g.usage == 0), "{groups:?}");
    rig.close();
}

/// The same when another transfer of the batch could not reach the MSS and recording that
/// (`mark_unsent`) is the commit that fails: what the MSS took is kept all the same.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_cancel_asked_while_out_reaches_the_mss_when_the_failed_commit_is_unsent() {
    let dir = tempfile::tempdir().expect("temp dir");
    let mut rig = rig(dir.path()).await;
    let file = "/pnfs/test/hold/r1";
    let id = rig.accept("r1", file).await;
    rig.accept("r2", "/pnfs/test/r2").await;
    rig.adapter.unreachable_last.store(true, Ordering::SeqCst);
    rig.cancel_while_out(id);
    assert!(
        rig.dispatcher.submit_once().await.is_err(),
        "the commit failed"
    );
    let staged = rig.staged(file);
    assert_eq!(staged.len(), 1, "the stand-in took it");
    rig.disk_back();
    rig.dispatcher.submit_once().await.expect("a step");
    rig.run_cancels().await;
    assert!(
        rig.cancelled_at_mss(file),
        "the cancel reached the MSS: {:?}",
        rig.standin.requests()
    );
    let want = (RequestState::Submitted, Some(staged[0].clone()));
    assert_eq!(rig.state_of(id).await, want, "named by its stage request");
    rig.close();
}

/// The same across a restart before the cancel loop carried the cancel: the restarted adapter
/// follows nothing, so only the stage request the ledger recorded names the transfer. Unnamed,
/// the status check finds nothing and ends the request cancelled and refunded while the MSS
/// still holds the file (staged uncharged, and pinned), and the cancel carried at start names
/// nothing the endpoint can take.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn after_a_restart_a_request_cancelled_while_out_is_named_by_its_stage_request() {
    let dir = tempfile::tempdir().expect("temp dir");
    let rig = rig(dir.path()).await;
    let file = "/pnfs/test/hold/r1";
    let id = rig.accept("r1", file).await;
    rig.cancel_while_out(id);
    assert!(
        rig.dispatcher.submit_once().await.is_err(),
        "the commit failed"
    );
    rig.disk_back();
    rig.dispatcher.submit_once().await.expect("a step");
    let rig = rig.restart();
    // The stale sweep may run before the cancel loop: the MSS holds the file still, so the
    // request is not ended.
    rig.stale_sweep().await;
    let staged = rig.staged(file);
    assert_eq!(staged.len(), 1, "staged once");
    let want = (RequestState::Submitted, Some(staged[0].clone()));
    assert_eq!(rig.state_of(id).await, want, "left at the MSS, named");
    // The cancel loop's start carries every pending cancel: this one reaches the MSS.
    rig.carry_over().await;
    assert!(
        rig.cancelled_at_mss(file),
        "the cancel reached the MSS: {:?}",
        rig.standin.requests()
    );
    rig.stale_sweep().await;
    assert_eq!(rig.state_of(id).await.0, RequestState::Cancelled);
    rig.close();
}
