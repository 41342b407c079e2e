//! Enstore's layer 4 of a file in the pnfs/Chimera name space (see the module above for the
//! upstream source each rule comes from).

use std::io::Read;
use std::path::{Path, PathBuf};
use std::time::Duration;

use tokio::sync::OwnedSemaphorePermit;

use super::{check_label, Located, LookupError};

/// The most of a layer 4 file read: eleven short lines (a path among them) fit many times over.
const MAX_LAYER_BYTES: u64 = 64 * 1024;

/// The layer 4 file of `file` (a station's absolute path under `prefix`) under `mount`:
/// `dir/.(use)(4)(name)`, as `layer_file` in Enstore's `src/chimera.py` names it.
pub fn layer4_path(mount: &Path, prefix: &str, file: &str) -> Result<PathBuf, LookupError> {
    let prefix = prefix.trim_end_matches('/');
    let rest = file
        .strip_prefix(prefix)
        .filter(|r| r.starts_with('/'))
        .ok_or_else(|| LookupError::Path("not under the name space's path_prefix".into()))?;
    let mut parts = Vec::new();
    for p in rest.split('/').filter(|p| !p.is_empty()) {
        if p == "." || p == ".." {
            return Err(LookupError::Path("a `.` or `..` part".into()));
        }
        parts.push(p);
    }
    let Some((name, dirs)) = parts.split_last() else {
        return Err(LookupError::Path("no file name".into()));
    };
    if name.starts_with(".(") {
        return Err(LookupError::Path("a special name space name".into()));
    }
    let mut out = mount.to_path_buf();
    out.extend(dirs);
    out.push(format!(".(use)(4)({name})"));
    Ok(out)
}

/// A file's volume and tape file number from its layer 4 text (`set_xreference`'s eleven lines;
/// 9 or 10 from early versions). Strict: the first line a label, the second a tape location
/// cookie, at most eleven lines (blank lines at the end aside).
pub fn parse_layer4(text: &str) -> Result<Located, LookupError> {
    let lines: Vec<&str> = text.trim_end().lines().map(str::trim).collect();
    if text.trim().is_empty() {
        return Err(LookupError::Garbled(
            "layer 4 is empty (the file is not on tape yet)".into(),
        ));
    }
    if !(9..=11).contains(&lines.len()) {
        return Err(LookupError::Garbled(format!(
            "layer 4 has {} lines, not 9 to 11",
            lines.len()
        )));
    }
    let volume = lines[0];
    check_label(volume)?;
    let position = tape_file_number(lines[1])
        .ok_or_else(|| LookupError::Garbled("the location cookie is not a tape cookie".into()))?;
    Ok(Located {
        volume: volume.to_string(),
        position,
    })
}

/// The file number of a tape location cookie `PPPP_BBBBBBBBB_NNNNNNN` (`loc_to_cookie` in
/// Enstore's `src/mover.py`; `is_location_cookie_tape` in `src/enstore_functions3.py`).
pub fn tape_file_number(cookie: &str) -> Option<u64> {
    let b = cookie.as_bytes();
    let shape = b.len() == 22
        && b[4] == b'_'
        && b[14] == b'_'
        && (b.iter().enumerate()).all(|(i, c)| i == 4 || i == 14 || c.is_ascii_digit());
    if !shape {
        return None;
    }
    cookie[15..].parse().ok()
}

/// Read `file`'s layer 4 off the async threads (a name space mount may hang), within `timeout`.
/// The slot `permit` is held until the read really ends, so a hung mount takes slots, never
/// more threads than `concurrency`.
pub(super) async fn read(
    mount: &Path,
    prefix: &str,
    file: &str,
    timeout: Duration,
    permit: OwnedSemaphorePermit,
) -> Result<Located, LookupError> {
    let layer = layer4_path(mount, prefix, file)?;
    let task = tokio::task::spawn_blocking(move || {
        let _slot = permit;
        read_bounded(&layer)
    });
    match tokio::time::timeout(timeout, task).await {
        Ok(Ok(read)) => parse_layer4(&read?),
        Ok(Err(_)) => Err(LookupError::Unreadable("the layer 4 read failed".into())),
        Err(_) => Err(LookupError::TimedOut(timeout)),
    }
}

fn read_bounded(layer: &Path) -> Result<String, LookupError> {
    let unreadable = |e: std::io::Error| {
        LookupError::Unreadable(format!("cannot read the file's layer 4: {}", e.kind()))
    };
    let f = std::fs::File::open(layer).map_err(unreadable)?;
    let mut bytes = Vec::new();
    f.take(MAX_LAYER_BYTES + 1)
        .read_to_end(&mut bytes)
        .map_err(unreadable)?;
    if bytes.len() as u64 > MAX_LAYER_BYTES {
        return Err(LookupError::Garbled("layer 4 is too long".into()));
    }
    String::from_utf8(bytes).map_err(|_| LookupError::Garbled("layer 4 is not text".into()))
}
