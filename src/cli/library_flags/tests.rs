use super::LibraryFlags;
use mss_adapters::sim::library::LibraryConfig;

#[test]
fn a_failure_rate_outside_zero_to_one_is_refused_naming_the_flag_and_changes_nothing() {
    for rate in [1.5, -0.1, f64::NAN] {
        let mut library = LibraryConfig::default();
        let before = library.failure_rate;
        let flags = LibraryFlags {
            failure_rate: Some(rate),
            ..LibraryFlags::default()
        };
        let error = flags.apply(&mut library).expect_err("refused").to_string();
        assert!(error.contains("--failure-rate"), "{error}");
        assert_eq!(library.failure_rate, before);
    }
}

#[test]
fn the_flags_given_replace_the_configured_library_and_the_others_stand() {
    let mut library = LibraryConfig::default();
    let configured = library.clone();
    let flags = LibraryFlags {
        drives: Some(6),
        failure_rate: Some(0.25),
        seed: Some(9),
        ..LibraryFlags::default()
    };
    flags.apply(&mut library).expect("valid flags");
    assert_eq!(
        (library.drives, library.failure_rate, library.seed),
        (6, 0.25, 9)
    );
    assert_eq!(library.model, configured.model);
    assert_eq!(library.bytes_per_sec, configured.bytes_per_sec);
    assert_eq!(library.admin_from, configured.admin_from);
}
