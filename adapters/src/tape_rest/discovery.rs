//! The site's discovery document, `GET {origin}/.well-known/wlcg-tape-rest-api` (WLCG Tape REST
//! API v1, pages 5 and 9): `{"sitename", "description", "endpoints": [{"uri", "version",
//! "metadata"}]}`. dCache serves the file `skel/var/httpd/wlcg-tape-rest-api.json`
//! (dCache/dcache `WellKnownWlcgProducerFactory.java`), EOS builds it
//! (cern-eos/eos `mgm/http/rest-api/json/tape/TapeJsonifiers.cc`). `targetedMetadata` is keyed
//! by `sitename` (dCache keeps only the keys in its `supportedSitenames`, `StageResources.java`;
//! EOS reads the activity under its sitename or `default`, `TapeModelBuilders.hh`); gfal2 reads the
//! document from the storage URL's origin and takes the highest endpoint version up to v1
//! (cern-fts/gfal2 `src/plugins/http/gfal_http_plugin.cpp`, `retrieve_and_store_tape_endpoint`).

use serde_json::Value;

/// What the discovery document says.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct Discovered {
    pub sitename: Option<String>,
    /// The v1 (or v0) endpoint's `uri` and `version`, when one is listed.
    pub endpoint: Option<(String, String)>,
}

/// Where the document is for an API base `url`: its scheme, host and port.
pub fn document_url(url: &str) -> Option<String> {
    let (scheme, rest) = url.split_once("://")?;
    let authority = rest.split('/').next().filter(|a| !a.is_empty())?;
    Some(format!(
        "{scheme}://{authority}/.well-known/wlcg-tape-rest-api"
    ))
}

/// Read a discovery document as gfal2 does.
pub fn read(doc: &Value) -> Discovered {
    let sitename = doc
        .get("sitename")
        .and_then(Value::as_str)
        .map(str::trim)
        .filter(|s| !s.is_empty())
        .map(str::to_string);
    let mut best: Option<(i64, String, String)> = None;
    for e in doc
        .get("endpoints")
        .and_then(Value::as_array)
        .into_iter()
        .flatten()
    {
        let (Some(uri), Some(version)) = (
            e.get("uri").and_then(Value::as_str),
            e.get("version").and_then(Value::as_str),
        ) else {
            continue;
        };
        let Ok(n) = version.trim_start_matches(['v', 'V']).parse::<i64>() else {
            continue;
        };
        if (0..=1).contains(&n) && best.as_ref().is_none_or(|(b, _, _)| n >= *b) {
            best = Some((n, uri.to_string(), version.to_string()));
        }
    }
    Discovered {
        sitename,
        endpoint: best.map(|(_, uri, version)| (uri, version)),
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use serde_json::json;

    #[test]
    fn the_document_is_read_as_gfal2_reads_it() {
        assert_eq!(
            document_url("https://dcache.example.org:3880/api/v1/tape").as_deref(),
            Some("https://dcache.example.org:3880/.well-known/wlcg-tape-rest-api")
        );
        // dCache's shipped example.
        let d = read(
            &json!({"sitename": "dcache-example-org", "description": "x",
            "endpoints": [{"uri": "https://example.org:3880/api/v1/tape", "version": "v1",
            "metadata": {}}]}),
        );
        assert_eq!(d.sitename.as_deref(), Some("dcache-example-org"));
        assert_eq!(
            d.endpoint,
            Some(("https://example.org:3880/api/v1/tape".into(), "v1".into()))
        );
        let d = read(&json!({"endpoints": [{"uri": "u2", "version": "v2"},
            {"uri": "u0", "version": "v0"}]}));
        assert_eq!(d.sitename, None);
        assert_eq!(d.endpoint, Some(("u0".into(), "v0".into())));
    }
}
