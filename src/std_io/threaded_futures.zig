//! The threaded runtime's `Io` (src/ThreadedRuntime.zig): std.Io.Threaded's VTable, with its
//! futures wrapped so that each has an awaiter slot, as a fiber runtime task has
//! (`Task.awaiter`). `weft.sync.select` registers a callback there to wait for a future among
//! other things, which std.Io cannot do (its only wait for a future is the await, which takes
//! the result). Everything else is std.Io.Threaded's own function on its own `userdata`.
//!
//! A future here is a `Future` allocated beside std's: it holds the caller's start function
//! and a copy of its context; std's task runs `run`, which calls them, then publishes the end
//! in the slot and calls the callback it found there. `await` and `cancel` go to std's future
//! and then free this one, after std's task ended (so after `run` last touched it).
//!
//! The slot follows `Task.awaiter`'s protocol, so `select` reads both alike: 0 while the task
//! runs, `awaiter_finished` once it ended, or an encoded `Waiter` callback registered by a
//! select (taken back with a compare-and-swap to 0 if the select is decided elsewhere).
//!
//! Cost: one allocation per `async` or `concurrent` beside std's own (std.Io.Threaded
//! allocates its future and may spawn a thread, which dwarfs it).
const std = @import("std");
const assert = std.debug.assert;
const Io = std.Io;
const Alignment = std.mem.Alignment;
const atomic = @import("../os/atomic.zig");
const Waiter = @import("../sched/Waiter.zig").Waiter;

/// std.Io.Threaded's table, whose `userdata` is the `*std.Io.Threaded`.
const inner: Io.VTable = Io.Threaded.io(undefined).vtable.*;

/// std.Io.Threaded's table with `async`, `concurrent`, `await` and `cancel` wrapped.
pub const vtable: Io.VTable = blk: {
    var table = inner;
    table.async = async;
    table.concurrent = concurrent;
    table.await = await;
    table.cancel = cancel;
    break :blk table;
};

/// The `Io` of `threaded` with weft's futures.
pub fn io(threaded: *Io.Threaded) Io {
    return .{ .userdata = threaded, .vtable = &vtable };
}

/// Whether `io_any`'s futures are `Future`s (for `awaiterOf`).
pub fn isThreadedIo(io_any: Io) bool {
    return io_any.vtable == &vtable;
}

/// Whether each task of `io_any` is an OS thread: std.Io.Threaded's, bare or with these
/// futures (the threaded runtime's).
pub fn tasksAreThreads(io_any: Io) bool {
    return io_any.vtable == Io.Threaded.io(undefined).vtable or isThreadedIo(io_any);
}

const awaiter_finished = Waiter.awaiter_finished;

/// The awaiter slot of a future of this `Io` (`isThreadedIo`).
pub fn awaiterOf(any_future: *Io.AnyFuture) *atomic.Value(usize) {
    const future: *Future = @ptrCast(@alignCast(any_future));
    return &future.awaiter;
}

const Future = struct {
    /// See the file's comment: 0, `awaiter_finished` or an encoded callback.
    awaiter: atomic.Value(usize) = .init(0),
    /// std's future, once its `async` or `concurrent` returned.
    std_future: *Io.AnyFuture = undefined,
    start: *const fn (context: *const anyopaque, result: *anyopaque) void,
    context_offset: usize,
    allocation_len: usize,
    allocation_alignment: Alignment,

    /// Allocates a future holding `start` and a copy of `context`.
    fn create(
        gpa: std.mem.Allocator,
        context: []const u8,
        context_alignment: Alignment,
        start: *const fn (context: *const anyopaque, result: *anyopaque) void,
    ) error{OutOfMemory}!*Future {
        const allocation_alignment = context_alignment.max(.of(Future));
        const context_offset = context_alignment.forward(@sizeOf(Future));
        const allocation_len = context_offset + context.len;
        const bytes = gpa.rawAlloc(allocation_len, allocation_alignment, @returnAddress()) orelse
            return error.OutOfMemory;
        const future: *Future = @ptrCast(@alignCast(bytes));
        future.* = .{
            .start = start,
            .context_offset = context_offset,
            .allocation_len = allocation_len,
            .allocation_alignment = allocation_alignment,
        };
        @memcpy(bytes[context_offset..][0..context.len], context);
        return future;
    }

    fn destroy(future: *Future, gpa: std.mem.Allocator) void {
        const bytes: [*]u8 = @ptrCast(future);
        gpa.rawFree(bytes[0..future.allocation_len], future.allocation_alignment, @returnAddress());
    }

    fn contextOf(future: *Future) *const anyopaque {
        const bytes: [*]u8 = @ptrCast(future);
        return bytes + future.context_offset;
    }

    /// std's task: the caller's function, then the end published. The swap is this task's
    /// last touch of the future (acq_rel: the result is visible to whoever the slot names).
    fn run(run_context: *const anyopaque, result: *anyopaque) void {
        const future: *Future = @as(*const *Future, @ptrCast(@alignCast(run_context))).*;
        future.start(future.contextOf(), result);
        const previous = future.awaiter.swap(awaiter_finished, .acq_rel);
        if (previous == 0) return;
        assert(previous > Waiter.sentinel_max); // finished once
        switch (Waiter.decode(previous)) {
            .callback => |callback| callback.function(callback),
            .task, .thread => unreachable, // only a select's callback registers here
        }
    }
};

fn threadedOf(userdata: ?*anyopaque) *Io.Threaded {
    return @ptrCast(@alignCast(userdata));
}

fn async(
    userdata: ?*anyopaque,
    result: []u8,
    result_alignment: Alignment,
    context: []const u8,
    context_alignment: Alignment,
    start: *const fn (context: *const anyopaque, result: *anyopaque) void,
) ?*Io.AnyFuture {
    const gpa = threadedOf(userdata).allocator;
    // Without memory for ours, the call runs inline, as std's `async` does without its own.
    const future = Future.create(gpa, context, context_alignment, start) catch {
        start(context.ptr, result.ptr);
        return null;
    };
    const std_future = inner.async(
        userdata,
        result,
        result_alignment,
        std.mem.asBytes(&future),
        .of(*Future),
        Future.run,
    ) orelse {
        // Ran inline: the result is in place, and nobody registered meanwhile.
        assert(future.awaiter.load(.monotonic) == awaiter_finished);
        future.destroy(gpa);
        return null;
    };
    future.std_future = std_future;
    return @ptrCast(future);
}

fn concurrent(
    userdata: ?*anyopaque,
    result_len: usize,
    result_alignment: Alignment,
    context: []const u8,
    context_alignment: Alignment,
    start: *const fn (context: *const anyopaque, result: *anyopaque) void,
) Io.ConcurrentError!*Io.AnyFuture {
    const gpa = threadedOf(userdata).allocator;
    // As std's `concurrent` answers when it has no memory for its own future.
    const future = Future.create(gpa, context, context_alignment, start) catch
        return error.ConcurrencyUnavailable;
    errdefer future.destroy(gpa);
    future.std_future = try inner.concurrent(
        userdata,
        result_len,
        result_alignment,
        std.mem.asBytes(&future),
        .of(*Future),
        Future.run,
    );
    return @ptrCast(future);
}

fn await(
    userdata: ?*anyopaque,
    any_future: *Io.AnyFuture,
    result: []u8,
    result_alignment: Alignment,
) void {
    end(userdata, any_future, result, result_alignment, inner.await);
}

fn cancel(
    userdata: ?*anyopaque,
    any_future: *Io.AnyFuture,
    result: []u8,
    result_alignment: Alignment,
) void {
    end(userdata, any_future, result, result_alignment, inner.cancel);
}

/// std's `await` or `cancel` (`std_end`) of the future's std future, then ours freed: std's
/// task has ended, so `run` is done with it.
fn end(
    userdata: ?*anyopaque,
    any_future: *Io.AnyFuture,
    result: []u8,
    result_alignment: Alignment,
    comptime std_end: @FieldType(Io.VTable, "await"),
) void {
    const future: *Future = @ptrCast(@alignCast(any_future));
    std_end(userdata, future.std_future, result, result_alignment);
    assert(future.awaiter.load(.acquire) == awaiter_finished);
    future.destroy(threadedOf(userdata).allocator);
}

test "threaded futures: results come through the wrap, and a cancel reaches the task" {
    var threaded: Io.Threaded = .init(std.testing.allocator, .{});
    defer threaded.deinit();
    const weft_io = io(&threaded);
    try std.testing.expect(isThreadedIo(weft_io));
    try std.testing.expect(!isThreadedIo(threaded.io()));
    try std.testing.expect(tasksAreThreads(weft_io) and tasksAreThreads(threaded.io()));

    const Double = struct {
        fn call(value: u64, context_padding: [40]u8) u64 {
            return value * 2 + context_padding[39];
        }
        fn sleepy(io_: Io) Io.Cancelable!void {
            return io_.sleep(.fromSeconds(60), .awake);
        }
    };
    var padding: [40]u8 = @splat(0);
    padding[39] = 1;
    var concurrent_future = try weft_io.concurrent(Double.call, .{ 20, padding });
    var async_future = weft_io.async(Double.call, .{ 10, padding });
    try std.testing.expectEqual(@as(u64, 41), concurrent_future.await(weft_io));
    try std.testing.expectEqual(@as(u64, 21), async_future.await(weft_io));

    // A cancel reaches the task through std's future.
    var sleeper = try weft_io.concurrent(Double.sleepy, .{weft_io});
    try std.testing.expectError(error.Canceled, sleeper.cancel(weft_io));
}

test "threaded futures: a callback in the slot runs once the task ended, after its result" {
    const Callback = @import("../sched/Waiter.zig").Callback;
    var threaded: Io.Threaded = .init(std.testing.allocator, .{});
    defer threaded.deinit();
    const weft_io = io(&threaded);

    const Gated = struct {
        fn call(io_: Io, open: *std.atomic.Value(u32)) u64 {
            while (open.load(.acquire) == 0) io_.futexWaitUncancelable(u32, &open.raw, 0);
            return 7;
        }
    };
    const Seen = struct {
        callback: Callback = .{ .function = record },
        fired: std.atomic.Value(u32) = .init(0),
        io: Io,

        fn record(callback: *Callback) void {
            const seen: *@This() = @fieldParentPtr("callback", callback);
            _ = seen.fired.fetchAdd(1, .release);
            seen.io.futexWake(u32, &seen.fired.raw, 1);
        }
    };
    var open: std.atomic.Value(u32) = .init(0);
    var future = try weft_io.concurrent(Gated.call, .{ weft_io, &open });
    var seen: Seen = .{ .io = weft_io };
    const slot = awaiterOf(future.any_future.?);
    const encoded = Waiter.encode(.{ .callback = &seen.callback });
    // The task waits at the gate: the slot is free, and the callback registers.
    try std.testing.expectEqual(null, slot.cmpxchgStrong(0, encoded, .acq_rel, .acquire));
    open.store(1, .release);
    weft_io.futexWake(u32, &open.raw, 1);
    // Bounded: a callback that never runs fails here, not at the runner's time limit.
    const deadline: Io.Clock.Timestamp = .fromNow(weft_io, .{
        .raw = .fromSeconds(10),
        .clock = .awake,
    });
    while (seen.fired.load(.acquire) == 0) {
        if (deadline.durationFromNow(weft_io).raw.nanoseconds <= 0) return error.TestNeverFired;
        weft_io.futexWaitTimeout(u32, &seen.fired.raw, 0, .{ .deadline = deadline }) catch {};
    }
    try std.testing.expectEqual(awaiter_finished, slot.load(.acquire));
    try std.testing.expectEqual(@as(u64, 7), future.await(weft_io));
    try std.testing.expectEqual(@as(u32, 1), seen.fired.load(.acquire));
}
