//! The runtime's *blocking lane*: a `weft.Lane` of a few OS threads, owned by the runtime and
//! started on first use (a program that never touches a file never pays for its threads), for
//! the file, directory and process calls the executor's loop cannot run asynchronously: on
//! the epoll backend all but the reads and writes of pollable descriptors, on io_uring those
//! the kernel's ring lacks, and on both the calls Linux has no asynchronous form of. `perform`
//! decides where a call runs: on the loop when the loop can run it, else on the lane.
//!
//! ```
//! const result = try state.blocking.perform(io, .{ .fsync = .{ .fd = fd, .datasync = false } });
//! const rc = try state.blocking.call(io, linux.flock, .{ fd, linux.LOCK.EX });
//! ```
//!
//! - `perform(op)`: io_uring runs file system operations itself (openat, statx, unlinkat, ...
//!   as far as the kernel implements them); epoll runs only readiness operations, so there a
//!   `read` or `write` goes to the loop first (a pipe, a terminal, a socket waits there,
//!   cancelably) and moves to the lane only if its descriptor cannot be polled (a regular
//!   file), and every other operation goes straight to the lane.
//! - `call(f, args)`: a syscall that has no loop operation at all (getdents64, readlinkat,
//!   flock, fchmodat, ...) always runs on the lane.
//! - On a thread weft does not run, both simply make the call on that thread, as
//!   std.Io.Threaded would.
//!
//! Cancelation: on the loop, the kernel operation is canceled (`sched/io_wait.zig`). On the
//! lane, a call is a cancelation point until a worker takes it; after that it runs to the end
//! (it borrows the caller's buffers) and the request is re-armed for the caller's next
//! cancelation point (`Lane.run`'s contract).
//!
//! The lane never refuses a call: admission `.wait` with an admission line as long as a `u32`
//! can count, because every caller in the line is a parked task or a blocked thread, and those
//! are bounded by the runtime's `tasks_max` and the process's threads long before that.
//! (Rejected: failing with `error.SystemResources` on a full queue. std's file error sets do
//! not all have it, and a file call that fails because other calls are in flight would be a
//! surprise no other std.Io implementation makes.) If its threads cannot be started, calls run
//! on the caller's thread instead, blocking its executor, which is what Threaded does.
//!
//! Thread-safety: every method may be called from any thread; `deinit` once, after every call
//! returned.
const BlockingLane = @This();

const std = @import("std");
const Io = std.Io;
const assert = std.debug.assert;
const config = @import("../config.zig");
const Lock = @import("../os/Mutex.zig");
const Lane = @import("../lanes/Lane.zig");
const named = @import("../lanes/named.zig");
const Completion = @import("../loop/Completion.zig");
const Executor = @import("../sched/Executor.zig");
const io_wait = @import("../sched/io_wait.zig");
const syscall_mod = @import("syscall.zig");

gpa: std.mem.Allocator,
/// Serialises starting the lane.
lock: Lock = .{},
/// Null until the first call that needs it. Written once under `lock` (release), read without
/// it (acquire).
lane: std.atomic.Value(?*Lane) = .init(null),
/// Set when starting the lane failed: later calls do not retry at every call.
unavailable: std.atomic.Value(bool) = .init(false),

pub fn init(gpa: std.mem.Allocator) BlockingLane {
    return .{ .gpa = gpa };
}

/// Stops the lane (running what it accepted) and joins its threads.
pub fn deinit(blocking: *BlockingLane, io: Io) void {
    if (blocking.lane.load(.acquire)) |lane| lane.deinit(io);
    blocking.* = undefined;
}

/// Performs `op` (a file system, process or readiness operation, never a socket operation)
/// and returns its result: non-negative on success, `-errno` on failure. Cancelation point.
/// The paths and buffers `op` points at must stay valid until it returns, as they do.
pub fn perform(blocking: *BlockingLane, io: Io, op: Completion.Op) Io.Cancelable!i32 {
    assert(!op.triesFirst()); // sockets have their own path
    const task = Executor.currentTask() orelse return syscall_mod.run(op);
    // The loop is read now, not kept: after a park the task may run on another executor.
    if (task.executor.loop.supports(op)) {
        const result = io_wait.perform(op, null) catch |err| switch (err) {
            error.Canceled => return error.Canceled,
            error.Timeout, error.SystemResources => unreachable, // no deadline, no timer
        };
        if (result != Completion.result_unpollable) return result;
    }
    return blocking.call(io, syscall_mod.run, .{op});
}

/// Runs `function(args...)` on the blocking lane and returns its result. Cancelation point
/// until the lane accepts the call (see the file doc).
pub fn call(
    blocking: *BlockingLane,
    io: Io,
    comptime function: anytype,
    args: std.meta.ArgsTuple(@TypeOf(function)),
) Result(function) {
    if (Executor.currentTask() == null) return @call(.auto, function, args);
    const lane = blocking.get() orelse {
        try io.checkCancel();
        return @call(.auto, function, args);
    };
    return lane.run(io, function, args) catch |err| {
        if (err == error.Canceled) return error.Canceled;
        // `.wait` admission, no deadline, a line that outnumbers every possible caller, and
        // a shutdown only in `deinit`, after every call returned.
        if (err == error.QueueFull or err == error.DeadlineExceeded) unreachable;
        if (err == error.Overloaded or err == error.ShutdownInProgress) unreachable;
        return @errorCast(err); // the function's own error
    };
}

/// Runs the raw syscall `function(args...)` (a `std.os.linux` wrapper returning `usize`) on the
/// blocking lane, retrying it when interrupted. Returns its result, or `-errno`.
pub fn syscall(
    blocking: *BlockingLane,
    io: Io,
    comptime function: anytype,
    args: std.meta.ArgsTuple(@TypeOf(function)),
) Io.Cancelable!i32 {
    const Job = struct {
        fn run(job_args: std.meta.ArgsTuple(@TypeOf(function))) i32 {
            return syscall_mod.retry(function, job_args);
        }
    };
    return blocking.call(io, Job.run, .{args});
}

/// `function`'s return type with `error.Canceled` added.
pub fn Result(comptime function: anytype) type {
    const R = @typeInfo(@TypeOf(function)).@"fn".return_type.?;
    return switch (@typeInfo(R)) {
        .error_union => |info| (info.error_set || Io.Cancelable)!info.payload,
        else => Io.Cancelable!R,
    };
}

/// The lane if it started (for `weft.Metrics`).
pub fn started(blocking: *const BlockingLane) ?*Lane {
    return blocking.lane.load(.acquire);
}

/// The lane, started on first use; null if its threads could not be started.
fn get(blocking: *BlockingLane) ?*Lane {
    if (blocking.lane.load(.acquire)) |lane| return lane;
    if (blocking.unavailable.load(.monotonic)) return null;
    blocking.lock.lock();
    defer blocking.lock.unlock();
    if (blocking.lane.load(.monotonic)) |lane| return lane;
    // Reported by the runtime's `weft.Metrics` as "blocking".
    const lane = Lane.initOwned(blocking.gpa, .{
        .threads = config.blocking_lane_threads,
        .queue_limit = config.blocking_lane_queue_limit,
        .admission = .wait,
        .waiters_max = std.math.maxInt(u32),
    }, named.blocking_name) catch {
        blocking.unavailable.store(true, .monotonic);
        return null;
    };
    // Release: the lane's initialisation is visible to every thread that loads the pointer.
    blocking.lane.store(lane, .release);
    return lane;
}
