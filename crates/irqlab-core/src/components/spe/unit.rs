//! The profiling buffer as the unit and KVM see it: the window
//! PMBPTR..PMBLIMITR spans, what is pinned at stage 2, the unit's write
//! position between enables, and the faults and blackouts of writing into a
//! page that is not mapped.

use super::*;

impl Spe {
    /// perf's start, and its buffers, one per CPU, one after another (perf
    /// maps them from its main thread): allocated and zeroed, and in a guest
    /// each first touch a stage-2 fault (`perf stat` has no buffer).
    pub(super) fn startup_cost(&self) -> Ps {
        let per_page = self.c.alloc + if self.guest { self.c.map_fault } else { 0 };
        self.c.startup + if self.profiling { self.buffers * self.pages * per_page } else { 0 }
    }

    pub(super) fn reclaim_gap(&mut self) -> Ps {
        (exp_sample(self.rng.as_mut().expect("built"), 1.0 / self.reclaim_rate) * 1e12) as Ps
    }

    pub(super) fn page_of(&self, wp: u64) -> usize {
        ((wp / self.page) % self.pages) as usize
    }

    /// The pages PMBPTR..PMBLIMITR spans, all KVM sees of the buffer: half of
    /// it. perf's SPE driver limits a session to the AUX watermark, which
    /// defaults to half the buffer (`rb_alloc_aux`, `__arm_spe_pmu_next_off`),
    /// or in snapshot mode to half the buffer (`arm_spe_pmu_next_snapshot_off`).
    pub(super) fn window(&self) -> u64 {
        (self.pages / 2).max(1)
    }

    /// Which half of the buffer page `page` is in.
    pub(super) fn half_of(&self, page: usize) -> usize {
        (page as u64 / self.window()).min(1) as usize
    }

    /// The pages PMBPTR..PMBLIMITR spans now: from the write pointer's page to
    /// the end of its half (`arm_spe_perf_aux_output_begin` writes PMBPTR at
    /// the head), all of the half at its start.
    pub(super) fn programmed(&self) -> std::ops::Range<usize> {
        let head = self.page_of(self.wp);
        let half = self.half_pages(self.half_of(head));
        head.max(half.start)..half.end
    }

    /// The pages of half `h`.
    pub(super) fn half_pages(&self, h: usize) -> std::ops::Range<usize> {
        let w = self.window() as usize;
        if h == 0 {
            0..w.min(self.pages as usize)
        } else {
            w..self.pages as usize
        }
    }

    /// Whether page `k` is pinned (host reclaim cannot take it).
    pub(super) fn is_pinned(&self, k: usize) -> bool {
        self.pinned_pages > 0 && self.half_of(k) == self.pinned_half && k >= self.pinned_from
    }

    pub(super) fn set_pinned(&mut self, now: Ps, pages: u64) {
        self.pinned_pages = pages;
        self.stats.pinned.set(now, pages as f64);
    }

    /// One pin, unpin or walk done in one go: the longest such stretch has no quiescent state.
    pub(super) fn stretch(&mut self, t: Ps) {
        self.stats.longest = self.stats.longest.max(t);
    }

    pub(super) fn unpin_all(&mut self, now: Ps, t: Ps) {
        if self.pinned_pages > 0 {
            self.stats.unpin_ops += 1;
            self.stretch(t);
            self.stats.op_time += t;
            self.stats.cycle_time += t;
            self.set_pinned(now, 0);
        }
    }

    /// The vCPU stops (PMBIRQ taken) or perf's disable ends the event: the
    /// command no longer runs unsampled.
    pub(super) fn close_blackout(&mut self, now: Ps) {
        if let Some(t0) = self.blackout_since.take() {
            self.stats.lost += now - t0;
        }
    }

    /// Pins the window the profiling unit writes now, PMBPTR..PMBLIMITR (maps it at stage 2).
    pub(super) fn pin_window(&mut self, now: Ps) -> Ps {
        let range = self.programmed();
        let (h, from) = (self.half_of(range.start), range.start);
        let n = range.len() as u64;
        let t = n * self.c.pin;
        self.stats.pin_ops += 1;
        self.stretch(t);
        self.stats.op_time += t;
        self.stats.cycle_time += t;
        self.mapped[range].iter_mut().for_each(|x| *x = true);
        self.pinned_gen = self.gen;
        self.pinned_half = h;
        self.pinned_from = from;
        self.set_pinned(now, n);
        t
    }

    /// KVM's work at a trapped enable, by policy.
    pub(super) fn on_enable(&mut self, now: Ps) -> Ps {
        self.enables += 1;
        if self.remap_every > 0 && self.enables > 1 && (self.enables - 1).is_multiple_of(self.remap_every) {
            self.gen += 1;
        }
        // KVM walks and pins what perf programmed, not the whole half: it
        // shrinks as the head advances (a review: up to 2x the work).
        let window = self.programmed();
        let walk = window.len() as u64 * self.c.walk;
        let half = self.half_of(window.start);
        match self.policy.expect("built") {
            Policy::NoPin => 0,
            Policy::PinPerEnable | Policy::Cap => {
                self.stretch(walk);
                self.stats.cycle_time += walk;
                walk + self.pin_window(now)
            }
            Policy::KeepPinned | Policy::KeepPinnedTimer => {
                self.stretch(walk);
                if self.pinned_pages > 0 && self.pinned_gen == self.gen && self.pinned_half == half && window.start >= self.pinned_from {
                    return walk;
                }
                self.stats.cycle_time += walk;
                let mut t = walk;
                if self.pinned_pages > 0 {
                    let u = self.pinned_pages * self.c.unpin;
                    self.unpin_all(now, u);
                    t += u;
                }
                t + self.pin_window(now)
            }
        }
    }

    /// KVM's work at a trapped disable.
    pub(super) fn on_disable(&mut self, now: Ps) -> Ps {
        self.last_disable = now;
        match self.policy.expect("built") {
            Policy::PinPerEnable | Policy::Cap => {
                let t = self.pinned_pages * self.c.unpin;
                self.unpin_all(now, t);
                t
            }
            _ => 0,
        }
    }

    /// The unit writes on from `wp`: to the end of its page, or, if the page
    /// is not mapped at stage 2, to its next record, which faults.
    pub(super) fn schedule_write<P: Has<Spe>>(&mut self, s: &mut Scheduler<Ev>) {
        if self.record_rate <= 0.0 || self.halted || self.writing.is_some() {
            return;
        }
        let now = s.now();
        let pos = self.wp;
        self.write_start = now;
        let (to, ev) = if self.guest && !self.mapped[self.page_of(pos)] {
            // The record in progress ends at the next record boundary, where it is written.
            ((pos / self.record + 1) * self.record, SpeEv::RecordFault)
        } else {
            (pos + self.page - pos % self.page, SpeEv::PageCross)
        };
        let d = ((to - pos) as f64 / self.record_rate * 1e12).ceil() as Ps;
        self.writing = Some(s.timer_after(d.max(1), P::ev(ev, 0)));
    }

    /// Where the write pointer stands now: `wp` while the unit is stopped; while
    /// it writes, what it wrote since `write_start`, short of its page's end
    /// (the page crossing moves it on).
    pub(super) fn position(&self, now: Ps) -> u64 {
        if self.writing.is_none() {
            return self.wp;
        }
        let moved = ((now - self.write_start) as f64 * 1e-12 * self.record_rate) as u64;
        let end = self.wp + self.page - self.wp % self.page;
        (self.wp + moved).min(end - 1)
    }

    /// A write into an unmapped page: the unit stops, PMBIRQ reaches KVM.
    pub(super) fn fault<P: Has<Spe>>(&mut self, now: Ps, s: &mut Scheduler<Ev>) {
        let page = self.page_of(self.wp);
        self.s2_fault = Some(page);
        self.stats.blackouts += 1;
        self.stats.unmapped_writes += 1;
        self.stats.faults_per_page[page] += 1;
        self.halt(now);
        s.after(self.c.pmbirq, P::ev(SpeEv::Pmbirq, 0));
    }

    /// The unit stops writing until its PMBIRQ is handled.
    pub(super) fn halt(&mut self, now: Ps) {
        self.halted = true;
        self.halted_in = self.enable_seq;
        self.blackout_since = Some(now);
    }

    pub(super) fn stop_writes(&mut self, s: &mut Scheduler<Ev>) {
        if let Some(t) = self.writing.take() {
            s.cancel(t);
        }
    }
}
