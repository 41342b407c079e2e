//! The WLCG Tape REST API adapter (dCache, EOS-CTA, StoRM): staging files from tape.
//!
//! - **Discovery**: at start, `GET {origin}/.well-known/wlcg-tape-rest-api` ([`discovery`]): its
//!   `sitename` keys `targetedMetadata`; `metadata_key` (or the url's host) only when the site
//!   has none.
//! - **Submit**: first `POST {url}/archiveinfo` for the batch's paths ([`archive`]): a file on
//!   disk is done at once, a LOST or NONE one (or an error staging cannot cure) fails at once;
//!   the rest (UNAVAILABLE and errors that may pass included: the server queues the recall),
//!   one `POST {url}/stage` per at most `max_files_per_request` distinct paths (a refused one
//!   is sent again one file at a time), `{"files": [{"path", "diskLifetime", "targetedMetadata": {<sitename>:
//!   {"activity": <group>}}}]}`; the answer (201) names the stage request (`requestId`, or, when
//!   the body cannot be read, the id at the end of its `Location` header), which is every
//!   transfer's MSS id. A 413 (dCache: more than `bulk.limits.max.targets-per-flat-request`
//!   files) splits the request to the maximum dCache's message names (or halves it) and lowers
//!   the limit for later ones. The API only stages: writes
//!   are refused. Paths are sent and matched lexically normalised ([`paths`]).
//! - **Progress**: every `poll_ms`, `GET {url}/stage/{id}` for each request with files in flight
//!   ([`file_progress`]: dCache's `state` form and EOS-CTA's `{path, onDisk, error}` form).
//!   Once every file of a request is final, `DELETE {url}/stage/{id}` (dCache keeps requests
//!   for `bulk.limits.archiver-window`, 14 days, otherwise).
//! - **Cancel**: `POST {url}/stage/{id}/cancel` with `{"paths": [path]}`; **release** (unpin the
//!   disk copy once the station has it): `POST {url}/release/{id}` with `{"paths": [path]}`
//!   (dCache unpins by the stage request's id, so a release still works after the DELETE).
//! - **diskLifetime** must be what Java's `Duration.parse` reads ([`duration`]); EOS ignores it
//!   (cern-eos/eos `mgm/http/rest-api/json/tape/TapeModelBuilders.hh` reads only `path` and
//!   the `activity` under its sitename, or under `default`).
//! - **No priority**: the API has no priority field, so the broker must order requests itself
//!   (`release.mode = "held"`); configuration refuses `pass_through` with this adapter.
//!
//! The API has no client-chosen request id and no way to list stage requests, so a batch whose
//! answer is lost (to a broker crash between the POST and the broker's commit, or an answer
//! broken off before its headers) is staged again under a new request; the first request's
//! pins expire after `diskLifetime`. Within one process a resend of a transfer the adapter
//! follows is answered from its tracks (`stage.rs` `triage`).
//!
//! The WLCG Tape REST API (`tape_rest.rs`: the notes, the re-exports). `config.rs`: config;
//! `progress.rs`: the pure `file_progress` (dCache's `state` form and EOS-CTA's `{path, onDisk,
//! error}`); `stage.rs`: submission (`stage_body`, archiveinfo before staging, batches of distinct
//! normalised paths per stage request, split on 413; a 201 whose body cannot be read is known by
//! its `Location`, `location_request_id`); `adapter.rs`: the adapter (the sitename read once from
//! the discovery document, cancel and release); `poller.rs`: a poller that deletes finished
//! requests; `discovery.rs` (the well-known document), `archive.rs` (archiveinfo to a decision),
//! `paths.rs` (lexical normalisation), `duration.rs` (`disk_lifetime` as Java's `Duration.parse`).

mod adapter;
mod archive;
mod config;
mod discovery;
mod duration;
mod paths;
mod poller;
mod progress;
mod stage;

pub use adapter::TapeRestAdapter;
pub use config::{RawTapeRestConfig, TapeRestConfig, DEFAULT_FATAL_PATTERNS};
pub use paths::normal as normal_path;
pub use progress::file_progress;
pub use stage::{stage_body, SETTLED_BEFORE_STAGING};

#[cfg(test)]
mod tests;
