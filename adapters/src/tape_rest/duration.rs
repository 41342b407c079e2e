//! `diskLifetime` as dCache reads it: `TimeUtils.validateDuration` (dCache/dcache
//! `modules/common/src/main/java/org/dcache/util/TimeUtils.java`, called from
//! `modules/dcache-frontend/.../resources/tape/StageResources.java`) is Java's
//! `Duration.parse`, whose grammar is `PnDTnHnMn.nS`: days, hours, minutes and seconds only,
//! letters in either case, a fraction only on the seconds. ISO 8601's years, months and weeks
//! (`P1Y`, `P1M`, `P2W`) are refused by it, and so the whole stage request is a 400.

/// Why `s` is not a lifetime dCache accepts, or `None` when it is one.
pub fn lifetime_problem(s: &str) -> Option<String> {
    let upper = s.to_ascii_uppercase();
    if upper.starts_with(['-', '+']) || upper.contains("-") {
        return Some(format!("`{s}` is signed: a disk lifetime must be positive"));
    }
    let Some(rest) = upper.strip_prefix('P') else {
        return Some(format!(
            "`{s}` is not an ISO 8601 duration (it must start with P, e.g. P1D or PT12H)"
        ));
    };
    let (date, time) = match rest.split_once('T') {
        Some((d, t)) => (d, Some(t)),
        None => (rest, None),
    };
    if let Some(unit) = date.chars().find(|c| matches!(c, 'Y' | 'M' | 'W')) {
        let name = match unit {
            'Y' => "years",
            'M' => "months",
            _ => "weeks",
        };
        return Some(format!(
            "`{s}` uses {name} ({unit}): dCache reads diskLifetime with Java's Duration.parse, \
             which takes only days, hours, minutes and seconds (e.g. P14D instead of P2W)"
        ));
    }
    let date_ok = date.is_empty() || parts(date, &['D'], false);
    let time_ok = time.is_none_or(|t| !t.is_empty() && parts(t, &['H', 'M', 'S'], true));
    if !(date_ok && time_ok) || (date.is_empty() && time.is_none()) {
        return Some(format!(
            "`{s}` is not a duration Java's Duration.parse reads (PnDTnHnMn.nS, e.g. P1D, PT12H, \
             P1DT6H)"
        ));
    }
    if upper.chars().filter(char::is_ascii_digit).all(|c| c == '0') {
        return Some(format!("`{s}` is zero: a disk lifetime must be positive"));
    }
    None
}

/// `text` is a run of `<digits><unit>` with the units in the order given, each at most once;
/// with `fraction`, the last unit (seconds) may carry `.digits` or `,digits` (up to 9).
fn parts(text: &str, units: &[char], fraction: bool) -> bool {
    let mut next_unit = 0;
    let mut rest = text;
    while !rest.is_empty() {
        let digits = rest.chars().take_while(char::is_ascii_digit).count();
        if digits == 0 {
            return false;
        }
        let mut after = &rest[digits..];
        let mut fractional = false;
        if fraction && after.starts_with(['.', ',']) {
            let f = after[1..].chars().take_while(char::is_ascii_digit).count();
            if f > 9 {
                return false;
            }
            after = &after[1 + f..];
            fractional = true;
        }
        let Some(unit) = after.chars().next() else {
            return false;
        };
        let Some(pos) = units[next_unit..].iter().position(|u| *u == unit) else {
            return false;
        };
        let index = next_unit + pos;
        if fractional && index != units.len() - 1 {
            return false;
        }
        next_unit = index + 1;
        rest = &after[1..];
    }
    true
}

#[cfg(test)]
mod tests {
    use super::lifetime_problem;

    #[test]
    fn java_duration_grammar() {
        for ok in [
            "P1D",
            "PT12H",
            "P1DT2H30M",
            "PT45S",
            "pt1.5s",
            "P14D",
            "PT0.5S",
        ] {
            assert_eq!(lifetime_problem(ok), None, "{ok}");
        }
        for (bad, why) in [
            ("P2W", "weeks"),
            ("P1Y", "years"),
            ("P1M", "months"),
            ("P1Y2D", "years"),
            ("1D", "start with P"),
            ("P", "Duration.parse"),
            ("PT", "Duration.parse"),
            ("P1", "Duration.parse"),
            ("PD", "Duration.parse"),
            ("P1H", "Duration.parse"),
            ("PT1D", "Duration.parse"),
            ("P1DT", "Duration.parse"),
            ("PT1M2H", "Duration.parse"),
            ("PT1.5H", "Duration.parse"),
            ("-P1D", "positive"),
            ("PT0S", "zero"),
        ] {
            let got = lifetime_problem(bad).unwrap_or_default();
            assert!(got.contains(why), "{bad}: {got}");
        }
    }
}
