//! A mutual-exclusion lock for OS threads, on the kernel futex.
//!
//! weft's internal critical sections (futex buckets, injection queues, group member lists) are
//! a few dozen instructions and never switch fibers while held, so blocking the OS thread on
//! contention is correct and cheap. It is not `std.Io.Mutex`: that one parks the *fiber* and
//! is built on weft itself.
//!
//! States: 0 unlocked, 1 locked, 2 locked with possible sleepers (the classic three-state
//! futex lock: unlock only pays a syscall when someone may be asleep).
const Mutex = @This();

const std = @import("std");
const host = @import("host.zig");
const assert = std.debug.assert;

state: std.atomic.Value(u32) = .init(unlocked),

const unlocked: u32 = 0;
const locked: u32 = 1;
const contended: u32 = 2;

/// Spins before sleeping: the holder is usually on the other core and about to release.
const spins_max = 64;

pub fn tryLock(m: *Mutex) bool {
    // Acquire: the critical section must not be reordered before the lock.
    return m.state.cmpxchgStrong(unlocked, locked, .acquire, .monotonic) == null;
}

pub fn lock(m: *Mutex) void {
    if (m.tryLock()) return;
    m.lockSlow();
}

fn lockSlow(m: *Mutex) void {
    @branchHint(.cold);
    var spins: u32 = 0;
    while (spins < spins_max) : (spins += 1) {
        if (m.state.load(.monotonic) == unlocked and m.tryLock()) return;
        std.atomic.spinLoopHint();
    }
    // From here on the lock is taken as `contended`, so our unlock will wake the next sleeper.
    while (m.state.swap(contended, .acquire) != unlocked) {
        host.futexWait(&m.state, contended, null);
    }
}

pub fn unlock(m: *Mutex) void {
    // Release: publishes the critical section to the next holder.
    const previous = m.state.swap(unlocked, .release);
    assert(previous != unlocked); // unlock of an unlocked Mutex
    if (previous == contended) host.futexWake(&m.state, 1);
}

test "Mutex: excludes two threads" {
    var m: Mutex = .{};
    var counter: u64 = 0;
    const iterations = 20_000;
    const Worker = struct {
        fn run(mutex: *Mutex, value: *u64) void {
            for (0..iterations) |_| {
                mutex.lock();
                defer mutex.unlock();
                value.* += 1;
            }
        }
    };
    const thread = try std.Thread.spawn(.{}, Worker.run, .{ &m, &counter });
    Worker.run(&m, &counter);
    thread.join();
    try std.testing.expectEqual(@as(u64, 2 * iterations), counter);
    try std.testing.expect(m.tryLock());
    m.unlock();
}
