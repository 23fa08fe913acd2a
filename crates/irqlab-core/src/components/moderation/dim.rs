//! Linux DIM (`lib/dim/net_dim.c`), per queue: every 64 interrupts it compares
//! bytes/ms, then packets/ms, then interrupts/ms with the previous window (a
//! change is significant above 10 %), steps one profile right (more moderation)
//! or left, turns around when a step did not help, parks on top when it is back
//! where it was best, and after 10 steps parks "tired" for 10 decisions. A
//! park on top ends when the stats change: it then steps at once, left unless
//! it is at the first profile (`net_dim_exit_parking`, Linux 6.12).

use crate::engine::time::{Ps, PS_PER_US};

/// `NET_DIM_RX_EQE_PROFILES`: (usecs, packets).
pub const RX_EQE_PROFILES: [(u64, u32); 5] = [(1, 256), (8, 256), (64, 256), (128, 256), (256, 256)];
/// `NET_DIM_RX_CQE_PROFILES`: the profiles in timer reset ("CQE") mode.
pub const RX_CQE_PROFILES: [(u64, u32); 5] = [(2, 256), (8, 128), (16, 64), (32, 64), (64, 64)];
/// `NET_DIM_DEF_PROFILE_EQE` (and `NET_DIM_DEF_PROFILE_CQE`, also 1).
pub const DEFAULT_PROFILE: usize = 1;
/// `DIM_NEVENTS`: interrupts per decision window.
pub const NEVENTS: u64 = 64;
const NUM_PROFILES: u32 = RX_EQE_PROFILES.len() as u32;

#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum Tune {
    ParkingOnTop,
    ParkingTired,
    GoingRight,
    GoingLeft,
}

#[derive(Clone, Copy, Debug, Default, PartialEq, Eq)]
pub struct Stats {
    /// Packets, bytes and interrupts ("events") per millisecond.
    pub ppms: u64,
    pub bpms: u64,
    pub epms: u64,
}

#[derive(Clone, Copy, Debug, Default)]
pub struct Sample {
    pub time: Ps,
    pub events: u64,
    pub pkts: u64,
    pub bytes: u64,
}

#[derive(PartialEq, Eq, Debug)]
enum Cmp {
    Better,
    Worse,
    Same,
}

pub struct Dim {
    pub profile_ix: usize,
    /// The profile table: EQE, or CQE in timer reset mode (`Dim::new`).
    profiles: &'static [(u64, u32); 5],
    pub tune: Tune,
    steps_left: u32,
    steps_right: u32,
    tired: u32,
    prev: Stats,
    start: Sample,
    measuring: bool,
    pub decisions: u64,
}

fn significant(val: u64, r: u64) -> bool {
    r != 0 && 100 * val.abs_diff(r) / r > 10
}

fn compare(curr: &Stats, prev: &Stats) -> Cmp {
    if prev.bpms == 0 {
        return if curr.bpms != 0 { Cmp::Better } else { Cmp::Same };
    }
    if significant(curr.bpms, prev.bpms) {
        return if curr.bpms > prev.bpms { Cmp::Better } else { Cmp::Worse };
    }
    if prev.ppms == 0 {
        return if curr.ppms != 0 { Cmp::Better } else { Cmp::Same };
    }
    if significant(curr.ppms, prev.ppms) {
        return if curr.ppms > prev.ppms { Cmp::Better } else { Cmp::Worse };
    }
    if prev.epms == 0 {
        return Cmp::Same;
    }
    if significant(curr.epms, prev.epms) {
        return if curr.epms < prev.epms { Cmp::Better } else { Cmp::Worse };
    }
    Cmp::Same
}

impl Default for Dim {
    fn default() -> Self {
        // A zeroed `struct dim` (`mlx5e_dim_enable` kvzallocs it): index 0 and
        // parked on top, while the CQ was created at the default profile
        // (`default_profile`), so the first decision starts from 0.
        Dim {
            profile_ix: 0,
            profiles: &RX_EQE_PROFILES,
            tune: Tune::ParkingOnTop,
            steps_left: 0,
            steps_right: 0,
            tired: 0,
            prev: Stats::default(),
            start: Sample::default(),
            measuring: false,
            decisions: 0,
        }
    }
}

impl Dim {
    /// DIM over the CQE profiles in timer reset mode
    /// (`net_dim_get_def_rx_moderation(cq_period_mode)`), else the EQE ones.
    pub fn new(cqe_mode: bool) -> Self {
        let profiles = if cqe_mode { &RX_CQE_PROFILES } else { &RX_EQE_PROFILES };
        Dim { profiles, ..Dim::default() }
    }

    /// The moderation the CQ is created with (`net_dim_get_def_rx_moderation`),
    /// before DIM's first decision: (time, packets).
    pub fn default_profile(&self) -> (Ps, u32) {
        let (us, pkts) = self.profiles[DEFAULT_PROFILE];
        (us * PS_PER_US, pkts)
    }

    /// The current moderation: (time, packets).
    pub fn profile(&self) -> (Ps, u32) {
        let (us, pkts) = self.profiles[self.profile_ix];
        (us * PS_PER_US, pkts)
    }

    /// `net_dim()`: feed the queue's counters after an interrupt; true when the profile changed.
    pub fn update(&mut self, end: Sample) -> bool {
        if self.measuring {
            if end.events - self.start.events < NEVENTS {
                return false;
            }
            let us = (end.time - self.start.time) / PS_PER_US;
            if us > 0 {
                let per_ms = |n: u64| (n * 1000).div_ceil(us);
                let curr =
                    Stats { ppms: per_ms(end.pkts - self.start.pkts), bpms: per_ms(end.bytes - self.start.bytes), epms: per_ms(NEVENTS) };
                self.decisions += 1;
                if self.decide(&curr) {
                    // DIM_APPLY_NEW_PROFILE, then DIM_START_MEASURE once the work item ran.
                    self.measuring = false;
                    return true;
                }
            } else {
                return false;
            }
        }
        self.start = end;
        self.measuring = true;
        false
    }

    /// `net_dim_decision()`.
    fn decide(&mut self, curr: &Stats) -> bool {
        let (prev_state, prev_ix) = (self.tune, self.profile_ix);
        match self.tune {
            Tune::ParkingOnTop => {
                if compare(curr, &self.prev) != Cmp::Same {
                    self.exit_parking();
                }
            }
            Tune::ParkingTired => {
                self.tired -= 1;
                if self.tired == 0 {
                    self.exit_parking();
                }
            }
            Tune::GoingRight | Tune::GoingLeft => {
                if compare(curr, &self.prev) != Cmp::Better {
                    self.turn();
                }
                if self.on_top() {
                    self.park_on_top();
                } else {
                    match self.step() {
                        Step::OnEdge => self.park_on_top(),
                        Step::TooTired => self.park_tired(),
                        Step::Stepped => {}
                    }
                }
            }
        }
        if prev_state != Tune::ParkingOnTop || self.tune != Tune::ParkingOnTop {
            self.prev = *curr;
        }
        self.profile_ix != prev_ix
    }

    fn step(&mut self) -> Step {
        if self.tired == NUM_PROFILES * 2 {
            return Step::TooTired;
        }
        match self.tune {
            Tune::ParkingOnTop | Tune::ParkingTired => {}
            Tune::GoingRight => {
                if self.profile_ix == NUM_PROFILES as usize - 1 {
                    return Step::OnEdge;
                }
                self.profile_ix += 1;
                self.steps_right += 1;
            }
            Tune::GoingLeft => {
                if self.profile_ix == 0 {
                    return Step::OnEdge;
                }
                self.profile_ix -= 1;
                self.steps_left += 1;
            }
        }
        self.tired += 1;
        Step::Stepped
    }

    fn on_top(&self) -> bool {
        match self.tune {
            Tune::ParkingOnTop | Tune::ParkingTired => true,
            Tune::GoingRight => self.steps_left > 1 && self.steps_right == 1,
            Tune::GoingLeft => self.steps_right > 1 && self.steps_left == 1,
        }
    }

    fn turn(&mut self) {
        match self.tune {
            Tune::GoingRight => {
                self.tune = Tune::GoingLeft;
                self.steps_left = 0;
            }
            Tune::GoingLeft => {
                self.tune = Tune::GoingRight;
                self.steps_right = 0;
            }
            _ => {}
        }
    }

    fn park_on_top(&mut self) {
        self.steps_right = 0;
        self.steps_left = 0;
        self.tired = 0;
        self.tune = Tune::ParkingOnTop;
    }

    /// `dim_park_tired()`: `tired` stays at the 10 steps that made it tired,
    /// so the park lasts 10 decisions.
    fn park_tired(&mut self) {
        self.steps_right = 0;
        self.steps_left = 0;
        self.tune = Tune::ParkingTired;
    }

    /// `net_dim_exit_parking()`: head left (right from the first profile) and step.
    fn exit_parking(&mut self) {
        self.tune = if self.profile_ix > 0 { Tune::GoingLeft } else { Tune::GoingRight };
        self.step();
    }
}

enum Step {
    Stepped,
    TooTired,
    OnEdge,
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn significance_is_above_ten_percent() {
        assert!(!significant(110, 100));
        assert!(significant(112, 100));
        assert_eq!(compare(&Stats { bpms: 100, ppms: 10, epms: 5 }, &Stats { bpms: 100, ppms: 10, epms: 6 }), Cmp::Better);
        assert_eq!(compare(&Stats { bpms: 80, ppms: 99, epms: 1 }, &Stats { bpms: 100, ppms: 10, epms: 6 }), Cmp::Worse);
    }

    /// Windows of 64 interrupts, 1 ms each; `bytes` per window from a closure of the profile index.
    fn drive(d: &mut Dim, windows: usize, bytes: impl Fn(usize) -> u64) -> Vec<usize> {
        let mut s = Sample::default();
        let mut seen = vec![];
        d.update(s);
        for _ in 0..windows {
            s.time += 1000 * PS_PER_US;
            s.events += NEVENTS;
            s.bytes += bytes(d.profile_ix);
            s.pkts += 100;
            d.update(s);
            d.update(s); // restart measuring if a profile was applied
            seen.push(d.profile_ix);
        }
        seen
    }

    #[test]
    fn climbs_while_moderation_helps_then_parks() {
        // Throughput grows with moderation up to profile 3, then falls.
        let mut d = Dim::default();
        let seen = drive(&mut d, 60, |ix| [100_000, 200_000, 300_000, 400_000, 350_000][ix]);
        assert!(seen.contains(&3), "{seen:?}");
        assert!(seen.iter().all(|&i| i < RX_EQE_PROFILES.len()));
        assert!(d.decisions > 10);
    }

    #[test]
    fn a_park_on_top_ends_with_a_step_as_soon_as_the_stats_change() {
        let mut d = Dim { profile_ix: 3, ..Default::default() };
        d.park_on_top();
        d.prev = Stats { bpms: 100_000, ppms: 100, epms: 64 };
        let same = d.prev;
        assert!(!d.decide(&same));
        assert_eq!(d.tune, Tune::ParkingOnTop);
        // 20 % more bytes/ms: net_dim_exit_parking heads left and steps at once.
        assert!(d.decide(&Stats { bpms: 120_000, ppms: 100, epms: 64 }));
        assert_eq!((d.tune, d.profile_ix), (Tune::GoingLeft, 2));
        // From the first profile it heads right.
        let mut d = Dim { profile_ix: 0, ..Default::default() };
        d.park_on_top();
        d.prev = same;
        assert!(d.decide(&Stats { bpms: 50_000, ppms: 100, epms: 64 }));
        assert_eq!((d.tune, d.profile_ix), (Tune::GoingRight, 1));
    }

    #[test]
    fn same_stats_wander_near_the_default_and_park_when_tired() {
        // Stats that do not depend on the profile: every step "did not help", so
        // DIM turns each time, zigzags around where it started, and after 10
        // steps parks tired for 10 decisions.
        let mut d = Dim::default();
        let seen = drive(&mut d, 60, |_| 100_000);
        assert!(seen.iter().all(|&i| i <= 2), "{seen:?}");
        let longest = seen.chunk_by(|a, b| a == b).map(|r| r.len()).max().unwrap_or(0);
        assert!(longest >= 10, "no tired parking in {seen:?}");
    }

    /// The same, decision by decision, from the zeroed `struct dim` (index 0,
    /// parked on top): the first window is "better" than the zero stats, so it
    /// steps right; then each step is "not better", so it turns and steps back;
    /// the tenth step makes it tired (`tired == NET_DIM_PARAMS_NUM_PROFILES * 2`),
    /// and the eleventh decision parks where it is; `dim_park_tired` keeps the 10,
    /// so the park lasts ten decisions and `net_dim_exit_parking` then steps
    /// right from index 0, the same cycle again. (Mutation testing: a limit of
    /// 15 steps, or a park that zeroed `tired`, passed the test above.)
    #[test]
    fn same_stats_zigzag_ten_steps_then_park_tired_for_ten_decisions() {
        let mut d = Dim::default();
        let seen = drive(&mut d, 41, |_| 100_000);
        let cycle = [1, 0, 1, 0, 1, 0, 1, 0, 1, 0, 0, 0, 0, 0, 0, 0, 0, 0, 0, 0];
        let want: Vec<usize> = cycle.iter().chain(cycle.iter()).chain([1].iter()).copied().collect();
        assert_eq!(seen, want);
    }

    /// Each mode reads its own table at every index, not only at the one the CQ
    /// is created with: mlx5 in timer reset mode (its default) takes
    /// `NET_DIM_RX_CQE_PROFILES` (`net_dim_get_rx_moderation(dim->mode, ix)`).
    /// (Mutation testing: `profile()` reading the EQE table in both modes passed
    /// every DIM test, and cut the NIC figure's DIM interrupts fourfold.)
    #[test]
    fn each_mode_reads_its_own_profiles_at_every_index() {
        let cqe: Vec<(Ps, u32)> = (0..5).map(|i| Dim { profile_ix: i, ..Dim::new(true) }.profile()).collect();
        let eqe: Vec<(Ps, u32)> = (0..5).map(|i| Dim { profile_ix: i, ..Dim::new(false) }.profile()).collect();
        let us = |u: u64| u * PS_PER_US;
        assert_eq!(cqe, vec![(us(2), 256), (us(8), 128), (us(16), 64), (us(32), 64), (us(64), 64)]);
        assert_eq!(eqe, vec![(us(1), 256), (us(8), 256), (us(64), 256), (us(128), 256), (us(256), 256)]);
    }

    /// `DIM_PARKING_TIRED` lasts `tired` decisions, then `net_dim_exit_parking`
    /// steps left (mutation testing: a count that never reached 0 passed).
    #[test]
    fn a_tired_park_lasts_ten_decisions_then_steps_away() {
        let s = Stats { bpms: 100_000, ppms: 100, epms: 64 };
        let mut d = Dim { profile_ix: 2, tune: Tune::ParkingTired, tired: 10, prev: s, ..Default::default() };
        for _ in 0..9 {
            assert!(!d.decide(&s));
            assert_eq!(d.tune, Tune::ParkingTired);
        }
        assert!(d.decide(&s));
        assert_eq!((d.tune, d.profile_ix), (Tune::GoingLeft, 1));
    }

    /// `net_dim`: no decision before `DIM_NEVENTS` (64) interrupts since the window began.
    #[test]
    fn a_decision_needs_a_window_of_64_interrupts() {
        let mut d = Dim::default();
        d.update(Sample::default());
        let at = |events| Sample { time: 1000 * PS_PER_US, events, pkts: 100, bytes: 100_000 };
        d.update(at(NEVENTS - 1));
        assert_eq!(d.decisions, 0);
        d.update(at(NEVENTS));
        assert_eq!(d.decisions, 1);
    }

    /// `net_dim_decision` saves the window's stats unless it was parked on top
    /// and stays so: the stats it parked with keep it there.
    #[test]
    fn parking_on_top_keeps_the_stats_it_parked_with() {
        let old = Stats { bpms: 100_000, ppms: 100, epms: 64 };
        let new = Stats { bpms: 120_000, ppms: 100, epms: 64 };
        let mut d = Dim { profile_ix: 3, tune: Tune::GoingRight, steps_left: 2, steps_right: 1, prev: old, ..Default::default() };
        assert!(!d.decide(&new));
        assert_eq!(d.tune, Tune::ParkingOnTop);
        assert!(!d.decide(&new), "same stats as when it parked: stays");
        assert_eq!((d.tune, d.profile_ix), (Tune::ParkingOnTop, 3));
    }

    /// Where DIM parks, not only what it visits: at the profile that moved the most bytes.
    #[test]
    fn climbs_then_stays_parked_at_the_best_profile() {
        let mut d = Dim::default();
        let seen = drive(&mut d, 60, |ix| [100_000, 200_000, 300_000, 400_000, 350_000][ix]);
        assert_eq!(d.tune, Tune::ParkingOnTop, "{seen:?}");
        assert!(seen[40..].iter().all(|&i| i == 3), "{seen:?}");
    }

    /// `net_dim_on_top` going right needs two steps left before one right.
    #[test]
    fn one_step_left_and_back_is_not_the_top() {
        let old = Stats { bpms: 100_000, ppms: 100, epms: 64 };
        let better = Stats { bpms: 120_000, ppms: 100, epms: 64 };
        let mut d = Dim { profile_ix: 2, tune: Tune::GoingRight, steps_left: 1, steps_right: 1, prev: old, ..Default::default() };
        assert!(d.decide(&better));
        assert_eq!((d.tune, d.profile_ix), (Tune::GoingRight, 3));
    }
}
