//! The encp adapter against the stand-in `encp` script (tests/stand-ins/encp): real processes,
//! their recorded argv and environment, exit statuses, timeouts, cancellation and the process
//! limit.

use std::collections::BTreeMap;
use std::path::Path;
use std::time::Duration;

use mss_adapters::encp::{Build, EncpAdapter, EncpConfig, RawEncpConfig};
use mss_adapters::standin::encp::{self as encp_standin, Run};
use mss_adapters::standin::EventReader;
use mss_adapters::{
    Direction, EventKind, MssAdapter, MssError, MssEvent, Progress, Transfer, TransferRef,
};

/// A directory for the stand-in's records and controls, and an adapter running it.
struct Bench {
    dir: tempfile::TempDir,
    adapter: EncpAdapter,
    events: EventReader,
}

impl Bench {
    fn new(tweak: impl FnOnce(&mut RawEncpConfig)) -> Bench {
        let dir = tempfile::tempdir().unwrap();
        // The admin build, so the tags of writes and --get-bfid are taken.
        let mut raw = RawEncpConfig {
            command: encp_standin::script().display().to_string(),
            build: Build::Admin,
            storage_group: Some("cms".into()),
            file_family: Some("raw".into()),
            ..RawEncpConfig::default()
        };
        raw.env
            .insert("ENCP_STANDIN_DIR".into(), dir.path().display().to_string());
        raw.env
            .insert("ENSTORE_CONFIG_HOST".into(), "enstore.example".into());
        raw.env.insert("ENCP_STANDIN_BUILD".into(), "admin".into());
        // The namespace: a write under it has its entry modelled as encp's.
        let pnfs = dir.path().join("pnfs");
        std::fs::create_dir_all(pnfs.join("cms/raw")).unwrap();
        raw.env
            .insert("ENCP_STANDIN_PNFS".into(), pnfs.display().to_string());
        tweak(&mut raw);
        let cfg: EncpConfig = raw.validate(Path::new("/")).unwrap();
        Bench {
            dir,
            adapter: EncpAdapter::new(cfg),
            events: EventReader::new(),
        }
    }

    /// Tell the stand-in how the run for file `name` behaves.
    fn control(&self, name: &str, lines: &str) {
        encp_standin::control(self.dir.path(), name, lines).unwrap();
    }

    fn local(&self, name: &str) -> String {
        self.dir.path().join(name).display().to_string()
    }

    fn read(&self, key: &str, name: &str, priority: i64) -> Transfer {
        Transfer {
            key: key.into(),
            attempt: 1,
            file: format!("/pnfs/cms/run1/{name}"),
            size_bytes: 5_000,
            priority,
            volume: Some("VR1234".into()),
            group: "analysis/higgs".into(),
            direction: Direction::Read,
            local_file: Some(self.local(&format!("{name}.out"))),
            bfid: None,
            position: None,
            offset_bytes: None,
        }
    }

    /// A write of a local file of 777 bytes to `pnfs/cms/raw/{name}` in the stand-in's
    /// namespace.
    fn write(&self, key: &str, name: &str) -> Transfer {
        let src = self.local(name);
        std::fs::write(&src, vec![7u8; 777]).unwrap();
        Transfer {
            direction: Direction::Write,
            file: self.entry(name),
            local_file: Some(src),
            size_bytes: 777,
            volume: None,
            ..self.read(key, name, 10)
        }
    }

    /// The namespace entry of a write to `name`.
    fn entry(&self, name: &str) -> String {
        self.local(&format!("pnfs/cms/raw/{name}"))
    }

    /// Layer `n` of the namespace entry of `name` (the file pnfs and Chimera serve it as).
    fn layer(&self, name: &str, n: u8) -> std::path::PathBuf {
        self.dir
            .path()
            .join(format!("pnfs/cms/raw/.(use)({n})({name})"))
    }

    fn runs(&self) -> Vec<Run> {
        encp_standin::runs(self.dir.path())
    }

    /// Wait until `n` runs have recorded their start (the process is past its startup).
    async fn wait_for_runs(&self, n: usize) {
        let deadline = tokio::time::Instant::now() + Duration::from_secs(20);
        while self.runs().len() < n {
            assert!(
                tokio::time::Instant::now() < deadline,
                "runs: {:?}",
                self.runs()
            );
            tokio::time::sleep(Duration::from_millis(20)).await;
        }
    }

    async fn events_until(&mut self, done: impl Fn(&[MssEvent]) -> bool) -> Vec<MssEvent> {
        self.events.until(&self.adapter, done).await.to_vec()
    }

    async fn final_event(&mut self, key: &str) -> EventKind {
        self.events.final_event(&self.adapter, key).await
    }
}

fn is_final(k: &EventKind) -> bool {
    !matches!(k, EventKind::Started)
}

fn reference(t: &Transfer) -> TransferRef {
    TransferRef {
        key: t.key.clone(),
        attempt: t.attempt,
        mss_id: None,
        file: t.file.clone(),
        size_bytes: t.size_bytes,
    }
}

#[tokio::test]
async fn a_read_runs_encp_with_the_priority_no_aging_and_reports_start_and_bytes() {
    let mut b = Bench::new(|_| {});
    b.control("f1.root", "bytes 4321\nqueued 0.2\n");
    let t = b.read("7", "f1.root", 20);
    let s = b.adapter.submit(&t).await.unwrap();
    assert!(s.mss_id.starts_with("encp:") && !s.duplicate, "{s:?}");
    let events = b
        .events_until(|e| e.iter().any(|e| is_final(&e.kind)))
        .await;
    let kinds: Vec<&EventKind> = events.iter().map(|e| &e.kind).collect();
    assert_eq!(
        kinds,
        [&EventKind::Started, &EventKind::Done { bytes: 4321 }],
        "the bytes are the destination file's size, not the declared 5000"
    );
    let runs = b.runs();
    assert_eq!(runs.len(), 1);
    let want: Vec<String> = [
        "--priority",
        "20",
        "--delpri",
        "0",
        "--age-time",
        "0",
        "--verbose",
        "4",
        "/pnfs/cms/run1/f1.root",
    ]
    .iter()
    .map(|s| s.to_string())
    .chain([b.local("f1.root.out")])
    .collect();
    assert_eq!(
        runs[0].args, want,
        "storage group and family are for writes only"
    );
    assert_eq!(
        runs[0].env.get("ENSTORE_CONFIG_HOST").map(String::as_str),
        Some("enstore.example")
    );
    assert!(!runs[0].env.contains_key("ENCP_DAQ"));
    assert_eq!(runs[0].end.as_deref(), Some("exit 0"));
}

#[tokio::test]
async fn a_write_stores_the_local_file_with_the_enstore_tags() {
    let mut b = Bench::new(|_| {});
    let src = b.local("upload.dat");
    std::fs::write(&src, vec![7u8; 777]).unwrap();
    let t = Transfer {
        direction: Direction::Write,
        file: "/pnfs/cms/raw/upload.dat".into(),
        local_file: Some(src.clone()),
        ..b.read("8", "x", 15)
    };
    b.adapter.submit(&t).await.unwrap();
    assert_eq!(b.final_event("8").await, EventKind::Done { bytes: 777 });
    let args = &b.runs()[0].args;
    let n = args.len();
    assert_eq!(
        args[n - 6..],
        [
            "--storage-group",
            "cms",
            "--file-family",
            "raw",
            src.as_str(),
            "/pnfs/cms/raw/upload.dat"
        ]
    );
}

#[tokio::test]
async fn a_priority_class_runs_with_encp_daq_and_its_admin_priority() {
    let mut b = Bench::new(|raw| {
        let mut class = mss_adapters::encp::RawClass {
            priority: Some(2_000_002),
            ..Default::default()
        };
        class.env.insert("ENCP_DAQ".into(), "1".into());
        raw.classes.insert("datataking".into(), class);
    });
    let mut t = b.read("9", "raw9.dat", 100);
    t.group = "datataking".into();
    b.adapter.submit(&t).await.unwrap();
    b.final_event("9").await;
    let run = &b.runs()[0];
    assert_eq!(run.args[..2], ["--priority", "2000002"]);
    assert_eq!(run.env.get("ENCP_DAQ").map(String::as_str), Some("1"));
}

#[tokio::test]
async fn a_bfid_read_uses_get_bfid() {
    let mut b = Bench::new(|_| {});
    let mut t = b.read("10", "ignored", 10);
    t.bfid = Some("CDMS105770745000000".into());
    b.control("CDMS105770745000000", "bytes 12\n");
    b.adapter.submit(&t).await.unwrap();
    assert_eq!(b.final_event("10").await, EventKind::Done { bytes: 12 });
    let args = &b.runs()[0].args;
    let n = args.len();
    assert_eq!(args[n - 3..n - 1], ["--get-bfid", "CDMS105770745000000"]);
}

/// Issue 18, item 5: encp exits 1 for every ordinary failure; the STATUS line on its standard
/// error says whether it is worth retrying, and nothing else in the output does.
#[tokio::test]
async fn the_status_line_decides_whether_a_failure_is_retried() {
    let mut b = Bench::new(|_| {});
    b.control(
        "noaccess",
        "status NOACCESS\nmessage volume VR1234 is marked NOACCESS\n",
    );
    b.control("nofile", "status NO SUCH FILE/BFID\n");
    b.control("retries", "status TOO MANY RETRIES\n");
    b.control("transient", "status NET_ERROR\nmessage mover timed out\n");
    // The file's path names a fatal error; its STATUS is a transient one.
    b.control("DELETED", "status NET_ERROR\n");
    let names = ["noaccess", "nofile", "retries", "transient", "DELETED"];
    for (i, name) in names.iter().enumerate() {
        let t = b.read(&i.to_string(), name, 10);
        b.adapter.submit(&t).await.unwrap();
    }
    let mut outcomes = BTreeMap::new();
    for (i, name) in names.iter().enumerate() {
        let kind = b.final_event(&i.to_string()).await;
        outcomes.insert(*name, kind);
    }
    let failed = |k: &str| match &outcomes[k] {
        EventKind::Failed { reason, retryable } => (reason.clone(), *retryable),
        other => panic!("{other:?}"),
    };
    let (reason, retryable) = failed("noaccess");
    assert!(!retryable, "NOACCESS needs a person");
    assert_eq!(
        reason,
        "encp exited with status 1, STATUS=NOACCESS: volume VR1234 is marked NOACCESS"
    );
    assert!(!failed("nofile").1, "NO SUCH FILE/BFID will not appear");
    assert!(
        failed("retries").1,
        "encp gave up for now: the broker retries later"
    );
    assert!(failed("transient").1, "NET_ERROR is transient");
    assert!(failed("DELETED").1, "only the STATUS line counts");
    assert!(b.runs().iter().all(|r| r.end.as_deref() == Some("exit 1")));
}

/// Issue 18, item 2: a site whose encp is the user build refuses the admin options. The
/// configuration check refuses them; should the site run another build than it says, the run
/// fails at once with encp's words, not retried (the same command line would be refused again).
#[tokio::test]
async fn an_option_the_running_build_refuses_fails_the_transfer_for_good() {
    let mut b = Bench::new(|raw| {
        raw.env.insert("ENCP_STANDIN_BUILD".into(), "user".into());
    });
    let src = b.local("tagged.dat");
    std::fs::write(&src, b"x").unwrap();
    let t = Transfer {
        direction: Direction::Write,
        file: "/pnfs/cms/raw/tagged.dat".into(),
        local_file: Some(src),
        ..b.read("20", "x", 15)
    };
    b.adapter.submit(&t).await.unwrap();
    match b.final_event("20").await {
        EventKind::Failed { reason, retryable } => {
            assert!(!retryable, "{reason}");
            assert_eq!(
                reason,
                "encp exited with status 1: option --storage-group is an administrator option"
            );
        }
        other => panic!("{other:?}"),
    }
    // A read with the user build's options only runs.
    b.control("plain", "bytes 10\n");
    b.adapter.submit(&b.read("21", "plain", 15)).await.unwrap();
    assert_eq!(b.final_event("21").await, EventKind::Done { bytes: 10 });
}

/// Issue 37, item 7: encp reads `_` as `-` and a unique prefix as the option (Enstore's
/// `src/option.py`). A spelling it takes passes the configuration check and runs, at the
/// option's full name, on the user build; one it refuses (misspelt, ambiguous, or an option
/// the build refuses under another spelling) is refused by the check naming `args`, and the
/// stand-in, reading options as encp does, refuses it too, in encp's words: it never reaches a
/// run to be retried.
#[tokio::test]
async fn the_configuration_check_takes_what_encp_takes_and_refuses_what_it_refuses() {
    let cases: [(&[&str], Option<&str>); 6] = [
        (&["--file_family=raw", "--thr"], None),
        (&["--ver", "4"], Some("option --ver not a unique prefix")),
        (&["--threded"], Some("option --threded not recognized")),
        (
            &["--prio_rity", "5"],
            Some("option --prio_rity not recognized"),
        ),
        (
            &["--stor", "cms"],
            Some("option --storage-group is an administrator option"),
        ),
        (
            &["--lib=LTO8"],
            Some("option --library is an administrator option"),
        ),
    ];
    for (args, encp_says) in cases {
        let args: Vec<String> = args.iter().map(|a| a.to_string()).collect();
        let checked = RawEncpConfig {
            command: encp_standin::script().display().to_string(),
            build: Build::User,
            args: args.clone(),
            ..RawEncpConfig::default()
        }
        .validate(Path::new("/"));
        assert_eq!(
            checked.is_ok(),
            encp_says.is_none(),
            "{args:?}: {checked:?}"
        );
        if let Err(issues) = &checked {
            assert!(issues.iter().all(|i| i.key == "args"), "{issues:?}");
        }
        // The stand-in as the user build, with the options before a read's two files.
        let dir = tempfile::tempdir().unwrap();
        let out = std::process::Command::new(encp_standin::script())
            .args(&args)
            .arg("/pnfs/cms/run1/f")
            .arg(dir.path().join("f.out"))
            .env("ENCP_STANDIN_DIR", dir.path())
            .env("ENCP_STANDIN_BUILD", "user")
            .output()
            .unwrap();
        let said = String::from_utf8_lossy(&out.stdout);
        match encp_says {
            Some(words) => {
                assert_eq!(out.status.code(), Some(1), "{args:?}: {said}");
                assert_eq!(said.lines().next(), Some(words), "{args:?}");
            }
            None => assert!(out.status.success(), "{args:?}: {said}"),
        }
    }
    // A spelling the check took runs on the user build, passed at the full names.
    let mut b = Bench::new(|raw| {
        raw.build = Build::User;
        raw.storage_group = None;
        raw.args = vec!["--file_family=raw".into(), "--thr".into()];
        raw.env.insert("ENCP_STANDIN_BUILD".into(), "user".into());
    });
    b.control("spelt", "bytes 12\n");
    b.adapter.submit(&b.read("30", "spelt", 15)).await.unwrap();
    assert_eq!(b.final_event("30").await, EventKind::Done { bytes: 12 });
    let args = &b.runs()[0].args;
    let at = args.iter().position(|a| a == "--file-family").unwrap();
    assert_eq!(args[at..at + 3], ["--file-family", "raw", "--threaded"]);
}

#[tokio::test]
async fn a_run_past_its_timeout_is_stopped_and_fails_retryably() {
    let mut b = Bench::new(|raw| {
        raw.timeout_secs = 1;
        raw.kill_grace_secs = 5;
    });
    b.control("slow", "sleep 30\n");
    b.adapter.submit(&b.read("4", "slow", 10)).await.unwrap();
    match b.final_event("4").await {
        EventKind::Failed { reason, retryable } => {
            assert!(retryable);
            assert!(reason.starts_with("encp timed out after 1 s"), "{reason}");
        }
        other => panic!("{other:?}"),
    }
    assert_eq!(b.runs()[0].end.as_deref(), Some("killed TERM"));
}

#[tokio::test]
async fn cancelling_stops_the_process_and_frees_its_slot() {
    let mut b = Bench::new(|raw| raw.max_processes = 1);
    b.control("long", "queued 30\n");
    let t = b.read("5", "long", 10);
    b.adapter.submit(&t).await.unwrap();
    assert_eq!(b.adapter.room(), Some(0));
    // Queued at the library manager: no mover has called back.
    let st = b.adapter.status(&reference(&t)).await.unwrap().unwrap();
    assert_eq!(st.progress, Progress::Queued);
    b.wait_for_runs(1).await;
    b.adapter.cancel(&reference(&t)).await.unwrap();
    assert_eq!(b.final_event("5").await, EventKind::Cancelled);
    assert_eq!(b.runs()[0].end.as_deref(), Some("killed TERM"));
    assert_eq!(b.adapter.room(), Some(1));
    let st = b.adapter.status(&reference(&t)).await.unwrap().unwrap();
    assert_eq!(st.progress, Progress::Finished(EventKind::Cancelled));
    // Cancelling again is refused: nothing runs.
    assert!(matches!(
        b.adapter.cancel(&reference(&t)).await,
        Err(MssError::Rejected(_))
    ));
}

#[tokio::test]
async fn no_more_than_max_processes_run_and_room_frees_when_one_ends() {
    let mut b = Bench::new(|raw| raw.max_processes = 2);
    b.control("a", "queued 0.3\n");
    b.control("b", "queued 30\n");
    b.adapter.submit(&b.read("1", "a", 10)).await.unwrap();
    b.adapter.submit(&b.read("2", "b", 10)).await.unwrap();
    assert_eq!(b.adapter.room(), Some(0));
    match b.adapter.submit(&b.read("3", "c", 10)).await {
        Err(MssError::Unavailable(m)) => assert!(m.contains("all 2 encp processes are busy")),
        other => panic!("{other:?}"),
    }
    tokio::time::timeout(Duration::from_secs(10), b.adapter.room_freed())
        .await
        .expect("room freed when the first run ended");
    assert_eq!(b.adapter.room(), Some(1));
    b.adapter.submit(&b.read("3", "c", 10)).await.unwrap();
    assert_eq!(b.final_event("3").await, EventKind::Done { bytes: 1000 });
    b.wait_for_runs(3).await;
    b.adapter
        .cancel(&reference(&b.read("2", "b", 10)))
        .await
        .unwrap();
    b.final_event("2").await;
    assert_eq!(b.runs().len(), 3, "the refused submission ran nothing");
}

#[tokio::test]
async fn the_same_key_and_attempt_never_runs_twice() {
    let mut b = Bench::new(|_| {});
    // The first attempt fails retryably (encp removes its output, so the next attempt's encp
    // does not find it: an existing output is refused, STATUS=USERERROR).
    b.control("once", "queued 0.3\nstatus NET_ERROR\n");
    let t = b.read("6", "once", 10);
    let first = b.adapter.submit(&t).await.unwrap();
    let again = b.adapter.submit(&t).await.unwrap();
    assert!(again.duplicate);
    assert_eq!(again.mss_id, first.mss_id);
    assert!(matches!(
        b.final_event("6").await,
        EventKind::Failed {
            retryable: true,
            ..
        }
    ));
    assert!(
        b.adapter.submit(&t).await.unwrap().duplicate,
        "finished too"
    );
    assert_eq!(b.runs().len(), 1);
    // A higher attempt runs again.
    b.control("once", "queued 0.3\n");
    let mut next = t.clone();
    next.attempt = 2;
    assert!(!b.adapter.submit(&next).await.unwrap().duplicate);
    b.events_until(|e| e.iter().any(|e| e.attempt == 2 && is_final(&e.kind)))
        .await;
    assert_eq!(b.runs().len(), 2);
    assert_eq!(
        b.adapter.status(&reference(&t)).await.unwrap(),
        Some(mss_adapters::TransferStatus {
            attempt: 2,
            progress: Progress::Finished(EventKind::Done { bytes: 1000 })
        })
    );
    let unknown = TransferRef {
        key: "404".into(),
        ..reference(&t)
    };
    assert_eq!(b.adapter.status(&unknown).await.unwrap(), None);
}

#[tokio::test]
async fn a_missing_encp_is_unavailable_so_the_broker_keeps_the_request() {
    let b = Bench::new(|raw| raw.command = "/nonexistent/encp".into());
    match b.adapter.submit(&b.read("1", "x", 10)).await {
        Err(MssError::Unavailable(m)) => assert!(m.contains("cannot run /nonexistent/encp"), "{m}"),
        other => panic!("{other:?}"),
    }
    assert_eq!(b.adapter.room(), Some(8), "the slot was given back");
}

#[tokio::test]
async fn reprioritisation_runs_the_configured_command_for_a_queued_transfer() {
    let script_dir = tempfile::tempdir().unwrap();
    let record = script_dir.path().join("reprio.log");
    let script = script_dir.path().join("reprio");
    std::fs::write(
        &script,
        format!("#!/bin/sh\necho \"$@\" >> {}\n", record.display()),
    )
    .unwrap();
    std::fs::set_permissions(&script, std::os::unix::fs::PermissionsExt::from_mode(0o755)).unwrap();
    let mut b = Bench::new(|raw| {
        raw.reprioritize_command = Some(vec![
            script.display().to_string(),
            "--pid".into(),
            "{pid}".into(),
            "--priority".into(),
            "{priority}".into(),
            "{file}".into(),
        ])
    });
    assert!(b.adapter.capabilities().reprioritize);
    b.control("q", "queued 30\n");
    let t = b.read("11", "q", 10);
    let s = b.adapter.submit(&t).await.unwrap();
    b.wait_for_runs(1).await;
    let pid = s.mss_id.trim_start_matches("encp:");
    b.adapter.reprioritize(&reference(&t), 99).await.unwrap();
    assert_eq!(
        std::fs::read_to_string(&record).unwrap().trim(),
        format!("--pid {pid} --priority 99 /pnfs/cms/run1/q")
    );
    b.adapter.cancel(&reference(&t)).await.unwrap();
    b.final_event("11").await;
    // Without a command the adapter says it cannot.
    let plain = Bench::new(|_| {});
    assert!(!plain.adapter.capabilities().reprioritize);
    assert!(matches!(
        plain.adapter.reprioritize(&reference(&t), 5).await,
        Err(MssError::Rejected(_))
    ));
}

/// Issue 13, item 6: nothing a station gives reaches encp's command line as an option, whatever
/// path checks the caller made: the adapter refuses it and runs nothing.
#[tokio::test]
async fn a_file_or_bfid_that_looks_like_an_option_runs_nothing() {
    let b = Bench::new(|_| {});
    let mut by_file = b.read("1", "f.root", 10);
    by_file.file = "--library=EVIL".into();
    let mut by_bfid = b.read("2", "f.root", 10);
    by_bfid.bfid = Some("--verbose".into());
    let mut climbing = b.read("3", "f.root", 10);
    climbing.file = "/pnfs/cms/x/..".into();
    let mut write = b.read("4", "f.root", 10);
    write.direction = Direction::Write;
    write.local_file = Some("-".into());
    for t in [by_file, by_bfid, climbing, write] {
        match b.adapter.submit(&t).await {
            Err(MssError::Rejected(why)) => assert!(why.contains("option"), "{why}"),
            other => panic!("{t:?}: {other:?}"),
        }
    }
    assert!(b.runs().is_empty(), "no encp ran: {:?}", b.runs());
}

/// Issue 13, item 6: a destination that is a directory when encp exits (here it became one
/// while the run waited) is a failure, not `done` with the directory's 4,096 bytes.
#[tokio::test]
async fn a_directory_destination_is_not_recorded_done() {
    let mut b = Bench::new(|_| {});
    let go = b.local("go");
    b.control("d.root", &format!("wait_for {go}\n"));
    let t = b.read("5", "d.root", 10);
    b.adapter.submit(&t).await.unwrap();
    b.wait_for_runs(1).await;
    std::fs::create_dir(t.local_file.as_deref().unwrap()).unwrap();
    std::fs::write(&go, "").unwrap();
    match b.final_event("5").await {
        EventKind::Failed { reason, retryable } => {
            assert!(reason.contains("directory"), "{reason}");
            assert!(!retryable);
        }
        other => panic!("a directory recorded as {other:?}"),
    }
}

/// Issue 13, item 6: a symbolic link under a root that leads out of it is refused on arrival
/// and again when the transfer is about to run; `{station}` in a root is the station's own
/// area, so one station cannot name another's staged copy.
#[tokio::test]
async fn links_out_of_the_roots_and_other_stations_areas_are_refused() {
    let outside = tempfile::tempdir().unwrap();
    let stage = tempfile::tempdir().unwrap();
    let root = format!("{}/{{station}}", stage.path().display());
    let b = Bench::new(|raw| raw.local_roots = vec![root.clone()]);
    let mine = stage.path().join("cms");
    std::fs::create_dir(&mine).unwrap();
    std::fs::create_dir(stage.path().join("cdf")).unwrap();
    let own = mine.join("f.out").display().to_string();
    assert_eq!(b.adapter.check_local_file_for("cms", &own), Ok(()));
    let theirs = stage.path().join("cdf/f.out").display().to_string();
    let e = b.adapter.check_local_file_for("cms", &theirs).unwrap_err();
    assert!(e.contains("local_roots"), "{e}");
    assert!(b.adapter.check_local_file_for("../cdf", &theirs).is_err());
    // A directory is not a file to write.
    assert!(b
        .adapter
        .check_local_file_for("cms", &mine.display().to_string())
        .unwrap_err()
        .contains("directory"));

    // A link in the station's own area that leads outside.
    let link = mine.join("out");
    std::os::unix::fs::symlink(outside.path(), &link).unwrap();
    let through = link.join("f.out").display().to_string();
    let e = b.adapter.check_local_file_for("cms", &through).unwrap_err();
    assert!(e.contains("leads to"), "{e}");
    // A link to nothing: encp would write wherever it points.
    let dangling = mine.join("dangling");
    std::os::unix::fs::symlink(outside.path().join("nothing"), &dangling).unwrap();
    let e = b
        .adapter
        .check_local_file_for("cms", &dangling.display().to_string())
        .unwrap_err();
    assert!(e.contains("symbolic link"), "{e}");

    // Accepted on arrival, then the directory is swapped for a link before encp runs.
    let later = mine.join("later");
    std::fs::create_dir(&later).unwrap();
    let mut t = b.read("6", "f.root", 10);
    t.local_file = Some(later.join("f.out").display().to_string());
    assert_eq!(
        b.adapter
            .check_local_file_for("cms", t.local_file.as_deref().unwrap()),
        Ok(())
    );
    std::fs::remove_dir(&later).unwrap();
    std::os::unix::fs::symlink(outside.path(), &later).unwrap();
    match b.adapter.submit(&t).await {
        Err(MssError::Rejected(why)) => assert!(why.contains("local_roots"), "{why}"),
        other => panic!("{other:?}"),
    }
    assert!(b.runs().is_empty());
}

/// Issue 18, item 9: stopping encp leaves its ticket in the library manager's queue; with
/// `cancel_command` a cancelled run still queued has its ticket deleted by the unique id encp
/// printed (at `--verbose` 11), after the process is stopped. Without one, or once a mover
/// called back, no command runs.
#[tokio::test]
async fn cancelling_a_queued_run_deletes_its_ticket_with_the_cancel_command() {
    let script_dir = tempfile::tempdir().unwrap();
    let record = script_dir.path().join("delete.log");
    let script = script_dir.path().join("enstore");
    std::fs::write(
        &script,
        format!("#!/bin/sh\necho \"$@\" >> {}\n", record.display()),
    )
    .unwrap();
    std::fs::set_permissions(&script, std::os::unix::fs::PermissionsExt::from_mode(0o755)).unwrap();
    let mut b = Bench::new(|raw| {
        raw.verbose = 11;
        raw.cancel_command = Some(
            [
                script.display().to_string().as_str(),
                "library",
                "--delete-work",
                "{unique_id}",
                "{library}",
            ]
            .map(String::from)
            .to_vec(),
        );
    });
    assert!(b.adapter.cancel_reaches_mss());
    b.control("q", "queued 30\nlibrary CD-LTO8F1\n");
    let t = b.read("30", "q", 10);
    let s = b.adapter.submit(&t).await.unwrap();
    let pid = s.mss_id.trim_start_matches("encp:").to_string();
    // Cancel once the ticket is at the library manager (the stand-in records it after printing).
    let deadline = tokio::time::Instant::now() + Duration::from_secs(20);
    while b.runs().first().and_then(|r| r.ticket.clone()).is_none() {
        assert!(tokio::time::Instant::now() < deadline, "{:?}", b.runs());
        tokio::time::sleep(Duration::from_millis(20)).await;
    }
    b.adapter.cancel(&reference(&t)).await.unwrap();
    assert_eq!(b.final_event("30").await, EventKind::Cancelled);
    let line = std::fs::read_to_string(&record).unwrap();
    let words: Vec<&str> = line.split_whitespace().collect();
    assert_eq!(words[..2], ["library", "--delete-work"], "{line}");
    assert!(
        words[2].ends_with(&format!("-{pid}-0")),
        "the unique id encp made: {line}"
    );
    assert_eq!(Some(words[2]), b.runs()[0].ticket.as_deref());
    assert_eq!(words[3], "CD-LTO8F1");
    assert_eq!(b.runs()[0].end.as_deref(), Some("killed TERM"));
    // Without the command, a cancel does not reach the library manager.
    assert!(!Bench::new(|_| {}).adapter.cancel_reaches_mss());
}

/// A cancel that arrives after encp has exited 0 (the file transferred) but before its
/// watcher saw the exit: the transfer is done, not cancelled (reported cancelled, the broker
/// would refund a file it transferred). Without the watcher's check of the exit first, all 16
/// runs were reported cancelled.
#[tokio::test]
async fn a_cancel_after_encp_exited_0_does_not_turn_the_done_transfer_into_cancelled() {
    let mut b = Bench::new(|raw| raw.max_processes = 16);
    let mut finals = Vec::new();
    for i in 0..16 {
        let name = format!("quick{i}");
        b.control(&name, "bytes 4321\n");
        let t = b.read(&format!("q{i}"), &name, 10);
        b.adapter.submit(&t).await.unwrap();
        // Block this (current-thread) runtime until the run has exited 0: its watcher has not
        // been polled yet, as when the runtime is busy.
        let deadline = std::time::Instant::now() + Duration::from_secs(20);
        while b.runs().len() <= i || b.runs().iter().any(|r| r.end.is_none()) {
            assert!(std::time::Instant::now() < deadline, "{:?}", b.runs());
            std::thread::sleep(Duration::from_millis(10));
        }
        // ... and its process is gone (a zombie until its watcher reaps it).
        while !b.runs().iter().all(|r| exited(r.pid)) {
            assert!(std::time::Instant::now() < deadline, "{:?}", b.runs());
            std::thread::sleep(Duration::from_millis(10));
        }
        assert!(Path::new(&b.local(&format!("{name}.out"))).exists());
        // The station cancels now (the broker still has it in flight).
        b.adapter.cancel(&reference(&t)).await.unwrap();
        finals.push(b.final_event(&t.key).await);
    }
    let cancelled = finals
        .iter()
        .filter(|k| **k == EventKind::Cancelled)
        .count();
    assert_eq!(
        cancelled, 0,
        "runs that exited 0 with their file written reported cancelled: {finals:?}"
    );
    assert!(b.runs().iter().all(|r| r.end.as_deref() == Some("exit 0")));
}

/// Whether process `pid` has exited: a zombie (`Z` in /proc/PID/stat) or gone.
fn exited(pid: u32) -> bool {
    match std::fs::read_to_string(format!("/proc/{pid}/stat")) {
        Ok(stat) => {
            stat.rsplit(')')
                .next()
                .and_then(|rest| rest.split_whitespace().next())
                == Some("Z")
        }
        Err(_) => true,
    }
}

/// SIGKILL the process group of a run (the OOM killer, an operator's `kill -9`): encp cannot
/// catch it, so its own cleanup (`delete_at_exit`) does not run.
fn sigkill(pid: u32) {
    // SAFETY: kill(2) on a stand-in's own process group; no memory is touched.
    unsafe {
        libc::kill(-(pid as i32), libc::SIGKILL);
    }
}

/// Wait until `what` holds of the runs recorded.
async fn until_runs(b: &Bench, what: &str, done: impl Fn(&[Run]) -> bool) {
    let deadline = tokio::time::Instant::now() + Duration::from_secs(20);
    while !done(&b.runs()) {
        assert!(
            tokio::time::Instant::now() < deadline,
            "{what}: {:?}",
            b.runs()
        );
        tokio::time::sleep(Duration::from_millis(20)).await;
    }
}

/// A read's encp creates its output empty before it queues (Enstore's `src/encp.py`,
/// `prepare_read_from_hsm`) and refuses an output that exists (`outputfile_check`:
/// USERERROR, not retried). Killed by SIGKILL, encp cannot remove it (`src/delete_at_exit.py`
/// runs only for signals it catches), so the retry the broker makes of the retryable failure
/// would fail for good on the first run's leftover: the adapter removes what the killed run
/// created. An output that was there before the run is never touched.
#[tokio::test]
async fn a_read_killed_by_sigkill_leaves_no_output_to_fail_its_retry() {
    let mut b = Bench::new(|_| {});
    b.control("k.root", "queued 600\n");
    let t = b.read("30", "k.root", 10);
    let out = t.local_file.clone().unwrap();
    b.adapter.submit(&t).await.unwrap();
    until_runs(&b, "the run queued with its output created", |runs| {
        runs.len() == 1 && Path::new(&out).exists()
    })
    .await;
    sigkill(b.runs()[0].pid);
    match b.final_event("30").await {
        EventKind::Failed { reason, retryable } => {
            assert!(retryable, "{reason}");
            assert!(reason.contains("signal 9"), "{reason}");
        }
        other => panic!("{other:?}"),
    }
    b.control("k.root", "bytes 10\n");
    let next = Transfer {
        attempt: 2,
        ..t.clone()
    };
    b.adapter.submit(&next).await.unwrap();
    b.events_until(|e| e.iter().any(|e| e.attempt == 2 && is_final(&e.kind)))
        .await;
    let st = b.adapter.status(&reference(&next)).await.unwrap().unwrap();
    assert_eq!(
        st.progress,
        Progress::Finished(EventKind::Done { bytes: 10 }),
        "the retry found the killed run's empty output and encp refused it"
    );

    // A station's file already at the destination: encp refuses it and it stays.
    let mine = b.read("31", "mine.root", 10);
    let path = mine.local_file.clone().unwrap();
    std::fs::write(&path, b"station's own").unwrap();
    b.adapter.submit(&mine).await.unwrap();
    match b.final_event("31").await {
        EventKind::Failed { reason, retryable } => {
            assert!(!retryable, "{reason}");
            assert!(reason.contains("STATUS=USERERROR"), "{reason}");
        }
        other => panic!("{other:?}"),
    }
    assert_eq!(std::fs::read(&path).unwrap(), b"station's own");
}

/// encp prints "File ... copied successfully." once the file is transferred (`finish_request`
/// in `src/encp.py`, at --verbose 4), then does its final statistics and logging before it
/// exits; a SIGTERM in that time still exits 143 (`src/delete_at_exit.py`) with the file kept
/// (no longer registered for deletion). The transfer is done: reported cancelled, the broker
/// would refund a file it transferred; timed out, it would read it again and encp would refuse
/// the output that is now there.
#[tokio::test]
async fn a_run_stopped_after_encp_said_copied_is_done() {
    let mut b = Bench::new(|_| {});
    b.control("c.root", "bytes 10\nfinish 600\n");
    let t = b.read("32", "c.root", 10);
    b.adapter.submit(&t).await.unwrap();
    until_runs(&b, "the file copied", |runs| {
        runs.len() == 1 && runs[0].copied
    })
    .await;
    b.adapter.cancel(&reference(&t)).await.unwrap();
    assert_eq!(b.final_event("32").await, EventKind::Done { bytes: 10 });
    assert_eq!(b.runs()[0].end.as_deref(), Some("killed TERM"));
    assert_eq!(std::fs::metadata(t.local_file.unwrap()).unwrap().len(), 10);
}

/// SIGTERM (a cancel, a timeout, the broker's death) lets encp remove a queued read's output
/// itself (`src/delete_at_exit.py`): the next attempt finds nothing in its way.
#[tokio::test]
async fn a_cancelled_read_leaves_no_output() {
    let mut b = Bench::new(|_| {});
    b.control("q.root", "queued 600\n");
    let t = b.read("33", "q.root", 10);
    let out = t.local_file.clone().unwrap();
    b.adapter.submit(&t).await.unwrap();
    until_runs(&b, "the run queued with its output created", |runs| {
        runs.len() == 1 && Path::new(&out).exists()
    })
    .await;
    b.adapter.cancel(&reference(&t)).await.unwrap();
    assert_eq!(b.final_event("33").await, EventKind::Cancelled);
    assert!(!Path::new(&out).exists());
}

/// encp refuses an existing output only after it has asked the file and volume clerks
/// (Enstore's `src/encp.py`: `create_read_requests` before `verify_read_request_consistancy`
/// and its `outputfile_check`), so a first run that failed retryably or died with the broker
/// before it looked would leave a station's own file at the destination to a later attempt,
/// which takes a complete-looking output there for its earlier copy. The adapter looks itself
/// at attempt 1: the station's file (here exactly the declared size) is refused at once, final,
/// without an encp run (the stand-in's run would wait before its own check, as encp at its
/// clerks), and it stays as it was.
#[tokio::test]
async fn a_station_file_at_a_first_attempts_output_is_refused_before_encp_runs() {
    let mut b = Bench::new(|_| {});
    let never = b.local("never");
    b.control("s.root", &format!("wait_for {never}\n"));
    let t = b.read("40", "s.root", 10);
    let path = t.local_file.clone().unwrap();
    std::fs::write(&path, vec![7u8; 5_000]).unwrap();
    let s = b.adapter.submit(&t).await.unwrap();
    assert!(!s.duplicate, "{s:?}");
    match b.final_event("40").await {
        EventKind::Failed { reason, retryable } => {
            assert!(!retryable, "{reason}");
            assert!(reason.contains("File exists"), "{reason}");
        }
        other => panic!("{other:?}"),
    }
    assert!(b.runs().is_empty(), "encp ran: {:?}", b.runs());
    assert_eq!(std::fs::read(&path).unwrap(), vec![7u8; 5_000]);
    assert!(
        b.adapter.submit(&t).await.unwrap().duplicate,
        "answered again"
    );
    assert_eq!(b.adapter.room(), Some(8), "no slot taken");
}

/// At a later attempt the output was absent at attempt 1 (see above), and only this request's
/// encp runs create it: a regular file of exactly the declared size is the earlier attempt's
/// copy (encp said "copied successfully", then the broker died before it recorded the end), so
/// the transfer is done without running encp again (which would refuse the output, USERERROR,
/// final). Anything else there (a partial file a SIGKILLed encp left, an empty one, one of a
/// declared size 0) is not a copy: refused as encp would, and left in place.
#[tokio::test]
async fn a_later_attempt_finds_its_earlier_copy_done_and_anything_else_refused() {
    let mut b = Bench::new(|_| {});
    let copy = Transfer {
        attempt: 2,
        ..b.read("41", "copied.root", 10)
    };
    let path = copy.local_file.clone().unwrap();
    std::fs::write(&path, vec![1u8; 5_000]).unwrap();
    b.adapter.submit(&copy).await.unwrap();
    assert_eq!(b.final_event("41").await, EventKind::Done { bytes: 5_000 });
    assert_eq!(
        b.adapter.status(&reference(&copy)).await.unwrap().unwrap(),
        mss_adapters::TransferStatus {
            attempt: 2,
            progress: Progress::Finished(EventKind::Done { bytes: 5_000 })
        }
    );
    assert_eq!(std::fs::read(&path).unwrap(), vec![1u8; 5_000]);

    for (key, name, len, size_bytes) in [
        ("42", "partial.root", 10usize, 5_000u64),
        ("43", "larger.root", 6_000, 5_000),
        ("44", "empty.root", 0, 0),
    ] {
        let t = Transfer {
            attempt: 3,
            size_bytes,
            ..b.read(key, name, 10)
        };
        let path = t.local_file.clone().unwrap();
        std::fs::write(&path, vec![2u8; len]).unwrap();
        b.adapter.submit(&t).await.unwrap();
        match b.final_event(key).await {
            EventKind::Failed { reason, retryable } => {
                assert!(!retryable, "{name}: {reason}");
                assert!(reason.contains("File exists"), "{name}: {reason}");
            }
            other => panic!("{name}: {other:?}"),
        }
        assert_eq!(
            std::fs::read(&path).unwrap(),
            vec![2u8; len],
            "{name} untouched"
        );
    }
    assert!(b.runs().is_empty(), "encp ran: {:?}", b.runs());
}

/// A write's encp creates the namespace entry empty before it queues (Enstore's `src/encp.py`,
/// `prepare_write_to_hsm` and `create_zero_length_pnfs_files`) and refuses an output that
/// exists (`outputfile_check`: USERERROR, final). Killed by SIGKILL (the OOM killer, the
/// adapter after `kill_grace_secs`), it cannot remove it (`src/delete_at_exit.py`), so the
/// broker's retry would fail for good on its own first run's leftover and a data-taking file
/// would never be stored: the retry finds that entry empty, without a bfid, and removes it.
#[tokio::test]
async fn a_write_killed_by_sigkill_leaves_no_entry_to_fail_its_retry() {
    let mut b = Bench::new(|_| {});
    b.control("w.dat", "queued 600\n");
    let t = b.write("50", "w.dat");
    let entry = b.entry("w.dat");
    b.adapter.submit(&t).await.unwrap();
    until_runs(&b, "the write queued with its entry created", |runs| {
        runs.len() == 1 && Path::new(&entry).exists()
    })
    .await;
    sigkill(b.runs()[0].pid);
    match b.final_event("50").await {
        EventKind::Failed { reason, retryable } => {
            assert!(retryable, "{reason}");
            assert!(reason.contains("signal 9"), "{reason}");
        }
        other => panic!("{other:?}"),
    }
    assert_eq!(
        std::fs::metadata(&entry).unwrap().len(),
        0,
        "the killed run left its empty entry"
    );
    b.control("w.dat", "");
    let next = Transfer {
        attempt: 2,
        ..t.clone()
    };
    b.adapter.submit(&next).await.unwrap();
    b.events_until(|e| e.iter().any(|e| e.attempt == 2 && is_final(&e.kind)))
        .await;
    let st = b.adapter.status(&reference(&next)).await.unwrap().unwrap();
    assert_eq!(
        st.progress,
        Progress::Finished(EventKind::Done { bytes: 777 }),
        "the retry met the killed run's empty entry and encp refused it"
    );
    assert_eq!(std::fs::metadata(&entry).unwrap().len(), 777);
    let bfid = std::fs::read_to_string(b.layer("w.dat", 1)).unwrap();
    assert!(bfid.starts_with("STANDIN"), "{bfid}");
    assert_eq!(b.runs().len(), 2);
}

/// Only an entry this request's own earlier run can have left is removed: one there before
/// attempt 1 is refused at once, as encp refuses it, and a later attempt leaves alone any entry
/// with data or with a layer 1 (a bfid) or layer 4 another write set, however empty its size.
#[tokio::test]
async fn a_write_never_removes_an_entry_with_a_bfid_or_data_or_one_there_before_it() {
    let mut b = Bench::new(|_| {});
    let never = b.local("never");
    // A run would wait, as encp at its clerks before its own check.
    for name in ["before.dat", "bfid.dat", "data.dat", "layer4.dat"] {
        b.control(name, &format!("wait_for {never}\n"));
    }
    let first = b.write("51", "before.dat");
    std::fs::write(b.entry("before.dat"), b"").unwrap();
    b.adapter.submit(&first).await.unwrap();

    let mut later = Vec::new();
    for (key, name, data, layer, content) in [
        ("52", "bfid.dat", &b""[..], 1, "CDMS105770745000000\n"),
        ("53", "data.dat", &b"0123456789"[..], 1, ""),
        ("54", "layer4.dat", &b""[..], 4, "VR1234\n"),
    ] {
        let t = Transfer {
            attempt: 2,
            ..b.write(key, name)
        };
        std::fs::write(b.entry(name), data).unwrap();
        std::fs::write(b.layer(name, layer), content).unwrap();
        b.adapter.submit(&t).await.unwrap();
        later.push((key, name, data, layer, content));
    }
    for key in ["51", "52", "53", "54"] {
        match b.final_event(key).await {
            EventKind::Failed { reason, retryable } => {
                assert!(!retryable, "{key}: {reason}");
                assert!(reason.contains("File exists"), "{key}: {reason}");
            }
            other => panic!("{key}: {other:?}"),
        }
    }
    assert_eq!(std::fs::read(b.entry("before.dat")).unwrap(), b"");
    for (_, name, data, layer, content) in later {
        assert_eq!(std::fs::read(b.entry(name)).unwrap(), data, "{name}");
        assert_eq!(
            std::fs::read_to_string(b.layer(name, layer)).unwrap(),
            content,
            "{name}"
        );
    }
    assert!(b.runs().is_empty(), "encp ran: {:?}", b.runs());
}
