//! What a generated trace holds: counts the CLI prints as JSON (serde) or as text (Display).

use std::collections::BTreeMap;
use std::fmt;

use serde::Serialize;

use crate::text_table;

/// What a generated trace holds, for the CLI to print.
#[derive(Debug, Clone, Default, PartialEq, Serialize)]
pub struct Summary {
    /// Every record written (recalls and data-taking writes).
    pub records: u64,
    /// Recall requests (scattered and campaign).
    pub recalls: u64,
    pub scattered: u64,
    pub campaign_requests: u64,
    /// Campaigns opened.
    pub campaigns: u64,
    /// campaign_requests / recalls (0 without recalls).
    pub campaign_share: f64,
    /// Data-taking writes.
    pub data_taking: u64,
    /// Sum of size_bytes over every record (saturating).
    pub bytes: u64,
    /// Volumes read by recalls plus volumes written by data taking.
    pub distinct_volumes: u64,
    /// `t` of the last record.
    pub duration_s: f64,
    /// Records per group, `<access_mode>/<physics_group>` (the data-taking stream included).
    pub per_group: BTreeMap<String, u64>,
    /// Records per access mode.
    pub per_access_mode: BTreeMap<String, u64>,
}

impl fmt::Display for Summary {
    /// The totals, then one row per group: records and their share of all records.
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        writeln!(
            f,
            "{} records over {:.1} s: {} recalls ({} scattered, {} in {} campaigns, share {:.3}), \
             {} data-taking writes; {} bytes on {} volumes",
            self.records,
            self.duration_s,
            self.recalls,
            self.scattered,
            self.campaign_requests,
            self.campaigns,
            self.campaign_share,
            self.data_taking,
            self.bytes,
            self.distinct_volumes,
        )?;
        let total = self.records.max(1) as f64;
        let rows: Vec<Vec<String>> = self
            .per_group
            .iter()
            .map(|(group, &n)| {
                vec![
                    group.clone(),
                    n.to_string(),
                    format!("{:.1}", 100.0 * n as f64 / total),
                ]
            })
            .collect();
        f.write_str(&text_table::aligned(&["group", "records", "%"], &rows))
    }
}
