//! A counting wrapper around the system allocator, for the `alloc_bytes` of the sync rows.
//!
//! Counting is off unless `enable()` was called, so that the scenarios that do not report
//! allocations pay one relaxed load per allocation and nothing else. `alloc_bytes` is the sum
//! of the sizes requested from `alloc`/`alloc_zeroed` plus the growth requested by `realloc`,
//! on every thread, between two `snapshot()`s.

use std::alloc::{GlobalAlloc, Layout, System};
use std::sync::atomic::{AtomicBool, AtomicU64, Ordering::Relaxed};

pub struct Counting;

static ENABLED: AtomicBool = AtomicBool::new(false);
static BYTES: AtomicU64 = AtomicU64::new(0);
static COUNT: AtomicU64 = AtomicU64::new(0);

#[inline]
fn record(bytes: usize) {
    if ENABLED.load(Relaxed) {
        BYTES.fetch_add(bytes as u64, Relaxed);
        COUNT.fetch_add(1, Relaxed);
    }
}

unsafe impl GlobalAlloc for Counting {
    unsafe fn alloc(&self, layout: Layout) -> *mut u8 {
        record(layout.size());
        unsafe { System.alloc(layout) }
    }

    unsafe fn alloc_zeroed(&self, layout: Layout) -> *mut u8 {
        record(layout.size());
        unsafe { System.alloc_zeroed(layout) }
    }

    unsafe fn dealloc(&self, ptr: *mut u8, layout: Layout) {
        unsafe { System.dealloc(ptr, layout) }
    }

    unsafe fn realloc(&self, ptr: *mut u8, layout: Layout, new_size: usize) -> *mut u8 {
        record(new_size.saturating_sub(layout.size()));
        unsafe { System.realloc(ptr, layout, new_size) }
    }
}

pub fn enable() {
    ENABLED.store(true, Relaxed);
}

/// (bytes, allocations) so far.
pub fn snapshot() -> (u64, u64) {
    (BYTES.load(Relaxed), COUNT.load(Relaxed))
}
