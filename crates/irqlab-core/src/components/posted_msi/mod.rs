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
//! entry and exit instead of one per MSI. The PIR bit is set as the remapping
//! unit finishes a message; only the notification crosses on to the local
//! APIC (`fabric.latency`), so what is posted meanwhile joins its first pass.
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
    /// Whether any pass of the running handler found a vector, and the pass in progress.
    pub found_any: bool,
    pub found: bool,
    /// What the pass in progress took from the PIR and has not run yet, lowest
    /// vector first: (source, raised, flow, events), as they were when it took them.
    pub todo: std::collections::VecDeque<(u32, Ps, u64, u32)>,
    /// The vector whose handler is running (none between handlers).
    pub running: Option<u32>,
}

#[derive(Default)]
pub struct PostedMsi {
    /// The scenario has `[posted_msi]` (it reports), and whether it posts.
    pub on: bool,
    pub enabled: bool,
    pub pir_scan: Ps,
    pub pir_hit: Ps,
    pub per_vector: Ps,
    pub loops: u32,
    pub cpus: Vec<CpuPid>,
    /// The notification interrupt of each CPU (a local vector, not through the fabric).
    pub notify_src: Vec<u32>,
    pub posted_sources: u64,
    pub msis: u64,
    pub notifications: u64,
    pub handlers: u64,
    /// Vectors a pass found disabled (GSIM) and masked instead of handling.
    pub masked: u64,
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
        let mut me = PostedMsi {
            on: true,
            pir_scan: p.pir_scan.ps(),
            pir_hit: p.pir_hit.ps(),
            per_vector: p.per_vector.ps(),
            loops: p.loops,
            ..Default::default()
        };
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
        // The notification is raised on its CPU; its handlers record each device
        // vector's latency (a notification sample of ~`irq_entry` halved the p50).
        m.src_local[group as usize] = true;
        let (entry, exit) = (m.irq_entry, m.irq_exit);
        for c in 0..m.cpus.len() as u32 {
            let i = m.add_source(format!("posted_msi.cpu{c}"), group, c, 0, Prio::Normal, entry, exit, 0, P::ID, c);
            m.srcs[i as usize].handler_name = Some("sysvec_posted_msi_notification".into());
            // The IOMMU writes the PIR and ON, then sends the notification, which
            // crosses to the local APIC as a remapped MSI does (`fabric.latency`).
            m.srcs[i as usize].latency = m.fabric.latency();
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
    fn handler_start<P: Has<Self>>(m: &mut Machine<P>, _s: &mut Scheduler<Ev>, c: usize, _i: u32) -> Ps {
        let me = m.parts.get();
        let loops = me.loops;
        let pid = &mut me.cpus[c];
        pid.passes = 1;
        pid.found_any = false;
        // With a single-pass loop the handler clears ON before its only pass.
        pid.last = loops <= 1;
        pid.on &= !pid.last;
        pass(m, c)
    }

    /// The scan or a handler is through: the running handler loops on or
    /// ends, the next vector the pass took runs, or when the pass is through
    /// the loop decides what comes next.
    fn handler_continue<P: Has<Self>>(m: &mut Machine<P>, s: &mut Scheduler<Ev>, c: usize, _i: u32) -> Ps {
        // A step may take no time (a mask when `msix_mask` is 0): go on to the next.
        loop {
            if let Some(running) = m.parts.get().cpus[c].running {
                // A handler that loops (nvme_irq) runs on first.
                let more = m.continue_runs(s, c, &[running]);
                if more > 0 {
                    return more;
                }
                m.parts.get().cpus[c].running = None;
                m.end_run(s, c, running);
            }
            if let Some(next) = m.parts.get().cpus[c].todo.pop_front() {
                match run_one(m, s, c, next) {
                    0 => continue,
                    len => return len,
                }
            }
            let me = m.parts.get();
            let loops = me.loops;
            let pid = &mut me.cpus[c];
            if pid.last {
                if !pid.found_any {
                    me.empty += 1;
                }
                return 0;
            }
            // `while (++i < MAX_POSTED_MSI_COALESCING_LOOP) if (!handle_pending_pir()) break;`
            if pid.found && pid.passes + 1 < loops {
                pid.passes += 1;
            } else {
                // pi_clear_on(), then one last pass for what raced with it.
                pid.on = false;
                pid.last = true;
            }
            match pass(m, c) {
                0 => continue,
                len => return len,
            }
        }
    }

    fn audit<P: Has<Self>>(m: &mut Machine<P>) {
        m.audit.events_taken = m.parts.get_ref().cpus.iter().flat_map(|p| &p.todo).map(|t| t.3 as u64).sum();
    }

    fn reset<P: Has<Self>>(m: &mut Machine<P>, _now: Ps) {
        let me = m.parts.get();
        (me.msis, me.notifications, me.handlers, me.masked, me.passes, me.empty) = (0, 0, 0, 0, 0, 0);
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
        // Under GSIM a pass may find its vectors disabled and mask them, their
        // handlers left to GSIM's timer: handlers alone would read as empty passes.
        r.metric("posted_msi.masked_per_notification", per(me.masked));
        r.metric("posted_msi.passes_per_notification", per(me.passes));
        r.metric("posted_msi.empty_notifications", me.empty as f64);
        if me.enabled && me.posted_sources == 0 {
            r.warn("posted_msi: no host device MSI to post (polled queues have none; a guest's interrupts exit or are posted to its vCPU)");
        }
    }
}

/// One `handle_pending_pir()` begins: it takes the PIR (an `xchg` of each
/// word, so what comes later waits for the next pass) and scans it; returns
/// the scan's length. The handlers of the vectors it took run after it, one
/// by one, in vector order (`handler_continue`).
fn pass<P: Has<PostedMsi>>(m: &mut Machine<P>, c: usize) -> Ps {
    m.cpus[c].demux = None;
    let me = m.parts.get();
    me.passes += 1;
    let mut pir = std::mem::take(&mut me.cpus[c].pir);
    let mut todo = std::mem::take(&mut me.cpus[c].todo);
    // Only the IOMMU's posting takes the line away: a pass that finds nothing hits in the cache.
    let len = if pir.is_empty() { me.pir_hit } else { me.pir_scan };
    // A pass that found bits handled something (`handled = true`), whatever
    // the handlers then do with a disabled vector.
    me.cpus[c].found = !pir.is_empty();
    me.cpus[c].found_any |= !pir.is_empty();
    // `for_each_set_bit` over the vectors: lowest first (our vectors are numbered as the sources).
    pir.sort_unstable();
    for &i in &pir {
        let src = &mut m.srcs[i as usize];
        src.pending = false;
        todo.push_back((i, src.raised, src.flow, std::mem::take(&mut src.events)));
    }
    pir.clear();
    let me = m.parts.get();
    me.cpus[c].pir = pir;
    me.cpus[c].todo = todo;
    len
}

/// `call_irq_handler` for one vector the pass took: `handle_edge_irq`
/// (`per_vector`) runs its handler, or masks it if it was disabled meanwhile
/// (GSIM, from an earlier handler of the same pass), as a remapped vector's
/// CPU does (`Work::MaskAck`).
fn run_one<P: Has<PostedMsi>>(m: &mut Machine<P>, s: &mut Scheduler<Ev>, c: usize, (i, raised, flow, events): (u32, Ps, u64, u32)) -> Ps {
    let flow_handler = m.parts.get_ref().per_vector;
    if m.srcs[i as usize].disabled {
        // Its write is delivered when the re-enable runs or re-sends it.
        m.srcs[i as usize].events += events;
        // `mask_irq` returns at once on a vector already masked (a message that
        // was on its way when an earlier pass masked it): no write, no read.
        let masked = m.srcs[i as usize].masked;
        m.mask_disabled(i);
        m.parts.get().masked += 1;
        return flow_handler + if masked { 0 } else { m.c.msix_mask };
    }
    m.note_delivery(flow, events);
    if m.tracer.on() {
        let n = m.parts.get_ref().notify_src[c];
        m.cpus[c].demux = Some((n, i, flow));
    }
    m.parts.get().handlers += 1;
    m.parts.get().cpus[c].running = Some(i);
    flow_handler + m.handler_start(s, c, i, Level::Host, raised)
}
