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

/// will-it-scale `sched_yield`: yield in a loop for `dur`; returns the number of calls.
pub fn sched_yield_ops(dur: Duration) -> u64 {
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

const PAGE: usize = 4096;

/// will-it-scale `page_fault1`: map `bytes` of anonymous memory, write one byte
/// per page (a fault each), unmap; repeat for `dur`. Returns pages faulted in.
pub fn page_faults(dur: Duration, bytes: usize) -> Result<u64, String> {
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
        assert!(ops >= 256);
        let f = page_faults(Duration::from_millis(20), 4 << 20).unwrap();
        assert!(f >= 1024 && f.is_multiple_of(1024));
    }
}
