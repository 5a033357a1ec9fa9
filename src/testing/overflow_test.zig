//! Fiber stack overflow: with guard pages it faults at once, and weft names the task and its
//! stack on stderr before the fault goes on to the previous handler; on dense (unguarded)
//! stacks the depth check stops a fiber that reached its stack's lowest page at its next
//! switch. Each case runs in a forked child, since the expected outcome is the death of the
//! process; the parent reads the child's stderr.
const std = @import("std");
const builtin = @import("builtin");
const linux = if (builtin.os.tag == .linux) std.os.linux else struct {};
const testing = std.testing;
const Io = std.Io;
const Runtime = @import("../Runtime.zig");
const Executor = @import("../sched/Executor.zig");
const overflow = @import("../sched/overflow.zig");
const config = @import("../config.zig");
const fiber_stacks = @import("../fiber/stack.zig");
const Lane = @import("../lanes/Lane.zig");
const os = @import("../os/linux.zig");
const qemu = @import("qemu.zig");

const page_size = std.heap.page_size_min;
const stack_size_bytes = 64 * 1024;

/// How a child ended, and the start of what it wrote to stderr.
const Outcome = struct {
    /// The signal that killed it, or null if it exited.
    signal: ?u32,
    /// Its exit status, if it exited.
    status: u32,
    stderr_buffer: [16 * 1024]u8,
    stderr_len: usize,

    fn stderr(outcome: *const Outcome) []const u8 {
        return outcome.stderr_buffer[0..outcome.stderr_len];
    }

    fn killedBy(outcome: *const Outcome, sig: linux.SIG) bool {
        return outcome.signal == @intFromEnum(sig);
    }
};

/// Runs `body` in a forked child with its stderr on a pipe, and waits for its end.
fn runInChild(comptime body: fn () void, outcome: *Outcome) !void {
    // Under ThreadSanitizer neither outcome is observable: its runtime takes SIGSEGV itself
    // (and deadlocks in std's segfault handler, which TSan's own lock is held around), and a
    // raw fork(2) that TSan does not intercept leaves the child without its background thread.
    if (builtin.sanitize_thread) return os.skipTest(@src(), "TSan takes SIGSEGV; raw fork");
    var pipe: [2]i32 = undefined;
    if (linux.errno(linux.pipe2(&pipe, .{ .CLOEXEC = true })) != .SUCCESS) {
        return os.skipTest(@src(), "no pipe");
    }
    const pid_rc = os.fork();
    switch (linux.errno(pid_rc)) {
        .SUCCESS => {},
        else => return os.skipTest(@src(), "no fork here: nothing to observe"),
    }
    if (pid_rc == 0) {
        // The child: stderr to the pipe (the test runner's stdout protocol stays clean), and
        // never return into the runner.
        _ = linux.dup2(pipe[1], 2);
        body();
        linux.exit_group(0);
    }
    _ = linux.close(pipe[1]);
    const pid: linux.pid_t = @intCast(pid_rc);
    const read = readAll(pipe[0], &outcome.stderr_buffer);
    _ = linux.close(pipe[0]);
    // A child that neither dies nor closes stderr in time hangs: end it, and fail.
    if (read == null) _ = linux.kill(pid, .KILL);
    var status: u32 = 0;
    while (true) {
        const rc = linux.waitpid(pid, &status, 0);
        switch (linux.errno(rc)) {
            .SUCCESS => break,
            .INTR => continue,
            else => return error.WaitFailed,
        }
    }
    const signaled = linux.W.IFSIGNALED(status);
    outcome.signal = if (signaled) @intFromEnum(linux.W.TERMSIG(status)) else null;
    outcome.status = if (outcome.signal == null) linux.W.EXITSTATUS(status) else 0;
    outcome.stderr_len = read orelse return error.ChildHung;
}

/// A child dies in well under a second; past this it is taken for hung.
const child_wait_ms = 30_000;

/// Reads `fd` to its end (the child's death), keeping what fits in `buffer`: a stack trace
/// may be longer, and a child blocked on a full pipe would never die. Null if the end has not
/// come within `child_wait_ms` of quiet.
fn readAll(fd: i32, buffer: []u8) ?usize {
    var len: usize = 0;
    var discard: [4096]u8 = undefined;
    while (true) {
        var pollfd = [_]linux.pollfd{.{ .fd = fd, .events = linux.POLL.IN, .revents = 0 }};
        const ready = linux.poll(&pollfd, 1, child_wait_ms);
        switch (linux.errno(ready)) {
            .SUCCESS => if (ready == 0) return null,
            .INTR => continue,
            else => return len,
        }
        const into = if (len < buffer.len) buffer[len..] else &discard;
        const rc = linux.read(fd, into.ptr, into.len);
        switch (linux.errno(rc)) {
            .SUCCESS => if (rc == 0) return len,
            .INTR => continue,
            else => return len,
        }
        if (len < buffer.len) len += rc;
    }
}

/// Writes `line` to stderr with write(2), as a child reports what the parent checks.
fn writeStderr(comptime format: []const u8, args: anytype) void {
    var buffer: [256]u8 = undefined;
    const line = std.fmt.bufPrint(&buffer, format, args) catch unreachable;
    _ = linux.write(2, line.ptr, line.len);
}

/// Recurses without bound, touching every frame so that nothing is optimised away. The frame
/// is read after the call, so it stays live across it: with the read before, ReleaseFast turned
/// the recursion into a loop (an accumulator for `+%`) that never overflowed.
fn recurseForever(depth: usize) usize {
    var frame: [256]u8 = undefined;
    @memset(&frame, @truncate(depth));
    const ptr: *volatile [256]u8 = &frame;
    const deeper = @call(.never_inline, recurseForever, .{depth + 1});
    return deeper +% ptr[(depth +% deeper) % 256];
}

/// Recurses until its frame reaches the lowest page of the running fiber's stack (but stays
/// above its base), then switches away.
fn recurseToBottomThenYield(io: Io, base: usize, depth: usize) usize {
    var frame: [256]u8 = undefined;
    @memset(&frame, @truncate(depth));
    const ptr: *volatile [256]u8 = &frame;
    // Within 16 bytes of the lowest page: the calls down to the switch push more than that
    // (a return address each, and `resumeFrom`'s frame pointer), so the switch's frame is in
    // it whatever the build's frame sizes. (A margin of 1 KiB held only for Debug frames: in
    // ReleaseFast the switch stayed above the page and the child exited 0.)
    if (@intFromPtr(ptr) < base + page_size + 16) {
        io.sleep(.fromMilliseconds(1), .awake) catch {};
        return ptr[0];
    }
    const deeper = @call(.never_inline, recurseToBottomThenYield, .{ io, base, depth + 1 });
    return deeper +% ptr[(depth +% deeper) % 256];
}

/// Reports the running fiber's stack as weft's overflow message will name it, then overflows.
fn reportThenOverflow() usize {
    const stack = Executor.currentTask().?.stack.?;
    writeStderr("expected stack: 0x{x}-0x{x}\n", .{ @intFromPtr(stack.memory.ptr), stack.top() });
    return @call(.never_inline, recurseForever, .{0});
}

fn overflowOn(options: Runtime.Options) void {
    var rt = Runtime.init(std.heap.page_allocator, options) catch linux.exit_group(2);
    var future = rt.io().concurrent(reportThenOverflow, .{}) catch linux.exit_group(3);
    _ = future.await(rt.io());
    // Not reached: the recursion faults on the guard page.
}

fn guardedChild() void {
    overflowOn(.{ .stack_size_bytes = stack_size_bytes, .stack_guard = .page });
}

/// A handler of the program's own, installed before weft: it must still get the fault.
fn ownHandler(_: linux.SIG, _: *const linux.siginfo_t, _: ?*anyopaque) callconv(.c) void {
    writeStderr("own handler ran\n", .{});
    linux.exit_group(7);
}

fn ownHandlerChild() void {
    const action: linux.Sigaction = .{
        .handler = .{ .sigaction = &ownHandler },
        .mask = linux.sigemptyset(),
        .flags = linux.SA.SIGINFO | linux.SA.ONSTACK,
    };
    _ = linux.sigaction(.SEGV, &action, null);
    overflowOn(.{ .stack_size_bytes = stack_size_bytes, .stack_guard = .page });
}

/// A thread without an alternate signal stack (as with `std.options.signal_stack_size =
/// null`): its executor must map one, or the kernel cannot deliver the fault at all.
fn noSignalStackChild() void {
    const disabled: linux.stack_t = .{ .sp = undefined, .flags = linux.SS.DISABLE, .size = 0 };
    if (linux.errno(linux.sigaltstack(&disabled, null)) != .SUCCESS) linux.exit_group(4);
    // One executor: the task overflows on this thread.
    overflowOn(.{ .executors = 1, .stack_size_bytes = stack_size_bytes, .stack_guard = .page });
}

fn installChild() void {
    const default: linux.Sigaction = .{
        .handler = .{ .handler = linux.SIG.DFL },
        .mask = linux.sigemptyset(),
        .flags = 0,
    };
    _ = linux.sigaction(.SEGV, &default, null);
    const dense = Runtime.init(std.heap.page_allocator, .{ .stack_guard = .none }) catch
        linux.exit_group(2);
    if (overflow.installed()) linux.exit_group(5);
    dense.deinit();
    const guarded = Runtime.init(std.heap.page_allocator, .{}) catch linux.exit_group(2);
    if (!overflow.installed()) linux.exit_group(6);
    guarded.deinit();
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

/// Checks that the child named its overflow, on the stack it reported, before `after` (the
/// next handler's output) if that is not empty.
fn expectNamed(outcome: *const Outcome, after: []const u8) !void {
    const output = outcome.stderr();
    const expected_start = "expected stack: ";
    const start = (std.mem.indexOf(u8, output, expected_start) orelse
        return error.NoStackReported) + expected_start.len;
    const range = output[start..][0 .. std.mem.indexOfScalar(u8, output[start..], '\n') orelse
        return error.NoStackReported];
    const message = std.mem.indexOf(u8, output, "weft: stack overflow in task 0x") orelse {
        std.debug.print("child's stderr:\n{s}\n", .{output});
        return error.OverflowNotNamed;
    };
    const line = output[message..][0..std.mem.indexOfScalar(u8, output[message..], '\n').?];
    var buffer: [128]u8 = undefined;
    const stack = try std.fmt.bufPrint(&buffer, "its stack {s} ({d} bytes", .{
        range,
        stack_size_bytes,
    });
    try testing.expect(std.mem.indexOf(u8, line, stack) != null);
    try testing.expect(std.mem.indexOf(u8, line, "stack_size_bytes") != null);
    if (after.len > 0) {
        const next = std.mem.indexOf(u8, output, after) orelse return error.NextHandlerSilent;
        try testing.expect(next > message);
    }
}

test "overflow: a guarded fiber stack overflow is named with its stack, then faults as before" {
    try qemu.skipUnderQemu(.madv_guard, @src());
    var outcome: Outcome = undefined;
    try runInChild(guardedChild, &outcome);
    if (std.options.enable_segfault_handler) {
        // Handed on to std's segfault handler, which prints the fault and its trace, then
        // aborts.
        try expectNamed(&outcome, "Segmentation fault at address");
        try testing.expect(outcome.killedBy(.ABRT));
    } else {
        // No handler before weft's (ReleaseFast): the default action ends the process.
        try expectNamed(&outcome, "");
        try testing.expect(outcome.killedBy(.SEGV));
    }
}

/// A lane job that recurses without bound on its worker thread's own stack.
fn overflowOnLaneWorker() void {
    var rt = Runtime.init(std.heap.page_allocator, .{}) catch linux.exit_group(2);
    const lane = Lane.init(std.heap.page_allocator, .{
        .threads = 1,
        .stack_size_bytes = stack_size_bytes,
    }) catch linux.exit_group(3);
    _ = lane.run(rt.io(), recurseForever, .{0}) catch linux.exit_group(4);
    // Not reached: the recursion faults below the worker's stack.
}

test "overflow: a lane worker thread's overflow is named with the lane's option" {
    var outcome: Outcome = undefined;
    try runInChild(overflowOnLaneWorker, &outcome);
    const stderr = outcome.stderr();
    testing.expect(std.mem.indexOf(u8, stderr, "weft: stack overflow in lane worker thread ") !=
        null) catch |err| {
        std.debug.print("child's stderr:\n{s}\n", .{stderr});
        return err;
    };
    try testing.expect(std.mem.indexOf(u8, stderr, "Raise the lane's Options.stack_size_bytes") !=
        null);
    try testing.expect(outcome.killedBy(.ABRT) or outcome.killedBy(.SEGV));
}

test "overflow: a program's own SIGSEGV handler still gets the fault after weft names it" {
    try qemu.skipUnderQemu(.madv_guard, @src());
    var outcome: Outcome = undefined;
    try runInChild(ownHandlerChild, &outcome);
    try expectNamed(&outcome, "own handler ran");
    try testing.expectEqual(@as(?u32, null), outcome.signal);
    try testing.expectEqual(@as(u32, 7), outcome.status);
}

test "overflow: an executor whose thread has no alternate signal stack maps one" {
    try qemu.skipUnderQemu(.madv_guard, @src());
    var outcome: Outcome = undefined;
    try runInChild(noSignalStackChild, &outcome);
    try expectNamed(&outcome, "");
    try testing.expect(outcome.killedBy(.SEGV) or outcome.killedBy(.ABRT));
}

test "overflow: the handler is installed for guarded stacks only" {
    var outcome: Outcome = undefined;
    try runInChild(installChild, &outcome);
    try testing.expectEqual(@as(?u32, null), outcome.signal);
    try testing.expectEqual(@as(u32, 0), outcome.status);
}

test "overflow: a dense fiber that reached its lowest page is stopped at its next switch" {
    var outcome: Outcome = undefined;
    try runInChild(denseChild, &outcome);
    try testing.expect(outcome.killedBy(.ABRT));
    const output = outcome.stderr();
    try testing.expect(std.mem.indexOf(u8, output, "fiber stack overflow detected") != null);
}

/// Whether the kernel can read the byte at `address`: a write of it into a pipe fails with
/// EFAULT on a guard page (a guard marker or a PROT_NONE page alike) instead of faulting.
fn kernelCanRead(address: usize) !bool {
    var pipe: [2]i32 = undefined;
    if (os.errno(linux.pipe2(&pipe, .{ .CLOEXEC = true })) != .SUCCESS) return error.Unexpected;
    defer for (pipe) |fd| {
        _ = linux.close(fd);
    };
    const rc = linux.write(pipe[1], @ptrFromInt(address), 1);
    return switch (os.errno(rc)) {
        .SUCCESS => true,
        .FAULT => false,
        else => error.Unexpected,
    };
}

/// Whether /proc/self/maps has a mapping that starts at `address`, and with which permissions.
fn mappingAt(address: usize, permissions: *[4]u8) !bool {
    var buffer: [1 << 20]u8 = undefined;
    const fd_rc = linux.open("/proc/self/maps", .{ .CLOEXEC = true }, 0);
    if (os.errno(fd_rc) != .SUCCESS) return os.skipTest(@src(), "no /proc/self/maps");
    const fd: i32 = @intCast(fd_rc);
    defer _ = linux.close(fd);
    var len: usize = 0;
    while (len < buffer.len) {
        const rc = linux.read(fd, buffer[len..].ptr, buffer.len - len);
        if (os.errno(rc) != .SUCCESS) return error.Unexpected;
        if (rc == 0) break;
        len += rc;
    }
    var prefix: [24]u8 = undefined;
    const start = try std.fmt.bufPrint(&prefix, "{x}-", .{address});
    var lines = std.mem.splitScalar(u8, buffer[0..len], '\n');
    while (lines.next()) |line| {
        if (!std.mem.startsWith(u8, line, start)) continue;
        const space = std.mem.indexOfScalar(u8, line, ' ') orelse return error.Unexpected;
        if (line.len < space + 5) return error.Unexpected;
        permissions.* = line[space + 1 ..][0..4].*;
        return true;
    }
    return false;
}

test "overflow: each way of installing guards leaves the lowest page of every stack unreadable" {
    // The batch (process_madvise), one madvise per stack (process_madvise refused) and
    // mprotect (kernels before 6.13): the two fallbacks are forced by the pool's flags, which
    // `installGuard(s)` otherwise sets on the kernel's refusal.
    const Way = enum { batch, one_by_one, mprotect };
    for ([_]Way{ .batch, .one_by_one, .mprotect }) |way| {
        // qemu-user accepts MADV_GUARD_INSTALL and installs nothing: only mprotect guards.
        if (way != .mprotect and qemu.underQemu()) continue;
        var pool: fiber_stacks.Pool = .init(testing.allocator, 64 * 1024, .page, null);
        defer pool.deinit();
        pool.guard_batch_unsupported = way == .one_by_one;
        pool.guard_splits_mappings = way == .mprotect;
        var stacks: [3]fiber_stacks.Stack = undefined;
        for (&stacks) |*stack| stack.* = try pool.acquire();
        defer for (stacks) |fiber_stack| pool.release(fiber_stack);
        // The stacks handed out first sit at the top of the slab; the lowest is handed out
        // last, so every stack of the slab is checked, not only the ones acquired.
        try testing.expectEqual(@as(usize, 1), pool.slabs.items.len);
        try expectEveryStackGuarded(&pool);
        for (stacks) |fiber_stack| {
            const bottom = @intFromPtr(fiber_stack.memory.ptr);
            try testing.expect(try kernelCanRead(fiber_stack.top() - 1));
            // Only mprotect splits the slab: its guard is a mapping of its own, PROT_NONE.
            var permissions: [4]u8 = undefined;
            const own_mapping = try mappingAt(bottom, &permissions);
            if (pool.guard_splits_mappings) {
                try testing.expect(own_mapping);
                try testing.expectEqualStrings("---p", &permissions);
            } else if (own_mapping) {
                // The slab's first stack starts its mapping; its pages stay read-write.
                try testing.expectEqual(pool.slabs.items[0].ptr, fiber_stack.memory.ptr);
                try testing.expectEqualStrings("rw-p", &permissions);
            }
        }
    }
}

/// Checks that the lowest page of each stack of `pool`'s first slab is unreadable and the
/// page above it readable; prints the first stack whose guard is missing.
fn expectEveryStackGuarded(pool: *const fiber_stacks.Pool) !void {
    const slab = pool.slabs.items[0];
    const stacks_count = slab.len / pool.stack_size_bytes;
    try testing.expectEqual(@as(usize, config.slab_stacks), stacks_count);
    for (0..stacks_count) |index| {
        const bottom = @intFromPtr(slab.ptr) + index * pool.stack_size_bytes;
        const guarded = !try kernelCanRead(bottom) and !try kernelCanRead(bottom + page_size - 1);
        if (!guarded) {
            std.debug.print("stack {d} of the slab's {d} (at 0x{x}) has no guard page\n", .{
                index, stacks_count, bottom,
            });
            return error.GuardPageMissing;
        }
        try testing.expect(try kernelCanRead(bottom + page_size));
    }
}
