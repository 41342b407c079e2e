//! Configuration: the TOML file is read into raw structs, then validated into typed [`Settings`].
//! Every validation error names the key it is about. The shipped `config/broker.toml` is also
//! embedded in the binary, so `mssbroker serve` runs with no file at all.

use std::collections::{BTreeMap, HashMap};
use std::fmt;
use std::net::SocketAddr;
use std::path::{Path, PathBuf};
use std::sync::Arc;
use std::time::Duration;

mod mss;
mod order;
mod raw;

use raw::{RawConfig, RawLimits, RawPolicy, RawServer, RawTarget, RawUsage};

use crate::api::InputLimits;
use crate::dispatcher::MssSettings;
use crate::domain::{
    Benefit, DeltaForm, Fraction, GroupId, GroupInfo, GroupKind, GroupPath, NodeLimits,
    PolicySettings, Rule, ShareNode, ShareTree,
};
use crate::server::ServerSettings;
use crate::shares::model::{UsageModel, MAX_WINDOW_UNIT};

/// The shipped configuration, used when no file is given and `config/broker.toml` is absent.
pub const EMBEDDED: &str = include_str!("../../config/broker.toml");
/// Where `serve` looks for a configuration file when none is named.
pub const DEFAULT_PATH: &str = "config/broker.toml";

/// One thing wrong with a configuration, and the key it is about.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct ConfigIssue {
    pub key: String,
    pub message: String,
}

impl fmt::Display for ConfigIssue {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        write!(f, "{}: {}", self.key, self.message)
    }
}

/// Why a configuration could not be used.
#[derive(Debug, thiserror::Error)]
pub enum ConfigError {
    #[error("cannot read {path}: {source}")]
    Read {
        path: PathBuf,
        source: std::io::Error,
    },
    #[error("{origin}: not valid TOML for this configuration: {message}")]
    Syntax { origin: String, message: String },
    #[error("{origin}: {} problem(s):\n{}", issues.len(), issues.iter().map(|i| format!("  {i}")).collect::<Vec<_>>().join("\n"))]
    Invalid {
        origin: String,
        issues: Vec<ConfigIssue>,
    },
}

// ---------------------------------------------------------------------------------------------
// Validated settings
// ---------------------------------------------------------------------------------------------

/// Everything the broker needs, validated.
#[derive(Debug, Clone)]
pub struct Settings {
    /// Where the configuration came from (a path, or "embedded").
    pub origin: String,
    /// The token file (`[auth] token_file`, relative to the configuration's directory); `None`
    /// turns authentication off.
    pub token_file: Option<PathBuf>,
    pub server: ServerSettings,
    pub database: DatabaseSettings,
    pub policy: Arc<PolicySettings>,
    pub limits: InputLimits,
    pub mss: MssSettings,
    /// What works, but with less than the configuration seems to ask (shown by `check-config`,
    /// logged by `serve`).
    pub notes: Vec<String>,
}

#[derive(Debug, Clone)]
pub struct DatabaseSettings {
    pub path: PathBuf,
    /// Most commands one group commit takes.
    pub commit_batch_max: usize,
}

// ---------------------------------------------------------------------------------------------
// Loading
// ---------------------------------------------------------------------------------------------

impl Settings {
    /// Read and validate a file.
    pub fn load(path: &Path) -> Result<Settings, ConfigError> {
        let text = std::fs::read_to_string(path).map_err(|source| ConfigError::Read {
            path: path.to_path_buf(),
            source,
        })?;
        let base = path.parent().unwrap_or(Path::new("."));
        let mut settings = Settings::parse_in(&text, &path.display().to_string(), base)?;
        // A relative token file is next to the configuration, wherever serve is started.
        if let (Some(file), Some(dir)) = (&settings.token_file, path.parent()) {
            if file.is_relative() {
                settings.token_file = Some(dir.join(file));
            }
        }
        Ok(settings)
    }

    /// The named file, else `config/broker.toml` if present, else the embedded copy.
    pub fn load_default(path: Option<&Path>) -> Result<Settings, ConfigError> {
        match path {
            Some(p) => Settings::load(p),
            None if Path::new(DEFAULT_PATH).exists() => Settings::load(Path::new(DEFAULT_PATH)),
            None => Settings::parse(EMBEDDED, "embedded config/broker.toml"),
        }
    }

    /// Validate TOML text; `origin` names it in errors. Files it names are taken from the
    /// working directory.
    pub fn parse(text: &str, origin: &str) -> Result<Settings, ConfigError> {
        Settings::parse_in(text, origin, Path::new("."))
    }

    /// Validate TOML text whose relative file names are taken from `base`.
    pub fn parse_in(text: &str, origin: &str, base: &Path) -> Result<Settings, ConfigError> {
        let raw: RawConfig = toml::from_str(text).map_err(|e| ConfigError::Syntax {
            origin: origin.to_string(),
            message: e.to_string().trim_end().to_string(),
        })?;
        let mut issues = Issues::default();
        let settings = validate(raw, origin, base, &mut issues);
        match settings {
            Some(s) if issues.0.is_empty() => Ok(s),
            _ => Err(ConfigError::Invalid {
                origin: origin.to_string(),
                issues: issues.0,
            }),
        }
    }
}

#[derive(Default)]
struct Issues(Vec<ConfigIssue>);

impl Issues {
    fn add(&mut self, key: impl Into<String>, message: impl Into<String>) {
        self.0.push(ConfigIssue {
            key: key.into(),
            message: message.into(),
        });
    }
}

/// `[server]` validated; every refusal names its key.
fn validate_server(raw: &RawServer, issues: &mut Issues) -> Option<ServerSettings> {
    let listen = parse_addr(&raw.listen, "server.listen", issues);
    let mut within = |v: i64, key: &str, max: i64, unit: &str| -> i64 {
        if !(1..=max).contains(&v) {
            issues.add(key, format!("must be within 1..={max}{unit}, got {v}"));
        }
        v.clamp(1, max)
    };
    let max_connections = within(raw.max_connections, "server.max_connections", 1_000_000, "");
    let ms = |v: i64| Duration::from_millis(v as u64);
    let header_read_timeout = ms(within(
        raw.header_read_timeout_ms,
        "server.header_read_timeout_ms",
        3_600_000,
        " ms",
    ));
    let idle_timeout = ms(within(
        raw.idle_timeout_ms,
        "server.idle_timeout_ms",
        3_600_000,
        " ms",
    ));
    let body_timeout = ms(within(
        raw.body_timeout_ms,
        "server.body_timeout_ms",
        3_600_000,
        " ms",
    ));
    if idle_timeout < header_read_timeout {
        issues.add(
            "server.idle_timeout_ms",
            "may not be below server.header_read_timeout_ms (it would cut a request head short)",
        );
    }
    Some(ServerSettings {
        listen: listen?,
        max_connections: max_connections as usize,
        header_read_timeout,
        idle_timeout,
        body_timeout,
    })
}

// ---------------------------------------------------------------------------------------------
// Validation
// ---------------------------------------------------------------------------------------------

/// Largest denominator a leaf's fraction may have, so exact share comparisons stay in u128.
const MAX_SHARE_DEN: u128 = 1 << 48;

fn validate(raw: RawConfig, origin: &str, base: &Path, issues: &mut Issues) -> Option<Settings> {
    let server = validate_server(&raw.server, issues);
    let database = DatabaseSettings {
        path: PathBuf::from(&raw.database.path),
        commit_batch_max: positive(
            raw.database.commit_batch_max,
            "database.commit_batch_max",
            issues,
        ),
    };
    if raw.database.path.is_empty() {
        issues.add("database.path", "may not be empty");
    }
    let limits = validate_limits(&raw.limits, issues);
    let policy = validate_policy(&raw, issues);
    let bands = mss::default_bands(
        raw.policy.p_front,
        raw.priority_classes.iter().map(|c| c.mss_priority).min(),
    );
    let mss = mss::validate_mss(raw.mss, base, bands, issues);
    let mut notes = Vec::new();
    if let (Some(m), Some(p)) = (&mss, &policy) {
        mss::check_against_policy(m, p, issues, &mut notes);
    }
    let token_file = match raw.auth {
        Some(a) if a.token_file.is_empty() => {
            issues.add(
                "auth.token_file",
                "may not be empty (remove [auth] to turn authentication off)",
            );
            None
        }
        Some(a) => Some(PathBuf::from(a.token_file)),
        None => None,
    };
    Some(Settings {
        origin: origin.to_string(),
        token_file,
        server: server?,
        database,
        policy: Arc::new(policy?),
        limits,
        mss: mss?,
        notes,
    })
}

fn parse_addr(s: &str, key: &str, issues: &mut Issues) -> Option<SocketAddr> {
    match s.parse::<SocketAddr>() {
        Ok(a) => Some(a),
        Err(_) => {
            issues.add(
                key,
                format!("`{s}` is not an address such as 127.0.0.1:8080"),
            );
            None
        }
    }
}

fn positive(v: i64, key: &str, issues: &mut Issues) -> usize {
    if v <= 0 {
        issues.add(key, format!("must be a positive integer, got {v}"));
        return 1;
    }
    v as usize
}

fn validate_limits(raw: &RawLimits, issues: &mut Issues) -> InputLimits {
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

/// A request's benefit is stored as an i64 (`requests.charged`): refuse a weight for which the
/// largest request allowed (`limits.max_size_bytes`) would be worth more.
fn check_weight_bound(mode: &str, weight: i64, max_size_bytes: i64, issues: &mut Issues) {
    if weight <= 0 || max_size_bytes <= 0 {
        return; // reported as not positive
    }
    let max_weight = i64::MAX / max_size_bytes;
    if weight > max_weight {
        issues.add(
            format!("policy.benefit_weights.{mode}"),
            format!(
                "{weight} times limits.max_size_bytes ({max_size_bytes}) exceeds the largest \
                 benefit a request may have (2^63 - 1); at most {max_weight}"
            ),
        );
    }
}

fn validate_policy(raw: &RawConfig, issues: &mut Issues) -> Option<PolicySettings> {
    let p = &raw.policy;
    let benefit = match p.benefit.as_str() {
        "bytes" | "files" if !p.benefit_weights.is_empty() => {
            issues.add(
                "policy.benefit_weights",
                "only used with benefit = \"weighted_bytes\"",
            );
            None
        }
        "bytes" => Some(Benefit::Bytes),
        "files" => Some(Benefit::Files),
        "weighted_bytes" => {
            let mut w = BTreeMap::new();
            for (mode, &v) in &p.benefit_weights {
                if v <= 0 {
                    issues.add(
                        format!("policy.benefit_weights.{mode}"),
                        format!("must be a positive integer, got {v}"),
                    );
                }
                check_weight_bound(mode, v, raw.limits.max_size_bytes, issues);
                w.insert(mode.clone(), v.max(1) as u64);
            }
            Some(Benefit::WeightedBytes(w))
        }
        other => {
            issues.add(
                "policy.benefit",
                format!("`{other}` is not one of bytes, files, weighted_bytes"),
            );
            None
        }
    };

    let mut groups = Vec::new();
    let mut by_path = HashMap::new();
    let mut class_by_mode = HashMap::new();
    let mut last_priority: Option<i64> = None;
    for (rank, class) in raw.priority_classes.iter().enumerate() {
        let key = format!("priority_classes[{rank}]");
        let Ok(path) = GroupPath::parse(&class.access_mode) else {
            issues.add(
                format!("{key}.access_mode"),
                format!(
                    "`{}` must be a lower-case name (a-z, 0-9, _, -, .)",
                    class.access_mode
                ),
            );
            continue;
        };
        if class_by_mode.contains_key(&class.access_mode) {
            issues.add(
                format!("{key}.access_mode"),
                format!("`{}` is listed twice", class.access_mode),
            );
            continue;
        }
        if let Some(prev) = last_priority {
            if class.mss_priority >= prev {
                issues.add(
                    format!("{key}.mss_priority"),
                    format!(
                        "classes are listed highest first: {} must be below the previous class's {prev}",
                        class.mss_priority
                    ),
                );
            }
        }
        last_priority = Some(class.mss_priority);
        let id = GroupId(groups.len());
        class_by_mode.insert(class.access_mode.clone(), id);
        by_path.insert(path.as_str().to_string(), id);
        groups.push(GroupInfo {
            path,
            kind: GroupKind::Priority {
                rank,
                mss_priority: class.mss_priority,
            },
            ancestors: Vec::new(),
        });
    }
    if let Some(p0) = raw.priority_classes.iter().map(|c| c.mss_priority).min() {
        if p.p_front >= p0 {
            issues.add(
                "policy.p_front",
                format!(
                    "must be below every priority class's mss_priority (lowest is {p0}), got {}",
                    p.p_front
                ),
            );
        }
    }
    if p.p_back >= p.p_front {
        issues.add(
            "policy.p_back",
            format!(
                "must be below policy.p_front ({}), got {}",
                p.p_front, p.p_back
            ),
        );
    }

    let mut tree = build_tree(&raw.shares, issues)?;
    for i in tree.depth_first() {
        let node = &tree.nodes[i];
        if !node.is_leaf() {
            continue;
        }
        if by_path.contains_key(node.path.as_str()) {
            issues.add(
                format!("shares.\"{}\"", node.path),
                "has the name of a priority class",
            );
            continue;
        }
        let id = GroupId(groups.len());
        by_path.insert(node.path.as_str().to_string(), id);
        let mut ancestors = vec![i];
        while let Some(p) = tree.nodes[*ancestors.last().unwrap_or(&i)].parent {
            ancestors.push(p);
        }
        ancestors.reverse();
        for &a in &ancestors {
            tree.nodes[a].leaves.push(id);
        }
        groups.push(GroupInfo {
            path: tree.nodes[i].path.clone(),
            kind: GroupKind::FairShare {
                share: tree.nodes[i].fraction,
            },
            ancestors,
        });
    }
    validate_targets(&raw.targets, &mut tree, issues);
    let usage_model = validate_usage(&raw.usage, issues);
    let fs_delta = match p.fairshare_delta.as_str() {
        "difference" => DeltaForm::Difference,
        "percent" => DeltaForm::Percent,
        other => {
            issues.add(
                "policy.fairshare_delta",
                format!("`{other}` is not one of difference, percent"),
            );
            DeltaForm::Difference
        }
    };

    let leaf = |name: &str, key: String, issues: &mut Issues| -> Option<GroupId> {
        match by_path.get(name) {
            Some(&id) => Some(id),
            None => {
                issues.add(
                    key,
                    format!("`{name}` is not a priority class or a leaf of [shares]"),
                );
                None
            }
        }
    };
    let mut rules = Vec::new();
    for (i, r) in raw.classification.rules.iter().enumerate() {
        let key = format!("classification.rules[{i}]");
        let all_empty = r.access_mode.is_none()
            && r.physics_group.is_none()
            && r.station.is_none()
            && r.user.is_none()
            && r.path_prefix.is_none();
        if all_empty {
            issues.add(
                key.clone(),
                "matches everything: give at least one of access_mode, physics_group, station, user, path_prefix (or use classification.default_group)",
            );
        }
        if let Some(group) = leaf(&r.group, format!("{key}.group"), issues) {
            rules.push(Rule {
                access_mode: r.access_mode.clone(),
                physics_group: r.physics_group.clone(),
                station: r.station.clone(),
                user: r.user.clone(),
                path_prefix: r.path_prefix.clone(),
                group,
            });
        }
    }
    let default_group = match raw.classification.default_group.as_deref() {
        None | Some("") => None,
        Some(g) => leaf(g, "classification.default_group".into(), issues),
    };

    let p0 = raw.priority_classes.iter().map(|c| c.mss_priority).min();
    let order = order::validate_order(p, &raw.release, &groups, &by_path, p0, issues);
    Some(PolicySettings {
        order,
        p_front: p.p_front,
        p_back: p.p_back,
        benefit: benefit?,
        usage_model: usage_model?,
        fs_delta,
        held_recheck: Duration::from_millis(positive(
            raw.usage.held_recheck_ms,
            "usage.held_recheck_ms",
            issues,
        ) as u64),
        groups,
        tree,
        rules,
        default_group,
        by_path,
        class_by_mode,
    })
}

fn build_tree(table: &toml::Table, issues: &mut Issues) -> Option<ShareTree> {
    let mut nodes: Vec<ShareNode> = Vec::new();
    let mut index: HashMap<String, usize> = HashMap::new();
    let mut entries: Vec<(GroupPath, u64)> = Vec::new();
    for (key, value) in table {
        let qkey = format!("shares.\"{key}\"");
        let path = match GroupPath::parse(key) {
            Ok(p) => p,
            Err(e) => {
                issues.add(qkey, e);
                continue;
            }
        };
        match value.as_integer() {
            Some(v) if v >= 0 => entries.push((path, v as u64)),
            _ => issues.add(
                qkey,
                format!("relative shares must be a non-negative integer, got {value}"),
            ),
        }
    }
    // Parents before children, whatever order the file lists them in.
    entries.sort_by_key(|(p, _)| p.depth());
    for (path, shares) in entries {
        let parent = match path.parent() {
            None => None,
            Some(pp) => match index.get(pp.as_str()) {
                Some(&i) => Some(i),
                None => {
                    issues.add(
                        format!("shares.\"{path}\""),
                        format!("its parent `{pp}` is not listed in [shares]"),
                    );
                    continue;
                }
            },
        };
        let i = nodes.len();
        index.insert(path.as_str().to_string(), i);
        if let Some(p) = parent {
            nodes[p].children.push(i);
        }
        nodes.push(ShareNode {
            path,
            shares,
            parent,
            children: Vec::new(),
            fraction: Fraction::new(0, 1)?,
            limits: NodeLimits::default(),
            leaves: Vec::new(),
        });
    }
    if nodes.is_empty() {
        issues.add("shares", "at least one fair-share group is needed");
        return None;
    }
    // Fractions top-down: a node's share of its siblings times its parent's fraction.
    for i in 0..nodes.len() {
        let siblings: u64 = match nodes[i].parent {
            Some(p) => nodes[p].children.iter().map(|&c| nodes[c].shares).sum(),
            None => nodes
                .iter()
                .filter(|n| n.parent.is_none())
                .map(|n| n.shares)
                .sum(),
        };
        let parent_fraction = match nodes[i].parent {
            Some(p) => nodes[p].fraction,
            None => Fraction::new(1, 1)?,
        };
        let key = format!("shares.\"{}\"", nodes[i].path);
        if siblings == 0 {
            issues.add(key, "it and all its siblings have 0 shares");
            return None;
        }
        let own = Fraction::new(u128::from(nodes[i].shares), u128::from(siblings))?;
        match parent_fraction.checked_mul(own) {
            Some(f) if f.den() <= MAX_SHARE_DEN => nodes[i].fraction = f,
            _ => {
                issues.add(key, "share fractions too fine: use smaller share numbers");
                return None;
            }
        }
    }
    Some(ShareTree { nodes })
}

fn validate_usage(raw: &RawUsage, issues: &mut Issues) -> Option<UsageModel> {
    let secs_ms = |v: i64, key: &str, issues: &mut Issues| -> i64 {
        if v <= 0 || v > 100 * 365 * 86_400 {
            issues.add(
                key,
                format!("must be a number of seconds from 1 to 100 years, got {v}"),
            );
            return 1_000;
        }
        v * 1_000
    };
    let unused = |given: bool, key: &str, issues: &mut Issues| {
        if given {
            issues.add(
                key,
                format!(
                    "only used with usage.model = \"{}\"",
                    if key == "usage.half_life_secs" {
                        "half_life"
                    } else {
                        "windows"
                    }
                ),
            );
        }
    };
    match raw.model.as_str() {
        "none" | "half_life" => {
            unused(raw.interval_secs.is_some(), "usage.interval_secs", issues);
            unused(raw.depth.is_some(), "usage.depth", issues);
            unused(raw.decay.is_some(), "usage.decay", issues);
            if raw.model == "none" {
                unused(raw.half_life_secs.is_some(), "usage.half_life_secs", issues);
                return Some(UsageModel::Cumulative);
            }
            Some(UsageModel::HalfLife {
                half_life_ms: secs_ms(
                    raw.half_life_secs.unwrap_or(7 * 86_400),
                    "usage.half_life_secs",
                    issues,
                ),
            })
        }
        "windows" => {
            unused(raw.half_life_secs.is_some(), "usage.half_life_secs", issues);
            let interval_ms = secs_ms(
                raw.interval_secs.unwrap_or(12 * 3_600),
                "usage.interval_secs",
                issues,
            );
            let depth = raw.depth.unwrap_or(8);
            if !(1..=64).contains(&depth) {
                issues.add(
                    "usage.depth",
                    format!("must be 1 to 64 windows, got {depth}"),
                );
                return None;
            }
            let decay_value = raw.decay.unwrap_or(1.0);
            let decay = match Fraction::from_decimal(decay_value, 6) {
                Some(d) if d.num() > 0 && d.num() <= d.den() => d,
                _ => {
                    issues.add(
                        "usage.decay",
                        format!("must be above 0 and at most 1, with at most 6 decimals, got {decay_value}"),
                    );
                    return None;
                }
            };
            let model = UsageModel::Windows {
                interval_ms,
                depth: depth as usize,
                decay,
            };
            let exact_unit = (1..depth).try_fold(1u128, |acc, _| acc.checked_mul(decay.den()));
            match exact_unit {
                Some(u) if u <= MAX_WINDOW_UNIT => Some(model),
                _ => {
                    issues.add(
                        "usage.decay",
                        format!("decay {decay_value} ({decay}) over depth {depth} needs more precision than exact sums allow: use fewer decimals or a smaller depth"),
                    );
                    None
                }
            }
        }
        other => {
            issues.add(
                "usage.model",
                format!("`{other}` is not one of none, half_life, windows"),
            );
            None
        }
    }
}

fn validate_targets(raw: &BTreeMap<String, RawTarget>, tree: &mut ShareTree, issues: &mut Issues) {
    for (path, t) in raw {
        let key = format!("targets.\"{path}\"");
        let Some(i) = tree.nodes.iter().position(|n| n.path.as_str() == path) else {
            issues.add(
                key,
                "is not a node of [shares] (floors and caps apply to fair-share groups)",
            );
            continue;
        };
        let percent = |v: Option<f64>, name: &str, issues: &mut Issues| -> Option<Fraction> {
            let v = v?;
            match Fraction::from_decimal(v, 4).and_then(|f| Fraction::new(f.num(), f.den() * 100)) {
                Some(f) if v > 0.0 && v <= 100.0 => Some(f),
                _ => {
                    issues.add(format!("{key}.{name}"), format!("must be a percentage above 0 and at most 100 with at most 4 decimals, got {v}"));
                    None
                }
            }
        };
        let limits = NodeLimits {
            floor: percent(t.floor_percent, "floor_percent", issues),
            cap: percent(t.cap_percent, "cap_percent", issues),
            feasibility_cap_percent: percent(
                t.feasibility_cap_percent,
                "feasibility_cap_percent",
                issues,
            ),
            feasibility_cap: match t.feasibility_cap {
                Some(v) if v <= 0 => {
                    issues.add(
                        format!("{key}.feasibility_cap"),
                        format!("must be a positive amount of benefit, got {v}"),
                    );
                    None
                }
                v => v.map(|v| v as u64),
            },
        };
        if let (Some(f), Some(c)) = (limits.floor, limits.cap) {
            if f.num() * c.den() > c.num() * f.den() {
                issues.add(
                    format!("{key}.floor_percent"),
                    "must not be above cap_percent",
                );
            }
        }
        if limits.is_empty() {
            issues.add(key, "sets nothing: give floor_percent, cap_percent, feasibility_cap or feasibility_cap_percent");
        }
        tree.nodes[i].limits = limits;
    }
}

fn describe_limits(l: &NodeLimits) -> String {
    let pct = |f: Fraction| f.to_f64() * 100.0;
    let mut parts = Vec::new();
    if let Some(f) = l.floor {
        parts.push(format!("floor {}%", pct(f)));
    }
    if let Some(c) = l.cap {
        parts.push(format!("cap {}%", pct(c)));
    }
    if let Some(c) = l.feasibility_cap {
        parts.push(format!("holds at {c}"));
    }
    if let Some(c) = l.feasibility_cap_percent {
        parts.push(format!("holds at {}%", pct(c)));
    }
    if parts.is_empty() {
        String::new()
    } else {
        format!("  [{}]", parts.join(", "))
    }
}

/// A human-readable view of the validated tree for `check-config`.
pub fn describe(settings: &Settings) -> String {
    let p = &settings.policy;
    let mut out = format!("configuration {} is valid\n\n", settings.origin);
    out.push_str("priority classes (strictly ahead of all fair-share requests):\n");
    for g in &p.groups {
        if let GroupKind::Priority { mss_priority, .. } = g.kind {
            out.push_str(&format!("  {:<30} mss_priority {mss_priority}\n", g.path));
        }
    }
    out.push_str(&format!(
        "fair share: front at mss_priority {}, back at {}; benefit = {}\nusage: {}\n",
        p.p_front,
        p.p_back,
        p.benefit.name(),
        p.usage_model.describe()
    ));
    let o = &p.order;
    out.push_str(&format!(
        "ordering: policy {}, band {}..{}; release {}{}; starvation bound {}; re-prioritise {}\n\nshare tree (shares, fraction of all fair-share benefit):\n",
        o.algorithm.name(),
        o.band_low,
        o.band_high,
        o.release.mode.name(),
        if o.held() {
            format!(" (limit {} per library, slot_bytes {})", o.release.limit, o.release.slot_bytes)
        } else {
            String::new()
        },
        o.max_wait_ms.map_or("off".to_string(), |m| format!(
            "{} s (then mss_priority {})",
            m / 1000,
            o.starved_priority
        )),
        o.reprioritise
            .map_or("never".to_string(), |d| format!("every {} s", d.as_secs())),
    ));
    for node in p.tree.depth_first().into_iter().map(|i| &p.tree.nodes[i]) {
        let indent = "  ".repeat(node.path.depth());
        let label = format!("{indent}{}", node.path.name());
        let leaf = if node.is_leaf() { "  leaf" } else { "" };
        out.push_str(&format!(
            "{label:<32} {:>6}  {:>8.4}%  ({}){leaf}{}\n",
            node.shares,
            node.fraction.to_f64() * 100.0,
            node.fraction,
            describe_limits(&node.limits)
        ));
    }
    out.push_str(&format!(
        "\nclassification: {} rule(s), then access_mode/physics_group, then {}\n",
        p.rules.len(),
        match p.default_group {
            Some(g) => format!("default group {}", p.group(g).path),
            None => "refuse".to_string(),
        }
    ));
    out.push_str(&mss::describe(&settings.mss));
    if !settings.notes.is_empty() {
        out.push_str("\nnotes:\n");
        for n in &settings.notes {
            out.push_str(&format!("  - {n}\n"));
        }
    }
    out
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::domain::RetrySettings;

    fn base() -> String {
        r#"
[policy]
p_front = 20
p_back = 10

[[priority_classes]]
access_mode = "datataking"
mss_priority = 100

[shares]
analysis = 40
"analysis/higgs" = 1
"analysis/top" = 3
reprocessing = 30
mc = 30

[mss]
adapter = "http"
url = "http://127.0.0.1:7070"
"#
        .to_string()
    }

    fn issues(text: &str) -> Vec<String> {
        match Settings::parse(text, "test") {
            Ok(_) => vec![],
            Err(ConfigError::Invalid { issues, .. }) => {
                issues.iter().map(|i| i.to_string()).collect()
            }
            Err(e) => vec![e.to_string()],
        }
    }

    #[test]
    fn shipped_config_is_valid() {
        let s = Settings::parse(EMBEDDED, "embedded").expect("shipped config must validate");
        assert!(!s.policy.groups.is_empty());
    }

    #[test]
    fn a_weight_that_could_overflow_a_request_benefit_is_refused() {
        let with = |weight: i64, max_size: i64| {
            base().replace(
                "p_back = 10",
                &format!(
                    "p_back = 10\nbenefit = \"weighted_bytes\"\n\
                     [policy.benefit_weights]\nreprocessing = {weight}\n\
                     [limits]\nmax_size_bytes = {max_size}"
                ),
            )
        };
        // 10^14 bytes (the shipped maximum): 92233 * 10^14 < 2^63 <= 92234 * 10^14.
        assert_eq!(
            issues(&with(92_233, 100_000_000_000_000)),
            Vec::<String>::new()
        );
        let found = issues(&with(92_234, 100_000_000_000_000));
        assert!(
            found
                .iter()
                .any(|i| i.starts_with("policy.benefit_weights.reprocessing:")
                    && i.contains("at most 92233")),
            "{found:?}"
        );
        assert_eq!(issues(&with(1, i64::MAX)), Vec::<String>::new());
        assert_eq!(issues(&with(2, i64::MAX)).len(), 1);
    }

    #[test]
    fn leaf_fractions_are_products_down_the_path() {
        let s = Settings::parse(&base(), "t").unwrap();
        let frac = |p: &str| match s.policy.group(s.policy.group_by_path(p).unwrap()).kind {
            GroupKind::FairShare { share } => (share.num(), share.den()),
            _ => panic!("not fair share"),
        };
        assert_eq!(frac("analysis/higgs"), (1, 10));
        assert_eq!(frac("analysis/top"), (3, 10));
        assert_eq!(frac("mc"), (3, 10));
        assert!(s.policy.group_by_path("analysis").is_none(), "inner node");
    }

    #[test]
    fn server_limits_out_of_range_are_refused_naming_the_key() {
        let t = format!(
            "[server]\nmax_connections = 0\nheader_read_timeout_ms = 0\n\
             idle_timeout_ms = -5\nbody_timeout_ms = 99999999999\n{}",
            base()
        );
        let found = issues(&t);
        for key in [
            "server.max_connections:",
            "server.header_read_timeout_ms:",
            "server.idle_timeout_ms:",
            "server.body_timeout_ms:",
        ] {
            assert!(found.iter().any(|i| i.starts_with(key)), "{key} {found:?}");
        }
        let t = format!(
            "[server]\nheader_read_timeout_ms = 5000\nidle_timeout_ms = 1000\n{}",
            base()
        );
        assert!(issues(&t)
            .iter()
            .any(|i| i.starts_with("server.idle_timeout_ms: may not be below")));
        let s = Settings::parse(&base(), "t").unwrap();
        assert_eq!(s.server.max_connections, 512);
    }

    #[test]
    fn priorities_must_be_ordered() {
        let t = base().replace("p_front = 20", "p_front = 100");
        let found = issues(&t);
        assert!(
            found.iter().any(|i| i.starts_with("policy.p_front:")),
            "{found:?}"
        );
        let t = base().replace("p_back = 10", "p_back = 20");
        assert!(issues(&t).iter().any(|i| i.starts_with("policy.p_back:")));
    }

    #[test]
    fn errors_name_their_keys() {
        let t = base()
            .replace("\"analysis/top\" = 3", "\"analysis/top\" = -3\n\"x/y\" = 1")
            .replace("url = \"http://127.0.0.1:7070\"", "url = \"ftp://x\"");
        let found = issues(&t);
        assert!(
            found
                .iter()
                .any(|i| i.starts_with("shares.\"analysis/top\":")),
            "{found:?}"
        );
        assert!(
            found
                .iter()
                .any(|i| i.starts_with("shares.\"x/y\": its parent")),
            "{found:?}"
        );
        assert!(found.iter().any(|i| i.starts_with("mss.url:")), "{found:?}");
    }

    #[test]
    fn unknown_keys_are_refused() {
        let t = base().replace("[policy]", "[policy]\nfrobnicate = 1");
        let found = issues(&t);
        assert!(found.iter().any(|i| i.contains("frobnicate")), "{found:?}");
    }

    #[test]
    fn rules_must_name_a_leaf() {
        let t = format!(
            "{}\n[[classification.rules]]\nstation = \"s\"\ngroup = \"analysis\"\n",
            base()
        );
        let found = issues(&t);
        assert!(
            found
                .iter()
                .any(|i| i.starts_with("classification.rules[0].group:")),
            "{found:?}"
        );
    }

    #[test]
    fn backoff_doubles_and_caps() {
        let r = RetrySettings {
            max_attempts: 5,
            base: Duration::from_millis(100),
            max: Duration::from_millis(350),
        };
        assert_eq!(r.backoff(1), Duration::from_millis(100));
        assert_eq!(r.backoff(2), Duration::from_millis(200));
        assert_eq!(r.backoff(3), Duration::from_millis(350));
        assert_eq!(r.backoff(40), Duration::from_millis(350));
    }

    mod fuzz {
        use super::super::*;
        use proptest::prelude::*;

        fn check(text: &str) -> Result<(), TestCaseError> {
            match Settings::parse(text, "fuzz") {
                Ok(_) => {}
                Err(ConfigError::Invalid { issues, .. }) => {
                    prop_assert!(!issues.is_empty());
                    for i in issues {
                        prop_assert!(!i.key.is_empty() && !i.message.is_empty(), "{:?}", i);
                    }
                }
                Err(ConfigError::Syntax { message, .. }) => prop_assert!(!message.is_empty()),
                Err(e) => prop_assert!(false, "unexpected error {}", e),
            }
            Ok(())
        }

        proptest! {
            /// Arbitrary text never panics the parser.
            #[test]
            fn arbitrary_text(text in "\\PC{0,400}") {
                check(&text)?;
            }

            /// The shipped config with random values put in place of its numbers is either valid
            /// or refused with every problem naming its key.
            #[test]
            fn shipped_config_with_random_numbers(
                values in proptest::collection::vec(prop_oneof![
                    any::<i64>().prop_map(|v| v.to_string()),
                    (-3i64..3).prop_map(|v| v.to_string()),
                    any::<f64>().prop_map(|v| format!("{v:?}")),
                    Just("\"text\"".to_string()),
                ], 40)
            ) {
                let mut values = values.into_iter();
                let text: String = EMBEDDED
                    .lines()
                    .map(|line| {
                        let is_number = line.split_once(" = ").is_some_and(|(_, v)| v.parse::<f64>().is_ok());
                        match (is_number, line.split_once(" = ")) {
                            (true, Some((k, _))) => format!("{k} = {}", values.next().unwrap_or_default()),
                            _ => line.to_string(),
                        }
                    })
                    .collect::<Vec<_>>()
                    .join("\n");
                check(&text)?;
            }
        }
    }
}
