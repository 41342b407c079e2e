//! What a new user meets first, through the real binary: README's examples pasted after its
//! quick start, the log on a terminal and in a file, how `serve` stops and how it refuses a
//! port in use, `check-config` on a file with several misspellings, and `trace gen` with no
//! `--out` on a terminal.

use std::io::{BufRead, BufReader, Read};
use std::os::fd::{FromRawFd, OwnedFd};
use std::path::{Path, PathBuf};
use std::process::{Child, Command, Stdio};
use std::sync::{Arc, Mutex};
use std::time::{Duration, Instant};

use crate::helpers::{test_config, wait_for_text, ServeProcess, BIN};

const ROOT: &str = env!("CARGO_MANIFEST_DIR");

/// A pseudo-terminal: what the child gets as its terminal, and everything shown on it so far
/// (read by a thread until the last holder of the terminal's end closes it).
struct Terminal {
    child_end: Option<OwnedFd>,
    shown: Arc<Mutex<Vec<u8>>>,
}

impl Terminal {
    fn open() -> Terminal {
        let (mut ours, mut theirs) = (0, 0);
        // SAFETY: openpty writes two descriptors it opened into the two integers; each is then
        // owned by exactly one `File` or `OwnedFd`.
        let rc = unsafe {
            libc::openpty(
                &mut ours,
                &mut theirs,
                std::ptr::null_mut(),
                std::ptr::null(),
                std::ptr::null(),
            )
        };
        assert_eq!(rc, 0, "openpty: {}", std::io::Error::last_os_error());
        let (mut ours, theirs) = unsafe {
            (
                std::fs::File::from_raw_fd(ours),
                OwnedFd::from_raw_fd(theirs),
            )
        };
        let shown = Arc::new(Mutex::new(Vec::new()));
        let into = shown.clone();
        std::thread::spawn(move || {
            let mut buf = [0u8; 8192];
            // Ends with EIO once no process holds the child's end.
            while let Ok(n @ 1..) = ours.read(&mut buf) {
                into.lock().unwrap().extend_from_slice(&buf[..n]);
            }
        });
        Terminal {
            child_end: Some(theirs),
            shown,
        }
    }

    /// The terminal as a child's stdin, stdout or stderr.
    fn stdio(&self) -> Stdio {
        let fd = self.child_end.as_ref().expect("open").try_clone().unwrap();
        Stdio::from(fd)
    }

    /// Close our copy of the child's end, once the children that use it are started.
    fn started(&mut self) {
        self.child_end = None;
    }

    fn shown(&self) -> String {
        String::from_utf8_lossy(&self.shown.lock().unwrap()).into_owned()
    }

    /// Wait until the terminal shows `needle`; panics with what it shows after `limit`.
    fn wait_for(&self, needle: &str, limit: Duration) -> String {
        let start = Instant::now();
        loop {
            let shown = self.shown();
            if shown.contains(needle) {
                return shown;
            }
            assert!(start.elapsed() < limit, "{needle:?} not shown: {shown:?}");
            std::thread::sleep(Duration::from_millis(20));
        }
    }
}

/// Wait for `child` to exit; kills it and panics after `limit`.
fn wait_exit(child: &mut Child, limit: Duration) -> std::process::ExitStatus {
    let start = Instant::now();
    loop {
        if let Some(status) = child.try_wait().unwrap() {
            return status;
        }
        if start.elapsed() > limit {
            let _ = child.kill();
            panic!("still running after {limit:?}");
        }
        std::thread::sleep(Duration::from_millis(20));
    }
}

/// A directory holding the test configuration (embedded simulator), and the paths of a
/// database and a log in it.
fn broker_files() -> (tempfile::TempDir, PathBuf, PathBuf, PathBuf) {
    let dir = tempfile::tempdir().unwrap();
    let config = dir.path().join("broker.toml");
    std::fs::write(&config, test_config(None)).unwrap();
    let (db, log) = (dir.path().join("broker.db"), dir.path().join("serve.log"));
    (dir, config, db, log)
}

/// `serve` with `config` and `db` on a free port, its log (RUST_LOG=info, NO_COLOR unset) to
/// `stderr`; returns the child and the base URL it printed.
fn serve(config: &Path, db: &Path, stderr: Stdio) -> (Child, String) {
    let mut child = Command::new(BIN)
        .args(["serve", "--listen", "127.0.0.1:0", "--config"])
        .arg(config)
        .arg("--db")
        .arg(db)
        .env("RUST_LOG", "info")
        .env_remove("NO_COLOR")
        .stdout(Stdio::piped())
        .stderr(stderr)
        .spawn()
        .unwrap();
    let mut line = String::new();
    BufReader::new(child.stdout.take().unwrap())
        .read_line(&mut line)
        .unwrap();
    let base = line.trim().rsplit(' ').next().unwrap().to_string();
    assert!(base.starts_with("http://"), "banner {line:?}");
    (child, base)
}

#[test]
fn the_log_is_coloured_on_a_terminal_and_plain_in_a_file() {
    let (_dir, config, db, log) = broker_files();
    let (mut to_file, _) = serve(
        &config,
        &db,
        Stdio::from(std::fs::File::create(&log).unwrap()),
    );
    let text = (0..250)
        .map(|_| {
            std::thread::sleep(Duration::from_millis(20));
            std::fs::read_to_string(&log).unwrap_or_default()
        })
        .find(|t| t.contains("mssbroker serving"))
        .expect("the start logged to the file");
    let _ = to_file.kill();
    let _ = to_file.wait();
    assert!(
        !text.contains('\u{1b}'),
        "escape sequences in the file: {text:?}"
    );

    let mut terminal = Terminal::open();
    let (mut on_terminal, _) = serve(&config, &db, terminal.stdio());
    terminal.started();
    let shown = terminal.wait_for("mssbroker serving", Duration::from_secs(10));
    let _ = on_terminal.kill();
    let _ = on_terminal.wait();
    assert!(
        shown.contains("\u{1b}["),
        "no colour on a terminal: {shown:?}"
    );
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn sigterm_and_sigint_leave_a_line_saying_the_broker_stopped_and_why() {
    for signal in ["TERM", "INT"] {
        let (_dir, config, db, log) = broker_files();
        let mut broker = ServeProcess::start_logged(&config, &db, &log);
        wait_for_text(&log, "mssbroker serving", Duration::from_secs(10)).await;
        broker.signal(signal);
        let status = wait_exit(&mut broker.child, Duration::from_secs(20));
        assert!(status.success(), "SIG{signal}: {status:?}");
        let text = std::fs::read_to_string(&log).unwrap();
        let last = text.lines().last().unwrap_or_default();
        assert!(
            last.contains("mssbroker stopped") && last.contains(&format!("SIG{signal}")),
            "SIG{signal}: the last line is {last:?}:\n{text}"
        );
    }
}

#[test]
fn a_second_serve_on_a_port_in_use_says_so_once_and_creates_and_starts_nothing() {
    let (dir, config, db, _) = broker_files();
    let (mut first, base) = serve(&config, &db, Stdio::null());
    let taken = base.trim_start_matches("http://");
    let second_db = dir.path().join("second").join("broker.db");
    let out = Command::new(BIN)
        .args(["serve", "--listen", taken, "--config"])
        .arg(&config)
        .arg("--db")
        .arg(&second_db)
        .env("RUST_LOG", "info")
        .output()
        .unwrap();
    let _ = first.kill();
    let _ = first.wait();
    let err = String::from_utf8_lossy(&out.stderr);
    assert_eq!(out.status.code(), Some(1), "{err}");
    // Linux's EADDRINUSE, as std writes it.
    assert_eq!(
        err.matches("(os error 98)").count(),
        1,
        "the OS error once: {err}"
    );
    assert!(
        err.contains(taken) && err.contains("server.listen"),
        "{err}"
    );
    assert!(
        !second_db.parent().unwrap().exists(),
        "a database was made before the bind failed: {err}"
    );
    assert!(
        !err.contains("simulator started"),
        "a simulator was started before the bind failed: {err}"
    );
}

#[test]
fn check_config_names_every_misspelt_key_with_its_line() {
    let shipped = std::fs::read_to_string(format!("{ROOT}/config/broker.toml")).unwrap();
    let misspelt = [
        ("listen = ", "lisen = "),
        ("commit_batch_max = ", "commit_bach_max = "),
        ("p_front = ", "p_frnt = "),
    ];
    let mut text = shipped.clone();
    for (right, wrong) in misspelt {
        assert!(
            text.contains(&format!("\n{right}")),
            "{right} in the shipped file"
        );
        text = text.replacen(&format!("\n{right}"), &format!("\n{wrong}"), 1);
    }
    let dir = tempfile::tempdir().unwrap();
    let file = dir.path().join("broker.toml");
    std::fs::write(&file, &text).unwrap();
    let err = crate::helpers::check_config_refusal(&file);
    for (_, wrong) in misspelt {
        let key = wrong.trim_end_matches(" = ");
        let line = 1 + text.lines().position(|l| l.starts_with(wrong)).unwrap();
        assert!(
            err.lines()
                .any(|l| l.contains(&format!(".{key}: unknown field `{key}`"))
                    && l.ends_with(&format!("(line {line})"))),
            "{key} at line {line}: {err}"
        );
    }
}

#[test]
fn trace_gen_without_out_refuses_a_terminal() {
    let mut terminal = Terminal::open();
    let mut child = Command::new(BIN)
        .args(["trace", "gen", "--params"])
        .arg(format!("{ROOT}/examples/traces/mixed.params.toml"))
        .stdout(terminal.stdio())
        .stderr(Stdio::piped())
        .spawn()
        .unwrap();
    terminal.started();
    let status = wait_exit(&mut child, Duration::from_secs(60));
    let mut err = String::new();
    child
        .stderr
        .take()
        .unwrap()
        .read_to_string(&mut err)
        .unwrap();
    assert_eq!(status.code(), Some(1), "{err}");
    assert!(err.contains("--out"), "{err}");
    assert!(
        !terminal.shown().contains("client_request_id"),
        "a trace was written to the terminal"
    );
}

/// The shell commands of README's ```sh blocks after the quick start's own (the one that
/// builds and runs the broker and the suite), in order, as one script.
fn readme_examples() -> String {
    let readme = std::fs::read_to_string(format!("{ROOT}/README.md")).unwrap();
    let mut blocks = Vec::new();
    let mut lines = readme.lines();
    while let Some(line) = lines.next() {
        if line.trim_end() == "```sh" {
            let block: Vec<&str> = lines
                .by_ref()
                .take_while(|l| !l.starts_with("```"))
                .collect();
            blocks.push(block.join("\n"));
        }
    }
    let quick_start = blocks
        .iter()
        .position(|b| b.contains("cargo run --release -- serve"))
        .expect("the quick start's block");
    blocks[quick_start + 1..].join("\n")
}

/// README's examples, pasted as they are into a shell in a checkout where `cargo run --release
/// -- serve` runs (its address's port aside: the test's broker listens on a free one), work:
/// every command exits 0. The shell has no `mssbroker` on its PATH and no token in its
/// environment but what README's commands put there.
#[test]
fn readme_examples_work_pasted_after_the_quick_start() {
    let script = readme_examples();
    assert!(script.contains("mssbroker submit"), "{script}");
    // A checkout as the quick start leaves it: config/, examples/, target/release/mssbroker.
    let checkout = tempfile::tempdir().unwrap();
    let at = checkout.path();
    for dir in ["config", "examples"] {
        std::os::unix::fs::symlink(format!("{ROOT}/{dir}"), at.join(dir)).unwrap();
    }
    std::fs::create_dir(at.join("target")).unwrap();
    let built = Path::new(BIN).parent().unwrap();
    std::os::unix::fs::symlink(built, at.join("target/release")).unwrap();
    // `cargo run --release -- serve`, on a free port.
    let mut serve = Command::new(BIN)
        .arg("serve")
        .current_dir(at)
        .env("MSSBROKER__SERVER__LISTEN", "127.0.0.1:0")
        .stdout(Stdio::piped())
        .stderr(Stdio::null())
        .spawn()
        .unwrap();
    let mut line = String::new();
    BufReader::new(serve.stdout.take().unwrap())
        .read_line(&mut line)
        .unwrap();
    let base = line.trim().rsplit(' ').next().unwrap().to_string();
    let addr = base.trim_start_matches("http://").to_string();
    let script = script
        .replace("localhost:8080", &addr)
        .replace("127.0.0.1:8080", &addr);
    let out = Command::new("sh")
        .args(["-e", "-x", "-c", &script])
        .current_dir(at)
        .env_clear()
        .env("PATH", "/usr/bin:/bin")
        .env("HOME", at)
        .env("MSSBROKER_URL", &base)
        .output()
        .unwrap();
    let _ = serve.kill();
    let _ = serve.wait();
    assert!(
        out.status.success(),
        "README's examples stopped at the last command below ({:?}):\n{}\n--- stdout:\n{}",
        out.status,
        String::from_utf8_lossy(&out.stderr),
        String::from_utf8_lossy(&out.stdout)
    );
    assert!(at.join("data/mssbroker.db").exists(), "serve's database");
}
