//! The fence on PostgreSQL (docs/ha.md, "Group commit, fencing and the epoch"): the first
//! statement of every write transaction reads the `leader` row `FOR SHARE` (held to the
//! transaction's end, so a new leader's increment waits for it) and refuses the transaction
//! unless its epoch is the writer's. The writer's synchronous counterpart of
//! `leadership::fence`, with the same errors.

use crate::leadership::FenceError;
use crate::ledger::db::{DbConn, DbError, DbResult, Tx};

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
    let Some(epoch) = epoch else {
        return conn.transaction();
    };
    // Sent with the BEGIN on PostgreSQL: one round trip for both.
    let (tx, current) =
        (conn.transaction_reading("SELECT epoch FROM leader FOR SHARE")).map_err(unread)?;
    fence(current, epoch)?;
    Ok(tx)
}

/// The transaction may write at `epoch`: the `leader` row's epoch, as read under `FOR SHARE`
/// (`current`), is `epoch`.
fn fence(current: Option<i64>, epoch: i64) -> DbResult<()> {
    match current {
        Some(current) if current == epoch => Ok(()),
        Some(current) => Err(fenced(FenceError::Fenced {
            ours: epoch,
            current,
        })),
        None => Err(fenced(FenceError::NoLeader)),
    }
}

fn fenced(e: FenceError) -> DbError {
    DbError::Fenced(e.to_string())
}

/// Why the `leader` row could not be read: no `leader` table is no leader (no broker ever took
/// office here); anything else is the database's error.
fn unread(e: DbError) -> DbError {
    match e {
        DbError::Postgres(e) if e.code().map(|c| c.code()) == Some(UNDEFINED_TABLE) => {
            fenced(FenceError::NoLeader)
        }
        e => e,
    }
}
