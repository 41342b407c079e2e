//! `[limits]` validated into [`InputLimits`].

use super::raw::RawLimits;
use super::{positive, Issues};
use crate::domain::limits::InputLimits;

pub(super) fn validate_limits(raw: &RawLimits, issues: &mut Issues) -> InputLimits {
    let limits = InputLimits {
        station_rate_per_sec: positive(
            raw.station_rate_per_sec,
            "limits.station_rate_per_sec",
            issues,
        )
        .min(u32::MAX as usize) as u32,
        station_burst: positive(raw.station_burst, "limits.station_burst", issues)
            .min(u32::MAX as usize) as u32,
        max_body_bytes: positive(raw.max_body_bytes, "limits.max_body_bytes", issues),
        max_batch: positive(raw.max_batch, "limits.max_batch", issues),
        max_size_bytes: positive(raw.max_size_bytes, "limits.max_size_bytes", issues) as u64,
        max_string_len: positive(raw.max_string_len, "limits.max_string_len", issues),
        max_path_len: positive(raw.max_path_len, "limits.max_path_len", issues),
        max_report_buckets: positive(raw.max_report_buckets, "limits.max_report_buckets", issues),
        max_bodies_in_memory_bytes: positive(
            raw.max_bodies_in_memory_bytes,
            "limits.max_bodies_in_memory_bytes",
            issues,
        ),
    };
    if limits.max_bodies_in_memory_bytes < limits.max_body_bytes {
        issues.add(
            "limits.max_bodies_in_memory_bytes",
            format!(
                "must be at least limits.max_body_bytes ({}), or the largest body could never                  be read",
                limits.max_body_bytes
            ),
        );
    }
    if (limits.station_burst as usize) < limits.max_batch {
        issues.add(
            "limits.station_burst",
            format!(
                "must be at least limits.max_batch ({}), or a full batch could never pass",
                limits.max_batch
            ),
        );
    }
    limits
}

/// `[limits] max_queued_bytes_per_user`: unset means no cap.
pub(super) fn queued_bytes_per_user(raw: &RawLimits, issues: &mut Issues) -> Option<u64> {
    match raw.max_queued_bytes_per_user {
        Some(v) if v <= 0 => {
            issues.add(
                "limits.max_queued_bytes_per_user",
                format!("must be a positive number of bytes, got {v}"),
            );
            None
        }
        v => v.map(|v| v as u64),
    }
}
