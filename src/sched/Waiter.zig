//! Who is blocked on something: a fiber (parked on its executor) or an OS thread that weft did
//! not create (blocked on a kernel futex). Every wait queue in weft stores one of these, so
//! std code that calls the Io from plain `std.Thread`s works, and wakes reach both kinds.
const std = @import("std");
const assert = std.debug.assert;
const os = @import("../os/linux.zig");
const platform = @import("../platform.zig");
/// Opaque where the fiber runtime does not compile: select's callbacks use this file on every
/// OS, and naming Task.zig there would analyse the fiber runtime (and, in a test build, its
/// tests). No task is ever encoded there.
const Task = if (platform.fibers_supported) @import("Task.zig") else opaque {};

pub const Waiter = union(enum) {
    task: *Task,
    thread: *ThreadWaiter,
    /// Code run in place of a wake: weft.sync's `select` waits for a future this way (as one
    /// of several things). The callback's memory must stay valid until its function returns.
    callback: *Callback,

    /// Makes the waiter runnable. Thread-safe. A wake that finds the waiter no longer waiting
    /// is dropped: waits recheck their condition, so a lost duplicate is harmless.
    pub fn wake(waiter: Waiter) void {
        switch (waiter) {
            .task => |task| task.wake(),
            .thread => |thread| thread.wake(),
            .callback => |callback| callback.function(callback),
        }
    }

    /// Packs a waiter into one word: the low two bits tag the kind (all three types are at
    /// least 4-aligned).
    pub fn encode(waiter: Waiter) usize {
        comptime assert(@alignOf(ThreadWaiter) >= 4 and @alignOf(Callback) >= 4);
        if (platform.fibers_supported) comptime assert(@alignOf(Task) >= 4);
        return switch (waiter) {
            .task => |task| @intFromPtr(task),
            .thread => |thread| @intFromPtr(thread) | 1,
            .callback => |callback| @intFromPtr(callback) | 2,
        };
    }

    /// The task `word` encodes, or null for another kind of waiter: for a caller that
    /// handles tasks apart (futex.zig's wake), without building the union first.
    pub fn decodeTask(word: usize) ?*Task {
        assert(word > sentinel_max);
        return if (word & 3 == 0) @ptrFromInt(word) else null;
    }

    pub fn decode(word: usize) Waiter {
        assert(word > sentinel_max);
        const address = word & ~@as(usize, 3);
        return switch (word & 3) {
            0 => .{ .task = @ptrFromInt(address) },
            1 => .{ .thread = @ptrFromInt(address) },
            2 => .{ .callback = @ptrFromInt(address) },
            else => unreachable, // never encoded
        };
    }

    /// Encoded words at or below this value are sentinels, never waiters.
    pub const sentinel_max = 7;

    /// The sentinel in a future's awaiter slot once its task ended (`Task.awaiter`, and the
    /// threaded runtime's futures, std_io/threaded_futures.zig).
    pub const awaiter_finished: usize = 2;
};

/// A function to run when the awaited thing happens. Thread-safe to call from any thread; it
/// must not block (it runs wherever the event happens, e.g. at the end of a future's task).
pub const Callback = struct {
    function: *const fn (callback: *Callback) void,
};

/// A blocked OS thread: one word on the thread's own stack, waited on with the kernel futex.
pub const ThreadWaiter = struct {
    word: std.atomic.Value(u32) = .init(0),

    /// Blocks until woken or until `deadline_ns` (CLOCK_MONOTONIC, null: none) passes.
    /// Returns whether it was woken.
    pub fn wait(thread: *ThreadWaiter, deadline_ns: ?u64) bool {
        while (thread.word.load(.acquire) == 0) {
            if (deadline_ns) |deadline| {
                const now = os.monotonicNs();
                if (now >= deadline) return false;
                os.futexWait(&thread.word, 0, deadline - now);
            } else {
                os.futexWait(&thread.word, 0, null);
            }
        }
        return true;
    }

    pub fn wake(thread: *ThreadWaiter) void {
        // Release: whatever the waker did before waking is visible to the woken thread.
        thread.word.store(1, .release);
        // The waiter's stack stays mapped while it may still sleep, so the address is valid.
        os.futexWake(&thread.word, 1);
    }
};
