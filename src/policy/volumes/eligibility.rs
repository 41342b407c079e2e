//! Whether a volume may be mounted now, and which rule holds or which it waits on (explain).

use super::state::Vol;
use super::VolumeId;
use crate::domain::order::VolumeSettings;

/// Which rule makes a volume eligible, or what it waits on.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Eligibility {
    /// A group's requests without a volume: always eligible.
    Loose,
    /// A group's requests without a volume waiting for the volume lookup's answer: eligible
    /// (without a volume) at `at_ms`, when the oldest has waited `lookup_wait_ms`.
    Locating { at_ms: i64 },
    /// ...and that wait is over.
    LookupLate,
    /// In flight, or finished within `sticky_ms`: no mount needed.
    Mounted,
    /// Queued bytes reached `min_volume_bytes`.
    Bytes,
    /// Queued files reached `min_volume_files`.
    Files,
    /// The newest request is `quiet_ms` old.
    Quiet,
    /// The oldest request is `max_age_ms` old.
    MaxAge,
    /// Not yet: eligible at `at_ms` (by `quiet` or, if `quiet` is false, by `max_age`) unless
    /// more bytes or files come first.
    Waiting { at_ms: i64, quiet: bool },
}

impl Eligibility {
    pub fn is_eligible(self) -> bool {
        !matches!(
            self,
            Eligibility::Waiting { .. } | Eligibility::Locating { .. }
        )
    }

    /// The rule's name as explain shows it.
    pub fn name(self) -> &'static str {
        match self {
            Eligibility::Loose => "no_volume",
            Eligibility::Locating { .. } => "waiting_volume_lookup",
            Eligibility::LookupLate => "volume_lookup_wait_secs",
            Eligibility::Mounted => "mounted",
            Eligibility::Bytes => "min_volume_bytes",
            Eligibility::Files => "min_volume_files",
            Eligibility::Quiet => "quiet_secs",
            Eligibility::MaxAge => "max_age_secs",
            Eligibility::Waiting { quiet: true, .. } => "waiting_quiet_secs",
            Eligibility::Waiting { quiet: false, .. } => "waiting_max_age_secs",
        }
    }
}

/// A waiting volume at one instant.
#[derive(Debug, Clone, PartialEq)]
pub struct VolumeStatus {
    pub volume: VolumeId,
    pub bytes: u64,
    pub files: usize,
    pub oldest_ms: i64,
    pub newest_ms: i64,
    pub eligibility: Eligibility,
}

/// The rule for `v` at `now_ms` (`mounted`: in flight or sticky).
pub(super) fn status(
    s: &VolumeSettings,
    id: &VolumeId,
    v: &Vol,
    mounted: bool,
    now_ms: i64,
) -> VolumeStatus {
    let (oldest_ms, newest_ms) = v.age_span();
    let eligibility = if matches!(id, VolumeId::Loose(_)) {
        Eligibility::Loose
    } else if matches!(id, VolumeId::Unlocated(_)) {
        locating(s, oldest_ms, now_ms)
    } else if mounted {
        Eligibility::Mounted
    } else {
        rule(s, v.bytes, v.reqs.len(), oldest_ms, newest_ms, now_ms)
    };
    VolumeStatus {
        volume: id.clone(),
        bytes: v.bytes,
        files: v.reqs.len(),
        oldest_ms,
        newest_ms,
        eligibility,
    }
}

/// The eligibility rules of a tape volume, in the order explain names them.
pub fn rule(
    s: &VolumeSettings,
    bytes: u64,
    files: usize,
    oldest_ms: i64,
    newest_ms: i64,
    now_ms: i64,
) -> Eligibility {
    if bytes >= s.min_volume_bytes {
        return Eligibility::Bytes;
    }
    if files >= s.min_volume_files as usize {
        return Eligibility::Files;
    }
    if s.quiet_ms > 0 && now_ms - newest_ms >= s.quiet_ms {
        return Eligibility::Quiet;
    }
    if now_ms - oldest_ms >= s.max_age_ms {
        return Eligibility::MaxAge;
    }
    eligible_from(s, bytes, files, oldest_ms, newest_ms).map_or(
        Eligibility::MaxAge,
        |(at_ms, quiet)| Eligibility::Waiting { at_ms, quiet },
    )
}

/// When a tape volume becomes eligible with what is queued now (`None`: it already is, by size),
/// and whether by quiet.
pub(super) fn eligible_from(
    s: &VolumeSettings,
    bytes: u64,
    files: usize,
    oldest_ms: i64,
    newest_ms: i64,
) -> Option<(i64, bool)> {
    if bytes >= s.min_volume_bytes || files >= s.min_volume_files as usize {
        return None;
    }
    let by_age = oldest_ms.saturating_add(s.max_age_ms);
    if s.quiet_ms > 0 {
        let by_quiet = newest_ms.saturating_add(s.quiet_ms);
        if by_quiet <= by_age {
            return Some((by_quiet, true));
        }
    }
    Some((by_age, false))
}

/// The rule of a group's requests waiting for the volume lookup, the oldest of them created at
/// `oldest_ms`.
pub fn locating(s: &VolumeSettings, oldest_ms: i64, now_ms: i64) -> Eligibility {
    let at_ms = oldest_ms.saturating_add(s.lookup_wait_ms.unwrap_or(0));
    if now_ms >= at_ms {
        Eligibility::LookupLate
    } else {
        Eligibility::Locating { at_ms }
    }
}
