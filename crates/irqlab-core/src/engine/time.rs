//! Simulated time: an integer count of picoseconds (`u64`); a run lasts under
//! 2^63 ps (about 106 days), so a gap cut there (`s_to_ps`) lands after its end.
//! Scenarios give times and rates as strings with units; they are converted
//! once, here, so the hot loop only ever adds integers.

/// Simulated time and durations, in picoseconds.
pub type Ps = u64;

pub const PS_PER_NS: u64 = 1_000;
pub const PS_PER_US: u64 = 1_000_000;
pub const PS_PER_MS: u64 = 1_000_000_000;
pub const PS_PER_S: u64 = 1_000_000_000_000;

/// A time that never comes: used for work with no end (an idle loop).
pub const NEVER: Ps = u64::MAX;

pub fn ps_to_s(t: Ps) -> f64 {
    t as f64 / PS_PER_S as f64
}

pub fn ps_to_ns(t: Ps) -> f64 {
    t as f64 / PS_PER_NS as f64
}

/// Seconds (a sampled interarrival, say) to picoseconds, rounded to nearest.
#[inline]
pub fn s_to_ps(s: f64) -> Ps {
    // Non-negative inputs only: adding 0.5 and truncating rounds without a libm call.
    // Through i64: x86-64 converts to a signed integer in one instruction and
    // to an unsigned one in about ten (0.7 % of the reference model's
    // instructions). A time past 2^63 ps (106 days) comes out as 2^63 − 1 ps
    // where it came out as u64's end; a run is shorter (`parse_duration`), so
    // either lands after it. (A NaN still gives 0.)
    debug_assert!(s >= 0.0 || s.is_nan(), "s_to_ps({s}): a time is not negative");
    (s * PS_PER_S as f64 + 0.5) as i64 as Ps
}

/// Parses `"300ns"`, `"10us"`, `"1.5ms"`, `"0.5s"`, `"2ps"`, `"0"`.
/// Cycles are not accepted here: they need a clock, which only the CPU model knows.
pub fn parse_duration(s: &str) -> Result<Ps, String> {
    let t = s.trim();
    let expected = "expected a non-negative time with a unit, like \"300ns\", \"10us\", \"1ms\" or \"0.5s\"";
    if t == "0" {
        return Ok(0);
    }
    let split = t
        .find(|c: char| !(c.is_ascii_digit() || c == '.' || c == '-' || c == '+' || c == 'e' || c == 'E'))
        .ok_or_else(|| format!("\"{s}\": {expected}"))?;
    // "1e3ns" is a number and a unit; "e" alone would be eaten by the number part above,
    // so make sure what is left is a known unit.
    let (num, unit) = t.split_at(split);
    let scale = match unit.trim() {
        "ps" => 1.0,
        "ns" => PS_PER_NS as f64,
        "us" | "µs" => PS_PER_US as f64,
        "ms" => PS_PER_MS as f64,
        "s" => PS_PER_S as f64,
        _ => return Err(format!("\"{s}\": {expected}")),
    };
    let v: f64 = num.parse().map_err(|_| format!("\"{s}\": {expected}"))?;
    if !v.is_finite() || v < 0.0 {
        return Err(format!("\"{s}\": {expected}"));
    }
    let ps = v * scale;
    // Under 2^63 ps: a gap `s_to_ps` cuts at 2^63 − 1 then lands after the end.
    if ps >= (u64::MAX / 2) as f64 {
        return Err(format!("\"{s}\": too long (at most about 106 days)"));
    }
    // A time that rounds to nothing is not what was asked for: the clock counts ps.
    if v > 0.0 && ps.round() == 0.0 {
        return Err(format!("\"{s}\": below the clock's resolution of 1 ps (0 means none)"));
    }
    Ok(ps.round() as Ps)
}

/// Parses a rate per second: a number, or a string `"1M/s"`, `"250k/s"`, `"31250/s"`, `"2.5G/s"`.
pub fn parse_rate(s: &str) -> Result<f64, String> {
    let expected = "expected a finite non-negative rate like \"1M/s\", \"250k/s\" or a number per second";
    let t = s.trim();
    let body = t.strip_suffix("/s").unwrap_or(t).trim();
    let (num, mult) = match body.chars().last() {
        Some('k') | Some('K') => (&body[..body.len() - 1], 1e3),
        Some('M') => (&body[..body.len() - 1], 1e6),
        Some('G') => (&body[..body.len() - 1], 1e9),
        _ => (body, 1.0),
    };
    let v: f64 = num.trim().parse().map_err(|_| format!("\"{s}\": {expected}"))?;
    if !v.is_finite() || v < 0.0 {
        return Err(format!("\"{s}\": {expected}"));
    }
    check_rate(v * mult).map_err(|e| format!("\"{s}\": {e}"))
}

/// The fastest rate the clock can tell apart: one event per ps. Beyond it the
/// gap between events rounds to 0 and simulated time stops.
pub const MAX_RATE: f64 = PS_PER_S as f64;

/// `v` per second as a rate, or why it is not one.
pub fn check_rate(v: f64) -> Result<f64, String> {
    if v <= MAX_RATE {
        Ok(v)
    } else {
        Err(format!("expected at most 1e12/s (one per ps, the clock's resolution), got {v:.3e}/s"))
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn seconds_round_to_the_nearest_picosecond() {
        assert_eq!(s_to_ps(0.0), 0);
        assert_eq!(s_to_ps(1.4e-12), 1);
        assert_eq!(s_to_ps(1.6e-12), 2);
        assert_eq!(s_to_ps(0.5), 500_000_000_000);
        assert_eq!(s_to_ps(1e7), i64::MAX as Ps); // 116 days: cut at the signed range's end
        assert_eq!(s_to_ps(f64::NAN), 0);
        // No run is as long: what is cut there lands after its end.
        assert!(parse_duration("9223372036854775808ps").is_err()); // 2^63
        assert_eq!(parse_duration("9.2e18ps"), Ok(9_200_000_000_000_000_000));
    }

    #[test]
    fn rates_beyond_the_clock_are_refused() {
        assert_eq!(parse_rate("1G/s").unwrap(), 1e9);
        assert_eq!(parse_rate("1000G/s").unwrap(), 1e12);
        for bad in ["1001G/s", "1e308G/s", "1e300/s"] {
            assert!(parse_rate(bad).unwrap_err().contains("at most 1e12/s"), "{bad}");
        }
    }

    #[test]
    fn durations_parse_with_units() {
        assert_eq!(parse_duration("300ns").unwrap(), 300_000);
        assert_eq!(parse_duration("10us").unwrap(), 10 * PS_PER_US);
        assert_eq!(parse_duration("0.5s").unwrap(), PS_PER_S / 2);
        assert_eq!(parse_duration("1.5ms").unwrap(), 1_500_000_000);
        assert_eq!(parse_duration("0").unwrap(), 0);
        assert_eq!(parse_duration("7ps").unwrap(), 7);
    }

    #[test]
    fn bad_durations_are_rejected() {
        for bad in ["-1s", "10", "ns", "1 parsec", "abc", "1e400s", "NaNs"] {
            assert!(parse_duration(bad).is_err(), "{bad} should fail");
        }
    }

    #[test]
    fn rates_parse() {
        assert_eq!(parse_rate("1M/s").unwrap(), 1e6);
        assert_eq!(parse_rate("250k/s").unwrap(), 250e3);
        assert_eq!(parse_rate("31250").unwrap(), 31250.0);
        assert!(parse_rate("-1/s").is_err());
        assert!(parse_rate("fast").is_err());
        // inf is not negative: the refusal says what it is not (it said "non-negative").
        assert!(parse_rate("inf/s").unwrap_err().contains("finite"));
    }
}
