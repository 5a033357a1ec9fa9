//! stacks_committed: what `Runtime.stacksCommittedBytes` costs, the page-table walk behind
//! `Metrics.stacks_committed_bytes`, beside `Runtime.metrics()`, which reads counters only.
//!
//! Each case parks N tasks (each waits on one `Io.Event`), so that N stacks are in use with the
//! pages they touched, then times five walks (`stacksCommittedBytesOf`, on the blocking lane,
//! as a task should call it: the hop to the lane is included) and five snapshots from the main
//! task and prints the best of each: the walk's cost grows with the stacks' address space, the
//! snapshot's does not.
//! Cases: 10,000 and 100,000 tasks on the default 1 MiB stacks, and 1,000,000 on 256 KiB
//! stacks (the setting docs/RUNTIME.md gives for a million tasks).
//!
//! Usage: bench-stacks_committed [--tasks N] (one case of N tasks on the default stacks).
const std = @import("std");
const Io = std.Io;
const weft = @import("weft");
const harness = @import("harness");

const Case = struct { tasks: u64, stack_size_bytes: ?usize = null };

const cases = [_]Case{
    .{ .tasks = 10_000 },
    .{ .tasks = 100_000 },
    .{ .tasks = 1_000_000, .stack_size_bytes = 256 * 1024 },
};

const rounds = 5;

pub fn main(init: std.process.Init) !void {
    const arena = init.arena.allocator();
    const args = try harness.argsAlloc(arena, init.minimal.args);
    var buffer: [512]u8 = undefined;
    var stdout = std.Io.File.stdout().writerStreaming(init.io, &buffer);
    const out = &stdout.interface;
    if (harness.flagValue(args, "--tasks")) |_| {
        const tasks = try harness.flagInt(args, "--tasks", 0);
        try runCase(out, .{ .tasks = tasks });
    } else for (cases) |case| try runCase(out, case);
}

fn runCase(out: *Io.Writer, case: Case) !void {
    var options: weft.Runtime.Options = .{};
    if (case.stack_size_bytes) |bytes| options.stack_size_bytes = bytes;
    var rt = try weft.Runtime.init(std.heap.page_allocator, options);
    defer rt.deinit();
    const io = rt.io();

    var started: std.atomic.Value(u64) = .init(0);
    var release: Io.Event = .unset;
    var group: Io.Group = .init;
    for (0..case.tasks) |_| try group.concurrent(io, park, .{ io, &started, &release });
    while (started.load(.monotonic) < case.tasks) try io.sleep(.fromMilliseconds(1), .awake);

    var walk_ns_min: u64 = std.math.maxInt(u64);
    var snapshot_ns_min: u64 = std.math.maxInt(u64);
    var committed_bytes: u64 = 0;
    var stacks_mapped: u64 = 0;
    for (0..rounds) |_| {
        const walk_start_ns = harness.monotonicNs();
        committed_bytes = (try weft.Runtime.stacksCommittedBytesOf(io)).?;
        walk_ns_min = @min(walk_ns_min, harness.monotonicNs() - walk_start_ns);

        const snapshot_start_ns = harness.monotonicNs();
        const metrics = rt.metrics();
        snapshot_ns_min = @min(snapshot_ns_min, harness.monotonicNs() - snapshot_start_ns);
        stacks_mapped = metrics.stacks_mapped;
    }
    release.set(io);
    try group.await(io);

    const mapped_f: f64 = @floatFromInt(stacks_mapped);
    try out.print(
        "stacks_committed tasks={d} stack_kib={d} stacks_mapped={d} committed_kib={d} " ++
            "walk_ms={d:.2} walk_ns_per_stack={d:.0} metrics_us={d:.1}\n",
        .{
            case.tasks,
            (case.stack_size_bytes orelse (weft.Runtime.Options{}).stack_size_bytes) / 1024,
            stacks_mapped,
            committed_bytes / 1024,
            @as(f64, @floatFromInt(walk_ns_min)) / std.time.ns_per_ms,
            @as(f64, @floatFromInt(walk_ns_min)) / mapped_f,
            @as(f64, @floatFromInt(snapshot_ns_min)) / std.time.ns_per_us,
        },
    );
    try out.flush();
}

fn park(io: Io, started: *std.atomic.Value(u64), release: *Io.Event) void {
    _ = started.fetchAdd(1, .monotonic);
    release.waitUncancelable(io);
}
