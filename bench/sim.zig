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
//!
//! One result line per case; every run is checked (each sleeper woke at its deadline, every
//! step and every round happened). Usage: bench-sim [--case sleepers|steps|channel].
const std = @import("std");
const Io = std.Io;
const weft = @import("weft");
const harness = @import("harness");

const Case = enum { sleepers, steps, channel };

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
}

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
