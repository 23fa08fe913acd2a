//! A guest's device interrupts through the GIC (M3): LPIs translated by an ITS,
//! and the two ways they reach a vCPU.
//!
//! - **GICv3, trap and emulate** (`direct_lpi = false`): the physical LPI goes
//!   to `lpi_target` (Xen: CPU 0); the hypervisor acknowledges it, looks up the
//!   vLPI and its vCPU (`gicv3_do_LPI`), queues it for a list register and
//!   kicks the vCPU (`vgic_inject_irq` → `vcpu_kick`): an IPI if it runs
//!   elsewhere, a wake-up if it is blocked.
//! - **GICv4 direct injection**: one vPE per vCPU. While it is resident (its
//!   vCPU scheduled in, `GICR_VPENDBASER.Valid`) a vLPI reaches the guest with
//!   no exit; otherwise it waits in the virtual pending table, and the vPE's
//!   doorbell LPI, if unmasked, tells the hypervisor once per non-resident
//!   period. Schedule-in and -out program `GICR_VPENDBASER` and poll Dirty;
//!   running on another pCPU first needs `VMOVP` on every ITS.
//!
//! Depends one way on the hypervisor component (`parts::dep`): it calls its
//! API and registers for its context switches.

pub mod params;
#[cfg(test)]
mod tests;

use crate::components::hypervisor::{self, hv, Exit, GuestWork, Hypervisor, VcpuState};
use crate::engine::rng::{exp_sample, stream, Rng};
use crate::engine::stats::Report;
use crate::engine::time::Ps;
use crate::engine::Scheduler;
use crate::platform::machine::{Ev, Machine, Parts};
use crate::platform::parts::{dep, ev_of, Component, Has};
use crate::scenario::Scenario;
use params::{DoorbellWhen, GicVersion};

crate::part_events! {
    pub enum GicEv {
        /// An LPI reached its redistributor (arg: the in-flight slot).
        Lpi,
        /// GICv3: the hypervisor's LPI handler is done; inject (arg: slot).
        Inject,
        /// GICv3: `vgic_inject_irq` has dropped the vGIC lock; kick the vCPU (arg: vCPU).
        Injected,
        /// GICv4: a doorbell's handler is done; wake the vCPU (arg: vCPU).
        DoorbellDone,
        /// The hypervisor switches a vCPU out (arg: vCPU).
        SwitchOut,
        /// The hypervisor switches a vCPU in (arg: vCPU).
        SwitchIn,
    }
}

#[derive(Default, Clone, Copy)]
pub struct Costs {
    pub lpi_delivery: Ps,
    pub its_cmd: Ps,
    pub vpendbaser: Ps,
    pub dirty: Ps,
    pub dirty_poll: Ps,
    pub dirty_max: Ps,
    pub doorbell_handler: Ps,
    /// `[hypervisor]`: the trap path's LPI handler and list-register injection.
    pub lpi_handler: Ps,
    pub inject: Ps,
}

#[derive(Default)]
pub struct Stats {
    pub vlpis: u64,
    /// Delivered straight to a resident vPE.
    pub direct: u64,
    /// Left pending in a non-resident vPE's table.
    pub vpt: u64,
    pub doorbells: u64,
    /// Doorbells whose handler the hypervisor ran (`doorbell_done`), counted
    /// apart from where they ring, so that a doorbell raised anywhere else shows.
    pub doorbells_handled: u64,
    /// Non-resident periods that ended, with a vLPI while the doorbell was unmasked, and with a doorbell.
    pub periods: u64,
    pub periods_armed_vlpi: u64,
    pub periods_doorbell: u64,
    /// Doorbells past the first in a period, and periods with a vLPI while
    /// unmasked that rang none: both 0 when the invariant holds.
    pub periods_extra_doorbells: u64,
    pub periods_vlpi_silent: u64,
    pub sched_in: u64,
    pub sched_out: u64,
    pub dirty_wait: Ps,
    pub vmovps: u64,
    pub its_cmds: u64,
    pub its_wait: Ps,
    pub maintenance: u64,
    /// Blocked vCPUs woken at schedule-out because a vLPI was pending (`PendingLast`).
    pub pending_last_wakes: u64,
}

/// One vCPU's vPE.
#[derive(Clone, Copy, Default)]
pub struct Vpe {
    pub resident: bool,
    /// The redistributor (pCPU) it is mapped to (`VMAPP`, then `VMOVP`).
    pub rd: u32,
    pub db_armed: bool,
    pub db_raised: bool,
    /// A vLPI arrived in this non-resident period while the doorbell was unmasked.
    pub vlpi_armed: bool,
    /// Doorbells rung in this period, counted where they ring (the invariant's
    /// check, apart from `db_raised`, which decides whether to ring).
    pub db_rung: u32,
}

#[derive(Default)]
pub struct Gic {
    pub on: bool,
    pub direct: bool,
    pub v41: bool,
    pub doorbell_descheduled: bool,
    pub single_vmovp: bool,
    pub lpi_target: u32,
    pub lrs: u32,
    pub c: Costs,
    pub vpes: Vec<Vpe>,
    /// Per ITS: when its command queue drains.
    its_free_at: Vec<Ps>,
    /// LPIs on their way through the ITS or the hypervisor: (vCPU, guest handler).
    inflight: Vec<Option<(u32, GuestWork)>>,
    /// GICv3: per vCPU, injects whose kick has not come yet (`Injected`).
    kicks_due: Vec<u32>,
    free: Vec<u32>,
    rng: Option<Rng>,
    pub stats: Stats,
    /// MSIs sent over the whole run (not reset at warm-up).
    pub sent: u64,
}

#[inline]
fn gic<P: Parts>(m: &mut Machine<P>) -> &mut Gic {
    dep::<Gic, P>(m)
}

#[inline]
fn ev<P: Parts>(e: GicEv, arg: u32) -> Ev {
    ev_of::<Gic, P>(e, arg)
}

impl Component for Gic {
    type Ev = GicEv;

    fn build<P: Has<Self>>(m: &mut Machine<P>, sc: &Scenario, seed: u64) -> Self {
        let (Some(g), Some(vs)) = (&sc.gic, &sc.vcpu_sched) else { return Gic::default() };
        let k = &g.costs;
        let me = Gic {
            on: true,
            direct: g.direct_lpi,
            v41: g.version == GicVersion::V41,
            doorbell_descheduled: g.doorbell == DoorbellWhen::Descheduled,
            single_vmovp: g.single_vmovp,
            lpi_target: g.lpi_target,
            lrs: g.list_registers,
            c: Costs {
                lpi_delivery: k.lpi_delivery.ps(),
                its_cmd: k.its_cmd.ps(),
                vpendbaser: k.vpendbaser.ps(),
                dirty: k.dirty.ps(),
                dirty_poll: k.dirty_poll.ps(),
                dirty_max: k.dirty_max.ps(),
                doorbell_handler: k.doorbell_handler.ps(),
                lpi_handler: sc.hypervisor.handler.ps(),
                inject: sc.hypervisor.inject.ps(),
            },
            // VMAPP maps vPE v to the redistributor of the pCPU its vCPU starts on.
            vpes: (0..vs.vcpus).map(|v| Vpe { rd: vs.pinned(v).unwrap_or(v % vs.pcpus), ..Vpe::default() }).collect(),
            kicks_due: vec![0; vs.vcpus as usize],
            its_free_at: vec![0; g.its as usize],
            rng: Some(stream(seed, "gicv4")),
            ..Gic::default()
        };
        if me.direct {
            let h = dep::<Hypervisor, P>(m);
            h.direct_vlpi = true;
            h.on_switch_in = Some(P::ev(GicEv::SwitchIn, 0));
            h.on_switch_out = Some(P::ev(GicEv::SwitchOut, 0));
        }
        me
    }

    fn handle<P: Has<Self>>(m: &mut Machine<P>, s: &mut Scheduler<Ev>, e: GicEv, arg: u32) {
        match e {
            GicEv::Lpi => lpi(m, s, arg),
            GicEv::Inject => inject(m, s, arg),
            GicEv::Injected => {
                let g = gic(m);
                g.kicks_due[arg as usize] -= 1;
                let p = g.lpi_target;
                hypervisor::kick(m, s, arg, p)
            }
            GicEv::DoorbellDone => doorbell_done(m, s, arg),
            GicEv::SwitchOut => switch_out(m, s, arg),
            GicEv::SwitchIn => switch_in(m, s, arg),
        }
    }

    fn reset<P: Has<Self>>(m: &mut Machine<P>, _now: Ps) {
        m.parts.get().stats = Stats::default();
    }

    fn report<P: Has<Self>>(m: &mut Machine<P>, r: &mut Report, _now: Ps, secs: f64) {
        if !m.parts.get_ref().on {
            return;
        }
        // Every MSI sent is in flight, pending at a vCPU, or handled by the guest: none lost, none twice.
        let h = dep::<Hypervisor, P>(m);
        let (taken, pending, pcpus) = (h.virqs_taken, h.virqs_outstanding(), h.pcpus.len().max(1) as f64);
        // vLPIs pending on a blocked vCPU that nothing will wake: not current on a pCPU
        // (whose schedule-out reads PendingLast), and (below) no doorbell or, on
        // GICv3, no inject's kick on its way.
        let blocked: Vec<(usize, usize)> = (h.vcpus.iter().enumerate())
            .filter(|&(v, vc)| vc.state == VcpuState::Blocked && h.pcpus[vc.processor as usize].cur != Some(v as u32))
            .map(|(v, vc)| (v, vc.virqs.len()))
            .collect();
        let g = m.parts.get_ref();
        let inflight = g.inflight.iter().filter(|x| x.is_some()).count() as u64;
        r.metric("gic.vlpis_unaccounted", g.sent as f64 - (taken + pending + inflight) as f64);
        let stranded: usize = blocked
            .iter()
            .filter(|&&(v, _)| !g.vpes.get(v).is_some_and(|vp| vp.db_raised) && g.kicks_due.get(v).is_none_or(|&k| k == 0))
            .map(|&(_, n)| n)
            .sum();
        r.metric("gic.vlpis_stranded", stranded as f64);
        let st = &g.stats;
        let per_s = |x: u64| x as f64 / secs;
        r.metric("gic.vlpis_per_s", per_s(st.vlpis));
        r.metric("gic.direct_per_s", per_s(st.direct));
        r.metric("gic.vpt_pending_per_s", per_s(st.vpt));
        r.metric("gic.doorbells_per_s", per_s(st.doorbells));
        r.metric("gic.doorbells_handled_per_s", per_s(st.doorbells_handled));
        r.metric("gic.vpe_sched_in_per_s", per_s(st.sched_in));
        r.metric("gic.vpe_sched_out_per_s", per_s(st.sched_out));
        let polls = st.sched_in + st.sched_out;
        r.metric("gic.dirty_wait_mean_ns", if polls > 0 { st.dirty_wait as f64 / polls as f64 / 1e3 } else { 0.0 });
        // A share of the pCPUs' time, as hyp.pcpu_hyp_fraction (it was a sum over them, up to 1.58).
        r.metric("gic.dirty_wait_fraction", st.dirty_wait as f64 / (secs * 1e12 * pcpus));
        r.metric("gic.vmovp_per_s", per_s(st.vmovps));
        r.metric("gic.its_cmds_per_s", per_s(st.its_cmds));
        r.metric("gic.its_wait_mean_ns", if st.its_cmds > 0 { st.its_wait as f64 / st.its_cmds as f64 / 1e3 } else { 0.0 });
        r.metric("gic.maintenance_per_s", per_s(st.maintenance));
        r.metric("gic.pending_last_wakes_per_s", per_s(st.pending_last_wakes));
        // The doorbell invariant's counts (tests): non-resident periods ended, those
        // with a vLPI while the doorbell was unmasked, and those that rang it.
        r.metric("gic.periods", st.periods as f64);
        r.metric("gic.periods_vlpi_unmasked", st.periods_armed_vlpi as f64);
        r.metric("gic.periods_doorbell", st.periods_doorbell as f64);
        r.metric("gic.periods_extra_doorbells", st.periods_extra_doorbells as f64);
        r.metric("gic.periods_vlpi_silent", st.periods_vlpi_silent as f64);
    }
}

/// A device's MSI for vCPU `v` (its event mapped by `MAPTI`/`VMAPTI`), with
/// the guest's handler for it: the ITS translates it into an LPI.
pub fn send_msi<P: Parts>(m: &mut Machine<P>, s: &mut Scheduler<Ev>, v: u32, w: GuestWork) {
    // The device's write to GITS_TRANSLATER is an MSI write like any other
    // (`msi_writes`), though it does not queue in the fabric model: the ITS
    // translates it `lpi_delivery` later. (It read 0 on M3 until 2026-11-29.)
    m.n.writes += 1;
    let g = gic(m);
    g.sent += 1;
    let slot = match g.free.pop() {
        Some(k) => {
            g.inflight[k as usize] = Some((v, w));
            k
        }
        None => {
            g.inflight.push(Some((v, w)));
            (g.inflight.len() - 1) as u32
        }
    };
    let d = g.c.lpi_delivery;
    s.after(d, ev::<P>(GicEv::Lpi, slot));
}

fn take(g: &mut Gic, slot: u32) -> (u32, GuestWork) {
    let x = g.inflight[slot as usize].take().expect("a slot in flight");
    g.free.push(slot);
    x
}

fn lpi<P: Parts>(m: &mut Machine<P>, s: &mut Scheduler<Ev>, slot: u32) {
    let g = gic(m);
    g.stats.vlpis += 1;
    if !g.direct {
        // GICv3: a physical LPI to the target pCPU, where the hypervisor handles it.
        let (p, cost) = (g.lpi_target, g.c.lpi_handler);
        return hypervisor::hyp_work(m, s, p, cost, Some(ev::<P>(GicEv::Inject, slot)), Some(Exit::Lpi));
    }
    let (v, w) = take(g, slot);
    let vpe = g.vpes[v as usize];
    if vpe.resident {
        g.stats.direct += 1;
        return hypervisor::post_virq(m, s, v, w, true);
    }
    // Pending in the virtual pending table; the doorbell tells the hypervisor once.
    g.stats.vpt += 1;
    let vp = &mut g.vpes[v as usize];
    if vp.db_armed {
        vp.vlpi_armed = true;
    }
    let ring = vp.db_armed && !vp.db_raised;
    if ring {
        vp.db_raised = true;
        vp.db_rung += 1;
        g.stats.doorbells += 1;
    }
    let (rd, cost) = (vp.rd, g.c.doorbell_handler);
    hypervisor::post_virq(m, s, v, w, false);
    if ring {
        hypervisor::hyp_work(m, s, rd, cost, Some(ev::<P>(GicEv::DoorbellDone, v)), Some(Exit::Doorbell));
    }
}

/// GICv3: `vgic_inject_irq` on the LPI's pCPU: queue the vIRQ, write a list
/// register if its vCPU runs here, and kick it once the vGIC lock is dropped
/// (`vcpu_kick` follows the unlock in `xen/arch/arm/vgic.c`): the vCPU becomes
/// runnable after the inject's cost, not as it starts.
fn inject<P: Parts>(m: &mut Machine<P>, s: &mut Scheduler<Ev>, slot: u32) {
    let g = gic(m);
    let (v, w) = take(g, slot);
    let (p, cost, lrs) = (g.lpi_target, g.c.inject, g.lrs as usize);
    g.kicks_due[v as usize] += 1;
    hypervisor::hyp_work(m, s, p, cost, Some(ev::<P>(GicEv::Injected, v)), None);
    hypervisor::post_virq(m, s, v, w, false);
    // More pending vIRQs than list registers: a maintenance interrupt refills them.
    let h = hv(m);
    if h.vcpus[v as usize].virqs.len() > lrs {
        if let Some(q) = h.is_current(v) {
            let c = gic(m).c.lpi_handler;
            gic(m).stats.maintenance += 1;
            hypervisor::hyp_work(m, s, q, c, None, Some(Exit::Maintenance));
        }
    }
}

/// The doorbell's handler ran on the vPE's pCPU: mask it again (GICv4.0: `INV`
/// through the proxy device) and wake the vCPU (`vcpu_unblock`).
fn doorbell_done<P: Parts>(m: &mut Machine<P>, s: &mut Scheduler<Ev>, v: u32) {
    let now = s.now();
    let g = gic(m);
    g.stats.doorbells_handled += 1;
    let p = g.vpes[v as usize].rd;
    if !g.v41 {
        let w = its_cmd(g, now, v as usize % g.its_free_at.len());
        hypervisor::hyp_work(m, s, p, w, None, None);
    }
    hypervisor::wake(m, s, v, p);
}

/// Issues one ITS command at `now`: the issuer waits until it completes.
fn its_cmd(g: &mut Gic, now: Ps, its: usize) -> Ps {
    let start = now.max(g.its_free_at[its]);
    let done = start + g.c.its_cmd;
    g.its_free_at[its] = done;
    g.stats.its_cmds += 1;
    g.stats.its_wait += done - now;
    done - now
}

/// `VPENDBASER` write and the Dirty poll: whole poll steps, up to `dirty_max`.
fn vpendbaser(g: &mut Gic) -> Ps {
    let c = g.c;
    let dirty = if c.dirty == 0 {
        0
    } else {
        let x = exp_sample(g.rng.as_mut().expect("built"), c.dirty as f64 * 1e-12);
        let t = (x * 1e12) as Ps;
        (t.div_ceil(c.dirty_poll) * c.dirty_poll).min(c.dirty_max)
    };
    g.stats.dirty_wait += dirty;
    c.vpendbaser + dirty
}

/// Schedule-out: clear Valid, poll Dirty; unmask the doorbell if the vCPU
/// blocked (or always, with `doorbell = "descheduled"`). A doorbell rings only
/// for a vLPI that comes later: one that reached the resident vPE after the
/// vCPU blocked shows as `PendingLast` and wakes it here (Linux
/// `its_vpe_deschedule` reads it; KVM's `kvm_vcpu_check_block` →
/// `kvm_vgic_vcpu_pending_irq` then does not let the vCPU sleep).
fn switch_out<P: Parts>(m: &mut Machine<P>, s: &mut Scheduler<Ev>, v: u32) {
    let now = s.now();
    // Already put (KVM put it at the WFI, then its thread slept): `vgic_v4_put` returns.
    if !gic(m).vpes[v as usize].resident {
        return;
    }
    let vc = &hv(m).vcpus[v as usize];
    let blocked = vc.state == VcpuState::Blocked;
    let pending_last = !vc.virqs.is_empty();
    let g = gic(m);
    g.stats.sched_out += 1;
    let mut cost = vpendbaser(g);
    // GICv4.1 promises a doorbell only if PendingLast reads clear (`its_vpe_4_1_deschedule`).
    let arm = (blocked || g.doorbell_descheduled) && !(g.v41 && pending_last);
    if arm && !g.v41 {
        cost += its_cmd(g, now + cost, v as usize % g.its_free_at.len());
    }
    let vp = &mut g.vpes[v as usize];
    vp.resident = false;
    vp.db_armed = arm;
    vp.db_raised = false;
    vp.vlpi_armed = false;
    vp.db_rung = 0;
    let p = vp.rd;
    hypervisor::hyp_work(m, s, p, cost, None, None);
    if blocked && pending_last {
        gic(m).stats.pending_last_wakes += 1;
        hypervisor::wake(m, s, v, p);
    }
}

/// Schedule-in on pCPU `p` (where the vCPU now is): `VMOVP` on every ITS (on
/// one with `single_vmovp`) if the vPE was mapped elsewhere, then Valid=1 and the Dirty poll. On GICv4.0,
/// with the doorbell behind the proxy device, Linux also moves the doorbell's
/// proxy event after a `VMOVP` (`its_vpe_db_proxy_move`: `MOVI`) and clears
/// a doorbell that may still be pending once the vPE is resident
/// (`vgic_v4_load` → `irq_set_irqchip_state(PENDING, false)` →
/// `its_vpe_set_irqchip_state`: `CLEAR`), one ITS command each.
fn switch_in<P: Parts>(m: &mut Machine<P>, s: &mut Scheduler<Ev>, v: u32) {
    let now = s.now();
    // `vgic_v4_load` returns for a vPE already resident.
    if gic(m).vpes[v as usize].resident {
        return;
    }
    let p = hv(m).vcpus[v as usize].processor;
    let g = gic(m);
    g.stats.sched_in += 1;
    let mut cost = 0;
    let vp = g.vpes[v as usize];
    let proxy_its = v as usize % g.its_free_at.len();
    if vp.rd != p {
        g.stats.vmovps += 1;
        let vmovp_its = if g.single_vmovp { 1 } else { g.its_free_at.len() };
        for its in 0..vmovp_its {
            cost += its_cmd(g, now + cost, its);
        }
        if !g.v41 {
            cost += its_cmd(g, now + cost, proxy_its); // MOVI of the doorbell's proxy event
        }
    }
    // GICv4.0: mask a doorbell that did not ring (`its_make_vpe_resident` →
    // `disable_irq_nosync(vpe->irq)`, an INV: the doorbell is IRQ_DISABLE_UNLAZY).
    if vp.db_armed && !vp.db_raised && !g.v41 {
        cost += its_cmd(g, now + cost, proxy_its);
    }
    cost += vpendbaser(g);
    if !g.v41 {
        cost += its_cmd(g, now + cost, proxy_its); // CLEAR of a doorbell left pending
    }
    g.stats.periods += 1;
    g.stats.periods_armed_vlpi += vp.vlpi_armed as u64;
    g.stats.periods_doorbell += (vp.db_rung > 0) as u64;
    g.stats.periods_extra_doorbells += vp.db_rung.saturating_sub(1) as u64;
    g.stats.periods_vlpi_silent += (vp.vlpi_armed && vp.db_rung == 0) as u64;
    g.vpes[v as usize] = Vpe { resident: true, rd: p, ..Vpe::default() };
    hypervisor::hyp_work(m, s, p, cost, None, None);
}
