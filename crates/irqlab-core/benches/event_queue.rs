//! The event queue alone: a hold model (pop the earliest, push one a random
//! time later) at the queue sizes irqlab runs at; the bare scheduler with
//! cancellable timers; and the whole machine at 1, 64 and 2,048 CPUs. Run with `cargo bench -p irqlab-core`.

use criterion::{black_box, criterion_group, criterion_main, BatchSize, Criterion, Throughput};
use irqlab_core::engine::rng::{exp_sample, stream};
use irqlab_core::engine::{EventQueue, HeapQueue, Model, RadixQueue, Scheduler};

const OPS: u64 = 100_000;

/// The hold model on one queue type: `size` pending events, then OPS rounds of
/// "pop the earliest, push one a random time later" (the pending count stays put).
fn hold_on<Q: EventQueue<u32> + Default>(b: &mut criterion::Bencher, size: usize) {
    b.iter_batched(
        || {
            let mut q = Q::default();
            let mut r = stream(1, "hold");
            for i in 0..size {
                q.push(0, exp_sample(&mut r, 1e6) as u64 + 1, i as u32);
            }
            (q, r)
        },
        |(mut q, mut r)| {
            for _ in 0..OPS {
                let (t, e) = q.pop().unwrap();
                q.push(t, t + exp_sample(&mut r, 1e6) as u64 + 1, e);
            }
            black_box(q.len())
        },
        BatchSize::LargeInput,
    )
}

/// The binary heap against the radix heap at 64, 4,096, 65,536 and 1 M pending events:
/// the radix heap's cost per event should stay flat where the heap's grows.
fn hold(c: &mut Criterion) {
    let mut g = c.benchmark_group("hold");
    g.throughput(Throughput::Elements(OPS));
    g.sample_size(10);
    for size in [64usize, 4096, 65536, 1 << 20] {
        g.bench_function(format!("heap_{size}"), |b| hold_on::<HeapQueue<u32>>(b, size));
        g.bench_function(format!("radix_{size}"), |b| hold_on::<RadixQueue<u32>>(b, size));
    }
    g.finish();
}

/// The whole machine on the reference model's load spread over 1, 64 and 2,048
/// CPUs (`bench::scale_scenario`: 32 sources per CPU, the same interrupt count):
/// events per second should not fall far as the machine grows.
fn machine_scale(c: &mut Criterion) {
    let mut g = c.benchmark_group("machine");
    g.sample_size(10);
    for cpus in [1u32, 64, 2048] {
        let sc = irqlab_core::load(&irqlab_core::bench::scale_scenario(cpus), "scale.toml", &[]).unwrap();
        let events = irqlab_core::run(&sc, Default::default()).report.metrics["events"];
        g.throughput(Throughput::Elements(events as u64));
        g.bench_function(format!("cpus_{cpus}"), |b| {
            b.iter(|| black_box(irqlab_core::run(&sc, Default::default()).report.metrics["events"]))
        });
    }
    g.finish();
}

/// 32 Poisson sources into one FIFO server, on the bare scheduler: the floor
/// under the reference scenario, without any machine model.
struct Mm1 {
    rng: Vec<irqlab_core::engine::rng::Rng>,
    busy: bool,
    queued: u32,
    done: u64,
}
#[derive(Clone, Copy)]
enum Ev {
    Arrive(u32),
    Done,
}
impl Model for Mm1 {
    type Event = Ev;
    fn handle(&mut self, s: &mut Scheduler<Ev>, ev: Ev) {
        match ev {
            Ev::Arrive(i) => {
                let gap = exp_sample(&mut self.rng[i as usize], 32e6) as u64;
                s.after(gap, Ev::Arrive(i));
                if self.busy {
                    self.queued += 1;
                } else {
                    self.busy = true;
                    s.timer_after(300_000, Ev::Done);
                }
            }
            Ev::Done => {
                self.done += 1;
                if self.queued > 0 {
                    self.queued -= 1;
                    s.timer_after(300_000, Ev::Done);
                } else {
                    self.busy = false;
                }
            }
        }
    }
}

fn bare_reference(c: &mut Criterion) {
    let mut g = c.benchmark_group("scheduler");
    // Events, as the machine group counts them (about 100,000 interrupts in 0.1 s
    // simulated, two events each: an arrival and a handler end), so that both
    // groups' "elem/s" are events per second (it counted interrupts; an audit).
    g.throughput(Throughput::Elements(200_000));
    g.bench_function("32_sources_one_server_0.1s", |b| {
        b.iter(|| {
            let mut m = Mm1 { rng: (0..32).map(|i| stream(1, &format!("s{i}"))).collect(), busy: false, queued: 0, done: 0 };
            let mut s = Scheduler::new();
            for i in 0..32 {
                s.at(0, Ev::Arrive(i));
            }
            s.run_until(&mut m, 100_000_000_000);
            black_box(m.done)
        })
    });
    g.finish();
}

criterion_group!(benches, hold, bare_reference, machine_scale);
criterion_main!(benches);
