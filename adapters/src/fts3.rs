//! The FTS3 adapter: one FTS3 job per volume batch (or per transfer without a volume), over
//! FTS3's REST interface.
//!
//! - **Jobs**: the transfers of one submission that share a direction, a volume and an FTS3
//!   priority go in one job, in the order given (a `volumes` batch in tape-position order), up
//!   to `job_max_files`: FTS3 sends one bring-online request for a staging job's files
//!   (fts-rest-flask `lib/JobBuilder.py` gives them one `hashed_id`, so one node stages them
//!   all). Each file's MSS id is `<job id>:<file_index>`; a job of one file's is the job id.
//!   `batch` keeps a transfer from being queued twice when answers are lost.
//! - **Submit**: `POST /jobs` with the files (`sources`: the tape endpoint's URL of the file for a
//!   read, the station's `local_file` for a write; `destinations` the other way round;
//!   the configured `activity` if any (one for every job, lower-cased as FTS3 keeps it: with
//!   activity shares FTS3 draws slots by weighted random, which would re-order the broker's
//!   decisions), `filesize`, `metadata`) and `params`: the priority (FTS3's 1..5, mapped from the
//!   broker's priority by `priority_bands`), `bring_online` and `copy_pin_lifetime` for reads
//!   from tape, `archive_timeout` for writes to tape, `retry = -1` (no FTS3 retries: the broker
//!   retries; 0 would mean the server's default, cern-fts/fts3 `src/db/mysql/Config.cpp`
//!   `getRetry`) and a deterministic job id: `id_generator = "deterministic"` with
//!   `sid = <prefix>-<key>-<attempt>`. FTS3 derives the job id as
//!   `uuid5(uuid5(BASE_ID, user.vos[0]), sid)`, `vos[0]` being the VO it derives from the
//!   credential (cern-fts/fts-rest-flask `fts3rest/lib/JobBuilder.py`,
//!   `fts3rest/lib/middleware/fts3auth/methods/ssl.py`, `methods/oauth2.py`), which the adapter
//!   reads from `GET /whoami` (`vos_id[0]`, `fts3rest/controllers/delegation.py`) at the first
//!   need, and again when FTS3 shows no job where it would put one or names one of ours (409):
//!   a bearer token, read at every call, may be renewed with other groups, which FTS3 takes for
//!   its VOs. The VO ids read before are kept, since the jobs made under them keep their ids,
//!   and a job listed after a start is known as this broker's under its own `vo_name` too. A
//!   second submission of
//!   the same sid is 409 "The sid provided by the user is duplicated", so a transfer submitted
//!   again after a broker crash is recognised, never queued twice.
//! - **A destination held**: for the VOs of FTS3's `CheckDuplicates` each file gets
//!   `dest_surl_uuid = uuid5(BASE_ID, destination)`, a unique key of `t_file`
//!   (fts-rest-flask `lib/JobBuilder.py` `_populate_files`, `lib/JobBuilder_utils.py`
//!   `is_dest_surl_uuid_enabled`), set while the file has not ended and cleared when it ends
//!   FINISHED, FAILED or CANCELED (cern-fts/fts3 `src/db/mysql/MySqlAPI.cpp`
//!   `updateFileTransferStatusInternal` "DEST_SURL_UUID = NULL", the staging and cancel updates;
//!   fts-rest-flask `controllers/jobs.py` cancellations). A submission with a file to a
//!   destination held is 409 "The submission is duplicated" with the database's message, which
//!   names the uuid, and nothing is made (`controllers/jobs.py` `submit` rolls back). So it is
//!   no refusal: the adapter answers `Unavailable` (the broker sends it again later, same
//!   attempt) for the files named, sends the others as one job, and never puts two files to one
//!   destination in one job. (fts-rest-flask a8b49830ce86230f92b2b3849c51ddd916feb8f5,
//!   cern-fts/fts3 e0a7e05825ea0a9ef7ee40409b9c00ba618d08b2.)
//! - **Progress**: every `poll_ms`, `GET /jobs/{id,id,...}?files=...` for the jobs in flight;
//!   a file becoming `ACTIVE` or `ARCHIVING` is a start, and so is `STARTED` for a staging job
//!   (the bring-online request was sent; cern-fts/fts3 `src/db/mysql/MySqlAPI.cpp`),
//!   `FINISHED` is done with the file's size, `FAILED` a failure (retryable unless FTS3 marked it
//!   unrecoverable; FTS3 leaves `recoverable` null for staging failures, classified then by the
//!   reason text as FTS3's own `src/url-copy/heuristics.cpp` does), `CANCELED` a cancellation.
//! - **Priority**: `POST /jobs/{id}` with `{"params": {"priority": n}}`, for the whole job
//!   (every file of a volume batch moves together); **cancel**: `DELETE /jobs/{id}` for a job of
//!   one file, `DELETE /jobs/{id}/files/{file_id}` for one file of several (its `file_id` read
//!   from the job; FTS3 refuses this for a session-reuse job, so that cancel is refused).
//! - **Authentication**: a bearer token (read from a file at every call) or an X.509 client
//!   certificate. FTS3 refuses tape staging and archiving with tokens, so configuration refuses
//!   that combination.
//!
//! FTS3 (`fts3.rs`: the notes with their FTS3 sources, the re-exports). `config.rs`: config (bands,
//! the one `activity`); `job.rs`: the deterministic `job_id`/`job_id_in` (under `vos_id[0]` of `GET
//! /whoami`, in `Fts3State::vo_ids`: read at the first need and again by `rederive` when a lookup
//! misses or on a 409 for our sid, the earlier ones kept), the pure `job_body` (`retry: -1`),
//! `conflict_is_ours` (409 for our sid vs "The submission is duplicated": a destination held by a
//! file not ended, `Deferred` until it ends, and held back meanwhile by `holds.rs`, `Holds`: 30 s
//! doubling to 10 minutes, freed when FTS3 takes a transfer there or one the adapter follows there
//! ends), `clashing` (the files that 409 names by `dest_surl_uuid`) and `apart_by_destination`;
//! `progress.rs`: `progress_of` (`STARTED` a start only for staging jobs; null `recoverable`
//! classified by `retryable_by_reason`, FTS3's own heuristics); `adapter.rs`: the adapter, jobs in
//! flight in memory (a transfer's `Track` holds its job and, in a job of several files, its
//! `file_index`), per-file cancel; `batch.rs`: submission in jobs of one volume (`jobs_of` groups,
//! the first transfer's sid, 409 and lost answers resolved by reading the job's files'
//! `file_metadata`, the jobs in flight read once after a start, `recover`; the grouping `jobs_of`,
//! `batch_body`, `file_entry` and `split_mss_id` are in `job.rs`); `poller.rs`: the poller (each
//! job asked once per poll, up to 50 ids a `GET /jobs/{ids}`, each transfer following its own
//! file).

mod adapter;
mod batch;
mod config;
mod holds;
mod job;
mod poller;
mod progress;

pub use adapter::Fts3Adapter;
pub use config::{Fts3Config, RawBand, RawFts3Config, MAX_PRIORITY, MIN_PRIORITY};
pub use job::{
    batch_body, conflict_is_ours, dest_surl_uuid, file_entry, job_body, job_id, job_id_in, jobs_of,
    split_mss_id, vo_id, BASE_ID,
};
pub use progress::{is_staging, progress_of, retryable_by_reason};

#[cfg(test)]
mod tests;
