//! An interrupt source: a device queue's MSI-X vector, an SGI or an SDEI
//! event. Arrivals are Poisson or periodic (a timer tick), or replayed; the
//! pending state (the LPI pending bit) lives here, beside the source, because
//! the interrupt controller pends per interrupt ID, not per write.

use crate::engine::rng::{exp_sample, Rng};
use crate::engine::time::{s_to_ps, Ps, NEVER};
use crate::engine::trace::TrackId;
use crate::platform::mask::Prio;
use rand::Rng as _;

/// The owner of a source or NAPI context that no component drives (a plain
/// scenario `[[source]]`).
pub const NO_OWNER: u8 = u8::MAX;

/// `Source::posted_to` of a source that is not posted to a guest.
pub const NOT_POSTED: u32 = u32::MAX;
/// `Source::vm` of a host interrupt.
pub const NO_VM: u32 = u32::MAX;

/// The fields are in the order the hot path touches them, and the layout is
/// fixed (`repr(C)`, 64-byte aligned) so that they stay there: an arrival
/// (`fire` → `send_msi` → `arrive` → `pend`) reads the first cache line, the
/// handler and `irq_exit` the second, and everything else lives after them
/// (a test checks that the two lines hold what they must). With 65,536
/// sources the array is 20 MB, and the lines a plain interrupt touches are
/// what has to stay in cache: two of five, 8 MB (issue 18). Add a field at
/// the end unless the common path reads it.
#[repr(C, align(64))]
pub struct Source {
    // Line 1: the next arrival and the pending bit.
    /// The arrival stream of a scenario source (`Machine::new` seeds it from
    /// the run's seed and the source's name). Other sources draw nothing.
    pub rng: Rng,
    /// Mean gap between arrivals in seconds (`f64::INFINITY` for a silent source).
    pub mean_gap_s: f64,
    pub stop: Ps,
    /// Physical pending bit's first raise and its flow id (see `pending`).
    pub raised: Ps,
    pub flow: u64,

    // Line 2: the handler, and what every arrival and handler reads.
    pub handler: Ps,
    /// Exception entry and exit around the handler: the IRQ vector's, or SDEI
    /// firmware dispatch and `SDEI_EVENT_COMPLETE` for an SDEI event.
    pub entry: Ps,
    pub exit: Ps,
    /// Softirq work its handler raises (`raise_softirq`), run at `irq_exit`.
    pub softirq: Ps,
    /// The pCPU whose interrupt controller receives the physical interrupt.
    pub cpu: u32,
    /// How many writes (completions) the pending bit stands for.
    pub events: u32,
    /// Index of the `[[source]]` table (or component group) this instance
    /// came from; its handled interrupts are counted per group
    /// (`Machine::src_handled`), not here, to keep this line to 64 bytes.
    pub group: u32,
    /// Posted to the guest (VT-d posted interrupts): the remapping unit makes it
    /// pending for the vCPU on this pCPU, with no host handler and no exit.
    /// `NOT_POSTED` when it is not.
    pub posted_to: u32,
    /// Assigned to this VM (its index; `NO_VM` for the host's own): the
    /// interrupt goes through the hypervisor.
    pub vm: u32,
    pub prio: Prio,
    /// The component that posts this vector's messages for the host (Intel
    /// posted MSI: the IRTE posts into a per-CPU descriptor and the CPU gets one
    /// notification), `NO_OWNER` for delivery through the local APIC.
    pub poster: u8,
    /// The component that created and drives this source (`NO_OWNER` for a
    /// scenario `[[source]]`), and what the source is in that component's tables.
    pub owner: u8,
    pub periodic: bool,
    /// Device side, the MSI-X table entry's mask bit: while set, the device
    /// holds its message in the Pending Bit Array (`pba`) instead of writing it.
    pub masked: bool,
    /// OS side: GSIM has disabled the interrupt (lazily: the next one that comes
    /// is masked at the device and marked pending, `IRQS_PENDING`).
    pub disabled: bool,
    pub sw_pending: bool,
    /// The physical pending bit.
    pub pending: bool,
    /// Anything beyond a plain handler: an SDEI event, or a source a component
    /// owns (set once at build; keeps the common handler path to one test).
    pub special: bool,
    /// Recorded arrival times are replayed (`replay` holds them).
    pub replayed: bool,
    /// GSIM may moderate this vector.
    pub gsim: bool,
    /// An SDEI event: it stays pending through firmware dispatch, so signals
    /// that come before its handler runs merge into one run (edge-triggered).
    pub sdei: bool,

    // The rest: what only a component, a masked vector, the DMA path, a VM,
    // a replay or the trace reads.
    /// The DMA path (a socket's remapping unit, `Platform::path`) the device's writes cross.
    pub path: u32,
    /// The device's PCIe link (`Machine::add_link`), whose posted writes keep their order.
    pub link: u32,
    /// A message held while `masked`, written at unmask.
    pub pba: bool,
    /// A device's MSI or MSI-X vector, written through the fabric (not an NMI,
    /// an IPI or a local timer): what the remapping unit can post.
    pub msi: bool,
    /// Its owner's handler may run on (`handler_continue`): a handler that loops.
    pub continues: bool,
    /// Recorded arrival times to replay instead (`irqlab replay`), and the next one's index.
    pub replay: Option<(Vec<Ps>, usize)>,
    /// Writes still crossing the fabric: when each was raised, and its flow id.
    pub in_fabric: std::collections::VecDeque<(Ps, u64)>,
    /// Fixed delay of a signal that does not cross the fabric (SGI, SDEI).
    pub latency: Ps,
    pub owner_arg: u32,
    /// Writes acknowledged by the hypervisor and not yet injected (VM sources).
    pub inflight: u32,
    /// The same for the virtual interrupt injected into the guest.
    pub vpending: bool,
    pub vraised: Ps,
    /// When the device wrote the message the running handler stands for
    /// (kept for owned sources only, whose owner may pass it on: a remapped
    /// VF's host handler posts the guest's interrupt with it). `raised` may
    /// already hold a later write's by then.
    pub handler_origin: Ps,
    pub vflow: u64,
    pub vevents: u32,
    pub track: TrackId,
    /// The source's name, or empty for instance `instance` of a `[[source]]`
    /// with `count` > 1, named "GROUP.INSTANCE" only when a trace asks
    /// (`Machine::source_name`: 65,536 names took a quarter of a 2,048-CPU
    /// run's setup).
    pub name: String,
    pub instance: u32,
    /// The handler's slice name in the trace when it is not "NAME handler"
    /// (built only when a trace asks: most sources never need it).
    pub handler_name: Option<String>,
}

impl Source {
    /// When the next arrival after one at `now` is, or `NEVER`.
    #[inline]
    pub fn next_at(&mut self, now: Ps) -> Ps {
        if self.replayed {
            let (times, i) = self.replay.as_mut().expect("a replayed source has its times");
            *i += 1;
            return times.get(*i).copied().unwrap_or(NEVER);
        }
        match self.next_gap() {
            NEVER => NEVER,
            g => now.saturating_add(g),
        }
    }

    /// Replays `times` instead of drawing arrivals.
    pub fn set_replay(&mut self, times: Vec<Ps>) {
        self.replay = Some((times, 0));
        self.replayed = true;
    }

    /// The first arrival.
    pub fn first_at(&mut self) -> Ps {
        if let Some((times, i)) = &mut self.replay {
            *i = 0;
            return times.first().copied().unwrap_or(NEVER);
        }
        self.first_gap()
    }

    /// A source with no arrivals of its own until a scenario gives it a rate or a
    /// replay; a model may raise it (a cross-call's SGI, a device queue's vector).
    #[allow(clippy::too_many_arguments)]
    pub fn new(name: String, group: u32, cpu: u32, handler: Ps, prio: Prio, entry: Ps, exit: Ps, latency: Ps) -> Source {
        Source {
            // Not seeded from the name: only a scenario source draws, and the
            // machine gives it its stream (hashing 65,536 names here cost 2 ms).
            rng: rand::SeedableRng::seed_from_u64(0),
            handler_name: None,
            name,
            instance: 0,
            group,
            mean_gap_s: f64::INFINITY,
            periodic: false,
            replay: None,
            stop: NEVER,
            cpu,
            vm: NO_VM,
            handler,
            softirq: 0,
            prio,
            entry,
            exit,
            latency,
            owner: NO_OWNER,
            owner_arg: 0,
            sdei: false,
            masked: false,
            pba: false,
            disabled: false,
            sw_pending: false,
            gsim: false,
            path: 0,
            link: 0,
            posted_to: NOT_POSTED,
            replayed: false,
            poster: NO_OWNER,
            msi: false,
            continues: false,
            special: true,
            pending: false,
            raised: 0,
            flow: 0,
            events: 0,
            in_fabric: Default::default(),
            inflight: 0,
            vpending: false,
            vraised: 0,
            handler_origin: 0,
            vflow: 0,
            vevents: 0,
            track: TrackId::default(),
        }
    }

    /// Time to the next arrival, or `NEVER`.
    #[inline]
    pub fn next_gap(&mut self) -> Ps {
        if !self.mean_gap_s.is_finite() {
            return NEVER;
        }
        if self.periodic {
            s_to_ps(self.mean_gap_s)
        } else {
            s_to_ps(exp_sample(&mut self.rng, self.mean_gap_s))
        }
    }

    /// The first arrival: periodic sources start at a random phase so that many
    /// ticks do not all line up at t = 0.
    pub fn first_gap(&mut self) -> Ps {
        if self.periodic && self.mean_gap_s.is_finite() {
            s_to_ps(self.rng.gen::<f64>() * self.mean_gap_s)
        } else {
            self.next_gap()
        }
    }
}
#[cfg(test)]
mod tests {
    /// What a plain interrupt reads (`fire`, `send_msi` without a DMA path,
    /// `arrive`, `pend`, `take_physical`, `handler_start`, `irq_exit`) lies in
    /// the first two cache lines; a field added there by mistake fails here.
    #[test]
    fn the_common_path_reads_two_cache_lines() {
        use super::Source;
        let hot = field_ends!(Source;
            rng, mean_gap_s, stop, raised, flow, handler, entry, exit, softirq, cpu, events, group, posted_to, vm, prio, poster, owner,
            periodic, masked, disabled, sw_pending, pending, special, replayed, gsim, sdei
        );
        for (name, end) in hot {
            assert!(end <= 128, "{name} ends at byte {end}, past the two hot lines");
        }
        assert_eq!(std::mem::align_of::<Source>(), 64);
    }

    /// Instances of a `[[source]]` with `count` > 1 carry no name of their own:
    /// they are named "NAME.i" when asked, and draw from the stream that name
    /// always seeded, so results and traces keep their bytes.
    #[test]
    fn instances_are_named_and_seeded_as_before() {
        use crate::components::Components;
        use crate::engine::rng::stream_of;
        use crate::platform::machine::Machine;
        let sc = crate::scenario::load(
            "name = \"n\"\nduration = \"1ms\"\n[platform]\ncpus = 2\n[[source]]\nname = \"dev\"\ncount = 12\nrate = \"1k/s\"\nhandler = \"1us\"\ncpus = [0, 1]\n[[source]]\nname = \"solo\"\nrate = \"1k/s\"\nhandler = \"1us\"\n",
            "n.toml",
            &[],
        )
        .unwrap();
        let m: Machine<Components> = Machine::new(&sc, 7, crate::engine::trace::Tracer::disabled());
        assert_eq!(m.source_name(11), "dev.11");
        assert_eq!(m.source_name(12), "solo");
        let mut want = stream_of(7, &["source/dev.11"]);
        let mut got = m.srcs[11].rng.clone();
        assert_eq!(rand::RngCore::next_u64(&mut got), rand::RngCore::next_u64(&mut want));
    }
}
