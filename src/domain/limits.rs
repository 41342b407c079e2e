//! Bounds on what a station may send (`[limits]`), validated by `config`, enforced by `api`
//! (here, below both).

/// Bounds on what a station may send.
#[derive(Debug, Clone)]
pub struct InputLimits {
    /// Requests per second and burst of one station token (a batch counts its items).
    pub station_rate_per_sec: u32,
    pub station_burst: u32,
    pub max_body_bytes: usize,
    pub max_batch: usize,
    pub max_size_bytes: u64,
    pub max_string_len: usize,
    pub max_path_len: usize,
    /// Most buckets one report may have (`/v1/report`, `/report`, `mssbroker report`).
    pub max_report_buckets: usize,
    /// What all request bodies being read may take together (`api::body_budget`).
    pub max_bodies_in_memory_bytes: usize,
}
