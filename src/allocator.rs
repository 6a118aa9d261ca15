//! The collector's global allocator: mimalloc, entered through its plain `malloc` wherever the
//! alignment asked for is one every mimalloc block has anyway.
//!
//! The `mimalloc` crate's `GlobalAlloc` calls `mi_malloc_aligned` for every allocation. In
//! mimalloc v3 that takes a longer path than `mi_malloc` even for small blocks, and for blocks
//! above 1 KiB whose size is not a power of two (a request's few attempts, a batch of rows) it
//! over-allocates and hands out an interior pointer, which `mi_free` then has to map back
//! (BENCHMARKS.md, issue 18, ninth pass). Rust's own `System` allocator makes the same choice
//! for `malloc`.

use std::alloc::{GlobalAlloc, Layout};
use std::ffi::c_void;

use libmimalloc_sys as mi;

/// mimalloc's smallest block is a machine word and every size class is a multiple of one, in
/// pages that start word-aligned at least, so any block is aligned to a word.
const ALWAYS_ALIGNED: usize = std::mem::size_of::<usize>();

/// mimalloc as the global allocator (see the module).
pub struct Mimalloc;

// SAFETY: every method forwards to mimalloc, which returns blocks of at least the size asked
// for, aligned as `layout` asks: plainly when `layout.align()` is at most a word (see
// `ALWAYS_ALIGNED`), through its aligned entry points otherwise; `mi_free` and
// `mi_realloc_aligned` accept blocks from either.
unsafe impl GlobalAlloc for Mimalloc {
    #[inline]
    unsafe fn alloc(&self, layout: Layout) -> *mut u8 {
        // SAFETY: as for the impl.
        unsafe { by_alignment(layout, mi::mi_malloc, mi::mi_malloc_aligned) }
    }

    #[inline]
    unsafe fn alloc_zeroed(&self, layout: Layout) -> *mut u8 {
        // SAFETY: as for the impl.
        unsafe { by_alignment(layout, mi::mi_zalloc, mi::mi_zalloc_aligned) }
    }

    #[inline]
    unsafe fn dealloc(&self, ptr: *mut u8, _layout: Layout) {
        // SAFETY: `ptr` came from this allocator (the caller's contract).
        unsafe { mi::mi_free(ptr.cast::<c_void>()) }
    }

    #[inline]
    unsafe fn realloc(&self, ptr: *mut u8, layout: Layout, new_size: usize) -> *mut u8 {
        // SAFETY: `ptr` came from this allocator with `layout` (the caller's contract). Unlike
        // allocation, mimalloc's aligned realloc itself takes the plain path for word alignment.
        unsafe { mi::mi_realloc_aligned(ptr.cast::<c_void>(), new_size, layout.align()).cast() }
    }
}

/// A block for `layout` from `plain` when every mimalloc block is aligned enough, else from
/// `aligned`.
///
/// # Safety
/// As `GlobalAlloc::alloc`: `layout` has a nonzero size.
#[inline]
unsafe fn by_alignment(
    layout: Layout,
    plain: unsafe extern "C" fn(usize) -> *mut c_void,
    aligned: unsafe extern "C" fn(usize, usize) -> *mut c_void,
) -> *mut u8 {
    // SAFETY: both are mimalloc's allocation functions, called with the layout's size (and
    // alignment, a power of two).
    unsafe {
        if layout.align() <= ALWAYS_ALIGNED {
            plain(layout.size()).cast()
        } else {
            aligned(layout.size(), layout.align()).cast()
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    /// Sizes around mimalloc's size classes and its small, medium and large limits.
    const EDGES: [usize; 10] = [
        1023,
        1024,
        1025,
        1032,
        1376,
        4097,
        65_535,
        65_537,
        1 << 20,
        4 << 20,
    ];

    fn sizes() -> impl Iterator<Item = usize> {
        (1..=600).chain((1..=80).map(|k| k * 100 + 3)).chain(EDGES)
    }

    #[test]
    fn every_block_has_the_alignment_asked_for_and_keeps_its_bytes() {
        let allocator = Mimalloc;
        for size in sizes() {
            for align in [1, 2, 4, 8, 16, 32, 64, 128, 4096] {
                let layout = Layout::from_size_align(size, align).expect("a valid layout");
                // SAFETY: the layout has a nonzero size; the block is used within it and freed
                // with it.
                unsafe {
                    let p = allocator.alloc(layout);
                    assert!(!p.is_null(), "size {size} align {align}");
                    assert_eq!(p as usize % align, 0, "size {size} align {align}");
                    std::ptr::write_bytes(p, 0xA5, size);
                    let grown = allocator.realloc(p, layout, size * 2 + 1);
                    assert!(!grown.is_null());
                    assert_eq!(
                        grown as usize % align,
                        0,
                        "realloc: size {size} align {align}"
                    );
                    assert!(std::slice::from_raw_parts(grown, size)
                        .iter()
                        .all(|&b| b == 0xA5));
                    allocator.dealloc(
                        grown,
                        Layout::from_size_align(size * 2 + 1, align).expect("a valid layout"),
                    );
                    let z = allocator.alloc_zeroed(layout);
                    assert_eq!(z as usize % align, 0, "zeroed: size {size} align {align}");
                    assert!(std::slice::from_raw_parts(z, size).iter().all(|&b| b == 0));
                    allocator.dealloc(z, layout);
                }
            }
        }
    }
}
