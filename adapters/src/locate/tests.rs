//! The lookups' parsers against the upstream format, and the runners against real files and a
//! real script.

use std::path::Path;
use std::time::{Duration, Instant};

use super::cache::Cache;
use super::*;

/// Layer 4 as `set_xreference` writes it (Enstore `src/chimera.py` L2096-2119: eleven `%s\n`),
/// with the values of the `pcmd xref` example in Enstore's `doc/WWW/design.html` (~L855-866)
/// and a bfid, drive and crc after them.
const LAYER4: &str = "CA2902\n0000_000000000_0000132\n104857600\njon-ait-1\n\
/pnfs/grau/ait/jon1/100MB.trand\n/pnfs/grau/ait/volmap/jon-ait-1/CA2902/0000_000000000_0000132\n\
0001000000000000000928D0\n0001000000000000000928E0\nCDMS124711111100000\nmover9:/dev/rmt/tps0d1n\n\
1234567\n";

#[test]
fn layer4_gives_the_volume_and_the_cookies_file_number() {
    let found = parse_layer4(LAYER4).unwrap();
    assert_eq!(found.volume, "CA2902");
    assert_eq!(found.position, 132);
}

#[test]
fn layer4_of_an_early_version_has_nine_lines() {
    let nine: String = LAYER4.lines().take(9).map(|l| format!("{l}\n")).collect();
    assert_eq!(parse_layer4(&nine).unwrap().position, 132);
    // Lines are stripped, as get_xreference does.
    let padded = LAYER4.replacen("CA2902", "  CA2902 ", 1);
    assert_eq!(parse_layer4(&padded).unwrap().volume, "CA2902");
}

#[test]
fn a_garbled_layer4_is_a_failed_lookup() {
    let cases = [
        ("", "empty"),
        ("CA2902\n0000_000000000_0000132\n", "two lines"),
        (&*format!("{LAYER4}extra\n"), "twelve lines"),
        (&*LAYER4.replacen("CA2902", "unknown", 1), "volume unknown"),
        (
            &*LAYER4.replacen("CA2902", "CA 2902", 1),
            "a blank in the label",
        ),
        (
            &*LAYER4.replacen("0000_000000000_0000132", "/volumes/aggread/cache/x", 1),
            "a disk cookie",
        ),
        (
            &*LAYER4.replacen("0000_000000000_0000132", "0000_000000000_000013", 1),
            "a short cookie",
        ),
        (
            &*LAYER4.replacen("0000_000000000_0000132", "0000-000000000-0000132", 1),
            "wrong separators",
        ),
    ];
    for (text, case) in cases {
        assert!(
            matches!(parse_layer4(text), Err(LookupError::Garbled(_))),
            "{case}"
        );
    }
}

#[test]
fn the_cookie_is_enstores_tape_cookie() {
    assert_eq!(tape_file_number("0000_000000000_0000001"), Some(1));
    assert_eq!(tape_file_number("0000_000000000_9999999"), Some(9_999_999));
    for bad in [
        "",
        "0000_000000000_00000001",
        "0000_00000000a_0000001",
        "x000_000000000_0000001",
    ] {
        assert_eq!(tape_file_number(bad), None, "{bad}");
    }
}

#[test]
fn layer4_path_is_use_4_beside_the_file_under_the_mount() {
    let p = layer4_path(
        Path::new("/mnt/ns"),
        "/pnfs/exp",
        "/pnfs/exp/raw/run1/f.dat",
    )
    .unwrap();
    assert_eq!(p, Path::new("/mnt/ns/raw/run1/.(use)(4)(f.dat)"));
    let p = layer4_path(Path::new("/pnfs/fs/usr"), "/", "/exp/f").unwrap();
    assert_eq!(p, Path::new("/pnfs/fs/usr/exp/.(use)(4)(f)"));
    for bad in [
        "/pnfs/other/f",
        "/pnfs/exporter/f",
        "/pnfs/exp/../etc/passwd",
        "/pnfs/exp/a/./f",
        "/pnfs/exp/",
        "/pnfs/exp/.(access)(000100)",
    ] {
        assert!(
            matches!(
                layer4_path(Path::new("/m"), "/pnfs/exp", bad),
                Err(LookupError::Path(_))
            ),
            "{bad}"
        );
    }
}

#[test]
fn command_output_is_one_line_volume_and_position() {
    let ok = |s: &str| parse_output(s.as_bytes()).unwrap();
    assert_eq!(
        ok("VP0388 17\n"),
        Located {
            volume: "VP0388".into(),
            position: 17
        }
    );
    assert_eq!(ok("  VP0388\t0000_000000000_0000132").position, 132);
    for bad in [
        "",
        "\n",
        "VP0388\n",
        "VP0388 17 extra\n",
        "VP0388 17\nVP0389 18\n",
        "VP0388 -1\n",
        "VP0388 +1\n",
        "VP0388 1e3\n",
        "VP0388 99999999999999999999999\n",
        "unknown 3\n",
        "error: no such file\n",
    ] {
        assert!(
            matches!(parse_output(bad.as_bytes()), Err(LookupError::Garbled(_))),
            "{bad:?}"
        );
    }
    assert!(parse_output(b"VP\xff 1\n").is_err());
}

#[test]
fn the_cache_keeps_answers_for_their_ttl_and_at_most_capacity() {
    let at = Instant::now();
    let mut c = Cache::new(2, Duration::from_secs(10));
    let v = |n| Located {
        volume: "V".into(),
        position: n,
    };
    c.insert("/a", v(1), at);
    c.insert("/b", v(2), at);
    c.insert("/a", v(3), at);
    assert_eq!(c.get("/a", at), Some(v(3)));
    c.insert("/c", v(4), at);
    assert_eq!(c.len(), 2);
    assert_eq!(c.get("/c", at), Some(v(4)));
    assert_eq!(c.get("/c", at + Duration::from_secs(10)), None);
}

fn settings(method: Method, timeout: Duration) -> LookupSettings {
    LookupSettings {
        method,
        timeout,
        concurrency: 2,
        cache_entries: 100,
        cache_ttl: Duration::from_secs(60),
    }
}

#[tokio::test]
async fn layer4_is_read_from_a_real_tree_and_cached() {
    let dir = tempfile::tempdir().unwrap();
    std::fs::create_dir_all(dir.path().join("raw")).unwrap();
    std::fs::write(dir.path().join("raw/.(use)(4)(f1)"), LAYER4).unwrap();
    let method = Method::EnstoreLayer4 {
        mount: dir.path().to_path_buf(),
        prefix: "/pnfs/exp".into(),
    };
    let l = Locator::new(settings(method, Duration::from_secs(5)));
    let first = l.locate("/pnfs/exp/raw/f1").await;
    assert_eq!(first.answer.as_ref().unwrap().volume, "CA2902");
    assert!(!first.cached);
    assert!(l.locate("/pnfs/exp/raw/f1").await.cached);
    let missing = l.locate("/pnfs/exp/raw/f2").await;
    assert!(matches!(missing.answer, Err(LookupError::Unreadable(_))));
}

#[tokio::test]
async fn a_command_is_run_with_the_path_and_bounded_in_time() {
    let dir = tempfile::tempdir().unwrap();
    let script = dir.path().join("where");
    std::fs::write(
        &script,
        "#!/bin/sh\ncase \"$2\" in\n  /slow*) exec sleep 30;;\n  /bad*) echo garbage;;\n  *) echo \"$1 42\";;\nesac\n",
    )
    .unwrap();
    use std::os::unix::fs::PermissionsExt;
    std::fs::set_permissions(&script, std::fs::Permissions::from_mode(0o755)).unwrap();
    let argv = vec![script.to_string_lossy().into_owned(), "VOL001".into()];
    let l = Locator::new(settings(
        Method::Command { argv },
        Duration::from_millis(500),
    ));
    let ok = l.locate("/ok/f").await.answer.unwrap();
    assert_eq!((ok.volume.as_str(), ok.position), ("VOL001", 42));
    assert!(matches!(
        l.locate("/bad/f").await.answer,
        Err(LookupError::Garbled(_))
    ));
    let started = Instant::now();
    assert!(matches!(
        l.locate("/slow/f").await.answer,
        Err(LookupError::TimedOut(_))
    ));
    assert!(started.elapsed() < Duration::from_secs(10));
}
