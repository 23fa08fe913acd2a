"""Types of the Rust extension `irqlab._core` (crates/irqlab-py/src/lib.rs).

mypy cannot read the compiled module, so this stub states what the binding
accepts and returns; change it with the binding. Check it against the built
extension with `python -m mypy.stubtest irqlab._core`."""

import os
from collections.abc import Mapping, Sequence
from typing import final

__all__ = [
    "ScenarioError",
    "StopFlag",
    "__version__",
    "check_budget",
    "host_gettid_ns",
    "host_page_faults",
    "host_sched_yield_ops",
    "kvm_requests",
    "load",
    "load_scenario",
    "parse_rate",
    "parse_time_ps",
    "run",
    "run_replay",
    "scale_scenario",
    "schema",
    "zero_costs",
]

__version__: str

class ScenarioError(ValueError):
    """A scenario, override or option is invalid; the message is one line."""

def load_scenario(text: str, origin: str, overrides: list[str] = ...) -> str:
    """Validate a scenario (TOML text, or a JSON object when `origin` ends in .json); returns it normalized, as JSON."""

def load(text: str, origin: str, overrides: list[str] = ...) -> str:
    """`load_scenario` under its short name."""

@final
class StopFlag:
    """Stops the runs given it (Ctrl-C): they end as KeyboardInterrupt.
    `sim_ps()`: the simulated time the run has reached, in ps."""
    def __init__(self) -> None: ...
    def set(self) -> None: ...
    def is_set(self) -> bool: ...
    def sim_ps(self) -> int: ...

def run(
    text: str,
    origin: str,
    overrides: list[str] = ...,
    seed: int | None = None,
    trace: bool = False,
    stop: StopFlag | None = None,
    force: bool = False,
    trace_to: str | os.PathLike[str] | None = None,
) -> tuple[str, bytes | None]:
    """Run a scenario (GIL released): (result JSON, Perfetto trace bytes if `trace`).
    With `trace_to` the trace is streamed into that file instead (None is
    returned for it; OSError if it cannot be written). Raises KeyboardInterrupt
    if `stop` was set before the run ended, and ScenarioError if its estimated
    events or memory pass the limits (unless `force`)."""

def check_budget(text: str, origin: str, overrides: list[str] = ..., trace: bool = False) -> None:
    """ScenarioError if a run's estimated events or memory pass the limits."""

def run_replay(
    text: str,
    origin: str,
    overrides: list[str],
    seed: int | None,
    arrivals: Mapping[str, Sequence[int]],
    stop: StopFlag | None = None,
    force: bool = False,
) -> str:
    """Run a scenario whose `replay` sources take `arrivals` (replay key -> sorted times in ps); the result JSON."""

def schema() -> str:
    """The JSON Schema of the scenario format."""

def scale_scenario(cpus: int) -> str:
    """The reference model's load over `cpus` CPUs: 32 sources per CPU, the same interrupts."""

def zero_costs(text: str, origin: str, overrides: list[str] = ...) -> list[tuple[str, list[str]]]: ...
def kvm_requests() -> tuple[list[str], list[tuple[str, list[str]]], list[tuple[str, str, str]]]:
    """KVM's request list: (names in upstream's old order, [(preset, names)], [(request, what servicing it raises)])."""

def host_gettid_ns(calls: int) -> float:
    """ns per gettid() call over `calls` calls."""

def host_sched_yield_ops(seconds: float) -> tuple[int, int, int]:
    """sched_yield() calls made in `seconds`."""

def host_page_faults(seconds: float, bytes: int) -> tuple[int, int, int]:
    """Pages faulted in during `seconds` of page_fault1 over `bytes`."""

def parse_time_ps(text: str) -> int:
    """A time as scenarios write it ("300ns", "1.5us"), in picoseconds; ScenarioError if it is not one."""

def parse_rate(text: str) -> float:
    """A rate as scenarios write it ("1M/s", "200k"), per second; ScenarioError if it is not one."""
