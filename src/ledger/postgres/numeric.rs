//! [`Wide`] as PostgreSQL's NUMERIC, in the binary form of the wire protocol (`numeric_send`
//! and `numeric_recv`): so the wide sums bind and read as numbers, with no `::text` casts in
//! the ledger's statements (docs/ha.md).
//!
//! The form: four 16-bit fields, then the digits. `ndigits` (how many digits follow),
//! `weight` (the power of 10000 of the first digit), `sign` (0x0000 positive, 0x4000 negative,
//! 0xC000 NaN; 0xD000 and 0xF000 are the infinities of PostgreSQL 14 on), `dscale` (decimal
//! places shown); each digit is base 10000, most significant first. The value is
//! `sum(digit[i] * 10000^(weight - i))`. PostgreSQL strips leading and trailing zero digits,
//! and writes zero with no digits.
//!
//! A `Wide` is an `i128`: every value the ledger can hold has at most 10 base-10000 digits
//! (i128's 39 decimal ones). Reading refuses, each with its own [`NumericError`], NaN, the
//! infinities, a fraction, and a value past `i128`: never a rounded or truncated number.

use std::error::Error;

use bytes::{BufMut, BytesMut};
use postgres::types::{to_sql_checked, FromSql, IsNull, Kind, ToSql, Type};

use crate::ledger::wide::Wide;

const POSITIVE: u16 = 0x0000;
const NEGATIVE: u16 = 0x4000;
const NAN: u16 = 0xC000;
const PLUS_INFINITY: u16 = 0xD000;
const MINUS_INFINITY: u16 = 0xF000;
const BASE: u128 = 10_000;
/// `i128::MAX` has 39 decimal digits: 10 of base 10000.
const MOST_DIGITS: usize = 10;

/// Why a NUMERIC is not a `Wide`.
#[derive(Debug, Clone, PartialEq, Eq, thiserror::Error)]
pub enum NumericError {
    #[error("NUMERIC NaN is not a wide sum")]
    NotANumber,
    #[error("NUMERIC infinity is not a wide sum")]
    Infinite,
    #[error("NUMERIC with a fraction is not a wide sum (an integer)")]
    NotAnInteger,
    #[error("NUMERIC past i128's range is not a wide sum")]
    OutOfRange,
    #[error("NUMERIC binary value malformed: {0}")]
    Malformed(&'static str),
}

/// NUMERIC itself, or a domain over it (the schema's `wide`).
fn is_numeric(ty: &Type) -> bool {
    match ty.kind() {
        Kind::Domain(inner) => is_numeric(inner),
        _ => *ty == Type::NUMERIC,
    }
}

/// The base-10000 digits of `magnitude`, most significant first, and the weight of the first;
/// trailing zero digits dropped (PostgreSQL's own form). Zero: no digits.
fn digits(mut magnitude: u128) -> (Vec<i16>, i16) {
    let mut little_first = Vec::with_capacity(MOST_DIGITS);
    while magnitude > 0 {
        // Below 10000: fits an i16.
        little_first.push((magnitude % BASE) as i16);
        magnitude /= BASE;
    }
    let weight = little_first.len() as i16 - 1;
    let zeros = little_first.iter().take_while(|&&d| d == 0).count();
    let digits = little_first[zeros..].iter().rev().copied().collect();
    (digits, weight.max(0))
}

impl ToSql for Wide {
    fn to_sql(&self, _: &Type, out: &mut BytesMut) -> Result<IsNull, Box<dyn Error + Sync + Send>> {
        let (digits, weight) = digits(self.0.unsigned_abs());
        let sign = if self.0 < 0 { NEGATIVE } else { POSITIVE };
        out.reserve(8 + 2 * digits.len());
        out.put_i16(digits.len() as i16);
        out.put_i16(weight);
        out.put_u16(sign);
        out.put_u16(0); // dscale: an integer
        for d in digits {
            out.put_i16(d);
        }
        Ok(IsNull::No)
    }

    fn accepts(ty: &Type) -> bool {
        is_numeric(ty)
    }

    to_sql_checked!();
}

impl<'a> FromSql<'a> for Wide {
    fn from_sql(_: &Type, raw: &'a [u8]) -> Result<Wide, Box<dyn Error + Sync + Send>> {
        Ok(Wide(from_binary(raw)?))
    }

    fn accepts(ty: &Type) -> bool {
        is_numeric(ty)
    }
}

/// A NUMERIC's binary form as an exact `i128`.
pub fn from_binary(raw: &[u8]) -> Result<i128, NumericError> {
    let field = |i: usize| -> Result<u16, NumericError> {
        raw.get(2 * i..2 * i + 2)
            .map(|b| u16::from_be_bytes([b[0], b[1]]))
            .ok_or(NumericError::Malformed("shorter than its header"))
    };
    let (ndigits, weight, sign) = (field(0)? as i16, field(1)? as i16, field(2)?);
    match sign {
        POSITIVE | NEGATIVE => {}
        NAN => return Err(NumericError::NotANumber),
        PLUS_INFINITY | MINUS_INFINITY => return Err(NumericError::Infinite),
        _ => return Err(NumericError::Malformed("an unknown sign")),
    }
    let ndigits = usize::try_from(ndigits).map_err(|_| NumericError::Malformed("ndigits < 0"))?;
    if raw.len() != 8 + 2 * ndigits {
        return Err(NumericError::Malformed("length is not its digits'"));
    }
    let magnitude = magnitude(ndigits, weight, |i| field(4 + i))?;
    signed(magnitude, sign == NEGATIVE)
}

/// `sum(digit[i] * 10000^(weight - i))`, refusing a fraction and anything past `u128`.
fn magnitude(
    ndigits: usize,
    weight: i16,
    digit: impl Fn(usize) -> Result<u16, NumericError>,
) -> Result<u128, NumericError> {
    let mut total: u128 = 0;
    for i in 0..ndigits {
        let d = digit(i)?;
        if u128::from(d) >= BASE {
            return Err(NumericError::Malformed("a digit past 9999"));
        }
        // This digit's power of 10000: below zero is a fraction.
        if i64::from(weight) - (i as i64) < 0 {
            if d != 0 {
                return Err(NumericError::NotAnInteger);
            }
            continue;
        }
        total = total
            .checked_mul(BASE)
            .and_then(|t| t.checked_add(u128::from(d)))
            .ok_or(NumericError::OutOfRange)?;
    }
    // Trailing zero digits are not written: the powers of the digits left out.
    let written = i64::try_from(ndigits).map_err(|_| NumericError::OutOfRange)?;
    let left_out = (i64::from(weight) + 1 - written).max(0);
    if ndigits == 0 {
        return Ok(0);
    }
    for _ in 0..left_out {
        total = total.checked_mul(BASE).ok_or(NumericError::OutOfRange)?;
    }
    Ok(total)
}

fn signed(magnitude: u128, negative: bool) -> Result<i128, NumericError> {
    if negative {
        0i128
            .checked_sub_unsigned(magnitude)
            .ok_or(NumericError::OutOfRange)
    } else {
        i128::try_from(magnitude).map_err(|_| NumericError::OutOfRange)
    }
}

#[cfg(test)]
mod tests {
    /// Against a real server.
    mod cluster;

    use proptest::prelude::*;

    use super::*;

    fn binary(w: i128) -> Vec<u8> {
        let mut out = BytesMut::new();
        Wide(w).to_sql(&Type::NUMERIC, &mut out).expect("encoded");
        out.to_vec()
    }

    /// The header fields and digits of an encoding.
    fn fields(raw: &[u8]) -> Vec<i16> {
        raw.chunks(2)
            .map(|b| i16::from_be_bytes([b[0], b[1]]))
            .collect()
    }

    #[test]
    fn values_are_written_as_postgresql_writes_them() {
        // ndigits, weight, sign, dscale, digits.
        assert_eq!(fields(&binary(0)), [0, 0, 0, 0]);
        assert_eq!(fields(&binary(1)), [1, 0, 0, 0, 1]);
        assert_eq!(
            fields(&binary(10_000)),
            [1, 1, 0, 0, 1],
            "trailing zeros dropped"
        );
        assert_eq!(fields(&binary(12_345_678)), [2, 1, 0, 0, 1234, 5678]);
        assert_eq!(
            fields(&binary(-100_000_002)),
            [3, 2, 0x4000, 0, 1, 0, 2],
            "inner zeros kept"
        );
        // The largest: its decimal digits in fours from the right are its base-10000 digits.
        for w in [i128::MAX, i128::MIN] {
            let (sign, decimal) = if w < 0 { (0x4000, -1) } else { (0, 1) };
            let text = w.unsigned_abs().to_string();
            let head = text.len() % 4;
            let groups: Vec<i16> = std::iter::once(&text[..head])
                .filter(|h| !h.is_empty())
                .chain(
                    text.as_bytes()[head..]
                        .chunks(4)
                        .map(|c| std::str::from_utf8(c).expect("ascii")),
                )
                .map(|g| g.parse().expect("digits"))
                .collect();
            let mut expected = vec![groups.len() as i16, groups.len() as i16 - 1, sign as i16, 0];
            expected.extend(&groups);
            assert_eq!(fields(&binary(w)), expected, "{w} ({decimal})");
            assert_eq!(groups.len(), MOST_DIGITS);
        }
    }

    #[test]
    fn nan_infinity_fractions_and_overflow_are_refused() {
        let header = |ndigits: i16, weight: i16, sign: u16, dscale: u16, ds: &[i16]| {
            let mut v = Vec::new();
            for f in [ndigits as u16, weight as u16, sign, dscale] {
                v.extend(f.to_be_bytes());
            }
            for d in ds {
                v.extend(d.to_be_bytes());
            }
            v
        };
        assert_eq!(
            from_binary(&header(0, 0, NAN, 0, &[])),
            Err(NumericError::NotANumber)
        );
        assert_eq!(
            from_binary(&header(0, 0, PLUS_INFINITY, 0, &[])),
            Err(NumericError::Infinite)
        );
        // 1.5: digits 1, 5000 at weight 0.
        assert_eq!(
            from_binary(&header(2, 0, POSITIVE, 1, &[1, 5000])),
            Err(NumericError::NotAnInteger)
        );
        // 10000^10: past u128? No, but past i128: 1 at weight 10 is 10^40.
        assert_eq!(
            from_binary(&header(1, 10, POSITIVE, 0, &[1])),
            Err(NumericError::OutOfRange)
        );
        assert_eq!(
            from_binary(&header(1, 40, NEGATIVE, 0, &[1])),
            Err(NumericError::OutOfRange)
        );
        assert!(matches!(
            from_binary(&header(2, 0, POSITIVE, 0, &[1])),
            Err(NumericError::Malformed(_))
        ));
        assert!(matches!(
            from_binary(&header(1, 0, POSITIVE, 0, &[10_000])),
            Err(NumericError::Malformed(_))
        ));
        assert!(matches!(
            from_binary(&[0, 1]),
            Err(NumericError::Malformed(_))
        ));
        // 5.00 (a scale, no fraction) is the integer 5.
        assert_eq!(from_binary(&header(1, 0, POSITIVE, 2, &[5])), Ok(5));
    }

    #[test]
    fn the_extremes_round_trip() {
        for w in [0, 1, -1, 9_999, 10_000, i128::MAX, i128::MIN, i128::MIN + 1] {
            assert_eq!(from_binary(&binary(w)), Ok(w), "{w}");
        }
    }

    proptest! {
        #[test]
        fn every_wide_round_trips_through_the_binary_form(w in prop_oneof![
            any::<i128>(),
            // Trailing zero digits (left out of the form).
            (any::<i32>(), 0u32..29).prop_map(|(m, e)| i128::from(m) * 10i128.pow(e)),
        ]) {
            prop_assert_eq!(from_binary(&binary(w)), Ok(w));
        }
    }
}
