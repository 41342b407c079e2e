//! `[release.volumes]`, `[release.reserve]` and `[targets."path"] max_volumes`, through
//! `Settings::parse`.

use crate::config::{ConfigError, Settings};
use crate::domain::order::{ReleaseMode, VolumeSettings};

fn base(extra: &str) -> String {
    format!(
        r#"
[policy]
p_front = 20
p_back = 10

[shares]
analysis = 40
"analysis/higgs" = 1
"analysis/top" = 3
reprocessing = 60

[mss]
adapter = "http"
url = "http://127.0.0.1:7070"
{extra}
"#
    )
}

fn issues(text: &str) -> Vec<String> {
    match Settings::parse(text, "test") {
        Ok(_) => vec![],
        Err(ConfigError::Invalid { issues, .. }) => issues.iter().map(|i| i.to_string()).collect(),
        Err(e) => vec![e.to_string()],
    }
}

#[test]
fn volumes_mode_and_its_keys_are_read() {
    let text = base(
        r#"
[release]
mode = "volumes"
[release.volumes]
min_volume_bytes = 1000
min_volume_files = 7
quiet_secs = 30
max_age_secs = 3600
batch_max_bytes = 5000
batch_max_files = 9
sticky_secs = 45
max_volumes = 3
ride_lead_bytes = 200000000000
[release.volumes.libraries]
"LTO8" = 2
[targets."analysis"]
max_volumes = 2
"#,
    );
    let s = Settings::parse(&text, "test").expect("valid");
    let r = &s.policy.order.release;
    assert_eq!(r.mode, ReleaseMode::Volumes);
    let v = &r.volumes;
    assert_eq!(
        (
            v.min_volume_bytes,
            v.min_volume_files,
            v.quiet_ms,
            v.max_age_ms
        ),
        (1000, 7, 30_000, 3_600_000)
    );
    assert_eq!(
        (
            v.batch_max_bytes,
            v.batch_max_files,
            v.sticky_ms,
            v.max_volumes
        ),
        (5000, 9, 45_000, 3)
    );
    assert_eq!(v.ride_lead_bytes, Some(200_000_000_000));
    assert_eq!(
        (v.max_volumes_of("LTO8"), v.max_volumes_of("other")),
        (2, 3)
    );
    let node = s
        .policy
        .tree
        .nodes
        .iter()
        .find(|n| n.path.as_str() == "analysis")
        .expect("node");
    assert_eq!(node.limits.max_volumes, Some(2));
}

#[test]
fn volumes_defaults_are_the_documented_ones() {
    let s = Settings::parse(&base("[release]\nmode = \"volumes\""), "test").expect("valid");
    assert_eq!(s.policy.order.release.volumes, VolumeSettings::default());
    // Enstore's dismount delay is 60 s: sticky must not outlast it.
    assert!(VolumeSettings::default().sticky_ms <= 60_000);
}

#[test]
fn bad_volumes_keys_are_refused_naming_the_key() {
    let cases = [
        ("min_volume_bytes = 0", "release.volumes.min_volume_bytes"),
        ("min_volume_files = -1", "release.volumes.min_volume_files"),
        ("quiet_secs = -5", "release.volumes.quiet_secs"),
        ("max_age_secs = 0", "release.volumes.max_age_secs"),
        ("batch_max_bytes = 0", "release.volumes.batch_max_bytes"),
        ("batch_max_files = 0", "release.volumes.batch_max_files"),
        ("sticky_secs = -1", "release.volumes.sticky_secs"),
        ("max_volumes = 0", "release.volumes.max_volumes"),
        ("max_volumes = 4294967296", "release.volumes.max_volumes"),
        ("ride_lead_bytes = -1", "release.volumes.ride_lead_bytes"),
        (
            "max_age_secs = 100\nquiet_secs = 101",
            "release.volumes.quiet_secs",
        ),
        (
            "max_age_secs = 100\nsticky_secs = 101",
            "release.volumes.sticky_secs",
        ),
        (
            "[release.volumes.libraries]\nLTO8 = 0",
            "release.volumes.libraries.\"LTO8\"",
        ),
        ("colour = 1", "colour"),
    ];
    for (body, key) in cases {
        let text = base(&format!(
            "[release]\nmode = \"volumes\"\n[release.volumes]\n{body}"
        ));
        let found = issues(&text);
        assert!(
            found.iter().any(|i| i.contains(key)),
            "{body}: expected an issue naming {key}, got {found:?}"
        );
    }
    let found = issues(&base("[release]\nmode = \"tapes\""));
    assert!(found
        .iter()
        .any(|i| i.contains("release.mode") && i.contains("volumes")));
}

#[test]
fn a_bad_group_max_volumes_is_refused_naming_the_key() {
    for v in ["0", "-3", "4294967296"] {
        let found = issues(&base(&format!(
            "[targets.\"analysis/top\"]\nmax_volumes = {v}"
        )));
        assert!(
            found
                .iter()
                .any(|i| i.contains("targets.\"analysis/top\".max_volumes")),
            "{v}: {found:?}"
        );
    }
}

/// `[release.reserve]`: read in every mode; `drives` below each library's slots of the mode
/// (held: `limit`, volumes: `max_volumes`), else an issue naming the key (the per-library one
/// when it is a library's own figure); negative amounts and unknown keys refused.
#[test]
fn reserve_keys_are_read_and_bad_ones_refused_naming_the_key() {
    let text = base(
        "[release]\nmode = \"volumes\"\n[release.volumes]\nmax_volumes = 6\n\
         [release.reserve]\ndrives = 1\nwindow_secs = 900\n[release.reserve.libraries]\nLTO8 = 2",
    );
    let s = Settings::parse(&text, "test").expect("valid");
    let r = &s.policy.order.release.reserve;
    assert_eq!(
        (r.drives, r.window_ms, r.drives_of("LTO8")),
        (1, 900_000, 2)
    );
    let cases = [
        (
            "volumes",
            "max_volumes = 2",
            "drives = 2",
            "release.reserve.drives",
        ),
        ("held", "", "drives = 8", "release.reserve.drives"),
        (
            "volumes",
            "max_volumes = 6\n[release.volumes.libraries]\nLTO8 = 2",
            "drives = 1\n[release.reserve.libraries]\nLTO8 = 2",
            "release.reserve.libraries.\"LTO8\"",
        ),
        ("volumes", "", "drives = -1", "release.reserve.drives"),
        (
            "held",
            "",
            "window_secs = -1",
            "release.reserve.window_secs",
        ),
        ("held", "", "colour = 1", "colour"),
    ];
    for (mode, volumes, reserve, key) in cases {
        let text = base(&format!(
            "[release]\nmode = \"{mode}\"\n[release.volumes]\n{volumes}\n[release.reserve]\n{reserve}"
        ));
        let found = issues(&text);
        assert!(
            found.iter().any(|i| i.contains(key)),
            "{reserve}: expected an issue naming {key}, got {found:?}"
        );
    }
    // Pass-through reserves nothing, so any figure is accepted there.
    let text = base("[release]\nmode = \"pass_through\"\n[release.reserve]\ndrives = 9");
    assert!(issues(&text).is_empty(), "{:?}", issues(&text));
}
