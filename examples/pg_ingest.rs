//! The ingest form on PostgreSQL (issue 42; docs/ha.md, "The ingest form on PostgreSQL"): one
//! group commit of N new requests, written as the accept path writes them
//! (`mssbroker::ledger::postgres::ingest_form`), on the SQLite ledger with its own settings and
//! on PostgreSQL three ways, interleaved round by round in one sitting; rows/s for each.
//!
//!     cargo run --release --example pg_ingest -- [--sizes 1,64,1000] [--seconds 1.5]
//!         [--rounds 3] [--dir DIR]
//!
//! The PostgreSQL servers, both from the distribution's binaries (as pg-cluster finds them):
//! - "durable": a cluster made by `initdb` in DIR (default: the system's temporary directory,
//!   on disk beside the SQLite file), started with PostgreSQL's defaults: `fsync=on`,
//!   `synchronous_commit=on`, `full_page_writes=on`. This is the one to compare with SQLite,
//!   whose commit is `synchronous=FULL`;
//! - "pg-cluster": the tests' cluster as pg-cluster starts it (`fsync=off`, on /dev/shm when it
//!   has room): what a commit costs with no flush at all, an upper bound.
//!
//! Only the commit of a group is timed (building its rows is not).

use std::net::TcpListener;
use std::path::{Path, PathBuf};
use std::process::Command;
use std::time::{Duration, Instant};

use anyhow::{bail, Context, Result};
use mssbroker::bench::{command_line, machine};
use mssbroker::database_url::DatabaseUrl;
use mssbroker::ledger::postgres::connect::connect;
use mssbroker::ledger::postgres::ingest_form::{self, Form, Prepared, Row};
use mssbroker::ledger::postgres::schema;

struct Args {
    sizes: Vec<usize>,
    seconds: f64,
    rounds: usize,
    dir: PathBuf,
}

fn args() -> Result<Args> {
    let mut a = Args {
        sizes: vec![1, 64, 1000],
        seconds: 1.5,
        rounds: 3,
        dir: std::env::temp_dir(),
    };
    let mut it = std::env::args().skip(1);
    while let Some(flag) = it.next() {
        let value = it.next().with_context(|| format!("{flag} needs a value"))?;
        match flag.as_str() {
            "--sizes" => {
                a.sizes = (value.split(','))
                    .map(|s| s.parse().with_context(|| format!("--sizes: `{s}`")))
                    .collect::<Result<_>>()?
            }
            "--seconds" => a.seconds = value.parse().context("--seconds")?,
            "--rounds" => a.rounds = value.parse().context("--rounds")?,
            "--dir" => a.dir = value.into(),
            other => bail!("unknown option {other} (--sizes, --seconds, --rounds, --dir)"),
        }
    }
    if a.sizes.contains(&0) || a.rounds == 0 || a.seconds <= 0.0 {
        bail!("--sizes, --rounds and --seconds must be positive");
    }
    Ok(a)
}

/// A PostgreSQL cluster made by `initdb` in a directory of its own, with the server's
/// durability defaults; stopped when dropped.
struct DurableServer {
    dir: tempfile::TempDir,
    bindir: PathBuf,
    user: Option<&'static str>,
    port: u16,
}

impl DurableServer {
    fn start(parent: &Path) -> Result<DurableServer> {
        let bindir = pg_cluster::find_bindir().context("no PostgreSQL binaries (initdb)")?;
        let dir = tempfile::Builder::new()
            .prefix("pg-ingest-")
            .tempdir_in(parent)
            .context("a directory")?;
        // initdb and postgres refuse to run as root.
        let user = (unsafe { libc::geteuid() } == 0).then(server_user);
        if let Some(user) = user {
            run(Command::new("chown").arg(user).arg(dir.path()))?;
        }
        let port = TcpListener::bind("127.0.0.1:0")?.local_addr()?.port();
        let server = DurableServer {
            dir,
            bindir,
            user,
            port,
        };
        let data = server.data();
        run(server
            .command("initdb")
            .args(["-U", "postgres", "--auth=trust", "-E", "UTF8", "-D"])
            .arg(&data))?;
        let options = format!(
            "-p {port} -k {} -c listen_addresses=127.0.0.1",
            server.dir.path().display()
        );
        run(server
            .command("pg_ctl")
            .args(["start", "-w", "-s", "-o", &options, "-l"])
            .arg(server.dir.path().join("log"))
            .arg("-D")
            .arg(&data))?;
        Ok(server)
    }

    fn data(&self) -> PathBuf {
        self.dir.path().join("data")
    }

    fn url(&self) -> String {
        format!("postgresql://postgres@127.0.0.1:{}/postgres", self.port)
    }

    fn command(&self, program: &str) -> Command {
        let path = self.bindir.join(program);
        match self.user {
            Some(user) => {
                let mut c = Command::new("runuser");
                c.args(["-u", user, "--"]).arg(path);
                c
            }
            None => Command::new(path),
        }
    }
}

impl Drop for DurableServer {
    fn drop(&mut self) {
        let data = self.data();
        let _ = run(self
            .command("pg_ctl")
            .args(["stop", "-w", "-s", "-m", "fast", "-D"])
            .arg(data));
    }
}

/// The Debian package's `postgres`, else `nobody` (as pg-cluster runs the server).
fn server_user() -> &'static str {
    let has_postgres = Command::new("id")
        .args(["-u", "postgres"])
        .output()
        .is_ok_and(|o| o.status.success());
    if has_postgres {
        "postgres"
    } else {
        "nobody"
    }
}

fn run(c: &mut Command) -> Result<()> {
    let out = c.output().with_context(|| format!("running {c:?}"))?;
    if !out.status.success() {
        bail!(
            "{c:?} failed: {}{}",
            String::from_utf8_lossy(&out.stdout),
            String::from_utf8_lossy(&out.stderr)
        );
    }
    Ok(())
}

/// Where a group goes.
enum Target {
    Sqlite(rusqlite::Connection),
    Pg {
        client: Box<postgres::Client>,
        prepared: Prepared,
        form: Form,
    },
}

impl Target {
    fn write(&mut self, rows: &[Row]) -> Result<usize> {
        let ids = match self {
            Target::Sqlite(conn) => ingest_form::sqlite_group(conn, rows)?,
            Target::Pg {
                client,
                prepared,
                form,
            } => ingest_form::pg_group(client, prepared, *form, rows)?,
        };
        Ok(ids.len())
    }
}

fn pg_target(url: &str, form: Form) -> Result<Target> {
    let url = DatabaseUrl::parse(url)?;
    let mut client = connect(&url)?;
    let fresh: bool = client
        .query_one("SELECT to_regclass('requests') IS NULL", &[])?
        .get(0);
    if fresh {
        client.batch_execute(schema::SCHEMA)?;
    }
    let prepared = Prepared::new(&mut client)?;
    Ok(Target::Pg {
        client: Box::new(client),
        prepared,
        form,
    })
}

/// Rows written and the time their commits took, and each commit's time.
#[derive(Default)]
struct Tally {
    rows: usize,
    busy: Duration,
    commits: Vec<Duration>,
}

impl Tally {
    fn rate(&self) -> f64 {
        self.rows as f64 / self.busy.as_secs_f64().max(1e-9)
    }

    fn median_ms(&mut self) -> f64 {
        self.commits.sort_unstable();
        self.commits
            .get(self.commits.len() / 2)
            .map_or(0.0, |d| d.as_secs_f64() * 1000.0)
    }
}

fn settings(url: &str) -> Result<String> {
    let mut c = connect(&DatabaseUrl::parse(url)?)?;
    let r = c.query_one(
        "SELECT current_setting('server_version'), current_setting('fsync'), \
         current_setting('synchronous_commit'), current_setting('full_page_writes'), \
         current_setting('wal_sync_method'), current_setting('data_directory')",
        &[],
    )?;
    Ok(format!(
        "PostgreSQL {}, fsync={}, synchronous_commit={}, full_page_writes={}, wal_sync_method={}, data in {}",
        r.get::<_, String>(0),
        r.get::<_, String>(1),
        r.get::<_, String>(2),
        r.get::<_, String>(3),
        r.get::<_, String>(4),
        r.get::<_, String>(5)
    ))
}

fn main() -> Result<()> {
    let a = args()?;
    println!("{}", command_line());
    println!("{}", machine());
    let durable = DurableServer::start(&a.dir)?;
    let cluster = pg_cluster::Cluster::start()?;
    let sqlite_dir = tempfile::tempdir_in(&a.dir)?;
    let sqlite_path = sqlite_dir.path().join("ledger.db");
    println!("durable: {}", settings(&durable.url())?);
    println!("pg-cluster: {}", settings(&cluster.url())?);
    println!(
        "sqlite: {} (the ledger's writer settings: WAL, synchronous=FULL)",
        sqlite_path.display()
    );

    let mut targets: Vec<(String, Target)> = vec![(
        "SQLite (WAL, synchronous=FULL)".into(),
        Target::Sqlite(ingest_form::open_sqlite(&sqlite_path)?),
    )];
    for (server, url) in [("durable", durable.url()), ("pg-cluster", cluster.url())] {
        for form in Form::ALL {
            let name = format!("PostgreSQL {server}: {}", form.name());
            targets.push((name, pg_target(&url, form)?));
        }
    }

    let now_ms = jiff::Timestamp::now().as_millisecond();
    let mut next = 0u64;
    println!();
    println!("| N | target | rows/s | x SQLite | median commit (ms) | commits |");
    println!("| ---: | --- | ---: | ---: | ---: | ---: |");
    for &n in &a.sizes {
        let mut tallies: Vec<Tally> = targets.iter().map(|_| Tally::default()).collect();
        let per_round = Duration::from_secs_f64(a.seconds);
        for _ in 0..a.rounds {
            for ((_, target), tally) in targets.iter_mut().zip(&mut tallies) {
                let began = Instant::now();
                while began.elapsed() < per_round {
                    let rows: Vec<Row> = (next..next + n as u64)
                        .map(|i| Row::sample(i, now_ms))
                        .collect();
                    next += n as u64;
                    let t = Instant::now();
                    tally.rows += target.write(&rows)?;
                    let took = t.elapsed();
                    tally.busy += took;
                    tally.commits.push(took);
                }
            }
        }
        let sqlite = tallies[0].rate();
        for ((name, _), tally) in targets.iter().zip(&mut tallies) {
            println!(
                "| {n} | {name} | {:.0} | {:.2} | {:.2} | {} |",
                tally.rate(),
                tally.rate() / sqlite,
                tally.median_ms(),
                tally.commits.len()
            );
        }
    }
    Ok(())
}
