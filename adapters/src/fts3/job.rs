//! The job FTS3 is asked for: its deterministic id (FTS3's own derivation) and the body of
//! `POST /jobs`: pure.

use serde_json::{json, Value};

use super::config::Fts3Config;
use crate::protocol::{Direction, Transfer};
use crate::{MssError, ReadOutput};

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

/// FTS3's `dest_surl_uuid` of a file's destination URL, unique among the files that have not
/// ended when the VO checks duplicates: `uuid5(BASE_ID, urlparse(destination.strip()).geturl())`
/// (fts-rest-flask `lib/JobBuilder.py` `_populate_files`; `geturl` gives the scheme lower-cased).
pub fn dest_surl_uuid(destination: &str) -> uuid::Uuid {
    let url = destination.trim();
    let url = match url.split_once("://") {
        Some((scheme, rest)) => format!("{}://{rest}", scheme.to_ascii_lowercase()),
        None => url.to_string(),
    };
    uuid::Uuid::new_v5(&BASE_ID, url.as_bytes())
}

/// What FTS3's 409 means: our own sid again (the job exists: recover it), or "The submission
/// is duplicated" (a file's destination is held by a file not ended yet, of another job or of
/// this one: fts-rest-flask `controllers/jobs.py` `submit`, the `IntegrityError` of the files'
/// insertion; the transaction is rolled back, so nothing was made).
pub fn conflict_is_ours(message: &str) -> bool {
    !message.contains("submission is duplicated")
}

/// Which of these destinations (by position) a 409 "The submission is duplicated" names: the
/// database's message quotes the `dest_surl_uuid` that broke the unique key (MySQL's
/// "Duplicate entry '<uuid>' for key ...", PostgreSQL's "Key (dest_surl_uuid)=(<uuid>)").
/// Empty when it names none of them.
pub fn clashing(message: &str, destinations: &[&str]) -> Vec<usize> {
    let message = message.to_ascii_lowercase();
    (destinations.iter().enumerate())
        .filter(|(_, d)| message.contains(&dest_surl_uuid(d).to_string()))
        .map(|(i, _)| i)
        .collect()
}

/// The transfers of one job (positions with their destinations) as jobs in which no two files
/// go to one destination, since FTS3 refuses a whole job whose files clash with each other
/// (`dest_surl_uuid` under `CheckDuplicates`): the first to each destination stay together,
/// in order; a second to a destination goes in the next job, and so on.
pub fn apart_by_destination(items: &[(usize, String)]) -> Vec<Vec<usize>> {
    let mut jobs: Vec<(std::collections::HashSet<&str>, Vec<usize>)> = Vec::new();
    for (pos, dest) in items {
        match jobs
            .iter_mut()
            .find(|(dests, _)| !dests.contains(dest.as_str()))
        {
            Some((dests, job)) => {
                dests.insert(dest);
                job.push(*pos);
            }
            None => jobs.push(([dest.as_str()].into(), vec![*pos])),
        }
    }
    jobs.into_iter().map(|(_, job)| job).collect()
}

/// The body of `POST /jobs` for one transfer.
pub fn job_body(cfg: &Fts3Config, sid: &str, level: i64, t: &Transfer) -> Result<Value, MssError> {
    let file = file_entry(cfg, t)?;
    let metadata = json!({"mssbroker_key": t.key, "attempt": t.attempt});
    Ok(json!({"files": [file], "params": params(cfg, sid, level, t.direction, metadata)}))
}

/// The body of `POST /jobs` for several transfers of one direction in one job (a volume's
/// batch: one bring-online request for all of them at FTS3), `files` in the order given, each
/// file's `metadata` naming its transfer. The job's metadata names its first transfer, whose
/// key and attempt make the `sid`, and how many files it holds.
pub fn batch_body(
    cfg: &Fts3Config,
    sid: &str,
    level: i64,
    files: Vec<Value>,
    first: &Transfer,
) -> Value {
    let metadata =
        json!({"mssbroker_key": first.key, "attempt": first.attempt, "files": files.len()});
    json!({"files": files, "params": params(cfg, sid, level, first.direction, metadata)})
}

/// One transfer as an entry of a job's `files`, or why FTS3 cannot be asked for it.
pub fn file_entry(cfg: &Fts3Config, t: &Transfer) -> Result<Value, MssError> {
    let (source, destination) = endpoints(cfg, t)?;
    let mut file = json!({
        "sources": [source],
        "destinations": [destination],
        "filesize": t.size_bytes,
        "metadata": {"mssbroker_key": t.key, "attempt": t.attempt},
    });
    if let Some(activity) = &cfg.activity {
        file["activity"] = json!(activity);
    }
    Ok(file)
}

impl ReadOutput for Fts3Config {
    /// A read's destination URL: its `local_file`, else `read_destination` + the file.
    fn read_output(&self, file: &str, local_file: Option<&str>) -> Option<String> {
        match (local_file, &self.read_destination) {
            (Some(f), _) => Some(f.to_string()),
            (None, Some(prefix)) => Some(format!("{prefix}{file}")),
            (None, None) => None,
        }
    }
}

/// A transfer's source and destination URLs, or why FTS3 cannot be asked for it.
pub fn endpoints(cfg: &Fts3Config, t: &Transfer) -> Result<(String, String), MssError> {
    let tape = format!("{}{}", cfg.tape_endpoint, t.file);
    let (source, destination) = match t.direction {
        Direction::Read => {
            let dest = match cfg.read_output(&t.file, t.local_file.as_deref()) {
                Some(dest) => dest,
                None => {
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
    Ok((source, destination))
}

/// A job's `params`.
fn params(cfg: &Fts3Config, sid: &str, level: i64, direction: Direction, metadata: Value) -> Value {
    let mut params = json!({
        "priority": level,
        "id_generator": "deterministic",
        "sid": sid,
        // -1: no retries at FTS3 (0 would be the server's default); the broker retries.
        "retry": -1,
        "job_metadata": metadata,
    });
    match direction {
        Direction::Read if cfg.bring_online > 0 => {
            params["bring_online"] = json!(cfg.bring_online);
            params["copy_pin_lifetime"] = json!(cfg.copy_pin_lifetime);
        }
        Direction::Write if cfg.archive_timeout > 0 => {
            params["archive_timeout"] = json!(cfg.archive_timeout);
        }
        _ => {}
    }
    params
}

/// The transfer a file of a polled job belongs to: its `file_metadata`'s key and attempt.
pub fn file_owner(file: &Value) -> Option<(String, u32)> {
    let m = file.get("file_metadata")?;
    let key = m.get("mssbroker_key")?.as_str()?.to_string();
    let attempt = u32::try_from(m.get("attempt")?.as_u64()?).ok()?;
    Some((key, attempt))
}

/// The MSS id of a file of a multi-file job: the job's id and the file's index in it.
pub fn file_mss_id(job_id: &str, index: u64) -> String {
    format!("{job_id}:{index}")
}

/// A recorded MSS id as the job's id and, for a file of a multi-file job, its index (UUIDs
/// hold no `:`).
pub fn split_mss_id(mss_id: &str) -> (String, Option<u64>) {
    match mss_id.split_once(':') {
        Some((job, i)) => match i.parse() {
            Ok(i) => (job.to_string(), Some(i)),
            Err(_) => (mss_id.to_string(), None),
        },
        None => (mss_id.to_string(), None),
    }
}

/// Which transfers share a job: those of one direction, one volume and one FTS3 level, in the
/// order given, at most `max_files` a job; a transfer without a volume goes alone. Each
/// element is `(position, direction, volume, level)`; the answer lists positions.
pub fn jobs_of(
    items: &[(usize, Direction, Option<&str>, i64)],
    max_files: usize,
) -> Vec<Vec<usize>> {
    let mut jobs: Vec<Vec<usize>> = Vec::new();
    let mut open: Vec<((Direction, &str, i64), usize)> = Vec::new();
    for &(pos, direction, volume, level) in items {
        let Some(volume) = volume.filter(|_| max_files > 1) else {
            jobs.push(vec![pos]);
            continue;
        };
        let key = (direction, volume, level);
        match open.iter().position(|(k, _)| *k == key) {
            Some(o) if jobs[open[o].1].len() < max_files => jobs[open[o].1].push(pos),
            Some(o) => {
                open[o].1 = jobs.len();
                jobs.push(vec![pos]);
            }
            None => {
                open.push((key, jobs.len()));
                jobs.push(vec![pos]);
            }
        }
    }
    jobs
}

#[cfg(test)]
mod tests {
    use super::*;

    /// A volume's transfers at one level share jobs of at most `max_files`, in order; other
    /// volumes, levels and directions, and transfers without a volume, go apart; `max_files`
    /// 1 sends every transfer alone.
    #[test]
    fn transfers_share_a_job_by_direction_volume_and_level() {
        let (r, w) = (Direction::Read, Direction::Write);
        let items = [
            (0, r, Some("VA"), 3),
            (1, r, None, 3),
            (2, r, Some("VA"), 3),
            (3, r, Some("VB"), 3),
            (4, r, Some("VA"), 5),
            (5, w, Some("VA"), 3),
            (6, r, Some("VA"), 3),
            (7, r, None, 3),
        ];
        let got = jobs_of(&items, 10);
        assert_eq!(
            got,
            [vec![0, 2, 6], vec![1], vec![3], vec![4], vec![5], vec![7]]
        );
        let got = jobs_of(&items, 2);
        assert_eq!(
            got,
            [
                vec![0, 2],
                vec![1],
                vec![3],
                vec![4],
                vec![5],
                vec![6],
                vec![7]
            ]
        );
        assert_eq!(jobs_of(&items, 1).len(), items.len());
    }

    /// A job never holds two files to one destination: the repeats go in later jobs, each in
    /// order.
    #[test]
    fn transfers_to_one_destination_go_in_separate_jobs() {
        let items: Vec<(usize, String)> = [(0, "a"), (1, "b"), (2, "a"), (3, "c"), (4, "a")]
            .map(|(p, d)| (p, d.to_string()))
            .into();
        assert_eq!(
            apart_by_destination(&items),
            [vec![0, 1, 3], vec![2], vec![4]]
        );
        assert!(apart_by_destination(&[]).is_empty());
    }

    /// The destination a 409 names, by its `dest_surl_uuid` in the database's words.
    #[test]
    fn a_clash_is_known_by_the_dest_surl_uuid_the_database_names() {
        let dests = [
            "davs://d.example/a",
            "DAVS://d.example/b ",
            "davs://d.example/c",
        ];
        let b = dest_surl_uuid("davs://d.example/b");
        let mysql = format!(
            "The submission is duplicated (MySQLdb.IntegrityError) (1062, \"Duplicate entry \
             '{b}' for key 'dest_surl_uuid'\")"
        );
        assert_eq!(clashing(&mysql, &dests), [1]);
        let pg = format!(
            "The submission is duplicated (psycopg2.errors.UniqueViolation) duplicate key value \
             violates unique constraint \"t_file_dest_surl_uuid_key\" DETAIL: Key \
             (dest_surl_uuid)=({}) already exists.",
            b.to_string().to_uppercase()
        );
        assert_eq!(clashing(&pg, &dests), [1]);
        assert!(clashing("The submission is duplicated", &dests).is_empty());
    }

    #[test]
    fn mss_ids_of_files_of_a_job_split_back() {
        let id = "4f5a6b1e-8c1d-5b7e-9a3c-2d1e0f9a8b7c";
        assert_eq!(split_mss_id(&file_mss_id(id, 7)), (id.to_string(), Some(7)));
        assert_eq!(split_mss_id(id), (id.to_string(), None));
        assert_eq!(split_mss_id("x:y"), ("x:y".to_string(), None));
    }
}
