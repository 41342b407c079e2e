//! `generate`: a synthetic trace from documented parameters (`GenParams`; docs/traces.md),
//! deterministic for a seed. Recalls arrive by a two-state on/off Markov-modulated Poisson
//! process; each picks its group by the demand mix, then is a campaign request (continuing its
//! group's campaign: consecutive positions on few volumes) or a scattered recall (volume by
//! Zipf, position uniform), on its group's own volumes with probability
//! `volumes.own_fraction`. A steady data-taking stream of writes is merged in time order.

use std::fmt::Write as _;
use std::io::Write;

use super::format::{write_ref, Direction, RecordRef};
use super::rng::{exp, hashed_normal, ln, Discrete, Rng, SplitMix64};
use super::TraceError;

mod params;
mod summary;

pub use params::{
    BurstParams, CampaignParams, DataTakingParams, GenParams, GroupParams, SizeParams, VolumeParams,
};
pub use summary::Summary;

/// Writes the trace `params` describe to `out`, one JSON line per record (hand in a buffered
/// writer), and returns its summary. Refuses parameters out of their documented bounds.
pub fn generate(params: &GenParams, out: &mut impl Write) -> Result<Summary, TraceError> {
    params.validate()?;
    let mut g = Generator::new(params);
    for n in 1..=params.requests {
        let t = g.arrivals.next(&mut g.rng);
        if t > super::format::MAX_T_SECS {
            return Err(TraceError::Param(format!(
                "rate_per_s: the trace would run past t = {:e} s, the latest a trace may hold; \
                 raise rate_per_s or lower requests",
                super::format::MAX_T_SECS
            )));
        }
        g.data_taking_until(t, out)?;
        g.recall(n, t, out)?;
    }
    Ok(g.finish())
}

/// Rounds a time to microseconds: monotone, so the order is kept, and short to print.
fn micros(t: f64) -> f64 {
    (t * 1e6).round() / 1e6
}

/// The on/off Markov-modulated Poisson process of recall arrivals (`BurstParams`).
struct Arrivals {
    t: f64,
    on: bool,
    state_end: f64,
    rate_on: f64,
    rate_off: f64,
    mean_on: f64,
    mean_off: f64,
}

impl Arrivals {
    fn new(p: &GenParams, rng: &mut Rng) -> Self {
        let b = &p.burst;
        let on_fraction = b.mean_on_s / (b.mean_on_s + b.mean_off_s);
        let rate_off = p.rate_per_s / (1.0 - on_fraction + b.ratio * on_fraction);
        Self {
            t: 0.0,
            on: false,
            state_end: rng.exponential(b.mean_off_s),
            rate_on: rate_off * b.ratio,
            rate_off,
            mean_on: b.mean_on_s,
            mean_off: b.mean_off_s,
        }
    }

    /// The next arrival time. Exponential gaps are memoryless, so at a state change the gap
    /// drawn in the old state is dropped and a new one drawn at the new rate.
    fn next(&mut self, rng: &mut Rng) -> f64 {
        loop {
            let rate = if self.on { self.rate_on } else { self.rate_off };
            let gap = rng.exponential(1.0 / rate);
            if self.t + gap <= self.state_end {
                self.t += gap;
                return self.t;
            }
            self.t = self.state_end;
            self.on = !self.on;
            let mean = if self.on { self.mean_on } else { self.mean_off };
            self.state_end = self.t + rng.exponential(mean);
        }
    }
}

/// A group's open campaign.
#[derive(Debug, Clone, Copy)]
struct Campaign {
    volume: u64,
    next_position: u64,
    remaining: u64,
}

/// Reused buffers: the only allocations are theirs, growing to the longest line.
#[derive(Default)]
struct Buffers {
    line: Vec<u8>,
    id: String,
    file: String,
    volume: String,
    user: String,
}

struct Generator<'p> {
    p: &'p GenParams,
    rng: Rng,
    arrivals: Arrivals,
    groups: Discrete,
    zipf: Discrete,
    /// Per group, Zipf over its own volumes (`volumes.own_fraction`); empty when that is 0.
    own_zipf: Vec<Discrete>,
    campaigns: Vec<Option<Campaign>>,
    volume_seen: Vec<bool>,
    per_group: Vec<u64>,
    next_write: u64,
    last_t: f64,
    summary: Summary,
    buf: Buffers,
}

impl<'p> Generator<'p> {
    fn new(p: &'p GenParams) -> Self {
        let mut rng = Rng::new(p.seed);
        let arrivals = Arrivals::new(p, &mut rng);
        Self {
            p,
            rng,
            arrivals,
            groups: Discrete::new(p.groups.iter().map(|g| g.weight)),
            zipf: Discrete::zipf(p.volumes.count, p.volumes.zipf_s),
            own_zipf: own_zipf(p),
            campaigns: vec![None; p.groups.len()],
            volume_seen: vec![false; p.volumes.count as usize],
            per_group: vec![0; p.groups.len()],
            next_write: 0,
            last_t: 0.0,
            summary: Summary::default(),
            buf: Buffers::default(),
        }
    }

    /// One recall, the n-th, at time t.
    fn recall(&mut self, n: u64, t: f64, out: &mut impl Write) -> Result<(), TraceError> {
        let gi = self.groups.sample(&mut self.rng);
        let (volume, position) = if self.rng.chance(self.p.campaigns.fraction) {
            self.summary.campaign_requests += 1;
            self.campaign_file(gi)
        } else {
            self.summary.scattered += 1;
            let v = if self.own() {
                let rank = self.own_zipf[gi].sample(&mut self.rng) as u64;
                self.own_volume(gi, rank)
            } else {
                self.zipf.sample(&mut self.rng) as u64
            };
            (v, 1 + self.rng.below(self.p.volumes.files_per_volume))
        };
        let station = &self.p.stations[self.rng.below(self.p.stations.len() as u64) as usize];
        let user_n = 1 + self.rng.below(u64::from(self.p.users_per_group));
        let group = &self.p.groups[gi];
        let size_bytes = self.file_size(volume, position);
        self.volume_seen[volume as usize] = true;
        self.per_group[gi] += 1;
        self.summary.recalls += 1;
        let b = &mut self.buf;
        reset(&mut b.id, format_args!("req-{n}"));
        reset(
            &mut b.volume,
            format_args!("{}{volume:06}", self.p.volumes.label_prefix),
        );
        reset(
            &mut b.file,
            format_args!("/pnfs/tape/{}/{position:07}.dat", b.volume),
        );
        reset(
            &mut b.user,
            format_args!("{}-{user_n}", group.physics_group),
        );
        let record = RecordRef {
            t: micros(t),
            client_request_id: &b.id,
            station,
            user: &b.user,
            file: &b.file,
            volume: Some(&b.volume),
            position: Some(position),
            offset_bytes: None,
            size_bytes,
            access_mode: &group.access_mode,
            physics_group: &group.physics_group,
            direction: Direction::Read,
            cancelled_t: None,
        };
        self.last_t = record.t;
        self.summary.bytes = self.summary.bytes.saturating_add(size_bytes);
        write_ref(&record, &mut b.line, out)
    }

    /// Whether this recall is on its group's own volumes (`volumes.own_fraction`; no draw at
    /// all when that is 0, so such traces are as they were before it existed). Validation
    /// leaves every group a volume of its own when it is above 0.
    fn own(&mut self) -> bool {
        let fraction = self.p.volumes.own_fraction;
        fraction > 0.0 && self.rng.chance(fraction)
    }

    /// The volume index of group gi's own volume of rank `rank` (from 0).
    fn own_volume(&self, gi: usize, rank: u64) -> u64 {
        gi as u64 + rank * self.p.groups.len() as u64
    }

    /// A campaign's volume, uniform over group gi's own volumes or over all of them.
    fn campaign_volume(&mut self, gi: usize) -> u64 {
        if self.own() {
            let owned = self.own_zipf[gi].len() as u64;
            let rank = self.rng.below(owned);
            self.own_volume(gi, rank)
        } else {
            self.rng.below(self.p.volumes.count)
        }
    }

    /// The next file of group gi's campaign, opening one if it has none.
    fn campaign_file(&mut self, gi: usize) -> (u64, u64) {
        let files_per_volume = self.p.volumes.files_per_volume;
        let c = &self.p.campaigns;
        let mut campaign = match self.campaigns[gi] {
            Some(open) => open,
            None => {
                self.summary.campaigns += 1;
                let size = c.min_files + self.rng.below(c.max_files - c.min_files + 1);
                Campaign {
                    volume: self.campaign_volume(gi),
                    next_position: 1 + self.rng.below(files_per_volume),
                    remaining: size,
                }
            }
        };
        if campaign.next_position > files_per_volume {
            campaign.volume = self.campaign_volume(gi);
            campaign.next_position = 1;
        }
        let file = (campaign.volume, campaign.next_position);
        campaign.next_position += 1;
        campaign.remaining -= 1;
        self.campaigns[gi] = (campaign.remaining > 0).then_some(campaign);
        file
    }

    /// A file's size: lognormal, a pure function of the seed, its volume and its position.
    fn file_size(&self, volume: u64, position: u64) -> u64 {
        let s = &self.p.sizes;
        let key = SplitMix64::new(self.p.seed ^ volume.wrapping_mul(0x9E37_79B9_7F4A_7C15))
            .next_u64()
            ^ position;
        let bytes = exp(ln(s.median_bytes) + s.sigma * hashed_normal(key)).round();
        if bytes >= s.max_bytes as f64 {
            s.max_bytes
        } else {
            (bytes as u64).clamp(s.min_bytes, s.max_bytes)
        }
    }

    /// The data-taking writes due at or before t: one every 1 / rate seconds from 0.
    fn data_taking_until(&mut self, t: f64, out: &mut impl Write) -> Result<(), TraceError> {
        let d = &self.p.data_taking;
        if d.rate_per_s <= 0.0 {
            return Ok(());
        }
        loop {
            let due = self.next_write as f64 / d.rate_per_s;
            if due > t {
                return Ok(());
            }
            let k = self.next_write;
            self.next_write += 1;
            let (volume, position) = (k / d.files_per_volume, k % d.files_per_volume + 1);
            let b = &mut self.buf;
            reset(&mut b.id, format_args!("daq-{}", k + 1));
            reset(&mut b.volume, format_args!("{}{volume:06}", d.label_prefix));
            reset(
                &mut b.file,
                format_args!(
                    "/pnfs/{}/{}/{}/{position:07}.dat",
                    d.access_mode, d.physics_group, b.volume
                ),
            );
            let record = RecordRef {
                t: micros(due),
                client_request_id: &b.id,
                station: &d.station,
                user: &d.user,
                file: &b.file,
                volume: Some(&b.volume),
                position: Some(position),
                offset_bytes: None,
                size_bytes: d.size_bytes,
                access_mode: &d.access_mode,
                physics_group: &d.physics_group,
                direction: Direction::Write,
                cancelled_t: None,
            };
            self.last_t = record.t;
            self.summary.data_taking += 1;
            self.summary.bytes = self.summary.bytes.saturating_add(d.size_bytes);
            write_ref(&record, &mut b.line, out)?;
        }
    }

    fn finish(mut self) -> Summary {
        let mut s = std::mem::take(&mut self.summary);
        let mut count = |path: String, mode: &str, n: u64| {
            if n > 0 {
                *s.per_group.entry(path).or_default() += n;
                *s.per_access_mode.entry(mode.to_string()).or_default() += n;
            }
        };
        for (group, &n) in self.p.groups.iter().zip(&self.per_group) {
            count(group.path(), &group.access_mode, n);
        }
        let d = &self.p.data_taking;
        count(
            format!("{}/{}", d.access_mode, d.physics_group),
            &d.access_mode,
            self.next_write,
        );
        s.records = s.recalls + s.data_taking;
        if s.recalls > 0 {
            s.campaign_share = s.campaign_requests as f64 / s.recalls as f64;
        }
        let written_volumes = s.data_taking.div_ceil(d.files_per_volume);
        s.distinct_volumes =
            self.volume_seen.iter().filter(|&&v| v).count() as u64 + written_volumes;
        s.duration_s = self.last_t;
        s
    }
}

/// Per group, Zipf over the volumes it owns (index v is group `v % groups`'s); none when
/// `volumes.own_fraction` is 0.
fn own_zipf(p: &GenParams) -> Vec<Discrete> {
    if p.volumes.own_fraction <= 0.0 {
        return Vec::new();
    }
    let n = p.groups.len() as u64;
    (0..n)
        .map(|gi| {
            Discrete::zipf(
                p.volumes.count.saturating_sub(gi).div_ceil(n),
                p.volumes.zipf_s,
            )
        })
        .collect()
}

/// Clears `s` and writes `args` into it (formatting into a String cannot fail).
fn reset(s: &mut String, args: std::fmt::Arguments<'_>) {
    s.clear();
    let _ = s.write_fmt(args);
}

#[cfg(test)]
mod tests;
