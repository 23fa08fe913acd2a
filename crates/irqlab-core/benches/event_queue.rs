//! The event queue alone: a hold model (pop the earliest, push one a random
//! time later) at the queue sizes irqlab runs at, and the bare scheduler with
//! cancellable timers. Run with `cargo bench -p irqlab-core`.

use criterion::{black_box, criterion_group, criterion_main, BatchSize, Criterion, Throughput};
use irqlab_core::engine::rng::{exp_sample, stream};
use irqlab_core::engine::{EventQueue, HeapQueue, Model, Scheduler};

const OPS: u64 = 100_000;

fn hold(c: &mut Criterion) {
    let mut g = c.benchmark_group("hold");
    g.throughput(Throughput::Elements(OPS));
    for size in [32usize, 1024, 65536] {
        g.bench_function(format!("heap_{size}"), |b| {
            b.iter_batched(
                || {
                    let mut q: HeapQueue<u32> = HeapQueue::default();
                    let mut r = stream(1, "hold");
                    for i in 0..size {
                        q.push(0, (exp_sample(&mut r, 1e6)) as u64, i as u32);
                    }
                    (q, r)
                },
                |(mut q, mut r)| {
                    for _ in 0..OPS {
                        let (t, e) = q.pop().unwrap();
                        q.push(t, t + exp_sample(&mut r, 1e6) as u64, e);
                    }
                    black_box(q.len())
                },
                BatchSize::LargeInput,
            )
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
    g.throughput(Throughput::Elements(100_000)); // interrupts in 0.1 s simulated
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

criterion_group!(benches, hold, bare_reference);
criterion_main!(benches);
