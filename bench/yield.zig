//! yield: a yield storm, the peers' `yield` scenario (bench/peers): `tasks` tasks (default 100),
//! started with `Group.concurrent`, each yield `yields` times (default 10,000) with
//! `weft.Runtime.yield`, the counterpart of Tokio's `yield_now` and Go's `runtime.Gosched`
//! (std.Io has no yield of its own). Each task adds its count to a shared total when done; the
//! total must be tasks x yields (`error=LostYields` otherwise). Reports `ns_per_yield` =
//! wall / (tasks x yields).
//!
//! Every yield puts the task at the back of its executor's queue and runs the next ready task,
//! so with 2 executors the storm also measures how the queues are shared and stolen from.
//!
//! weft runs with 1 and with 2 executors. Each measurement runs in a child process. On
//! std.Io.Threaded, `Runtime.yield` yields the OS thread (`--io threaded`: 100 threads).
//!
//! Usage: bench-yield [--io threaded|weft|both] [--tasks K] [--yields M] (default weft).
const std = @import("std");
const Io = std.Io;
const weft = @import("weft");
const harness = @import("harness");

const bench_name = "yield";
const tasks_default = 100;
const yields_default = 10_000;
const timeout_ns = 15 * std.time.ns_per_s;

const Result = struct {
    wall_ns: u64,
    ns_per_yield: f64,
    yields_done: u64,
};

fn yielder(io: Io, yields: u64, done: *std.atomic.Value(u64)) Io.Cancelable!void {
    for (0..yields) |_| try weft.Runtime.yield(io);
    // Monotonic: the total is read only after `Group.await`, which orders it.
    _ = done.fetchAdd(yields, .monotonic);
}

fn run(
    io: Io,
    tasks: u64,
    yields: u64,
) (Io.Cancelable || Io.ConcurrentError || error{LostYields})!Result {
    var done: std.atomic.Value(u64) = .init(0);
    var group: Io.Group = .init;
    defer group.cancel(io); // error path only: after a successful await the group is empty

    const start_ns = harness.monotonicNs();
    for (0..tasks) |_| try group.concurrent(io, yielder, .{ io, yields, &done });
    try group.await(io);
    const wall_ns = harness.monotonicNs() - start_ns;

    const total = tasks * yields;
    const yields_done = done.load(.monotonic);
    if (yields_done != total) return error.LostYields;
    return .{
        .wall_ns = wall_ns,
        .ns_per_yield = @as(f64, @floatFromInt(wall_ns)) / @as(f64, @floatFromInt(@max(total, 1))),
        .yields_done = yields_done,
    };
}

fn measure(io: Io, config: harness.Config) !Result {
    return run(io, try config.int(u64, "tasks"), try config.int(u64, "yields"));
}

pub fn main(init: std.process.Init) !void {
    return harness.main(weft, init, measure, plan);
}

fn plan(session: *harness.Session, args: []const []const u8) !void {
    const words = [_][]const u8{
        try session.word("tasks", try harness.flagInt(args, "--tasks", tasks_default)),
        try session.word("yields", try harness.flagInt(args, "--yields", yields_default)),
    };
    const kinds = try harness.ioKinds(args, &.{.weft});
    try session.reportEach(bench_name, kinds, &.{ 1, 2 }, &words, timeout_ns);
}
