//! The SQL of leadership: the lock, the `leader` row, the heartbeat, the fence.
//!
//! `leader` is created by the first broker to take office (under the lock, so never by two
//! at once); it is leadership's own table, outside the ledger's schema versions.

use tokio_postgres::{Client, GenericClient};

use super::{Identity, LOCK_KEY};

pub(crate) const CREATE: &str = "CREATE TABLE IF NOT EXISTS leader (
    only_row       BOOLEAN     PRIMARY KEY DEFAULT TRUE CHECK (only_row),
    epoch          BIGINT      NOT NULL,
    holder         TEXT        NOT NULL,
    advertised_url TEXT        NOT NULL,
    since          TIMESTAMPTZ NOT NULL
)";

/// A write transaction's first statement found another epoch (or none): it must abort.
#[derive(Debug, thiserror::Error)]
pub enum FenceError {
    #[error("fenced: this broker led at epoch {ours} but the database is at epoch {current}: it is a standby now and commits nothing")]
    Fenced { ours: i64, current: i64 },
    #[error("fenced: no broker has taken office on this database (no leader row)")]
    NoLeader,
    #[error("fencing: {0}")]
    Database(#[from] tokio_postgres::Error),
}

/// The first statement of every write transaction: the epoch, read `FOR SHARE` (held to the
/// transaction's end, so a new leader's increment waits for it), must be `epoch`.
pub async fn fence(tx: &impl GenericClient, epoch: i64) -> Result<(), FenceError> {
    let row = tx
        .query_opt("SELECT epoch FROM leader FOR SHARE", &[])
        .await
        .map_err(|e| match e.code() {
            Some(&tokio_postgres::error::SqlState::UNDEFINED_TABLE) => FenceError::NoLeader,
            _ => FenceError::Database(e),
        })?;
    let current: i64 = row.ok_or(FenceError::NoLeader)?.try_get(0)?;
    if current == epoch {
        Ok(())
    } else {
        Err(FenceError::Fenced {
            ours: epoch,
            current,
        })
    }
}

pub(super) async fn try_lock(client: &Client) -> Result<bool, tokio_postgres::Error> {
    let row = client
        .query_one("SELECT pg_try_advisory_lock($1)", &[&LOCK_KEY])
        .await?;
    row.try_get(0)
}

/// With the lock held: the next epoch, recorded with who holds it.
pub(super) async fn take(client: &Client, who: &Identity) -> Result<i64, tokio_postgres::Error> {
    client.batch_execute(CREATE).await?;
    let row = client
        .query_one(
            "INSERT INTO leader (only_row, epoch, holder, advertised_url, since)
             VALUES (TRUE, 1, $1, $2, now())
             ON CONFLICT (only_row) DO UPDATE SET epoch = leader.epoch + 1,
                 holder = EXCLUDED.holder, advertised_url = EXCLUDED.advertised_url,
                 since = EXCLUDED.since
             RETURNING epoch",
            &[&who.holder, &who.advertised_url],
        )
        .await?;
    row.try_get(0)
}

/// The lock still held by this session and the epoch still ours; else why not.
pub(super) async fn heartbeat(client: &Client, epoch: i64) -> Result<(), &'static str> {
    // pg_locks shows a bigint key as its high and low 32 bits (classid, objid), objsubid 1.
    let high = (LOCK_KEY >> 32) as u32;
    let low = LOCK_KEY as u32;
    let row = client
        .query_one(
            "SELECT (SELECT epoch FROM leader),
                    EXISTS (SELECT 1 FROM pg_locks WHERE locktype = 'advisory' AND granted
                            AND pid = pg_backend_pid() AND classid = $1 AND objid = $2
                            AND objsubid = 1)",
            &[&high, &low],
        )
        .await
        .map_err(|_| "the heartbeat failed")?;
    let current: Option<i64> = row.try_get(0).map_err(|_| "the heartbeat failed")?;
    let holding: bool = row.try_get(1).map_err(|_| "the heartbeat failed")?;
    match (holding, current) {
        (false, _) => Err("the lock is no longer held"),
        (true, Some(e)) if e == epoch => Ok(()),
        (true, _) => Err("the epoch moved on"),
    }
}

pub(super) async fn current(
    client: &impl GenericClient,
) -> Result<Option<(i64, String, String)>, tokio_postgres::Error> {
    let exists: bool = client
        .query_one("SELECT to_regclass('leader') IS NOT NULL", &[])
        .await?
        .try_get(0)?;
    if !exists {
        return Ok(None);
    }
    let row = client
        .query_opt("SELECT epoch, holder, advertised_url FROM leader", &[])
        .await?;
    row.map(|r| Ok((r.try_get(0)?, r.try_get(1)?, r.try_get(2)?)))
        .transpose()
}
