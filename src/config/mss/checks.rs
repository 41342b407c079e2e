//! The adapter's capabilities against the ordering policy: combinations that cannot work are
//! refused (a pass-through policy with an MSS that takes no priority, priorities the MSS cannot
//! take, more outstanding transfers than the adapter runs), each naming the key to change; what
//! works with less than the policy asks is noted.

use mss_adapters::encp::EncpConfig;
use mss_adapters::{Band, Capabilities, PriorityScale};

use super::super::Issues;
use crate::domain::mss::{AdapterSettings, MssSettings};
use crate::domain::{GroupKind, PolicySettings};
use crate::policy::order::{Algorithm, OrderSettings};

/// A priority class: its rank, path and MSS priority.
type ClassEntry<'a> = (usize, &'a str, i64);

/// A priority the broker may send: the key that sets it, its value, whether it is a priority
/// class's.
type Sent = (String, i64, bool);

/// Check the adapter's capabilities against the ordering policy: refuse what cannot work,
/// each issue naming the key to change; note what works with less than the policy asks.
pub(in crate::config) fn check_against_policy(
    mss: &MssSettings,
    policy: &PolicySettings,
    issues: &mut Issues,
    notes: &mut Vec<String>,
) {
    let caps = mss.adapter.capabilities();
    let name = mss.adapter.name();
    let order = &policy.order;
    let classes: Vec<ClassEntry<'_>> = policy
        .groups
        .iter()
        .filter_map(|g| match g.kind {
            GroupKind::Priority { rank, mss_priority } => {
                Some((rank, g.path.as_str(), mss_priority))
            }
            GroupKind::FairShare { .. } => None,
        })
        .collect();
    if let AdapterSettings::Encp(c) = &mss.adapter {
        check_encp(c, &classes, issues, notes);
    }
    let sent = sent_priorities(mss, policy, &classes);
    check_priority_scale(&caps.priority, name, &sent, order, issues);
    if let Some(max) = caps.max_outstanding {
        if order.held() {
            check_outstanding(mss, order, max, !classes.is_empty(), issues, notes);
        }
    }
    note_reprioritise(mss, order, &caps, notes);
    if mss.volume_lookup.is_some() && !order.volumes() {
        notes.push(format!(
            "mss.volume_lookup is set, but release.mode is \"{}\": lookups run only in the \
             volumes mode, where a request's volume batches it with its tape",
            order.release.mode.name()
        ));
    }
    let batch_files = order.release.volumes.batch_max_files as usize;
    if order.volumes() && batch_files > mss.submit_batch {
        notes.push(format!(
            "release.volumes.batch_max_files ({batch_files}) is above mss.submit_batch ({}): a \
             larger volume batch reaches the mss in several calls (in order, one after the \
             other); raise mss.submit_batch and mss.submit_burst to send each batch in one",
            mss.submit_batch
        ));
    }
}

/// encp: local roots set, and every class it configures a priority class.
fn check_encp(
    c: &EncpConfig,
    classes: &[ClassEntry<'_>],
    issues: &mut Issues,
    notes: &mut Vec<String>,
) {
    if c.local_roots.is_empty() {
        notes.push(
            "mss.encp.local_roots is empty: a station may name any absolute path the broker's \
             user can write (a read's local_file) or read (a write's); set the directories \
             stations may use"
                .into(),
        );
    }
    for class in c.classes.keys() {
        if !classes.iter().any(|(_, path, _)| path == class) {
            let known: Vec<&str> = classes.iter().map(|(_, p, _)| *p).collect();
            issues.add(
                format!("mss.encp.classes.\"{class}\""),
                format!("is not a priority class (known: {})", known.join(", ")),
            );
        }
    }
}

/// Priorities the broker may send, with the keys that set them.
fn sent_priorities(
    mss: &MssSettings,
    policy: &PolicySettings,
    classes: &[ClassEntry<'_>],
) -> Vec<Sent> {
    let order = &policy.order;
    let held = order.held() || order.volumes();
    let mut sent: Vec<Sent> = classes
        .iter()
        .filter(|(_, path, _)| match &mss.adapter {
            AdapterSettings::Encp(c) => c.classes.get(*path).and_then(|k| k.priority).is_none(),
            _ => true,
        })
        .map(|(rank, _, p)| (format!("priority_classes[{rank}].mss_priority"), *p, true))
        .collect();
    match order.algorithm {
        Algorithm::Sam => {
            sent.push(("policy.p_front".into(), policy.p_front, false));
            sent.push(("policy.p_back".into(), policy.p_back, false));
        }
        _ => {
            sent.push(("policy.band_low".into(), order.band_low, false));
            sent.push(("policy.band_high".into(), order.band_high, false));
        }
    }
    if order.max_wait_ms.is_some() && !held {
        sent.push((
            "policy.starved_priority".into(),
            order.starved_priority,
            false,
        ));
    }
    sent
}

/// Every priority sent must be one the MSS takes (or, with none, the broker must hold).
fn check_priority_scale(
    scale: &PriorityScale,
    name: &str,
    sent: &[Sent],
    order: &OrderSettings,
    issues: &mut Issues,
) {
    let held = order.held() || order.volumes();
    match scale {
        PriorityScale::None => {
            if !held {
                issues.add(
                    "release.mode",
                    format!(
                        "the {name} adapter's MSS takes no priority, so \"pass_through\" could not order \
                         anything there: set release.mode = \"held\" (the broker then orders requests \
                         itself and keeps at most release.limit outstanding per library)"
                    ),
                );
            }
        }
        PriorityScale::Direct { min, max } => {
            for (key, p, _) in sent {
                if !(*min..=*max).contains(p) {
                    issues.add(
                        key.clone(),
                        format!("{p} is outside the priorities the {name} adapter's MSS takes ({min} to {max})"),
                    );
                }
            }
        }
        PriorityScale::Bands(bands) => check_bands(scale, bands, sent, order, issues),
    }
}

/// Held mode: no library may have more outstanding than the adapter runs at once.
fn check_outstanding(
    mss: &MssSettings,
    order: &OrderSettings,
    max: usize,
    has_classes: bool,
    issues: &mut Issues,
    notes: &mut Vec<String>,
) {
    let name = mss.adapter.name();
    let key = match &mss.adapter {
        AdapterSettings::Encp(_) => "mss.encp.max_processes",
        AdapterSettings::Fts3(_) => "mss.fts3.max_outstanding",
        AdapterSettings::TapeRest(_) => "mss.tape_rest.max_outstanding",
        AdapterSettings::Http { .. } => "mss",
    };
    let limits = std::iter::once(("release.limit".to_string(), order.release.limit)).chain(
        order
            .release
            .libraries
            .iter()
            .map(|(lib, n)| (format!("release.libraries.\"{lib}\""), *n)),
    );
    for (lkey, limit) in limits {
        if limit as usize > max {
            issues.add(
                lkey,
                format!(
                    "lets {limit} transfers be outstanding, but the {name} adapter takes at most \
                     {max} at once ({key}): lower it below {max}, leaving room for priority classes"
                ),
            );
        } else if limit as usize == max && has_classes {
            notes.push(format!(
                "{lkey} equals {key} ({max}): when every slot is taken, a priority class's \
                 request waits for a running transfer to end; a lower limit keeps room for it"
            ));
        }
    }
}

/// A re-prioritisation period with an MSS that cannot change priorities is only noted.
fn note_reprioritise(
    mss: &MssSettings,
    order: &OrderSettings,
    caps: &Capabilities,
    notes: &mut Vec<String>,
) {
    let name = mss.adapter.name();
    if order.reprioritise.is_some() && !caps.reprioritize && caps.priority != PriorityScale::None {
        let how = match &mss.adapter {
            AdapterSettings::Encp(_) => " (set mss.encp.reprioritize_command)",
            _ => "",
        };
        notes.push(format!(
            "policy.reprioritise_secs is set, but the {name} adapter cannot change priorities at the \
             MSS{how}: requests keep the priority they were submitted with"
        ));
    }
}

/// With a few MSS levels: every priority must map, priority classes must stay strictly above
/// every fair-share priority, and in pass-through SAM's front must stay above back.
fn check_bands(
    scale: &PriorityScale,
    bands: &[Band],
    sent: &[Sent],
    order: &OrderSettings,
    issues: &mut Issues,
) {
    let mut fair_max: Option<(String, i64, i64)> = None;
    for (key, p, class) in sent {
        let Some(level) = scale.map(*p) else {
            issues.add(
                key.clone(),
                format!(
                    "{p} is below the first of mss.fts3.priority_bands (from = {})",
                    bands.first().map_or(0, |b| b.from)
                ),
            );
            continue;
        };
        if !class && fair_max.as_ref().is_none_or(|(_, _, l)| level > *l) {
            fair_max = Some((key.clone(), *p, level));
        }
    }
    if let Some((fkey, fp, flevel)) = &fair_max {
        for (key, p, class) in sent.iter().filter(|s| s.2) {
            let _ = class;
            if scale.map(*p).is_some_and(|l| l <= *flevel) {
                issues.add(
                    "mss.fts3.priority_bands",
                    format!(
                        "{key} ({p}) reaches FTS3 at priority {} like {fkey} ({fp}): data taking would \
                         not be ahead of fair share there; give priority classes a band of their own",
                        scale.map(*p).unwrap_or(0)
                    ),
                );
            }
        }
    }
    if order.algorithm == Algorithm::Sam && !order.held() && !order.volumes() {
        let front = sent.iter().find(|s| s.0 == "policy.p_front").map(|s| s.1);
        let back = sent.iter().find(|s| s.0 == "policy.p_back").map(|s| s.1);
        if let (Some(f), Some(b)) = (front, back) {
            if scale.map(f).is_some() && scale.map(f) == scale.map(b) {
                issues.add(
                    "mss.fts3.priority_bands",
                    format!(
                        "policy.p_front ({f}) and policy.p_back ({b}) reach FTS3 at the same priority: \
                         SAM's front and back would mean nothing there; put p_front in a higher band"
                    ),
                );
            }
        }
    }
}
