"""Masking seen from outside the model: in the Perfetto trace, no hardirq slice
may begin on a CPU while that CPU's innermost open slice is a masked phase
(exception entry/exit, an irqs-off section, or another hardirq) — and masked
interrupts must still all arrive once the mask drops."""

from __future__ import annotations

import json

from perfetto.protos.perfetto.trace.perfetto_trace_pb2 import Trace, TrackEvent

from helpers import assert_ok, run_cli

SCENARIO = """
name = "masking-trace"
duration = "3ms"
[platform]
cpus = 2
[cpu]
irq_entry = "100ns"
irq_exit = "80ns"
exception_entry = "60ns"
exception_exit = "50ns"
[[task]]
name = "t"
count = 2
cpus = [0, 1]
work = "500ns"
exception = "syscall"
body = "20us"
irqs_off = "15us"
[[source]]
name = "q"
count = 8
cpus = [0, 1]
rate = "40k/s"
handler = "700ns"
softirq = "2us"
stop = "2.5ms"
"""

MASKED = ("exception entry", "exception exit", "irqs off")


def test_no_hardirq_begins_inside_a_masked_phase(tmp_path):
    sc = tmp_path / "m.toml"
    sc.write_text(SCENARIO)
    out, js = tmp_path / "m.pftrace", tmp_path / "m.json"
    assert_ok(run_cli("run", sc, "--trace", out, "--json", js))
    t = Trace()
    t.ParseFromString(out.read_bytes())
    stacks: dict[int, list[tuple[str, list[str]]]] = {}
    handlers_begun = 0
    for p in t.packet:
        if not p.HasField("track_event"):
            continue
        ev = p.track_event
        st = stacks.setdefault(ev.track_uuid, [])
        if ev.type == TrackEvent.TYPE_SLICE_BEGIN:
            if "hardirq" in ev.categories and ev.name == "irq entry":
                handlers_begun += 1
                if st:
                    inner_name, inner_cats = st[-1]
                    assert inner_name not in MASKED, f"irq taken inside '{inner_name}' at {p.timestamp} ns"
                    assert "hardirq" not in inner_cats, f"irq nested in a hardirq at {p.timestamp} ns"
            st.append((ev.name, list(ev.categories)))
        elif ev.type == TrackEvent.TYPE_SLICE_END:
            st.pop()
    m = json.loads(js.read_text())["metrics"]
    assert handlers_begun == m["interrupts"] > 100
    # Arrivals stop at 2.5 ms and masked sections last 15 us: every write got through.
    assert m["msi_writes"] == m["interrupts"] + m["irq_merged"]
