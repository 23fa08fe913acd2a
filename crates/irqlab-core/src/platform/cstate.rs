//! CPU idle states (cpuidle): a CPU in its idle loop sleeps in a C-state, and
//! whatever wakes it (an interrupt; a thread queued for it, which Linux wakes
//! with an IPI) waits for the state's exit latency before any code runs.
//!
//! Which state: the governor (`menu`, `teo`) picks, on entering idle, the
//! deepest enabled state whose target residency fits the idle period it
//! predicts (`cpuidle_select`). The model takes the governor as ideal: the
//! CPU is in the deepest state whose residency the whole period reaches, so
//! a period shorter than every state's residency costs nothing. Real
//! governors mispredict both ways; this is the cost of the periods as they are.
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
    /// Wake-ups from each state since the stats reset.
    pub wakes: Vec<u64>,
    /// Exit latency paid in all, since the stats reset.
    pub exit_time: Ps,
}

impl CStates {
    pub fn new(states: &[IdleState]) -> Self {
        Self {
            names: states.iter().map(|s| s.name.clone()).collect(),
            exit: states.iter().map(|s| s.exit.ps()).collect(),
            residency: states.iter().map(|s| s.residency.ps()).collect(),
            wakes: vec![0; states.len()],
            exit_time: 0,
        }
    }

    pub fn names(&self) -> &[String] {
        &self.names
    }

    /// The state an idle period of `idle` reached: the deepest whose target
    /// residency it covers, if any.
    pub fn state_for(&self, idle: Ps) -> Option<usize> {
        self.residency.iter().rposition(|&r| r <= idle)
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
        let cs = CStates::new(&[st("C1", 2, 2), st("C1E", 10, 20), st("C6", 133, 600)]);
        let at = |us| cs.state_for(us * PS_PER_US);
        assert_eq!(
            [at(1), at(2), at(19), at(20), at(599), at(600), at(10_000)],
            [None, Some(0), Some(0), Some(1), Some(1), Some(2), Some(2)]
        );
    }
}
