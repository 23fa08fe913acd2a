//! Per-component random streams. Each component (a device queue, a task) draws
//! from its own stream derived from `(seed, component name)`, so adding a
//! component or reordering draws in one never changes another's numbers.

use rand::SeedableRng;
use rand_xoshiro::Xoshiro256PlusPlus;

pub type Rng = Xoshiro256PlusPlus;

/// FNV-1a: a stable hash of a component's name (std's hasher is not stable
/// across releases, which would break "same seed, same result on any machine").
pub fn component_id(name: &str) -> u64 {
    let mut h: u64 = 0xcbf2_9ce4_8422_2325;
    for b in name.as_bytes() {
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
    Rng::seed_from_u64(splitmix64(seed ^ splitmix64(component_id(component))))
}

/// An exponential sample with the given mean, in the same unit as the mean.
#[inline]
pub fn exp_sample(rng: &mut Rng, mean: f64) -> f64 {
    use rand::Rng as _;
    // 1 - u is in (0, 1], so ln never sees 0.
    let u: f64 = rng.gen();
    -(1.0 - u).ln() * mean
}

#[cfg(test)]
mod tests {
    use super::*;
    use rand::Rng as _;

    #[test]
    fn streams_are_reproducible_and_independent() {
        let a: Vec<u64> = (0..4).map({ let mut r = stream(1, "nic0.q0"); move |_| r.gen() }).collect();
        let b: Vec<u64> = (0..4).map({ let mut r = stream(1, "nic0.q0"); move |_| r.gen() }).collect();
        let c: Vec<u64> = (0..4).map({ let mut r = stream(1, "nic0.q1"); move |_| r.gen() }).collect();
        let d: Vec<u64> = (0..4).map({ let mut r = stream(2, "nic0.q0"); move |_| r.gen() }).collect();
        assert_eq!(a, b);
        assert_ne!(a, c);
        assert_ne!(a, d);
    }

    #[test]
    fn exponential_mean_is_right() {
        let mut r = stream(7, "x");
        let n = 200_000;
        let m: f64 = (0..n).map(|_| exp_sample(&mut r, 2.0)).sum::<f64>() / n as f64;
        assert!((m - 2.0).abs() < 0.02, "mean {m}");
    }
}
