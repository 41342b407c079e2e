//! `[mss]`: the adapter, its table (`[mss.encp]`, `[mss.fts3]`, `[mss.tape_rest]` or the
//! bundled simulator's `[mss.simulator]`), the dispatcher's rates and retries; and the checks of
//! the adapter's capabilities against the ordering policy, which refuse combinations that
//! cannot work (a pass-through policy with an MSS that takes no priority, priorities the MSS
//! cannot take, more outstanding transfers than the adapter runs) with a message that says what
//! to change.

use std::path::Path;
use std::time::Duration;

use mss_adapters::encp::RawEncpConfig;
use mss_adapters::fts3::RawFts3Config;
use mss_adapters::rest::Issue;
use mss_adapters::tape_rest::RawTapeRestConfig;
use mss_adapters::{Band, PriorityScale, Settling};
use serde::Deserialize;

mod checks;
mod drive;
mod lookup;

pub(super) use checks::check_against_policy;

use super::raw::default_int;
use super::{parse_addr, positive, Issues};
use crate::domain::mss::{AdapterSettings, MssSettings, SimulatorSettings};
use crate::domain::RetrySettings;
use mss_adapters::sim::library::LibraryConfig;
use mss_adapters::sim::Model;

#[derive(Debug, Deserialize)]
#[serde(deny_unknown_fields)]
pub(super) struct RawMss {
    adapter: String,
    #[serde(default)]
    url: Option<String>,
    #[serde(default = "default_int::<10_000>")]
    timeout_ms: i64,
    #[serde(default = "default_int::<5_000>")]
    submit_rate_per_sec: i64,
    #[serde(default = "default_int::<500>")]
    submit_burst: i64,
    #[serde(default = "default_int::<256>")]
    submit_batch: i64,
    /// Absent: `RetrySettings::DEFAULT`'s, the one statement of the default.
    #[serde(default)]
    retry_max_attempts: Option<i64>,
    /// Absent: `RetrySettings::DEFAULT`'s, the one statement of the default.
    #[serde(default)]
    retry_base_ms: Option<i64>,
    /// Absent: `RetrySettings::DEFAULT`'s, the one statement of the default.
    #[serde(default)]
    retry_max_ms: Option<i64>,
    #[serde(default = "default_int::<1_000>")]
    event_wait_ms: i64,
    #[serde(default = "default_int::<600_000>")]
    stale_after_ms: i64,
    #[serde(default)]
    simulator: Option<RawSimulator>,
    #[serde(default)]
    encp: Option<RawEncpConfig>,
    #[serde(default)]
    fts3: Option<RawFts3Config>,
    #[serde(default)]
    tape_rest: Option<RawTapeRestConfig>,
    #[serde(default)]
    volume_lookup: Option<lookup::RawVolumeLookup>,
}

#[derive(Debug, Deserialize)]
#[serde(default, deny_unknown_fields)]
struct RawSimulator {
    enabled: bool,
    listen: String,
    drives: i64,
    mount_seconds: f64,
    /// Absent: the drive profile's.
    rate_mb_per_sec: Option<f64>,
    time_scale: f64,
    failure_rate: f64,
    seed: i64,
    /// Enstore's `AGE_TIME` in (virtual) minutes; 0: no aging.
    age_time_minutes: i64,
    /// Enstore's `DELTA_PRI`.
    delta_pri: i64,
    /// The library model: "priority" (when absent) or "enstore".
    model: Option<String>,
    dismount_delay_seconds: f64,
    /// The drive profile: "lto8", "lto9" (when absent), "ts1160" or "custom"; every figure
    /// below, when given, overrides the profile's (`drive.rs`).
    drive: String,
    capacity_tb: Option<f64>,
    wraps: Option<i64>,
    bands: Option<i64>,
    mean_file_bytes: Option<i64>,
    robot_seconds: Option<f64>,
    load_seconds: Option<f64>,
    mount_delay_seconds: Option<f64>,
    unload_seconds: Option<f64>,
    rewind_full_seconds: Option<f64>,
    unthread_step_seconds: Option<f64>,
    locate_base_seconds: Option<f64>,
    locate_wrap_change_seconds: Option<f64>,
    locate_band_change_seconds: Option<f64>,
    locate_half_change_seconds: Option<f64>,
    locate_direction_change_seconds: Option<f64>,
    locate_step_back_seconds: Option<f64>,
    locate_per_length_seconds: Option<f64>,
    per_file_read_seconds: Option<f64>,
    per_file_write_seconds: Option<f64>,
    mover_poll_seconds: Option<f64>,
    /// "position" (Enstore, when absent) or "rao" (CTA).
    order: String,
    /// Keys of the flat tape times before the drive model: refused, naming what replaced them.
    unmount_seconds: Option<f64>,
    locate_seconds: Option<f64>,
    locate_seconds_per_unit: Option<f64>,
    /// Transfers at or above this priority are the Enstore model's admin requests.
    admin_priority_from: Option<i64>,
}

impl Default for RawSimulator {
    fn default() -> Self {
        RawSimulator {
            enabled: true,
            listen: "127.0.0.1:0".into(),
            drives: 4,
            mount_seconds: 60.0,
            rate_mb_per_sec: None,
            time_scale: 1.0,
            failure_rate: 0.0,
            seed: 1,
            age_time_minutes: 0,
            delta_pri: 1,
            model: None,
            dismount_delay_seconds: 60.0,
            drive: "lto9".into(),
            capacity_tb: None,
            wraps: None,
            bands: None,
            mean_file_bytes: None,
            robot_seconds: None,
            load_seconds: None,
            mount_delay_seconds: None,
            unload_seconds: None,
            rewind_full_seconds: None,
            unthread_step_seconds: None,
            locate_base_seconds: None,
            locate_wrap_change_seconds: None,
            locate_band_change_seconds: None,
            locate_half_change_seconds: None,
            locate_direction_change_seconds: None,
            locate_step_back_seconds: None,
            locate_per_length_seconds: None,
            per_file_read_seconds: None,
            per_file_write_seconds: None,
            mover_poll_seconds: None,
            order: "position".into(),
            unmount_seconds: None,
            locate_seconds: None,
            locate_seconds_per_unit: None,
            admin_priority_from: None,
        }
    }
}

/// The adapter `mss.adapter` names with its own table, and only that one: the tagged form of
/// `[mss]`'s flat TOML. (Serde's internally tagged enums would read the same TOML, but refuse a
/// stray table or an unknown adapter with messages that do not say what to change.)
enum ChosenAdapter<'a> {
    Http {
        url: Option<&'a str>,
        simulator: Option<Box<SimulatorSettings>>,
    },
    /// `[mss.encp]` may be left out: every key has a default.
    Encp(Option<&'a RawEncpConfig>),
    Fts3(Option<&'a RawFts3Config>),
    TapeRest(Option<&'a RawTapeRestConfig>),
}

/// Validate `[mss]`. Files named in adapter tables are resolved against `base` (the
/// configuration's directory); `default_bands` is FTS3's mapping when none is configured.
pub(super) fn validate_mss(
    raw: RawMss,
    base: &Path,
    default_bands: Vec<Band>,
    issues: &mut Issues,
) -> Option<MssSettings> {
    let table = raw
        .simulator
        .as_ref()
        .and_then(|s| validate_simulator(s, issues));
    let volume_lookup = (raw.volume_lookup.as_ref()).map(|l| lookup::validate(l, issues));
    let chosen = choose_adapter(&raw, table.clone(), issues)?;
    let adapter = validate_adapter(chosen, base, default_bands, issues)?;
    let burst = positive(raw.submit_burst, "mss.submit_burst", issues) as u32;
    let batch = positive(raw.submit_batch, "mss.submit_batch", issues);
    let retry = retry_settings(&raw, issues);
    if retry.max < retry.base {
        issues.add("mss.retry_max_ms", "must not be below mss.retry_base_ms");
    }
    let ms = |v: i64, key: &str, issues: &mut Issues| {
        Duration::from_millis(positive(v, key, issues) as u64)
    };
    Some(MssSettings {
        adapter,
        timeout: ms(raw.timeout_ms, "mss.timeout_ms", issues),
        submit_rate_per_sec: positive(raw.submit_rate_per_sec, "mss.submit_rate_per_sec", issues)
            as u32,
        submit_burst: burst,
        submit_batch: batch.min(burst as usize),
        retry,
        event_wait: ms(raw.event_wait_ms, "mss.event_wait_ms", issues),
        stale_after: ms(raw.stale_after_ms, "mss.stale_after_ms", issues),
        simulator: table,
        volume_lookup: volume_lookup.flatten(),
    })
}

/// Which adapter `mss.adapter` names, with its table; every key or table set for another
/// adapter is refused, naming what to change.
fn choose_adapter<'a>(
    raw: &'a RawMss,
    table: Option<SimulatorSettings>,
    issues: &mut Issues,
) -> Option<ChosenAdapter<'a>> {
    let simulator = table.filter(|s| s.enabled);
    let name = raw.adapter.as_str();
    for (table, present) in [
        ("encp", raw.encp.is_some()),
        ("fts3", raw.fts3.is_some()),
        ("tape_rest", raw.tape_rest.is_some()),
    ] {
        if present && table != name {
            issues.add(
                format!("mss.{table}"),
                format!("is set, but mss.adapter is \"{name}\": remove the table or set mss.adapter = \"{table}\""),
            );
        }
    }
    if name != "http" {
        if simulator.is_some() {
            issues.add(
                "mss.simulator",
                format!("only the http adapter talks to the bundled simulator; with adapter \"{name}\" remove [mss.simulator] or set enabled = false"),
            );
        }
        if raw.url.is_some() {
            issues.add(
                "mss.url",
                format!(
                    "is for the http adapter; the {name} adapter takes its address in [mss.{name}]"
                ),
            );
        }
    }
    match name {
        "http" => Some(ChosenAdapter::Http {
            url: raw.url.as_deref(),
            simulator: simulator.map(Box::new),
        }),
        "encp" => Some(ChosenAdapter::Encp(raw.encp.as_ref())),
        "fts3" => Some(ChosenAdapter::Fts3(raw.fts3.as_ref())),
        "tape_rest" => Some(ChosenAdapter::TapeRest(raw.tape_rest.as_ref())),
        other => {
            issues.add(
                "mss.adapter",
                format!("`{other}` is not a known adapter (known: http, encp, fts3, tape_rest)"),
            );
            None
        }
    }
}

/// The chosen adapter's table validated by the adapter itself, its issues keyed under
/// `mss.<adapter>.`.
fn validate_adapter(
    chosen: ChosenAdapter<'_>,
    base: &Path,
    default_bands: Vec<Band>,
    issues: &mut Issues,
) -> Option<AdapterSettings> {
    let adapter_issues = |table: &str, found: Vec<Issue>, issues: &mut Issues| {
        for i in found {
            issues.add(format!("mss.{table}.{}", i.key), i.message);
        }
    };
    match chosen {
        ChosenAdapter::Http { url, simulator } => {
            if url.is_none() && simulator.is_none() {
                issues.add(
                    "mss.url",
                    "needed for adapter \"http\" unless [mss.simulator] is enabled",
                );
            }
            // Parsed as the adapter will (a query string is kept on every call; the message
            // hides the URL's password and query).
            if let Some(Err(why)) = url.map(mss_adapters::endpoint::Endpoint::parse) {
                issues.add("mss.url", why);
            }
            Some(AdapterSettings::Http {
                url: url.map(str::to_string),
                simulator: simulator.map(|s| *s),
            })
        }
        ChosenAdapter::Encp(table) => match table.cloned().unwrap_or_default().validate(base) {
            Ok(c) => Some(AdapterSettings::Encp(c)),
            Err(found) => {
                adapter_issues("encp", found, issues);
                None
            }
        },
        ChosenAdapter::Fts3(None) => {
            issues.add(
                "mss.fts3",
                "needed for adapter \"fts3\": at least url, vo and tape_endpoint",
            );
            None
        }
        ChosenAdapter::Fts3(Some(t)) => match t.validate(base, default_bands) {
            Ok(c) => Some(AdapterSettings::Fts3(c)),
            Err(found) => {
                adapter_issues("fts3", found, issues);
                None
            }
        },
        ChosenAdapter::TapeRest(None) => {
            issues.add(
                "mss.tape_rest",
                "needed for adapter \"tape_rest\": at least url",
            );
            None
        }
        ChosenAdapter::TapeRest(Some(t)) => match t.validate(base) {
            Ok(c) => Some(AdapterSettings::TapeRest(c)),
            Err(found) => {
                adapter_issues("tape_rest", found, issues);
                None
            }
        },
    }
}

fn validate_simulator(s: &RawSimulator, issues: &mut Issues) -> Option<SimulatorSettings> {
    let listen = parse_addr(&s.listen, "mss.simulator.listen", issues)?;
    if !(s.mount_seconds >= 0.0 && s.mount_seconds.is_finite()) {
        issues.add("mss.simulator.mount_seconds", "must be 0 or more");
    }
    if !(s.time_scale > 0.0 && s.time_scale.is_finite()) {
        issues.add("mss.simulator.time_scale", "must be above 0");
    }
    if !(0.0..=1.0).contains(&s.failure_rate) {
        issues.add("mss.simulator.failure_rate", "must be between 0 and 1");
    }
    let name = s.model.as_deref().unwrap_or("priority");
    let model = Model::parse(name).unwrap_or_else(|| {
        issues.add(
            "mss.simulator.model",
            format!("unknown library model `{name}`: \"priority\" or \"enstore\""),
        );
        Model::Priority
    });
    let (bytes_per_sec, tape) = drive::tape_drive(s, issues);
    let dismount_delay_micros = drive::micros(
        Some(s.dismount_delay_seconds),
        0,
        "dismount_delay_seconds",
        issues,
    );
    let library = LibraryConfig {
        model,
        drives: positive(s.drives, "mss.simulator.drives", issues),
        mount_micros: (s.mount_seconds.max(0.0) * 1e6) as u64,
        bytes_per_sec,
        failure_rate: s.failure_rate,
        seed: s.seed as u64,
        aging: sim_aging(s, issues),
        tape,
        dismount_delay_micros,
        admin_from: s.admin_priority_from,
    };
    Some(SimulatorSettings {
        listen,
        time_scale: s.time_scale,
        library,
        model_set: s.model.is_some(),
        enabled: s.enabled,
    })
}

/// `age_time_minutes` and `delta_pri` as the model's aging (off at 0 minutes).
fn sim_aging(s: &RawSimulator, issues: &mut Issues) -> Option<mss_adapters::sim::library::Aging> {
    if s.age_time_minutes < 0 || s.age_time_minutes > 1_000_000 {
        issues.add(
            "mss.simulator.age_time_minutes",
            "must be 0 (off) to 1000000",
        );
        return None;
    }
    if s.delta_pri < 1 {
        issues.add("mss.simulator.delta_pri", "must be 1 or more");
        return None;
    }
    (s.age_time_minutes > 0).then(|| mss_adapters::sim::library::Aging {
        delta_pri: s.delta_pri,
        every_micros: s.age_time_minutes as u64 * 60 * 1_000_000,
    })
}

/// FTS3's priority bands when none are configured: fair-share `back` requests at 1, `front`
/// (and every priority up to the classes) at 3, priority classes at 5.
pub(super) fn default_bands(p_front: i64, lowest_class: Option<i64>) -> Vec<Band> {
    let mut bands = vec![
        Band {
            from: i64::MIN,
            level: 1,
        },
        Band {
            from: p_front,
            level: 3,
        },
    ];
    if let Some(p0) = lowest_class.filter(|&p| p > p_front) {
        bands.push(Band { from: p0, level: 5 });
    }
    bands
}

/// The adapter and what it can do, for `check-config`.
pub(super) fn describe(mss: &MssSettings) -> String {
    let caps = mss.adapter.capabilities();
    let priority = match &caps.priority {
        PriorityScale::None => "none (the broker orders requests: held mode)".to_string(),
        PriorityScale::Direct { min, max } if *min == i64::MIN => "any".to_string(),
        PriorityScale::Direct { min, max } => format!("{min} to {max}"),
        PriorityScale::Bands(b) => b
            .iter()
            .map(|b| {
                if b.from == i64::MIN {
                    format!("lower -> {}", b.level)
                } else {
                    format!("{}+ -> {}", b.from, b.level)
                }
            })
            .collect::<Vec<_>>()
            .join(", "),
    };
    let yes = |b: bool| if b { "yes" } else { "no" };
    format!(
        "\nmss: adapter {}; priority {priority}; re-prioritise {}, cancel {}, release {}, writes {}; \
         outstanding {}\n",
        mss.adapter.name(),
        yes(caps.reprioritize),
        yes(caps.cancel),
        yes(caps.release),
        yes(caps.writes),
        caps.max_outstanding
            .map_or("unlimited".to_string(), |n| format!("at most {n}")),
    ) + &describe_settling(mss.adapter.name(), caps.settling)
}

/// What a restarted broker, or one taking over, does with a send the one before it may have
/// made (docs/ha.md, "How a new leader settles what the old one sent").
fn describe_settling(adapter: &str, s: Settling) -> String {
    let yes = |b: bool| if b { "yes" } else { "no" };
    let then = if s.dedup_by_key {
        "a send left unanswered by a crash or a takeover is sent again with the same key and \
         attempt, which the mss answers as a duplicate"
            .to_string()
    } else {
        format!(
            "a send left unanswered by a crash or a takeover is NOT sent again: the {adapter} \
             adapter cannot tell whether the mss has it, so such requests are flagged \
             `unsettled` for an operator (docs/operations.md, \"Unsettled sends\")"
        )
    };
    format!(
        "mss settling: status by key {}, deduplicates by key {}; {then}\n",
        yes(s.status_by_key),
        yes(s.dedup_by_key),
    )
}

/// `[mss] retry_*`, each absent key at `RetrySettings::DEFAULT`'s value.
fn retry_settings(raw: &RawMss, issues: &mut Issues) -> RetrySettings {
    let d = RetrySettings::DEFAULT;
    let ms = |v: Option<i64>, default: Duration, key: &str, issues: &mut Issues| {
        let v = v.unwrap_or(default.as_millis() as i64);
        Duration::from_millis(positive(v, key, issues) as u64)
    };
    let attempts = raw.retry_max_attempts.unwrap_or(i64::from(d.max_attempts));
    RetrySettings {
        max_attempts: positive(attempts, "mss.retry_max_attempts", issues) as u32,
        base: ms(raw.retry_base_ms, d.base, "mss.retry_base_ms", issues),
        max: ms(raw.retry_max_ms, d.max, "mss.retry_max_ms", issues),
    }
}

#[cfg(test)]
mod tests;
