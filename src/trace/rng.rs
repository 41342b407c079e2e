//! The generator's randomness, pinned so a seed gives the same trace on every platform:
//! xoshiro256** seeded through SplitMix64 (both by Blackman and Vigna), and the few
//! distributions the generator draws from built on them with only IEEE-exact operations
//! (`+ - * /`, `sqrt`) and this file's own `ln` and `exp`, not the platform's libm, whose last
//! bit may differ between systems.

/// SplitMix64: seeds xoshiro and hashes a file's identity into its size.
#[derive(Debug, Clone)]
pub(crate) struct SplitMix64(u64);

impl SplitMix64 {
    pub(crate) fn new(seed: u64) -> Self {
        Self(seed)
    }

    pub(crate) fn next_u64(&mut self) -> u64 {
        self.0 = self.0.wrapping_add(0x9E37_79B9_7F4A_7C15);
        let mut z = self.0;
        z = (z ^ (z >> 30)).wrapping_mul(0xBF58_476D_1CE4_E5B9);
        z = (z ^ (z >> 27)).wrapping_mul(0x94D0_49BB_1331_11EB);
        z ^ (z >> 31)
    }
}

/// xoshiro256**: the generator's stream.
#[derive(Debug, Clone)]
pub(crate) struct Rng {
    s: [u64; 4],
}

impl Rng {
    pub(crate) fn new(seed: u64) -> Self {
        let mut sm = SplitMix64::new(seed);
        let s = [sm.next_u64(), sm.next_u64(), sm.next_u64(), sm.next_u64()];
        Self { s }
    }

    pub(crate) fn next_u64(&mut self) -> u64 {
        let result = self.s[1].wrapping_mul(5).rotate_left(7).wrapping_mul(9);
        let t = self.s[1] << 17;
        self.s[2] ^= self.s[0];
        self.s[3] ^= self.s[1];
        self.s[1] ^= self.s[2];
        self.s[0] ^= self.s[3];
        self.s[2] ^= t;
        self.s[3] = self.s[3].rotate_left(45);
        result
    }

    /// Uniform in [0, 1), 53 random bits.
    pub(crate) fn uniform(&mut self) -> f64 {
        unit_f64(self.next_u64())
    }

    /// Uniform integer in [0, n) (n > 0), by Lemire's multiply-shift; the bias is below 2^-64 n.
    pub(crate) fn below(&mut self, n: u64) -> u64 {
        ((u128::from(self.next_u64()) * u128::from(n)) >> 64) as u64
    }

    /// True with probability p.
    pub(crate) fn chance(&mut self, p: f64) -> bool {
        self.uniform() < p
    }

    /// Exponential with the given mean, by inversion.
    pub(crate) fn exponential(&mut self, mean: f64) -> f64 {
        // 1 - u is in (0, 1], so its logarithm is finite.
        -mean * ln(1.0 - self.uniform())
    }
}

fn unit_f64(bits: u64) -> f64 {
    (bits >> 11) as f64 * (1.0 / (1u64 << 53) as f64)
}

/// Two independent standard normals from a stream of uniforms in [0, 1).
pub(crate) fn polar_pair(mut uniform: impl FnMut() -> f64) -> (f64, f64) {
    loop {
        let x = 2.0 * uniform() - 1.0;
        let y = 2.0 * uniform() - 1.0;
        let s = x * x + y * y;
        if s > 0.0 && s < 1.0 {
            let f = (-2.0 * ln(s) / s).sqrt();
            return (x * f, y * f);
        }
    }
}

/// A standard normal that is a pure function of `key`: the same file always gets the same size.
pub(crate) fn hashed_normal(key: u64) -> f64 {
    let mut sm = SplitMix64::new(key);
    polar_pair(|| unit_f64(sm.next_u64())).0
}

const LN2: f64 = std::f64::consts::LN_2;
/// ln 2 split so that `k * LN2_HI` is exact for |k| < 2^11 (fdlibm's constants).
const LN2_HI: f64 = f64::from_bits(0x3fe6_2e42_fee0_0000);
const LN2_LO: f64 = f64::from_bits(0x3dea_39ef_3579_3c76);

/// Natural logarithm of a positive finite x, to within a few ulp: x = m 2^e with m in
/// [sqrt(1/2), sqrt(2)), ln m = 2 atanh((m - 1) / (m + 1)) by its series.
pub(crate) fn ln(x: f64) -> f64 {
    if x.is_nan() || x <= 0.0 || x.is_infinite() {
        return if x == 0.0 {
            f64::NEG_INFINITY
        } else {
            f64::NAN
        };
    }
    let (mut m, mut e) = if x < f64::MIN_POSITIVE {
        // Subnormal: scale into the normal range first.
        (x * (1u64 << 54) as f64, -54i64)
    } else {
        (x, 0)
    };
    let bits = m.to_bits();
    e += ((bits >> 52) & 0x7ff) as i64 - 1023;
    m = f64::from_bits((bits & 0x000f_ffff_ffff_ffff) | 0x3ff0_0000_0000_0000);
    if m > std::f64::consts::SQRT_2 {
        m /= 2.0;
        e += 1;
    }
    let s = (m - 1.0) / (m + 1.0);
    let s2 = s * s;
    // s^2 <= 0.0295: 12 terms reach below 2^-60.
    let mut term = s;
    let mut sum = 0.0;
    for k in 0..12 {
        sum += term / (2 * k + 1) as f64;
        term *= s2;
    }
    let e = e as f64;
    e * LN2_HI + (e * LN2_LO + 2.0 * sum)
}

/// e^x to within a few ulp for x in [-708, 709] (beyond: 0 or infinity): x = k ln 2 + r,
/// |r| <= ln 2 / 2, e^r by its Taylor series.
pub(crate) fn exp(x: f64) -> f64 {
    if x.is_nan() {
        return x;
    }
    if x > 709.0 {
        return f64::INFINITY;
    }
    if x < -708.0 {
        return 0.0;
    }
    let k = (x / LN2).round();
    let r = (x - k * LN2_HI) - k * LN2_LO;
    // |r| <= 0.347: 18 terms reach below 2^-60.
    let mut term = 1.0;
    let mut sum = 1.0;
    for n in 1..18 {
        term *= r / n as f64;
        sum += term;
    }
    let scale = f64::from_bits(((k as i64 + 1023) as u64) << 52);
    sum * scale
}

/// Samples an index in [0, n) from fixed weights: a cumulative table and a binary search.
#[derive(Debug, Clone)]
pub(crate) struct Discrete {
    cumulative: Vec<f64>,
}

impl Discrete {
    /// `weights` non-negative, finite, with a positive sum (checked by the caller).
    pub(crate) fn new(weights: impl IntoIterator<Item = f64>) -> Self {
        let mut total = 0.0;
        let cumulative = weights
            .into_iter()
            .map(|w| {
                total += w;
                total
            })
            .collect();
        Self { cumulative }
    }

    /// Zipf over ranks 1..=n: weight of rank k is k^-s (index k - 1).
    pub(crate) fn zipf(n: u64, s: f64) -> Self {
        Self::new((1..=n).map(|k| exp(-s * ln(k as f64))))
    }

    /// Number of outcomes.
    pub(crate) fn len(&self) -> usize {
        self.cumulative.len()
    }

    pub(crate) fn total(&self) -> f64 {
        self.cumulative.last().copied().unwrap_or(0.0)
    }

    /// Probability of index i.
    #[cfg(test)]
    pub(crate) fn probability(&self, i: usize) -> f64 {
        let below = if i == 0 { 0.0 } else { self.cumulative[i - 1] };
        (self.cumulative[i] - below) / self.total()
    }

    pub(crate) fn sample(&self, rng: &mut Rng) -> usize {
        let u = rng.uniform() * self.total();
        let i = self.cumulative.partition_point(|&c| c <= u);
        i.min(self.cumulative.len().saturating_sub(1))
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn ln_and_exp_match_std_closely() {
        for &x in &[
            1e-300, 1e-10, 0.001, 0.5, 0.7, 1.0, 1.5, 2.0, 10.0, 12345.678, 1e300,
        ] {
            let rel = (ln(x) - x.ln()).abs() / x.ln().abs().max(1e-300);
            assert!(rel < 1e-14 || (ln(x) - x.ln()).abs() < 1e-15, "ln {x}");
        }
        for &x in &[-700.0, -20.0, -1.0, -1e-9, 0.0, 0.3, 1.0, 5.5, 30.0, 700.0] {
            let rel = (exp(x) - x.exp()).abs() / x.exp();
            assert!(rel < 1e-14, "exp {x}: {} vs {}", exp(x), x.exp());
        }
    }

    #[test]
    fn xoshiro_stream_is_pinned() {
        // The first outputs for seed 0: a change here changes every shipped trace.
        let mut rng = Rng::new(0);
        let first: Vec<u64> = (0..3).map(|_| rng.next_u64()).collect();
        let mut again = Rng::new(0);
        assert_eq!(first, (0..3).map(|_| again.next_u64()).collect::<Vec<_>>());
        assert_eq!(SplitMix64::new(0).next_u64(), 0xE220_A839_7B1D_CDAF);
    }

    #[test]
    fn discrete_samples_by_weight() {
        let d = Discrete::new([1.0, 0.0, 3.0]);
        let mut rng = Rng::new(7);
        let mut counts = [0u32; 3];
        for _ in 0..40_000 {
            counts[d.sample(&mut rng)] += 1;
        }
        assert_eq!(counts[1], 0);
        let share = f64::from(counts[2]) / 40_000.0;
        assert!((share - 0.75).abs() < 0.01, "{share}");
        assert!((d.probability(2) - 0.75).abs() < 1e-12);
    }
}
