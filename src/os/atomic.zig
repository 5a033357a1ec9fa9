//! The one door through which the scheduler (task states, the futex table, the run and
//! injection queues), the lanes and weft.sync touch atomics and thread locks (one small
//! shim, after Tokio's `loom`): `Value(T)` (std's atomic value) and `Lock` (the short
//! internal lock of the primitives, `os/SpinLock.zig`). It sits in `os/`, below every layer
//! that uses it, so that the interleaving checker can reach code in any of them.
//!
//! Production builds get std's types themselves, so the generated code is the same as if the
//! primitives used them directly. Test builds (`builtin.is_test`) get look-alikes with the same
//! API that, on a thread where the interleaving checker (src/testing/InterleavingChecker.zig)
//! installed a `Checker`, call it before every atomic step and around every lock operation.
//! The checker runs several logical threads one at a time and picks, at each such step, which
//! one goes next, from a seed: many seeds, many interleavings, and a failing one replays
//! exactly. On a thread without a checker (every other test) the look-alikes behave like
//! std's.
//!
//! The checker's model is sequentially consistent: it finds lost wake-ups, double hand-offs
//! and wrong state transitions in any interleaving of atomic steps, not bugs that only weak
//! memory orderings expose (loom models some of those; this checker does not). Futex waits
//! and wakes of code given an `Io` are not shimmed: the checker hands the code under test an
//! `Io` of its own whose futex, cancelation and clock entries it controls. Code on threads of
//! its own, with no `Io` (a lane's workers), waits and wakes through `futexWait` and
//! `futexWake` here, which under a checker go to that same `Io`.
const std = @import("std");
const builtin = @import("builtin");
const SpinLock = @import("SpinLock.zig");
const OsMutex = @import("Mutex.zig");
const host = @import("host.zig");

/// Whether the shim is in place (test builds only).
// Not under TSan: its runtime aborted (CHECK thr->slot) once the scheduler went through the
// look-alikes, and the checker, whose scenarios then skip, is what needs them.
pub const checked = builtin.is_test and !builtin.sanitize_thread;

pub const Value = if (checked) CheckedValue else std.atomic.Value;
/// A spin lock whose unlock is a plain store: the primitives hold it for a few list operations,
/// never across a park or a blocking call, so a contender spins (then yields its time slice)
/// and never needs a kernel wake. `os/Mutex.zig`, which sleeps in the kernel, must swap its
/// state on unlock to learn whether a sleeper waits: one more locked instruction per
/// operation, a sixth of a channel ping-pong round on this machine (docs/BENCHMARKS.md).
pub const Lock = if (checked) CheckedLock(SpinLock) else SpinLock;
/// os/Mutex.zig (which sleeps in the kernel), for the locks of code whose critical sections
/// are not always a few list operations (a lane's books); under a checker, scheduled by it as
/// `Lock` is: a logical thread that slept in the kernel would stall the checker's one OS
/// thread.
pub const Mutex = if (checked) CheckedLock(OsMutex) else OsMutex;

/// What a logical thread of the interleaving checker provides (test builds only).
pub const Checker = struct {
    context: *anyopaque,
    /// Called before every atomic step: the checker may let other logical threads run first.
    step: *const fn (context: *anyopaque) void,
    /// Parks the logical thread until `unblock(address)` (a held `Lock`).
    block: *const fn (context: *anyopaque, address: usize) void,
    /// Makes every logical thread parked on `address` runnable again.
    unblock: *const fn (context: *anyopaque, address: usize) void,
    /// The checker's `Io`, for `futexWait` and `futexWake`.
    io: std.Io,
};

/// The checker of the logical thread running on this OS thread; null outside a checked run.
/// A thread-local is safe here: a logical thread is pinned to its OS thread for its whole life.
pub threadlocal var checker: if (checked) ?*const Checker else void =
    if (checked) null else {};

/// A checker step for the rare atomic operation `Value` cannot express (a packed word updated
/// through its integer): call it right before the raw builtin.
pub inline fn step() void {
    if (!checked) return;
    if (checker) |c| c.step(c.context);
}

/// Blocks the calling OS thread while `word` holds `expected` (os.futexWait, no timeout), for
/// code with no `Io` (a lane's workers); returns on a wake or at random alike: callers recheck.
/// Under a checker, the checker's uncancelable futex wait.
pub fn futexWait(word: *const Value(u32), expected: u32) void {
    if (checked) if (checker) |c| return c.io.futexWaitUncancelable(u32, &word.raw, expected);
    host.futexWaitWord(&word.raw, expected, null);
}

/// Wakes up to `waiters_max` waiters of `futexWait` on `word`.
pub fn futexWake(word: *const Value(u32), waiters_max: u32) void {
    if (checked) if (checker) |c| return c.io.futexWake(u32, &word.raw, waiters_max);
    host.futexWakeWord(&word.raw, waiters_max);
}

/// std.atomic.Value with a checker step before each operation.
fn CheckedValue(comptime T: type) type {
    return struct {
        raw: T,

        const Self = @This();
        const Order = std.builtin.AtomicOrder;

        pub fn init(value: T) Self {
            return .{ .raw = value };
        }

        pub fn load(self: *const Self, comptime order: Order) T {
            step();
            return @atomicLoad(T, &self.raw, order);
        }

        pub fn store(self: *Self, value: T, comptime order: Order) void {
            step();
            @atomicStore(T, &self.raw, value, order);
        }

        pub fn swap(self: *Self, operand: T, comptime order: Order) T {
            step();
            return @atomicRmw(T, &self.raw, .Xchg, operand, order);
        }

        pub fn cmpxchgWeak(
            self: *Self,
            expected: T,
            new: T,
            comptime success: Order,
            comptime failure: Order,
        ) ?T {
            step();
            return @cmpxchgWeak(T, &self.raw, expected, new, success, failure);
        }

        pub fn cmpxchgStrong(
            self: *Self,
            expected: T,
            new: T,
            comptime success: Order,
            comptime failure: Order,
        ) ?T {
            step();
            return @cmpxchgStrong(T, &self.raw, expected, new, success, failure);
        }

        pub fn fetchAdd(self: *Self, operand: T, comptime order: Order) T {
            step();
            return @atomicRmw(T, &self.raw, .Add, operand, order);
        }

        pub fn fetchSub(self: *Self, operand: T, comptime order: Order) T {
            step();
            return @atomicRmw(T, &self.raw, .Sub, operand, order);
        }

        pub fn fetchOr(self: *Self, operand: T, comptime order: Order) T {
            step();
            return @atomicRmw(T, &self.raw, .Or, operand, order);
        }

        pub fn fetchAnd(self: *Self, operand: T, comptime order: Order) T {
            step();
            return @atomicRmw(T, &self.raw, .And, operand, order);
        }

        pub fn fetchMax(self: *Self, operand: T, comptime order: Order) T {
            step();
            return @atomicRmw(T, &self.raw, .Max, operand, order);
        }
    };
}

/// `Inner` (os/SpinLock.zig, os/Mutex.zig), or under a checker a lock the checker schedules:
/// taking it is a step, and a logical thread that finds it held parks in the checker (never
/// spins or sleeps in the kernel, which would stall the one logical thread allowed to run).
fn CheckedLock(comptime Inner: type) type {
    return struct {
        mutex: Inner = .{},

        const Self = @This();

        pub fn tryLock(self: *Self) bool {
            const c = checker orelse return self.mutex.tryLock();
            c.step(c.context);
            return self.mutex.tryLock();
        }

        pub fn lock(self: *Self) void {
            const c = checker orelse return self.mutex.lock();
            while (true) {
                c.step(c.context);
                if (self.mutex.tryLock()) return;
                c.block(c.context, @intFromPtr(self));
            }
        }

        pub fn unlock(self: *Self) void {
            const c = checker orelse return self.mutex.unlock();
            c.step(c.context);
            self.mutex.unlock();
            c.unblock(c.context, @intFromPtr(self));
        }
    };
}

test "atomic: the checked look-alikes behave like std's without a checker" {
    var value: Value(u32) = .init(1);
    try std.testing.expectEqual(@as(u32, 1), value.swap(2, .acq_rel));
    try std.testing.expectEqual(@as(?u32, 2), value.cmpxchgStrong(1, 3, .acq_rel, .acquire));
    try std.testing.expectEqual(@as(?u32, null), value.cmpxchgStrong(2, 3, .acq_rel, .acquire));
    try std.testing.expectEqual(@as(u32, 3), value.fetchAdd(1, .monotonic));
    try std.testing.expectEqual(@as(u32, 4), value.load(.acquire));
    var lock: Lock = .{};
    try std.testing.expect(lock.tryLock());
    try std.testing.expect(!lock.tryLock());
    lock.unlock();
    lock.lock();
    lock.unlock();
    var mutex: Mutex = .{};
    try std.testing.expect(mutex.tryLock());
    try std.testing.expect(!mutex.tryLock());
    mutex.unlock();
    mutex.lock();
    mutex.unlock();
    // Not parked (the word differs): returns at once.
    futexWait(&value, 0);
    futexWake(&value, 1);
}
