//! lane: `weft.Lane`, a blocking call's round trip from a fiber to a lane worker and back.
//!
//!   lane_roundtrip path=ok      one fiber, 100k x `lane.run` of a trivial job; ns per call
//!   lane_roundtrip path=error   the same, the job returns an error (the caller catches it)
//!   lane_sequential             one fiber, 1000 x a job that busy-waits 10 us; ns per call
//!                               and `overhead_ns` = ns per call - 10 us
//!   lane_concurrent             a group of 1000 fibers, one 10 us job each; wall and ns per job
//!
//! Peer: `spawn_blocking` in bench/peers/tokio (the same rows, `runtime=tokio-ct`). Each line
//! names the lane's `threads`; every job is counted, so a lost one fails the row.
//!
//! Usage: bench-lane [--rounds N] [--threads T] (defaults 100,000 and 1 and 2)
const std = @import("std");
const Io = std.Io;
const weft = @import("weft");
const harness = @import("harness");

const timeout_ns = 60 * std.time.ns_per_s;
const rounds_default = 100_000;
const busy_jobs = 1000;
const busy_ns = 10 * std.time.ns_per_us;

const Row = enum { lane_roundtrip, lane_sequential, lane_concurrent };
const Path = enum { ok, @"error" };

const Result = struct {
    wall_ns: u64,
    ns_per_op: f64,
    overhead_ns: f64,
    ops: u64,
};

const RunError = weft.Lane.InitError || weft.Lane.Error || Io.ConcurrentError ||
    harness.Config.Error || error{LostJobs};

fn trivial(counter: *u64) u64 {
    counter.* += 1;
    return counter.*;
}

fn trivialError(counter: *u64) error{Refused}!u64 {
    counter.* += 1;
    return error.Refused;
}

fn busyWait(counter: *std.atomic.Value(u64)) void {
    const start_ns = harness.monotonicNs();
    while (harness.monotonicNs() - start_ns < busy_ns) std.atomic.spinLoopHint();
    _ = counter.fetchAdd(1, .monotonic);
}

fn finish(start_ns: u64, ops: u64, job_ns: u64) Result {
    const wall_ns = harness.monotonicNs() - start_ns;
    const per_op = @as(f64, @floatFromInt(wall_ns)) / @as(f64, @floatFromInt(ops));
    return .{
        .wall_ns = wall_ns,
        .ns_per_op = per_op,
        .overhead_ns = per_op - @as(f64, @floatFromInt(job_ns)),
        .ops = ops,
    };
}

fn roundtrip(io: Io, lane: *weft.Lane, rounds: u64, path: Path) RunError!Result {
    var counter: u64 = 0;
    const start_ns = harness.monotonicNs();
    switch (path) {
        .ok => for (0..rounds) |_| {
            _ = try lane.run(io, trivial, .{&counter});
        },
        .@"error" => for (0..rounds) |_| {
            _ = lane.run(io, trivialError, .{&counter}) catch |err| switch (err) {
                error.Refused => {},
                else => |e| return e,
            };
        },
    }
    const result = finish(start_ns, rounds, 0);
    if (counter != rounds) return error.LostJobs;
    return result;
}

fn sequential(io: Io, lane: *weft.Lane) RunError!Result {
    var counter: std.atomic.Value(u64) = .init(0);
    const start_ns = harness.monotonicNs();
    for (0..busy_jobs) |_| try lane.run(io, busyWait, .{&counter});
    const result = finish(start_ns, busy_jobs, busy_ns);
    if (counter.load(.monotonic) != busy_jobs) return error.LostJobs;
    return result;
}

fn oneJob(io: Io, lane: *weft.Lane, counter: *std.atomic.Value(u64)) Io.Cancelable!void {
    lane.run(io, busyWait, .{counter}) catch |err| switch (err) {
        error.Canceled => return error.Canceled,
        else => {}, // counted as lost below
    };
}

fn concurrent(io: Io, lane: *weft.Lane) RunError!Result {
    var counter: std.atomic.Value(u64) = .init(0);
    var group: Io.Group = .init;
    defer group.cancel(io);
    const start_ns = harness.monotonicNs();
    for (0..busy_jobs) |_| try group.concurrent(io, oneJob, .{ io, lane, &counter });
    try group.await(io);
    const result = finish(start_ns, busy_jobs, 0);
    if (counter.load(.monotonic) != busy_jobs) return error.LostJobs;
    return result;
}

fn measure(io: Io, config: harness.Config) !Result {
    const lane = try weft.Lane.init(std.heap.page_allocator, .{
        .threads = try config.int(u32, "threads"),
        .queue_limit = busy_jobs,
        .admission = .wait,
    });
    defer lane.deinit(io);
    return switch (try config.enumValue(Row, "row")) {
        .lane_roundtrip => roundtrip(
            io,
            lane,
            try config.int(u64, "rounds"),
            try config.enumValue(Path, "path"),
        ),
        .lane_sequential => sequential(io, lane),
        .lane_concurrent => concurrent(io, lane),
    };
}

pub fn main(init: std.process.Init) !void {
    const arena = init.arena.allocator();
    const args = try harness.argsAlloc(arena, init.minimal.args);
    if (harness.isChild(args)) return harness.childMain(weft, init, args, measure);

    var buffer: [1024]u8 = undefined;
    var stdout = std.Io.File.stdout().writerStreaming(init.io, &buffer);
    var session: harness.Session = .{
        .arena = arena,
        .environ = init.minimal.environ,
        .out = &stdout.interface,
    };
    const rounds = try harness.flagInt(args, "--rounds", rounds_default);
    const threads_flag = harness.flagValue(args, "--threads");
    const thread_counts: []const u64 = if (threads_flag != null)
        &.{try harness.flagInt(args, "--threads", 1)}
    else
        &.{ 1, 2 };
    for (thread_counts) |threads| {
        for ([_]Path{ .ok, .@"error" }) |path| {
            _ = try session.report("lane_roundtrip", &.{
                "runtime=weft",                          try session.word("threads", threads),
                try session.word("path", path),          try session.word("rounds", rounds),
                try session.word("row", .lane_roundtrip),
            }, timeout_ns);
        }
        for ([_]Row{ .lane_sequential, .lane_concurrent }) |row| {
            _ = try session.report(@tagName(row), &.{
                "runtime=weft",
                try session.word("threads", threads),
                try session.word("jobs", busy_jobs),
                try session.word("row", row),
            }, timeout_ns);
        }
    }
}
