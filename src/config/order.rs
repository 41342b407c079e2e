//! `[policy]`'s ordering keys, `[policy.multifactor]`, `[policy.qos]`, `[policy.queue_factors]`,
//! `[policy.fbsng."group"]` and `[release]`, validated into [`OrderSettings`].

use std::collections::{BTreeMap, HashMap};
use std::time::Duration;

use serde::Deserialize;

use super::raw::RawPolicy;
use super::Issues;
use crate::domain::order::Coalesce;
use crate::domain::{GroupId, GroupInfo, GroupKind};
use crate::policy::fbsng::QueueParams;
use crate::policy::multifactor::{Multifactor, Qos, SizeFavours};
use crate::policy::order::{Algorithm, OrderSettings, Release, ReleaseMode, VolumeSettings};
use crate::policy::reserve::ReserveSettings;

#[derive(Debug, Deserialize)]
#[serde(default, deny_unknown_fields)]
pub(super) struct RawMultifactor {
    wait_weight: f64,
    fair_share_weight: f64,
    qos_weight: f64,
    queue_weight: f64,
    size_weight: f64,
    user_weight: f64,
    wait_cap_secs: i64,
    size_ref_bytes: i64,
    size_favours: String,
}

impl Default for RawMultifactor {
    fn default() -> Self {
        RawMultifactor {
            wait_weight: 1000.0,
            fair_share_weight: 10_000.0,
            qos_weight: 2000.0,
            queue_weight: 0.0,
            size_weight: 500.0,
            user_weight: 1000.0,
            wait_cap_secs: 86_400,
            size_ref_bytes: 100_000_000_000,
            size_favours: "large".into(),
        }
    }
}

#[derive(Debug, Deserialize, Default)]
#[serde(deny_unknown_fields)]
pub(super) struct RawFbsng {
    qp_min: Option<i64>,
    qp_max: Option<i64>,
    qpi: Option<i64>,
    qpd: Option<i64>,
    qpg: Option<i64>,
    spg: Option<i64>,
}

#[derive(Debug, Deserialize)]
#[serde(default, deny_unknown_fields)]
pub(super) struct RawRelease {
    mode: String,
    limit: i64,
    slot_bytes: i64,
    libraries: BTreeMap<String, i64>,
    volumes: RawVolumes,
    coalesce: String,
    reserve: RawReserve,
}

/// `[release.reserve]`, as written.
#[derive(Debug, Deserialize)]
#[serde(default, deny_unknown_fields)]
pub(super) struct RawReserve {
    drives: i64,
    window_secs: i64,
    libraries: BTreeMap<String, i64>,
}

impl Default for RawReserve {
    fn default() -> Self {
        RawReserve {
            drives: 0,
            window_secs: 600,
            libraries: BTreeMap::new(),
        }
    }
}

impl Default for RawRelease {
    fn default() -> Self {
        RawRelease {
            mode: "pass_through".into(),
            limit: 8,
            slot_bytes: 0,
            libraries: BTreeMap::new(),
            volumes: RawVolumes::default(),
            coalesce: "in_flight".into(),
            reserve: RawReserve::default(),
        }
    }
}

/// `[release.volumes]`, as written.
#[derive(Debug, Deserialize)]
#[serde(default, deny_unknown_fields)]
pub(super) struct RawVolumes {
    min_volume_bytes: i64,
    min_volume_files: i64,
    quiet_secs: i64,
    max_age_secs: i64,
    batch_max_bytes: i64,
    batch_max_files: i64,
    sticky_secs: i64,
    max_volumes: i64,
    libraries: BTreeMap<String, i64>,
    ride_lead_bytes: Option<i64>,
    remainder_bytes: i64,
}

impl Default for RawVolumes {
    fn default() -> Self {
        let d = VolumeSettings::default();
        RawVolumes {
            min_volume_bytes: d.min_volume_bytes as i64,
            min_volume_files: i64::from(d.min_volume_files),
            quiet_secs: d.quiet_ms / 1000,
            max_age_secs: d.max_age_ms / 1000,
            batch_max_bytes: d.batch_max_bytes as i64,
            batch_max_files: i64::from(d.batch_max_files),
            sticky_secs: d.sticky_ms / 1000,
            max_volumes: i64::from(d.max_volumes),
            libraries: BTreeMap::new(),
            ride_lead_bytes: None,
            remainder_bytes: d.remainder_bytes as i64,
        }
    }
}

/// Validate the ordering settings. `p0` is the lowest priority class's MSS priority.
pub(super) fn validate_order(
    p: &RawPolicy,
    release: &RawRelease,
    groups: &[GroupInfo],
    by_path: &HashMap<String, GroupId>,
    p0: Option<i64>,
    issues: &mut Issues,
) -> OrderSettings {
    let mut o = OrderSettings::seed(p.p_front, p.p_back, groups.len());
    bands_and_starvation(p, p0, &mut o, issues);
    o.algorithm = match p.algorithm.as_str() {
        "sam" => Algorithm::Sam,
        "fair_tree" => Algorithm::FairTree,
        "fbsng" => Algorithm::Fbsng,
        "multifactor" => Algorithm::Multifactor(multifactor(&p.multifactor, &o, issues)),
        other => {
            issues.add(
                "policy.algorithm",
                format!("`{other}` is not one of sam, fair_tree, multifactor, fbsng"),
            );
            Algorithm::Sam
        }
    };
    per_access_mode(p, &mut o, issues);
    fbsng_queues(p, groups, by_path, &mut o, issues);
    o.release = validate_release(release, issues);
    o
}

fn multifactor(raw: &RawMultifactor, o: &OrderSettings, issues: &mut Issues) -> Multifactor {
    let weights = [
        ("wait_weight", raw.wait_weight),
        ("fair_share_weight", raw.fair_share_weight),
        ("qos_weight", raw.qos_weight),
        ("queue_weight", raw.queue_weight),
        ("size_weight", raw.size_weight),
        ("user_weight", raw.user_weight),
    ];
    for (k, w) in weights {
        if !(w.is_finite() && w >= 0.0) {
            issues.add(
                format!("policy.multifactor.{k}"),
                format!("must be a non-negative number, got {w}"),
            );
        }
    }
    if weights.iter().map(|(_, w)| w.max(0.0)).sum::<f64>() <= 0.0 {
        issues.add("policy.multifactor", "at least one weight must be positive");
    }
    let size_favours = match raw.size_favours.as_str() {
        "large" => SizeFavours::Large,
        "small" => SizeFavours::Small,
        other => {
            issues.add(
                "policy.multifactor.size_favours",
                format!("`{other}` is not one of large, small"),
            );
            SizeFavours::Large
        }
    };
    for (k, v) in [
        ("wait_cap_secs", raw.wait_cap_secs),
        ("size_ref_bytes", raw.size_ref_bytes),
    ] {
        if v <= 0 {
            issues.add(
                format!("policy.multifactor.{k}"),
                format!("must be positive, got {v}"),
            );
        }
    }
    Multifactor {
        wait_weight: raw.wait_weight.max(0.0),
        fair_share_weight: raw.fair_share_weight.max(0.0),
        qos_weight: raw.qos_weight.max(0.0),
        queue_weight: raw.queue_weight.max(0.0),
        size_weight: raw.size_weight.max(0.0),
        user_weight: raw.user_weight.max(0.0),
        max_wait_ms: raw.wait_cap_secs.max(1).saturating_mul(1000),
        size_ref_bytes: raw.size_ref_bytes.max(1) as u64,
        size_favours,
        band_low: o.band_low,
        band_high: o.band_high,
    }
}

fn queue_params(raw: &RawFbsng, key: &str, issues: &mut Issues) -> QueueParams {
    let d = QueueParams::default();
    let q = QueueParams {
        qp_min: raw.qp_min.unwrap_or(d.qp_min),
        qp_max: raw.qp_max.unwrap_or(d.qp_max),
        qpi: raw.qpi.unwrap_or(d.qpi),
        qpd: raw.qpd.unwrap_or(d.qpd),
        qpg: raw.qpg.unwrap_or(d.qpg),
        spg: raw.spg.unwrap_or(0).clamp(0, i64::from(u32::MAX)) as u32,
    };
    if q.qp_max < q.qp_min {
        issues.add(
            format!("{key}.qp_max"),
            format!("must be at least qp_min ({}), got {}", q.qp_min, q.qp_max),
        );
    }
    for (k, v) in [
        ("qpi", q.qpi),
        ("qpd", q.qpd),
        ("qpg", q.qpg),
        ("spg", raw.spg.unwrap_or(0)),
    ] {
        if v < 0 {
            issues.add(
                format!("{key}.{k}"),
                format!("must not be negative, got {v}"),
            );
        }
    }
    q
}

fn validate_release(raw: &RawRelease, issues: &mut Issues) -> Release {
    let mode = match raw.mode.as_str() {
        "pass_through" => ReleaseMode::PassThrough,
        "held" => ReleaseMode::Held,
        "volumes" => ReleaseMode::Volumes,
        other => {
            issues.add(
                "release.mode",
                format!("`{other}` is not one of pass_through, held, volumes"),
            );
            ReleaseMode::PassThrough
        }
    };
    let positive = |v: i64, key: String, issues: &mut Issues| -> u32 {
        if v <= 0 || v > i64::from(u32::MAX) {
            issues.add(key, format!("must be a positive integer, got {v}"));
            return 1;
        }
        v as u32
    };
    let limit = positive(raw.limit, "release.limit".into(), issues);
    let libraries = raw
        .libraries
        .iter()
        .map(|(name, &v)| {
            (
                name.clone(),
                positive(v, format!("release.libraries.\"{name}\""), issues),
            )
        })
        .collect();
    if raw.slot_bytes < 0 {
        issues.add(
            "release.slot_bytes",
            format!("must be 0 (off) or positive, got {}", raw.slot_bytes),
        );
    }
    let coalesce = [Coalesce::Off, Coalesce::InFlight, Coalesce::Queued]
        .into_iter()
        .find(|c| c.name() == raw.coalesce)
        .unwrap_or_else(|| {
            issues.add(
                "release.coalesce",
                format!("`{}` is not one of off, in_flight, queued", raw.coalesce),
            );
            Coalesce::InFlight
        });
    let mut release = Release {
        mode,
        limit,
        libraries,
        slot_bytes: raw.slot_bytes.max(0) as u64,
        volumes: validate_volumes(&raw.volumes, issues),
        coalesce,
        reserve: ReserveSettings::default(),
    };
    release.reserve = validate_reserve(&raw.reserve, &release, issues);
    release
}

/// `[release.reserve]`: `drives` 0 (off) or more, and below every library's slots in the mode
/// (held: `limit`, volumes: `max_volumes`), so fair share always keeps one; `window_secs` 0 or
/// more.
fn validate_reserve(raw: &RawReserve, release: &Release, issues: &mut Issues) -> ReserveSettings {
    let count = |v: i64, k: &str, issues: &mut Issues| -> u32 {
        if !(0..=i64::from(u32::MAX)).contains(&v) {
            issues.add(k, format!("must be 0 (off) or a positive integer, got {v}"));
            return 0;
        }
        v as u32
    };
    let drives = count(raw.drives, "release.reserve.drives", issues);
    let libraries: BTreeMap<String, u32> = (raw.libraries.iter())
        .map(|(name, &v)| {
            let k = format!("release.reserve.libraries.\"{name}\"");
            (name.clone(), count(v, &k, issues))
        })
        .collect();
    if !(0..=i64::MAX / 1000).contains(&raw.window_secs) {
        issues.add(
            "release.reserve.window_secs",
            format!(
                "must be 0 or a positive number of seconds, got {}",
                raw.window_secs
            ),
        );
    }
    let reserve = ReserveSettings {
        drives,
        window_ms: raw.window_secs.clamp(0, i64::MAX / 1000) * 1000,
        libraries,
    };
    let (cap_key, cap_of): (&str, &dyn Fn(&str) -> u32) = match release.mode {
        ReleaseMode::Held => ("release.limit", &|l| release.limit_of(l)),
        ReleaseMode::Volumes => ("release.volumes.max_volumes", &|l| {
            release.volumes.max_volumes_of(l)
        }),
        ReleaseMode::PassThrough => return reserve,
    };
    let named = (release.libraries.keys())
        .chain(release.volumes.libraries.keys())
        .chain(reserve.libraries.keys());
    for lib in std::iter::once(&String::new()).chain(named) {
        let (d, cap) = (reserve.drives_of(lib), cap_of(lib));
        if d > 0 && d >= cap {
            let key = if reserve.libraries.contains_key(lib) {
                format!("release.reserve.libraries.\"{lib}\"")
            } else {
                "release.reserve.drives".to_string()
            };
            issues.add(
                key,
                format!(
                    "must be below {cap_key} of library \"{lib}\" ({cap}), so fair share keeps a \
                     slot, got {d}"
                ),
            );
        }
    }
    reserve
}

/// `[release.volumes]`: every amount positive, except `quiet_secs` and `sticky_secs` (0: off);
/// `quiet_secs` and `sticky_secs` at most `max_age_secs`.
fn validate_volumes(raw: &RawVolumes, issues: &mut Issues) -> VolumeSettings {
    let key = |k: &str| format!("release.volumes.{k}");
    let u32max = i64::from(u32::MAX);
    let max_age_ms = positive_up_to(
        raw.max_age_secs,
        key("max_age_secs"),
        i64::MAX / 1000,
        issues,
    );
    let max_age_ms = 1000 * max_age_ms;
    let quiet_ms = millis_or_off(raw.quiet_secs, key("quiet_secs"), issues);
    let sticky_ms = millis_or_off(raw.sticky_secs, key("sticky_secs"), issues);
    for (k, v) in [("quiet_secs", quiet_ms), ("sticky_secs", sticky_ms)] {
        if v > max_age_ms {
            issues.add(
                key(k),
                format!(
                    "must not be above max_age_secs ({}), got {}",
                    max_age_ms / 1000,
                    v / 1000
                ),
            );
        }
    }
    let libraries = raw
        .libraries
        .iter()
        .map(|(name, &v)| {
            let k = key(&format!("libraries.\"{name}\""));
            (name.clone(), positive_up_to(v, k, u32max, issues) as u32)
        })
        .collect();
    let mut positive = |v: i64, k: &str, max: i64| positive_up_to(v, key(k), max, issues);
    VolumeSettings {
        min_volume_bytes: positive(raw.min_volume_bytes, "min_volume_bytes", i64::MAX) as u64,
        min_volume_files: positive(raw.min_volume_files, "min_volume_files", u32max) as u32,
        quiet_ms,
        max_age_ms,
        batch_max_bytes: positive(raw.batch_max_bytes, "batch_max_bytes", i64::MAX) as u64,
        batch_max_files: positive(raw.batch_max_files, "batch_max_files", u32max) as u32,
        sticky_ms,
        max_volumes: positive(raw.max_volumes, "max_volumes", u32max) as u32,
        libraries,
        // Set from `[mss.volume_lookup]` once `[mss]` is read (`config::mss`).
        lookup_wait_ms: None,
        ride_lead_bytes: ride_lead_bytes(raw.ride_lead_bytes, issues),
        remainder_bytes: bytes_or_off(raw.remainder_bytes, key("remainder_bytes"), issues),
    }
}

/// `v` bytes, 0 (off) or more, else 0 and an issue naming `key`.
fn bytes_or_off(v: i64, key: String, issues: &mut Issues) -> u64 {
    if v < 0 {
        issues.add(
            key,
            format!("must be 0 (off) or a number of bytes, got {v}"),
        );
        return 0;
    }
    v as u64
}

/// `v` when it is in `1..=max`, else 1 and an issue naming `key`.
fn positive_up_to(v: i64, key: String, max: i64, issues: &mut Issues) -> i64 {
    if v <= 0 || v > max {
        issues.add(
            key,
            format!("must be a positive integer up to {max}, got {v}"),
        );
        return 1;
    }
    v
}

/// `v` seconds as milliseconds (0: off), else 0 and an issue naming `key`.
fn millis_or_off(v: i64, key: String, issues: &mut Issues) -> i64 {
    if !(0..=i64::MAX / 1000).contains(&v) {
        issues.add(
            key,
            format!("must be 0 (off) or a positive number of seconds, got {v}"),
        );
        return 0;
    }
    v * 1000
}

/// `release.volumes.ride_lead_bytes`: a number of bytes, 0 or more, when given.
fn ride_lead_bytes(v: Option<i64>, issues: &mut Issues) -> Option<u64> {
    let v = v?;
    if v < 0 {
        issues.add(
            "release.volumes.ride_lead_bytes",
            format!("must be 0 or a positive number of bytes, got {v}"),
        );
        return None;
    }
    Some(v as u64)
}

/// The band the non-SAM policies map onto, the starvation bound and its priority, and the
/// re-prioritisation period.
fn bands_and_starvation(
    p: &RawPolicy,
    p0: Option<i64>,
    o: &mut OrderSettings,
    issues: &mut Issues,
) {
    o.band_low = p.band_low.unwrap_or(p.p_back);
    o.band_high = p.band_high.unwrap_or(p.p_front);
    if o.band_low >= o.band_high {
        issues.add(
            "policy.band_high",
            format!(
                "must be above policy.band_low ({}), got {}",
                o.band_low, o.band_high
            ),
        );
    }
    let top = o.band_high.max(p.p_front);
    o.starved_priority = p
        .starved_priority
        .unwrap_or_else(|| p0.map_or(top + 1, |p0| p0 - 1));
    if let Some(p0) = p0 {
        if top >= p0 {
            issues.add(
                "policy.band_high",
                format!(
                    "must be below every priority class's mss_priority (lowest is {p0}), got {top}"
                ),
            );
        }
    }
    if p.max_wait_secs < 0 {
        issues.add(
            "policy.max_wait_secs",
            format!("must be 0 (off) or positive, got {}", p.max_wait_secs),
        );
    }
    if p.max_wait_secs > 0 {
        o.max_wait_ms = Some(p.max_wait_secs.saturating_mul(1000));
        let below_classes = p0.is_none_or(|p0| o.starved_priority < p0);
        if o.starved_priority <= top || !below_classes {
            issues.add(
                "policy.starved_priority",
                format!(
                    "must be above policy.p_front and policy.band_high ({top}) and below every priority class, got {} (lower p_front/band_high or set it)",
                    o.starved_priority
                ),
            );
        }
    }
    match p.reprioritise_secs {
        0 => {}
        s if s > 0 => o.reprioritise = Some(Duration::from_secs(s as u64)),
        s => issues.add(
            "policy.reprioritise_secs",
            format!("must be 0 (off) or positive, got {s}"),
        ),
    }
}

/// `[policy.qos]` and `[policy.queue_factors]`.
fn per_access_mode(p: &RawPolicy, o: &mut OrderSettings, issues: &mut Issues) {
    for (mode, q) in &p.qos {
        match Qos::parse(q) {
            Some(q) => {
                o.qos_by_mode.insert(mode.clone(), q);
            }
            None => issues.add(
                format!("policy.qos.{mode}"),
                format!("`{q}` is not one of expedite, normal, standby"),
            ),
        }
    }
    for (mode, &f) in &p.queue_factors {
        if !(0.0..=1.0).contains(&f) {
            issues.add(
                format!("policy.queue_factors.{mode}"),
                format!("must be in [0, 1], got {f}"),
            );
        }
        o.queue_factor_by_mode
            .insert(mode.clone(), f.clamp(0.0, 1.0));
    }
}

/// `[policy.fbsng."group"]`: queue parameters of fair-share leaves.
fn fbsng_queues(
    p: &RawPolicy,
    groups: &[GroupInfo],
    by_path: &HashMap<String, GroupId>,
    o: &mut OrderSettings,
    issues: &mut Issues,
) {
    for (path, raw) in &p.fbsng {
        let key = format!("policy.fbsng.\"{path}\"");
        match by_path.get(path.as_str()) {
            Some(g) if matches!(groups[g.0].kind, GroupKind::FairShare { .. }) => {
                o.fbsng[g.0] = queue_params(raw, &key, issues);
            }
            _ => issues.add(key, "is not a leaf of [shares]"),
        }
    }
}

#[cfg(test)]
mod tests;
