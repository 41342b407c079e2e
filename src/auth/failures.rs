//! Refused credentials: each is logged once (by a fingerprint, never the credential itself),
//! and an address that keeps failing is refused for a while whatever it presents
//! ([`FAILURES_PER_MINUTE`], burst [`FAILURE_BURST`]), so guessing tokens from one address
//! is slow.

use std::collections::{HashMap, HashSet};
use std::net::IpAddr;
use std::num::NonZeroU32;
use std::sync::Mutex;
use std::time::{Duration, Instant};

use governor::{DefaultKeyedRateLimiter, Quota, RateLimiter};
use sha2::{Digest, Sha256};
use tracing::warn;

/// Refused credentials one address may present per minute, after its burst.
pub const FAILURES_PER_MINUTE: u32 = 60;
/// Refused credentials one address may present at once.
pub const FAILURE_BURST: u32 = 50;
/// Fingerprints kept to log each refused credential once; forgotten all at once beyond this.
const REMEMBERED: usize = 10_000;

/// The failures per address and the credentials already logged.
pub struct FailureGate {
    limiter: DefaultKeyedRateLimiter<IpAddr>,
    blocked: Mutex<HashMap<IpAddr, Instant>>,
    logged: Mutex<HashSet<[u8; 32]>>,
}

impl Default for FailureGate {
    fn default() -> Self {
        FailureGate::new()
    }
}

impl FailureGate {
    pub fn new() -> FailureGate {
        let per_minute = NonZeroU32::new(FAILURES_PER_MINUTE).unwrap_or(NonZeroU32::MIN);
        let burst = NonZeroU32::new(FAILURE_BURST).unwrap_or(NonZeroU32::MIN);
        FailureGate {
            limiter: RateLimiter::keyed(Quota::per_minute(per_minute).allow_burst(burst)),
            blocked: Mutex::new(HashMap::new()),
            logged: Mutex::new(HashSet::new()),
        }
    }

    /// How long `ip` is still refused, if it is.
    pub fn blocked(&self, ip: IpAddr) -> Option<Duration> {
        let mut blocked = self.blocked.lock().unwrap_or_else(|p| p.into_inner());
        let until = *blocked.get(&ip)?;
        let now = Instant::now();
        if until <= now {
            blocked.remove(&ip);
            return None;
        }
        Some(until - now)
    }

    /// Note a refused credential from `ip`: logged if this credential was not yet, and counted
    /// against the address. Returns how long the address is now refused, if it is.
    /// `credential` is hashed at once and is never logged; `subject` (a certificate's DN, a
    /// token's issuer) may be.
    pub fn failed(
        &self,
        ip: IpAddr,
        credential: &[u8],
        kind: &str,
        subject: &str,
        why: &str,
    ) -> Option<Duration> {
        let fingerprint: [u8; 32] = Sha256::digest(credential).into();
        let first = {
            let mut logged = self.logged.lock().unwrap_or_else(|p| p.into_inner());
            if logged.len() >= REMEMBERED {
                logged.clear();
            }
            logged.insert(fingerprint)
        };
        if first {
            warn!(peer = %ip, credential = kind, subject, reason = why, "authentication refused");
        }
        match self.limiter.check_key(&ip) {
            Ok(()) => None,
            Err(not_until) => {
                let wait = not_until
                    .wait_time_from(governor::clock::Clock::now(
                        &governor::clock::DefaultClock::default(),
                    ))
                    .max(Duration::from_secs(1));
                let mut blocked = self.blocked.lock().unwrap_or_else(|p| p.into_inner());
                if blocked.len() >= REMEMBERED {
                    let now = Instant::now();
                    blocked.retain(|_, until| *until > now);
                }
                blocked.insert(ip, Instant::now() + wait);
                warn!(peer = %ip, wait_secs = wait.as_secs_f64(), "too many refused credentials from this address: refused for a while");
                Some(wait)
            }
        }
    }
}
