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
use mss_adapters::{Band, PriorityScale};
use serde::Deserialize;

use super::raw::int;
use super::{parse_addr, positive, Issues};
use crate::dispatcher::{AdapterSettings, MssSettings, SimulatorSettings};
use crate::domain::{GroupKind, PolicySettings, RetrySettings};
use crate::policy::order::Algorithm;

#[derive(Debug, Deserialize)]
#[serde(deny_unknown_fields)]
pub(super) struct RawMss {
    adapter: String,
    #[serde(default)]
    url: Option<String>,
    #[serde(default = "int::<10_000>")]
    timeout_ms: i64,
    #[serde(default = "int::<5_000>")]
    submit_rate_per_sec: i64,
    #[serde(default = "int::<500>")]
    submit_burst: i64,
    #[serde(default = "int::<256>")]
    submit_batch: i64,
    #[serde(default = "int::<5>")]
    retry_max_attempts: i64,
    #[serde(default = "int::<500>")]
    retry_base_ms: i64,
    #[serde(default = "int::<60_000>")]
    retry_max_ms: i64,
    #[serde(default = "int::<1_000>")]
    event_wait_ms: i64,
    #[serde(default = "int::<600_000>")]
    stale_after_ms: i64,
    #[serde(default)]
    simulator: Option<RawSimulator>,
    #[serde(default)]
    encp: Option<RawEncpConfig>,
    #[serde(default)]
    fts3: Option<RawFts3Config>,
    #[serde(default)]
    tape_rest: Option<RawTapeRestConfig>,
}

#[derive(Debug, Deserialize)]
#[serde(default, deny_unknown_fields)]
struct RawSimulator {
    enabled: bool,
    listen: String,
    drives: i64,
    mount_seconds: f64,
    rate_mb_per_sec: f64,
    time_scale: f64,
    failure_rate: f64,
    seed: i64,
    /// Enstore's `AGE_TIME` in (virtual) minutes; 0: no aging.
    age_time_minutes: i64,
    /// Enstore's `DELTA_PRI`.
    delta_pri: i64,
}

impl Default for RawSimulator {
    fn default() -> Self {
        RawSimulator {
            enabled: true,
            listen: "127.0.0.1:0".into(),
            drives: 4,
            mount_seconds: 60.0,
            rate_mb_per_sec: 300.0,
            time_scale: 1.0,
            failure_rate: 0.0,
            seed: 1,
            age_time_minutes: 0,
            delta_pri: 1,
        }
    }
}

/// The adapter `mss.adapter` names with its own table, and only that one: the tagged form of
/// `[mss]`'s flat TOML. (Serde's internally tagged enums would read the same TOML, but refuse a
/// stray table or an unknown adapter with messages that do not say what to change.)
enum ChosenAdapter<'a> {
    Http {
        url: Option<&'a str>,
        simulator: Option<SimulatorSettings>,
    },
    Encp(RawEncpConfig),
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
    let chosen = choose_adapter(&raw, issues)?;
    let adapter = validate_adapter(chosen, base, default_bands, issues)?;
    let burst = positive(raw.submit_burst, "mss.submit_burst", issues) as u32;
    let batch = positive(raw.submit_batch, "mss.submit_batch", issues);
    let retry = RetrySettings {
        max_attempts: positive(raw.retry_max_attempts, "mss.retry_max_attempts", issues) as u32,
        base: Duration::from_millis(positive(raw.retry_base_ms, "mss.retry_base_ms", issues) as u64),
        max: Duration::from_millis(positive(raw.retry_max_ms, "mss.retry_max_ms", issues) as u64),
    };
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
    })
}

/// Which adapter `mss.adapter` names, with its table; every key or table set for another
/// adapter is refused, naming what to change.
fn choose_adapter<'a>(raw: &'a RawMss, issues: &mut Issues) -> Option<ChosenAdapter<'a>> {
    let simulator = match &raw.simulator {
        Some(s) if s.enabled => validate_simulator(s, issues),
        _ => None,
    };
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
            simulator,
        }),
        "encp" => Some(ChosenAdapter::Encp(raw.encp.clone().unwrap_or_default())),
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
            if let Some(u) = url {
                if !(u.starts_with("http://") || u.starts_with("https://")) {
                    issues.add(
                        "mss.url",
                        format!("`{u}` must start with http:// or https://"),
                    );
                }
            }
            Some(AdapterSettings::Http {
                url: url.map(str::to_string),
                simulator,
            })
        }
        ChosenAdapter::Encp(table) => match table.validate(base) {
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
    if !(s.rate_mb_per_sec > 0.0 && s.rate_mb_per_sec.is_finite()) {
        issues.add("mss.simulator.rate_mb_per_sec", "must be above 0");
    }
    if !(s.time_scale > 0.0 && s.time_scale.is_finite()) {
        issues.add("mss.simulator.time_scale", "must be above 0");
    }
    if !(0.0..=1.0).contains(&s.failure_rate) {
        issues.add("mss.simulator.failure_rate", "must be between 0 and 1");
    }
    Some(SimulatorSettings {
        listen,
        drives: positive(s.drives, "mss.simulator.drives", issues),
        mount_seconds: s.mount_seconds,
        bytes_per_sec: (s.rate_mb_per_sec * 1e6) as u64,
        time_scale: s.time_scale,
        failure_rate: s.failure_rate,
        seed: s.seed as u64,
        aging: sim_aging(s, issues),
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

/// Check the adapter's capabilities against the ordering policy: refuse what cannot work,
/// each issue naming the key to change; note what works with less than the policy asks.
pub(super) fn check_against_policy(
    mss: &MssSettings,
    policy: &PolicySettings,
    issues: &mut Issues,
    notes: &mut Vec<String>,
) {
    let caps = mss.adapter.capabilities();
    let name = mss.adapter.name();
    let order = &policy.order;
    let held = order.held();
    let classes: Vec<(usize, &str, i64)> = policy
        .groups
        .iter()
        .filter_map(|g| match g.kind {
            GroupKind::Priority { rank, mss_priority } => {
                Some((rank, g.path.as_str(), mss_priority))
            }
            GroupKind::FairShare { .. } => None,
        })
        .collect();
    if let AdapterSettings::Encp(c) = &mss.adapter {
        if c.local_roots.is_empty() {
            notes.push(
                "mss.encp.local_roots is empty: a station may name any absolute path the broker's \
                 user can write (a read's local_file) or read (a write's); set the directories \
                 stations may use"
                    .into(),
            );
        }
        for class in c.classes.keys() {
            if !classes.iter().any(|(_, path, _)| path == class) {
                let known: Vec<&str> = classes.iter().map(|(_, p, _)| *p).collect();
                issues.add(
                    format!("mss.encp.classes.\"{class}\""),
                    format!("is not a priority class (known: {})", known.join(", ")),
                );
            }
        }
    }
    // Priorities the broker may send: (key, value, is a priority class).
    let mut sent: Vec<(String, i64, bool)> = classes
        .iter()
        .filter(|(_, path, _)| match &mss.adapter {
            AdapterSettings::Encp(c) => c.classes.get(*path).and_then(|k| k.priority).is_none(),
            _ => true,
        })
        .map(|(rank, _, p)| (format!("priority_classes[{rank}].mss_priority"), *p, true))
        .collect();
    match order.algorithm {
        Algorithm::Sam => {
            sent.push(("policy.p_front".into(), policy.p_front, false));
            sent.push(("policy.p_back".into(), policy.p_back, false));
        }
        _ => {
            sent.push(("policy.band_low".into(), order.band_low, false));
            sent.push(("policy.band_high".into(), order.band_high, false));
        }
    }
    if order.max_wait_ms.is_some() && !held {
        sent.push((
            "policy.starved_priority".into(),
            order.starved_priority,
            false,
        ));
    }
    match &caps.priority {
        PriorityScale::None => {
            if !held {
                issues.add(
                    "release.mode",
                    format!(
                        "the {name} adapter's MSS takes no priority, so \"pass_through\" could not order \
                         anything there: set release.mode = \"held\" (the broker then orders requests \
                         itself and keeps at most release.limit outstanding per library)"
                    ),
                );
            }
        }
        PriorityScale::Direct { min, max } => {
            for (key, p, _) in &sent {
                if !(*min..=*max).contains(p) {
                    issues.add(
                        key.clone(),
                        format!("{p} is outside the priorities the {name} adapter's MSS takes ({min} to {max})"),
                    );
                }
            }
        }
        PriorityScale::Bands(bands) => check_bands(&caps.priority, bands, &sent, order, issues),
    }
    if let Some(max) = caps.max_outstanding {
        if held {
            let key = match &mss.adapter {
                AdapterSettings::Encp(_) => "mss.encp.max_processes",
                AdapterSettings::Fts3(_) => "mss.fts3.max_outstanding",
                AdapterSettings::TapeRest(_) => "mss.tape_rest.max_outstanding",
                AdapterSettings::Http { .. } => "mss",
            };
            let limits = std::iter::once(("release.limit".to_string(), order.release.limit)).chain(
                order
                    .release
                    .libraries
                    .iter()
                    .map(|(lib, n)| (format!("release.libraries.\"{lib}\""), *n)),
            );
            for (lkey, limit) in limits {
                if limit as usize > max {
                    issues.add(
                        lkey,
                        format!(
                            "lets {limit} transfers be outstanding, but the {name} adapter takes at most \
                             {max} at once ({key}): lower it below {max}, leaving room for priority classes"
                        ),
                    );
                } else if limit as usize == max && !classes.is_empty() {
                    notes.push(format!(
                        "{lkey} equals {key} ({max}): when every slot is taken, a priority class's \
                         request waits for a running transfer to end; a lower limit keeps room for it"
                    ));
                }
            }
        }
    }
    if order.reprioritise.is_some() && !caps.reprioritize && caps.priority != PriorityScale::None {
        let how = match &mss.adapter {
            AdapterSettings::Encp(_) => " (set mss.encp.reprioritize_command)",
            _ => "",
        };
        notes.push(format!(
            "policy.reprioritise_secs is set, but the {name} adapter cannot change priorities at the \
             MSS{how}: requests keep the priority they were submitted with"
        ));
    }
}

/// With a few MSS levels: every priority must map, priority classes must stay strictly above
/// every fair-share priority, and in pass-through SAM's front must stay above back.
fn check_bands(
    scale: &PriorityScale,
    bands: &[Band],
    sent: &[(String, i64, bool)],
    order: &crate::policy::order::OrderSettings,
    issues: &mut Issues,
) {
    let mut fair_max: Option<(String, i64, i64)> = None;
    for (key, p, class) in sent {
        let Some(level) = scale.map(*p) else {
            issues.add(
                key.clone(),
                format!(
                    "{p} is below the first of mss.fts3.priority_bands (from = {})",
                    bands.first().map_or(0, |b| b.from)
                ),
            );
            continue;
        };
        if !class && fair_max.as_ref().is_none_or(|(_, _, l)| level > *l) {
            fair_max = Some((key.clone(), *p, level));
        }
    }
    if let Some((fkey, fp, flevel)) = &fair_max {
        for (key, p, class) in sent.iter().filter(|s| s.2) {
            let _ = class;
            if scale.map(*p).is_some_and(|l| l <= *flevel) {
                issues.add(
                    "mss.fts3.priority_bands",
                    format!(
                        "{key} ({p}) reaches FTS3 at priority {} like {fkey} ({fp}): data taking would \
                         not be ahead of fair share there; give priority classes a band of their own",
                        scale.map(*p).unwrap_or(0)
                    ),
                );
            }
        }
    }
    if order.algorithm == Algorithm::Sam && !order.held() {
        let front = sent.iter().find(|s| s.0 == "policy.p_front").map(|s| s.1);
        let back = sent.iter().find(|s| s.0 == "policy.p_back").map(|s| s.1);
        if let (Some(f), Some(b)) = (front, back) {
            if scale.map(f).is_some() && scale.map(f) == scale.map(b) {
                issues.add(
                    "mss.fts3.priority_bands",
                    format!(
                        "policy.p_front ({f}) and policy.p_back ({b}) reach FTS3 at the same priority: \
                         SAM's front and back would mean nothing there; put p_front in a higher band"
                    ),
                );
            }
        }
    }
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
    )
}

#[cfg(test)]
mod tests {
    use super::super::{ConfigError, Settings};

    const POLICY: &str = r#"
[policy]
p_front = 20
p_back = 10
reprioritise_secs = 0

[[priority_classes]]
access_mode = "datataking"
mss_priority = 100

[shares]
"analysis" = 1
"mc" = 1
"#;

    /// Parse `POLICY` plus `rest`, with files taken from `dir`.
    fn parse(rest: &str, dir: &std::path::Path) -> Result<Settings, Vec<String>> {
        match Settings::parse_in(&format!("{POLICY}\n{rest}"), "t", dir) {
            Ok(s) => Ok(s),
            Err(ConfigError::Invalid { issues, .. }) => {
                Err(issues.iter().map(|i| i.to_string()).collect())
            }
            Err(e) => Err(vec![e.to_string()]),
        }
    }

    fn issues(rest: &str) -> Vec<String> {
        let dir = tempfile::tempdir().unwrap();
        std::fs::write(dir.path().join("token"), "t").unwrap();
        parse(rest, dir.path()).err().unwrap_or_default()
    }

    fn has(found: &[String], key: &str, words: &str) -> bool {
        found
            .iter()
            .any(|i| i.starts_with(&format!("{key}:")) && i.contains(words))
    }

    const TAPE_REST: &str = r#"
[mss]
adapter = "tape_rest"
[mss.tape_rest]
url = "https://dcache.example.org:3880/api/v1/tape"
auth = { method = "none" }
"#;

    #[test]
    fn an_mss_that_takes_no_priority_needs_the_held_release_mode() {
        let found = issues(TAPE_REST);
        assert!(
            has(&found, "release.mode", "set release.mode = \"held\""),
            "{found:?}"
        );
        let held = format!("{TAPE_REST}\n[release]\nmode = \"held\"\nlimit = 4\n");
        assert_eq!(issues(&held), Vec::<String>::new());
    }

    #[test]
    fn a_disk_lifetime_dcache_cannot_parse_is_refused_with_the_reason() {
        // dCache reads diskLifetime with Java's Duration.parse: no years, months or weeks.
        for (lifetime, unit) in [("P2W", "weeks"), ("P1Y", "years"), ("P1M", "months")] {
            let config =
                format!("{TAPE_REST}disk_lifetime = \"{lifetime}\"\n[release]\nmode = \"held\"\n");
            let found = issues(&config);
            assert!(
                has(&found, "mss.tape_rest.disk_lifetime", unit)
                    && has(&found, "mss.tape_rest.disk_lifetime", "Duration.parse"),
                "{lifetime}: {found:?}"
            );
        }
        let ok = format!("{TAPE_REST}disk_lifetime = \"P14D\"\n[release]\nmode = \"held\"\n");
        assert_eq!(issues(&ok), Vec::<String>::new());
    }

    #[test]
    fn encp_takes_priorities_from_1_and_at_most_max_processes_outstanding() {
        let encp =
            "[mss]\nadapter = \"encp\"\n[mss.encp]\nmax_processes = 4\nlocal_roots = [\"/data\"]\n";
        assert_eq!(issues(encp), Vec::<String>::new());
        let dir = tempfile::tempdir().unwrap();
        let back_0 = format!("{POLICY}\n{encp}").replace("p_back = 10", "p_back = 0");
        let found = match Settings::parse_in(&back_0, "t", dir.path()) {
            Err(ConfigError::Invalid { issues, .. }) => {
                issues.iter().map(|i| i.to_string()).collect::<Vec<_>>()
            }
            other => panic!("{:?}", other.map(|_| ())),
        };
        assert!(
            has(
                &found,
                "policy.p_back",
                "0 is outside the priorities the encp adapter's MSS takes (1 to 1000001)"
            ),
            "{found:?}"
        );
        let held = format!(
            "{encp}\n[release]\nmode = \"held\"\nlimit = 8\n[release.libraries]\n\"LTO8\" = 2\n"
        );
        let found = issues(&held);
        assert!(
            has(
                &found,
                "release.limit",
                "at most 4 at once (mss.encp.max_processes)"
            ),
            "{found:?}"
        );
        assert_eq!(found.len(), 1, "the LTO8 limit fits: {found:?}");
        // Equal is allowed, with a note that nothing is left for priority classes.
        let s = parse(
            &format!("{encp}\n[release]\nmode = \"held\"\nlimit = 4\n"),
            dir.path(),
        )
        .unwrap();
        assert!(
            s.notes
                .iter()
                .any(|n| n.contains("release.limit equals mss.encp.max_processes")),
            "{:?}",
            s.notes
        );
    }

    #[test]
    fn encp_classes_must_be_priority_classes_and_admin_priority_needs_encp_daq() {
        let found = issues(
            "[mss]\nadapter = \"encp\"\n[mss.encp.classes.\"datataking\"]\npriority = 2000002\n",
        );
        assert!(
            has(
                &found,
                "mss.encp.classes.\"datataking\".priority",
                "set env.ENCP_DAQ"
            ),
            "{found:?}"
        );
        let found = issues("[mss]\nadapter = \"encp\"\n[mss.encp.classes.\"mc\"]\npriority = 5\n");
        assert!(
            has(
                &found,
                "mss.encp.classes.\"mc\"",
                "is not a priority class (known: datataking)"
            ),
            "{found:?}"
        );
        let ok = "[mss]\nadapter = \"encp\"\n[mss.encp]\nlocal_roots = [\"/data\"]\n\
                  [mss.encp.classes.\"datataking\"]\n\
                  priority = 2000002\nenv = { ENCP_DAQ = \"1\" }\n";
        assert_eq!(issues(ok), Vec::<String>::new());
    }

    /// Issue 18, item 6: the simulator can age its queue as Enstore's library manager does.
    #[test]
    fn the_simulator_ages_as_enstore_when_asked() {
        let dir = tempfile::tempdir().unwrap();
        let sim = |extra: &str| {
            format!("[mss]\nadapter = \"http\"\n[mss.simulator]\nenabled = true\n{extra}")
        };
        let aging = |extra: &str| match parse(&sim(extra), dir.path()).unwrap().mss.adapter {
            super::AdapterSettings::Http { simulator, .. } => simulator.unwrap().aging,
            _ => panic!("not the simulator"),
        };
        assert_eq!(aging(""), None);
        assert_eq!(
            aging("age_time_minutes = 30\n"),
            Some(mss_adapters::sim::library::Aging::ENSTORE)
        );
        let found = issues(&sim("age_time_minutes = -1\n"));
        assert!(
            has(&found, "mss.simulator.age_time_minutes", "0 (off)"),
            "{found:?}"
        );
    }

    #[test]
    fn an_encp_note_says_reprioritisation_cannot_reach_the_mss() {
        let dir = tempfile::tempdir().unwrap();
        let text = format!("{POLICY}\n[mss]\nadapter = \"encp\"\n")
            .replace("reprioritise_secs = 0", "reprioritise_secs = 60");
        let s = Settings::parse_in(&text, "t", dir.path()).unwrap();
        assert!(
            s.notes
                .iter()
                .any(|n| n.contains("set mss.encp.reprioritize_command")),
            "{:?}",
            s.notes
        );
    }

    const FTS3: &str = r#"
[mss]
adapter = "fts3"
[mss.fts3]
url = "https://fts3.example.org:8446"
vo = "cms"
tape_endpoint = "davs://tape.example.org:2880"
auth = { method = "certificate", certificate = "token", key = "token" }
"#;

    #[test]
    fn fts3_bands_must_keep_data_taking_ahead_and_front_above_back() {
        assert_eq!(issues(FTS3), Vec::<String>::new(), "the default bands work");
        let bands = |list: &str| format!("{FTS3}priority_bands = {list}\n");
        let found = issues(&bands(
            "[{ from = 0, priority = 1 }, { from = 20, priority = 4 }]",
        ));
        assert!(
            has(&found, "mss.fts3.priority_bands", "priority_classes[0].mss_priority (100) reaches FTS3 at priority 4 like policy.p_front (20)"),
            "{found:?}"
        );
        let found = issues(&bands(
            "[{ from = 0, priority = 2 }, { from = 100, priority = 5 }]",
        ));
        assert!(
            has(
                &found,
                "mss.fts3.priority_bands",
                "SAM's front and back would mean nothing"
            ),
            "{found:?}"
        );
        let found = issues(&bands(
            "[{ from = 15, priority = 2 }, { from = 20, priority = 3 }, { from = 100, priority = 5 }]",
        ));
        assert!(
            has(
                &found,
                "policy.p_back",
                "below the first of mss.fts3.priority_bands (from = 15)"
            ),
            "{found:?}"
        );
    }

    #[test]
    fn fts3_refuses_tokens_with_tape_and_names_missing_files() {
        let token = FTS3.replace(
            "auth = { method = \"certificate\", certificate = \"token\", key = \"token\" }",
            "auth = { method = \"bearer\", token_file = \"token\" }",
        );
        let found = issues(&token);
        assert!(
            has(&found, "mss.fts3.auth.method", "token authentication"),
            "{found:?}"
        );
        let disk_only = format!("{token}bring_online_secs = 0\narchive_timeout_secs = 0\n");
        assert_eq!(issues(&disk_only), Vec::<String>::new());
        let missing = FTS3.replace("key = \"token\"", "key = \"nope.pem\"");
        let found = issues(&missing);
        assert!(
            has(
                &found,
                "mss.fts3.auth.key",
                "nope.pem` is not a readable file"
            ),
            "{found:?}"
        );
    }

    #[test]
    fn adapter_tables_must_match_the_adapter() {
        let found = issues(
            "[mss]\nadapter = \"encp\"\nurl = \"http://x:1\"\n[mss.simulator]\nenabled = true\n\
             [mss.fts3]\nurl = \"https://f\"\nvo = \"v\"\ntape_endpoint = \"davs://t/\"\n",
        );
        for key in ["mss.fts3", "mss.simulator", "mss.url"] {
            assert!(has(&found, key, ""), "{key}: {found:?}");
        }
        assert!(has(
            &issues("[mss]\nadapter = \"fts3\"\n"),
            "mss.fts3",
            "needed"
        ));
        assert!(has(
            &issues("[mss]\nadapter = \"castor\"\n"),
            "mss.adapter",
            "known: http, encp, fts3, tape_rest"
        ));
        let typo = issues("[mss]\nadapter = \"encp\"\n[mss.encp]\nmax_process = 4\n");
        assert!(
            typo.iter().any(|i| i.contains("max_process")),
            "unknown keys are refused: {typo:?}"
        );
    }

    /// The commented example table of an adapter in the shipped file, uncommented.
    fn shipped_example(adapter: &str) -> String {
        let text = super::super::EMBEDDED;
        let start = text
            .find(&format!("# --- {adapter}:"))
            .unwrap_or_else(|| panic!("no example for {adapter}"));
        let block = &text[start..];
        let table = block.find("# [mss.").expect("a table in the example");
        let block = &block[table..];
        let end = block.find("\n# --- ").unwrap_or(block.len());
        block[..end]
            .lines()
            .map(|l| l.strip_prefix("# ").unwrap_or(l.trim_start_matches('#')))
            .collect::<Vec<_>>()
            .join("\n")
    }

    /// The shipped file with `adapter`, its simulator off, and the example table appended.
    fn shipped_with(adapter: &str, dir: &std::path::Path) -> Result<Settings, ConfigError> {
        let mut text = super::super::EMBEDDED
            .replace("adapter = \"http\"", &format!("adapter = \"{adapter}\""))
            .replace("enabled = true", "enabled = false");
        if adapter == "tape_rest" {
            text = text.replace("mode = \"pass_through\"", "mode = \"held\"");
        }
        let example = shipped_example(adapter).replace(
            "/data/stage",
            dir.join("stage").to_str().expect("utf-8 path"),
        );
        Settings::parse_in(&format!("{text}\n{example}\n"), "shipped example", dir)
    }

    #[test]
    fn every_documented_adapter_example_in_the_shipped_file_is_valid() {
        let dir = tempfile::tempdir().unwrap();
        std::fs::create_dir_all(dir.path().join("stage")).unwrap();
        for f in ["fts3-cert.pem", "fts3-key.pem", "grid-ca.pem", "tape-token"] {
            std::fs::write(dir.path().join(f), "placeholder").unwrap();
        }
        for adapter in ["encp", "fts3", "tape_rest"] {
            let s = shipped_with(adapter, dir.path())
                .unwrap_or_else(|e| panic!("{adapter} example: {e}"));
            assert_eq!(s.mss.adapter.name(), adapter);
            assert!(s.notes.is_empty(), "{adapter}: {:?}", s.notes);
        }
        // The examples say what they claim.
        let s = shipped_with("encp", dir.path()).unwrap();
        let super::AdapterSettings::Encp(c) = &s.mss.adapter else {
            panic!()
        };
        assert_eq!(c.classes["datataking"].priority, Some(2_000_002));
        assert!(c.capabilities().reprioritize);
        let s = shipped_with("fts3", dir.path()).unwrap();
        assert_eq!(
            s.mss.adapter.capabilities().priority.map(100),
            Some(5),
            "data taking at FTS3's top priority"
        );
    }

    /// Merge `over` into `base`, tables key by key, `over` winning.
    fn merge(base: &mut toml::Table, over: toml::Table) {
        for (k, v) in over {
            match (base.get_mut(&k), v) {
                (Some(toml::Value::Table(b)), toml::Value::Table(o)) => merge(b, o),
                (_, v) => {
                    base.insert(k, v);
                }
            }
        }
    }

    #[test]
    fn the_readmes_adapter_examples_are_valid_on_the_shipped_config() {
        let readme = include_str!("../../README.md");
        let section = &readme[readme.find("## MSS adapters").expect("the section")..];
        let section = &section[..section[3..].find("\n## ").map_or(section.len(), |i| i + 3)];
        let dir = tempfile::tempdir().unwrap();
        std::fs::create_dir_all(dir.path().join("stage")).unwrap();
        for f in ["fts3-cert.pem", "fts3-key.pem", "tape-token"] {
            std::fs::write(dir.path().join(f), "placeholder").unwrap();
        }
        let mut checked = Vec::new();
        for block in section.split("```toml\n").skip(1) {
            let snippet = &block[..block.find("```").expect("a closed block")];
            let snippet =
                snippet.replace("/data/stage", dir.path().join("stage").to_str().unwrap());
            let mut config: toml::Table = toml::from_str(super::super::EMBEDDED).unwrap();
            merge(
                &mut config,
                toml::from_str(&snippet).expect("a TOML snippet"),
            );
            if let Some(toml::Value::Table(mss)) = config.get_mut("mss") {
                mss.remove("simulator");
            }
            let text = toml::to_string(&config).unwrap();
            let s = Settings::parse_in(&text, "README example", dir.path())
                .unwrap_or_else(|e| panic!("README example\n{snippet}\n{e}"));
            checked.push(s.mss.adapter.name());
        }
        assert_eq!(checked, ["encp", "fts3", "tape_rest"]);
    }
}
