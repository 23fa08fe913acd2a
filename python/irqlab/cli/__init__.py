"""The `irqlab` command line (see DESIGN.md for the contract).

Every bad input ends as one `error: ...` line on stderr and exit code 2, with
no traceback and no output file; a traceback means a bug in irqlab.

This module holds the typer `app`, the option types and error handling the
commands share, and the `--version` callback; each command group lives in its
own module, imported at the bottom so that it registers on `app`."""

from __future__ import annotations

import errno
import functools
import os
import signal
import sys
from collections.abc import Callable
from pathlib import Path
from typing import Annotated, ParamSpec, TypeVar


def _interrupted_at_start(kind: type[BaseException], value: BaseException, tb: object) -> None:
    # A Ctrl-C while the command is still importing (a fifth of a second) comes
    # before `main`'s handler: one line and exit 130, not a traceback (an audit).
    if issubclass(kind, KeyboardInterrupt):
        sys.stderr.write("error: interrupted\n")
        sys.stderr.flush()
        os._exit(130)
    sys.__excepthook__(kind, value, tb)  # type: ignore[arg-type]


# Only when this process is the command, not a program that imports it.
if os.path.basename(sys.argv[0]) in ("irqlab", "__main__.py"):
    sys.excepthook = _interrupted_at_start

import typer  # noqa: E402

# typer 0.29 carries its own copy of click; its usage errors are those.
from typer._click.exceptions import UsageError  # noqa: E402

from .. import _core  # noqa: E402
from .._util import UserError, one_line, output_problem  # noqa: E402
from .render import EXIT_PIPE, err, out, stdout_gone  # noqa: E402

app = typer.Typer(
    name="irqlab",
    help="A lab for interrupt delivery on servers: simulate, measure, compare.",
    pretty_exceptions_enable=False,
    no_args_is_help=True,
    add_completion=False,
    context_settings={"help_option_names": ["-h", "--help"]},
)

U64_MAX = 2**64 - 1

ScenarioArg = Annotated[
    Path,
    typer.Argument(
        help="Scenario TOML file, or a bundled one by name (examples/md1-queue; scenarios/ in the package).",
        show_default=False,
        metavar="SCENARIO",
    ),
]
SetOpt = Annotated[
    list[str] | None,
    typer.Option("--set", help="Override a scenario key: KEY.PATH=VALUE (repeatable).", metavar="KEY=VALUE"),
]
SeedOpt = Annotated[int | None, typer.Option("--seed", help="Seed instead of the scenario's own.")]
SetFromOpt = Annotated[
    list[str] | None,
    typer.Option(
        "--set-from",
        help="FILE:METRIC=KEY.PATH: a measured value (irqlab measure --json) as an override; "
        "FILE:host.cpuidle=cpu.idle_state sets the measured host's idle states.",
    ),
]
ForceOpt = Annotated[
    bool,
    typer.Option("--force", help="Run even if the estimated events or memory pass the limits (see docs/bad-input.md)."),
]
#: What the result's table shows beyond the summary (`run` and `replay`, whose footnote offers both).
PerCpuOpt = Annotated[
    bool, typer.Option("--per-cpu", help="Table: also the per-CPU and per-source rows (and their tables).")
]
AllOpt = Annotated[
    bool, typer.Option("--all", help="Table: everything: every metric, every histogram statistic, every table.")
]


def _checked(kind: str) -> Callable[[Path | None], Path | None]:
    """An option callback: refuses an output that could not be written before
    the command does any work (a parent that is a file, a directory given for a
    file, a directory it cannot write in)."""

    def check(value: Path | None) -> Path | None:
        why = None if value is None else output_problem(value, kind)
        if why is not None:
            raise typer.BadParameter(f"{value}: {why}")
        return value

    return check


#: Callbacks for output options: a file, a directory (a report), or either (a sweep's --out).
output_file, output_dir, _any = _checked("file"), _checked("directory"), _checked("any")

#: Suffixes that say a user wants a file in another format than a sweep writes.
NOT_PARQUET = {".csv", ".tsv", ".json", ".txt", ".xlsx", ".xls"}


def output_any(value: Path | None) -> Path | None:
    """A sweep's --out: a dataset directory or NAME.parquet; `results.csv` would
    silently become a directory of Parquet files."""
    if value is not None and value.suffix.lower() in NOT_PARQUET:
        raise typer.BadParameter(
            f"{value}: a sweep writes Parquet: expected a directory (a dataset) or NAME.parquet "
            "(irqlab query --format csv converts it)"
        )
    if value is not None and value.suffix.lower() == ".parquet" and value.is_dir():
        # Found after the whole sweep had run, until a review.
        raise typer.BadParameter(f"{value}: is a directory; NAME.parquet is the one file a sweep writes at its end")
    return _any(value)


JsonOpt = Annotated[
    Path | None, typer.Option("--json", help="Write the result JSON here ('-' = stdout).", callback=output_file)
]

P = ParamSpec("P")
R = TypeVar("R")


def user_errors(fn: Callable[P, R]) -> Callable[P, R]:
    """Turn bad input into one stderr line and exit code 2."""

    @functools.wraps(fn)
    def wrapper(*args: P.args, **kwargs: P.kwargs) -> R:
        try:
            return fn(*args, **kwargs)
        except (UserError, _core.ScenarioError) as e:
            err.print(f"error: {one_line(str(e))}", markup=False, soft_wrap=True)
            raise typer.Exit(2) from None
        except KeyboardInterrupt:
            err.print("error: interrupted", markup=False)
            raise typer.Exit(130) from None
        except BrokenPipeError:
            # The reader of stdout went away (`| head -1`): typer's own handling
            # would exit 1, which reads as a failure; as `render._Console` does.
            stdout_gone()
            raise typer.Exit(EXIT_PIPE) from None

    return wrapper


def check_seed(seed: int | None) -> int | None:
    """`--seed` as given (None: the scenario's own), or a UserError if it is not a u64."""
    if seed is not None and not 0 <= seed <= U64_MAX:
        raise UserError(f"--seed {seed}: expected an integer from 0 to 2^64-1")
    return seed


def check_workers(workers: int | None) -> None:
    if workers is not None and workers < 1:
        raise UserError(f"--workers {workers}: expected at least 1")


def _version(value: bool) -> None:
    if value:
        out.print(f"irqlab {_core.__version__}", markup=False)
        raise typer.Exit()


@app.callback()
def _root(
    version: Annotated[
        bool, typer.Option("--version", callback=_version, is_eager=True, help="Print the version and exit.")
    ] = False,
) -> None:
    """A lab for interrupt delivery on servers: simulate, measure, compare."""


def _command_name(argv: list[str]) -> str:
    """The command argv names, as a message leads with it (`irqlab run`), or
    `irqlab` when its first word is not one."""
    group = typer.main.get_command(app)
    known = group.commands if isinstance(group, typer.core.TyperGroup) else {}
    return f"irqlab {argv[0]}" if argv and argv[0] in known else "irqlab"


def _usage_line(e: UsageError, argv: list[str]) -> str:
    """A click usage error as one line: the command, what was wrong, where help is.
    An option's missing value comes without a context (`run x --json`): the
    command is then the one argv names, where it said `irqlab`."""
    cmd = e.ctx.command_path if e.ctx is not None else _command_name(argv)
    return f"{cmd}: {one_line(e.format_message())} (see {cmd} --help)"


def _repeated_option(argv: list[str]) -> str | None:
    """An option that takes one value, given more than once (click keeps the
    last silently: `--seed 1 --seed 2` ran seed 2), as an error line; None if
    there is none or the command line has another error (click says which)."""
    words = [a.split("=", 1)[0] for a in argv[1 : argv.index("--") if "--" in argv else None] if a.startswith("-")]
    if len(set(words)) == len(words):
        return None  # the common case, without building the command
    from typer._click import core

    name = argv[0]
    group = typer.main.get_command(app)
    sub = group.commands.get(name) if isinstance(group, typer.core.TyperGroup) else None
    if sub is None:
        return None
    try:
        _, _, order = sub.make_parser(core.Context(sub, info_name=name, resilient_parsing=True)).parse_args(argv[1:])
    except Exception:  # the real parse reports it
        return None
    seen: dict[str, int] = {}
    for p in order:
        one_value = not (p.multiple or getattr(p, "is_flag", False) or getattr(p, "count", False))
        if p.param_type_name == "option" and one_value:
            seen[p.opts[0]] = seen.get(p.opts[0], 0) + 1
    twice = [o for o, n in seen.items() if n > 1]
    if not twice:
        return None
    return f"irqlab {name}: {twice[0]} given {seen[twice[0]]} times; it takes one value (see irqlab {name} --help)"


class Terminated(SystemExit):
    """SIGTERM, unwinding like Ctrl-C (temp files and tracefs instances go)."""


def _empty_argument(argv: list[str]) -> str | None:
    """An empty argument (`irqlab run "$SCEN"` with SCEN unset) as an error line;
    None if there is none. No option or argument takes an empty value, and a
    path made of one read as `.`, the current directory ("is a directory")."""
    for i, a in enumerate(argv[: argv.index("--") if "--" in argv else None]):
        if a == "":
            before = argv[i - 1] if i > 0 and argv[i - 1].startswith("-") and "=" not in argv[i - 1] else None
            what = f"{before}'s value" if before else f"argument {i + 1}"
        elif a.startswith("-") and a.endswith("=") and "=" not in a[:-1]:
            what = f"{a[:-1]}'s value"
        else:
            continue
        return f"{_command_name(argv)}: {what} is empty (an unset shell variable?): expected a value"
    return None


def _terminated(signum: int, _frame: object) -> None:
    raise Terminated(128 + signum)


def main(args: list[str] | None = None) -> None:
    """The `irqlab` entry point. Usage errors (a wrong option type, a missing or
    extra argument, an unknown option or command) are one `error:` line and exit
    2, like every other bad input, instead of click's boxed message."""
    argv = sys.argv[1:] if args is None else args
    # SIGTERM unwinds like Ctrl-C, so that temp files and tracefs instances are removed.
    signal.signal(signal.SIGTERM, _terminated)
    if not argv:
        # No command: the overview, as `irqlab --help` gives it.
        argv = ["--help"]
    try:
        if (repeated := _repeated_option(argv)) is not None:
            err.print(f"error: {repeated}", markup=False, soft_wrap=True)
            sys.exit(2)
        if (empty := _empty_argument(argv)) is not None:
            err.print(f"error: {empty}", markup=False, soft_wrap=True)
            sys.exit(2)
        code = app(args=argv, prog_name="irqlab", standalone_mode=False)
    except UsageError as e:
        err.print(f"error: {_usage_line(e, argv)}", markup=False, soft_wrap=True)
        sys.exit(2)
    except KeyboardInterrupt:
        err.print("error: interrupted", markup=False)
        sys.exit(130)
    except Terminated as e:
        err.print("error: terminated", markup=False)
        sys.exit(e.code)
    except OSError as e:
        if e.errno == errno.EPIPE:
            # The reader went away (`irqlab query ... | head -1`): nothing to say
            # to it (what `out` prints takes the same way, `render._Console`).
            stdout_gone()
            sys.exit(EXIT_PIPE)
        # Files are written by `write_all`, whose errors are UserErrors: what is
        # left is the terminal or a redirection (`> /dev/full`) refusing output.
        if e.errno not in _OUTPUT_ERRNOS:
            raise
        stdout_gone()
        err.print(f"error: cannot write the output: {e.strerror or e}", markup=False)
        sys.exit(1)
    sys.exit(code if isinstance(code, int) else 0)


#: Errors of a write that no retry fixes: a full disk or quota, a file too large, an I/O error.
_OUTPUT_ERRNOS = {errno.ENOSPC, errno.EDQUOT, errno.EFBIG, errno.EIO}


# The command modules register on `app` when imported; this order is the
# order of `irqlab --help`. They import the names above, so they come last.
from . import run, reproduce, sweep, query, report, sensitivity, bench, whatif, kvm_order, host  # noqa: E402, F401, I001
