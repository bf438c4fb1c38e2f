//! A counting global allocator: the memory sensor's source. Heap use is what a layer needs beyond the engine's
//! fixed cost (weights, input, output, scratch), and counting allocations is exact and portable where RSS is
//! page-granular and never shrinks.
//!
//! Only the binary installs it (`#[global_allocator]` in `src/main.rs`); the library, when linked into something
//! else, sees [`is_installed`] false and reports memory as unavailable instead of reporting zeros.
//!
//! Engines written in C++ (ONNX Runtime) allocate with `malloc` and `operator new`, which a Rust global
//! allocator never sees. On glibc the binary also replaces the C heap's entry points (`malloc`, `free`, ...,
//! glibc's documented way to interpose an allocator) with thin wrappers that forward to glibc's own
//! implementation and report the usable size of every block to [`c_heap_grew`] and [`c_heap_shrank`], into the
//! same counters, once [`start_counting_c_heap`] was called (before such an engine is loaded). The Rust allocator then calls glibc's implementation directly, so no block is counted twice:
//! Rust blocks by their requested size (as always), C blocks by their usable size (all the C heap knows at
//! `free`). [`counts_foreign_heap`] says whether that replacement is in effect for every library in the process.

use std::alloc::{GlobalAlloc, Layout};
use std::sync::atomic::{AtomicBool, AtomicIsize, AtomicUsize, Ordering::Relaxed};

/// The system allocator plus counters of current and peak live heap bytes.
pub struct CountingAlloc;

/// Signed: a C block freed here may have been allocated before the counting began (by the dynamic loader).
static CURRENT: AtomicIsize = AtomicIsize::new(0);
static PEAK: AtomicIsize = AtomicIsize::new(0);
static INSTALLED: AtomicBool = AtomicBool::new(false);
/// Address of the binary's replacement `malloc`, once it has announced itself.
static C_HEAP_HOOK: AtomicUsize = AtomicUsize::new(0);
/// Whether C blocks are counted: only from the moment an engine that allocates there is loaded.
static C_HEAP_COUNTING: AtomicBool = AtomicBool::new(false);
/// Set by a process that will never read the counters ([`stop_counting`]).
static STOPPED: AtomicBool = AtomicBool::new(false);

fn grew(bytes: usize) {
    if STOPPED.load(Relaxed) {
        return;
    }
    let bytes = bytes as isize;
    let now = CURRENT.fetch_add(bytes, Relaxed) + bytes;
    // Read before writing: most allocations set no new peak, and an unconditional read-modify-write would bounce
    // the peak's cache line between threads that allocate at once.
    if now > PEAK.load(Relaxed) {
        PEAK.fetch_max(now, Relaxed);
    }
}

fn shrank(bytes: usize) {
    if !STOPPED.load(Relaxed) {
        CURRENT.fetch_sub(bytes as isize, Relaxed);
    }
}

fn counted_rust(bytes: usize) {
    grew(bytes);
    if !INSTALLED.load(Relaxed) {
        INSTALLED.store(true, Relaxed);
    }
}

/// glibc's own allocator, bypassing the binary's replacement of the C entry points.
#[cfg(all(target_os = "linux", target_env = "gnu"))]
mod heap {
    use std::alloc::Layout;
    use std::ffi::c_void;

    unsafe extern "C" {
        fn __libc_malloc(size: usize) -> *mut c_void;
        fn __libc_calloc(count: usize, size: usize) -> *mut c_void;
        fn __libc_realloc(ptr: *mut c_void, size: usize) -> *mut c_void;
        fn __libc_memalign(align: usize, size: usize) -> *mut c_void;
        fn __libc_free(ptr: *mut c_void);
    }

    /// What glibc's `malloc` guarantees: 16 bytes on 64-bit targets, 8 on 32-bit ones (std's own rule).
    const MIN_ALIGN: usize = if cfg!(target_pointer_width = "64") { 16 } else { 8 };

    fn plain(layout: &Layout, size: usize) -> bool {
        layout.align() <= MIN_ALIGN && layout.align() <= size
    }

    pub unsafe fn alloc(layout: Layout) -> *mut u8 {
        unsafe {
            if plain(&layout, layout.size()) {
                __libc_malloc(layout.size()).cast()
            } else {
                __libc_memalign(layout.align(), layout.size()).cast()
            }
        }
    }

    pub unsafe fn alloc_zeroed(layout: Layout) -> *mut u8 {
        unsafe {
            if plain(&layout, layout.size()) {
                __libc_calloc(layout.size(), 1).cast()
            } else {
                let p = alloc(layout);
                if !p.is_null() {
                    std::ptr::write_bytes(p, 0, layout.size());
                }
                p
            }
        }
    }

    pub unsafe fn dealloc(ptr: *mut u8, _layout: Layout) {
        unsafe { __libc_free(ptr.cast()) }
    }

    pub unsafe fn realloc(ptr: *mut u8, layout: Layout, new_size: usize) -> *mut u8 {
        unsafe {
            if plain(&layout, new_size) {
                return __libc_realloc(ptr.cast(), new_size).cast();
            }
            let new = alloc(Layout::from_size_align_unchecked(new_size, layout.align()));
            if !new.is_null() {
                std::ptr::copy_nonoverlapping(ptr, new, layout.size().min(new_size));
                dealloc(ptr, layout);
            }
            new
        }
    }
}

#[cfg(not(all(target_os = "linux", target_env = "gnu")))]
mod heap {
    use std::alloc::{GlobalAlloc, Layout, System};

    pub unsafe fn alloc(layout: Layout) -> *mut u8 {
        unsafe { System.alloc(layout) }
    }
    pub unsafe fn alloc_zeroed(layout: Layout) -> *mut u8 {
        unsafe { System.alloc_zeroed(layout) }
    }
    pub unsafe fn dealloc(ptr: *mut u8, layout: Layout) {
        unsafe { System.dealloc(ptr, layout) }
    }
    pub unsafe fn realloc(ptr: *mut u8, layout: Layout, new_size: usize) -> *mut u8 {
        unsafe { System.realloc(ptr, layout, new_size) }
    }
}

unsafe impl GlobalAlloc for CountingAlloc {
    unsafe fn alloc(&self, layout: Layout) -> *mut u8 {
        let p = unsafe { heap::alloc(layout) };
        if !p.is_null() {
            counted_rust(layout.size());
        }
        p
    }

    unsafe fn alloc_zeroed(&self, layout: Layout) -> *mut u8 {
        let p = unsafe { heap::alloc_zeroed(layout) };
        if !p.is_null() {
            counted_rust(layout.size());
        }
        p
    }

    unsafe fn dealloc(&self, ptr: *mut u8, layout: Layout) {
        unsafe { heap::dealloc(ptr, layout) };
        shrank(layout.size());
    }

    unsafe fn realloc(&self, ptr: *mut u8, layout: Layout, new_size: usize) -> *mut u8 {
        let p = unsafe { heap::realloc(ptr, layout, new_size) };
        if !p.is_null() {
            shrank(layout.size());
            counted_rust(new_size);
        }
        p
    }
}

/// Called by the binary's replacement C allocator with the usable size of a block it handed out. Must not
/// allocate.
pub fn c_heap_grew(usable_bytes: usize) {
    if C_HEAP_COUNTING.load(Relaxed) {
        grew(usable_bytes);
    }
}

/// Called by the binary's replacement C allocator with the usable size of a block it is about to free. Must
/// not allocate.
pub fn c_heap_shrank(usable_bytes: usize) {
    if C_HEAP_COUNTING.load(Relaxed) {
        shrank(usable_bytes);
    }
}

/// Count C blocks from now on, for the rest of the process. Called before a C++ engine is loaded, so that
/// every block it allocates is counted; a process that never loads one measures the Rust heap alone, exactly
/// as before (glibc's own small blocks, such as a thread's TLS, would otherwise move figures by a few bytes
/// from run to run). A block allocated before and freed after lowers the count by its size: only glibc's own,
/// a few bytes.
pub fn start_counting_c_heap() {
    C_HEAP_COUNTING.store(true, Relaxed);
}

/// The binary announces its replacement `malloc` (its address) at start-up.
pub fn announce_c_heap_hook(malloc: usize) {
    C_HEAP_HOOK.store(malloc, Relaxed);
}

/// Whether the C heap (ONNX Runtime's tensors, arena and packed weights) is counted too: the binary replaced
/// `malloc` and the dynamic loader resolves `malloc` to that replacement for every library, the ones loaded
/// later included.
pub fn counts_foreign_heap() -> bool {
    let hook = C_HEAP_HOOK.load(Relaxed);
    if hook == 0 || !is_installed() || !C_HEAP_COUNTING.load(Relaxed) {
        return false;
    }
    #[cfg(unix)]
    {
        // SAFETY: dlsym reads the loader's tables; the name is a NUL-terminated literal.
        let resolved = unsafe { libc::dlsym(libc::RTLD_DEFAULT, c"malloc".as_ptr()) } as usize;
        resolved == hook
    }
    #[cfg(not(unix))]
    false
}

/// Whether the counting allocator is this process's global allocator (it has counted an allocation) and is
/// still counting.
pub fn is_installed() -> bool {
    INSTALLED.load(Relaxed) && !STOPPED.load(Relaxed)
}

/// Stop counting for the rest of the process, for work that never measures memory and allocates from several
/// threads at a high rate (training: two threads updating the shared counters on every allocation spent a third
/// of `perfmodel train`'s time on them). Memory is reported unavailable afterwards ([`is_installed`]).
pub fn stop_counting() {
    STOPPED.store(true, Relaxed);
}

/// Live heap bytes now.
pub fn current_bytes() -> usize {
    CURRENT.load(Relaxed).max(0) as usize
}

/// Highest live heap bytes since the last [`reset_peak`].
pub fn peak_bytes() -> usize {
    PEAK.load(Relaxed).max(0) as usize
}

/// Start a new peak measurement from the current level; returns that level.
pub fn reset_peak() -> usize {
    let now = CURRENT.load(Relaxed);
    PEAK.store(now, Relaxed);
    now.max(0) as usize
}
