//! Checks of a configuration's numbers, shared by the adapters' tables and the broker's own
//! `config` (which depends on this crate): one rule and one message each, wherever the key is.
//!
//! A check records what is wrong in an [`Issues`] (naming the key) and returns a stand-in value,
//! so that validation goes on and reports every problem of a file at once.

use crate::rest::Issue;

/// Where a check records what is wrong: the adapters' `Vec<Issue>`, or the broker's list.
pub trait Issues {
    fn record(&mut self, key: &str, message: String);
}

impl Issues for Vec<Issue> {
    fn record(&mut self, key: &str, message: String) {
        self.push(Issue::new(key, message));
    }
}

/// A count, or a number of seconds or milliseconds, that must be positive: its value, or 1 in
/// its place after an issue.
pub fn positive(v: i64, key: &str, issues: &mut impl Issues) -> u64 {
    if v <= 0 {
        issues.record(key, format!("must be a positive integer, got {v}"));
        return 1;
    }
    v as u64
}

/// A count or a number of seconds that may be 0: its value, or 0 in its place after an issue.
pub fn non_negative(v: i64, key: &str, issues: &mut impl Issues) -> u64 {
    if v < 0 {
        issues.record(key, format!("must be 0 or more, got {v}"));
        return 0;
    }
    v as u64
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn a_number_out_of_range_is_an_issue_naming_its_key_and_a_stand_in() {
        let mut issues: Vec<Issue> = Vec::new();
        assert_eq!(positive(7, "a", &mut issues), 7);
        assert_eq!(non_negative(0, "b", &mut issues), 0);
        assert!(issues.is_empty());
        assert_eq!(positive(0, "poll_ms", &mut issues), 1);
        assert_eq!(non_negative(-3, "retries", &mut issues), 0);
        let said: Vec<(&str, &str)> = issues
            .iter()
            .map(|i| (i.key.as_str(), i.message.as_str()))
            .collect();
        assert_eq!(
            said,
            [
                ("poll_ms", "must be a positive integer, got 0"),
                ("retries", "must be 0 or more, got -3"),
            ]
        );
    }
}
