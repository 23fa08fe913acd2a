//! The request pass of `vcpu_enter_guest()`: each pending request serviced
//! in the configured order (`kvm_check_request`), what servicing one raises,
//! and the final check (`kvm_vcpu_exit_request`) that cancels the VM-enter
//! when a request is still pending.

use super::*;

impl KvmModel {
    /// A pass through the request list begins (after an exit, a cancel or `schedule()`).
    pub(super) fn start_service(&mut self, s: &mut Scheduler<KvmEv>, v: usize) {
        let vc = &mut self.vcpus[v];
        vc.pos = 0;
        vc.serving = None;
        vc.repeat = if std::mem::take(&mut vc.after_cancel) { vc.pass_served } else { 0 };
        vc.pass_served = 0;
        self.begin(s, v, Phase::Service, None);
        self.service_next(s, v);
    }

    /// `kvm_check_request` down the list from the current position; then event injection.
    pub(super) fn service_next(&mut self, s: &mut Scheduler<KvmEv>, v: usize) {
        let vc = &mut self.vcpus[v];
        while vc.pos < self.order.len() {
            let r = self.order[vc.pos];
            vc.pos += 1;
            if vc.pending & r.bit() != 0 {
                vc.pending &= !r.bit();
                vc.serving = Some(r);
                vc.pass_served |= r.bit();
                if vc.repeat & r.bit() != 0 {
                    vc.lost += self.c.service;
                }
                if self.tracer.on() {
                    self.tracer.instant(s.now(), vc.track, "hypervisor", r.name(), None);
                }
                s.after(self.c.service, KvmEv::Step(v as u32));
                return;
            }
        }
        // kvm_check_and_inject_events() when KVM_REQ_EVENT is pending.
        let mut len = 0;
        if vc.pending & Req::Event.bit() != 0 {
            vc.pending &= !Req::Event.bit();
            len = self.c.inject;
            vc.pass_served |= Req::Event.bit();
            if vc.repeat & Req::Event.bit() != 0 {
                vc.lost += len; // what vmx_cancel_injection returned, injected again
            }
            // A cancelled injection is re-injected first (`kvm_check_and_inject_events`:
            // `can_inject` is then false), and VMX injects one event per entry: an
            // NMI waits behind it.
            let mut nmi_now = false;
            let reinject = vc.injecting_irr != 0;
            if vc.nmi.pending > 0 && !vc.nmi.injected && s.now() >= vc.nmi_masked_until && !reinject {
                vc.nmi.pending -= 1;
                vc.nmi.injected = true;
                nmi_now = true;
                let o = vc.nmi_origin.pop_front().expect("an origin per NMI");
                vc.injecting.push(o);
            }
            // (The IRR is used only without APICv: see `Vcpu::irr`.) One vector
            // is injected per entry: the highest (`kvm_cpu_get_interrupt`), none
            // when an NMI goes in this pass or a cancelled injection is
            // re-injected (`can_inject` is false), nor while the guest's NMI
            // handler runs with IF clear (`interrupt_allowed` fails); the rest
            // wait (see the entry).
            let take = if nmi_now || reinject || s.now() < vc.nmi_masked_until { 0 } else { highest(vc.irr) };
            vc.irr &= !take;
            vc.injecting_irr |= take;
            if take & vector::PMI != 0 {
                vc.pmi_injecting.extend(vc.pmi_fixed.pop_front());
            }
        }
        vc.raised_in_window = false;
        vc.window_start = s.now();
        vc.irqs_off_from = s.now() + len;
        self.begin(s, v, Phase::IrqsOff, Some(len + self.c.irqs_off));
    }

    /// What servicing `r` does and raises.
    pub(super) fn serviced(&mut self, s: &mut Scheduler<KvmEv>, v: usize, r: Req) {
        let now = s.now();
        let masked = now < self.vcpus[v].nmi_masked_until;
        let raised = match r {
            Req::Nmi => {
                // process_nmi(): queued -> pending, within the limit; the newest excess is dropped.
                let vc = &mut self.vcpus[v];
                let dropped = vc.nmi.process(masked);
                for _ in 0..dropped {
                    vc.nmi_origin.pop_back();
                }
                self.audit.nmis_dropped += dropped as u64;
                self.audit.max_nmi_pending = self.audit.max_nmi_pending.max(vc.nmi.pending);
                if vc.nmi.pending > 0 {
                    Some(Req::Event)
                } else {
                    None
                }
            }
            Req::Pmi => {
                let vc = &mut self.vcpus[v];
                // One PMI stands for every overflow since the last: latency from the oldest.
                let t = vc.pmu_marks.front().copied().unwrap_or(now);
                vc.pmu_marks.clear();
                // kvm_apic_local_deliver(): a masked LVTPC delivers nothing; the
                // overflow's status bit is read by the handler already on its way.
                if self.lvtpc == Lvtpc::Nmi {
                    if vc.lvtpc_masked && (vc.lvtpc_wait || now < vc.nmi_masked_until) {
                        vc.pmis_masked += 1;
                        self.audit.pmis_masked += 1;
                        return;
                    }
                    vc.lvtpc_masked = true;
                    vc.lvtpc_wait = true;
                }
                match (self.lvtpc, self.apicv) {
                    // kvm_apic_local_deliver(LVTPC) in NMI mode -> kvm_inject_nmi(): NMIs are never posted.
                    (Lvtpc::Nmi, _) => {
                        vc.nmi.queued += 1;
                        self.audit.nmis_queued += 1;
                        vc.nmi_origin.push_back((t, true));
                    }
                    // A pending PMI already stands for the oldest overflow: a merged one adds no latency sample.
                    (Lvtpc::Fixed, false) => {
                        if self.raise_irr(v, vector::PMI) {
                            self.vcpus[v].pmi_fixed.push_back(t);
                        }
                    }
                    // A fixed vector through APICv: a PIR bit, taken at this entry.
                    (Lvtpc::Fixed, true) => {
                        if self.post(v, vector::PMI, now) {
                            self.vcpus[v].pmi_posted.push(t);
                        }
                    }
                }
                r.raises(self.lvtpc, self.apicv)
            }
            // kvm_pmu_handle_event() -> reprogram_counter(): an emulated increment
            // that overflowed raises PMI now (`kvm_pmu_incr_counter`).
            Req::Pmu => {
                let vc = &mut self.vcpus[v];
                if vc.pmu_emulated > 0 {
                    vc.pmu_emulated = 0;
                    vc.pmu_marks.push_back(now);
                    Some(requests::EMULATED_EDGE.1)
                } else {
                    None
                }
            }
            _ => r.raises(self.lvtpc, self.apicv),
        };
        if let Some(x) = raised {
            self.request(s, v, x, Cause::Req(r));
        }
    }

    /// `kvm_vcpu_exit_request()` with interrupts off: anything pending cancels the VM-enter.
    pub(super) fn final_check(&mut self, s: &mut Scheduler<KvmEv>, v: usize) {
        let vc = &mut self.vcpus[v];
        if vc.raised_in_window {
            self.audit.window_raises += 1;
        }
        if vc.pending == 0 {
            if vc.raised_in_window {
                self.audit.window_raises_entered += 1;
            }
            self.begin(s, v, Phase::Entry, Some(self.c.entry));
            return;
        }
        // Attribute the cancel to the first pending request in service order (EVENT last).
        let first = (0..NREQ).filter(|&i| vc.pending & (1 << i) != 0).min_by_key(|&i| self.pos_of[i]).expect("something is pending");
        let req = Req::from_bit_index(first);
        *self.attributed.entry((req, vc.cause[req as usize])).or_default() += 1;
        vc.cancels += 1;
        vc.lost += s.now() - vc.window_start;
        self.audit.cancels += 1;
        self.audit.attributed += 1;
        // vmx_cancel_injection(): the kernel keeps an NMI being injected as
        // injected and re-injects it first (`__vmx_complete_interrupts`); the
        // model puts it back to pending ahead of the rest and raises EVENT
        // again, which cancels and drops alike and may cost one injection more.
        for o in vc.injecting.drain(..).rev() {
            vc.nmi.pending += 1;
            vc.nmi_origin.push_front(o);
        }
        vc.nmi.injected = false;
        // The interrupt being injected stays queued for re-injection
        // (`__vmx_complete_interrupts` → `kvm_queue_interrupt`), ahead of the IRR.
        if vc.nmi.pending > 0 || vc.injecting_irr != 0 || vc.irr != 0 {
            vc.pending |= Req::Event.bit();
        }
        self.begin(s, v, Phase::Cancel, Some(self.c.cancel));
    }
}
