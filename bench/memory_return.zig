//! memory_return: how much of a spike's memory weft gives back once it is idle, and how fast
//! (fiber/stack.zig, `Pool.trim`; docs/RUNTIME.md, "Memory given back").
//!
//! A spike of N tasks, each touching `--touch-kib` of its stack (16 KiB: what a keep-alive
//! connection of weft-serve holds), all alive at once; then they end and the runtime idles.
//! Prints the process's RSS (`/proc/self/statm`) before, at the peak and 5 s after the spike's
//! end, the share of the spike given back by then, and how long it took to give back 90 %.
//!
//! Usage: bench-memory_return [--tasks N] [--touch-kib K] [--executors E]
//!        (default 10,000 tasks, 16 KiB, 2 executors).
const std = @import("std");
const Io = std.Io;
const weft = @import("weft");
const harness = @import("harness");

const page_size = std.heap.page_size_min;
/// The bound the issue sets: 90 % of a spike given back within 5 s of its end.
const after_ms = 5_000;
const sample_ms = 10;
const touch_kib_max = 256;

pub fn main(init: std.process.Init) !void {
    const arena = init.arena.allocator();
    const args = try harness.argsAlloc(arena, init.minimal.args);
    const tasks = try harness.flagInt(args, "--tasks", 10_000);
    const touch_kib = try harness.flagInt(args, "--touch-kib", 16);
    const executors = try harness.flagInt(args, "--executors", 2);
    if (touch_kib == 0 or touch_kib > touch_kib_max) return error.InvalidArgs;
    var buffer: [512]u8 = undefined;
    var stdout = Io.File.stdout().writerStreaming(init.io, &buffer);
    const out = &stdout.interface;

    // The page allocator: the tasks' own memory goes back at free, as a server's allocator
    // may not; what is measured is what weft holds.
    var rt = try weft.Runtime.init(std.heap.page_allocator, .{ .executors = executors });
    defer rt.deinit();
    const io = rt.io();
    const before_bytes = residentBytes();
    var started: std.atomic.Value(u64) = .init(0);
    var release: Io.Event = .unset;
    var group: Io.Group = .init;
    for (0..tasks) |_| {
        try group.concurrent(io, touch, .{ io, touch_kib * 1024, &started, &release });
    }
    while (started.load(.monotonic) < tasks) try io.sleep(.fromMilliseconds(1), .awake);
    const peak_bytes = residentBytes();
    release.set(io);
    try group.await(io);
    const end_ns = harness.monotonicNs();
    const spike_bytes = peak_bytes -| before_bytes;
    var ms_to_90: ?u64 = null;
    var after_bytes = peak_bytes;
    while (harness.monotonicNs() - end_ns < after_ms * std.time.ns_per_ms) {
        try io.sleep(.fromMilliseconds(sample_ms), .awake);
        after_bytes = residentBytes();
        if (ms_to_90 == null and (after_bytes -| before_bytes) * 10 <= spike_bytes) {
            ms_to_90 = (harness.monotonicNs() - end_ns) / std.time.ns_per_ms;
        }
    }
    const given_bytes = peak_bytes -| after_bytes;
    const spike_f: f64 = @floatFromInt(@max(spike_bytes, 1));
    const given_pct = @as(f64, @floatFromInt(given_bytes)) * 100 / spike_f;
    try out.print("memory_return tasks={d} touch_kib={d} executors={d} ", .{
        tasks, touch_kib, executors,
    });
    try out.print("rss_before_kib={d} rss_peak_kib={d} rss_after_5s_kib={d} ", .{
        before_bytes / 1024, peak_bytes / 1024, after_bytes / 1024,
    });
    try out.print("given_back_pct={d:.1} ms_to_90pct={?d}\n", .{ given_pct, ms_to_90 });
    try out.flush();
}

/// Touches `bytes` of this task's stack, then waits for `release`.
fn touch(io: Io, bytes: usize, started: *std.atomic.Value(u64), release: *Io.Event) void {
    var frame: [touch_kib_max * 1024]u8 = undefined;
    const base: [*]volatile u8 = &frame;
    // From the top of the frame down, as a deeper call would: only `bytes` of it.
    var offset: usize = frame.len;
    while (offset > frame.len - bytes) {
        offset -= page_size;
        base[offset] = 1;
    }
    _ = started.fetchAdd(1, .monotonic);
    release.waitUncancelable(io);
}

/// The process's resident set (`/proc/self/statm`, second field); 0 if unreadable.
fn residentBytes() u64 {
    const linux = std.os.linux;
    const fd_rc = linux.open("/proc/self/statm", .{ .CLOEXEC = true }, 0);
    if (linux.errno(fd_rc) != .SUCCESS) return 0;
    defer _ = linux.close(@intCast(fd_rc));
    var buffer: [128]u8 = undefined;
    const len = linux.read(@intCast(fd_rc), &buffer, buffer.len);
    if (linux.errno(len) != .SUCCESS) return 0;
    var fields = std.mem.tokenizeScalar(u8, buffer[0..len], ' ');
    _ = fields.next() orelse return 0;
    const pages = std.fmt.parseInt(u64, fields.next() orelse return 0, 10) catch return 0;
    return pages * std.heap.pageSize();
}
