//! A throwaway PostgreSQL cluster for tests (issue 42): the distribution's `initdb` into a
//! temporary directory, `postgres` on a free port of 127.0.0.1 with its unix socket in that
//! directory, trust authentication for the superuser `postgres`; stopped (`-m immediate`) and
//! the directory removed when dropped.
//!
//! A crate of its own, a dev-dependency only: the broker's unit tests (`leadership`, the
//! PostgreSQL schema) and its integration tests start clusters alike, and a `#[cfg(test)]`
//! module of the library is not visible to `tests/`; as a dev-dependency it is never in the
//! product.
//!
//! `initdb` takes over a second, so a process makes one template data directory (per
//! PostgreSQL build, shared by later processes) and each cluster starts from a copy of it
//! (`cp -a`, then `pg_ctl start -w`: well under a second). Both live in /dev/shm when it is
//! there with 1 GB free (a copy to the disk of a machine busy building took 2-3 s; to tmpfs 0.1 s), else in the
//! system's temporary directory; WAL segments of 1 MB keep a cluster near 12 MB.
//!
//! `initdb` and `postgres` refuse to run as root: as root, they run as the user `postgres`
//! (the Debian package's) or else `nobody`, through `runuser`, on directories chowned to it.

use std::net::TcpListener;
use std::path::{Path, PathBuf};
use std::process::{Command, Output};
use std::sync::OnceLock;
use std::time::{Duration, Instant};

mod binaries;

pub use binaries::find_bindir;

/// What went wrong starting or driving a cluster (each names the command and its output).
#[derive(Debug, thiserror::Error)]
pub enum ClusterError {
    #[error("no PostgreSQL server binaries (initdb, pg_ctl, postgres) on PATH, in `pg_config --bindir` or /usr/lib/postgresql/*/bin: install the `postgresql` package (scripts/test does)")]
    NoBinaries,
    #[error("running {command}: {source}")]
    Spawn {
        command: String,
        source: std::io::Error,
    },
    #[error("{command} failed ({status}): {output}")]
    Failed {
        command: String,
        status: String,
        output: String,
    },
    #[error("{what}: {source}")]
    Io {
        what: String,
        source: std::io::Error,
    },
}

/// The unprivileged user the server runs as, when we are root.
#[derive(Debug, Clone)]
struct RunAs {
    name: String,
    uid: u32,
    gid: u32,
}

/// A running (or stopped) throwaway cluster; dropped: stopped and removed.
#[derive(Debug)]
pub struct Cluster {
    dir: tempfile::TempDir,
    bindir: PathBuf,
    run_as: Option<RunAs>,
    port: u16,
    started_in: Duration,
}

impl Cluster {
    /// A new cluster, started and accepting connections.
    pub fn start() -> Result<Cluster, ClusterError> {
        let began = Instant::now();
        let (bindir, run_as) = setting()?;
        let template = template(&bindir, run_as.as_ref())?;
        let dir = tempfile::Builder::new()
            .prefix("pg-cluster-")
            .tempdir_in(scratch())
            .map_err(|source| io("a temporary directory", source))?;
        hand_over(dir.path(), run_as.as_ref())?;
        let data = dir.path().join("data");
        run(Command::new("cp").arg("-a").arg(template).arg(&data))?;
        let mut cluster = Cluster {
            dir,
            bindir,
            run_as,
            port: 0,
            started_in: Duration::ZERO,
        };
        cluster.start_on_a_free_port()?;
        cluster.started_in = began.elapsed();
        Ok(cluster)
    }

    /// A libpq URL for the superuser over TCP: `postgresql://postgres@127.0.0.1:PORT/postgres`.
    pub fn url(&self) -> String {
        format!("postgresql://postgres@127.0.0.1:{}/postgres", self.port)
    }

    /// The same database through the unix socket, as libpq key=value settings.
    pub fn socket_settings(&self) -> String {
        format!(
            "host={} port={} user=postgres dbname=postgres",
            self.dir.path().display(),
            self.port
        )
    }

    /// The directory of the server's unix socket.
    pub fn socket_dir(&self) -> &Path {
        self.dir.path()
    }

    pub fn port(&self) -> u16 {
        self.port
    }

    /// How long `start` took, from looking for the binaries to accepting connections.
    pub fn started_in(&self) -> Duration {
        self.started_in
    }

    /// Stop at once (`pg_ctl stop -m immediate`): every backend killed, no checkpoint; the
    /// next start recovers from the WAL, as after a crash.
    /// Returns once the server process has exited (pg_ctl returns when its pid file is gone,
    /// a moment before).
    pub fn stop_immediately(&self) -> Result<(), ClusterError> {
        let data = self.data();
        let pid = server_pid(&data);
        run(self
            .as_server(&self.bindir.join("pg_ctl"))
            .args(["stop", "-w", "-s", "-m", "immediate", "-D"])
            .arg(&data))?;
        if let Some(pid) = pid {
            wait_gone(&pid);
        }
        Ok(())
    }

    /// Start again after `stop_immediately`, on the same port.
    pub fn start_again(&self) -> Result<(), ClusterError> {
        self.pg_ctl_start()
    }

    /// Serve TLS from now on with this certificate (chain) and key, both PEM, and accept TCP
    /// connections only over TLS (`hostssl` in `pg_hba.conf`; the unix socket stays plain):
    /// the files are written into the data directory for the server's user, `ssl = on` is set
    /// and the configuration reloaded.
    pub fn serve_tls(&self, cert_pem: &str, key_pem: &str) -> Result<(), ClusterError> {
        let data = self.data();
        for (name, pem) in [("server.crt", cert_pem), ("server.key", key_pem)] {
            let path = data.join(name);
            std::fs::write(&path, pem).map_err(|source| io(&format!("writing {name}"), source))?;
            std::fs::set_permissions(&path, std::os::unix::fs::PermissionsExt::from_mode(0o600))
                .map_err(|source| io(&format!("chmod {name}"), source))?;
            hand_over(&path, self.run_as.as_ref())?;
        }
        let hba = "local all all trust\nhostssl all all 127.0.0.1/32 trust\nhostssl all all ::1/128 trust\n";
        let hba_path = data.join("pg_hba.conf");
        std::fs::write(&hba_path, hba).map_err(|source| io("writing pg_hba.conf", source))?;
        hand_over(&hba_path, self.run_as.as_ref())?;
        self.psql("ALTER SYSTEM SET ssl = on")?;
        self.psql("SELECT pg_reload_conf()")?;
        // The reload is asynchronous: wait until a new session sees it.
        let deadline = Instant::now() + Duration::from_secs(10);
        while self.psql("SHOW ssl")? != "on" {
            if Instant::now() > deadline {
                return Err(self.with_log(ClusterError::Failed {
                    command: "ALTER SYSTEM SET ssl = on".to_string(),
                    status: "not on after 10 s".to_string(),
                    output: String::new(),
                }));
            }
            std::thread::sleep(Duration::from_millis(20));
        }
        Ok(())
    }

    /// Run SQL through `psql` (as the superuser, over the socket); its output, unaligned.
    pub fn psql(&self, sql: &str) -> Result<String, ClusterError> {
        let out = run(Command::new("psql")
            .args(["-X", "-q", "-A", "-t", "-v", "ON_ERROR_STOP=1", "-c", sql])
            .arg(self.socket_settings()))?;
        Ok(String::from_utf8_lossy(&out.stdout).trim().to_string())
    }

    fn data(&self) -> PathBuf {
        self.dir.path().join("data")
    }

    /// A command run as the server's user.
    fn as_server(&self, program: &Path) -> Command {
        as_user(self.run_as.as_ref(), program)
    }

    fn start_on_a_free_port(&mut self) -> Result<(), ClusterError> {
        // A port free a moment ago can be taken before the server binds it: try a few.
        let mut last = None;
        for _ in 0..5 {
            self.port = free_port()?;
            match self.pg_ctl_start() {
                Ok(()) => return Ok(()),
                Err(e) => last = Some(e),
            }
        }
        Err(last.unwrap_or(ClusterError::NoBinaries))
    }

    fn pg_ctl_start(&self) -> Result<(), ClusterError> {
        let options = format!(
            "-p {} -k {} -c listen_addresses=127.0.0.1 -c fsync=off -c full_page_writes=off",
            self.port,
            self.dir.path().display()
        );
        run(self
            .as_server(&self.bindir.join("pg_ctl"))
            .args(["start", "-w", "-s", "-t", "30", "-D"])
            .arg(self.data())
            .arg("-l")
            .arg(self.dir.path().join("server.log"))
            .arg("-o")
            .arg(options))
        .map_err(|e| self.with_log(e))
        .map(drop)
    }

    /// The error with the server's log appended (why it did not start).
    fn with_log(&self, e: ClusterError) -> ClusterError {
        let log = std::fs::read_to_string(self.dir.path().join("server.log")).unwrap_or_default();
        match e {
            ClusterError::Failed {
                command,
                status,
                output,
            } => ClusterError::Failed {
                command,
                status,
                output: format!("{output}\nserver log:\n{log}"),
            },
            other => other,
        }
    }
}

impl Drop for Cluster {
    fn drop(&mut self) {
        // A stopped cluster answers with an error: nothing to do then.
        let _ = self.stop_immediately();
    }
}

/// The postmaster's pid, from its pid file (None: not running).
fn server_pid(data: &Path) -> Option<String> {
    let text = std::fs::read_to_string(data.join("postmaster.pid")).ok()?;
    Some(text.lines().next()?.trim().to_string())
}

/// Wait (up to 10 s) until process `pid` has exited: gone from /proc, or a zombie.
fn wait_gone(pid: &str) {
    let stat = Path::new("/proc").join(pid).join("stat");
    let deadline = Instant::now() + Duration::from_secs(10);
    while Instant::now() < deadline {
        match std::fs::read_to_string(&stat) {
            // The state follows the command's closing parenthesis.
            Ok(s)
                if !s
                    .rsplit_once(')')
                    .is_some_and(|(_, r)| r.trim_start().starts_with('Z')) =>
            {
                std::thread::sleep(Duration::from_millis(2));
            }
            _ => return,
        }
    }
}

fn io(what: &str, source: std::io::Error) -> ClusterError {
    ClusterError::Io {
        what: what.to_string(),
        source,
    }
}

/// Run a command to completion; an error unless it exits 0.
fn run(command: &mut Command) -> Result<Output, ClusterError> {
    let name = format!("{command:?}");
    let out = command.output().map_err(|source| ClusterError::Spawn {
        command: name.clone(),
        source,
    })?;
    if out.status.success() {
        return Ok(out);
    }
    Err(ClusterError::Failed {
        command: name,
        status: out.status.to_string(),
        output: format!(
            "{}{}",
            String::from_utf8_lossy(&out.stdout),
            String::from_utf8_lossy(&out.stderr)
        ),
    })
}

fn as_user(run_as: Option<&RunAs>, program: &Path) -> Command {
    match run_as {
        Some(user) => {
            let mut c = Command::new("runuser");
            c.args(["-u", &user.name, "--"]).arg(program);
            c
        }
        None => Command::new(program),
    }
}

/// A port of 127.0.0.1 free at the moment of asking.
fn free_port() -> Result<u16, ClusterError> {
    let listener =
        TcpListener::bind("127.0.0.1:0").map_err(|source| io("binding a free port", source))?;
    let port = listener
        .local_addr()
        .map_err(|source| io("reading the free port", source))?
        .port();
    Ok(port)
}

/// The binaries and the user to run them as, found once per process.
fn setting() -> Result<(PathBuf, Option<RunAs>), ClusterError> {
    static FOUND: OnceLock<Result<(PathBuf, Option<RunAs>), String>> = OnceLock::new();
    FOUND
        .get_or_init(|| {
            let bindir = find_bindir().ok_or(ClusterError::NoBinaries);
            bindir
                .and_then(|b| Ok((b, run_as()?)))
                .map_err(|e| e.to_string())
        })
        .clone()
        .map_err(|output| ClusterError::Failed {
            command: "looking for the binaries and the user to run them as".to_string(),
            status: "failed".to_string(),
            output,
        })
}

/// As root: the user to run the server as (`postgres`, else `nobody`); otherwise none.
fn run_as() -> Result<Option<RunAs>, ClusterError> {
    let me = run(Command::new("id").arg("-u"))?;
    if String::from_utf8_lossy(&me.stdout).trim() != "0" {
        return Ok(None);
    }
    for name in ["postgres", "nobody"] {
        let (Ok(uid), Ok(gid)) = (id_of(name, "-u"), id_of(name, "-g")) else {
            continue;
        };
        return Ok(Some(RunAs {
            name: name.to_string(),
            uid,
            gid,
        }));
    }
    Err(ClusterError::Failed {
        command: "id postgres / id nobody".to_string(),
        status: "no such user".to_string(),
        output: "running as root, and neither `postgres` nor `nobody` exists to run the server as"
            .to_string(),
    })
}

fn id_of(name: &str, flag: &str) -> Result<u32, ClusterError> {
    let out = run(Command::new("id").arg(flag).arg(name))?;
    String::from_utf8_lossy(&out.stdout)
        .trim()
        .parse()
        .map_err(|_| ClusterError::Failed {
            command: format!("id {flag} {name}"),
            status: "unreadable".to_string(),
            output: String::from_utf8_lossy(&out.stdout).to_string(),
        })
}

/// Where clusters and templates live: /dev/shm (tmpfs) if it is writable and has room (a
/// container's is often 64 MB), else the temporary directory.
fn scratch() -> PathBuf {
    let shm = PathBuf::from("/dev/shm");
    if free_bytes(&shm).is_some_and(|free| free >= SHM_NEEDED) {
        shm
    } else {
        std::env::temp_dir()
    }
}

/// Room /dev/shm must have: the template and a handful of clusters (each about 30 MB).
const SHM_NEEDED: u64 = 1 << 30;

/// The bytes an unprivileged user may still write under `dir`, if it is a writable directory.
fn free_bytes(dir: &Path) -> Option<u64> {
    use std::os::unix::ffi::OsStrExt;
    let path = std::ffi::CString::new(dir.as_os_str().as_bytes()).ok()?;
    // SAFETY: `path` is a NUL-terminated string and `stat` a zeroed struct statvfs that
    // statvfs fills; access only reads the path.
    let mut stat: libc::statvfs = unsafe { std::mem::zeroed() };
    if unsafe { libc::statvfs(path.as_ptr(), &mut stat) } != 0 {
        return None;
    }
    if unsafe { libc::access(path.as_ptr(), libc::W_OK) } != 0 {
        return None;
    }
    #[allow(clippy::useless_conversion)] // u32 on some targets
    Some(u64::from(stat.f_bavail).saturating_mul(u64::from(stat.f_frsize)))
}

/// Give a directory to the server's user.
fn hand_over(dir: &Path, run_as: Option<&RunAs>) -> Result<(), ClusterError> {
    if let Some(user) = run_as {
        std::os::unix::fs::chown(dir, Some(user.uid), Some(user.gid))
            .map_err(|source| io(&format!("chown {}", dir.display()), source))?;
    }
    Ok(())
}

/// The template data directory for this PostgreSQL build and user, made by `initdb` once
/// (shared by later processes: it is only copied, never started).
fn template(bindir: &Path, run_as: Option<&RunAs>) -> Result<PathBuf, ClusterError> {
    static TEMPLATE: OnceLock<Result<PathBuf, String>> = OnceLock::new();
    TEMPLATE
        .get_or_init(|| make_template(bindir, run_as).map_err(|e| e.to_string()))
        .clone()
        .map_err(|output| ClusterError::Failed {
            command: "initdb (the template)".to_string(),
            status: "failed".to_string(),
            output,
        })
}

fn make_template(bindir: &Path, run_as: Option<&RunAs>) -> Result<PathBuf, ClusterError> {
    let version = run(Command::new(bindir.join("postgres")).arg("--version"))?;
    let key: String = format!(
        "{}-{}-{}",
        String::from_utf8_lossy(&version.stdout).trim(),
        bindir.display(),
        run_as.map_or("self", |u| u.name.as_str())
    )
    .chars()
    .map(|c| if c.is_ascii_alphanumeric() { c } else { '_' })
    .collect();
    let root = scratch().join("pg-cluster-templates");
    let done = root.join(&key);
    if done.join("data").join("PG_VERSION").exists() {
        return Ok(done.join("data"));
    }
    std::fs::create_dir_all(&root).map_err(|source| io("the templates' directory", source))?;
    // Made aside and renamed into place: a concurrent maker's rename wins, ours is dropped.
    let building = tempfile::Builder::new()
        .prefix("building-")
        .tempdir_in(&root)
        .map_err(|source| io("a template directory", source))?;
    hand_over(building.path(), run_as)?;
    run(as_user(run_as, &bindir.join("initdb"))
        .args([
            "-U",
            "postgres",
            "--auth=trust",
            "--no-sync",
            "--no-instructions",
            "-E",
            "UTF8",
            "--locale=C",
            "--wal-segsize=1",
            "-D",
        ])
        .arg(building.path().join("data")))?;
    let made = building.keep();
    if std::fs::rename(&made, &done).is_err() {
        // Another process's template is there already.
        let _ = std::fs::remove_dir_all(&made);
    }
    Ok(done.join("data"))
}
