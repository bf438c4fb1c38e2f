//! The calling thread's CPU clock, next to the wall clock, for timing on a machine whose cores are shared.
//!
//! Why: on a shared VM (a 2-vCPU KVM guest, say) the hypervisor takes the vCPUs away for stretches (steal time:
//! `/proc/stat` counted about as many stolen as user jiffies while the speed probe ran on one). Wall time counts
//! those stretches; the guest kernel's per-task CPU clock does not (paravirtual
//! steal accounting). A fixed 1-ms matrix product timed 300 times there spread over 0.94-1.89 ms (10th-90th
//! percentile) on the wall clock and 0.92-1.19 ms on the thread's CPU clock. With a one-thread engine an
//! inference runs on the calling thread, so that thread's CPU clock is the time the inference computed,
//! whatever else the process does meanwhile; with a thread pool the work runs elsewhere and only the wall
//! clock means anything.

/// CPU time the calling thread has used so far, in ms; `None` if the clock cannot be read.
pub fn thread_cpu_ms() -> Option<f64> {
    let mut t = libc::timespec { tv_sec: 0, tv_nsec: 0 };
    // SAFETY: `t` is a valid, writable timespec for the duration of the call.
    let rc = unsafe { libc::clock_gettime(libc::CLOCK_THREAD_CPUTIME_ID, &mut t) };
    (rc == 0).then(|| t.tv_sec as f64 * 1e3 + t.tv_nsec as f64 / 1e6)
}

/// Wall time and the calling thread's CPU time of one call of `f`, in ms (the CPU time `None` when the clock
/// cannot be read).
pub fn time_both<T>(f: impl FnOnce() -> T) -> (T, f64, Option<f64>) {
    let cpu_before = thread_cpu_ms();
    let wall = std::time::Instant::now();
    let out = f();
    let wall_ms = wall.elapsed().as_secs_f64() * 1e3;
    let cpu_ms = cpu_before.zip(thread_cpu_ms()).map(|(a, b)| (b - a).max(0.0));
    (out, wall_ms, cpu_ms)
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn cpu_clock_counts_computing_and_not_sleeping() {
        let ((), _, slept) = time_both(|| std::thread::sleep(std::time::Duration::from_millis(30)));
        let slept = slept.expect("the thread CPU clock is readable on Linux");
        let (sum, wall, busy) = time_both(|| {
            let started = std::time::Instant::now();
            let mut x = 0u64;
            while started.elapsed().as_millis() < 30 {
                x = x.wrapping_mul(6364136223846793005).wrapping_add(1442695040888963407);
            }
            x
        });
        assert!(sum != 1, "keeps the loop");
        let busy = busy.unwrap();
        // Other test threads compute meanwhile: this thread's clock counts none of it.
        assert!(slept < 5.0, "sleeping 30 ms used {slept} ms of CPU");
        // Busy for 30 ms of wall time: at most that much CPU, some of it however many threads share the cores.
        assert!(busy <= wall + 1.0 && busy > 0.1, "busy {busy} ms of CPU in {wall} ms");
    }
}
