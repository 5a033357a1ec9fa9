//! The stall detector and the schedule trace (sched/Watchdog.zig): a task that computes on its
//! executor is reported once when found and once when it ends, with the stack of the code
//! that stalls; a task that yields is never reported; with both off there is no thread.
const std = @import("std");
const builtin = @import("builtin");
const Io = std.Io;
const testing = std.testing;
const Runtime = @import("../Runtime.zig");
const Watchdog = @import("../sched/Watchdog.zig");
const Reporter = @import("../sched/Reporter.zig");
const Metrics = @import("../Metrics.zig");
const os = @import("../os/linux.zig");
const parked = @import("parked.zig");
const qemu = @import("qemu.zig");
const fs_test = @import("fs_test.zig");
const io_wait = @import("../sched/io_wait.zig");
const Executor = @import("../sched/Executor.zig");
const Completion = @import("../loop/Completion.zig");
const symbols = @import("../os/symbols.zig");

/// The function a stall report's stack must name. Never inlined, so that it has a frame.
noinline fn computeInlineForStallTest(duration_ns: u64) void {
    const start_ns = os.monotonicNs();
    while (os.monotonicNs() -| start_ns < duration_ns) std.atomic.spinLoopHint();
}

/// Whether this build's stall reports carry a whole stack: ReleaseFast and ReleaseSmall take
/// none, nor does ThreadSanitizer's (sched/Watchdog.zig); ReleaseSafe's lacks the frames of
/// functions compiled without a frame pointer, such as the spinning one here.
const stacks_taken = std.options.allow_stack_tracing and !builtin.sanitize_thread and
    builtin.mode == .Debug;

const Report = struct {
    buffer: [16 * 1024]u8 = undefined,
    text: []u8 = &.{},
    count: u32 = 0,
};

/// Waits (parking the caller, so the executor goes back to its scheduler) until the watchdog
/// published report `index` (from 0), or 5 s passed; returns it.
fn awaitReport(io: Io, watchdog: *Watchdog, index: u32, report: *Report) !void {
    for (0..500) |_| {
        report.text, report.count = watchdog.keptReport(index, &report.buffer);
        if (report.count > index) return;
        try io.sleep(.fromMilliseconds(10), .awake);
    }
    return error.TestUnexpectedResult;
}

test "stall: a report names its stack without std.debug's lock, which the stalled thread needs" {
    try qemu.skipUnderQemu(.process_vm_readv, @src());
    if (!Metrics.enabled) return os.skipTest(@src(), "-Dmetrics=false: no stall detector");
    if (!stacks_taken) return os.skipTest(@src(), "no stacks taken in this build");
    var rt = try Runtime.init(testing.allocator, .{ .executors = 1 });
    defer rt.deinit();
    const io = rt.io();
    const watchdog = &rt.state.watchdog.?;
    // std.debug's instance is what the stalled thread's own stack traces take (an allocator
    // recording one, a panic): held here, as its first load of a module's debug information
    // holds it for seconds. The report must not wait for it (os/symbols.zig). Nothing below
    // takes a stack trace on this thread until the lock is given back.
    const std_info = try std.debug.getSelfDebugInfo();
    std_info.rwlock.lockUncancelable(std.Options.debug_io);
    computeInlineForStallTest(200 * std.time.ns_per_ms);
    var report: Report = .{};
    const waited = awaitReport(io, watchdog, 0, &report);
    std_info.rwlock.unlock(std.Options.debug_io);
    try waited;
    try testing.expect(std.mem.indexOf(u8, report.text, "computeInlineForStallTest") != null);
}

test "stall: 200 ms computed on the main task is reported once, with its stack, and its end" {
    try qemu.skipUnderQemu(.process_vm_readv, @src());
    if (!Metrics.enabled) return os.skipTest(@src(), "-Dmetrics=false: no stall detector");
    var rt = try Runtime.init(testing.allocator, .{ .executors = 1 });
    defer rt.deinit();
    const io = rt.io();
    const watchdog = &rt.state.watchdog.?;
    computeInlineForStallTest(200 * std.time.ns_per_ms);
    var report: Report = .{};
    try awaitReport(io, watchdog, 0, &report);
    try testing.expect(std.mem.startsWith(u8, report.text, "stall: task 0x"));
    try testing.expect(std.mem.indexOf(u8, report.text, "on executor 0 for ") != null);
    try testing.expect(std.mem.indexOf(u8, report.text, "rt.compute") != null);
    if (stacks_taken) {
        const named = std.mem.indexOf(u8, report.text, "computeInlineForStallTest") != null;
        if (!named) std.debug.print("the report:\n{s}\n", .{report.text});
        try testing.expect(named);
    }
    try testing.expectEqual(@as(u64, 1), rt.metrics().stalls);

    try awaitReport(io, watchdog, 1, &report);
    try testing.expect(std.mem.startsWith(u8, report.text, "stall ended: task 0x"));
    const in_all = std.mem.indexOf(u8, report.text, " for ").?;
    const ms_end = std.mem.indexOfPos(u8, report.text, in_all, " ms in all").?;
    const ms = try std.fmt.parseInt(u64, report.text[in_all + " for ".len .. ms_end], 10);
    // The watchdog times it to within one look (a quarter of the threshold) on each side.
    try testing.expect(ms >= 150);
    const metrics = rt.metrics();
    try testing.expectEqual(@as(u64, 1), metrics.stalls);
    // The stall-time histogram holds that one stall, in the bucket of its length: (2^27, 2^28]
    // ns (134 to 268 ms), or the next on a machine that held the main task up longer.
    try testing.expectEqual(@as(u64, 1), metrics.stall_time.count);
    const p50_ns = metrics.stall_time.percentileNs(50).?;
    try testing.expect(p50_ns == 1 << 28 or p50_ns == 1 << 29);
    // The executor's longest hold is that stall's length, as the end report gave it.
    const held_max_ms = metrics.executors[0].held_max_ns / std.time.ns_per_ms;
    try testing.expect(held_max_ms >= ms and held_max_ms <= ms + 1);
    io.sleep(.fromMilliseconds(50), .awake) catch {};
    try testing.expectEqual(@as(u32, 2), watchdog.keptReport(0, &report.buffer)[1]);
}

fn computeInTask(io: Io, duration_ns: u64) void {
    Runtime.setName(io, "computing inline");
    computeInlineForStallTest(duration_ns);
}

test "stall: a task computing on a worker executor is reported with its stack" {
    try qemu.skipUnderQemu(.process_vm_readv, @src());
    if (!Metrics.enabled) return os.skipTest(@src(), "-Dmetrics=false: no stall detector");
    var rt = try Runtime.init(testing.allocator, .{ .executors = 2 });
    defer rt.deinit();
    const io = rt.io();
    const watchdog = &rt.state.watchdog.?;
    var future = try io.concurrent(computeInTask, .{ io, 200 * std.time.ns_per_ms });
    future.await(io);
    var report: Report = .{};
    try awaitReport(io, watchdog, 0, &report);
    try testing.expect(std.mem.indexOf(u8, report.text, "stall: task 0x") != null);
    if (stacks_taken) {
        // Its id (the main task is 1, this one the next) and the name it gave itself, told by
        // the sample that takes the stack.
        const named = "(id 2, \"computing inline\")";
        try testing.expect(std.mem.indexOf(u8, report.text, named) != null);
        try testing.expect(std.mem.indexOf(u8, report.text, "computeInlineForStallTest") != null);
        try testing.expect(std.mem.indexOf(u8, report.text, "computeInTask") != null);
    }
    try awaitReport(io, watchdog, 1, &report);
    try testing.expect(std.mem.startsWith(u8, report.text, "stall ended: task 0x"));
    try testing.expectEqual(@as(u64, 1), rt.metrics().stalls);
}

test "stall: a task that yields every millisecond is never reported" {
    if (!Metrics.enabled) return os.skipTest(@src(), "-Dmetrics=false: no stall detector");
    // A threshold well above the yields, so that a thread the kernel descheduled for a while
    // on a loaded machine is not taken for a stall either.
    var rt = try Runtime.init(testing.allocator, .{
        .executors = 1,
        .stall_threshold_ns = 100 * std.time.ns_per_ms,
    });
    defer rt.deinit();
    const io = rt.io();
    const start_ns = os.monotonicNs();
    while (os.monotonicNs() -| start_ns < 400 * std.time.ns_per_ms) {
        computeInlineForStallTest(std.time.ns_per_ms);
        try Runtime.yield(io);
    }
    var report: Report = .{};
    report.text, report.count = rt.state.watchdog.?.keptReport(0, &report.buffer);
    try testing.expectEqual(@as(u32, 0), report.count);
    try testing.expectEqual(@as(u64, 0), rt.metrics().stalls);
}

test "stall: a hold under the threshold is not reported; one past it is, with the threshold" {
    if (!Metrics.enabled) return os.skipTest(@src(), "-Dmetrics=false: no stall detector");
    const threshold_ms = 100;
    var rt = try Runtime.init(testing.allocator, .{
        .executors = 1,
        .stall_threshold_ns = threshold_ms * std.time.ns_per_ms,
    });
    defer rt.deinit();
    const io = rt.io();
    const watchdog = &rt.state.watchdog.?;
    // A run of its own, begun after the runtime's start.
    try io.sleep(.fromMilliseconds(1), .awake);
    // 60 % of the threshold: the watchdog looks every quarter of it, so it sees this hold
    // twice or more, and times it short of the threshold (a wait of the thread for a CPU is
    // taken off), never past it. Then it looks twice more while the task sleeps.
    computeInlineForStallTest(threshold_ms * 6 / 10 * std.time.ns_per_ms);
    try io.sleep(.fromMilliseconds(threshold_ms / 2), .awake);
    var report: Report = .{};
    report.text, report.count = watchdog.keptReport(0, &report.buffer);
    if (report.count != 0) std.debug.print("reported: {s}\n", .{report.text});
    try testing.expectEqual(@as(u32, 0), report.count);
    try testing.expectEqual(@as(u64, 0), rt.metrics().stalls);

    computeInlineForStallTest(threshold_ms * 5 / 2 * std.time.ns_per_ms);
    try awaitReport(io, watchdog, 0, &report);
    try testing.expect(std.mem.startsWith(u8, report.text, "stall: task 0x"));
    try testing.expect(std.mem.indexOf(u8, report.text, "(threshold 100 ms)") != null);
    // Reported once held past the threshold, not at a look before it.
    const held_start = (std.mem.indexOf(u8, report.text, "on executor 0 for ") orelse
        return error.TestUnexpectedResult) + "on executor 0 for ".len;
    const held_end = std.mem.indexOfPos(u8, report.text, held_start, " ms without") orelse
        return error.TestUnexpectedResult;
    const held_ms = try std.fmt.parseInt(u64, report.text[held_start..held_end], 10);
    try testing.expect(held_ms >= threshold_ms);
    try testing.expectEqual(@as(u64, 1), rt.metrics().stalls);
}

test "stall: with the detector off (and no trace) the runtime starts no watchdog" {
    var rt = try Runtime.init(testing.allocator, .{ .executors = 1, .stall_threshold_ns = null });
    defer rt.deinit();
    try testing.expect(rt.state.watchdog == null);
    computeInlineForStallTest(60 * std.time.ns_per_ms);
    try testing.expectEqual(@as(u64, 0), rt.metrics().stalls);
}

test "stall: a threshold below 1 ms is refused" {
    try testing.expectError(
        error.InvalidOptions,
        Runtime.init(testing.allocator, .{ .stall_threshold_ns = std.time.ns_per_ms - 1 }),
    );
}

test "stall: a schedule trace line names every executor" {
    if (!Metrics.enabled) return os.skipTest(@src(), "-Dmetrics=false: no stall detector " ++
        "whose lanes hook the trace could borrow");
    var rt = try Runtime.init(testing.allocator, .{ .executors = 2 });
    defer rt.deinit();
    var watchdog: Watchdog = .init(&rt.state.scheduler, .{
        .stall_threshold_ns = null,
        .trace_interval_ns = std.time.ns_per_s,
        .trace_lanes = rt.state.watchdog.?.options.trace_lanes,
    });
    var buffer: [1024]u8 = undefined;
    var writer: Io.Writer = .fixed(&buffer);
    try watchdog.writeTraceLine(&writer, os.monotonicNs(), std.time.ns_per_s);
    const line = writer.buffered();
    try testing.expect(std.mem.startsWith(u8, line, "weft sched "));
    try testing.expect(std.mem.indexOf(u8, line, "executors=2 stalls=0") != null);
    try testing.expect(std.mem.indexOf(u8, line, " [0: queued=") != null);
    try testing.expect(std.mem.indexOf(u8, line, " [1: queued=") != null);
    try testing.expect(std.mem.indexOf(u8, line, " lanes: [blocking: queued=0 running=0]") != null);
    try testing.expect(std.mem.indexOf(u8, line, " [cpu: queued=0 running=0]") != null);
    try testing.expect(std.mem.endsWith(u8, line, "]\n"));
}

test "stall: ready tasks queued behind a stalled task run on another executor meanwhile" {
    if (!Metrics.enabled) return os.skipTest(@src(), "-Dmetrics=false: no stall detector");
    var rt = try Runtime.init(testing.allocator, .{ .executors = 2 });
    defer rt.deinit();
    const io = rt.io();
    const Queued = struct {
        gate: Io.Event = .unset,
        set_ns: u64 = 0,
        finished_ns: [waiters]std.atomic.Value(u64) = @splat(.init(0)),

        const waiters = 5;

        fn wait(queued: *@This(), io_: Io, index: usize) Io.Cancelable!void {
            try queued.gate.wait(io_);
            queued.finished_ns[index].store(os.monotonicNs(), .release);
        }
    };
    var queued: Queued = .{};
    var group: Io.Group = .init;
    defer group.cancel(io);
    for (0..Queued.waiters) |index| try group.concurrent(io, Queued.wait, .{ &queued, io, index });
    try parked.waitMembersParked(io, &group, Queued.waiters, .cancelable);
    // The waiters wake onto this executor (one into its LIFO slot, the others into its ring),
    // which the main task then holds for 300 ms.
    queued.set_ns = os.monotonicNs();
    queued.gate.set(io);
    computeInlineForStallTest(300 * std.time.ns_per_ms);
    const stall_end_ns = os.monotonicNs();
    try group.await(io);
    var finished_during_stall: u32 = 0;
    for (&queued.finished_ns) |*finished| {
        const finished_ns = finished.load(.acquire);
        if (finished_ns != 0 and finished_ns < stall_end_ns) finished_during_stall += 1;
    }
    // Every one ran elsewhere, the one in the LIFO slot too (the watchdog's signal handler
    // hands it over), except under ThreadSanitizer, whose builds install no handler.
    const expected = if (builtin.sanitize_thread) Queued.waiters - 1 else Queued.waiters;
    if (finished_during_stall < expected) {
        std.debug.print("{d} of {d} waiters finished during the stall; after the gate (ms):", .{
            finished_during_stall, Queued.waiters,
        });
        for (&queued.finished_ns) |*finished| {
            const after_ns = finished.load(.acquire) -| queued.set_ns;
            std.debug.print(" {d}", .{after_ns / std.time.ns_per_ms});
        }
        const metrics = rt.metrics();
        std.debug.print("; stolen by executor 1: {d}, its sleeps: {d}\n", .{
            metrics.executors[1].tasks_stolen, metrics.executors[1].sleeps,
        });
        return error.TestUnexpectedResult;
    }
}

/// A task that sleeps `sleep_ms_` and notes when it woke.
fn SleeperFor(comptime sleep_ms_: u64) type {
    return struct {
        woken_ns: std.atomic.Value(u64) = .init(0),

        const sleep_ms = sleep_ms_;

        fn sleep(sleeper: *@This(), io: Io) Io.Cancelable!void {
            try io.sleep(.fromMilliseconds(sleep_ms), .awake);
            sleeper.woken_ns.store(os.monotonicNs(), .release);
        }
    };
}

test "stall: a sleeper's timer on a held executor fires on time, and it runs on another one" {
    if (!Metrics.enabled) return os.skipTest(@src(), "-Dmetrics=false: no stall detector");
    var rt = try Runtime.init(testing.allocator, .{ .executors = 2 });
    defer rt.deinit();
    const io = rt.io();
    const Sleeper = SleeperFor(20);
    var sleeper: Sleeper = .{};
    // `async` runs the child first, here: its timer is armed on this executor, which the main
    // task (bound here) then holds for 300 ms.
    const start_ns = os.monotonicNs();
    var future = io.async(Sleeper.sleep, .{ &sleeper, io });
    defer future.cancel(io) catch {};
    computeInlineForStallTest(300 * std.time.ns_per_ms);
    try future.await(io);
    const woken_ms = (sleeper.woken_ns.load(.acquire) - start_ns) / std.time.ns_per_ms;
    // Due at 20 ms; the watchdog fires it within a look or two (12.5 ms each at the default
    // threshold) of its deadline. 150 ms leaves room for a loaded machine; without the
    // watchdog's help it wakes when the hold ends, at 300 ms.
    if (woken_ms < Sleeper.sleep_ms or woken_ms > 150) {
        std.debug.print("the sleeper woke after {d} ms; timers fired by the watchdog: {d}\n", .{
            woken_ms, rt.metrics().stall_timers_fired,
        });
        return error.TestUnexpectedResult;
    }
    try testing.expect(rt.metrics().stall_timers_fired >= 1);
}

/// The hold of the two tests below: 400 ms, with a `SleeperFor(150)` on the held executor.
const hold_ms = 400;

/// Expects the sleeper, started at `start_ns` before a `hold_ms` hold of its executor, to have
/// woken on time: the watchdog fired its timer during the hold (not at its end).
fn expectWokenDuringHold(rt: *Runtime, sleeper: *SleeperFor(150), start_ns: u64) !void {
    const woken_ms = (sleeper.woken_ns.load(.acquire) - start_ns) / std.time.ns_per_ms;
    if (woken_ms < 150 or woken_ms > hold_ms - 100) {
        std.debug.print("the sleeper woke after {d} ms; timers fired by the watchdog: {d}\n", .{
            woken_ms, rt.metrics().stall_timers_fired,
        });
        return error.TestUnexpectedResult;
    }
}

test "stall: while a report's symbols load, the watchdog goes on firing a held executor's timers" {
    try qemu.skipUnderQemu(.process_vm_readv, @src());
    if (!Metrics.enabled) return os.skipTest(@src(), "-Dmetrics=false: no stall detector");
    if (!stacks_taken) return os.skipTest(@src(), "no stacks taken in this build");
    var rt = try Runtime.init(testing.allocator, .{ .executors = 2 });
    defer rt.deinit();
    const io = rt.io();
    // Due well after the stall is found (the default threshold, 50 ms, and a look).
    const Sleeper = SleeperFor(150);
    var sleeper: Sleeper = .{};
    // The first load of the debug information holds the lookups for seconds: held here for
    // the whole stall. The stall's report waits for it; the watchdog must not.
    symbols.holdForTesting();
    var held = true;
    defer if (held) symbols.releaseForTesting();
    const start_ns = os.monotonicNs();
    // Armed on this executor, which the main task then holds.
    var future = io.async(Sleeper.sleep, .{ &sleeper, io });
    defer future.cancel(io) catch {};
    computeInlineForStallTest(hold_ms * std.time.ns_per_ms);
    const stalls = rt.metrics().stalls;
    symbols.releaseForTesting();
    held = false;
    try future.await(io);
    // A watchdog that named the stack itself waited at its first report, and the timer fired
    // when the hold ended.
    try expectWokenDuringHold(&rt, &sleeper, start_ns);
    try testing.expectEqual(@as(u64, 1), stalls);
    // The report, named once the lookups could go on, and its end after it.
    const watchdog = &rt.state.watchdog.?;
    var report: Report = .{};
    try awaitReport(io, watchdog, 0, &report);
    try testing.expect(std.mem.indexOf(u8, report.text, "computeInlineForStallTest") != null);
    try awaitReport(io, watchdog, 1, &report);
    try testing.expect(std.mem.startsWith(u8, report.text, "stall ended: task 0x"));
}

/// The process's stderr replaced by a pipe already full, as when whoever reads it stops: a
/// write to it blocks until `unblock` (stderr is /dev/null then, and a write still blocked
/// fails) or `end` (stderr is back). Nothing may print meanwhile, the test included.
const BlockedStderr = struct {
    saved: linux.fd_t,
    read_end: ?linux.fd_t,

    const linux = if (builtin.os.tag == .linux) std.os.linux else struct {};

    fn start() !BlockedStderr {
        var fds: [2]linux.fd_t = undefined;
        const pipe_rc = linux.pipe2(&fds, .{ .CLOEXEC = true, .NONBLOCK = true });
        if (linux.errno(pipe_rc) != .SUCCESS) return error.TestNoPipe;
        errdefer for (fds) |fd| {
            _ = linux.close(fd);
        };
        const filler: [4096]u8 = @splat('x');
        while (true) {
            const rc = linux.write(fds[1], &filler, filler.len);
            if (linux.errno(rc) == .AGAIN) break;
            if (linux.errno(rc) != .SUCCESS) return error.TestPipeWrite;
        }
        // Blocking from now on, as a pipe stderr is.
        const flags = linux.fcntl(fds[1], linux.F.GETFL, 0);
        const blocking = flags & ~@as(usize, @as(u32, @bitCast(linux.O{ .NONBLOCK = true })));
        if (linux.errno(linux.fcntl(fds[1], linux.F.SETFL, blocking)) != .SUCCESS) {
            return error.TestFcntl;
        }
        const saved_rc = linux.fcntl(2, linux.F.DUPFD_CLOEXEC, 3);
        if (linux.errno(saved_rc) != .SUCCESS) return error.TestDup;
        const saved: linux.fd_t = @intCast(saved_rc);
        if (linux.errno(linux.dup2(fds[1], 2)) != .SUCCESS) {
            _ = linux.close(saved);
            return error.TestDup;
        }
        _ = linux.close(fds[1]);
        return .{ .saved = saved, .read_end = fds[0] };
    }

    /// Writes to stderr go nowhere from now on, and one still blocked fails.
    fn unblock(blocked: *BlockedStderr) void {
        const read_end = blocked.read_end orelse return;
        const null_rc = linux.open("/dev/null", .{ .ACCMODE = .WRONLY, .CLOEXEC = true }, 0);
        if (linux.errno(null_rc) == .SUCCESS) {
            _ = linux.dup2(@intCast(null_rc), 2);
            _ = linux.close(@intCast(null_rc));
        } else {
            _ = linux.dup2(blocked.saved, 2);
        }
        _ = linux.close(read_end);
        blocked.read_end = null;
    }

    fn end(blocked: *BlockedStderr) void {
        blocked.unblock();
        _ = linux.dup2(blocked.saved, 2);
        _ = linux.close(blocked.saved);
    }
};

test "stall: with stderr blocked, the watchdog goes on firing a held executor's timers" {
    if (!Metrics.enabled) return os.skipTest(@src(), "-Dmetrics=false: no stall detector");
    var rt = try Runtime.init(testing.allocator, .{ .executors = 2 });
    defer rt.deinit();
    const io = rt.io();
    const Sleeper = SleeperFor(150);
    var sleeper: Sleeper = .{};
    // The stall's report waits for stderr until `end`; the watchdog must not.
    var blocked: BlockedStderr = try .start();
    var stderr_blocked = true;
    defer if (stderr_blocked) blocked.end();
    const start_ns = os.monotonicNs();
    var future = io.async(Sleeper.sleep, .{ &sleeper, io });
    defer future.cancel(io) catch {};
    computeInlineForStallTest(hold_ms * std.time.ns_per_ms);
    try future.await(io);
    const stalls = rt.metrics().stalls;
    blocked.end();
    stderr_blocked = false;
    // A watchdog that logged the report itself waited for stderr from the stall's start, and
    // the timer fired when the hold ended.
    try expectWokenDuringHold(&rt, &sleeper, start_ns);
    try testing.expectEqual(@as(u64, 1), stalls);
}

test "stall: with stderr blocked, the schedule trace's lines queue, then drop; none waits" {
    if (!Metrics.enabled) return os.skipTest(@src(), "-Dmetrics=false: no stall detector");
    var rt = try Runtime.init(testing.allocator, .{ .executors = 1, .stall_threshold_ns = null });
    defer rt.deinit();
    const io = rt.io();
    // A trace of the test's own every millisecond (WEFT_TRACE is the process's environment).
    var watchdog: Watchdog = .init(&rt.state.scheduler, .{
        .stall_threshold_ns = null,
        .trace_interval_ns = std.time.ns_per_ms,
    });
    var blocked: BlockedStderr = try .start();
    defer blocked.end();
    try watchdog.start();
    defer watchdog.stop();
    // The lines queued behind the blocked one go to /dev/null as the watchdog stops.
    defer blocked.unblock();
    try io.sleep(.fromMilliseconds(100), .awake);
    const reporter = &watchdog.reporter;
    reporter.lock.lock();
    const queued = reporter.len;
    const dropped = reporter.dropped;
    reporter.lock.unlock();
    // Before any check prints: a watchdog that wrote to stderr itself holds its lock.
    blocked.unblock();
    // A watchdog that wrote its trace itself waited at its first line, and queued none.
    try testing.expectEqual(@as(u32, Reporter.queue_len), queued);
    try testing.expect(dropped > 0);
}

/// A pipe read by a task whose executor the main task then holds for up to 300 ms, written
/// 20 ms in by a plain thread: the read completes, and its task runs, on the other executor
/// while the hold goes on (the watchdog reaps the held executor's loop, docs/STALLS.md).
fn expectReadRescued(backend: @FieldType(Runtime.Options, "backend")) !void {
    try skipWithoutRescue(backend);
    // The scenario needs the read parked on the executor the main task then holds; on a busy
    // machine the other executor may take the reader first (its read then completes there,
    // with nothing to rescue). Such a run proves nothing either way: it is run again.
    for (0..5) |_| {
        if (try readRescuedOnce(backend)) return;
    }
    return error.ReaderNeverOnTheHeldExecutor;
}

/// False if the reader did not read on the main task's executor (see `expectReadRescued`).
fn readRescuedOnce(backend: @FieldType(Runtime.Options, "backend")) !bool {
    var rt = try Runtime.init(testing.allocator, .{ .executors = 2, .backend = backend });
    defer rt.deinit();
    const io = rt.io();
    const files = try fs_test.pipe();
    defer for (files) |file| file.close(io);
    const Reader = struct {
        read_ns: std.atomic.Value(u64) = .init(0),
        executor: std.atomic.Value(u32) = .init(std.math.maxInt(u32)),
        bytes: [8]u8 = undefined,
        len: usize = 0,

        fn read(reader: *@This(), io_: Io, file: Io.File) !void {
            var buffers = [_][]u8{&reader.bytes};
            reader.executor.store(Executor.ofThread().?.index, .release);
            reader.len = try file.readStreaming(io_, &buffers);
            reader.read_ns.store(os.monotonicNs(), .release);
        }
    };
    var reader: Reader = .{};
    // `async` runs the child first, here: its read goes to this executor's loop, which the
    // main task (bound here) then holds.
    const start_ns = os.monotonicNs();
    var future = io.async(Reader.read, .{ &reader, io, files[0] });
    defer future.cancel(io) catch {};
    const held = Executor.ofThread().?.index;
    const writer = try std.Thread.spawn(.{}, writeAbcLater, .{files[1].handle});
    defer writer.join();
    holdUntilSet(&reader.read_ns, 300 * std.time.ns_per_ms);
    const read_ns = reader.read_ns.load(.acquire);
    try future.await(io);
    try testing.expectEqualStrings("abc", reader.bytes[0..reader.len]);
    if (reader.executor.load(.acquire) != held) return false;
    const read_ms = (read_ns -| start_ns) / std.time.ns_per_ms;
    // Written at 20 ms; the watchdog finds the executor held within a look or two (12.5 ms
    // each at the default threshold) and reaps its loop every millisecond from then on. 150
    // ms leaves room for a loaded machine; without the rescue the read completes when the
    // hold ends, at 300 ms.
    if (read_ns == 0 or read_ms > 150) {
        std.debug.print("the read completed after {d} ms (0: not during the hold); " ++
            "completions delivered by the watchdog: {d}\n", .{
            read_ms, rt.metrics().stall_io_rescued,
        });
        return error.TestUnexpectedResult;
    }
    const metrics = rt.metrics();
    if (metrics.stall_io_rescued == 0) {
        std.debug.print("read after {d} ms with no completion rescued; stalls seen {d}, " ++
            "timers fired {d}\n", .{
            read_ms, metrics.stall_time.count, metrics.stall_timers_fired,
        });
        return error.TestUnexpectedResult;
    }
    return true;
}

/// Skips a test of the watchdog's rescue where it cannot run: no stall detector, io_uring
/// under TSan (no SIGURG handler), and what qemu-user lacks for each backend.
fn skipWithoutRescue(backend: @FieldType(Runtime.Options, "backend")) !void {
    if (!Metrics.enabled) return os.skipTest(@src(), "-Dmetrics=false: no stall detector");
    if (builtin.sanitize_thread and backend == .io_uring) {
        return os.skipTest(@src(), "TSan: no rescue of an io_uring loop");
    }
    try qemu.skipUnderQemu(if (backend == .io_uring) .io_uring else .nowait, @src());
}

/// Writes "abc" to `fd` 20 ms from now, from a plain thread: the rescue tests' writer.
fn writeAbcLater(fd: os.fd_t) void {
    os.sleepThread(20 * std.time.ns_per_ms);
    _ = std.os.linux.write(fd, "abc", 3);
}

/// Computes on the calling executor until `flag` is set or `limit_ns` passed.
noinline fn holdUntilSet(flag: *const std.atomic.Value(u64), limit_ns: u64) void {
    const start_ns = os.monotonicNs();
    while (flag.load(.acquire) == 0 and os.monotonicNs() -| start_ns < limit_ns) {
        std.atomic.spinLoopHint();
    }
}

test "stall: a pipe read on a held io_uring executor completes on another one meanwhile" {
    try expectReadRescued(.io_uring);
}

test "stall: a pipe read on a held epoll executor completes on another one meanwhile" {
    try expectReadRescued(.epoll);
}

test "stall: a rescued read with a deadline ends on the other executor and its timer is gone" {
    try skipWithoutRescue(.io_uring);
    var rt = try Runtime.init(testing.allocator, .{ .executors = 2, .backend = .io_uring });
    defer rt.deinit();
    const io = rt.io();
    const files = try fs_test.pipe();
    defer for (files) |file| file.close(io);
    const Reader = struct {
        read_ns: std.atomic.Value(u64) = .init(0),
        bytes: [8]u8 = undefined,
        result: i32 = 0,

        /// The loop's read with a deadline 10 s away: its timer sits in the heap of the
        /// executor that submitted it, and must be stopped from the one the task ends on.
        fn read(reader: *@This(), fd: os.fd_t) io_wait.Error!void {
            const iovecs = [_]std.posix.iovec{.{ .base = &reader.bytes, .len = 8 }};
            const op: Completion.Op = .{ .read = .{ .fd = fd, .iovecs = &iovecs, .offset = null } };
            reader.result = try io_wait.perform(op, os.monotonicNs() + 10 * std.time.ns_per_s);
            reader.read_ns.store(os.monotonicNs(), .release);
        }
    };
    var reader: Reader = .{};
    var future = io.async(Reader.read, .{ &reader, files[0].handle });
    defer future.cancel(io) catch {};
    const writer = try std.Thread.spawn(.{}, writeAbcLater, .{files[1].handle});
    defer writer.join();
    holdUntilSet(&reader.read_ns, 300 * std.time.ns_per_ms);
    const read_during_hold = reader.read_ns.load(.acquire) != 0;
    try future.await(io);
    try testing.expect(read_during_hold);
    try testing.expectEqual(@as(i32, 3), reader.result);
    try testing.expectEqualStrings("abc", reader.bytes[0..3]);
    // Stopped, not fired: no timer is left in either executor's heap.
    for (rt.state.scheduler.executors) |*executor| {
        executor.timers_lock.lock();
        defer executor.timers_lock.unlock();
        try testing.expect(executor.timers.isEmpty());
    }
    const metrics = rt.metrics();
    try testing.expect(metrics.stall_io_rescued >= 1);
    for (metrics.executorsSlice()) |executor| {
        try testing.expectEqual(@as(u64, 0), executor.timers_fired);
    }
}
