//! Paths as the Tape REST servers answer them. StoRM keeps and answers each path
//! `lexically_normal()` (italiangrid/storm-tape), dCache through `FsPath`, and gfal2 collapses
//! repeated slashes on both sides before it matches a polled file to its request
//! (cern-fts/gfal2 `src/plugins/http/gfal_http_plugin_tape.cpp`, `polling_get_item_by_path`).
//! A path is matched here only in this form, so `/a//b/./c` sent is `/a/b/c` answered.

/// `path` lexically normalised: repeated slashes collapsed, `.` segments dropped, `..` taking
/// back the segment before it (never above the root), no trailing slash.
pub fn normal(path: &str) -> String {
    let mut segments: Vec<&str> = Vec::new();
    for segment in path.split('/') {
        match segment {
            "" | "." => {}
            ".." => {
                segments.pop();
            }
            s => segments.push(s),
        }
    }
    let joined = segments.join("/");
    if path.starts_with('/') {
        format!("/{joined}")
    } else {
        joined
    }
}

#[cfg(test)]
mod tests {
    use super::normal;

    #[test]
    fn paths_are_normalised_like_storm_and_gfal2_do() {
        assert_eq!(normal("/a//b/./c"), "/a/b/c");
        assert_eq!(normal("//pnfs/x/../y/"), "/pnfs/y");
        assert_eq!(normal("/../a"), "/a");
        assert_eq!(normal("/a/b/c"), "/a/b/c");
    }
}
