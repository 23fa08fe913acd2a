"""irqlab on real Linux hosts: `measure` (native syscall, sched_yield and
page-fault loops), `record` (interrupt events via tracefs, to Parquet),
`monitor` (live rates from /proc) and `replay` (recorded arrivals through a
modelled policy)."""
