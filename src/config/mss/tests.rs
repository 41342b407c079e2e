use super::super::{ConfigError, Settings};
use mss_adapters::sim::library::TapeDrive;

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
        super::AdapterSettings::Http { simulator, .. } => simulator.unwrap().library.aging,
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

/// Issue 15: the simulator's library model and its tape times, named by key when wrong; the
/// shipped file runs the Enstore model, a table without the key the priority model.
#[test]
fn the_simulator_model_is_chosen_by_key_and_the_shipped_file_uses_enstore() {
    use mss_adapters::sim::Model;
    let dir = tempfile::tempdir().unwrap();
    let sim = |extra: &str| {
        format!("[mss]\nadapter = \"http\"\n[mss.simulator]\nenabled = true\n{extra}")
    };
    let simulator = |text: &str| match parse(text, dir.path()).unwrap().mss.adapter {
        super::AdapterSettings::Http { simulator, .. } => simulator.unwrap(),
        _ => panic!("not the simulator"),
    };
    assert_eq!(simulator(&sim("")).library.model, Model::Priority);
    let enstore = simulator(&sim("model = \"enstore\"\ndismount_delay_seconds = 10\n"));
    assert_eq!(enstore.library.model, Model::Enstore);
    assert_eq!(enstore.library.dismount_delay_micros, 10_000_000);
    assert_eq!(enstore.library.tape, TapeDrive::lto9());
    let found = issues(&sim("model = \"lto\"\nlocate_base_seconds = -1\n"));
    assert!(has(&found, "mss.simulator.model", "lto"), "{found:?}");
    assert!(
        has(&found, "mss.simulator.locate_base_seconds", "0 or more"),
        "{found:?}"
    );
    let shipped = Settings::parse(crate::config::SHIPPED, "embedded").unwrap();
    match shipped.mss.adapter {
        super::AdapterSettings::Http { simulator, .. } => {
            assert_eq!(simulator.unwrap().library.model, Model::Enstore)
        }
        _ => panic!("the shipped file runs the simulator"),
    }
}

/// Issue 38: `drive` picks a profile whose every figure a key overrides; a wrong value is named
/// by its key, and the flat tape times the drive model replaced are refused, saying what
/// replaced them.
#[test]
fn the_simulated_drive_is_a_profile_with_every_figure_a_key() {
    use mss_adapters::sim::library::{DriveKind, Order};
    let dir = tempfile::tempdir().unwrap();
    let sim = |extra: &str| {
        format!("[mss]\nadapter = \"http\"\n[mss.simulator]\nenabled = true\n{extra}")
    };
    let library = |extra: &str| match parse(&sim(extra), dir.path()).unwrap().mss.adapter {
        super::AdapterSettings::Http { simulator, .. } => simulator.unwrap().library,
        _ => panic!("not the simulator"),
    };
    let lto8 = library("drive = \"lto8\"\n");
    assert_eq!(lto8.tape, TapeDrive::lto8());
    assert_eq!(lto8.bytes_per_sec, DriveKind::Lto8.profile().0);
    let tuned = library(
        "drive = \"lto8\"\nrate_mb_per_sec = 250\nwraps = 100\nload_seconds = 9\n\
         locate_per_length_seconds = 30\norder = \"rao\"\nmover_poll_seconds = 0\n",
    );
    assert_eq!(tuned.bytes_per_sec, 250_000_000);
    assert_eq!(
        (
            tuned.tape.wraps,
            tuned.tape.load,
            tuned.tape.locate.per_length
        ),
        (100, 9_000_000, 30_000_000)
    );
    assert_eq!((tuned.tape.order, tuned.tape.mover_poll), (Order::Rao, 0));
    assert_eq!(
        tuned.tape.unload,
        TapeDrive::lto8().unload,
        "the profile's own"
    );
    let found = issues(&sim(
        "drive = \"lto7\"\norder = \"fifo\"\nwraps = 0\nrate_mb_per_sec = 0\n\
         capacity_tb = -1\nrewind_full_seconds = -3\nunmount_seconds = 60\n",
    ));
    for (key, says) in [
        ("mss.simulator.drive", "lto7"),
        ("mss.simulator.order", "fifo"),
        ("mss.simulator.wraps", "1 or more"),
        ("mss.simulator.rate_mb_per_sec", "above 0"),
        ("mss.simulator.capacity_tb", "above 0"),
        ("mss.simulator.rewind_full_seconds", "0 or more"),
        ("mss.simulator.unmount_seconds", "drive model"),
    ] {
        assert!(has(&found, key, says), "{key}: {found:?}");
    }
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
    let text = super::super::SHIPPED;
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
    let mut text = super::super::SHIPPED
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
        let s =
            shipped_with(adapter, dir.path()).unwrap_or_else(|e| panic!("{adapter} example: {e}"));
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
fn the_documented_adapter_examples_are_valid_on_the_shipped_config() {
    let doc = include_str!("../../../docs/adapters.md");
    let section = &doc[doc.find("## Configuration examples").expect("the section")..];
    let section = &section[..section[3..].find("\n## ").map_or(section.len(), |i| i + 3)];
    let dir = tempfile::tempdir().unwrap();
    std::fs::create_dir_all(dir.path().join("stage")).unwrap();
    for f in ["fts3-cert.pem", "fts3-key.pem", "tape-token"] {
        std::fs::write(dir.path().join(f), "placeholder").unwrap();
    }
    let mut checked = Vec::new();
    for block in section.split("```toml\n").skip(1) {
        let snippet = &block[..block.find("```").expect("a closed block")];
        let snippet = snippet.replace("/data/stage", dir.path().join("stage").to_str().unwrap());
        let mut config: toml::Table = toml::from_str(super::super::SHIPPED).unwrap();
        merge(
            &mut config,
            toml::from_str(&snippet).expect("a TOML snippet"),
        );
        if let Some(toml::Value::Table(mss)) = config.get_mut("mss") {
            mss.remove("simulator");
        }
        let text = toml::to_string(&config).unwrap();
        let s = Settings::parse_in(&text, "docs/adapters.md example", dir.path())
            .unwrap_or_else(|e| panic!("docs/adapters.md example\n{snippet}\n{e}"));
        checked.push(s.mss.adapter.name());
    }
    assert_eq!(checked, ["encp", "fts3", "tape_rest"]);
}

const LOOKUP: &str =
    "[mss]\nadapter = \"http\"\nurl = \"http://127.0.0.1:1\"\n[mss.volume_lookup]\n";

#[test]
fn the_shipped_volume_lookup_example_is_valid_and_sets_the_wait() {
    let dir = tempfile::tempdir().unwrap();
    let text = super::super::SHIPPED.replace("mode = \"pass_through\"", "mode = \"volumes\"");
    let example = shipped_example("volume_lookup");
    let s = Settings::parse_in(
        &format!("{text}\n{example}\n"),
        "shipped example",
        dir.path(),
    )
    .unwrap_or_else(|e| panic!("volume_lookup example: {e}"));
    let (lookup, wait) = s.mss.volume_lookup.clone().expect("a lookup");
    assert_eq!(lookup.method.name(), "enstore-layer4");
    assert_eq!(wait, 60_000);
    assert_eq!(s.policy.order.release.volumes.lookup_wait_ms, Some(60_000));
    assert!(
        !s.notes.iter().any(|n| n.contains("volume_lookup")),
        "{:?}",
        s.notes
    );
    let held = text.replace("mode = \"volumes\"", "mode = \"held\"");
    let s = Settings::parse_in(
        &format!("{held}\n{example}\n"),
        "shipped example",
        dir.path(),
    )
    .unwrap();
    assert!(
        s.notes
            .iter()
            .any(|n| n.contains("mss.volume_lookup is set")),
        "{:?}",
        s.notes
    );
    let none = Settings::parse_in(&text, "shipped", dir.path()).unwrap();
    assert_eq!(none.policy.order.release.volumes.lookup_wait_ms, None);
}

#[test]
fn a_volume_lookup_is_refused_naming_its_key() {
    let cases = [
        (
            "method = \"pnfs\"",
            "mss.volume_lookup.method",
            "known: enstore-layer4, command",
        ),
        (
            "method = \"enstore-layer4\"",
            "mss.volume_lookup.namespace_mount",
            "required",
        ),
        (
            "method = \"enstore-layer4\"\nnamespace_mount = \"pnfs\"",
            "mss.volume_lookup.namespace_mount",
            "absolute",
        ),
        (
            "method = \"enstore-layer4\"\nnamespace_mount = \"/pnfs\"\ncommand = [\"x\"]",
            "mss.volume_lookup.command",
            "remove it",
        ),
        (
            "method = \"command\"",
            "mss.volume_lookup.command",
            "required",
        ),
        (
            "method = \"command\"\ncommand = []",
            "mss.volume_lookup.command",
            "required",
        ),
        (
            "method = \"command\"\ncommand = [\"/bin/x\"]\nnamespace_mount = \"/pnfs\"",
            "mss.volume_lookup.namespace_mount",
            "remove it",
        ),
        (
            "method = \"command\"\ncommand = [\"/bin/x\"]\ntimeout_secs = 0",
            "mss.volume_lookup.timeout_secs",
            "from 1",
        ),
        (
            "method = \"command\"\ncommand = [\"/bin/x\"]\ntimeout_secs = 30\nwait_secs = 10",
            "mss.volume_lookup.wait_secs",
            "at least timeout_secs",
        ),
        (
            "method = \"command\"\ncommand = [\"/bin/x\"]\nconcurrency = 0",
            "mss.volume_lookup.concurrency",
            "from 1",
        ),
    ];
    for (table, key, words) in cases {
        let found = issues(&format!("{LOOKUP}{table}\n"));
        assert!(has(&found, key, words), "{table}: {found:?}");
    }
    let typo = issues(&format!(
        "{LOOKUP}method = \"command\"\ncommand = [\"/bin/x\"]\ntimeout = 3\n"
    ));
    assert!(typo.iter().any(|i| i.contains("timeout")), "{typo:?}");
}
