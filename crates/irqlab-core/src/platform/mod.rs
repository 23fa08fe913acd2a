//! The machine's core: CPUs as frame stacks with their masks (`cpu`, `exec`),
//! the interrupt controller's pending state (`irqchip`), the platform fabric and
//! DMA paths (`fabric`), MSI sources (`msi`), the hypervisor's injection path
//! (`inject`) and an idle vCPU's halt in the host (`halt`), the pseudo-NMI cost model (`pmr`), idle states
//! (`cstate`, `wake`), and the machine itself
//! (`machine`): the core plus the components, which plug in through the hook
//! points of `parts`.

/// For the layout tests of hot structs (`Source`, `Cpu`): each named field's
/// end offset in `$ty`, its size taken from the field itself, so that a
/// widened field moves its end without anyone editing the list.
#[cfg(test)]
macro_rules! field_ends {
    ($ty:ty; $($f:ident),* $(,)?) => {{
        fn size<T>(_: fn(&$ty) -> &T) -> usize {
            std::mem::size_of::<T>()
        }
        [$( (stringify!($f), std::mem::offset_of!($ty, $f) + size(|v| &v.$f)) ),*]
    }};
}

pub mod cpu;
pub mod cstate;
pub mod dma;
pub mod exec;
pub mod fabric;
pub mod halt;
pub mod inject;
pub mod irqchip;
pub mod machine;
pub mod mask;
pub mod msi;
pub mod parts;
pub mod pmr;
pub mod report;
pub mod source;
pub mod wake;
