//! M1: arm64 interrupt masking and cross-CPU NMI delivery.
//!
//! - [`pmr`]: what masking by GIC priority (pseudo-NMI) costs on every exception.
//! - [`crosscall`]: one CPU asking others to run a handler (backtrace, stop),
//!   by IPI, pseudo-NMI, SDEI or FEAT_NMI, with escalation.
//!
//! Masks and priorities themselves live with the CPU (`hw::cpu::{Mask, Prio}`):
//! every interrupt path consults them, not only this mechanism's.

pub mod crosscall;
pub mod pmr;

#[cfg(test)]
mod tests;
