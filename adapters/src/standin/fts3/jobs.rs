//! The stand-in FTS3's jobs: what a submission must look like, the files of a job and the
//! state each shows on the wall clock, and the JSON FTS3 answers with: pure.

use std::time::Instant;

use serde_json::{json, Map, Value};

use crate::standin::Plan;

/// FTS3's `FileMetadataSizeLimit` default (fts-rest-flask `config/config.py`).
const METADATA_LIMIT: usize = 1024;

/// `AutoSessionReuse` bounds, FTS3's defaults (fts-rest-flask `lib/JobBuilder.py`
/// `_apply_auto_session_reuse`): files per job, small and big file sizes, big files allowed.
const REUSE_FILES: std::ops::RangeInclusive<usize> = 5..=1000;
const REUSE_SMALL: u64 = 104_857_600;
const REUSE_BIG: u64 = 1_073_741_824;
const REUSE_MAX_BIG: usize = 2;

/// A job as the stand-in keeps it.
#[derive(Debug, Clone)]
pub struct Job {
    pub job_id: String,
    pub sid: Option<String>,
    /// The submitter's `vos[0]` (fts-rest-flask `lib/JobBuilder.py`: `job["vo_name"]`).
    pub vo_name: String,
    pub priority: i64,
    pub staging: bool,
    /// FTS3's `job_type`: `N` (normal) or `Y` (session reuse, which `AutoSessionReuse` makes of a
    /// job of 5 to 1000 small files between one pair of storage elements). The files of a `Y`
    /// job can only be cancelled all at once.
    pub job_type: &'static str,
    /// FTS3 retries after a recoverable failure: the job's `retry`, the server's for 0.
    pub retries: i64,
    pub bring_online: i64,
    pub job_metadata: Value,
    pub files: Vec<JobFile>,
    pub(super) created: Instant,
}

/// One file of a job (FTS3's `t_file` row).
#[derive(Debug, Clone)]
pub struct JobFile {
    /// FTS3's own id, given at insertion; `DELETE /jobs/{id}/files/{file_ids}` names it.
    pub file_id: u64,
    /// Its place in the submitted `files` list.
    pub file_index: u64,
    pub source: String,
    pub destination: String,
    pub activity: String,
    pub filesize: u64,
    /// The file's `metadata` as submitted (FTS3's `file_metadata`).
    pub metadata: Value,
    /// FTS3's `dest_surl_uuid`: set when its VO checks duplicates (`CheckDuplicates`).
    pub dest_surl_uuid: Option<uuid::Uuid>,
    pub(super) cancelled_at: Option<Instant>,
    /// When a `/hold/` file was let go ([`super::Fts3Standin::release_held`]): it runs from
    /// then on as any other file.
    pub(super) released_at: Option<Instant>,
}

/// A file's state now: `(state, reason, recoverable)`; `recoverable` is `None` (null) for a
/// staging job's failure.
pub(super) type Shown = (&'static str, &'static str, Option<bool>);

impl Job {
    /// The job a checked submission makes; `next_file_id` numbers its files.
    pub(super) fn new(
        job_id: String,
        params: &Map<String, Value>,
        files: &[Value],
        next_file_id: &mut u64,
        reuse_allowed: bool,
    ) -> Job {
        let int = |k: &str| params.get(k).and_then(Value::as_i64).unwrap_or(0);
        let files: Vec<JobFile> = files
            .iter()
            .enumerate()
            .map(|(i, f)| {
                *next_file_id += 1;
                JobFile::new(*next_file_id, i as u64, f)
            })
            .collect();
        let staging = int("bring_online") > 0 || int("copy_pin_lifetime") > 0;
        let job_type = if reuse_allowed && !staging && session_reuse(&files) {
            "Y"
        } else {
            "N"
        };
        Job {
            job_id,
            vo_name: String::new(),
            sid: params
                .get("sid")
                .and_then(Value::as_str)
                .map(str::to_string),
            priority: params
                .get("priority")
                .and_then(Value::as_i64)
                .unwrap_or(3)
                .clamp(1, 5),
            staging,
            job_type,
            retries: match params.get("retry").and_then(Value::as_i64).unwrap_or(0) {
                0 => super::SERVER_RETRY,
                n if n < 0 => 0,
                n => n,
            },
            bring_online: int("bring_online"),
            job_metadata: params.get("job_metadata").cloned().unwrap_or(Value::Null),
            files,
            created: Instant::now(),
        }
    }

    /// The job's state: the furthest state of a file still in flight (a file's `STARTED`, its
    /// bring-online request sent, is the job's `STAGING`: `STARTED` is no job state,
    /// fts-rest-flask `model/job.py`), else what its files ended as (all finished, any
    /// cancelled, all failed, or a mix: `FINISHEDDIRTY`).
    pub(super) fn state(&self, plan: &Plan) -> &'static str {
        let states: Vec<&str> = self.files.iter().map(|f| f.state(self, plan).0).collect();
        let live = [
            ("ACTIVE", "ACTIVE"),
            ("STARTED", "STAGING"),
            ("STAGING", "STAGING"),
            ("SUBMITTED", "SUBMITTED"),
        ];
        if let Some((_, s)) = live.iter().find(|(f, _)| states.contains(f)) {
            return s;
        }
        let all = |s: &str| states.iter().all(|x| *x == s);
        if all("FINISHED") {
            "FINISHED"
        } else if states.contains(&"CANCELED") {
            "CANCELED"
        } else if all("FAILED") {
            "FAILED"
        } else {
            "FINISHEDDIRTY"
        }
    }

    /// `GET /jobs/{ids}`: the job, with `files` holding the fields asked for of each file.
    /// `reversed`: list the files last first (FTS3 lists them in its database's order, which
    /// need not be the submission's).
    pub(super) fn json(
        &self,
        plan: &Plan,
        file_fields: Option<&str>,
        http_status: &str,
        reversed: bool,
    ) -> Value {
        let reason = self
            .files
            .iter()
            .map(|f| f.state(self, plan).1)
            .find(|r| !r.is_empty())
            .unwrap_or("");
        let mut out = json!({
            "job_id": self.job_id,
            "vo_name": self.vo_name,
            "job_state": self.state(plan),
            "job_type": self.job_type,
            "priority": self.priority,
            "reason": reason,
            "retry": self.retries,
            "bring_online": self.bring_online,
            "job_metadata": self.job_metadata,
            "http_status": http_status,
        });
        if let Some(fields) = file_fields {
            let mut files: Vec<Value> = self
                .files
                .iter()
                .map(|f| {
                    let full = f.json(self, plan);
                    let mut file = Map::new();
                    for name in fields.split(',') {
                        if let Some(v) = full.get(name) {
                            file.insert(name.to_string(), v.clone());
                        }
                    }
                    Value::Object(file)
                })
                .collect();
            if reversed {
                files.reverse();
            }
            out["files"] = Value::Array(files);
        }
        out
    }
}

/// Whether `AutoSessionReuse` turns a job of these files into a session-reuse job.
fn session_reuse(files: &[JobFile]) -> bool {
    // `scheme://hostname`, the port left out (fts-rest-flask `JobBuilder_utils.py`
    // `get_storage_element`).
    let host = |u: &str| {
        let (scheme, rest) = u.split_once("://").unwrap_or(("", u));
        let authority = rest.split('/').next().unwrap_or("");
        let name = authority.rsplit_once(':').map_or(authority, |(h, _)| h);
        format!("{scheme}://{name}")
    };
    let one_pair = files.iter().all(|f| {
        host(&f.source) == host(&files[0].source)
            && host(&f.destination) == host(&files[0].destination)
    });
    let small = files
        .iter()
        .filter(|f| (1..=REUSE_SMALL).contains(&f.filesize))
        .count();
    let big = files
        .iter()
        .filter(|f| (REUSE_SMALL + 1..=REUSE_BIG).contains(&f.filesize))
        .count();
    REUSE_FILES.contains(&files.len())
        && one_pair
        && small + big == files.len()
        && big <= REUSE_MAX_BIG
}

impl JobFile {
    fn new(file_id: u64, file_index: u64, f: &Value) -> JobFile {
        let first = |list: &str| {
            f.get(list)
                .and_then(|l| l.get(0))
                .and_then(Value::as_str)
                .unwrap_or("")
                .to_string()
        };
        JobFile {
            file_id,
            file_index,
            source: first("sources"),
            destination: first("destinations"),
            activity: f
                .get("activity")
                .and_then(Value::as_str)
                .unwrap_or("default")
                .to_lowercase(),
            filesize: f.get("filesize").and_then(Value::as_u64).unwrap_or(0),
            metadata: f.get("metadata").cloned().unwrap_or(Value::Null),
            dest_surl_uuid: None,
            cancelled_at: None,
            released_at: None,
        }
    }

    fn marked(&self, m: &str) -> bool {
        self.source.contains(m) || self.destination.contains(m)
    }

    /// Where the file stands on the wall clock. Every file of a job moves together (one
    /// bring-online request, one session): queued (`SUBMITTED`; for a staging job `STAGING`
    /// then, once the bring-online request is sent, `STARTED`) for `plan.queued`, `ACTIVE` for
    /// `plan.active`, then ended. A path containing `/hold/` stays queued until cancelled or
    /// released (then it runs from its release), `/fail/` fails (recoverable: run again while
    /// retries are left), `/fatal/` fails for good.
    pub(super) fn state(&self, job: &Job, plan: &Plan) -> Shown {
        let start = self.released_at.unwrap_or(job.created);
        let held = self.marked("/hold/") && self.released_at.is_none();
        let age = start.elapsed();
        let run = plan.queued + plan.active;
        let runs = if self.marked("/fail/") && !self.marked("/fatal/") {
            1 + job.retries.max(0) as u32
        } else {
            1
        };
        let done_at = run * runs;
        let in_run = if age < done_at {
            age.as_nanos() % run.as_nanos().max(1)
        } else {
            u128::MAX
        };
        let queued = if !job.staging {
            "SUBMITTED"
        } else if held || in_run < plan.queued.as_nanos() / 2 {
            "STAGING"
        } else {
            // The bring-online request has been sent.
            "STARTED"
        };
        let recoverable = |r: bool| if job.staging { None } else { Some(r) };
        let natural: Shown = if held || in_run < plan.queued.as_nanos() {
            (queued, "", Some(true))
        } else if age < done_at {
            ("ACTIVE", "", Some(true))
        } else if self.marked("/fatal/") {
            (
                "FAILED",
                "SOURCE [2] No such file or directory",
                recoverable(false),
            )
        } else if self.marked("/fail/") {
            (
                "FAILED",
                "TRANSFER [110] Connection timed out",
                recoverable(true),
            )
        } else {
            ("FINISHED", "", Some(true))
        };
        match self.cancelled_at {
            Some(at) if !is_terminal(natural.0) || at < start + done_at => {
                ("CANCELED", "Job canceled by the user", Some(true))
            }
            _ => natural,
        }
    }

    /// The file's row as FTS3 answers it (`GET /jobs/{id}/files`, and the fields a
    /// `GET /jobs/{ids}?files=...` picks from).
    pub(super) fn json(&self, job: &Job, plan: &Plan) -> Value {
        let (state, reason, recoverable) = self.state(job, plan);
        json!({
            "file_id": self.file_id,
            "file_index": self.file_index,
            "job_id": job.job_id,
            "file_state": state,
            "filesize": if state == "FINISHED" { self.filesize } else { 0 },
            "user_filesize": self.filesize,
            "reason": reason,
            "recoverable": recoverable,
            "source_surl": self.source,
            "dest_surl": self.destination,
            "activity": self.activity,
            "priority": job.priority,
            "file_metadata": self.metadata,
        })
    }

    /// Whether `DELETE /jobs/{id}/files/{file_ids}` may still cancel it (FTS3's
    /// `FileActiveStates`).
    pub(super) fn active(&self, job: &Job, plan: &Plan) -> bool {
        !is_terminal(self.state(job, plan).0)
    }

    /// Whether it holds its destination now: FTS3 sets a file's `dest_surl_uuid` at submission
    /// and clears it when the file ends, FINISHED, FAILED or CANCELED (cern-fts/fts3
    /// `src/db/mysql/MySqlAPI.cpp` `updateFileTransferStatusInternal` and the staging updates;
    /// fts-rest-flask `controllers/jobs.py` cancellations).
    pub(super) fn holds_destination(&self, uuid: &uuid::Uuid, job: &Job, plan: &Plan) -> bool {
        self.dest_surl_uuid.as_ref() == Some(uuid) && self.active(job, plan)
    }

    /// Let a `/hold/` file go: it runs from now.
    pub(super) fn release(&mut self) {
        if self.marked("/hold/") && self.released_at.is_none() && self.cancelled_at.is_none() {
            self.released_at = Some(Instant::now());
        }
    }
}

pub(super) fn is_terminal(state: &str) -> bool {
    matches!(state, "FINISHED" | "FAILED" | "FINISHEDDIRTY" | "CANCELED")
}

const FILE_KEYS: &[&str] = &[
    "sources",
    "destinations",
    "priority",
    "metadata",
    "filesize",
    "checksum",
    "activity",
    "selection_strategy",
    "staging_metadata",
    "archive_metadata",
    "scitag",
    "source_tokens",
    "destination_tokens",
];

/// `params` FTS3 reads, with the JSON type it expects (`int`, `bool`, `str`, `obj`).
const PARAMS: &[(&str, &str)] = &[
    ("verify_checksum", "any"),
    ("reuse", "bool"),
    ("spacetoken", "str"),
    ("destination_spacetoken", "str"),
    ("bring_online", "int"),
    ("copy_pin_lifetime", "int"),
    ("archive_timeout", "int"),
    ("job_metadata", "obj"),
    ("source_spacetoken", "str"),
    ("overwrite", "bool"),
    ("overwrite_on_retry", "bool"),
    ("overwrite_hop", "bool"),
    ("overwrite_when_only_on_disk", "bool"),
    ("dst_file_report", "bool"),
    ("gridftp", "str"),
    ("retry", "int"),
    ("retry_delay", "int"),
    ("multihop", "bool"),
    ("timeout", "int"),
    ("nostreams", "int"),
    ("buffer_size", "int"),
    ("strict_copy", "bool"),
    ("priority", "int"),
    ("ipv4", "bool"),
    ("ipv6", "bool"),
    ("id_generator", "str"),
    ("sid", "str"),
    ("max_time_in_queue", "any"),
    ("disable_cleanup", "bool"),
    ("s3alternate", "bool"),
    ("unmanaged_tokens", "bool"),
    ("credential", "str"),
];

fn type_ok(v: &Value, want: &str) -> bool {
    v.is_null()
        || match want {
            "int" => v.is_i64() || v.is_u64(),
            "bool" => v.is_boolean(),
            "str" => v.is_string(),
            "obj" => v.is_object(),
            _ => true,
        }
}

/// A URL FTS3 takes, checked as fts-rest-flask does (`lib/JobBuilder.py` `_populate_files`
/// strips it and parses it with Python's `urlparse`; `lib/JobBuilder_utils.py` `validate_url`
/// checks, in this order, a scheme, not `file`, a path and a host). `urlparse` ends the path at
/// a `?` or `#` (and, for https, at the last segment's `;params`), so `davs://h/#x` has the
/// path `/` and no query: no path.
fn url_problem(url: &str) -> Option<String> {
    let url = url.trim();
    let (scheme, rest) = match url.split_once("://") {
        Some((s, r)) if is_scheme(s) => (s, r),
        _ => return Some(format!("Missing scheme ({url})")),
    };
    if scheme.eq_ignore_ascii_case("file") {
        return Some(format!("Can not transfer local files ({url})"));
    }
    let netloc_end = rest.find(['/', '?', '#']).unwrap_or(rest.len());
    let (netloc, tail) = rest.split_at(netloc_end);
    let tail = tail.split('#').next().unwrap_or_default();
    let (path, query) = tail.split_once('?').unwrap_or((tail, ""));
    let path = without_params(scheme, path);
    if path.is_empty() || (path == "/" && query.is_empty()) {
        return Some(format!("Missing path ({url})"));
    }
    if hostname(netloc).is_empty() {
        return Some(format!("Missing host ({url})"));
    }
    None
}

/// `path` without the `;params` of its last segment, which `urlparse` takes off for the schemes
/// of its `uses_params` (of those FTS3 sees: http, https, ftp, sftp), not for davs or root.
fn without_params<'p>(scheme: &str, path: &'p str) -> &'p str {
    let scheme = scheme.to_ascii_lowercase();
    if !matches!(scheme.as_str(), "http" | "https" | "ftp" | "sftp") {
        return path;
    }
    let last = path.rfind('/').map_or(0, |i| i + 1);
    match path[last..].find(';') {
        Some(i) => &path[..last + i],
        None => path,
    }
}

/// What Python's `urlparse` takes for a scheme: a letter, then letters, digits, `+`, `-`, `.`.
fn is_scheme(s: &str) -> bool {
    let mut chars = s.chars();
    chars.next().is_some_and(|c| c.is_ascii_alphabetic())
        && chars.all(|c| c.is_ascii_alphanumeric() || matches!(c, '+' | '-' | '.'))
}

/// The host of a URL's `netloc`, as `urlparse(..).hostname` gives it: without the user part
/// and the port (an IPv6 address in brackets keeps its colons).
fn hostname(netloc: &str) -> &str {
    let host = netloc.rsplit_once('@').map_or(netloc, |(_, h)| h);
    match host.strip_prefix('[') {
        Some(v6) => v6.split(']').next().unwrap_or_default(),
        None => host.split(':').next().unwrap_or_default(),
    }
}

/// Check a submission: its `params` and files, or the message of a 400.
pub(super) fn check_submission(body: &Value) -> Result<(Map<String, Value>, Vec<Value>), String> {
    let Some(top) = body.as_object() else {
        return Err("the submission is not a JSON object".into());
    };
    for (k, v) in top {
        // FTS3's own client sends `"delete": null` with transfers.
        if !(matches!(k.as_str(), "files" | "params") || (k == "delete" && v.is_null())) {
            return Err(format!("unknown top-level field `{k}`"));
        }
    }
    let params = match top.get("params") {
        None | Some(Value::Null) => Map::new(),
        Some(Value::Object(p)) => p.clone(),
        Some(_) => return Err("`params` must be an object".into()),
    };
    for (k, v) in &params {
        match PARAMS.iter().find(|(name, _)| name == k) {
            None => return Err(format!("unknown parameter `params.{k}`")),
            Some((_, want)) if !type_ok(v, want) => {
                return Err(format!("`params.{k}` must be of type {want}"))
            }
            _ => {}
        }
    }
    if let Some(c) = params.get("copy_pin_lifetime").and_then(Value::as_i64) {
        if c < -1 {
            return Err("`params.copy_pin_lifetime` must be -1 or more".into());
        }
    }
    let files = match top.get("files") {
        Some(Value::Array(f)) if !f.is_empty() => f,
        Some(Value::Array(_)) | None | Some(Value::Null) => {
            return Err("No transfers operations specified".into())
        }
        Some(_) => return Err("`files` must be an array".into()),
    };
    for (i, file) in files.iter().enumerate() {
        check_file(i, file)?;
    }
    Ok((params, files.clone()))
}

/// One entry of `files`, as `JobBuilder._populate_files` reads it.
fn check_file(i: usize, file: &Value) -> Result<(), String> {
    let file = file
        .as_object()
        .ok_or_else(|| format!("`files[{i}]` must be an object"))?;
    for k in file.keys() {
        if !FILE_KEYS.contains(&k.as_str()) {
            return Err(format!("unknown field `files[{i}].{k}`"));
        }
    }
    for list in ["sources", "destinations"] {
        let urls = file
            .get(list)
            .and_then(Value::as_array)
            .filter(|a| !a.is_empty())
            .ok_or_else(|| format!("Missing parameter: '{list}' (a non-empty list)"))?;
        if urls.len() > 1 {
            // Several sources make a multiple-replica job, whose files cannot be cancelled
            // one by one: the broker never sends one, so the stand-in does not model it.
            return Err(format!("`files[{i}].{list}`: one URL each (this stand-in)"));
        }
        for u in urls {
            let u = u
                .as_str()
                .ok_or_else(|| format!("`files[{i}].{list}` holds a non-string"))?;
            if let Some(p) = url_problem(u) {
                return Err(format!("Invalid value within the request: {p}"));
            }
        }
    }
    for (k, want) in [
        ("filesize", "int"),
        ("activity", "str"),
        ("metadata", "obj"),
        ("checksum", "str"),
    ] {
        if let Some(v) = file.get(k) {
            if !type_ok(v, want) || v.as_i64().is_some_and(|n| n < 0) {
                return Err(format!("`files[{i}].{k}` must be of type {want}"));
            }
        }
    }
    if file
        .get("metadata")
        .is_some_and(|m| m.to_string().len() > METADATA_LIMIT)
    {
        return Err(format!(
            "`files[{i}].metadata` exceeds the size limit of {METADATA_LIMIT} bytes"
        ));
    }
    Ok(())
}

#[cfg(test)]
mod tests {
    use super::*;

    /// What Python's `urlparse` and `validate_url` make of awkward URLs (each checked against
    /// Python 3's `urllib.parse.urlparse`).
    #[test]
    fn urls_are_judged_as_urlparse_parses_them() {
        for ok in [
            "davs://h/x",
            " davs://h/x ",
            "davs://h/?x=1",
            "root://u@h:1094//eos/x",
            "davs://[::1]:2880/x",
            "davs://h/a;b/c",
            "davs://h/;p",
            "https://h/a;b/c;d",
            "DAVS://h/x",
        ] {
            assert_eq!(url_problem(ok), None, "{ok}");
        }
        for (bad, why) in [
            ("davs://h/#x", "Missing path"),
            ("davs://h/?", "Missing path"),
            ("https://h/;p", "Missing path"),
            ("davs://h#x", "Missing path"),
            ("davs://u@:80/x", "Missing host"),
            ("davs://:80/x", "Missing host"),
            ("1davs://h/x", "Missing scheme"),
            ("FILE:///x", "Can not transfer local files"),
        ] {
            let got = url_problem(bad).unwrap_or_default();
            assert!(got.starts_with(why), "{bad}: {got}");
        }
    }

    #[test]
    fn submissions_are_checked_like_fts3_and_strictly_for_unknown_fields() {
        let ok = json!({"files": [{"sources": ["davs://a.example/x"], "destinations":
            ["davs://b.example/y"], "filesize": 5, "activity": "g"}], "params": {"priority": 3}});
        assert!(check_submission(&ok).is_ok());
        let bad = [
            (json!({"files": [], "params": {}}), "No transfers"),
            (json!({"delete": []}), "unknown top-level"),
            (
                json!({"files": [{"sources": ["/local/x"], "destinations": ["davs://b/y"]}]}),
                "Missing scheme",
            ),
            (
                json!({"files": [{"sources": ["file:///x"], "destinations": ["davs://b/y"]}]}),
                "local files",
            ),
            (
                json!({"files": [{"sources": ["davs://a/"], "destinations": ["davs://b/y"]}]}),
                "Missing path",
            ),
            (
                json!({"files": [{"sources": ["davs://a/x"]}]}),
                "destinations",
            ),
            (
                json!({"files": [{"sources": ["davs://a/x"], "destinations": ["davs://b/y"], "prority": 1}]}),
                "unknown field",
            ),
            (
                json!({"files": [{"sources": ["davs://a/x"], "destinations": ["davs://b/y"]}], "params": {"priority": "high"}}),
                "params.priority",
            ),
            (
                json!({"files": [{"sources": ["davs://a/x"], "destinations": ["davs://b/y"], "filesize": -1}]}),
                "filesize",
            ),
        ];
        for (body, want) in bad {
            let err = check_submission(&body).unwrap_err();
            assert!(err.contains(want), "{body}: {err}");
        }
    }
}
