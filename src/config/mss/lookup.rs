//! `[mss.volume_lookup]` (issue 38): where a file lies when the station does not say. Validated
//! into `mss_adapters::locate::LookupSettings` and the time a request waits for its answer in
//! the `volumes` release mode (`VolumeSettings::lookup_wait_ms`).

use std::path::PathBuf;
use std::time::Duration;

use mss_adapters::locate::{LookupSettings, Method};
use serde::Deserialize;

use crate::config::raw::default_int;
use crate::config::Issues;

const KEY: &str = "mss.volume_lookup";

#[derive(Debug, Deserialize)]
#[serde(deny_unknown_fields)]
pub(in crate::config) struct RawVolumeLookup {
    method: String,
    #[serde(default)]
    namespace_mount: Option<String>,
    #[serde(default)]
    path_prefix: Option<String>,
    #[serde(default)]
    command: Option<Vec<String>>,
    #[serde(default = "default_int::<10>")]
    timeout_secs: i64,
    #[serde(default = "default_int::<4>")]
    concurrency: i64,
    #[serde(default = "default_int::<100_000>")]
    cache_entries: i64,
    #[serde(default = "default_int::<3_600>")]
    cache_ttl_secs: i64,
    #[serde(default = "default_int::<60>")]
    wait_secs: i64,
}

/// A validated `[mss.volume_lookup]`: the lookup, and how long a request waits for it (ms).
pub(in crate::config) fn validate(
    raw: &RawVolumeLookup,
    issues: &mut Issues,
) -> Option<(LookupSettings, i64)> {
    let method = method(raw, issues);
    let mut within = |v: i64, name: &str, lo: i64, hi: i64| {
        if !(lo..=hi).contains(&v) {
            issues.add(
                format!("{KEY}.{name}"),
                format!("must be from {lo} to {hi}"),
            );
        }
        v.clamp(lo, hi)
    };
    let timeout_secs = within(raw.timeout_secs, "timeout_secs", 1, 3_600);
    let concurrency = within(raw.concurrency, "concurrency", 1, 256);
    let cache_entries = within(raw.cache_entries, "cache_entries", 0, 10_000_000);
    let cache_ttl_secs = within(raw.cache_ttl_secs, "cache_ttl_secs", 0, 30 * 86_400);
    let wait_secs = within(raw.wait_secs, "wait_secs", 1, 86_400);
    if wait_secs < timeout_secs {
        issues.add(
            format!("{KEY}.wait_secs"),
            format!(
                "must be at least timeout_secs ({timeout_secs}): a request would go before its \
                 lookup could answer"
            ),
        );
    }
    Some((
        LookupSettings {
            method: method?,
            timeout: Duration::from_secs(timeout_secs as u64),
            concurrency: concurrency as usize,
            cache_entries: cache_entries as usize,
            cache_ttl: Duration::from_secs(cache_ttl_secs as u64),
        },
        wait_secs * 1_000,
    ))
}

fn method(raw: &RawVolumeLookup, issues: &mut Issues) -> Option<Method> {
    let refuse = |issues: &mut Issues, name: &str, method: &str| {
        issues.add(
            format!("{KEY}.{name}"),
            format!("is not read by method = \"{method}\": remove it"),
        );
    };
    match raw.method.as_str() {
        "enstore-layer4" => {
            if raw.command.is_some() {
                refuse(issues, "command", "enstore-layer4");
            }
            let prefix = raw.path_prefix.clone().unwrap_or_else(|| "/".into());
            if !prefix.starts_with('/') {
                issues.add(format!("{KEY}.path_prefix"), "must be an absolute path");
            }
            let mount = match raw.namespace_mount.as_deref() {
                None | Some("") => {
                    issues.add(
                        format!("{KEY}.namespace_mount"),
                        "is required with method = \"enstore-layer4\": the directory where the \
                         pnfs/Chimera name space that path_prefix names is mounted",
                    );
                    return None;
                }
                Some(m) if !m.starts_with('/') => {
                    issues.add(format!("{KEY}.namespace_mount"), "must be an absolute path");
                    return None;
                }
                Some(m) => PathBuf::from(m),
            };
            Some(Method::EnstoreLayer4 { mount, prefix })
        }
        "command" => {
            for name in ["namespace_mount", "path_prefix"] {
                let set = match name {
                    "namespace_mount" => raw.namespace_mount.is_some(),
                    _ => raw.path_prefix.is_some(),
                };
                if set {
                    refuse(issues, name, "command");
                }
            }
            match raw.command.as_deref() {
                Some([program, ..]) if !program.is_empty() => Some(Method::Command {
                    argv: raw.command.clone().unwrap_or_default(),
                }),
                _ => {
                    issues.add(
                        format!("{KEY}.command"),
                        "is required with method = \"command\": the program and its arguments \
                         (run without a shell, the file's path appended)",
                    );
                    None
                }
            }
        }
        other => {
            issues.add(
                format!("{KEY}.method"),
                format!("`{other}` is not a lookup (known: enstore-layer4, command)"),
            );
            None
        }
    }
}
