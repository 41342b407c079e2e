//! Time, injected: the ledger stamps rows with whatever clock it is given, so tests can control
//! time and the policy never reads one.
//!
//! `Clock` (injected; `SystemClock`, `ManualClock` for tests), `parse_instant`.

use std::sync::atomic::{AtomicI64, Ordering};
use std::sync::Arc;
use std::time::{SystemTime, UNIX_EPOCH};

/// Milliseconds since the Unix epoch.
pub trait Clock: Send + Sync + 'static {
    fn now_ms(&self) -> i64;
}

/// The wall clock.
#[derive(Debug, Default, Clone, Copy)]
pub struct SystemClock;

impl Clock for SystemClock {
    fn now_ms(&self) -> i64 {
        SystemTime::now()
            .duration_since(UNIX_EPOCH)
            .map(|d| d.as_millis() as i64)
            .unwrap_or(0)
    }
}

/// A clock tests move by hand.
#[derive(Debug, Default, Clone)]
pub struct ManualClock(Arc<AtomicI64>);

impl ManualClock {
    pub fn new(start_ms: i64) -> ManualClock {
        ManualClock(Arc::new(AtomicI64::new(start_ms)))
    }

    pub fn advance_ms(&self, ms: i64) {
        self.0.fetch_add(ms, Ordering::SeqCst);
    }
}

impl Clock for ManualClock {
    fn now_ms(&self) -> i64 {
        self.0.load(Ordering::SeqCst)
    }
}

/// Latest instant accepted from people: 9999-12-31T23:59:59.999Z.
pub const MAX_INSTANT_MS: i64 = 253_402_300_799_999;

/// An instant given by a person: RFC 3339 (`2026-11-22T08:00:00Z`), or milliseconds since the
/// Unix epoch; between 1970 and the year 9999.
pub fn parse_instant(s: &str) -> Result<i64, String> {
    let s = s.trim();
    let ms = match s.parse::<i64>() {
        Ok(ms) => ms,
        Err(_) => s
            .parse::<jiff::Timestamp>()
            .map(|t| t.as_millisecond())
            .map_err(|e| {
                format!("`{s}` is not an RFC 3339 time such as 2026-11-22T08:00:00Z, nor milliseconds since 1970 ({e})")
            })?,
    };
    if !(0..=MAX_INSTANT_MS).contains(&ms) {
        return Err(format!("`{s}` is outside 1970 to 9999"));
    }
    Ok(ms)
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn instants() {
        assert_eq!(parse_instant("1700000000000"), Ok(1_700_000_000_000));
        assert_eq!(parse_instant("1970-01-01T00:00:01Z"), Ok(1_000));
        assert_eq!(parse_instant("1970-01-01T01:00:01+01:00"), Ok(1_000));
        assert!(parse_instant("yesterday").unwrap_err().contains("RFC 3339"));
        assert!(parse_instant("-1").unwrap_err().contains("outside"));
        assert!(parse_instant("9223372036854775807")
            .unwrap_err()
            .contains("outside"));
    }
}
