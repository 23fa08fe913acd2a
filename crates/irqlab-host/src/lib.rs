//! The loops `irqlab measure` times on a real Linux host. They are native so
//! that what is measured is the kernel's path, not an interpreter's: each is
//! the will-it-scale shape of its test, and returns raw counts; Python forks,
//! pins, warms up and takes medians.

use std::time::{Duration, Instant};

/// `syscall(SYS_gettid)` `calls` times; returns ns per call.
pub fn gettid_ns(calls: u64) -> f64 {
    let t = Instant::now();
    for _ in 0..calls {
        // SAFETY: gettid takes no arguments and cannot fail.
        unsafe {
            libc::syscall(libc::SYS_gettid);
        }
    }
    t.elapsed().as_nanos() as f64 / calls.max(1) as f64
}

/// What a timed loop did: its count, the time it really took (a loop checks
/// the clock only between batches, so it overruns its nominal interval), and
/// the minor page faults the process took meanwhile (`getrusage` `ru_minflt`).
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub struct Counted {
    pub count: u64,
    pub elapsed_ns: u64,
    pub minor_faults: u64,
}

fn minor_faults() -> u64 {
    // SAFETY: getrusage writes into the struct it is given.
    unsafe {
        let mut ru: libc::rusage = std::mem::zeroed();
        libc::getrusage(libc::RUSAGE_SELF, &mut ru);
        ru.ru_minflt as u64
    }
}

fn timed(f: impl FnOnce() -> Result<u64, String>) -> Result<Counted, String> {
    let (t, f0) = (Instant::now(), minor_faults());
    let count = f()?;
    Ok(Counted { count, elapsed_ns: t.elapsed().as_nanos() as u64, minor_faults: minor_faults() - f0 })
}

/// will-it-scale `sched_yield`: yield in a loop for `dur`; returns the calls made.
pub fn sched_yield_ops(dur: Duration) -> Counted {
    timed(|| Ok(yield_loop(dur))).expect("the yield loop cannot fail")
}

fn yield_loop(dur: Duration) -> u64 {
    let end = Instant::now() + dur;
    let mut ops = 0u64;
    loop {
        // Reading the clock every call would cost as much as the yield on a fast path.
        for _ in 0..256 {
            // SAFETY: sched_yield has no preconditions.
            unsafe {
                libc::sched_yield();
            }
        }
        ops += 256;
        if Instant::now() >= end {
            return ops;
        }
    }
}

/// This machine's physical memory in bytes (0 if unknown): a run's memory
/// ceiling is half of it.
pub fn physical_memory() -> u64 {
    // SAFETY: sysconf has no preconditions.
    let (pages, size) = unsafe { (libc::sysconf(libc::_SC_PHYS_PAGES), libc::sysconf(libc::_SC_PAGE_SIZE)) };
    if pages > 0 && size > 0 {
        pages as u64 * size as u64
    } else {
        0
    }
}

const PAGE: usize = 4096;

/// will-it-scale `page_fault1`: map `bytes` of anonymous memory, write one byte
/// per page, unmap; repeat for `dur`. The count is pages written (will-it-scale's
/// ops); with transparent huge pages one fault may map 512 of them, which
/// `minor_faults` shows.
pub fn page_faults(dur: Duration, bytes: usize) -> Result<Counted, String> {
    timed(|| fault_loop(dur, bytes))
}

fn fault_loop(dur: Duration, bytes: usize) -> Result<u64, String> {
    let end = Instant::now() + dur;
    let bytes = bytes.max(PAGE) / PAGE * PAGE;
    let mut faults = 0u64;
    loop {
        // SAFETY: a fresh private anonymous mapping, written only within its length, then unmapped.
        unsafe {
            let p =
                libc::mmap(std::ptr::null_mut(), bytes, libc::PROT_READ | libc::PROT_WRITE, libc::MAP_PRIVATE | libc::MAP_ANONYMOUS, -1, 0);
            if p == libc::MAP_FAILED {
                return Err(format!("mmap of {bytes} bytes failed: {}", std::io::Error::last_os_error()));
            }
            let base = p as *mut u8;
            let mut off = 0;
            while off < bytes {
                std::ptr::write_volatile(base.add(off), 1);
                off += PAGE;
            }
            libc::munmap(p, bytes);
        }
        faults += (bytes / PAGE) as u64;
        if Instant::now() >= end {
            return Ok(faults);
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn loops_count_something_plausible() {
        let ns = gettid_ns(20_000);
        assert!(ns > 1.0 && ns < 100_000.0, "{ns}");
        let ops = sched_yield_ops(Duration::from_millis(20));
        assert!(ops.count >= 256 && ops.elapsed_ns >= 20_000_000);
        let f = page_faults(Duration::from_millis(20), 4 << 20).unwrap();
        assert!(f.count >= 1024 && f.count.is_multiple_of(1024));
        // Every pass maps fresh memory: at least one fault per pass (a huge page), at most one per page (plus a few).
        assert!(f.minor_faults >= f.count / 1024 && f.minor_faults <= f.count + 64, "{f:?}");
        assert!(f.elapsed_ns >= 20_000_000);
    }
}
