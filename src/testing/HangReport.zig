//! A test's account of a hang: when the test still runs `after_ns` after `start` and its
//! executors began no run for `quiet_ns` (a slow test on a loaded machine goes on), a thread
//! writes the runtime's task dump and its scheduler's queues and counts to stderr. The build
//! runner kills a test at its timeout (120 s) and prints what it wrote there, so a hang in CI,
//! where no debugger attaches, still says which tasks waited for what and where the ready
//! ones sat. The lines of the scheduler's state begin with "hang report: ", which CI lists
//! again at the end of its output.
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
/// No run begun on any executor for this long: hung, not slow.
const quiet_ns = 2 * std.time.ns_per_s;

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
    var deadline_ns = os.monotonicNs() + after_ns;
    var runs_before: ?u64 = null;
    while (hang.done.load(.acquire) == 0) {
        const now_ns = os.monotonicNs();
        if (now_ns < deadline_ns) {
            os.futexWait(&hang.done, 0, deadline_ns - now_ns);
            continue;
        }
        const runs_now = runsBegun(rt);
        if (runs_before == runs_now) return report(rt);
        runs_before = runs_now;
        deadline_ns = now_ns + quiet_ns;
    }
}

/// The executors' `activity` words summed: each changes whenever a run begins.
fn runsBegun(rt: Runtime) u64 {
    var sum: u64 = 0;
    for (rt.state.scheduler.executors) |*executor| sum +%= executor.activity.load(.monotonic);
    return sum;
}

fn report(rt: Runtime) void {
    var text: Io.Writer.Allocating = .init(std.heap.page_allocator);
    defer text.deinit();
    writeScheduler(rt, &text.writer) catch {};
    rt.dumpTasks(&text.writer) catch {};
    std.debug.print("test still running after {d} s, no run begun for {d} s; its runtime:\n{s}", .{
        after_ns / std.time.ns_per_s,
        quiet_ns / std.time.ns_per_s,
        text.written(),
    });
}

/// The scheduler's counts and each executor's queues, read without locks (a snapshot that
/// may tear; the idle list under its lock).
fn writeScheduler(rt: Runtime, w: *Io.Writer) Io.Writer.Error!void {
    const scheduler = &rt.state.scheduler;
    try w.print("hang report: scheduler: searching={d} sleeping={d} retired={d} " ++
        "global={d} idle=", .{
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
        const loop = &executor.loop;
        try w.print(
            "hang report: executor {d}: ring={d} inject={d} lifo={} loop_sleeping={} " ++
                "activity={d} in_flight={d} wakeups={d} rescued={d} rescued_wake={} reap_locked={}",
            .{
                executor.index,
                executor.ring.len(),
                executor.inject_count.load(.monotonic),
                executor.lifo.load(.monotonic) != null, // racy, and only read once hung
                loop.sleeping.load(.monotonic),
                executor.activity.load(.monotonic),
                loop.inFlight(),
                loop.counters.wakeups.read(),
                loop.rescued_count.load(.monotonic),
                loop.rescued_wake,
                loop.reap_lock.isLocked(),
            },
        );
        switch (loop.backend) {
            .io_uring => |*backend| {
                const sq = &backend.ring.sq;
                try w.print(
                    " wake_armed={} sqes_unflushed={d} sq_unsubmitted={d} cq_ready={d} " ++
                        "sq_flags=0x{x}",
                    .{
                        backend.wake_armed,
                        sq.sqe_tail -% sq.sqe_head,
                        @atomicLoad(u32, sq.tail, .acquire) -% @atomicLoad(u32, sq.head, .acquire),
                        backend.ring.cq_ready(),
                        @atomicLoad(u32, sq.flags, .acquire),
                    },
                );
            },
            .epoll => {},
        }
        try writeEventCount(w, loop.wake_fd);
        try w.writeAll("\n");
    }
}

/// The count a wake-up eventfd holds (written, not yet read), from /proc/self/fdinfo.
fn writeEventCount(w: *Io.Writer, fd: os.fd_t) Io.Writer.Error!void {
    var path_buffer: [64]u8 = undefined;
    const path = std.fmt.bufPrintZ(&path_buffer, "/proc/self/fdinfo/{d}", .{fd}) catch return;
    var buffer: [512]u8 = undefined;
    const text = os.readFile(path, &buffer) orelse return;
    const key = "eventfd-count:";
    const at = std.mem.indexOf(u8, text, key) orelse return;
    const value = std.mem.trim(u8, std.mem.sliceTo(text[at + key.len ..], '\n'), " \t");
    try w.print(" eventfd_count={s}", .{value});
}
