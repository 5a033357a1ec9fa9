//! Behaviour of the CPU lane (`weft.CpuLane`, `Runtime.compute`): results and error sets,
//! jobs on threads apart from the executor (which keeps running fibers meanwhile), the
//! lowered priority of its workers, and shutdown before and after start. No timed assertions;
//! each shutdown runs under `deadline` (a shutdown that never returns fails in seconds, with
//! the task dump on stderr).
const std = @import("std");
const Io = std.Io;
const testing = std.testing;
const Runtime = @import("runtime.zig").Runtime;
const CpuLane = @import("../lanes/CpuLane.zig");
const os = @import("../os/host.zig");
/// Nice values and time slices: read only in tests that skip where `thread_tuning_supported`
/// does not hold (off Linux this file is never analysed).
const linux = @import("../os/linux.zig");
const weft_config = @import("../config.zig");
const deadline = @import("deadline.zig");

fn fnv(seed: u64, rounds: u32) u64 {
    var hash: u64 = 0xcbf29ce484222325 ^ seed;
    for (0..rounds) |i| hash = (hash ^ i) *% 0x100000001b3;
    return hash;
}

fn checked(seed: u64, rounds: u32) error{NoRounds}!u64 {
    if (rounds == 0) return error.NoRounds;
    return fnv(seed, rounds);
}

fn currentTid() std.Thread.Id {
    return std.Thread.getCurrentId();
}

fn currentNice() ?i32 {
    return linux.threadNice();
}

/// Why the priority and time-slice tests are skipped off Linux.
const no_tuning = "threads' nice values and time slices are Linux's";
/// Why the nice-value tests are skipped where the value cannot be read.
const no_nice = "no nice value readable (sched_getattr)";
/// Why the time-slice tests are skipped on older kernels.
const no_slices = "no custom time slices before Linux 6.12";

test "CpuLane: compute returns the job's result; its error set is kept" {
    comptime std.debug.assert(
        CpuLane.Result(checked) == (error{NoRounds} || CpuLane.Error)!u64,
    );
    var rt = try Runtime.init(testing.allocator, .{});
    defer rt.deinit();
    const io = rt.io();
    try testing.expectEqual(fnv(7, 1000), try rt.compute(io, fnv, .{ 7, 1000 }));
    try testing.expectEqual(fnv(8, 10), try rt.compute(io, checked, .{ 8, 10 }));
    try testing.expectError(error.NoRounds, rt.compute(io, checked, .{ 8, 0 }));
    try testing.expectEqual(@as(u64, 3), rt.state.cpu.stats().jobs_run);
}

test "CpuLane: jobs run on their own threads, at a lowered priority" {
    // Off Linux a nice value is refused (InvalidOptions): the threads part still runs there.
    const nice: u8 = if (os.thread_tuning_supported) 3 else 0;
    var rt = try Runtime.init(testing.allocator, .{ .cpu = .{ .nice = nice } });
    defer rt.deinit();
    const io = rt.io();
    const worker_tid = try rt.compute(io, currentTid, .{});
    try testing.expect(worker_tid != currentTid());
    try testing.expectEqual(CpuLane.cpusAvailable(), rt.state.cpu.threads());
    if (!os.thread_tuning_supported) return os.skipTest(@src(), no_tuning);
    const caller_nice = linux.threadNice() orelse return os.skipTest(@src(), no_nice);
    const worker_nice = (try rt.compute(io, currentNice, .{})) orelse
        return os.skipTest(@src(), no_nice);
    try testing.expectEqual(@min(caller_nice + 3, 19), worker_nice);
}

fn currentSlice() ?u64 {
    return linux.threadSlice();
}

/// Whether this kernel applies custom slices to fair-class threads (Linux 6.12 on): tried on
/// a thread of its own, so that the test's thread keeps its slice.
fn kernelHasCustomSlices() !bool {
    const Probe = struct {
        fn run(supported: *bool) void {
            const slice_ns = 2 * linux.thread_slice_ns_min;
            supported.* = linux.setThreadSlice(slice_ns) and linux.threadSlice() == slice_ns;
        }
    };
    var supported = false;
    const thread = try std.Thread.spawn(.{}, Probe.run, .{&supported});
    thread.join();
    return supported;
}

test "CpuLane: workers get the short time slice, keeping their lowered priority" {
    if (!os.thread_tuning_supported) return os.skipTest(@src(), no_tuning);
    var rt = try Runtime.init(testing.allocator, .{ .cpu = .{ .nice = 2 } });
    defer rt.deinit();
    const io = rt.io();
    if (!try kernelHasCustomSlices()) return os.skipTest(@src(), no_slices);
    const worker_slice = (try rt.compute(io, currentSlice, .{})).?;
    try testing.expectEqual(weft_config.cpu_lane_slice_ns_default.?, worker_slice);
    const caller_nice = linux.threadNice() orelse return os.skipTest(@src(), no_nice);
    const worker_nice = (try rt.compute(io, currentNice, .{})) orelse
        return os.skipTest(@src(), no_nice);
    try testing.expectEqual(@min(caller_nice + 2, 19), worker_nice); // not reset by the slice
}

test "CpuLane: a time slice below the kernel's range is raised to its minimum" {
    if (!os.thread_tuning_supported) return os.skipTest(@src(), no_tuning);
    const short_ns = 10 * std.time.ns_per_us;
    var rt = try Runtime.init(testing.allocator, .{ .cpu = .{ .slice_ns = short_ns } });
    defer rt.deinit();
    const io = rt.io();
    if (!try kernelHasCustomSlices()) return os.skipTest(@src(), no_slices);
    const worker_slice = (try rt.compute(io, currentSlice, .{})).?;
    try testing.expectEqual(@as(u64, linux.thread_slice_ns_min), worker_slice);
}

test "Lane: a time slice outside the kernel's range is InvalidOptions" {
    const Lane = @import("../lanes/Lane.zig");
    try testing.expectError(error.InvalidOptions, Lane.init(testing.allocator, .{ .slice_ns = 1 }));
    const too_long_ns = os.thread_slice_ns_max + 1;
    try testing.expectError(
        error.InvalidOptions,
        Lane.init(testing.allocator, .{ .slice_ns = too_long_ns }),
    );
}

/// Spins (a CPU job) until `flag` is set; false if it was not within 10 s (a bound so that
/// a broken lane fails the test instead of hanging it; a working one takes ~100 us).
fn spinUntil(flag: *std.atomic.Value(bool)) bool {
    const give_up_ns = os.monotonicNs() + 10 * std.time.ns_per_s;
    while (!flag.load(.acquire)) {
        if (os.monotonicNs() > give_up_ns) return false;
        std.atomic.spinLoopHint();
    }
    return true;
}

fn setAfterYield(io: Io, flag: *std.atomic.Value(bool)) Io.Cancelable!void {
    try io.sleep(.fromMicroseconds(100), .awake);
    flag.store(true, .release);
}

test "CpuLane: the executor keeps running fibers while a job computes" {
    var rt = try Runtime.init(testing.allocator, .{});
    defer rt.deinit();
    const io = rt.io();
    var flag: std.atomic.Value(bool) = .init(false);
    // The job can only finish once a fiber of this executor sets the flag: on the executor
    // itself it would spin out its bound with that fiber never scheduled.
    var setter = try io.concurrent(setAfterYield, .{ io, &flag });
    try testing.expect(try rt.compute(io, spinUntil, .{&flag}));
    try setter.await(io);
}

fn hashMany(rt: Runtime, io: Io, seed: u64, out: *u64) Io.Cancelable!void {
    out.* = rt.compute(io, fnv, .{ seed, 20_000 }) catch |err| {
        std.debug.panic("compute: {t}", .{err});
    };
}

test "CpuLane: many fibers compute at once; every result comes back to its caller" {
    var rt = try Runtime.init(testing.allocator, .{ .cpu = .{ .threads = 2, .queue_limit = 2 } });
    defer rt.deinit();
    const io = rt.io();
    var results: [40]u64 = @splat(0);
    var group: Io.Group = .init;
    defer group.cancel(io);
    for (&results, 0..) |*result, seed| {
        try group.concurrent(io, hashMany, .{ rt, io, seed, result });
    }
    try deadline.awaitGroup(io, &group);
    for (results, 0..) |result, seed| try testing.expectEqual(fnv(seed, 20_000), result);
    const stats = rt.state.cpu.stats();
    try testing.expectEqual(@as(u64, 40), stats.jobs_run);
    try testing.expectEqual(@as(u64, 0), stats.calls_rejected);
}

test "CpuLane: shutdown before the first call starts no thread and refuses later calls" {
    var rt = try Runtime.init(testing.allocator, .{});
    defer rt.deinit();
    const io = rt.io();
    var cpu: CpuLane = try .init(testing.allocator, .{ .threads = 1 });
    defer cpu.deinit(io);
    const report = try deadline.run(io, CpuLane.shutdown, .{ &cpu, io, .{} });
    try testing.expectEqual(@as(u64, 0), report.jobs_run);
    try testing.expect(cpu.lane.load(.acquire) == null);
    try testing.expectError(error.ShutdownInProgress, cpu.run(io, fnv, .{ 1, 1 }));
}

test "CpuLane: shutdown after use joins the threads and reports the jobs" {
    var rt = try Runtime.init(testing.allocator, .{});
    defer rt.deinit();
    const io = rt.io();
    var cpu: CpuLane = try .init(testing.allocator, .{ .threads = 2 });
    defer cpu.deinit(io);
    for (0..5) |seed| try testing.expectEqual(fnv(seed, 100), try cpu.run(io, fnv, .{ seed, 100 }));
    const report = try deadline.run(io, CpuLane.shutdown, .{ &cpu, io, .{} });
    try testing.expectEqual(@as(u64, 5), report.jobs_run);
    try testing.expectEqual(@as(u64, 0), report.jobs_left);
    try testing.expectError(error.ShutdownInProgress, cpu.run(io, fnv, .{ 1, 1 }));
}
