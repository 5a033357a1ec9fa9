//! A test's account of a hang: when the test still runs `after_ns` after `start`, a thread
//! writes the runtime's task dump and its scheduler's queues and counts to stderr. The build
//! runner kills a test at its timeout (120 s) and prints what it wrote there, so a hang in CI,
//! where no debugger attaches, still says which tasks waited for what and where the ready
//! ones sat.
//!
//! ```
//! var hang: HangReport = .{};
//! hang.start(rt);
//! defer hang.stop();
//! ```
const HangReport = @This();

const std = @import("std");
const Io = std.Io;
const Runtime = @import("../Runtime.zig");
const os = @import("../os/linux.zig");

/// Well before the build runner's 120 s timeout, and far past any test's normal run.
const after_ns = 60 * std.time.ns_per_s;

thread: ?std.Thread = null,
/// 1 once the test ended: the thread exits without a report.
done: std.atomic.Value(u32) = .init(0),

/// Starts the watching thread; without one (threads exhausted) the test runs unwatched.
pub fn start(hang: *HangReport, rt: Runtime) void {
    hang.thread = std.Thread.spawn(.{}, watch, .{ hang, rt }) catch null;
}

pub fn stop(hang: *HangReport) void {
    hang.done.store(1, .release);
    os.futexWake(&hang.done, 1);
    if (hang.thread) |thread| thread.join();
    hang.thread = null;
}

fn watch(hang: *HangReport, rt: Runtime) void {
    const deadline_ns = os.monotonicNs() + after_ns;
    while (hang.done.load(.acquire) == 0) {
        const now_ns = os.monotonicNs();
        if (now_ns >= deadline_ns) return report(rt);
        os.futexWait(&hang.done, 0, deadline_ns - now_ns);
    }
}

fn report(rt: Runtime) void {
    var text: Io.Writer.Allocating = .init(std.heap.page_allocator);
    defer text.deinit();
    writeScheduler(rt, &text.writer) catch {};
    rt.dumpTasks(&text.writer) catch {};
    std.debug.print("test still running after {d} s; its runtime now:\n{s}", .{
        after_ns / std.time.ns_per_s,
        text.written(),
    });
}

/// The scheduler's counts and each executor's queues, read without locks (a snapshot that
/// may tear; the idle list under its lock).
fn writeScheduler(rt: Runtime, w: *Io.Writer) Io.Writer.Error!void {
    const scheduler = &rt.state.scheduler;
    try w.print("scheduler: searching={d} sleeping={d} retired={d} global={d} idle=", .{
        scheduler.searching.load(.monotonic),
        scheduler.sleeping.load(.monotonic),
        scheduler.retired.load(.monotonic),
        scheduler.inject_count.load(.monotonic),
    });
    scheduler.idle_lock.lock();
    for (scheduler.idle.items) |index| try w.print("{d},", .{index});
    scheduler.idle_lock.unlock();
    try w.writeAll("\n");
    for (scheduler.executors) |*executor| {
        try w.print(
            "executor {d}: ring={d} inject={d} lifo={} loop_sleeping={} activity={d}\n",
            .{
                executor.index,
                executor.ring.len(),
                executor.inject_count.load(.monotonic),
                executor.lifo != null, // racy, and only read once hung
                executor.loop.sleeping.load(.monotonic),
                executor.activity.load(.monotonic),
            },
        );
    }
}
