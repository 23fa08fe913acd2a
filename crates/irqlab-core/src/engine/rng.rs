//! Per-component random streams. Each component (a device queue, a task) draws
//! from its own stream derived from `(seed, component name)`, so adding a
//! component or reordering draws in one never changes another's numbers.

use rand::SeedableRng;
use rand_xoshiro::Xoshiro256PlusPlus;

pub type Rng = Xoshiro256PlusPlus;

/// FNV-1a: a stable hash of a component's name (std's hasher is not stable
/// across releases, which would break "same seed, same result on any machine").
pub fn component_id(name: &str) -> u64 {
    component_id_of(&[name])
}

/// `component_id` of the parts' concatenation, without building it: FNV-1a
/// reads bytes in order, so the parts need not be one string. (65,536 sources
/// each formatting "source/NAME" took a tenth of a 2,048-CPU run.)
pub fn component_id_of(parts: &[&str]) -> u64 {
    let mut h: u64 = 0xcbf2_9ce4_8422_2325;
    for b in parts.iter().flat_map(|p| p.as_bytes()) {
        h ^= *b as u64;
        h = h.wrapping_mul(0x0000_0100_0000_01b3);
    }
    h
}

fn splitmix64(mut x: u64) -> u64 {
    x = x.wrapping_add(0x9e37_79b9_7f4a_7c15);
    x = (x ^ (x >> 30)).wrapping_mul(0xbf58_476d_1ce4_e5b9);
    x = (x ^ (x >> 27)).wrapping_mul(0x94d0_49bb_1331_11eb);
    x ^ (x >> 31)
}

pub fn stream(seed: u64, component: &str) -> Rng {
    stream_of(seed, &[component])
}

/// `stream` for the component named by the parts' concatenation.
pub fn stream_of(seed: u64, parts: &[&str]) -> Rng {
    Rng::seed_from_u64(splitmix64(seed ^ splitmix64(component_id_of(parts))))
}

/// An exponential sample with the given mean, in the same unit as the mean.
#[inline]
pub fn exp_sample(rng: &mut Rng, mean: f64) -> f64 {
    exp1(rng) * mean
}

/// Ziggurat tables for Exp(1) (Marsaglia & Tsang 2000, 256 layers): `x[i]` the
/// layer widths, `f[i] = exp(-x[i])`. Built with libm, which is pure Rust, so the
/// tables (and every sample) have the same bits on every machine; the platform's
/// `ln`/`exp` may pick a CPU-specific variant.
struct Zig {
    x: [f64; 257],
    f: [f64; 257],
}

const ZIG_R: f64 = 7.697_117_470_131_05;
#[allow(clippy::excessive_precision)] // as published (Marsaglia & Tsang); parses to the same f64
const ZIG_V: f64 = 3.949_659_822_581_557_2e-3;

fn zig() -> &'static Zig {
    static T: std::sync::OnceLock<Zig> = std::sync::OnceLock::new();
    T.get_or_init(|| {
        let mut x = [0.0; 257];
        x[0] = ZIG_V / libm::exp(-ZIG_R);
        x[1] = ZIG_R;
        for i in 1..256 {
            x[i + 1] = -libm::log(ZIG_V / x[i] + libm::exp(-x[i]));
        }
        x[256] = 0.0;
        let mut f = [0.0; 257];
        for i in 0..257 {
            f[i] = libm::exp(-x[i]);
        }
        Zig { x, f }
    })
}

/// A sample of Exp(1). About 99% of draws take the first branch: one random
/// word, a multiply and a compare; that branch is inlined in the caller, the
/// rest (`exp1_rest`) is not.
#[inline(always)]
pub fn exp1(rng: &mut Rng) -> f64 {
    use rand::RngCore as _;
    let z = zig();
    let (i, x) = layer(z, rng.next_u64());
    if x < z.x[i + 1] {
        return x;
    }
    exp1_rest(rng, i, x)
}

/// The layer a random word picks (its low 8 bits) and the point in that
/// layer's rectangle its top 53 bits give.
#[inline(always)]
fn layer(z: &Zig, bits: u64) -> (usize, f64) {
    let i = (bits & 0xff) as usize;
    (i, (bits >> 11) as f64 * (1.0 / (1u64 << 53) as f64) * z.x[i])
}

/// The ziggurat's rarer cases, drawing on from a first word that landed in
/// layer `i` at `x` outside its rectangle's core: the same draws, in the same
/// order, as one loop would make.
#[cold]
#[inline(never)]
fn exp1_rest(rng: &mut Rng, mut i: usize, mut x: f64) -> f64 {
    use rand::RngCore as _;
    let z = zig();
    loop {
        if i == 0 {
            // The tail beyond R is R + Exp(1): the exponential is memoryless.
            return ZIG_R - libm::log(1.0 - unit(rng));
        }
        if z.f[i] + (z.f[i + 1] - z.f[i]) * unit(rng) < libm::exp(-x) {
            return x;
        }
        (i, x) = layer(z, rng.next_u64());
        if x < z.x[i + 1] {
            return x;
        }
    }
}

#[inline]
fn unit(rng: &mut Rng) -> f64 {
    use rand::RngCore as _;
    (rng.next_u64() >> 11) as f64 * (1.0 / (1u64 << 53) as f64)
}

#[cfg(test)]
mod tests {
    use super::*;
    use rand::Rng as _;

    /// A stream named in parts is the stream of the joined name: results stay
    /// the same whichever way a caller names its component.
    #[test]
    fn a_name_in_parts_is_the_joined_name() {
        assert_eq!(component_id_of(&["source/", "msi.7"]), component_id("source/msi.7"));
        assert_eq!(component_id_of(&[]), component_id(""));
        let (mut a, mut b) = (stream_of(9, &["nic/", "eth", ".rx3"]), stream(9, "nic/eth.rx3"));
        assert_eq!(a.gen::<u64>(), b.gen::<u64>());
    }

    #[test]
    fn streams_are_reproducible_and_independent() {
        let a: Vec<u64> = (0..4)
            .map({
                let mut r = stream(1, "nic0.q0");
                move |_| r.gen()
            })
            .collect();
        let b: Vec<u64> = (0..4)
            .map({
                let mut r = stream(1, "nic0.q0");
                move |_| r.gen()
            })
            .collect();
        let c: Vec<u64> = (0..4)
            .map({
                let mut r = stream(1, "nic0.q1");
                move |_| r.gen()
            })
            .collect();
        let d: Vec<u64> = (0..4)
            .map({
                let mut r = stream(2, "nic0.q0");
                move |_| r.gen()
            })
            .collect();
        assert_eq!(a, b);
        assert_ne!(a, c);
        assert_ne!(a, d);
    }

    /// The sampler's distribution against the exponential CDF, by the
    /// Kolmogorov-Smirnov distance, plus tail frequencies the ziggurat's rare
    /// branches produce.
    #[test]
    fn exponential_distribution_is_right() {
        let mut r = stream(11, "ks");
        let n = 400_000;
        let mut v: Vec<f64> = (0..n).map(|_| exp1(&mut r)).collect();
        v.sort_by(|a, b| a.partial_cmp(b).unwrap());
        let d = v
            .iter()
            .enumerate()
            .map(|(i, &x)| {
                let cdf = 1.0 - (-x).exp();
                (cdf - i as f64 / n as f64).abs().max((cdf - (i + 1) as f64 / n as f64).abs())
            })
            .fold(0.0, f64::max);
        // The 99.9% critical value of D for n = 400k is 1.95/sqrt(n) = 0.0031.
        assert!(d < 0.0031, "KS distance {d}");
        let beyond = |t: f64| v.iter().filter(|&&x| x > t).count() as f64 / n as f64;
        for t in [1.0f64, 3.0, 7.0, 8.0] {
            let want = (-t).exp();
            assert!((beyond(t) - want).abs() < 4.0 * (want / n as f64).sqrt() + 1e-6, "P(X > {t})");
        }
    }

    #[test]
    fn exponential_mean_is_right() {
        let mut r = stream(7, "x");
        let n = 200_000;
        let m: f64 = (0..n).map(|_| exp_sample(&mut r, 2.0)).sum::<f64>() / n as f64;
        assert!((m - 2.0).abs() < 0.02, "mean {m}");
    }
}
