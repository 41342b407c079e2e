//! The ledger's PostgreSQL backend (issue 42), being built: its schema and versioning
//! (`schema.rs`), the ledger's connection (`connect.rs`), the `?N` -> `$N` rewrite of its
//! statements (`placeholders.rs`), `Wide` as NUMERIC (`numeric.rs`), and the group-commit
//! forms measured for ingest (`ingest_form.rs`, run by `examples/pg_ingest.rs`). docs/ha.md
//! has the plan for the rest (the writer's transitions, the reads, group commit with the
//! leadership fence) and what is built.

use std::path::PathBuf;

use crate::database_url::DatabaseUrl;
use crate::ledger::db::DbConn;
use crate::ledger::LedgerError;

pub mod connect;
pub mod ingest_form;
pub mod numeric;
pub mod placeholders;
pub mod schema;

/// The ledger's connection to the PostgreSQL database at `url`, its schema created or migrated
/// to the latest version (`schema::migrate`): the counterpart of SQLite's `schema::open_writer`,
/// refusing what it refuses with the same errors. A newer schema is `LedgerError::SchemaTooNew`,
/// whose `path` is the URL as `DatabaseUrl` shows it (no password, no query), and nothing is
/// written; a host beyond loopback is refused before connecting (`connect.rs`).
pub fn open(url: &DatabaseUrl) -> Result<DbConn, LedgerError> {
    let at = || PathBuf::from(url.to_string());
    let open_err = |message: String| LedgerError::Open {
        path: at(),
        message,
    };
    let mut client = connect::connect(url).map_err(|e| open_err(e.to_string()))?;
    match schema::migrate(&mut client) {
        Ok(_) => Ok(DbConn::from_postgres(client)),
        Err(schema::PgSchemaError::SchemaTooNew { found, known }) => {
            Err(LedgerError::SchemaTooNew {
                path: at(),
                found,
                known,
            })
        }
        Err(e) => Err(open_err(e.to_string())),
    }
}

#[cfg(test)]
pub(crate) mod tests;
