//! The network softirq's limits under overload: `net_rx_action` stops at
//! `netdev_budget` packets or `netdev_budget_usecs` (a time squeeze),
//! `__do_softirq` restarts at most 10 times within 2 ms, then ksoftirqd takes
//! the rest; no packet is lost on the way.

use crate::run::{run_audited, RunOutput};

/// One queue on one CPU, offered four times what its softirq can take.
const FLOOD: &str = r#"
name = "flood"
duration = "20ms"
warmup = "4ms"
[platform]
cpus = 2
[cpu]
irq_entry = "300ns"
irq_exit = "200ns"
[[nic]]
name = "eth"
gbps = 25
queues = 1
cpus = [0]
handler = "500ns"
per_packet = "2us"
per_poll = "200ns"
"#;

fn go(sets: &[&str]) -> RunOutput {
    let out = run_audited(FLOOD, sets);
    assert_eq!(out.audit.pkts_found, out.audit.pkts_offered, "{sets:?}: every packet received, dropped or in flight");
    out
}

#[test]
fn an_overloaded_softirq_is_squeezed_and_hands_over_to_ksoftirqd() {
    let m = go(&[]).report.metrics;
    // ~0.5 M packets/s polled, 300 per net_rx_action: ~1,700 squeezes/s;
    // 10 net_rx_actions (3,000 packets, 6 ms) per __do_softirq, capped at 2 ms: ~500 wake-ups/s.
    let (squeeze, wake) = (m["softnet.time_squeeze_per_s"], m["softnet.ksoftirqd_wakeups_per_s"]);
    assert!(squeeze > 1_000.0 && squeeze < 2_500.0, "{squeeze} squeezes/s");
    assert!(wake > 300.0 && wake < 700.0, "{wake} ksoftirqd wake-ups/s");
    assert!(m["nic.eth.drop_share"] > 0.5, "a flood drops: {}", m["nic.eth.drop_share"]);
}

#[test]
fn the_time_limit_squeezes_too_and_a_light_load_is_never_squeezed() {
    let huge = go(&["net.netdev_budget=1000000"]).report.metrics;
    let short = go(&["net.netdev_budget=1000000", "net.netdev_budget_usecs=100"]).report.metrics;
    assert!(short["softnet.time_squeeze_per_s"] > 5.0 * huge["softnet.time_squeeze_per_s"].max(1.0));
    let light = go(&["nic.0.gbps=1"]).report.metrics;
    assert_eq!(light["softnet.time_squeeze_per_s"], 0.0);
    assert_eq!(light["softnet.ksoftirqd_wakeups_per_s"], 0.0);
}
