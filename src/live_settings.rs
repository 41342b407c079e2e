//! The settings a running broker may change without a restart, as one value ([`Live`]) behind
//! one swap ([`LiveSettings`]): the policy (shares, targets, caps, the ordering algorithm and
//! its parameters, classification, release limits), the station and submit rate limits, the
//! bearer tokens, and the stamp of the configuration they came from. The API classifies with it, the dispatcher
//! paces submissions with it; the ledger writer gets the same policy by a command (see
//! `reload`), so a decision never sees half of one configuration and half of another.
//!
//! `Live` (the policy, the station and submit rate limiters, the bearer tokens read from the token
//! file at start and at each reload, the `ConfigStamp`: hash and load time) behind one swap
//! (`LiveSettings`), read by the API (`Caller`'s tokens, classification, station rates, `GET
//! /v1/groups`) and the dispatcher (submit rate); its gate is held by a submission from
//! classification to the ledger's answer and closed by a reload; the `Reload` trait the API calls.

use std::future::Future;
use std::num::NonZeroU32;
use std::pin::Pin;
use std::sync::{Arc, RwLock};

use governor::{DefaultDirectRateLimiter, DefaultKeyedRateLimiter, Quota, RateLimiter};

use crate::auth::jwt::Issuers;
use crate::auth::x509::X509Rule;
use crate::auth::TokenTable;
use crate::domain::PolicySettings;

/// Which configuration is loaded and since when.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct ConfigStamp {
    /// Where it came from (a path, or "embedded ...").
    pub origin: String,
    /// SHA-256 of the configuration file's bytes as read (of the embedded text without a file),
    /// lower-case hex.
    pub sha256: String,
    /// When it was loaded (start-up or the latest reload), epoch milliseconds.
    pub loaded_at_ms: i64,
}

/// One configuration's live part.
pub struct Live {
    pub policy: Arc<PolicySettings>,
    /// Per station token: requests per second and burst.
    pub station_limits: Arc<DefaultKeyedRateLimiter<String>>,
    pub station_rate: (u32, u32),
    /// The dispatcher's submissions to the MSS: per second and burst.
    pub submit_limiter: Arc<DefaultDirectRateLimiter>,
    pub submit_rate: (u32, u32),
    /// The bearer tokens, read from the token file at start and at every reload (so tokens
    /// rotate without a restart); `None`: authentication is off and every caller is an operator.
    pub tokens: Option<Arc<TokenTable>>,
    /// Client certificate subjects and their roles (`[[auth.x509]]`).
    pub x509: Arc<[X509Rule]>,
    /// WLCG token issuers and their key caches (`[[auth.issuers]]`).
    pub issuers: Arc<Issuers>,
    pub stamp: ConfigStamp,
}

/// Who may call: the token file, certificate subjects, token issuers.
pub struct Identities {
    pub tokens: Option<Arc<TokenTable>>,
    pub x509: Arc<[X509Rule]>,
    pub issuers: Arc<Issuers>,
}

impl Identities {
    /// Nobody: authentication is off.
    pub fn none() -> Identities {
        Identities {
            tokens: None,
            x509: Arc::from(Vec::new()),
            issuers: Arc::new(Issuers::empty()),
        }
    }
}

impl Live {
    /// Whether callers must authenticate (else each is an operator: loopback only).
    pub fn auth_on(&self) -> bool {
        self.tokens.is_some() || !self.x509.is_empty() || !self.issuers.is_empty()
    }
}

impl Live {
    /// `station` and `submit` are (rate per second, burst). A limiter whose rate did not change
    /// is taken over from `before`, so a reload does not hand every station a fresh burst.
    pub fn new(
        policy: Arc<PolicySettings>,
        station: (u32, u32),
        submit: (u32, u32),
        identities: Identities,
        stamp: ConfigStamp,
        before: Option<&Live>,
    ) -> Live {
        let station_limits = match before {
            Some(b) if b.station_rate == station => b.station_limits.clone(),
            _ => Arc::new(RateLimiter::keyed(quota(station))),
        };
        let submit_limiter = match before {
            Some(b) if b.submit_rate == submit => b.submit_limiter.clone(),
            _ => Arc::new(RateLimiter::direct(quota(submit))),
        };
        Live {
            policy,
            station_limits,
            station_rate: station,
            submit_limiter,
            submit_rate: submit,
            tokens: identities.tokens,
            x509: identities.x509,
            issuers: identities.issuers,
            stamp,
        }
    }
}

fn quota((rate, burst): (u32, u32)) -> Quota {
    let rate = NonZeroU32::new(rate).unwrap_or(NonZeroU32::MIN);
    let burst = NonZeroU32::new(burst).unwrap_or(NonZeroU32::MIN);
    Quota::per_second(rate).allow_burst(burst)
}

/// The current [`Live`] and the gate a reload closes while it swaps.
pub struct LiveSettings {
    current: RwLock<Arc<Live>>,
    /// Held shared by whoever classifies a request until the ledger answered it, and
    /// exclusively by a reload while it hands the writer the new policy and swaps `current`: so
    /// every request classified under a configuration reaches the writer before the writer
    /// takes the next one.
    gate: tokio::sync::RwLock<()>,
}

impl LiveSettings {
    pub fn new(live: Live) -> LiveSettings {
        LiveSettings {
            current: RwLock::new(Arc::new(live)),
            gate: tokio::sync::RwLock::new(()),
        }
    }

    /// The configuration in force now.
    pub fn get(&self) -> Arc<Live> {
        self.current
            .read()
            .unwrap_or_else(|poisoned| poisoned.into_inner())
            .clone()
    }

    /// The configuration to classify with, and the guard to hold until the ledger answered.
    pub async fn deciding(&self) -> (tokio::sync::RwLockReadGuard<'_, ()>, Arc<Live>) {
        let guard = self.gate.read().await;
        (guard, self.get())
    }

    /// Close the gate: no request is being classified while the guard is held.
    pub async fn swapping(&self) -> tokio::sync::RwLockWriteGuard<'_, ()> {
        self.gate.write().await
    }

    /// Put `live` in force.
    pub fn swap(&self, live: Live) {
        *self
            .current
            .write()
            .unwrap_or_else(|poisoned| poisoned.into_inner()) = Arc::new(live);
    }
}

/// Why a reload changed nothing.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Refusal {
    /// The configuration does not validate.
    Invalid,
    /// It changes a key that cannot change while the broker runs.
    Fixed,
    /// It leaves out a group that still has unfinished requests.
    RemovedGroups,
    /// The broker could not put it in force (its ledger failed): not the configuration's fault.
    Failed,
}

/// A refused reload: why, the key it is about, and the whole reason.
#[derive(Debug, Clone)]
pub struct ReloadRefused {
    pub why: Refusal,
    pub key: String,
    pub message: String,
}

/// What is in force after a reload.
#[derive(Debug, Clone)]
pub struct Reloaded {
    pub stamp: ConfigStamp,
    /// The file's bytes differ from the previous configuration's.
    pub changed: bool,
}

/// What reloads the configuration (`reload::Reloader`), as the API and SIGHUP's handler see it.
pub trait Reload: Send + Sync {
    /// Re-read, check and put in force the configuration; `trigger` names the cause in the log.
    fn reload<'a>(
        &'a self,
        trigger: &'a str,
    ) -> Pin<Box<dyn Future<Output = Result<Reloaded, ReloadRefused>> + Send + 'a>>;
}
