//! Fiber stack overflow: with guard pages it faults at once; on dense (unguarded) stacks the
//! depth check stops a fiber that reached its stack's lowest page at its next switch. Each case
//! runs in a forked child, since the expected outcome is the death of the process.
const std = @import("std");
const builtin = @import("builtin");
const linux = std.os.linux;
const testing = std.testing;
const Io = std.Io;
const Runtime = @import("../Runtime.zig");
const Executor = @import("../sched/Executor.zig");

const page_size = std.heap.page_size_min;
const stack_size_bytes = 64 * 1024;

/// How the child ended: the signal that killed it, or null if it exited.
fn runInChild(comptime body: fn () void) !?u32 {
    // Under ThreadSanitizer neither outcome is observable: its runtime takes SIGSEGV itself
    // (and deadlocks in std's segfault handler, which TSan's own lock is held around), and a
    // raw fork(2) that TSan does not intercept leaves the child without its background thread.
    if (builtin.sanitize_thread) return error.SkipZigTest;
    const pid_rc = linux.fork();
    switch (linux.errno(pid_rc)) {
        .SUCCESS => {},
        else => return error.SkipZigTest, // no fork here: nothing to observe
    }
    if (pid_rc == 0) {
        // The child: keep the test runner's stdout protocol clean, and never return into it.
        const devnull = linux.open("/dev/null", .{ .ACCMODE = .WRONLY }, 0);
        if (linux.errno(devnull) == .SUCCESS) _ = linux.dup2(@intCast(devnull), 2);
        body();
        linux.exit_group(0);
    }
    const pid: linux.pid_t = @intCast(pid_rc);
    var status: u32 = 0;
    while (true) {
        const rc = linux.waitpid(pid, &status, 0);
        switch (linux.errno(rc)) {
            .SUCCESS => break,
            .INTR => continue,
            else => return error.WaitFailed,
        }
    }
    if (linux.W.IFSIGNALED(status)) return @intFromEnum(linux.W.TERMSIG(status));
    try testing.expectEqual(@as(u32, 0), linux.W.EXITSTATUS(status));
    return null;
}

/// Recurses without bound, touching every frame so that nothing is optimised away.
fn recurseForever(depth: usize) usize {
    var frame: [256]u8 = undefined;
    @memset(&frame, @truncate(depth));
    const ptr: *volatile [256]u8 = &frame;
    return ptr[depth % 256] +% @call(.never_inline, recurseForever, .{depth + 1});
}

/// Recurses until the frame address enters the lowest page of the running fiber's stack (but
/// stays above its base), then switches away.
fn recurseToBottomThenYield(io: Io, base: usize, depth: usize) usize {
    var frame: [256]u8 = undefined;
    @memset(&frame, @truncate(depth));
    const ptr: *volatile [256]u8 = &frame;
    if (@frameAddress() < base + page_size + 1024) {
        io.sleep(.fromMilliseconds(1), .awake) catch {};
        return ptr[0];
    }
    return ptr[depth % 256] +% @call(.never_inline, recurseToBottomThenYield, .{ io, base, depth + 1 });
}

fn guardedChild() void {
    var rt = Runtime.init(std.heap.page_allocator, .{
        .stack_size_bytes = stack_size_bytes,
        .stack_guard = .page,
    }) catch linux.exit_group(2);
    var future = rt.io().concurrent(recurseForever, .{0}) catch linux.exit_group(3);
    _ = future.await(rt.io());
    // Not reached: the recursion faults on the guard page.
}

fn denseChild() void {
    var rt = Runtime.init(std.heap.page_allocator, .{
        .stack_size_bytes = stack_size_bytes,
        .stack_guard = .none,
    }) catch linux.exit_group(2);
    const Body = struct {
        fn run(io: Io) usize {
            const base = @intFromPtr(Executor.currentTask().?.stack.?.memory.ptr);
            return recurseToBottomThenYield(io, base, 0);
        }
    };
    var future = rt.io().concurrent(Body.run, .{rt.io()}) catch linux.exit_group(3);
    _ = future.await(rt.io());
    // Not reached: the switch inside the lowest page panics.
}

test "overflow: a guarded fiber stack faults on overflow" {
    const signal = try runInChild(guardedChild);
    // SIGSEGV from the guard page (SIGABRT if a handler reported it first).
    try testing.expect(signal != null);
    try testing.expect(signal.? == @intFromEnum(linux.SIG.SEGV) or signal.? == @intFromEnum(linux.SIG.ABRT));
}

test "overflow: a dense fiber that reached its lowest page is stopped at its next switch" {
    const signal = try runInChild(denseChild);
    try testing.expectEqual(@as(?u32, @intFromEnum(linux.SIG.ABRT)), signal);
}
