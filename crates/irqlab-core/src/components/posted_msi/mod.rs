//! Intel posted MSI for the host (Linux 6.10+, `intremap=posted_msi`). The
//! IOMMU's interrupt-remapping entry of each device vector is in posted mode:
//! a message sets the vector's bit in the target CPU's posted-interrupt
//! descriptor (`posted_msi_pi_desc`, its PIR), and only when the descriptor's
//! outstanding-notification bit (ON) was clear does the IOMMU set it and send
//! the CPU one notification. The CPU's notification handler
//! (`sysvec_posted_msi_notification`, arch/x86/kernel/irq.c) runs the handlers
//! of every vector set in the PIR (`handle_pending_pir`), looks again while
//! more came (at most `MAX_POSTED_MSI_COALESCING_LOOP` − 1 passes), clears ON,
//! and makes one last pass. So a burst of MSIs to one CPU costs one interrupt
//! entry and exit instead of one per MSI.
//!
//! What it does not change: every message still crosses the root port and the
//! remapping unit (the IOMMU looks up the entry and posts it), so the
//! platform's per-MSI cost on the DMA path (`fabric.msi_write`) is paid as
//! before. A re-sent interrupt (`check_irq_resend`, after GSIM's timer) raises
//! the vector itself through the local APIC, as `intel_ack_posted_msi_irq`'s
//! comment describes, so it takes the ordinary path.

pub mod params;
#[cfg(test)]
mod tests;

use crate::engine::stats::Report;
use crate::engine::time::Ps;
use crate::engine::Scheduler;
use crate::platform::cpu::{Level, Prio};
use crate::platform::machine::{Ev, Machine};
use crate::platform::parts::{Component, Has, NoEvent};
use crate::scenario::Scenario;

/// A CPU's posted-interrupt descriptor and its notification handler's progress.
#[derive(Default)]
pub struct CpuPid {
    /// Outstanding notification: a notification was sent and its handler has not cleared ON.
    pub on: bool,
    /// Sources whose PIR bit is set (their `pending` bit stands for it), in arrival order.
    pub pir: Vec<u32>,
    /// The handler's passes so far with ON set, and whether it is in its last pass (ON cleared).
    pub passes: u32,
    pub last: bool,
    /// Whether any pass of the running handler found a vector.
    pub found_any: bool,
    /// Handlers the pass in progress runs (their `handler_end` follows the pass).
    pub ran: Vec<u32>,
}

#[derive(Default)]
pub struct PostedMsi {
    /// The scenario has `[posted_msi]` (it reports), and whether it posts.
    pub on: bool,
    pub enabled: bool,
    pub pir_scan: Ps,
    pub pir_hit: Ps,
    pub loops: u32,
    pub cpus: Vec<CpuPid>,
    /// The notification interrupt of each CPU (a local vector, not through the fabric).
    pub notify_src: Vec<u32>,
    pub posted_sources: u64,
    pub msis: u64,
    pub notifications: u64,
    pub handlers: u64,
    pub passes: u64,
    /// Notifications whose handler found the PIR empty in every pass (a later
    /// notification's last pass took what this one was sent for).
    pub empty: u64,
}

impl Component for PostedMsi {
    type Ev = NoEvent;

    /// Puts every host device MSI in posted mode, and gives each CPU its notification vector.
    fn build<P: Has<Self>>(m: &mut Machine<P>, sc: &Scenario, _seed: u64) -> Self {
        let Some(p) = &sc.posted_msi else { return PostedMsi::default() };
        let mut me = PostedMsi { on: true, pir_scan: p.pir_scan.ps(), pir_hit: p.pir_hit.ps(), loops: p.loops, ..Default::default() };
        // Disabled, it still reports (zeros), so variants that turn it off compare side by side.
        if !p.enabled {
            return me;
        }
        me.enabled = true;
        for s in &mut m.srcs {
            // A guest's vectors exit or are posted to its vCPU; NMIs and IPIs are not remapped MSIs.
            if s.msi
                && s.vm == crate::platform::source::NO_VM
                && s.posted_to == crate::platform::source::NOT_POSTED
                && s.prio == Prio::Normal
            {
                s.poster = P::ID;
                me.posted_sources += 1;
            }
        }
        let group = m.add_group("posted_msi", "posted MSI notification");
        let (entry, exit) = (m.irq_entry, m.irq_exit);
        for c in 0..m.cpus.len() as u32 {
            let i = m.add_source(format!("posted_msi.cpu{c}"), group, c, 0, Prio::Normal, entry, exit, 0, P::ID, c);
            m.srcs[i as usize].handler_name = Some("sysvec_posted_msi_notification".into());
            m.srcs[i as usize].continues = true;
            me.notify_src.push(i);
        }
        me.cpus = (0..m.cpus.len()).map(|_| CpuPid::default()).collect();
        me
    }

    /// The IOMMU posted source `i`'s message: notify its CPU unless a notification is outstanding.
    fn msi_posted<P: Has<Self>>(m: &mut Machine<P>, s: &mut Scheduler<Ev>, i: u32) {
        let c = m.srcs[i as usize].cpu as usize;
        let me = m.parts.get();
        me.msis += 1;
        let pid = &mut me.cpus[c];
        pid.pir.push(i);
        if !std::mem::replace(&mut pid.on, true) {
            me.notifications += 1;
            let n = me.notify_src[c];
            m.raise_direct(s, n);
        }
    }

    /// `sysvec_posted_msi_notification` starts: the first pass.
    fn handler_start<P: Has<Self>>(m: &mut Machine<P>, s: &mut Scheduler<Ev>, c: usize, _i: u32) -> Ps {
        let me = m.parts.get();
        let loops = me.loops;
        let pid = &mut me.cpus[c];
        pid.passes = 1;
        pid.found_any = false;
        // With a single-pass loop the handler clears ON before its only pass.
        pid.last = loops <= 1;
        pid.on &= !pid.last;
        pass(m, s, c)
    }

    /// A pass is through: its handlers end, then the loop decides what comes next.
    fn handler_continue<P: Has<Self>>(m: &mut Machine<P>, s: &mut Scheduler<Ev>, c: usize, _i: u32) -> Ps {
        let me = m.parts.get();
        let ran = std::mem::take(&mut me.cpus[c].ran);
        // A handler of the pass that loops (nvme_irq) runs on first.
        let more = m.continue_runs(s, c, &ran);
        if more > 0 {
            m.parts.get().cpus[c].ran = ran;
            return more;
        }
        let found = !ran.is_empty();
        for &i in &ran {
            m.end_run(s, c, i);
        }
        let me = m.parts.get();
        let mut ran = ran;
        ran.clear();
        me.cpus[c].ran = ran;
        let loops = me.loops;
        let pid = &mut me.cpus[c];
        if pid.last {
            if !pid.found_any {
                me.empty += 1;
            }
            return 0;
        }
        // `while (++i < MAX_POSTED_MSI_COALESCING_LOOP) if (!handle_pending_pir()) break;`
        if found && pid.passes + 1 < loops {
            pid.passes += 1;
        } else {
            // pi_clear_on(), then one last pass for what raced with it.
            pid.on = false;
            pid.last = true;
        }
        pass(m, s, c)
    }

    fn reset<P: Has<Self>>(m: &mut Machine<P>, _now: Ps) {
        let me = m.parts.get();
        (me.msis, me.notifications, me.handlers, me.passes, me.empty) = (0, 0, 0, 0, 0);
    }

    fn report<P: Has<Self>>(m: &mut Machine<P>, r: &mut Report, _now: Ps, secs: f64) {
        let me = m.parts.get_ref();
        if !me.on {
            return;
        }
        let per = |x: u64| if me.notifications > 0 { x as f64 / me.notifications as f64 } else { 0.0 };
        r.metric("posted_msi.sources", me.posted_sources as f64);
        r.metric("posted_msi.msis_per_s", me.msis as f64 / secs);
        r.metric("posted_msi.notifications_per_s", me.notifications as f64 / secs);
        r.metric("posted_msi.handlers_per_notification", per(me.handlers));
        r.metric("posted_msi.passes_per_notification", per(me.passes));
        r.metric("posted_msi.empty_notifications", me.empty as f64);
        if me.enabled && me.posted_sources == 0 {
            r.warn("posted_msi: no host device MSI to post (a guest's interrupts exit or are posted to its vCPU)");
        }
    }
}

/// One `handle_pending_pir()`: take the PIR and run, in vector order, the
/// handler of every source set in it; returns the pass's length.
fn pass<P: Has<PostedMsi>>(m: &mut Machine<P>, s: &mut Scheduler<Ev>, c: usize) -> Ps {
    let me = m.parts.get();
    me.passes += 1;
    let mut pir = std::mem::take(&mut me.cpus[c].pir);
    let mut ran = std::mem::take(&mut me.cpus[c].ran);
    // Only the IOMMU's posting takes the line away: a pass that finds nothing hits in the cache.
    let mut len = if pir.is_empty() { me.pir_hit } else { me.pir_scan };
    // `for_each_set_bit` over the vectors: lowest first (our vectors are numbered as the sources).
    pir.sort_unstable();
    for &i in &pir {
        let src = &mut m.srcs[i as usize];
        src.pending = false;
        if src.disabled {
            // handle_edge_irq() from the pass masks it instead of running the
            // handler, as a remapped vector's CPU does (`Work::MaskAck`).
            m.mask_disabled(i);
            len += m.c.msix_mask;
            continue;
        }
        let (raised, flow, events) = (src.raised, src.flow, std::mem::take(&mut src.events));
        m.note_delivery(flow, events);
        len += m.handler_start(s, c, i, Level::Host, raised);
        ran.push(i);
    }
    let me = m.parts.get();
    me.handlers += pir.len() as u64;
    me.cpus[c].found_any |= !pir.is_empty();
    pir.clear();
    me.cpus[c].pir = pir;
    me.cpus[c].ran = ran;
    len
}
