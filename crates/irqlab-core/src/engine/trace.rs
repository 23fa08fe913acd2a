//! A Perfetto trace writer (protobuf `Trace` of `TracePacket`s with
//! `TrackDescriptor` and `TrackEvent`, as defined in perfetto's
//! `protos/perfetto/trace/`). Only the fields we use are declared, with their
//! upstream field numbers, so no protoc is needed at build time.
//!
//! Recording is bounded by a time window and an event cap; slices that began
//! inside the bounds are always ended, so the trace stays balanced.

use super::time::{Ps, PS_PER_NS};
use prost::Message;

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
    open: Vec<bool>, // per open slice: was its begin recorded?
    last_counter: Option<f64>,
}

pub struct Tracer {
    enabled: bool,
    bounds: TraceBounds,
    events: usize,
    /// The trace so far, encoded: each packet is appended as Trace's repeated
    /// field 1 as it is made, so memory is the file's size, not ten times it
    /// (as holding the packets as structs was).
    encoded: Vec<u8>,
    tracks: Vec<TrackState>,
}

impl Tracer {
    pub fn disabled() -> Self {
        Self { enabled: false, bounds: TraceBounds { start: 0, end: 0, max_events: 0 }, events: 0, encoded: Vec::new(), tracks: Vec::new() }
    }

    pub fn new(bounds: TraceBounds) -> Self {
        Self { enabled: true, bounds, ..Self::disabled() }
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
    fn admits(&self, t: Ps) -> bool {
        t >= self.bounds.start && t <= self.bounds.end && self.events < self.bounds.max_events
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

    /// Opens a slice; `flow_end` terminates a flow begun by [`Tracer::instant`].
    pub fn begin(&mut self, t: Ps, track: TrackId, category: &'static str, name: &str, flow_end: Option<u64>) {
        if !self.enabled {
            return;
        }
        let rec = self.admits(t);
        let uuid = self.tracks[track.0 as usize].uuid;
        self.tracks[track.0 as usize].open.push(rec);
        if rec {
            self.emit(
                t,
                TrackEvent {
                    r#type: Some(SLICE_BEGIN),
                    track_uuid: Some(uuid),
                    categories: vec![category.to_string()],
                    name: Some(name.to_string()),
                    terminating_flow_ids: flow_end.into_iter().collect(),
                    ..Default::default()
                },
            );
        }
    }

    /// Closes the innermost open slice of `track`.
    pub fn end(&mut self, t: Ps, track: TrackId) {
        if !self.enabled {
            return;
        }
        let st = &mut self.tracks[track.0 as usize];
        let uuid = st.uuid;
        if st.open.pop() == Some(true) {
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

    /// Closes every open slice at `now` and encodes the trace. `None` if disabled.
    pub fn finish(mut self, now: Ps) -> Option<Vec<u8>> {
        if !self.enabled {
            return None;
        }
        for i in 0..self.tracks.len() {
            while !self.tracks[i].open.is_empty() {
                self.end(now, TrackId(i as u32));
            }
        }
        Some(std::mem::take(&mut self.encoded))
    }

    /// Appends one packet as `Trace.packet` (field 1): concatenated, they are a `Trace`.
    fn append(&mut self, p: TracePacket) {
        prost::encoding::message::encode(1, &p, &mut self.encoded);
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
        let t = decode(&tr.finish(7000).unwrap());
        let kinds: Vec<i32> = t.packet.iter().filter_map(|p| p.track_event.as_ref()).map(|e| e.r#type.unwrap()).collect();
        assert_eq!(kinds, vec![1, 1, 1, 2, 2, 2]);
    }

    #[test]
    fn window_excludes_early_slices_and_their_ends() {
        let mut tr = Tracer::new(TraceBounds { start: 10_000, end: 20_000, max_events: 100 });
        let cpu = tr.track("cpu0", None);
        tr.begin(5_000, cpu, "task", "early", None);
        tr.begin(12_000, cpu, "hardirq", "in", Some(7));
        tr.end(13_000, cpu);
        tr.end(25_000, cpu);
        let t = decode(&tr.finish(30_000).unwrap());
        let evs: Vec<&TrackEvent> = t.packet.iter().filter_map(|p| p.track_event.as_ref()).collect();
        assert_eq!(evs.len(), 2);
        assert_eq!(evs[0].terminating_flow_ids, vec![7]);
    }

    #[test]
    fn disabled_tracer_writes_nothing() {
        let mut tr = Tracer::disabled();
        let cpu = tr.track("cpu0", None);
        tr.begin(1, cpu, "task", "x", None);
        assert!(tr.finish(2).is_none());
    }
}
