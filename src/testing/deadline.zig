//! Test helper: a wait with a deadline of its own, which names the waiter it left behind.
//!
//! A lost wake-up (a waiter nobody resumes) used to hang its test until the build runner's
//! 120 s limit, which names the test but not the wait. `run` does the wait on a task of its
//! own and watches it: past `timeout_ns` it writes the runtime's task dump (docs/TASK_DUMP.md:
//! each task, what it waits for and where) to stderr, cancels the wait and returns
//! `error.WaiterNeverResumed`, so the test fails by name within seconds and its output says
//! which task was left waiting, on what.
//!
//! ```
//! try deadline.run(io, sync.WaitGroup.wait, .{ &wait_group, io });
//! try testing.expectEqual(99, try deadline.await(io, &receiver)); // an Io.Future
//! try deadline.awaitGroup(io, &group);
//! ```
//!
//! A wait the cancel does not end either (an uncancelable wait, or a waiter taken out of its
//! queue and never woken, whose cancel has nothing to withdraw) is stuck where the test cannot
//! reclaim it: its task still uses the test's memory, and `Runtime.deinit` would panic on it.
//! `run` then panics itself, 1 s after the cancel and the dump, as `parked.zig` does. Either
//! way the test ends in seconds, by name.
//!
//! The deadline bounds a wait for something that already happened or is about to (a send, the
//! last `done`, a shutdown's failing of its line), not a long computation. Rejected: one
//! deadline around a whole test body, which would have to allow the slowest body under
//! ThreadSanitizer and qemu (tens of seconds) and so give the few seconds back.
const std = @import("std");
const assert = std.debug.assert;
const Io = std.Io;
const platform = @import("../platform.zig");
const Runtime = @import("runtime.zig").Runtime;
const State = @import("../std_io/State.zig");
const task_io = @import("../std_io/task.zig");

/// Generous for a wait whose cause already happened: a loaded 2-core machine, ThreadSanitizer
/// and qemu-user resume such a waiter within milliseconds; yet far under the runner's 120 s.
pub const timeout_ns_default = 5 * std.time.ns_per_s;
/// How long a canceled wait may take to end before `run` gives it up and panics: a cancel
/// reaches a parked task at once, so this only allows for a loaded machine.
const cancel_grace_ns = 1 * std.time.ns_per_s;
/// The name of the task that waits, in the dump.
const task_name = "deadline: the wait under test";

pub const Error = error{
    /// The wait did not end within its deadline; it ended when canceled. The task dump on
    /// stderr says what it (and every other task) waited for.
    WaiterNeverResumed,
} || Io.ConcurrentError || Io.Cancelable;

/// What `run` returns for `function`: its result, its error set and `Error`.
pub fn Result(comptime function: anytype) type {
    const Return = @typeInfo(@TypeOf(function)).@"fn".return_type.?;
    return switch (@typeInfo(Return)) {
        .error_union => |info| (info.error_set || Error)!info.payload,
        else => Error!Return,
    };
}

/// `runWithin` with `timeout_ns_default`.
pub fn run(
    io: Io,
    comptime function: anytype,
    args: std.meta.ArgsTuple(@TypeOf(function)),
) Result(function) {
    return runWithin(io, timeout_ns_default, function, args);
}

/// `future.await(io)` (a `*Io.Future(T)`) under `timeout_ns_default`; on expiry its task is
/// canceled through the wait (an await forwards a cancel).
pub fn await(io: Io, future: anytype) Result(@TypeOf(future.*).await) {
    return runWithin(io, timeout_ns_default, @TypeOf(future.*).await, .{ future, io });
}

/// `group.await(io)` under `timeout_ns_default`; on expiry the members are canceled (as an
/// await that is canceled cancels them) and waited for.
pub fn awaitGroup(io: Io, group: *Io.Group) Result(Io.Group.await) {
    return runWithin(io, timeout_ns_default, Io.Group.await, .{ group, io });
}

/// Calls `function(args...)` on a task of `io`'s runtime and returns its result once it
/// returns; if it has not within `timeout_ns`, writes the task dump to stderr, cancels the
/// task and returns `error.WaiterNeverResumed` once it ended (or panics if it does not end
/// within 1 s of the cancel). On the fiber runtime, without a weft runtime behind `io`
/// (std.Io.Threaded, for a test shared between them) it calls `function` directly,
/// unwatched; in a threaded build (every `Io` std's) it watches with no task dump. A
/// cancelation point.
pub fn runWithin(
    io: Io,
    timeout_ns: u64,
    comptime function: anytype,
    args: std.meta.ArgsTuple(@TypeOf(function)),
) Result(function) {
    return runReporting(io, timeout_ns, null, function, args);
}

/// `runWithin`, with the report appended to `out` instead of written to stderr (null): for
/// the helper's own test, which expects a report and wants none on its output.
pub fn runReporting(
    io: Io,
    timeout_ns: u64,
    out: ?*Io.Writer.Allocating,
    comptime function: anytype,
    args: std.meta.ArgsTuple(@TypeOf(function)),
) Result(function) {
    assert(timeout_ns > 0);
    // The fiber runtime calls a wait on another `Io` directly; in a threaded build every `Io`
    // is std's, the threaded runtime's among them, and each wait is watched.
    const state = if (platform.fibers)
        State.of(io) orelse return @call(.auto, function, args)
    else {};
    var done: std.atomic.Value(u32) = .init(0);
    var future = try io.concurrent(Watched(function).call, .{ io, &done, args });
    if (try waitDone(io, &future, &done, timeout_ns)) return future.await(io);
    var text: Io.Writer.Allocating = .init(std.heap.page_allocator);
    defer text.deinit();
    const report_text = out orelse &text;
    if (platform.fibers) {
        report(io, .{ .state = state }, &report_text.writer, timeout_ns);
        // A request, not `future.cancel`: that would block on the very wait that does not end.
        task_io.taskOf(future.any_future.?).requestCancel();
        if (try waitDone(io, &future, &done, cancel_grace_ns)) {
            endedWhenCanceled(report_text, out != null);
            discard(future.await(io));
            return error.WaiterNeverResumed;
        }
    } else {
        // No task dump: the threaded runtime's tasks are the OS's threads, not weft's to list.
        // Its only cancel request is `future.cancel`, which also awaits: a task of its own
        // makes it, since the wait may not end.
        writeReport(null, &report_text.writer, timeout_ns) catch {};
        const Future = @TypeOf(future);
        var canceler = io.concurrent(cancelFuture(Future), .{ &future, io }) catch
            giveUp(report_text, timeout_ns);
        if (try waitDone(io, &canceler, &done, cancel_grace_ns)) {
            endedWhenCanceled(report_text, out != null);
            canceler.await(io);
            return error.WaiterNeverResumed;
        }
    }
    giveUp(report_text, timeout_ns);
}

/// The report's end when the canceled wait ended; written to stderr unless the caller asked
/// for the report.
fn endedWhenCanceled(report_text: *Io.Writer.Allocating, caller_has_report: bool) void {
    report_text.writer.writeAll("deadline: the wait ended when canceled\n") catch {};
    if (!caller_has_report) std.debug.print("{s}", .{report_text.written()});
}

/// Ends the process: the wait did not end when canceled (or could not be canceled), so the
/// test cannot reclaim its memory. The report goes to stderr, even when the caller asked
/// for it.
fn giveUp(report_text: *Io.Writer.Allocating, timeout_ns: u64) noreturn {
    std.debug.print("{s}", .{report_text.written()});
    std.debug.panic("deadline: a wait did not end within {d} ms, nor within {d} ms of its " ++
        "cancel: a waiter never resumed, and the test cannot reclaim it (report above)", .{
        timeout_ns / std.time.ns_per_ms,
        cancel_grace_ns / std.time.ns_per_ms,
    });
}

/// The canceler's task: `future.cancel`, its result dropped (the wait was given up on).
fn cancelFuture(comptime Future: type) fn (*Future, Io) void {
    return struct {
        fn cancel(future: *Future, io: Io) void {
            discard(future.cancel(io));
        }
    }.cancel;
}

/// The task that does the wait: `function`, then `done` set to 1 and woken.
fn Watched(comptime function: anytype) type {
    const Return = @typeInfo(@TypeOf(function)).@"fn".return_type.?;
    return struct {
        fn call(
            io: Io,
            done: *std.atomic.Value(u32),
            args: std.meta.ArgsTuple(@TypeOf(function)),
        ) Return {
            Runtime.setName(io, task_name);
            // After the result is computed; `done` outlives this: `run` awaits the task.
            defer {
                done.store(1, .release);
                io.futexWake(u32, &done.raw, 1);
            }
            return @call(.auto, function, args);
        }
    };
}

/// Whether `done` was set within `timeout_ns`. If the caller is canceled meanwhile, the wait
/// is canceled too (it uses the caller's memory) and `error.Canceled` returned.
fn waitDone(
    io: Io,
    future: anytype,
    done: *std.atomic.Value(u32),
    timeout_ns: u64,
) Io.Cancelable!bool {
    const deadline: Io.Clock.Timestamp = .fromNow(io, .{
        .raw = .fromNanoseconds(timeout_ns),
        .clock = .awake,
    });
    while (done.load(.acquire) == 0) {
        if (deadline.durationFromNow(io).raw.nanoseconds <= 0) return false;
        io.futexWaitTimeout(u32, &done.raw, 0, .{ .deadline = deadline }) catch |err| {
            discard(future.cancel(io));
            return err;
        };
    }
    return true;
}

/// Writes the report on a plain thread while the calling task parks: the process's first dump
/// loads the debug information (hundreds of milliseconds in a Debug build), which on an
/// executor the stall detector would report, burying the dump under a stall's stack.
fn report(io: Io, rt: Runtime, w: *Io.Writer, timeout_ns: u64) void {
    var done: std.atomic.Value(u32) = .init(0);
    const thread = std.Thread.spawn(.{}, reportThread, .{ rt, w, timeout_ns, &done }) catch {
        return writeReport(rt, w, timeout_ns) catch {};
    };
    while (done.load(.acquire) == 0) io.futexWaitUncancelable(u32, &done.raw, 0);
    thread.join();
    assert(done.load(.monotonic) == 1);
}

fn reportThread(rt: Runtime, w: *Io.Writer, timeout_ns: u64, done: *std.atomic.Value(u32)) void {
    writeReport(rt, w, timeout_ns) catch {};
    done.store(1, .release);
    // Through the runtime's Io from a foreign thread: it wakes the parked task.
    rt.io().futexWake(u32, &done.raw, 1);
}

/// The report; null `rt` on the threaded runtime, which has no task dump to add.
fn writeReport(rt: ?Runtime, w: *Io.Writer, timeout_ns: u64) Io.Writer.Error!void {
    try w.print("deadline: a wait did not end within {d} ms: a waiter never resumed? ", .{
        timeout_ns / std.time.ns_per_ms,
    });
    const runtime = rt orelse return w.writeAll("(No task dump: on std.Io.Threaded each " ++
        "task is an OS thread; a debugger lists their stacks.)\n");
    try w.print("The wait is the task named \"{s}\" (with state=await task=N, it awaits " ++
        "task N); what each task waits for:\n", .{task_name});
    try runtime.dumpTasks(w);
}

/// Drops a result whatever its type: a wait given up on returns `error.Canceled` or anything.
fn discard(result: anytype) void {
    if (@typeInfo(@TypeOf(result)) == .error_union) {
        if (result) |_| {} else |_| {}
    }
}
