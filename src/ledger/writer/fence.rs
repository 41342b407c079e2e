//! The fence on PostgreSQL (docs/ha.md, "Group commit, fencing and the epoch"): the first
//! statement of every write transaction reads the `leader` row `FOR SHARE` (held to the
//! transaction's end, so a new leader's increment waits for it) and refuses the transaction
//! unless its epoch is the writer's. The writer's synchronous counterpart of
//! `leadership::fence`, with the same errors.

use crate::leadership::FenceError;
use crate::ledger::db::{params, Db, DbConn, DbError, DbResult, Tx};

/// PostgreSQL's SQLSTATE for a table that does not exist (no broker ever took office here).
const UNDEFINED_TABLE: &str = "42P01";

/// A write transaction on `conn`, its first statement the fence at `epoch` on PostgreSQL
/// (`None`: SQLite, whose lock file is the exclusion). Every write a term makes goes through
/// one: at load (`load_state`, the start's incarnation, the instance id), at a reload's install
/// and in `transact`; so a term deposed before any of them commits nothing of it.
pub(in crate::ledger) fn write_transaction(
    conn: &mut DbConn,
    epoch: Option<i64>,
) -> DbResult<Tx<'_>> {
    let tx = conn.transaction()?;
    if let Some(epoch) = epoch {
        fence(&tx, epoch)?;
    }
    Ok(tx)
}

/// The transaction `tx` may write at `epoch`: the `leader` row's epoch is `epoch`.
pub(super) fn fence(tx: &Db<'_>, epoch: i64) -> DbResult<()> {
    let current = tx.query_opt("SELECT epoch FROM leader FOR SHARE", params![], |r| {
        r.get::<i64>(0)
    });
    let fenced = |e: FenceError| Err(DbError::Fenced(e.to_string()));
    match current {
        Ok(Some(current)) if current == epoch => Ok(()),
        Ok(Some(current)) => fenced(FenceError::Fenced {
            ours: epoch,
            current,
        }),
        Ok(None) => fenced(FenceError::NoLeader),
        Err(DbError::Postgres(e)) if e.code().map(|c| c.code()) == Some(UNDEFINED_TABLE) => {
            fenced(FenceError::NoLeader)
        }
        Err(e) => Err(e),
    }
}
