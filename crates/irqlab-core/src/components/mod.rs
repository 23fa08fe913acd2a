//! Components: one folder per mechanism or device family. Each owns its
//! parameters, state, events, hooks, report and tests, and reaches the
//! machine's core only through the hook points of `platform::parts`.
//!
//! The machine is built with the list below: adding a component is one line
//! here (its order is the order of its build, start and broadcast hooks).

pub mod crosscall;
pub mod gicv4;
pub mod hypervisor;
pub mod kvm_x86;
pub mod moderation;
pub mod nic;
pub mod nvme;
pub mod posted_msi;
pub mod spe;
pub mod vblk;

crate::parts! {
    pub struct Components {
        crosscall: crosscall::CrossCalls,
        nvme: nvme::Nvme,
        nic: nic::Nic,
        posted_msi: posted_msi::PostedMsi,
        gsim: moderation::GlobalModeration,
        hypervisor: hypervisor::Hypervisor,
        gic: gicv4::Gic,
        vblk: vblk::Vblk,
        spe: spe::Spe,
    }
}

/// The machine every scenario runs on: the core and the components above.
pub type Machine = crate::platform::machine::Machine<Components>;
