//! `bench ingest` on PostgreSQL: the server `--db` names holds a new database per round
//! (`CREATE DATABASE`, so the user needs CREATEDB; dropped after the round), the broker contends
//! for its leadership as `serve` does and is measured once it leads. The server's durability
//! settings are printed beside the figures: the comparison with SQLite (WAL,
//! `synchronous=FULL`) is fair only with `fsync=on` and `synchronous_commit=on`.

use anyhow::Context;
use tokio_postgres::Client;

use crate::database_url::DatabaseUrl;

/// A round's own database on the server.
pub(crate) struct RoundDatabase {
    server: DatabaseUrl,
    name: String,
    pub url: DatabaseUrl,
}

/// A client on `url`, its connection driven by a task of its own.
async fn connect(url: &DatabaseUrl) -> anyhow::Result<Client> {
    url.only_loopback()?;
    let (client, _driver) =
        (url.connect_async().await).with_context(|| format!("cannot connect to {url}"))?;
    Ok(client)
}

impl RoundDatabase {
    /// A new, empty database on `server` for round `round`.
    pub async fn create(server: &DatabaseUrl, round: usize) -> anyhow::Result<RoundDatabase> {
        let name = format!("mssbroker_bench_{}_{round}", std::process::id());
        let admin = connect(server).await?;
        for statement in ["DROP DATABASE IF EXISTS", "CREATE DATABASE"] {
            // One at a time: neither may run inside the transaction a batch would be.
            admin
                .batch_execute(&format!("{statement} {name}"))
                .await
                .with_context(|| format!("cannot create the database {name} on {server}"))?;
        }
        Ok(RoundDatabase {
            server: server.clone(),
            url: server.with_dbname(&name),
            name,
        })
    }

    /// Drop the round's database (the broker has stopped; any session left is ended).
    pub async fn drop_it(self) -> anyhow::Result<()> {
        let admin = connect(&self.server).await?;
        admin
            .batch_execute(&format!(
                "DROP DATABASE IF EXISTS {} WITH (FORCE)",
                self.name
            ))
            .await
            .with_context(|| format!("cannot drop the database {}", self.name))
    }
}

/// The server's version and durability settings, as one line.
pub(crate) async fn server_settings(server: &DatabaseUrl) -> anyhow::Result<String> {
    let client = connect(server).await?;
    let row = client
        .query_one(
            "SELECT current_setting('server_version'), current_setting('fsync'), \
             current_setting('synchronous_commit'), current_setting('full_page_writes'), \
             current_setting('wal_sync_method')",
            &[],
        )
        .await?;
    let get = |i: usize| row.try_get::<_, String>(i);
    Ok(format!(
        "postgresql: {server}, PostgreSQL {}, fsync={}, synchronous_commit={}, \
         full_page_writes={}, wal_sync_method={}",
        get(0)?,
        get(1)?,
        get(2)?,
        get(3)?,
        get(4)?
    ))
}
