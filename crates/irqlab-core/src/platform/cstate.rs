//! CPU idle states (cpuidle): a CPU in its idle loop sleeps in a C-state, and
//! whatever wakes it (an interrupt; a thread queued for it, which Linux wakes
//! with an IPI) waits for the state's exit latency before any code runs.
//!
//! Which state: the governor (`menu`, `teo`) picks, on entering idle, the
//! deepest enabled state whose target residency fits the idle period it
//! predicts (`cpuidle_select`) and whose exit latency a PM QoS limit allows
//! (`cpuidle_governor_latency_req`: `cpu.idle_latency_limit`). The model takes
//! the governor as an oracle: the CPU is in the deepest such state whose
//! residency the whole period reaches, known in hindsight, so a period shorter
//! than every state's residency costs nothing. Real governors predict from the
//! last intervals and the next timer (`menu_select`) and miss both ways; on
//! irregular gaps the oracle can set the tail (docs/machine-model.md).
//!
//! While the CPU exits, its idle frame stays on top (the time is idle time,
//! as the kernel's accounting has it) and what arrives waits in the pending
//! queue; `Ev::Wake` ends the exit and runs the CPU (`wake.rs`). This file
//! holds the states and their counts.

use crate::engine::time::Ps;
use crate::scenario::IdleState;

/// The idle states of the scenario (`cpu.idle_state`), and what they cost.
#[derive(Default)]
pub struct CStates {
    names: Vec<String>,
    pub(crate) exit: Vec<Ps>,
    residency: Vec<Ps>,
    /// The states a PM QoS limit leaves (exit latency within it), by index.
    allowed: Vec<bool>,
    /// Wake-ups from each state since the stats reset.
    pub wakes: Vec<u64>,
    /// Exit latency paid in all, since the stats reset.
    pub exit_time: Ps,
}

impl CStates {
    pub fn new(states: &[IdleState], latency_limit: Option<Ps>) -> Self {
        Self {
            names: states.iter().map(|s| s.name.clone()).collect(),
            exit: states.iter().map(|s| s.exit.ps()).collect(),
            residency: states.iter().map(|s| s.residency.ps()).collect(),
            allowed: states.iter().map(|s| latency_limit.is_none_or(|l| s.exit.ps() <= l)).collect(),
            wakes: vec![0; states.len()],
            exit_time: 0,
        }
    }

    pub fn names(&self) -> &[String] {
        &self.names
    }

    /// The state an idle period of `idle` reached: the deepest allowed one
    /// whose target residency it covers, if any.
    pub fn state_for(&self, idle: Ps) -> Option<usize> {
        (0..self.residency.len()).rev().find(|&k| self.allowed[k] && self.residency[k] <= idle)
    }

    pub fn reset(&mut self) {
        self.wakes.iter_mut().for_each(|w| *w = 0);
        self.exit_time = 0;
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::engine::time::PS_PER_US;
    use crate::scenario::units::Time;

    #[test]
    fn the_deepest_state_whose_residency_the_period_reaches() {
        let st = |name: &str, exit, res| IdleState { name: name.into(), exit: Time(exit * PS_PER_US), residency: Time(res * PS_PER_US) };
        let skx = [st("C1", 2, 2), st("C1E", 10, 20), st("C6", 133, 600)];
        let cs = CStates::new(&skx, None);
        let at = |us| cs.state_for(us * PS_PER_US);
        assert_eq!(
            [at(1), at(2), at(19), at(20), at(599), at(600), at(10_000)],
            [None, Some(0), Some(0), Some(1), Some(1), Some(2), Some(2)]
        );
        // A PM QoS limit of 5 us leaves C1 only; of 10 us, C1 and C1E (the limit is inclusive).
        let five = CStates::new(&skx, Some(5 * PS_PER_US));
        assert_eq!(
            [five.state_for(PS_PER_US), five.state_for(50 * PS_PER_US), five.state_for(10_000 * PS_PER_US)],
            [None, Some(0), Some(0)]
        );
        let ten = CStates::new(&skx, Some(10 * PS_PER_US));
        assert_eq!(ten.state_for(10_000 * PS_PER_US), Some(1));
    }
}
