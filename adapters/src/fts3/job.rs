//! The job FTS3 is asked for: its deterministic id (FTS3's own derivation) and the body of
//! `POST /jobs`: pure.

use serde_json::{json, Value};

use super::config::Fts3Config;
use crate::protocol::{Direction, Transfer};
use crate::MssError;

/// FTS3's base for deterministic job ids (`fts3rest.lib.JobBuilder_utils.BASE_ID`).
pub const BASE_ID: uuid::Uuid = uuid::uuid!("01874efb-4735-4595-bc9c-591aef8240c9");

/// FTS3's `vos_id` of a VO: `uuid5(BASE_ID, vo)` (fts-rest-flask `JobBuilder_utils.get_vo_id`).
pub fn vo_id(vo: &str) -> uuid::Uuid {
    uuid::Uuid::new_v5(&BASE_ID, vo.as_bytes())
}

/// The deterministic FTS3 job id of a submission id: `uuid5(uuid5(BASE_ID, vo), sid)`.
pub fn job_id(vo: &str, sid: &str) -> String {
    job_id_in(&vo_id(vo), sid)
}

/// The deterministic FTS3 job id of a submission id under a VO id from `GET /whoami`.
pub fn job_id_in(vo_id: &uuid::Uuid, sid: &str) -> String {
    uuid::Uuid::new_v5(vo_id, sid.as_bytes()).to_string()
}

/// What FTS3's 409 means: our own sid again (the job exists: recover it), or "The submission
/// is duplicated" (its files clash with another job: fts-rest-flask `controllers/jobs.py`).
pub fn conflict_is_ours(message: &str) -> bool {
    !message.contains("submission is duplicated")
}

/// The body of `POST /jobs` for a transfer.
pub fn job_body(cfg: &Fts3Config, sid: &str, level: i64, t: &Transfer) -> Result<Value, MssError> {
    let tape = format!("{}{}", cfg.tape_endpoint, t.file);
    let (source, destination) = match t.direction {
        Direction::Read => {
            let dest = match (&t.local_file, &cfg.read_destination) {
                (Some(f), _) => f.clone(),
                (None, Some(prefix)) => format!("{prefix}{}", t.file),
                (None, None) => {
                    return Err(MssError::Rejected(
                        "a read needs local_file (its destination URL): \
                         mss.fts3.read_destination is not set"
                            .into(),
                    ))
                }
            };
            (tape, dest)
        }
        Direction::Write => match &t.local_file {
            Some(src) => (src.clone(), tape),
            None => {
                return Err(MssError::Rejected(
                    "a write needs local_file (the URL of the file to store)".into(),
                ))
            }
        },
    };
    let metadata = json!({"mssbroker_key": t.key, "attempt": t.attempt});
    let mut params = json!({
        "priority": level,
        "id_generator": "deterministic",
        "sid": sid,
        // -1: no retries at FTS3 (0 would be the server's default); the broker retries.
        "retry": -1,
        "job_metadata": metadata,
    });
    match t.direction {
        Direction::Read if cfg.bring_online > 0 => {
            params["bring_online"] = json!(cfg.bring_online);
            params["copy_pin_lifetime"] = json!(cfg.copy_pin_lifetime);
        }
        Direction::Write if cfg.archive_timeout > 0 => {
            params["archive_timeout"] = json!(cfg.archive_timeout);
        }
        _ => {}
    }
    let mut file = json!({
        "sources": [source],
        "destinations": [destination],
        "filesize": t.size_bytes,
        "metadata": metadata,
    });
    if let Some(activity) = &cfg.activity {
        file["activity"] = json!(activity);
    }
    Ok(json!({"files": [file], "params": params}))
}
