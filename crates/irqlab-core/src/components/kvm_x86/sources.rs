//! What raises exits, requests and interrupts on a vCPU: each source's
//! firing, and how an interrupt reaches the guest's APIC, through the IRR and
//! a request without APICv (`kvm_lapic_set_irr`, `vmx_deliver_interrupt`) or
//! posted to the PIR with it (`vmx_deliver_posted_interrupt`).

use super::*;

/// The guest's interrupt vectors the model tells apart: one IRR (or PIR) bit
/// each, a higher bit for a higher vector, which the APIC takes first
/// (`apic_find_highest_irr`). Device vectors lie from `FIRST_EXTERNAL_VECTOR`
/// (0x20) up, `LOCAL_TIMER_VECTOR` is 0xec and `RESCHEDULE_VECTOR` 0xfd
/// (arch/x86/include/asm/irq_vectors.h); the fixed-mode LVTPC's vector is not
/// one Linux programs (it uses NMI mode): below the timer is an assumption.
pub(super) mod vector {
    pub const DEVICE: u8 = 1 << 0;
    pub const PMI: u8 = 1 << 1;
    pub const TIMER: u8 = 1 << 2;
    pub const IPI: u8 = 1 << 3;
}

/// The vector an interrupt from `src` raises in the guest.
pub(super) fn vector_of(src: Src) -> u8 {
    match src {
        Src::Ipi => vector::IPI,
        Src::Timer => vector::TIMER,
        Src::Device => vector::DEVICE,
        Src::PmuOverflow | Src::PmuEmulated => vector::PMI,
        other => unreachable!("{other:?} raises no fixed vector"),
    }
}

/// The highest vector among `bits` (0 if none).
pub(super) fn highest(bits: u8) -> u8 {
    if bits == 0 {
        0
    } else {
        1 << (7 - bits.leading_zeros())
    }
}

impl KvmModel {
    /// An interrupt for vCPU `v` raised from outside its loop. With APICv it is
    /// posted (`vmx_deliver_posted_interrupt`): a running guest takes it without
    /// an exit; otherwise it waits in the PIR until VM entry, and the notification
    /// IPI, if interrupts are off, is taken at entry — no request, no cancel.
    /// Without APICv: `kvm_lapic_set_irr`, KVM_REQ_EVENT and a kick.
    ///
    /// A vector already pending merges: its IRR or PIR bit is set once. Without
    /// APICv the request and the kick come all the same (`vmx_deliver_interrupt`).
    pub(super) fn interrupt(&mut self, s: &mut Scheduler<KvmEv>, v: usize, src: Src, posted: bool) {
        let vec = vector_of(src);
        if !posted {
            self.raise_irr(v, vec);
            self.request(s, v, Req::Event, Cause::Src(src));
            return;
        }
        self.post(v, vec, s.now());
    }

    /// `kvm_lapic_set_irr`: `vec`'s IRR bit, or a merge into it.
    pub(super) fn raise_irr(&mut self, v: usize, vec: u8) -> bool {
        let vc = &mut self.vcpus[v];
        self.audit.irr_raised += 1;
        if vc.irr & vec != 0 {
            vc.coalesced += 1;
            self.audit.irr_coalesced += 1;
            return false;
        }
        vc.irr |= vec;
        true
    }

    /// `vmx_deliver_posted_interrupt`: a running guest takes the vector at
    /// once; otherwise it waits in the PIR, where a second one merges
    /// (`pi_test_and_set_pir`). Returns whether it is new in the PIR.
    pub(super) fn post(&mut self, v: usize, vec: u8, now: Ps) -> bool {
        let vc = &mut self.vcpus[v];
        vc.posted += 1;
        self.audit.posted += 1;
        match vc.phase {
            Phase::Guest => {
                vc.virqs += 1;
                self.audit.posted_delivered += 1;
                false
            }
            _ if vc.pir & vec != 0 => {
                vc.coalesced += 1;
                self.audit.posted_coalesced += 1;
                false
            }
            _ => {
                vc.pir |= vec;
                if vc.irqs_off(now) {
                    self.audit.posted_in_window += 1;
                }
                true
            }
        }
    }

    pub(super) fn source(&mut self, s: &mut Scheduler<KvmEv>, v: usize, src: Src) {
        let now = s.now();
        if WALL_CLOCK.contains(&src) {
            let d = self.draw(v, src);
            if d != NEVER {
                s.at(now + d, KvmEv::Src(v as u32, src));
            }
        } else if let Some(i) = GUEST_TIME.iter().position(|&g| g == src) {
            self.vcpus[v].guest_timers[i] = None;
        }
        match src {
            // The host's PMI handler runs on the exit; perf's overflow callback
            // (`kvm_perf_overflow` → `__kvm_perf_overflow`) raises KVM_REQ_PMI, then KVM_REQ_PMU.
            Src::PmuOverflow => {
                // A Linux guest's NMI handler stops its counters while it runs
                // (`intel_pmu_handle_irq` → `__intel_pmu_disable_all`, every local
                // NMI runs it): nothing overflows until it IRETs; the count resumes there.
                let until = self.vcpus[v].nmi_masked_until;
                if self.lvtpc == Lvtpc::Nmi && now < until {
                    let d = (until - now).saturating_add(self.draw(v, src));
                    self.vcpus[v].guest_timers[0] = Some(s.timer_after(d, KvmEv::Src(v as u32, src)));
                    return;
                }
                self.vcpus[v].pmu_marks.push_back(now);
                self.request(s, v, Req::Pmi, Cause::Src(src));
                self.request(s, v, Req::Pmu, Cause::Src(src));
            }
            // An emulated instruction's exit counts an event; its overflow waits for PMU servicing.
            Src::PmuEmulated => {
                if self.vcpus[v].phase == Phase::Guest {
                    let extra = self.c.other;
                    self.exit(s, v, extra);
                }
                self.vcpus[v].pmu_emulated += 1;
                self.request(s, v, Req::Pmu, Cause::Src(src));
            }
            Src::Ipi => {
                // The sender exits on its x2APIC ICR write, handled in the fastpath
                // (`handle_fastpath_set_x2apic_icr_irqoff`); the target gets an interrupt.
                let vm = self.vcpus[v].vm;
                let n = self.vcpus_per_vm;
                if n > 1 {
                    let k = rand::Rng::gen_range(&mut self.vcpus[v].rng, 0..n - 1);
                    let local = (v as u32 % n + 1 + k) % n;
                    let t = (vm * n + local) as usize;
                    let posted = self.apicv;
                    self.interrupt(s, t, Src::Ipi, posted);
                }
                if self.vcpus[v].phase == Phase::Guest {
                    self.fastpath_exit(s, v);
                }
            }
            Src::Device => {
                let posted = self.apicv;
                self.interrupt(s, v, src, posted);
            }
            // On the VMX preemption timer (not posted: `kvm_can_use_hv_timer`, with
            // or without APICv) the expiry is the vCPU's own exit, or is found at its
            // next entry (the timer counts only in guest mode). KVM handles it in
            // root mode on the vCPU itself (`handle_fastpath_preemption_timer` →
            // `apic_timer_expired(apic, false)`): with APICv it injects at once;
            // without, the timer is pending with KVM_REQ_UNBLOCK and `vcpu_run`
            // injects it (KVM_REQ_EVENT) before the next pass. A request the vCPU
            // raises itself, before its pass, never cancels an entry.
            Src::Timer if !self.post_timer && self.hv_timer => {
                if self.vcpus[v].phase == Phase::Guest {
                    self.fastpath_exit(s, v);
                    self.interrupt(s, v, src, self.apicv);
                } else if self.apicv {
                    self.interrupt(s, v, src, true);
                } else {
                    self.vcpus[v].hv_timer_due += 1;
                }
            }
            // Posted from the hrtimer callback itself, on a housekeeping CPU, only
            // while the vCPU is in guest mode (`kvm_use_posted_timer_interrupt`).
            Src::Timer if self.apicv && self.post_timer && self.vcpus[v].in_guest_mode(now) => self.interrupt(s, v, src, true),
            // The hrtimer otherwise (`apic_timer_expired`, lapic.c): the tick is
            // pending in `lapic_timer.pending` (an expiry while one is pending is
            // dropped), with KVM_REQ_UNBLOCK and a kick; `vcpu_run` injects it when
            // `vcpu_enter_guest` returns (`kvm_inject_pending_timer_irqs`, see `step`).
            // Not posted, the hrtimer is the vCPU thread's own (`start_sw_timer`,
            // `HRTIMER_MODE_ABS_HARD`) and fires on its pCPU: with interrupts off
            // there it waits for the VM-enter, which exits at once on it, and so
            // cancels nothing. (With nohz_full, which `post_timer` stands for, it
            // sits on a housekeeping CPU: `get_nohz_timer_target`.)
            Src::Timer => {
                let vc = &mut self.vcpus[v];
                if vc.timer_pending || vc.tick_held {
                    vc.coalesced += 1;
                    return;
                }
                if !self.post_timer && vc.irqs_off(now) {
                    vc.tick_held = true;
                    self.audit.ticks_held += 1;
                    return;
                }
                vc.timer_pending = true;
                self.request(s, v, Req::Unblock, Cause::Src(src));
            }
            Src::HostResched => self.request(s, v, Req::Resched, Cause::Src(src)),
            Src::Nmi => {
                self.vcpus[v].nmi.queued += 1;
                self.audit.nmis_queued += 1;
                self.vcpus[v].nmi_origin.push_back((now, false));
                self.request(s, v, Req::Nmi, Cause::Src(src));
            }
            Src::Smi => self.request(s, v, Req::Smi, Cause::Src(src)),
            Src::Other => {
                if self.vcpus[v].phase == Phase::Guest {
                    let extra = self.c.other;
                    self.exit(s, v, extra);
                }
            }
            Src::NmiWindow => {
                if self.vcpus[v].phase != Phase::Guest {
                    self.audit.nmi_windows_outside_guest += 1;
                }
                self.vcpus[v].window_armed = false;
                self.vcpus[v].window_timer = None;
                self.request(s, v, Req::Event, Cause::Src(src));
            }
            Src::Eoi => unreachable!("the EOI exit is taken at entry, not scheduled"),
        }
    }
}
