//! A test-and-test-and-set lock whose unlock is a plain release store.
//!
//! For critical sections that are a handful of instructions on the hottest paths (the futex
//! buckets, taken twice per fiber hand-off). `Mutex` must swap its state on unlock to learn
//! whether a sleeper needs a wake-up; on this machine a locked instruction costs about 6 ns,
//! a tenth of a fiber ping-pong round, and this lock spends one per lock/unlock pair instead
//! of two. The price: a waiter never sleeps in the kernel. It spins, then yields its time
//! slice, which is sound only because holders never block or switch fibers while holding it
//! and hold it for a bounded, short time.
const SpinLock = @This();

const std = @import("std");
const assert = std.debug.assert;

state: std.atomic.Value(u32) = .init(unlocked),

const unlocked: u32 = 0;
const locked: u32 = 1;

/// Spins before yielding the CPU: a holder on the other core releases within a few hundred ns.
const spins_max = 128;

pub fn tryLock(lock_: *SpinLock) bool {
    // Acquire: the critical section must not be reordered before the lock.
    return lock_.state.swap(locked, .acquire) == unlocked;
}

pub fn lock(lock_: *SpinLock) void {
    if (lock_.tryLock()) return;
    lock_.lockSlow();
}

fn lockSlow(lock_: *SpinLock) void {
    @branchHint(.cold);
    var spins: u32 = 0;
    while (true) {
        // Test before test-and-set: spinning on a load keeps the line shared, not bouncing.
        if (lock_.state.load(.monotonic) == unlocked and lock_.tryLock()) return;
        spins += 1;
        if (spins < spins_max) {
            std.atomic.spinLoopHint();
        } else {
            // The holder may have been preempted: give it our core.
            std.Thread.yield() catch {};
            spins = 0;
        }
    }
}

/// Whether someone holds the lock now: a snapshot, for a signal handler that must not touch
/// what the code it interrupted may be in the middle of (see loop/Loop.zig, "Rescue").
pub fn isLocked(lock_: *const SpinLock) bool {
    return lock_.state.load(.acquire) == locked;
}

pub fn unlock(lock_: *SpinLock) void {
    assert(lock_.state.load(.monotonic) == locked);
    // Release: everything written in the critical section is visible to the next holder.
    lock_.state.store(unlocked, .release);
}

test "SpinLock: excludes two threads" {
    var lock_: SpinLock = .{};
    var counter: usize = 0;
    const Worker = struct {
        fn run(l: *SpinLock, c: *usize) void {
            for (0..100_000) |_| {
                l.lock();
                c.* += 1;
                l.unlock();
            }
        }
    };
    const thread = try std.Thread.spawn(.{}, Worker.run, .{ &lock_, &counter });
    Worker.run(&lock_, &counter);
    thread.join();
    try std.testing.expectEqual(@as(usize, 200_000), counter);
}
