"""`irqlab query`: SQL (DuckDB) over a sweep's results, seen as the table `results`."""

from __future__ import annotations

import csv
import sys
from decimal import Decimal
from pathlib import Path
from typing import Annotated, Any

import typer

from .._util import UserError
from . import app, summary, user_errors
from .render import err, fmt, out

FORMATS = ("table", "csv")


def _message(msg: str) -> str:
    """A DuckDB error as one line, without the query excerpt and caret line it ends with."""
    lines: list[str] = []
    for ln in str(msg).splitlines():
        if ln.strip().startswith("LINE "):
            break
        if ln.strip():
            lines.append(ln.strip())
    return " ".join(lines) or "unknown error"


@app.command()
@user_errors
def query(
    sql: Annotated[str, typer.Argument(help="SQL; the sweep's rows are the table `results`.", show_default=False)],
    results: Annotated[
        Path,
        typer.Argument(
            help="A sweep's --out: its dataset directory or NAME.parquet (or a running sweep's NAME.parquet.parts).",
            show_default=False,
        ),
    ],
    format_: Annotated[str, typer.Option("--format", help="table or csv.")] = "table",
) -> None:
    """Run SQL (DuckDB) over a sweep's results: the table `results`."""
    import duckdb

    from ..sweep_store import results_source, unfinished_note

    if format_ not in FORMATS:
        raise UserError(f"--format {format_!r}: expected one of {', '.join(FORMATS)}")
    if not sql.strip():
        raise UserError("query: no SQL given; expected a statement such as 'select * from results'")
    source, dataset = results_source(results)
    if (note := unfinished_note(results)) is not None:
        err.print(f"note: {note}", markup=False, soft_wrap=True)
    con = duckdb.connect()
    try:
        try:
            # union_by_name: the parts of a sweep still running may lack columns a later run added.
            con.read_parquet(source, union_by_name=dataset).create_view("results")
        except duckdb.Error as e:
            raise UserError(f"{results}: cannot read it as Parquet ({_message(str(e))})") from None
        try:
            # execute, not sql(): it runs the statement once, even one with side effects.
            cur = con.execute(sql)
            description: list[Any] | None = None if cur is None else cur.description
            if cur is None or description is None:  # a statement without a result (or only a comment)
                return
            names = [str(d[0]) for d in description]
            rows = _rows(cur)
        except duckdb.Error as e:
            raise UserError(f"query: {_message(str(e))}") from None
    finally:
        con.close()
    if format_ == "csv":
        w = csv.writer(sys.stdout, lineterminator="\n")
        w.writerow(names)
        w.writerows([_csv(v) for v in row] for row in rows)
        sys.stdout.flush()
        return
    # Plain-text columns as `sweep` prints them: wrapped into groups at the
    # terminal's width, never cut; a seed whole, to be pasted into --seed.
    right = [
        any(isinstance(row[i], (int, float, Decimal)) and not isinstance(row[i], bool) for row in rows)
        for i in range(len(names))
    ]
    whole = [n == "seed" or n.endswith("_seed") for n in names]
    cells = [[str(v) if whole[i] and v is not None else fmt(v) for i, v in enumerate(row)] for row in rows]
    lines = summary.table_lines(None, names, cells, right, out.width)
    out.file.write("\n".join(lines) + "\n")


def _rows(cur: Any) -> list[tuple[Any, ...]]:
    """The result's rows, through Arrow: DuckDB's own conversion of a timestamp
    with a time zone (`now()`) needs pytz, which irqlab does not install; Arrow
    writes such a timestamp as its ISO text."""
    import warnings

    import pyarrow as pa

    with warnings.catch_warnings():
        # "Arrow output on a DB-API result makes an extra copy": a sweep's results are small.
        warnings.simplefilter("ignore", UserWarning)
        table = cur.to_arrow_table()
    cols = []
    for col in table.columns:
        if pa.types.is_timestamp(col.type) and col.type.tz is not None:
            col = col.cast(pa.string())
        cols.append(col.to_pylist())
    return list(zip(*cols)) if cols else []


def _csv(v: Any) -> Any:
    return "" if v is None else v
