//! The dispatcher's validated settings (`[mss]`): which adapter and its table, rates, retries.
//! Built by `config`; read by the dispatcher and by start-up, which builds the adapter. Here,
//! below both, so that `config` depends on the domain and not on the module it configures.

use std::net::SocketAddr;
use std::time::Duration;

use mss_adapters::encp::EncpConfig;
use mss_adapters::fts3::Fts3Config;
use mss_adapters::tape_rest::TapeRestConfig;
use mss_adapters::Capabilities;

use crate::domain::settings::RetrySettings;

#[derive(Debug, Clone)]
pub struct MssSettings {
    pub adapter: AdapterSettings,
    pub timeout: Duration,
    pub submit_rate_per_sec: u32,
    pub submit_burst: u32,
    pub submit_batch: usize,
    pub retry: RetrySettings,
    pub event_wait: Duration,
    /// After this long without news of an in-flight request, ask the MSS for its status.
    pub stale_after: Duration,
    /// `[mss.simulator]` as given, enabled or not (`None`: no table): `simulate` models its
    /// drives.
    pub simulator: Option<SimulatorSettings>,
    /// `[mss.volume_lookup]`: where a file lies when the station does not say, and how long a
    /// request waits for the answer in the `volumes` mode (ms; also in `VolumeSettings`).
    pub volume_lookup: Option<(mss_adapters::locate::LookupSettings, i64)>,
}

impl MssSettings {
    /// Where the configured adapter writes a read's station-side copy (`None`: nowhere: the
    /// simulator and Tape REST write none).
    pub fn read_outputs(&self) -> Option<std::sync::Arc<dyn mss_adapters::ReadOutput>> {
        match &self.adapter {
            AdapterSettings::Encp(c) => Some(std::sync::Arc::new(c.clone())),
            AdapterSettings::Fts3(c) => Some(std::sync::Arc::new(c.clone())),
            AdapterSettings::Http { .. } | AdapterSettings::TapeRest(_) => None,
        }
    }
}

#[derive(Debug, Clone)]
pub enum AdapterSettings {
    /// JSON over HTTP at `url`, or at the embedded simulator when `simulator` is set.
    Http {
        url: Option<String>,
        simulator: Option<SimulatorSettings>,
    },
    /// Enstore through its `encp` command line.
    Encp(EncpConfig),
    /// FTS3's REST interface.
    Fts3(Fts3Config),
    /// The WLCG Tape REST API.
    TapeRest(TapeRestConfig),
}

impl AdapterSettings {
    /// The adapter's name, as `mss.adapter` spells it.
    pub fn name(&self) -> &'static str {
        match self {
            AdapterSettings::Http { .. } => "http",
            AdapterSettings::Encp(_) => "encp",
            AdapterSettings::Fts3(_) => "fts3",
            AdapterSettings::TapeRest(_) => "tape_rest",
        }
    }

    /// What the configured MSS can do.
    pub fn capabilities(&self) -> Capabilities {
        match self {
            AdapterSettings::Http { .. } => Capabilities::full(),
            AdapterSettings::Encp(c) => c.capabilities(),
            AdapterSettings::Fts3(c) => c.capabilities(),
            AdapterSettings::TapeRest(c) => c.capabilities(),
        }
    }
}

#[derive(Debug, Clone)]
pub struct SimulatorSettings {
    pub listen: SocketAddr,
    pub time_scale: f64,
    /// The library model, drives and all, as `[mss.simulator]` sets it: what `serve`'s
    /// embedded simulator runs, and what `mssbroker simulate` starts from.
    pub library: mss_adapters::sim::library::LibraryConfig,
    /// Whether the table set `model` (`simulate` runs the Enstore model when it did not).
    pub model_set: bool,
    /// Whether the table is enabled (`serve` starts a simulator only then).
    pub enabled: bool,
}
