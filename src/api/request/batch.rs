//! Reading a batch body, `{"requests": [...]}`: the items stay slices of the body, each read
//! later as a [`super::SubmitRequest`] on its own.

use std::borrow::Cow;

use serde_json::value::RawValue;

use crate::api::error::ApiError;
use crate::api::InputLimits;

/// Read a batch body, `{"requests": [...]}`, without building a tree of it: each item stays a
/// slice of the body, parsed one by one later, and reading stops with a 413 at the first item
/// past `limits.max_batch`. Memory is the body plus two words per item, where a `Value` tree of
/// a 16 MB body took more than 200 MB.
pub fn batch_items<'a>(
    bytes: &'a [u8],
    limits: &InputLimits,
) -> Result<Vec<&'a RawValue>, ApiError> {
    use serde::de::DeserializeSeed as _;
    let mut refusal = None;
    let mut de = serde_json::Deserializer::from_slice(bytes);
    let read = BatchSeed {
        max: limits.max_batch,
        refusal: &mut refusal,
    }
    .deserialize(&mut de)
    .and_then(|items| de.end().map(|()| items));
    match read {
        Ok(items) => Ok(items),
        Err(e) if e.is_data() => Err(refusal.unwrap_or_else(|| {
            ApiError::field("body", "must be a JSON object with a `requests` array")
        })),
        Err(e) => Err(super::read::not_json(&e)),
    }
}

/// The batch object; a refusal is left in `refusal` and the read stopped with a data error.
struct BatchSeed<'s> {
    max: usize,
    refusal: &'s mut Option<ApiError>,
}

impl<'de> serde::de::DeserializeSeed<'de> for BatchSeed<'_> {
    type Value = Vec<&'de RawValue>;
    fn deserialize<D: serde::Deserializer<'de>>(self, d: D) -> Result<Self::Value, D::Error> {
        d.deserialize_map(self)
    }
}

impl<'de> serde::de::Visitor<'de> for BatchSeed<'_> {
    type Value = Vec<&'de RawValue>;
    fn expecting(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.write_str("a JSON object with a `requests` array")
    }
    fn visit_map<A: serde::de::MapAccess<'de>>(self, mut map: A) -> Result<Self::Value, A::Error> {
        use serde::de::Error as _;
        let mut items: Option<Vec<&'de RawValue>> = None;
        while let Some(key) = map.next_key::<Cow<'de, str>>()? {
            let refuse = |e: ApiError| (Some(e), A::Error::custom("refused"));
            let (refusal, error) = match key.as_ref() {
                "requests" if items.is_some() => refuse(ApiError::field(
                    "requests",
                    "`requests` is given more than once",
                )),
                "requests" => {
                    let seed = ItemsSeed {
                        max: self.max,
                        refusal: &mut *self.refusal,
                    };
                    match map.next_value_seed(seed) {
                        Ok(read) => {
                            items = Some(read);
                            continue;
                        }
                        Err(e) if self.refusal.is_some() => (None, e),
                        // A type error is the field's fault; a syntax error stays one.
                        Err(e) => (
                            Some(ApiError::field(
                                "requests",
                                format!("must be an array of request objects ({e})"),
                            )),
                            e,
                        ),
                    }
                }
                unknown => refuse(ApiError::field(
                    unknown,
                    format!("unknown field `{unknown}`; the batch body has only `requests`"),
                )),
            };
            if refusal.is_some() {
                *self.refusal = refusal;
            }
            return Err(error);
        }
        let mut refuse = |e: ApiError| {
            *self.refusal = Some(e);
            Err(A::Error::custom("refused"))
        };
        match items {
            None => refuse(ApiError::field("requests", "is required")),
            Some(v) if v.is_empty() => refuse(ApiError::field("requests", "may not be empty")),
            Some(v) => Ok(v),
        }
    }
}

/// The `requests` array: counted while it is read, each item kept as its slice of the body.
struct ItemsSeed<'s> {
    max: usize,
    refusal: &'s mut Option<ApiError>,
}

impl<'de> serde::de::DeserializeSeed<'de> for ItemsSeed<'_> {
    type Value = Vec<&'de RawValue>;
    fn deserialize<D: serde::Deserializer<'de>>(self, d: D) -> Result<Self::Value, D::Error> {
        d.deserialize_any(self)
    }
}

impl<'de> serde::de::Visitor<'de> for ItemsSeed<'_> {
    type Value = Vec<&'de RawValue>;
    fn expecting(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.write_str("an array")
    }
    fn visit_unit<E: serde::de::Error>(self) -> Result<Self::Value, E> {
        *self.refusal = Some(ApiError::field("requests", "is required"));
        Err(E::custom("refused"))
    }
    fn visit_seq<A: serde::de::SeqAccess<'de>>(self, mut seq: A) -> Result<Self::Value, A::Error> {
        let mut items = Vec::new();
        while let Some(item) = seq.next_element::<&'de RawValue>()? {
            if items.len() == self.max {
                *self.refusal = Some(ApiError::new(
                    axum::http::StatusCode::PAYLOAD_TOO_LARGE,
                    Some("requests"),
                    format!("at most {} requests per batch, got more", self.max),
                ));
                return Err(serde::de::Error::custom("refused"));
            }
            items.push(item);
        }
        Ok(items)
    }
}
