//! The seam between the machine's core and its components (one per mechanism
//! or device family: cross-calls, GSIM, NVMe, NIC...). The core never names a
//! component: it calls the hook points below through the [`Parts`] list it is
//! built with, and a component reaches the core only through `&mut Machine<P>`
//! and its own state (`m.parts.get()`, via [`Has`]).
//!
//! Dispatch is static: `Machine<P>` is monomorphised for one list of parts, and
//! a hook a component does not implement is an empty inline function. Hooks
//! that concern one source or one NAPI context go only to its owner (the
//! component that created it, `Source::owner`); the others go to every
//! component in the order of registration.
//!
//! Registering a component is one line in the `parts!` list of
//! `components/mod.rs`.

use crate::engine::stats::Report;
use crate::engine::time::Ps;
use crate::engine::Scheduler;
use crate::platform::cpu::Level;
use crate::platform::machine::{Ev, Machine};
use crate::scenario::Scenario;

pub use crate::platform::machine::Parts;
pub use crate::platform::source::NO_OWNER;

/// A component's event: a small code (its discriminant) and one `u32` argument
/// (an index into the component's own tables), so the machine's event stays
/// eight bytes whatever components there are.
pub trait PartEvent: Copy {
    fn code(self) -> u8;
    fn from_code(code: u8) -> Self;
}

/// A component that schedules no event of its own.
#[derive(Clone, Copy, Debug)]
pub enum NoEvent {}

impl PartEvent for NoEvent {
    fn code(self) -> u8 {
        match self {}
    }
    fn from_code(code: u8) -> Self {
        unreachable!("no events (code {code})")
    }
}

/// Declares a component's event enum (unit variants) with its [`PartEvent`] codes.
#[macro_export]
macro_rules! part_events {
    ($(#[$m:meta])* $vis:vis enum $name:ident { $($(#[$vm:meta])* $v:ident),+ $(,)? }) => {
        $(#[$m])*
        #[derive(Clone, Copy, Debug, PartialEq, Eq)]
        #[repr(u8)]
        $vis enum $name { $($(#[$vm])* $v),+ }
        impl $crate::platform::parts::PartEvent for $name {
            #[inline]
            fn code(self) -> u8 {
                self as u8
            }
            #[inline]
            fn from_code(code: u8) -> Self {
                const ALL: &[$name] = &[$($name::$v),+];
                ALL[code as usize]
            }
        }
    };
}

/// A component: its state, built from its part of the scenario, and the hook
/// points it plugs into. Every hook but `build` has an empty default.
pub trait Component: Default + Sized {
    type Ev: PartEvent;

    /// Builds the component from the scenario; it may add sources to the core
    /// (`Machine::add_source`) and NAPI contexts (`Machine::napi_register`).
    fn build<P: Has<Self>>(m: &mut Machine<P>, sc: &Scenario, seed: u64) -> Self;

    /// Schedules the first events, once every CPU runs its first frame.
    fn start<P: Has<Self>>(_m: &mut Machine<P>, _s: &mut Scheduler<Ev>) {}

    /// One of the component's own events.
    fn handle<P: Has<Self>>(_m: &mut Machine<P>, _s: &mut Scheduler<Ev>, _ev: Self::Ev, _arg: u32) {}

    /// Handler start of an owned source on CPU `c` (the core has counted it):
    /// the handler's length.
    #[inline]
    fn handler_start<P: Has<Self>>(m: &mut Machine<P>, _s: &mut Scheduler<Ev>, _c: usize, i: u32) -> Ps {
        m.srcs[i as usize].handler
    }

    /// The handler of an owned source marked `continues` ran its length: more
    /// of it to run (a loop in the handler that looks again, as the posted-MSI
    /// notification does), or 0 when it is through.
    #[inline]
    fn handler_continue<P: Has<Self>>(_m: &mut Machine<P>, _s: &mut Scheduler<Ev>, _c: usize, _i: u32) -> Ps {
        0
    }

    /// A message for source `i`, whose `poster` this component is, reached the
    /// remapping unit and set its pending bit (the descriptor's PIR bit); the
    /// component notifies the CPU.
    fn msi_posted<P: Has<Self>>(_m: &mut Machine<P>, _s: &mut Scheduler<Ev>, i: u32) {
        unreachable!("source {i} names a poster that does not post")
    }

    /// After the handler of a source that is owned or moderated (`Source::special`
    /// or `Source::gsim`), on every component, before `irq_exit()`.
    #[inline]
    fn handler_end<P: Has<Self>>(_m: &mut Machine<P>, _s: &mut Scheduler<Ev>, _c: usize, _i: u32, _level: Level) {}

    /// `irq_exit()` of an owned source, after its softirq work was raised.
    #[inline]
    fn irq_exit<P: Has<Self>>(_m: &mut Machine<P>, _c: usize, _i: u32, _level: Level) {}

    /// A DMA write the component submitted (`Machine::dma`) landed in memory.
    fn dma_landed<P: Has<Self>>(_m: &mut Machine<P>, _s: &mut Scheduler<Ev>, _arg: u32) {}

    /// A poll round of an owned NAPI context starts: its length.
    fn napi_poll<P: Has<Self>>(_m: &mut Machine<P>, _arg: u32) -> Ps {
        0
    }

    /// The poll round reached the end of what it took: more time if it takes
    /// more (a driver reads its completions as it goes, up to the budget), or 0.
    fn napi_continue<P: Has<Self>>(_m: &mut Machine<P>, _arg: u32) -> Ps {
        0
    }

    /// The poll round ended (`napi_poll` returned): whether to poll again.
    fn napi_done<P: Has<Self>>(_m: &mut Machine<P>, _s: &mut Scheduler<Ev>, _arg: u32) -> bool {
        false
    }

    /// Thread work the component queued (`Machine::thread_work`) starts on CPU `c`:
    /// the job's thread is running (what it waited for, it has now).
    fn thread_start<P: Has<Self>>(_m: &mut Machine<P>, _s: &mut Scheduler<Ev>, _c: usize, _arg: u32) {}

    /// Thread work the component queued (`Machine::thread_work`) ran to its end on CPU `c`.
    fn thread_done<P: Has<Self>>(_m: &mut Machine<P>, _s: &mut Scheduler<Ev>, _c: usize, _arg: u32) {}

    /// A sample of the time series at `now` (each one covers `m.interval`).
    fn sample<P: Has<Self>>(_m: &mut Machine<P>, _now: Ps) {}

    /// The end of warm-up: zero the statistics.
    fn reset<P: Has<Self>>(_m: &mut Machine<P>, _now: Ps) {}

    /// The run's metrics and histograms.
    fn report<P: Has<Self>>(_m: &mut Machine<P>, _r: &mut Report, _now: Ps, _secs: f64) {}

    /// End-of-run bookkeeping for the invariant checks (`m.audit`).
    fn audit<P: Has<Self>>(_m: &mut Machine<P>) {}
}

/// A parts list that holds component `T`: its state, and its id for owned
/// sources and events.
pub trait Has<T: Component>: Parts {
    const ID: u8;
    fn get(&mut self) -> &mut T;
    fn get_ref(&self) -> &T;

    /// The machine event that delivers `ev(arg)` to `T`.
    #[inline]
    fn ev(ev: T::Ev, arg: u32) -> Ev {
        Ev::Part { part: Self::ID, code: ev.code(), arg }
    }
}

/// A one-way dependency: component `T`, which a dependent component (GICv4 on
/// the hypervisor's scheduler) reaches through the machine. Its scenario check
/// makes sure `T` is configured whenever the dependent is.
#[inline]
pub fn dep<T: Component + 'static, P: Parts>(m: &mut Machine<P>) -> &mut T {
    m.parts.find::<T>().expect("a component's dependency is registered in the parts! list")
}

/// The machine event that delivers `ev(arg)` to component `T` (found by type:
/// for a dependency's events, and for code generic over the parts list).
#[inline]
pub fn ev_of<T: Component + 'static, P: Parts>(ev: T::Ev, arg: u32) -> Ev {
    Ev::Part { part: P::id_of::<T>().expect("a registered component"), code: ev.code(), arg }
}

/// Runs a continuation event now, in the caller's context: a component's own
/// event goes straight to its handler, a core event is queued at this instant.
#[inline]
pub fn dispatch<P: Parts>(m: &mut Machine<P>, s: &mut Scheduler<Ev>, ev: Ev) {
    match ev {
        Ev::Part { part, code, arg } => P::handle(m, s, part, code, arg),
        other => s.after(0, other),
    }
}

/// Declares a list of components: `parts! { pub struct Name { field: Type, ... } }`.
/// Registration order is the order of the build, start and broadcast hooks.
#[macro_export]
macro_rules! parts {
    ($vis:vis struct $name:ident { $($field:ident : $ty:ty),+ $(,)? }) => {
        #[derive(Default)]
        $vis struct $name { $(pub $field: $ty),+ }

        $crate::parts!(@has $name, 0u8, $($field: $ty),+);

        #[allow(unused_assignments)]
        impl $crate::platform::parts::Parts for $name {
            fn build(m: &mut $crate::platform::machine::Machine<Self>, sc: &$crate::scenario::Scenario, seed: u64) {
                $( let x = <$ty as $crate::platform::parts::Component>::build(m, sc, seed); m.parts.$field = x; )+
            }
            fn start(m: &mut $crate::platform::machine::Machine<Self>, s: &mut $crate::engine::Scheduler<$crate::platform::machine::Ev>) {
                $( <$ty as $crate::platform::parts::Component>::start(m, s); )+
            }
            #[inline]
            // A component with `NoEvent` makes its arm unreachable.
            #[allow(unreachable_code, unused_variables)]
            fn handle(m: &mut $crate::platform::machine::Machine<Self>, s: &mut $crate::engine::Scheduler<$crate::platform::machine::Ev>, part: u8, code: u8, arg: u32) {
                $( if part == <Self as $crate::platform::parts::Has<$ty>>::ID {
                    let ev = <<$ty as $crate::platform::parts::Component>::Ev as $crate::platform::parts::PartEvent>::from_code(code);
                    return <$ty as $crate::platform::parts::Component>::handle(m, s, ev, arg);
                } )+
                unreachable!("an event for part {part}, which is not registered");
            }
            #[inline]
            fn handler_start(m: &mut $crate::platform::machine::Machine<Self>, s: &mut $crate::engine::Scheduler<$crate::platform::machine::Ev>, c: usize, i: u32, owner: u8) -> $crate::engine::Ps {
                $( if owner == <Self as $crate::platform::parts::Has<$ty>>::ID {
                    return <$ty as $crate::platform::parts::Component>::handler_start(m, s, c, i);
                } )+
                m.srcs[i as usize].handler
            }
            #[inline]
            fn handler_end(m: &mut $crate::platform::machine::Machine<Self>, s: &mut $crate::engine::Scheduler<$crate::platform::machine::Ev>, c: usize, i: u32, level: $crate::platform::cpu::Level) {
                $( <$ty as $crate::platform::parts::Component>::handler_end(m, s, c, i, level); )+
            }
            #[inline]
            fn irq_exit(m: &mut $crate::platform::machine::Machine<Self>, c: usize, i: u32, level: $crate::platform::cpu::Level, owner: u8) {
                $( if owner == <Self as $crate::platform::parts::Has<$ty>>::ID {
                    return <$ty as $crate::platform::parts::Component>::irq_exit(m, c, i, level);
                } )+
            }
            #[inline]
            fn handler_continue(m: &mut $crate::platform::machine::Machine<Self>, s: &mut $crate::engine::Scheduler<$crate::platform::machine::Ev>, c: usize, i: u32, owner: u8) -> $crate::engine::Ps {
                $( if owner == <Self as $crate::platform::parts::Has<$ty>>::ID {
                    return <$ty as $crate::platform::parts::Component>::handler_continue(m, s, c, i);
                } )+
                0
            }
            fn msi_posted(m: &mut $crate::platform::machine::Machine<Self>, s: &mut $crate::engine::Scheduler<$crate::platform::machine::Ev>, i: u32, poster: u8) {
                $( if poster == <Self as $crate::platform::parts::Has<$ty>>::ID {
                    return <$ty as $crate::platform::parts::Component>::msi_posted(m, s, i);
                } )+
                unreachable!("a poster that is not registered");
            }
            fn dma_landed(m: &mut $crate::platform::machine::Machine<Self>, s: &mut $crate::engine::Scheduler<$crate::platform::machine::Ev>, owner: u8, arg: u32) {
                $( if owner == <Self as $crate::platform::parts::Has<$ty>>::ID {
                    return <$ty as $crate::platform::parts::Component>::dma_landed(m, s, arg);
                } )+
            }
            fn napi_poll(m: &mut $crate::platform::machine::Machine<Self>, owner: u8, arg: u32) -> $crate::engine::Ps {
                $( if owner == <Self as $crate::platform::parts::Has<$ty>>::ID {
                    return <$ty as $crate::platform::parts::Component>::napi_poll(m, arg);
                } )+
                0
            }
            fn napi_continue(m: &mut $crate::platform::machine::Machine<Self>, owner: u8, arg: u32) -> $crate::engine::Ps {
                $( if owner == <Self as $crate::platform::parts::Has<$ty>>::ID {
                    return <$ty as $crate::platform::parts::Component>::napi_continue(m, arg);
                } )+
                0
            }
            fn napi_done(m: &mut $crate::platform::machine::Machine<Self>, s: &mut $crate::engine::Scheduler<$crate::platform::machine::Ev>, owner: u8, arg: u32) -> bool {
                $( if owner == <Self as $crate::platform::parts::Has<$ty>>::ID {
                    return <$ty as $crate::platform::parts::Component>::napi_done(m, s, arg);
                } )+
                false
            }
            fn thread_start(m: &mut $crate::platform::machine::Machine<Self>, s: &mut $crate::engine::Scheduler<$crate::platform::machine::Ev>, c: usize, owner: u8, arg: u32) {
                $( if owner == <Self as $crate::platform::parts::Has<$ty>>::ID {
                    return <$ty as $crate::platform::parts::Component>::thread_start(m, s, c, arg);
                } )+
            }
            fn thread_done(m: &mut $crate::platform::machine::Machine<Self>, s: &mut $crate::engine::Scheduler<$crate::platform::machine::Ev>, c: usize, owner: u8, arg: u32) {
                $( if owner == <Self as $crate::platform::parts::Has<$ty>>::ID {
                    return <$ty as $crate::platform::parts::Component>::thread_done(m, s, c, arg);
                } )+
            }
            fn sample(m: &mut $crate::platform::machine::Machine<Self>, now: $crate::engine::Ps) {
                $( <$ty as $crate::platform::parts::Component>::sample(m, now); )+
            }
            fn reset(m: &mut $crate::platform::machine::Machine<Self>, now: $crate::engine::Ps) {
                $( <$ty as $crate::platform::parts::Component>::reset(m, now); )+
            }
            fn report(m: &mut $crate::platform::machine::Machine<Self>, r: &mut $crate::engine::stats::Report, now: $crate::engine::Ps, secs: f64) {
                $( <$ty as $crate::platform::parts::Component>::report(m, r, now, secs); )+
            }
            fn audit(m: &mut $crate::platform::machine::Machine<Self>) {
                $( <$ty as $crate::platform::parts::Component>::audit(m); )+
            }
            fn find<T: 'static>(&mut self) -> Option<&mut T> {
                $( if let Some(x) = (&mut self.$field as &mut dyn std::any::Any).downcast_mut::<T>() {
                    return Some(x);
                } )+
                None
            }
            #[inline]
            fn id_of<T: 'static>() -> Option<u8> {
                $( if std::any::TypeId::of::<T>() == std::any::TypeId::of::<$ty>() {
                    return Some(<Self as $crate::platform::parts::Has<$ty>>::ID);
                } )+
                None
            }
        }
    };
    (@has $name:ident, $id:expr, $field:ident : $ty:ty $(, $rf:ident : $rt:ty)*) => {
        impl $crate::platform::parts::Has<$ty> for $name {
            const ID: u8 = $id;
            #[inline(always)]
            fn get(&mut self) -> &mut $ty {
                &mut self.$field
            }
            #[inline(always)]
            fn get_ref(&self) -> &$ty {
                &self.$field
            }
        }
        $crate::parts!(@has $name, $id + 1u8, $($rf : $rt),*);
    };
    (@has $name:ident, $id:expr, ) => {};
}
