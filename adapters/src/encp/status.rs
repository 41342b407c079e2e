//! encp's `STATUS=<name>` line, and which names are worth retrying.
//!
//! A failed encp prints the "data access layer" block on standard error, one `KEY=value` per
//! line ending with `STATUS=<name>`, then its message (`print_data_access_layer_format` in
//! Enstore-org/enstore `src/encp.py`), and exits 1 whatever the error (`final_say`: exit 2 only
//! for migration and a few internal failures). So the exit status says nothing about retrying;
//! the name does. The names are `e_errors` constants (`src/e_errors.py`).

/// Enstore's non-retriable errors (`e_errors.non_retriable_errors`, `raise_alarm_errors` and
/// `email_alarm_errors` of `src/e_errors.py`, which `is_non_retriable` checks), less those that
/// only mean encp or the library gave up for now (`TOO MANY RETRIES`, `TOO_MANY_RESUBMITS`, a
/// library `locked`, `noread` or `nowrite`): a person must act on these, so the request fails.
pub const DEFAULT_FATAL_STATUSES: &[&str] = &[
    "NOACCESS",
    "NOTALLOWED",
    "USERERROR",
    "UNKNOWNMEDIATYPE",
    "NOVOLUME",
    "DELETED",
    "STORAGE_QUOTA_EXCEEDED",
    "MALFORMED REQUEST",
    "VERSION MISMATCH",
    "reject",
    "NOSPACE",
    "CRC MISMATCH",
    "FILE WAS MODIFIED",
    "NO_FILES",
    "NO SUCH FILE/BFID",
    "NO SUCH VOLUME",
    "BAD_FILE_SIZE",
    "INVALID WRAPPER",
    "CONFLICT",
    "Filesystem is corrupt",
    "CRC ENCP MISMATCH",
    "CRC ECRC MISMATCH",
    "CRC DCACHE MISMATCH",
];

/// The name on the last `STATUS=` line of `line` (a whole line of standard error), if it is one.
pub fn status_of(line: &str) -> Option<&str> {
    line.trim_end()
        .strip_prefix("STATUS=")
        .filter(|s| !s.is_empty())
}

/// What encp prints on standard output, before its usage line, when it refuses its command
/// line (`print_usage` in `src/option.py`): the build refuses an option, or Python's `getopt`
/// does (a misspelt or ambiguous option, a value missing: `options::OptionError`). The same
/// command line would be refused again, so the run is not retried. The configuration check
/// refuses all of these at start; this is for an encp whose table differs from the one the
/// adapter knows.
pub fn refused_option(stdout_line: &str) -> bool {
    let line = stdout_line.trim_end();
    let Some(rest) = line.strip_prefix("option -") else {
        return false;
    };
    [
        " is an administrator option",
        " not recognized",
        " not a unique prefix",
        " requires argument",
        " must not have an argument",
    ]
    .iter()
    .any(|end| rest.ends_with(end))
}

/// What encp prints on standard output once a file is transferred, at `--verbose` 4 and above
/// (`e_errors.INFO`): "File <output> copied successfully." (`finish_request` in `src/encp.py`).
/// It comes after the output was unregistered from deletion at exit (`read_hsm_file`,
/// `write_hsm_file`), so whatever ends the run afterwards, the file stands.
pub fn copied(stdout_line: &str) -> bool {
    stdout_line.starts_with("File ") && stdout_line.trim_end().ends_with(" copied successfully.")
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn only_a_status_line_names_a_status() {
        assert_eq!(
            status_of("STATUS=NO SUCH FILE/BFID"),
            Some("NO SUCH FILE/BFID")
        );
        assert_eq!(status_of("INFILE=/pnfs/DELETED/f"), None);
        assert_eq!(status_of("ERROR: STATUS=NOACCESS"), None);
        assert_eq!(status_of("STATUS="), None);
        assert!(refused_option(
            "option --library is an administrator option"
        ));
        for line in [
            "option --threded not recognized",
            "option --ver not a unique prefix",
            "option --file-family requires argument",
            "option -v not recognized",
        ] {
            assert!(refused_option(line), "{line}");
        }
        assert!(!refused_option("USAGE: encp [OPTIONS]... <source file>"));
        assert!(copied("File /data/stage/f.root copied successfully."));
        assert!(!copied("Mover called back.  elapsed= 3.2"));
    }
}
