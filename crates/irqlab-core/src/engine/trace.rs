//! A Perfetto trace writer (protobuf `Trace` of `TracePacket`s with
//! `TrackDescriptor` and `TrackEvent`, as defined in perfetto's
//! `protos/perfetto/trace/`). Only the fields we use are declared, with their
//! upstream field numbers, so no protoc is needed at build time.
//!
//! Recording is bounded by a time window and an event cap; slices that began
//! inside the bounds are always ended, so the trace stays balanced. A slice
//! still open when the window starts (a CPU wedged with interrupts masked since
//! boot, a task running through it) begins there, so the window shows what each
//! CPU was doing; a trace cut by the cap says so in the file, on the first track.

use super::time::{Ps, PS_PER_NS};
use prost::Message;
use std::collections::{HashMap, HashSet};
use std::io::Write;
use std::path::Path;

/// The file's message: the tracer writes its field 1 packet by packet
/// (`Tracer::append`); the tests decode it whole.
#[cfg_attr(not(test), allow(dead_code))]
#[derive(Clone, PartialEq, Message)]
struct Trace {
    #[prost(message, repeated, tag = "1")]
    packet: Vec<TracePacket>,
}

#[derive(Clone, PartialEq, Message)]
struct TracePacket {
    #[prost(uint64, optional, tag = "8")]
    timestamp: Option<u64>,
    #[prost(uint32, optional, tag = "10")]
    trusted_packet_sequence_id: Option<u32>,
    #[prost(message, optional, tag = "11")]
    track_event: Option<TrackEvent>,
    #[prost(message, optional, tag = "60")]
    track_descriptor: Option<TrackDescriptor>,
}

#[derive(Clone, PartialEq, Message)]
struct TrackDescriptor {
    #[prost(uint64, optional, tag = "1")]
    uuid: Option<u64>,
    #[prost(string, optional, tag = "2")]
    name: Option<String>,
    #[prost(uint64, optional, tag = "5")]
    parent_uuid: Option<u64>,
    #[prost(message, optional, tag = "8")]
    counter: Option<CounterDescriptor>,
}

#[derive(Clone, PartialEq, Message)]
struct CounterDescriptor {
    #[prost(string, optional, tag = "6")]
    unit_name: Option<String>,
}

#[derive(Clone, PartialEq, Message)]
struct TrackEvent {
    #[prost(int32, optional, tag = "9")]
    r#type: Option<i32>,
    #[prost(uint64, optional, tag = "11")]
    track_uuid: Option<u64>,
    #[prost(string, repeated, tag = "22")]
    categories: Vec<String>,
    #[prost(string, optional, tag = "23")]
    name: Option<String>,
    #[prost(double, optional, tag = "44")]
    double_counter_value: Option<f64>,
    #[prost(fixed64, repeated, tag = "47")]
    flow_ids: Vec<u64>,
    #[prost(fixed64, repeated, tag = "48")]
    terminating_flow_ids: Vec<u64>,
}

const SLICE_BEGIN: i32 = 1;
const SLICE_END: i32 = 2;
const INSTANT: i32 = 3;
const COUNTER: i32 = 4;
const SEQ: u32 = 1;

/// Where and how much to record.
#[derive(Clone, Copy, Debug)]
pub struct TraceBounds {
    pub start: Ps,
    pub end: Ps,
    pub max_events: usize,
}

#[derive(Clone, Copy, Debug, Default, PartialEq, Eq)]
pub struct TrackId(u32);

struct TrackState {
    uuid: u64,
    open: Vec<Open>,
    last_counter: Option<f64>,
}

/// An open slice of a track.
struct Open {
    /// Its begin was recorded (it began inside the bounds, or was open when the window started).
    rec: bool,
    category: &'static str,
    name: String,
}

pub struct Tracer {
    enabled: bool,
    bounds: TraceBounds,
    events: usize,
    /// The trace so far, encoded: each packet is appended as Trace's repeated
    /// field 1 as it is made, so memory is the file's size, not ten times it
    /// (as holding the packets as structs was).
    encoded: Vec<u8>,
    /// Streaming: the file the encoded packets go to once `FLUSH_AT` bytes
    /// have gathered, so memory stays bounded whatever `max_events` is.
    sink: Option<std::io::BufWriter<std::fs::File>>,
    /// The first write error (the trace is then incomplete and must not be kept).
    pub error: Option<String>,
    tracks: Vec<TrackState>,
    /// The first event in the window refused for the cap.
    capped_at: Option<Ps>,
    /// An event at or after `bounds.start` has been admitted: the slices open
    /// then have been begun at `bounds.start` (`open_window`).
    window_open: bool,
    /// Flows whose start was recorded and that no slice has ended yet: a
    /// slice ends only those, so a window or the cap that cut a flow's start
    /// (an MSI before `trace.start`) leaves no end without a start, which
    /// trace_processor counts as an error (`flow_end_without_start`).
    open_flows: HashSet<u64>,
    /// Flows merged into another (a write that found its interrupt already
    /// pending): the slice that ends the one it merged into ends them too.
    merged: HashMap<u64, Vec<u64>>,
}

/// Encoded bytes held before a streaming tracer writes them out.
const FLUSH_AT: usize = 1 << 20;

impl Tracer {
    pub fn disabled() -> Self {
        Self {
            enabled: false,
            bounds: TraceBounds { start: 0, end: 0, max_events: 0 },
            events: 0,
            encoded: Vec::new(),
            sink: None,
            error: None,
            tracks: Vec::new(),
            capped_at: None,
            window_open: false,
            open_flows: HashSet::new(),
            merged: HashMap::new(),
        }
    }

    pub fn new(bounds: TraceBounds) -> Self {
        Self { enabled: true, bounds, ..Self::disabled() }
    }

    /// A tracer that streams its packets into the file at `path` (created or
    /// truncated). If it cannot be opened, the tracer records nothing and says why in `error`.
    pub fn to_file(bounds: TraceBounds, path: &Path) -> Self {
        match std::fs::File::create(path) {
            Ok(f) => Self { sink: Some(std::io::BufWriter::new(f)), ..Self::new(bounds) },
            Err(e) => Self { error: Some(format!("{}: cannot write: {e}", path.display())), ..Self::disabled() },
        }
    }

    #[inline(always)]
    pub fn on(&self) -> bool {
        self.enabled
    }

    fn new_track(&mut self, name: &str, parent: Option<TrackId>, counter_unit: Option<&str>) -> TrackId {
        let uuid = 0x1000 + self.tracks.len() as u64;
        let parent_uuid = parent.map(|p| self.tracks[p.0 as usize].uuid);
        if self.enabled {
            self.append(TracePacket {
                trusted_packet_sequence_id: Some(SEQ),
                track_descriptor: Some(TrackDescriptor {
                    uuid: Some(uuid),
                    name: Some(name.to_string()),
                    parent_uuid,
                    counter: counter_unit.map(|u| CounterDescriptor { unit_name: Some(u.to_string()) }),
                }),
                ..Default::default()
            });
        }
        self.tracks.push(TrackState { uuid, open: Vec::new(), last_counter: None });
        TrackId((self.tracks.len() - 1) as u32)
    }

    /// A track for slices (a CPU, a vCPU, a device).
    pub fn track(&mut self, name: &str, parent: Option<TrackId>) -> TrackId {
        self.new_track(name, parent, None)
    }

    /// A track for a counter (a queue depth, a rate).
    pub fn counter_track(&mut self, name: &str, unit: &str) -> TrackId {
        self.new_track(name, None, Some(unit))
    }

    #[inline]
    fn admits(&mut self, t: Ps) -> bool {
        let inside = t >= self.bounds.start && t <= self.bounds.end;
        if inside && !self.window_open {
            self.open_window();
        }
        if inside && self.events >= self.bounds.max_events && self.capped_at.is_none() {
            self.capped_at = Some(t);
        }
        inside && self.events < self.bounds.max_events
    }

    /// The first event inside the window: every slice still open from before
    /// it begins at `bounds.start`, outermost first, track by track (a slice
    /// that ran through the window's start would otherwise never show: a CPU
    /// masked since boot read as idle; an audit). No flow ends there: the
    /// flows those slices end began before the window.
    #[cold]
    fn open_window(&mut self) {
        self.window_open = true;
        let start = self.bounds.start;
        for i in 0..self.tracks.len() {
            let uuid = self.tracks[i].uuid;
            for k in 0..self.tracks[i].open.len() {
                if self.tracks[i].open[k].rec {
                    continue;
                }
                if self.events >= self.bounds.max_events {
                    // Past the cap an inner slice must not begin without its outer one.
                    return;
                }
                let o = &mut self.tracks[i].open[k];
                o.rec = true;
                let ev = TrackEvent {
                    r#type: Some(SLICE_BEGIN),
                    track_uuid: Some(uuid),
                    categories: vec![o.category.to_string()],
                    name: Some(o.name.clone()),
                    ..Default::default()
                };
                self.emit(start, ev);
            }
        }
    }

    /// When the trace stopped recording because it reached `max_events` (the
    /// first event in the window it refused), if it did: the run says so.
    pub fn capped_at(&self) -> Option<Ps> {
        self.capped_at
    }

    fn emit(&mut self, t: Ps, ev: TrackEvent) {
        self.events += 1;
        self.append(TracePacket {
            timestamp: Some(t / PS_PER_NS),
            trusted_packet_sequence_id: Some(SEQ),
            track_event: Some(ev),
            ..Default::default()
        });
    }

    /// Opens a slice; `flow_end` terminates a flow begun by [`Tracer::instant`]
    /// (and the flows merged into it), if its start was recorded.
    pub fn begin(&mut self, t: Ps, track: TrackId, category: &'static str, name: &str, flow_end: Option<u64>) {
        if !self.enabled {
            return;
        }
        let rec = self.admits(t);
        let uuid = self.tracks[track.0 as usize].uuid;
        self.tracks[track.0 as usize].open.push(Open { rec, category, name: name.to_string() });
        let mut ends = Vec::new();
        if let Some(id) = flow_end {
            for f in std::iter::once(id).chain(self.merged.remove(&id).unwrap_or_default()) {
                if self.open_flows.remove(&f) {
                    ends.push(f);
                }
            }
        }
        if rec {
            self.emit(
                t,
                TrackEvent {
                    r#type: Some(SLICE_BEGIN),
                    track_uuid: Some(uuid),
                    categories: vec![category.to_string()],
                    name: Some(name.to_string()),
                    terminating_flow_ids: ends,
                    ..Default::default()
                },
            );
        }
    }

    /// Flow `flow` (a write) merged into flow `into` (the interrupt it found
    /// pending): the slice that ends `into` ends it too, so its arrow reaches
    /// the handler that served it instead of stopping nowhere.
    pub fn merge_flow(&mut self, into: u64, flow: u64) {
        if !self.enabled {
            return;
        }
        // With what had merged into `flow` (a write into a physical interrupt
        // that then merged into the pending virtual one, say).
        let mut moved: Vec<u64> = self.open_flows.contains(&flow).then_some(flow).into_iter().collect();
        moved.extend(self.merged.remove(&flow).unwrap_or_default());
        if !moved.is_empty() {
            self.merged.entry(into).or_default().extend(moved);
        }
    }

    /// The name of the innermost open slice of `track`, if its begin was
    /// recorded (one that began before the window or past the cap was not).
    pub fn recorded_open_name(&self, track: TrackId) -> Option<&str> {
        self.tracks.get(track.0 as usize)?.open.last().filter(|o| o.rec).map(|o| o.name.as_str())
    }

    /// Closes the innermost open slice of `track`.
    pub fn end(&mut self, t: Ps, track: TrackId) {
        if !self.enabled {
            return;
        }
        let st = &mut self.tracks[track.0 as usize];
        let uuid = st.uuid;
        if st.open.pop().is_some_and(|o| o.rec) {
            // Ends are recorded even past the cap, so every recorded slice closes.
            self.emit(t, TrackEvent { r#type: Some(SLICE_END), track_uuid: Some(uuid), ..Default::default() });
        }
    }

    /// A point event; `flow_start` begins a flow (an MSI write, say) that a later
    /// slice terminates.
    pub fn instant(&mut self, t: Ps, track: TrackId, category: &'static str, name: &str, flow_start: Option<u64>) {
        if !self.enabled || !self.admits(t) {
            return;
        }
        let uuid = self.tracks[track.0 as usize].uuid;
        self.open_flows.extend(flow_start);
        self.emit(
            t,
            TrackEvent {
                r#type: Some(INSTANT),
                track_uuid: Some(uuid),
                categories: vec![category.to_string()],
                name: Some(name.to_string()),
                flow_ids: flow_start.into_iter().collect(),
                ..Default::default()
            },
        );
    }

    pub fn counter(&mut self, t: Ps, track: TrackId, v: f64) {
        if !self.enabled || !self.admits(t) {
            return;
        }
        let st = &mut self.tracks[track.0 as usize];
        if st.last_counter == Some(v) {
            return;
        }
        st.last_counter = Some(v);
        let uuid = st.uuid;
        self.emit(t, TrackEvent { r#type: Some(COUNTER), track_uuid: Some(uuid), double_counter_value: Some(v), ..Default::default() });
    }

    /// Closes every open slice at `now` and encodes the trace: its bytes, or
    /// `None` if disabled or streamed to a file (then `Err` if that failed).
    pub fn finish(mut self, now: Ps) -> Result<Option<Vec<u8>>, String> {
        if let Some(e) = self.error.take() {
            return Err(e);
        }
        if !self.enabled {
            return Ok(None);
        }
        for i in 0..self.tracks.len() {
            while !self.tracks[i].open.is_empty() {
                self.end(now, TrackId(i as u32));
            }
        }
        if let (Some(t), Some(first)) = (self.capped_at, self.tracks.first()) {
            // Past the cap, so a reader of the file alone sees why it goes quiet.
            let uuid = first.uuid;
            let ev = TrackEvent {
                r#type: Some(INSTANT),
                track_uuid: Some(uuid),
                categories: vec!["irqlab".to_string()],
                name: Some(format!("trace stopped: trace.max_events ({}) reached", self.bounds.max_events)),
                ..Default::default()
            };
            self.emit(t, ev);
        }
        let Some(mut sink) = self.sink.take() else { return Ok(Some(std::mem::take(&mut self.encoded))) };
        let done = sink.write_all(&self.encoded).and_then(|_| sink.flush()).and_then(|_| sink.get_ref().sync_all());
        match (self.error.take(), done) {
            (Some(e), _) => Err(e),
            (None, Err(e)) => Err(format!("cannot write the trace: {e}")),
            (None, Ok(())) => Ok(None),
        }
    }

    /// Appends one packet as `Trace.packet` (field 1): concatenated, they are a `Trace`.
    fn append(&mut self, p: TracePacket) {
        prost::encoding::message::encode(1, &p, &mut self.encoded);
        if self.encoded.len() >= FLUSH_AT {
            self.spill();
        }
    }

    /// A streaming tracer writes what it holds; after a failure it stops recording.
    #[cold]
    fn spill(&mut self) {
        let Some(sink) = &mut self.sink else { return };
        if let Err(e) = sink.write_all(&self.encoded) {
            self.error = Some(format!("cannot write the trace: {e}"));
            self.sink = None;
            self.enabled = false;
        }
        self.encoded.clear();
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn decode(b: &[u8]) -> Trace {
        Trace::decode(b).unwrap()
    }

    #[test]
    fn slices_stay_balanced_past_the_cap() {
        let mut tr = Tracer::new(TraceBounds { start: 0, end: 1_000_000, max_events: 3 });
        let cpu = tr.track("cpu0", None);
        tr.begin(1000, cpu, "task", "a", None); // 1
        tr.begin(2000, cpu, "hardirq", "b", None); // 2
        tr.begin(3000, cpu, "softirq", "c", None); // 3
        tr.begin(4000, cpu, "softirq", "d", None); // over the cap: not recorded
        tr.end(5000, cpu);
        tr.end(6000, cpu);
        let t = decode(&tr.finish(7000).unwrap().unwrap());
        let kinds: Vec<i32> = t.packet.iter().filter_map(|p| p.track_event.as_ref()).map(|e| e.r#type.unwrap()).collect();
        // The last: the instant that says the cap stopped the trace.
        assert_eq!(kinds, vec![1, 1, 1, 2, 2, 2, 3]);
    }

    /// A slice that ended before the window is left out; one still open at
    /// its start begins there (with its category), under what begins inside.
    #[test]
    fn a_slice_open_at_the_window_start_begins_there_and_one_ended_before_is_left_out() {
        let mut tr = Tracer::new(TraceBounds { start: 10_000, end: 20_000, max_events: 100 });
        let cpu = tr.track("cpu0", None);
        let other = tr.track("cpu1", None);
        tr.begin(1_000, other, "hardirq", "over before", None);
        tr.end(2_000, other);
        tr.begin(5_000, cpu, "task", "early", None);
        tr.begin(6_000, cpu, "kernel", "irqs off", None);
        tr.instant(11_000, cpu, "msi", "q0", Some(7));
        tr.begin(12_000, cpu, "hardirq", "in", Some(7));
        tr.end(13_000, cpu);
        tr.end(25_000, cpu);
        tr.end(26_000, cpu);
        let t = decode(&tr.finish(30_000).unwrap().unwrap());
        let evs: Vec<(u64, i32, Option<&str>, Vec<String>)> = t
            .packet
            .iter()
            .filter_map(|p| Some((p.timestamp?, p.track_event.as_ref()?)))
            .map(|(ts, e)| (ts, e.r#type.unwrap(), e.name.as_deref(), e.categories.clone()))
            .collect();
        let cats = |c: &str| vec![c.to_string()];
        assert_eq!(
            evs,
            vec![
                (10, SLICE_BEGIN, Some("early"), cats("task")),
                (10, SLICE_BEGIN, Some("irqs off"), cats("kernel")),
                (11, INSTANT, Some("q0"), cats("msi")),
                (12, SLICE_BEGIN, Some("in"), cats("hardirq")),
                (13, SLICE_END, None, vec![]),
                (25, SLICE_END, None, vec![]),
                (26, SLICE_END, None, vec![]),
            ]
        );
    }

    /// A trace cut by the cap says so in the file, at the first event it
    /// refused; under the cap it says nothing.
    #[test]
    fn a_capped_trace_says_where_it_stopped() {
        let names = |max_events: usize| {
            let mut tr = Tracer::new(TraceBounds { start: 0, end: u64::MAX, max_events });
            let cpu = tr.track("cpu0", None);
            for i in 0..5u64 {
                tr.instant(i * 1_000, cpu, "msi", "q0", None);
            }
            let t = decode(&tr.finish(10_000).unwrap().unwrap());
            t.packet
                .iter()
                .filter_map(|p| Some((p.timestamp?, p.track_event.as_ref()?.name.clone()?)))
                .filter(|(_, n)| n != "q0")
                .collect::<Vec<_>>()
        };
        assert_eq!(names(3), vec![(3, "trace stopped: trace.max_events (3) reached".to_string())]);
        assert!(names(5).is_empty());
    }

    /// Every flow a slice ends was started in the trace, once: a start the
    /// window cut, a second end of the same flow and an end with no start at
    /// all are left out; flows merged into one end with it.
    #[test]
    fn slices_end_only_flows_the_trace_started_and_merged_flows_end_together() {
        let mut tr = Tracer::new(TraceBounds { start: 10_000, end: 100_000, max_events: 100 });
        let cpu = tr.track("cpu0", None);
        tr.instant(5_000, cpu, "msi", "before the window", Some(1));
        tr.instant(11_000, cpu, "msi", "a", Some(2));
        tr.instant(12_000, cpu, "msi", "merged into a", Some(3));
        tr.instant(13_000, cpu, "msi", "c", Some(4));
        tr.instant(14_000, cpu, "msi", "merged into c", Some(5));
        tr.merge_flow(4, 5);
        tr.merge_flow(2, 3);
        tr.merge_flow(2, 4); // c, and 5 with it, merged into a
        for (t, flow) in [(20_000, 1), (30_000, 2), (40_000, 2), (50_000, 99)] {
            tr.begin(t, cpu, "hardirq", "h", Some(flow));
            tr.end(t + 1_000, cpu);
        }
        let t = decode(&tr.finish(200_000).unwrap().unwrap());
        let ends: Vec<Vec<u64>> = t
            .packet
            .iter()
            .filter_map(|p| p.track_event.as_ref())
            .filter(|e| e.r#type == Some(SLICE_BEGIN))
            .map(|e| e.terminating_flow_ids.clone())
            .collect();
        assert_eq!(ends, vec![vec![], vec![2, 3, 4, 5], vec![], vec![]]);
    }

    #[test]
    fn disabled_tracer_writes_nothing() {
        let mut tr = Tracer::disabled();
        let cpu = tr.track("cpu0", None);
        tr.begin(1, cpu, "task", "x", None);
        assert!(tr.finish(2).unwrap().is_none());
    }

    fn busy(tr: &mut Tracer) {
        let cpu = tr.track("cpu0", None);
        // Well past FLUSH_AT: the streaming tracer writes out several times.
        for i in 0..100_000u64 {
            tr.begin(i * 10, cpu, "hardirq", "nvme0q1", Some(i));
            tr.end(i * 10 + 5, cpu);
        }
        tr.begin(2_000_000, cpu, "task", "left open", None);
    }

    #[test]
    fn a_streamed_trace_is_the_same_bytes_as_one_held_in_memory() {
        let bounds = TraceBounds { start: 0, end: u64::MAX, max_events: usize::MAX };
        let mut mem = Tracer::new(bounds);
        busy(&mut mem);
        let bytes = mem.finish(3_000_000).unwrap().unwrap();
        assert!(bytes.len() > 3 * FLUSH_AT);
        let path = std::env::temp_dir().join(format!("irqlab-trace-test-{}.pftrace", std::process::id()));
        let mut file = Tracer::to_file(bounds, &path);
        busy(&mut file);
        assert!(file.encoded.len() < FLUSH_AT, "memory stays bounded: {} bytes held", file.encoded.len());
        assert_eq!(file.finish(3_000_000), Ok(None));
        let streamed = std::fs::read(&path).unwrap();
        std::fs::remove_file(&path).unwrap();
        assert!(streamed == bytes, "same bytes");
    }

    #[test]
    fn a_trace_that_cannot_be_written_says_why() {
        let bounds = TraceBounds { start: 0, end: u64::MAX, max_events: usize::MAX };
        let mut tr = Tracer::to_file(bounds, std::path::Path::new("/"));
        busy(&mut tr);
        let e = tr.finish(3_000_000).unwrap_err();
        assert!(e.starts_with("/: cannot write"), "{e}");
    }
}
