//! The C heap's entry points, replaced so that the heap ONNX Runtime allocates (C++ `operator new` and
//! `malloc`, invisible to a Rust global allocator) is counted with the rest (see `perfmodel::collect::alloc`).
//!
//! glibc supports replacing `malloc` by symbol interposition ("Replacing malloc" in its manual): the executable
//! defines the functions and exports them (`build.rs` asks the linker to), and every library, those loaded later
//! with `dlopen` included, then calls them. Each forwards to glibc's own implementation (`__libc_malloc`, ...)
//! and reports the block's usable size. Every function that hands out or takes back a block is replaced, so
//! each block is counted once when it is handed out and once when it is freed. Nothing here allocates, locks
//! or panics.

use perfmodel::collect::alloc::{announce_c_heap_hook, c_heap_grew, c_heap_shrank};
use std::ffi::{c_int, c_void};

unsafe extern "C" {
    fn __libc_malloc(size: usize) -> *mut c_void;
    fn __libc_calloc(count: usize, size: usize) -> *mut c_void;
    fn __libc_realloc(ptr: *mut c_void, size: usize) -> *mut c_void;
    fn __libc_memalign(align: usize, size: usize) -> *mut c_void;
    fn __libc_valloc(size: usize) -> *mut c_void;
    fn __libc_pvalloc(size: usize) -> *mut c_void;
    fn __libc_free(ptr: *mut c_void);
    fn malloc_usable_size(ptr: *mut c_void) -> usize;
}

/// Tell the library which `malloc` is ours, so it can check that the loader resolves to it.
pub fn announce() {
    announce_c_heap_hook(malloc as *const () as usize);
}

fn handed_out(p: *mut c_void) -> *mut c_void {
    if !p.is_null() {
        // SAFETY: p is a live block of glibc's heap.
        c_heap_grew(unsafe { malloc_usable_size(p) });
    }
    p
}

#[no_mangle]
pub unsafe extern "C" fn malloc(size: usize) -> *mut c_void {
    handed_out(unsafe { __libc_malloc(size) })
}

#[no_mangle]
pub unsafe extern "C" fn calloc(count: usize, size: usize) -> *mut c_void {
    handed_out(unsafe { __libc_calloc(count, size) })
}

#[no_mangle]
pub unsafe extern "C" fn free(ptr: *mut c_void) {
    if !ptr.is_null() {
        c_heap_shrank(unsafe { malloc_usable_size(ptr) });
        unsafe { __libc_free(ptr) }
    }
}

#[no_mangle]
pub unsafe extern "C" fn realloc(ptr: *mut c_void, size: usize) -> *mut c_void {
    let old = if ptr.is_null() { 0 } else { unsafe { malloc_usable_size(ptr) } };
    let new = unsafe { __libc_realloc(ptr, size) };
    if !new.is_null() {
        c_heap_shrank(old);
        handed_out(new);
    } else if size == 0 && !ptr.is_null() {
        // glibc's realloc(p, 0) frees p.
        c_heap_shrank(old);
    }
    new
}

#[no_mangle]
pub unsafe extern "C" fn reallocarray(ptr: *mut c_void, count: usize, size: usize) -> *mut c_void {
    match count.checked_mul(size) {
        Some(bytes) => unsafe { realloc(ptr, bytes) },
        None => {
            set_errno(libc::ENOMEM);
            std::ptr::null_mut()
        }
    }
}

#[no_mangle]
pub unsafe extern "C" fn memalign(align: usize, size: usize) -> *mut c_void {
    handed_out(unsafe { __libc_memalign(align, size) })
}

#[no_mangle]
pub unsafe extern "C" fn aligned_alloc(align: usize, size: usize) -> *mut c_void {
    handed_out(unsafe { __libc_memalign(align, size) })
}

#[no_mangle]
pub unsafe extern "C" fn posix_memalign(out: *mut *mut c_void, align: usize, size: usize) -> c_int {
    if !align.is_power_of_two() || !align.is_multiple_of(std::mem::size_of::<*mut c_void>()) {
        return libc::EINVAL;
    }
    let p = handed_out(unsafe { __libc_memalign(align, size) });
    if p.is_null() {
        return libc::ENOMEM;
    }
    unsafe { *out = p };
    0
}

#[no_mangle]
pub unsafe extern "C" fn valloc(size: usize) -> *mut c_void {
    handed_out(unsafe { __libc_valloc(size) })
}

#[no_mangle]
pub unsafe extern "C" fn pvalloc(size: usize) -> *mut c_void {
    handed_out(unsafe { __libc_pvalloc(size) })
}

fn set_errno(code: c_int) {
    // SAFETY: errno is this thread's.
    unsafe { *libc::__errno_location() = code };
}
