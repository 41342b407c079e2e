//! A tape label or library name as the volumes queue keeps it. A volume's label is a key of
//! half a dozen of the queue's maps and sets, and a library's name the key of its state: both
//! are cloned and compared on every push, removal and decision. Labels of up to 16 bytes
//! (Enstore's volume labels are 6 to 8, `VR1234L8`; library names such as `CD-LTO8G2`) are kept
//! inline, so a clone copies 24 bytes and a comparison reads no heap memory; longer ones share
//! one heap copy. The order is the text's byte order, as a `String`'s, so every decision is the
//! same as with `String` keys.

use std::cmp::Ordering;
use std::fmt;
use std::sync::Arc;

/// Labels of at most this many bytes are inline.
const INLINE: usize = 16;

/// A volume label: ordered, compared and hashed as its text.
#[derive(Clone, PartialEq, Eq, Hash)]
pub struct Label(Repr);

/// Canonical: a label fits inline exactly when it is `Inline`, so the derived equality and hash
/// of the representation are those of the text.
#[derive(Clone, PartialEq, Eq, Hash)]
enum Repr {
    /// The label's bytes, zero-padded on the right, and its length.
    Inline {
        bytes: [u8; INLINE],
        len: u8,
    },
    Heap(Arc<str>),
}

impl Label {
    pub fn new(text: &str) -> Label {
        let raw = text.as_bytes();
        if raw.len() > INLINE {
            return Label(Repr::Heap(Arc::from(text)));
        }
        let mut bytes = [0u8; INLINE];
        bytes[..raw.len()].copy_from_slice(raw);
        Label(Repr::Inline {
            bytes,
            len: raw.len() as u8,
        })
    }

    pub fn as_str(&self) -> &str {
        match &self.0 {
            // The bytes were cut from a `&str` at its length: always UTF-8.
            Repr::Inline { bytes, len } => {
                std::str::from_utf8(&bytes[..usize::from(*len)]).unwrap_or_default()
            }
            Repr::Heap(text) => text,
        }
    }
}

impl Ord for Label {
    fn cmp(&self, other: &Self) -> Ordering {
        match (&self.0, &other.0) {
            // Zero padding keeps the byte order; when the padded bytes are equal, one label is
            // the other plus trailing NULs, and the shorter comes first, as with `str`.
            (Repr::Inline { bytes: a, len: la }, Repr::Inline { bytes: b, len: lb }) => {
                let (a, b) = (u128::from_be_bytes(*a), u128::from_be_bytes(*b));
                a.cmp(&b).then(la.cmp(lb))
            }
            _ => self.as_str().cmp(other.as_str()),
        }
    }
}

impl PartialOrd for Label {
    fn partial_cmp(&self, other: &Self) -> Option<Ordering> {
        Some(self.cmp(other))
    }
}

impl fmt::Debug for Label {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        fmt::Debug::fmt(self.as_str(), f)
    }
}

impl From<&str> for Label {
    fn from(text: &str) -> Label {
        Label::new(text)
    }
}

#[cfg(test)]
mod tests {
    use super::Label;
    use proptest::prelude::*;
    use std::collections::hash_map::DefaultHasher;
    use std::hash::{Hash, Hasher};

    fn hash(l: &Label) -> u64 {
        let mut h = DefaultHasher::new();
        l.hash(&mut h);
        h.finish()
    }

    /// Labels short and long, with NULs and multi-byte characters, around the inline limit.
    fn label() -> impl Strategy<Value = String> {
        prop_oneof![
            "[A-Z0-9]{0,8}",
            "[AB\u{0}é]{0,20}",
            "[A-Z]{15,17}",
            ".{0,30}",
        ]
    }

    #[test]
    fn short_labels_are_inline_and_long_ones_keep_their_text() {
        let short = Label::new("VR1234L8");
        let edge = Label::new("ABCDEFGHIJKLMNOP");
        let long = Label::new("ABCDEFGHIJKLMNOPQ");
        assert!(matches!(short.0, super::Repr::Inline { .. }));
        assert!(matches!(edge.0, super::Repr::Inline { .. }));
        assert!(matches!(long.0, super::Repr::Heap(_)));
        assert_eq!(short.as_str(), "VR1234L8");
        assert_eq!(edge.as_str(), "ABCDEFGHIJKLMNOP");
        assert_eq!(long.as_str(), "ABCDEFGHIJKLMNOPQ");
        assert!(Label::new("A") < Label::new("A\u{0}"));
        assert!(edge < long);
        assert_eq!(format!("{short:?}"), "\"VR1234L8\"");
    }

    /// Every byte position of an inline label counts, and so does the inline limit: texts that
    /// share a prefix of each length from 0 to 17 bytes and then differ (or end) compare as
    /// their texts do.
    #[test]
    fn each_byte_counts_up_to_and_past_the_inline_limit() {
        let ends = ["", "\u{0}", "A", "B", "é", "AA"];
        for n in 0..=17 {
            let prefix = "Q".repeat(n);
            for x in ends {
                for y in ends {
                    let (a, b) = (format!("{prefix}{x}"), format!("{prefix}{y}"));
                    let (la, lb) = (Label::new(&a), Label::new(&b));
                    assert_eq!(la.cmp(&lb), a.cmp(&b), "{a:?} against {b:?}");
                    assert_eq!(la == lb, a == b, "{a:?} against {b:?}");
                }
            }
        }
    }

    proptest! {
        /// A label orders, compares and hashes as its text does.
        #[test]
        fn a_label_behaves_as_its_text(a in label(), b in label()) {
            let (la, lb) = (Label::new(&a), Label::new(&b));
            prop_assert_eq!(la.as_str(), a.as_str());
            prop_assert_eq!(la.cmp(&lb), a.cmp(&b));
            prop_assert_eq!(la == lb, a == b);
            if a == b {
                prop_assert_eq!(hash(&la), hash(&lb));
            }
        }
    }
}
