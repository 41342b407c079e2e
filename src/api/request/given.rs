//! How each field of [`super::SubmitRequest`] takes a JSON value: `null` is absent, a value of
//! the wrong JSON type is refused with the wording the API has always used (`must be a string,
//! got a number`). Bounds are not checked here but in `validate`, in field order.

use serde::de::{Deserializer, Error, IgnoredAny, MapAccess, SeqAccess, Visitor};

/// A JSON value as far as a field needs to see it: scalars kept, containers skipped.
enum Given {
    Null,
    Text(String),
    Unsigned(u64),
    Negative(i64),
    Float(f64),
    /// Any other JSON type, by the name a refusal gives it (`a boolean`, `an array`).
    Other(&'static str),
}

impl Given {
    fn kind(&self) -> &'static str {
        match self {
            Given::Null => "null",
            Given::Text(_) => "a string",
            Given::Unsigned(_) | Given::Negative(_) | Given::Float(_) => "a number",
            Given::Other(kind) => kind,
        }
    }
}

struct Shallow;

impl<'de> Visitor<'de> for Shallow {
    type Value = Given;
    fn expecting(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.write_str("a JSON value")
    }
    fn visit_unit<E: Error>(self) -> Result<Given, E> {
        Ok(Given::Null)
    }
    fn visit_none<E: Error>(self) -> Result<Given, E> {
        Ok(Given::Null)
    }
    fn visit_bool<E: Error>(self, _: bool) -> Result<Given, E> {
        Ok(Given::Other("a boolean"))
    }
    fn visit_u64<E: Error>(self, v: u64) -> Result<Given, E> {
        Ok(Given::Unsigned(v))
    }
    fn visit_i64<E: Error>(self, v: i64) -> Result<Given, E> {
        Ok(u64::try_from(v).map_or(Given::Negative(v), Given::Unsigned))
    }
    fn visit_f64<E: Error>(self, v: f64) -> Result<Given, E> {
        Ok(Given::Float(v))
    }
    fn visit_str<E: Error>(self, v: &str) -> Result<Given, E> {
        Ok(Given::Text(v.to_owned()))
    }
    fn visit_string<E: Error>(self, v: String) -> Result<Given, E> {
        Ok(Given::Text(v))
    }
    fn visit_seq<A: SeqAccess<'de>>(self, mut seq: A) -> Result<Given, A::Error> {
        while seq.next_element::<IgnoredAny>()?.is_some() {}
        Ok(Given::Other("an array"))
    }
    fn visit_map<A: MapAccess<'de>>(self, mut map: A) -> Result<Given, A::Error> {
        while map.next_entry::<IgnoredAny, IgnoredAny>()?.is_some() {}
        Ok(Given::Other("an object"))
    }
}

fn given<'de, D: Deserializer<'de>>(d: D) -> Result<Given, D::Error> {
    d.deserialize_any(Shallow)
}

/// A string field.
pub fn text<'de, D: Deserializer<'de>>(d: D) -> Result<Option<String>, D::Error> {
    match given(d)? {
        Given::Null => Ok(None),
        Given::Text(s) => Ok(Some(s)),
        other => Err(D::Error::custom(format!(
            "must be a string, got {}",
            other.kind()
        ))),
    }
}

/// A string from a fixed set; any other JSON type is refused with the set (`values`).
fn one_of<'de, D: Deserializer<'de>>(d: D, values: &str) -> Result<Option<String>, D::Error> {
    match given(d)? {
        Given::Null => Ok(None),
        Given::Text(s) => Ok(Some(s)),
        _ => Err(D::Error::custom(values)),
    }
}

/// `direction`: a string, `read` or `write` (checked in `validate`).
pub fn direction<'de, D: Deserializer<'de>>(d: D) -> Result<Option<String>, D::Error> {
    one_of(d, super::DIRECTION_VALUES)
}

/// `qos`: a string, one of the QoS levels (checked in `validate`).
pub fn qos<'de, D: Deserializer<'de>>(d: D) -> Result<Option<String>, D::Error> {
    one_of(d, super::QOS_VALUES)
}

/// A count of bytes: a whole number that is not negative (its bounds are checked in `validate`).
pub fn size<'de, D: Deserializer<'de>>(d: D) -> Result<Option<u64>, D::Error> {
    match given(d)? {
        Given::Null => Ok(None),
        Given::Unsigned(v) => Ok(Some(v)),
        Given::Negative(_) => Err(D::Error::custom("must be greater than 0")),
        // serde_json reads a whole number past u64 as a float.
        Given::Float(v) if past_u64(v) => Err(D::Error::custom(
            "is too large (past 2^64 - 1): may be at most the configured limits.max_size_bytes",
        )),
        Given::Float(_) => Err(D::Error::custom("must be a whole number of bytes")),
        other => Err(D::Error::custom(format!(
            "must be an integer, got {}",
            other.kind()
        ))),
    }
}

/// A position on a volume: a whole number that is not negative.
pub fn position<'de, D: Deserializer<'de>>(d: D) -> Result<Option<u64>, D::Error> {
    match given(d)? {
        Given::Null => Ok(None),
        Given::Unsigned(v) => Ok(Some(v)),
        Given::Negative(_) => Err(D::Error::custom("must be 0 or more")),
        Given::Float(v) if past_u64(v) => {
            Err(D::Error::custom(format!("may be at most {}", i64::MAX)))
        }
        Given::Float(_) => Err(D::Error::custom("must be a whole number")),
        other => Err(D::Error::custom(format!(
            "must be an integer, got {}",
            other.kind()
        ))),
    }
}

/// A byte offset on a volume: a whole number that is not negative (its bound is checked in
/// `validate`).
pub fn offset_bytes<'de, D: Deserializer<'de>>(d: D) -> Result<Option<u64>, D::Error> {
    match given(d)? {
        Given::Null => Ok(None),
        Given::Unsigned(v) => Ok(Some(v)),
        Given::Negative(_) => Err(D::Error::custom("must be 0 or more (bytes)")),
        Given::Float(v) if past_u64(v) => Err(D::Error::custom(format!(
            "may be at most {} (1 PB)",
            super::MAX_OFFSET_BYTES
        ))),
        Given::Float(_) => Err(D::Error::custom("must be a whole number of bytes")),
        other => Err(D::Error::custom(format!(
            "must be an integer, got {}",
            other.kind()
        ))),
    }
}

/// A whole number too large for a u64, as serde_json gives it (a float).
fn past_u64(v: f64) -> bool {
    v.fract() == 0.0 && v >= 18_446_744_073_709_551_616.0
}

/// A number (its bounds are checked in `validate`).
pub fn number<'de, D: Deserializer<'de>>(d: D) -> Result<Option<f64>, D::Error> {
    match given(d)? {
        Given::Null => Ok(None),
        Given::Unsigned(v) => Ok(Some(v as f64)),
        Given::Negative(v) => Ok(Some(v as f64)),
        Given::Float(v) => Ok(Some(v)),
        other => Err(D::Error::custom(format!(
            "must be a number, got {}",
            other.kind()
        ))),
    }
}
