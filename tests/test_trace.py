"""The Perfetto trace, decoded with perfetto's own protos (not the trace
processor, which downloads a binary): CPU tracks, balanced slices, the slice
kinds of DESIGN.md, and flows from an MSI write to its handler."""

from __future__ import annotations

import bisect
import json
import subprocess
import sys
from collections import defaultdict

import pytest
from perfetto.protos.perfetto.trace.perfetto_trace_pb2 import Trace, TrackEvent

import irqlab
from helpers import assert_ok, run_cli

BEGIN, END, INSTANT, COUNTER = (
    TrackEvent.TYPE_SLICE_BEGIN,
    TrackEvent.TYPE_SLICE_END,
    TrackEvent.TYPE_INSTANT,
    TrackEvent.TYPE_COUNTER,
)


@pytest.fixture(scope="module")
def trace(virt, tmp_path_factory):
    out = tmp_path_factory.mktemp("trace") / "virt.pftrace"
    assert_ok(run_cli("run", virt, "--trace", out))
    t = Trace()
    t.ParseFromString(out.read_bytes())
    return t


def tracks(t: Trace) -> dict[int, str]:
    return {p.track_descriptor.uuid: p.track_descriptor.name for p in t.packet if p.HasField("track_descriptor")}


def events(t: Trace):
    return [(p.timestamp, p.track_event) for p in t.packet if p.HasField("track_event")]


def kind(ev: TrackEvent) -> str:
    return " ".join([ev.name, *ev.categories]).lower()


def test_there_is_a_track_per_cpu(trace):
    names = [n.lower() for n in tracks(trace).values()]
    cpu_tracks = [n for n in names if "cpu" in n]
    assert len(cpu_tracks) >= 2, names  # virt.toml has 2 pCPUs (and a vCPU)


def test_every_event_is_on_a_described_track(trace):
    known = set(tracks(trace))
    for _, ev in events(trace):
        assert ev.track_uuid in known, ev


def test_slices_are_balanced_and_nested_per_track(trace):
    depth: dict[int, int] = defaultdict(int)
    last: dict[int, int] = {}
    for ts, ev in events(trace):
        if ev.type in (BEGIN, END):
            assert ts >= last.get(ev.track_uuid, 0), "time went backwards on a track"
            last[ev.track_uuid] = ts
        if ev.type == BEGIN:
            depth[ev.track_uuid] += 1
        elif ev.type == END:
            depth[ev.track_uuid] -= 1
            assert depth[ev.track_uuid] >= 0, f"SLICE_END without BEGIN on track {ev.track_uuid:#x}"
    assert depth, "no slices at all"
    assert all(d == 0 for d in depth.values()), dict(depth)


@pytest.mark.parametrize("what", ["task", "hardirq", "softirq", "hypervisor"])
def test_the_slice_kinds_of_the_design_are_present(trace, what):
    kinds = {kind(ev) for _, ev in events(trace) if ev.type == BEGIN}
    assert any(what in k for k in kinds), sorted(kinds)[:20]


def test_msi_writes_flow_to_their_handler_slices(trace):
    starts = {}
    for ts, ev in events(trace):
        if ev.type == INSTANT:
            for f in ev.flow_ids:
                starts[f] = (ts, ev)
    msi = [ev for _, ev in starts.values() if "msi" in kind(ev)]
    assert msi, "no MSI write instant starts a flow"
    linked = 0
    for ts, ev in events(trace):
        if ev.type == BEGIN:
            for f in ev.terminating_flow_ids:
                if f in starts:
                    linked += 1
                    assert ts >= starts[f][0], "a handler began before its MSI write"
                    assert "irq" in kind(ev) or "hypervisor" in kind(ev), kind(ev)
    # Flows whose write fell before the trace window stay unmatched; most must match.
    assert linked >= 0.5 * len(starts) > 0


def test_counter_tracks_carry_the_rates_and_each_cpus_pending_interrupts(trace):
    """The design's counter tracks: rates (every time series, sampled as the run
    samples it) and queue depths (each CPU's interrupts pending at its
    controller, written when it changes)."""
    names = tracks(trace)
    values: dict[str, list[float]] = defaultdict(list)
    for _, ev in events(trace):
        if ev.type == COUNTER:
            assert ev.HasField("double_counter_value"), ev
            values[names[ev.track_uuid]].append(ev.double_counter_value)
    assert {"interrupts_per_s", "hardirq_share", "busy_share"} <= set(values), sorted(values)
    rate = values["interrupts_per_s"]
    assert all(v >= 0 for v in rate) and any(v > 0 for v in rate) and all(0 <= v <= 1 for v in values["hardirq_share"])
    pending = {n: v for n, v in values.items() if n.endswith(" pending irqs")}
    assert pending, sorted(values)
    # A count that rises and falls, never below zero, in whole interrupts.
    assert all(x >= 0 and x == int(x) for v in pending.values() for x in v)
    assert any(x > 0 for v in pending.values() for x in v) and any(x == 0 for v in pending.values() for x in v)


@pytest.mark.parametrize(
    "scenario,sets,expect",
    [
        ("figures/m4-kvm-cancels.toml", ["duration=50ms"], ["cancelled vm-enter", "requests", "vm entry"]),
        ("examples/m5-nic-vms.toml", ["duration=3ms", "warmup=1ms"], ["napi poll", "hypervisor"]),
        ("figures/m5-nvme-8ssd.toml", ["duration=3ms", "warmup=1ms", "trace.max_events=20000"], ["hardirq"]),
        # The backtrace's pseudo-NMI stage (sent at 20.02 ms, once CPU 0 has
        # dumped its own stack) and its SDEI stage for the DAIF-wedged CPU 5
        # 10 ms later: short windows, as the gettid loops make ~60 M trace
        # events per simulated second (the 19-31 ms window filled
        # trace.max_events and took 20 s to decode).
        (
            "examples/m1-backtrace.toml",
            ["warmup=19.9ms", "duration=20.2ms", "trace.start=20.015ms", "trace.max_events=20000"],
            ["cross-call requester", "crosscall.backtrace.pseudo-nmi.cpu1 handler"],
        ),
        (
            "examples/m1-backtrace.toml",
            ["warmup=19.9ms", "duration=30.2ms", "trace.start=29.99ms", "trace.max_events=20000"],
            ["cross-call requester", "crosscall.backtrace.sdei.cpu5 handler"],
        ),
        # A pCPU's hypervisor slice says what brought it in (it read "hypervisor" alone).
        (
            "figures/m3-xen-fio.toml",
            ["duration=50ms", "warmup=10ms"],
            ["hypervisor: lpi", "hypervisor: wfi", "vcpu", "virq handler"],
        ),
        # A posted-MSI notification's steps are named by the vector each runs
        # (they all read "sysvec_posted_msi_notification" and ended no flow).
        (
            "figures/m5-posted-msi.toml",
            ["duration=3ms", "warmup=1ms", "trace.max_events=20000"],
            ["sysvec_posted_msi_notification", "ssd.0.q0 handler"],
        ),
        ("examples/vm-injection.toml", ["duration=20ms", "warmup=5ms"], ["vm exit", "inject", "handler"]),
        # A CPU's exit from an idle state is a slice before the interrupt's.
        (
            "examples/m5-nvme-qd1.toml",
            [
                "duration=20ms",
                "warmup=5ms",
                'cpu.idle_state=[{name="C1",exit="2us",residency="2us"},{name="C1E",exit="10us",residency="20us"}]',
            ],
            ["c1e exit idle", "hardirq"],
        ),
    ],
)
def test_mechanism_traces_decode_and_balance(scenario, sets, expect, tmp_path):
    import irqlab

    out = tmp_path / "t.pftrace"
    args = ["run", irqlab.SCENARIOS_DIR / scenario, "--trace", out]
    for s in sets:
        args += ["--set", s]
    assert_ok(run_cli(*args))
    t = Trace()
    t.ParseFromString(out.read_bytes())
    depth: dict[int, int] = defaultdict(int)
    deepest = 0
    for _, ev in events(t):
        depth[ev.track_uuid] += {BEGIN: 1, END: -1}.get(ev.type, 0)
        assert depth[ev.track_uuid] >= 0
        deepest = max(deepest, depth[ev.track_uuid])
    assert all(d == 0 for d in depth.values())
    # trace_processor counts a flow ended without a start, or ended twice, as an
    # error: a window that cut an MSI's write, a notification's own id, and the
    # second handler of a write that merged all made one.
    started: dict[int, int] = {}
    ended: set[int] = set()
    for ts, ev in events(t):
        started.update((f, ts) for f in ev.flow_ids)
        for f in ev.terminating_flow_ids:
            assert started.get(f, ts + 1) <= ts, f"flow {f} ends at {ts} without a start before it"
            assert f not in ended, f"flow {f} ends twice"
            ended.add(f)
    # A phase within a phase, an interrupt within a task: a few levels. (M4's guest
    # slices stayed open at each exit and nested 2,500 deep, a review found.)
    assert deepest <= 8, deepest
    kinds = " | ".join(sorted({kind(ev) for _, ev in events(t) if ev.type in (BEGIN, INSTANT)}))
    for e in expect:
        assert e in kinds, kinds[:500]
    # The fabric's backlog counter, where there is one, follows the queue (the NVMe
    # figure's MSIs go through its DMA path, and it read one 0 for the whole trace).
    backlog = [u for u, name in tracks(t).items() if name == "fabric backlog"]
    values = [ev.double_counter_value for _, ev in events(t) if ev.type == COUNTER and ev.track_uuid in backlog]
    if "nvme" in scenario:
        assert len(values) > 100 and max(values) > 0, values[:10]
    # A CPU that runs guests is a pCPU on its track (a review read "cpu0" as the host's).
    if "m3" in scenario or "vms" in scenario:
        assert "pcpu0" in tracks(t).values(), sorted(tracks(t).values())[:10]


def _peak_rss_kib(*args: object) -> int:
    """Peak resident memory of `irqlab ARGS`, in KiB (measured in a process of its own)."""
    probe = (
        "import resource, subprocess, sys\n"
        "p = subprocess.run([sys.executable, '-m', 'irqlab', *sys.argv[1:]], stdout=subprocess.DEVNULL)\n"
        "assert p.returncode == 0, p.returncode\n"
        "print(resource.getrusage(resource.RUSAGE_CHILDREN).ru_maxrss)\n"
    )
    out = subprocess.run([sys.executable, "-c", probe, *map(str, args)], capture_output=True, text=True, timeout=300)
    assert out.returncode == 0, out.stderr
    return int(out.stdout.split()[-1])


def test_a_trace_to_a_file_is_streamed_memory_stays_bounded_and_the_bytes_are_the_same(tmp_path):
    nic = irqlab.SCENARIOS_DIR / "figures" / "m5-nic-100g.toml"
    args = ["run", nic, "--set", "duration=200ms", "--set", "trace.max_events=100000000"]
    streamed = tmp_path / "t.pftrace"
    in_file = _peak_rss_kib(*args, "--trace", streamed, "--format", "json")
    size_kib = streamed.stat().st_size // 1024
    assert size_kib > 50_000, "a trace large enough to tell streaming from holding it"
    held = tmp_path / "held.pftrace"
    with held.open("wb") as f:
        p = subprocess.run([sys.executable, "-m", "irqlab", *map(str, args), "--trace", "-"], stdout=f, timeout=300)
    assert p.returncode == 0
    assert held.read_bytes() == streamed.read_bytes()
    # Held in memory (for stdout) the trace costs its size at least; streamed, a
    # buffer of a MiB. The margin is half the trace, far above run-to-run noise.
    in_memory = _peak_rss_kib(*args, "--trace", "-")
    assert in_file < in_memory - size_kib // 2, f"streamed {in_file} KiB, held {in_memory} KiB, trace {size_kib} KiB"
    assert not [f for f in tmp_path.iterdir() if ".irqlab-partial-" in f.name]


def test_a_trace_cut_at_its_event_cap_says_so(small, tmp_path):
    """A trace that reached trace.max_events (1,000,000 by default) stopped
    recording without a word: it looked like the whole run."""
    out = tmp_path / "t.pftrace"
    p = run_cli("run", small, "--trace", out, "--set", "trace.max_events=100", "--json", tmp_path / "r.json")
    assert_ok(p)
    [line] = [x for x in p.stderr.splitlines() if "trace" in x]
    assert line.startswith("warning: the trace stops at ") and "trace.max_events" in line, p.stderr
    assert "the trace stops" in " ".join(json.loads((tmp_path / "r.json").read_text())["warnings"])
    # And the file itself says so, for whoever opens it alone.
    t = Trace()
    t.ParseFromString(out.read_bytes())
    said = [ev.name for _, ev in events(t) if ev.type == INSTANT and ev.name.startswith("trace stopped")]
    assert said == ["trace stopped: trace.max_events (100) reached"], said
    p = run_cli("run", small, "--trace", out)
    assert_ok(p)
    assert "the trace stops" not in p.stderr


def _slices(t: Trace) -> dict[int, list[tuple[int, int, str]]]:
    """Per track, its slices as (begin, end, name)."""
    open_: dict[int, list[tuple[int, str]]] = defaultdict(list)
    out: dict[int, list[tuple[int, int, str]]] = defaultdict(list)
    for ts, ev in events(t):
        if ev.type == BEGIN:
            open_[ev.track_uuid].append((ts, ev.name))
        elif ev.type == END:
            b, name = open_[ev.track_uuid].pop()
            out[ev.track_uuid].append((b, ts, name))
    return out


def test_a_guest_slice_stops_at_a_vm_exit_and_merged_writes_reach_their_handler(tmp_path):
    """A guest's slice stayed open through its VM exits, so the hypervisor's
    time read as the guest's ("app.0 user" of 2 µs drawn 28 µs long); and a
    write that merged into a pending interrupt started an arrow that ended
    nowhere (741 of 4,675 in this example), both found by a review."""
    out = tmp_path / "vm.pftrace"
    example = irqlab.SCENARIOS_DIR / "examples/vm-injection.toml"
    assert_ok(run_cli("run", example, "--set", "duration=25ms", "--trace", out))
    t = Trace()
    t.ParseFromString(out.read_bytes())
    parent = {
        p.track_descriptor.uuid: p.track_descriptor.parent_uuid
        for p in t.packet
        if p.HasField("track_descriptor") and p.track_descriptor.HasField("parent_uuid")
    }
    assert parent, "no guest track under a pCPU"
    slices = _slices(t)
    hyp_names = {"vm exit", "hyp irq", "inject", "vm entry"}
    checked = 0
    for guest, pcpu in parent.items():
        hyp = [(b, e) for b, e, n in slices[pcpu] if n in hyp_names and e > b]
        begins = sorted(b for b, _, _ in slices[guest])
        ends = sorted(e for _, e, _ in slices[guest])
        assert hyp and begins
        for b, e in hyp:
            checked += 1
            # Guest slices open in the middle of the hypervisor's (none, if they stop at the exit).
            mid = (b + e) / 2
            open_ = bisect.bisect_right(begins, mid) - bisect.bisect_right(ends, mid)
            assert open_ == 0, f"{open_} guest slice(s) of track {guest} run through the hypervisor's {b}-{e} ns"
    assert checked > 1000
    writes = {f for _, ev in events(t) if ev.type == INSTANT for f in ev.flow_ids}
    ends = {f for _, ev in events(t) if ev.type == BEGIN for f in ev.terminating_flow_ids}
    assert len(writes - ends) <= 0.01 * len(writes), f"{len(writes - ends)} of {len(writes)} writes reach no handler"


def test_a_handler_that_loops_and_a_mask_are_one_slice_each(tmp_path):
    """nvme_irq looking again at its CQ is one call, and one interrupt: a slice
    per pass made 5,805 handler slices of 4,308 interrupts (a review counting
    slices in trace_processor), and a mask whose read waited read as two
    mask_ack_irq slices. Now a trace's counts are the run's."""
    fig = irqlab.SCENARIOS_DIR / "figures" / "m5-nvme-8ssd.toml"
    short = ["--set", "duration=2ms", "--set", "warmup=0s", "--set", "trace.max_events=1000000"]
    for extra in ([], ["--set", "gsim.delay_us=100"]):
        out, res = tmp_path / "t.pftrace", tmp_path / "r.json"
        assert_ok(run_cli("run", fig, *short, *extra, "--trace", out, "--json", res))
        metrics = json.loads(res.read_text())["metrics"]
        t = Trace()
        t.ParseFromString(out.read_bytes())
        names = [ev.name for _, ev in events(t) if ev.type == BEGIN]
        handlers = sum(n.startswith("ssd.") and n.endswith(" handler") for n in names)
        timers = names.count("hrtimer_interrupt (gsim)")
        masks = names.count("mask_ack_irq (disabled)")
        if not extra:
            assert handlers == metrics["interrupts"] > 1000, (handlers, metrics["interrupts"])
        else:
            # Under GSIM the held handlers run inside its timer's slice (as its
            # callback runs them), so slices count the timer interrupts and the
            # handlers that came while nothing held them.
            assert timers == round(metrics["source.gsim.interrupts_per_s"] * 0.002) > 100
            held = metrics["gsim.handled_in_timer"]
            assert handlers + held + timers == metrics["interrupts"], (handlers, held, timers, metrics["interrupts"])
            assert masks == metrics["gsim.masked_while_disabled"] > 100, masks


def test_a_slice_open_when_the_window_starts_begins_there(tmp_path):
    """The backtrace's wedged CPUs mask interrupts from the start of the run:
    in a window that starts later, their masked sections begin at its start
    (they were left out, and CPU 5 looked idle, CPU 6 empty under its NMI)."""
    out = tmp_path / "t.pftrace"
    start_ns = 20_015_000
    sets = ["warmup=19.9ms", "duration=20.2ms", f"trace.start={start_ns}ns", "trace.max_events=20000"]
    args = ["run", irqlab.SCENARIOS_DIR / "examples/m1-backtrace.toml", "--trace", out]
    assert_ok(run_cli(*args, *[a for s in sets for a in ("--set", s)]))
    t = Trace()
    t.ParseFromString(out.read_bytes())
    uuid = {name: u for u, name in tracks(t).items()}
    sl = _slices(t)
    for cpu in ("cpu5", "cpu6"):
        assert (start_ns, "irqs off") in [(b, name) for b, _, name in sl[uuid[cpu]]], sl[uuid[cpu]]
    # Nothing before the window, and CPU 6's NMI handler nests inside its masked section.
    assert min(ts for ts, _ in events(t)) >= start_ns
    [(b, e, _)] = [x for x in sl[uuid["cpu6"]] if x[2] == "irqs off"]
    nmi = [x for x in sl[uuid["cpu6"]] if "pseudo-nmi" in x[2]]
    assert nmi and all(b <= nb and ne <= e for nb, ne, _ in nmi), (b, e, nmi)


def test_a_xen_guests_vlpi_handlers_are_hardirq_slices_inside_its_vcpu_that_add_up_to_its_share(tmp_path):
    """M3's guest handlers were instants: the trace showed none of the guest's
    hardirq time. Each is a slice inside its vCPU's, and they sum to the run's
    hardirq share (an exit ends it; it opens again when the guest goes on)."""
    out, res = tmp_path / "t.pftrace", tmp_path / "r.json"
    sets = ["--set", "duration=30ms", "--set", "warmup=10ms"]
    assert_ok(run_cli("run", irqlab.SCENARIOS_DIR / "figures/m3-xen-fio.toml", *sets, "--trace", out, "--json", res))
    t = Trace()
    t.ParseFromString(out.read_bytes())
    open_: dict[int, list[str]] = defaultdict(list)
    total = handlers = 0
    starts: dict[int, int] = {}
    for ts, ev in events(t):
        if ev.type == BEGIN:
            if ev.name == "vIRQ handler":
                assert open_[ev.track_uuid] and open_[ev.track_uuid][-1].startswith("vcpu"), open_[ev.track_uuid]
                assert list(ev.categories) == ["hardirq"]
                starts[ev.track_uuid] = ts
            open_[ev.track_uuid].append(ev.name)
        elif ev.type == END and open_[ev.track_uuid].pop() == "vIRQ handler":
            total += ts - starts.pop(ev.track_uuid)
            handlers += 1
    m = json.loads(res.read_text())["metrics"]
    cpus = sum(1 for n in tracks(t).values() if n.startswith("pcpu"))
    assert handlers > 100 and cpus == 8
    assert total / (20e6 * cpus) == pytest.approx(m["hardirq_share"], rel=0.02)
