//! sim: what weft.Sim costs, against issue 22's targets.
//!
//!   sleepers    N tasks (`Group.async`), each sleeping a seeded random 1 to 3,600 s of
//!               virtual time; wall time of the whole run (target: 10,000 in under 0.5 s).
//!               N = 10,000, and 100,000 on 64 KiB stacks.
//!   steps       T tasks, each calling `checkCancel` in a loop with `preempt_percent = 100`,
//!               so that every call is a scheduling step: pick a ready task, switch to it, run
//!               it to its next block, switch back. Steps per second of wall time (target:
//!               5 million on one core). T = 2 and 1,000.
//!   channel     two tasks passing a u64 back and forth over two weft.sync channels of
//!               capacity 1 (each hand-off is a futex wait and wake): round trips per second.
//!   disk        one task writing 64-byte records at increasing offsets with `writePositional`
//!               (issue 36's target: 1 million per second on the simulated disk), beside the
//!               same writes through a Sim with real files (into a file under /tmp).
//!   crashes     issue 36's example store (write a temporary file, sync, rename, sync the
//!               directory) under `Sim.checkCrashes`: 10,000 crash points (target: < 10 s).
//!
//! One result line per case; every run is checked (each sleeper woke at its deadline, every
//! step and every round happened). Usage: bench-sim [--case sleepers|steps|channel].
const std = @import("std");
const Io = std.Io;
const weft = @import("weft");
const harness = @import("harness");

const Case = enum { sleepers, steps, channel, disk, crashes };

pub fn main(init: std.process.Init) !void {
    const arena = init.arena.allocator();
    const args = try harness.argsAlloc(arena, init.minimal.args);
    var buffer: [512]u8 = undefined;
    var stdout = std.Io.File.stdout().writerStreaming(init.io, &buffer);
    const out = &stdout.interface;
    const only: ?Case = if (harness.flagValue(args, "--case")) |name|
        std.meta.stringToEnum(Case, name) orelse return error.UnknownCase
    else
        null;
    const gpa = std.heap.smp_allocator;
    if (only == null or only == .sleepers) {
        try sleepersCase(gpa, out, 10_000, 256 * 1024);
        try sleepersCase(gpa, out, 100_000, 64 * 1024);
    }
    if (only == null or only == .steps) {
        try stepsCase(gpa, out, 2, 2_000_000);
        try stepsCase(gpa, out, 1_000, 4_000);
    }
    if (only == null or only == .channel) try channelCase(gpa, out, 1_000_000);
    if (only == null or only == .disk) {
        try diskCase(gpa, out, .simulated, 1_000_000);
        try diskCase(gpa, out, .real, 200_000);
    }
    if (only == null or only == .crashes) try crashesCase(gpa, out, 10_000);
}

const record_bytes = 64;

fn diskCase(gpa: std.mem.Allocator, out: *Io.Writer, files: weft.Sim.Files, writes: u64) !void {
    var sim = try weft.Sim.init(gpa, .{ .seed = 1, .files = files });
    defer sim.deinit();
    const path = switch (files) {
        .simulated => "records",
        .real => "/tmp/weft-bench-sim-records",
    };
    const threaded_io = Io.Threaded.global_single_threaded.io();
    defer if (files == .real) Io.Dir.cwd().deleteFile(threaded_io, path) catch {};
    const start_ns = harness.monotonicNs();
    try sim.run(writeRecords, .{ path, writes });
    const wall_ns = harness.monotonicNs() - start_ns;
    try out.print("bench=sim case=disk files={t} writes={d} record_bytes={d} wall_ms={d:.1} " ++
        "writes_per_s={d:.0}\n", .{
        files,
        writes,
        record_bytes,
        @as(f64, @floatFromInt(wall_ns)) / std.time.ns_per_ms,
        @as(f64, @floatFromInt(writes)) * std.time.ns_per_s / @as(f64, @floatFromInt(wall_ns)),
    });
    try out.flush();
}

fn writeRecords(io: Io, path: []const u8, writes: u64) !void {
    const file = try Io.Dir.cwd().createFile(io, path, .{ .read = true });
    defer file.close(io);
    var record: [record_bytes]u8 = @splat('r');
    for (0..writes) |index| {
        std.mem.writeInt(u64, record[0..8], index, .little);
        try file.writePositionalAll(io, &record, index * record_bytes);
    }
    // Checked: the last record is where it was written.
    var last: [record_bytes]u8 = undefined;
    const offset = (writes - 1) * record_bytes;
    if (try file.readPositionalAll(io, &last, offset) != record_bytes) return error.ShortFile;
    if (std.mem.readInt(u64, last[0..8], .little) != writes - 1) return error.WrongRecord;
}

fn crashesCase(gpa: std.mem.Allocator, out: *Io.Writer, seeds: u64) !void {
    const start_ns = harness.monotonicNs();
    const checked = try weft.Sim.checkCrashes(gpa, .{
        .seeds = seeds,
        .operations_max = 60,
    }, Store{}, Store.write, Store.recover);
    const wall_ns = harness.monotonicNs() - start_ns;
    if (checked.outcome != .passed) return error.StoreBroken;
    try out.print("bench=sim case=crashes crash_points={d} wall_ms={d:.1} " ++
        "crash_points_per_s={d:.0}\n", .{
        seeds,
        @as(f64, @floatFromInt(wall_ns)) / std.time.ns_per_ms,
        @as(f64, @floatFromInt(seeds)) * std.time.ns_per_s / @as(f64, @floatFromInt(wall_ns)),
    });
    try out.flush();
}

/// Saves five values, each by a temporary file synced and renamed over the store, and the
/// directory synced; the recovery finds at least the last value acknowledged.
const Store = struct {
    acknowledged: u8 = 0,

    fn write(io: Io, store: *Store) !void {
        const dir: Io.Dir = .cwd();
        for (1..6) |value| {
            {
                const file = try dir.createFile(io, "store.tmp", .{});
                defer file.close(io);
                try file.writeStreamingAll(io, &.{@intCast(value)});
                try file.sync(io);
            }
            try dir.rename("store.tmp", dir, "store", io);
            const opened = try dir.openDir(io, ".", .{});
            defer opened.close(io);
            try (Io.File{ .handle = opened.handle, .flags = .{ .nonblocking = false } }).sync(io);
            store.acknowledged = @intCast(value);
        }
    }

    fn recover(io: Io, store: *Store) !void {
        var buffer: [1]u8 = undefined;
        const bytes = Io.Dir.cwd().readFile(io, "store", &buffer) catch |err| switch (err) {
            error.FileNotFound => if (store.acknowledged == 0) return else return error.Lost,
            else => |e| return e,
        };
        if (bytes.len != 1 or bytes[0] < store.acknowledged) return error.Stale;
    }
};

fn sleepersCase(gpa: std.mem.Allocator, out: *Io.Writer, tasks: usize, stack_bytes: usize) !void {
    var sim = try weft.Sim.init(gpa, .{ .seed = 1, .stack_size_bytes = stack_bytes });
    defer sim.deinit();
    const start_ns = harness.monotonicNs();
    try sim.run(sleepers, .{tasks});
    const wall_ns = harness.monotonicNs() - start_ns;
    try out.print("bench=sim case=sleepers tasks={d} stack_kib={d} wall_ms={d:.1} " ++
        "virtual_s={d} steps={d}\n", .{
        tasks,
        stack_bytes / 1024,
        @as(f64, @floatFromInt(wall_ns)) / std.time.ns_per_ms,
        sim.elapsedNs() / std.time.ns_per_s,
        sim.stepCount(),
    });
    try out.flush();
}

fn sleepers(io: Io, tasks: usize) !void {
    const Sleeper = struct {
        fn sleep(inner: Io, seconds: u64, late: *u64) void {
            const start = Io.Clock.awake.now(inner);
            inner.sleep(.fromSeconds(@intCast(seconds)), .awake) catch return;
            const slept = start.durationTo(Io.Clock.awake.now(inner)).nanoseconds;
            const wanted: i96 = @intCast(seconds * std.time.ns_per_s);
            if (slept < wanted) late.* = std.math.maxInt(u64); // woke early: a wrong run
        }
    };
    var late: u64 = 0;
    var random = std.Random.DefaultPrng.init(7);
    var group: Io.Group = .init;
    for (0..tasks) |_| {
        const seconds = random.random().intRangeAtMost(u64, 1, 3600);
        group.async(io, Sleeper.sleep, .{ io, seconds, &late });
    }
    try group.await(io);
    if (late != 0) return error.WokeEarly;
}

fn stepsCase(gpa: std.mem.Allocator, out: *Io.Writer, tasks: usize, calls: usize) !void {
    var sim = try weft.Sim.init(gpa, .{ .seed = 1, .preempt_percent = 100 });
    defer sim.deinit();
    const start_ns = harness.monotonicNs();
    try sim.run(steps, .{ tasks, calls });
    const wall_ns = harness.monotonicNs() - start_ns;
    const step_count = sim.stepCount();
    if (step_count < tasks * calls) return error.MissingSteps;
    try out.print("bench=sim case=steps tasks={d} steps={d} wall_ms={d:.1} " ++
        "steps_per_s={d:.0} ns_per_step={d:.1}\n", .{
        tasks,
        step_count,
        @as(f64, @floatFromInt(wall_ns)) / std.time.ns_per_ms,
        @as(f64, @floatFromInt(step_count)) * std.time.ns_per_s / @as(f64, @floatFromInt(wall_ns)),
        @as(f64, @floatFromInt(wall_ns)) / @as(f64, @floatFromInt(step_count)),
    });
    try out.flush();
}

fn steps(io: Io, tasks: usize, calls: usize) !void {
    const Stepper = struct {
        fn run(inner: Io, count: usize) Io.Cancelable!void {
            for (0..count) |_| try inner.checkCancel();
        }
    };
    var group: Io.Group = .init;
    for (0..tasks) |_| group.async(io, Stepper.run, .{ io, calls });
    try group.await(io);
}

fn channelCase(gpa: std.mem.Allocator, out: *Io.Writer, rounds: u64) !void {
    var sim = try weft.Sim.init(gpa, .{ .seed = 1 });
    defer sim.deinit();
    const start_ns = harness.monotonicNs();
    try sim.run(pingPong, .{rounds});
    const wall_ns = harness.monotonicNs() - start_ns;
    try out.print("bench=sim case=channel rounds={d} wall_ms={d:.1} ns_per_round={d:.1} " ++
        "steps={d}\n", .{
        rounds,
        @as(f64, @floatFromInt(wall_ns)) / std.time.ns_per_ms,
        @as(f64, @floatFromInt(wall_ns)) / @as(f64, @floatFromInt(rounds)),
        sim.stepCount(),
    });
    try out.flush();
}

fn pingPong(io: Io, rounds: u64) !void {
    var ping_buffer: [1]u64 = undefined;
    var pong_buffer: [1]u64 = undefined;
    var ping: weft.sync.Channel(u64) = .init(&ping_buffer);
    var pong: weft.sync.Channel(u64) = .init(&pong_buffer);
    const Echo = struct {
        fn run(inner: Io, in: *weft.sync.Channel(u64), back: *weft.sync.Channel(u64), n: u64) !void {
            for (0..n) |_| try back.send(inner, try in.recv(inner));
        }
    };
    var echo = try io.concurrent(Echo.run, .{ io, &ping, &pong, rounds });
    defer echo.cancel(io) catch {};
    for (0..rounds) |round| {
        try ping.send(io, round);
        if (try pong.recv(io) != round) return error.WrongReply;
    }
    try echo.await(io);
}
