//! lane: the blocking-pool benchmarks (swift-io's set), on weft and on
//! std.Io.Threaded; bench/peers/tokio runs the same rows on `spawn_blocking`, and
//! bench/lanes.sh runs everything in one run and prints the comparison table.
//!
//!   row                 jobs   callers                    work     pool threads
//!   roundtrip_ok        10k    one fiber, each in turn    none     2   (ns per call)
//!   roundtrip_error     10k    the same, the job fails    none     2
//!   sequential          1000   one fiber, each in turn    10 us    2   (+ overhead per call)
//!   concurrent          1000   a group, a fiber per job   10 us    2
//!   contention_10       40     a group, a fiber per job   100 us   4   (10:1)
//!   contention_100      400    a group, a fiber per job   50 us    4   (100:1)
//!   contention_1000     2000   a group, a fiber per job   10 us    2   (1000:1)
//!
//! How each row calls a job (`via=`):
//!   lane        `weft.Lane` of `threads` workers (queue 256, admission `.wait`)
//!   sharded     `weft.Lane.Sharded`, `threads` shards of one worker (queue 256 / shards each)
//!   compute     `Runtime.compute`: the runtime's CPU lane with `threads` workers
//!   concurrent  `io.concurrent(job)` then `await`, on std.Io.Threaded (`runtime=threaded`):
//!               the same std.Io program with no lane; Threaded runs every concurrent call on
//!               a thread of its own (no pool bound), so `threads` does not apply there
//!
//! The work is a calibrated busy-wait: a xorshift loop whose iteration count is measured in
//! the child before the timed region (the fastest of 7 probes), so a job is a fixed amount
//! of CPU work, not a wall-clock spin that a preempted thread would finish for free. Lanes,
//! the calibration and the callers' state are built outside the timed region; each row runs
//! 2 warm-up iterations and `--iterations` timed ones and reports the median (`wall_ns`),
//! fastest (`wall_min_ns`) and slowest (`wall_max_ns`) iteration. `ns_per_job` = wall / jobs;
//! `overhead_ns` = ns_per_job - work (meaningful for the one-caller rows); `ideal_ns` = jobs x
//! work / min(threads, CPUs); `workers_woken` the lane's `Stats.workers_woken`.
//!
//! Every job counts itself and returns a value derived from its index, which its caller
//! checks (the error rows check the error): a lost job or a wrong result fails the row.
//!
//! A child given the config word `named=1` names its `Lane` or `Lane.Sharded` "bench", so
//! that it is reported by `weft.Metrics` and times every job for its histograms (an unnamed
//! lane does not): bench/metrics_cost.sh measures what that costs.
//!
//! Usage: bench-lane [--row NAME] [--via lane|sharded|compute|concurrent]
//!                   [--iterations N] [--rounds N]          (defaults: all, all, 10, 10,000)
const std = @import("std");
const Io = std.Io;
const weft = @import("weft");
const harness = @import("harness");

const timeout_ns = 120 * std.time.ns_per_s;
const iterations_default = 10;
const iterations_warmup = 2;
const rounds_default = 10_000;
const queue_limit = 256;
const waiters_max = 4096;

const Row = enum {
    roundtrip_ok,
    roundtrip_error,
    sequential,
    concurrent,
    contention_10,
    contention_100,
    contention_1000,
};

const Via = enum { lane, sharded, compute, concurrent };

const Shape = struct {
    jobs: u32,
    /// A fiber per job, started by a group (else one fiber calls every job in turn).
    fan_out: bool,
    work_ns: u64,
    threads: u32,
    fails: bool = false,
};

fn shapeOf(row: Row, rounds: u32) Shape {
    const us = std.time.ns_per_us;
    return switch (row) {
        .roundtrip_ok => .{ .jobs = rounds, .fan_out = false, .work_ns = 0, .threads = 2 },
        .roundtrip_error => .{
            .jobs = rounds,
            .fan_out = false,
            .work_ns = 0,
            .threads = 2,
            .fails = true,
        },
        .sequential => .{ .jobs = 1000, .fan_out = false, .work_ns = 10 * us, .threads = 2 },
        .concurrent => .{ .jobs = 1000, .fan_out = true, .work_ns = 10 * us, .threads = 2 },
        .contention_10 => .{ .jobs = 40, .fan_out = true, .work_ns = 100 * us, .threads = 4 },
        .contention_100 => .{ .jobs = 400, .fan_out = true, .work_ns = 50 * us, .threads = 4 },
        .contention_1000 => .{ .jobs = 2000, .fan_out = true, .work_ns = 10 * us, .threads = 2 },
    };
}

const Result = struct {
    wall_ns: u64,
    wall_min_ns: u64,
    wall_max_ns: u64,
    ns_per_job: f64,
    overhead_ns: f64,
    ideal_ns: u64,
    jobs: u64,
    spin_iterations: u64,
    /// Parked lane workers woken for a job over the whole run, warm-up included (`Lane` and
    /// `Lane.Sharded`; 0 for the others): each is a futex syscall and a thread switch.
    workers_woken: u64,
};

const Backend = harness.Backend(weft);

/// What every caller and job of one row shares; built before the timed region.
const Context = struct {
    io: Io,
    via: Via,
    lane: ?*weft.Lane = null,
    sharded: ?*weft.Lane.Sharded = null,
    runtime: ?weft.Runtime = null,
    /// Busy-wait iterations of one job.
    spin_iterations: u64,
    fails: bool,
    completed: std.atomic.Value(u64) = .init(0),
    wrong: std.atomic.Value(u64) = .init(0),
    /// Calls that returned an error other than the job's own (a lane refusal, say).
    refused: std.atomic.Value(u64) = .init(0),
};

/// The busy-wait: a xorshift chain, whose every step depends on the last.
fn spin(iterations: u64, seed: u64) u64 {
    var x = seed | 1;
    var index: u64 = 0;
    while (index < iterations) : (index += 1) {
        x ^= x << 13;
        x ^= x >> 7;
        x ^= x << 17;
    }
    return x;
}

/// Iterations of `spin` that take `work_ns` on this core: the fastest of 7 probes, so that a
/// probe preempted by another process does not shorten the work.
fn calibrate(work_ns: u64) u64 {
    if (work_ns == 0) return 0;
    const probe_iterations = 2_000_000;
    var best_ns: u64 = std.math.maxInt(u64);
    for (0..7) |trial| {
        const start_ns = harness.monotonicNs();
        std.mem.doNotOptimizeAway(spin(probe_iterations, trial));
        best_ns = @min(best_ns, @max(1, harness.monotonicNs() - start_ns));
    }
    return probe_iterations * work_ns / best_ns;
}

fn expected(index: u64) u64 {
    return index *% 3 +% 1;
}

fn work(context: *Context, index: u64) u64 {
    std.mem.doNotOptimizeAway(spin(context.spin_iterations, index));
    _ = context.completed.fetchAdd(1, .monotonic);
    return expected(index);
}

fn workFailing(context: *Context, index: u64) error{Refused}!u64 {
    _ = work(context, index);
    return error.Refused;
}

/// Runs `function(context, index)` the row's way and returns its result.
fn dispatch(context: *Context, comptime function: anytype, index: u64) !u64 {
    const args = .{ context, index };
    switch (context.via) {
        .lane => return context.lane.?.run(context.io, function, args),
        .sharded => return context.sharded.?.run(context.io, function, args),
        .compute => return context.runtime.?.compute(context.io, function, args),
        .concurrent => {
            var future = try context.io.concurrent(function, args);
            return future.await(context.io);
        },
    }
}

/// One call, its result checked.
fn callChecked(context: *Context, index: u64) error{Canceled}!void {
    const result = if (context.fails)
        dispatch(context, workFailing, index)
    else
        dispatch(context, work, index);
    if (result) |value| {
        if (context.fails or value != expected(index)) _ = context.wrong.fetchAdd(1, .monotonic);
    } else |err| switch (err) {
        error.Refused => if (!context.fails) {
            _ = context.wrong.fetchAdd(1, .monotonic);
        },
        error.Canceled => return error.Canceled,
        else => _ = context.refused.fetchAdd(1, .monotonic),
    }
}

fn caller(context: *Context, index: u64) Io.Cancelable!void {
    return callChecked(context, index);
}

/// One iteration of the row; its wall time.
fn iterate(context: *Context, shape: Shape) !u64 {
    const start_ns = harness.monotonicNs();
    if (shape.fan_out) {
        var group: Io.Group = .init;
        defer group.cancel(context.io);
        for (0..shape.jobs) |index| try group.concurrent(context.io, caller, .{ context, index });
        try group.await(context.io);
    } else {
        for (0..shape.jobs) |index| try callChecked(context, index);
    }
    return harness.monotonicNs() - start_ns;
}

fn runIterations(context: *Context, shape: Shape, iterations: u32) !Result {
    var walls: [64]u64 = undefined;
    if (iterations == 0 or iterations > walls.len) return error.ConfigInvalid;
    for (0..iterations_warmup) |_| _ = try iterate(context, shape);
    for (walls[0..iterations]) |*wall| wall.* = try iterate(context, shape);
    const total_jobs = @as(u64, shape.jobs) * (iterations + iterations_warmup);
    if (context.refused.load(.monotonic) != 0) return error.CallRefused;
    if (context.completed.load(.monotonic) != total_jobs) return error.LostJobs;
    if (context.wrong.load(.monotonic) != 0) return error.WrongResult;
    const sorted = walls[0..iterations];
    std.mem.sort(u64, sorted, {}, std.sort.asc(u64));
    const median = sorted[iterations / 2];
    const per_job = @as(f64, @floatFromInt(median)) / @as(f64, @floatFromInt(shape.jobs));
    const cpus: u64 = @intCast(std.Thread.getCpuCount() catch 1);
    return .{
        .wall_ns = median,
        .wall_min_ns = sorted[0],
        .wall_max_ns = sorted[iterations - 1],
        .ns_per_job = per_job,
        .overhead_ns = per_job - @as(f64, @floatFromInt(shape.work_ns)),
        .ideal_ns = shape.jobs * shape.work_ns / @min(shape.threads, cpus),
        .jobs = shape.jobs,
        .spin_iterations = context.spin_iterations,
        .workers_woken = workersWoken(context),
    };
}

fn workersWoken(context: *Context) u64 {
    if (context.lane) |lane| return lane.stats().workers_woken;
    if (context.sharded) |sharded| return sharded.stats().workers_woken;
    return 0;
}

fn measure(io: Io, config: harness.Config, backend: *Backend) !Result {
    const shape = shapeOf(try config.enumValue(Row, "row"), try config.int(u32, "rounds"));
    const iterations = try config.int(u32, "iterations");
    const name: ?[]const u8 = if (config.get("named") != null) "bench" else null;
    const gpa = std.heap.page_allocator;
    var context: Context = .{
        .io = io,
        .via = try config.enumValue(Via, "via"),
        .spin_iterations = calibrate(shape.work_ns),
        .fails = shape.fails,
    };
    switch (context.via) {
        .lane => context.lane = try weft.Lane.init(gpa, .{
            .threads = shape.threads,
            .queue_limit = queue_limit,
            .admission = .wait,
            .waiters_max = waiters_max,
            .name = name,
        }),
        .sharded => context.sharded = try weft.Lane.Sharded.init(gpa, .{
            .name = name,
            .shards = shape.threads,
            .lane = .{
                .threads = 1,
                .queue_limit = queue_limit / shape.threads,
                .admission = .wait,
                .waiters_max = waiters_max,
            },
        }),
        .compute => context.runtime = switch (backend.*) {
            .weft => |runtime| runtime,
            .threaded => return error.ConfigInvalid,
        },
        .concurrent => {},
    }
    defer if (context.lane) |lane| lane.deinit(io);
    defer if (context.sharded) |sharded| sharded.deinit(io);
    return runIterations(&context, shape, iterations);
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
    const iterations = try harness.flagInt(args, "--iterations", iterations_default);
    const row_only = try flagEnum(Row, args, "--row");
    const via_only = try flagEnum(Via, args, "--via");
    for (std.enums.values(Row)) |row| {
        if (row_only != null and row_only.? != row) continue;
        const shape = shapeOf(row, @intCast(rounds));
        for (std.enums.values(Via)) |via| {
            if (via_only != null and via_only.? != via) continue;
            const runtime = if (via == .concurrent) "runtime=threaded" else "runtime=weft";
            const bench = try std.fmt.allocPrint(arena, "lane_{t}", .{row});
            _ = try session.report(bench, &.{
                runtime,
                try session.word("via", via),
                try session.word("lane_threads", shape.threads),
                try session.word("cpu_threads", shape.threads),
                try session.word("jobs", shape.jobs),
                try session.word("work_ns", shape.work_ns),
                try session.word("row", row),
                try session.word("rounds", rounds),
                try session.word("iterations", iterations),
            }, timeout_ns);
        }
    }
}

fn flagEnum(comptime E: type, args: []const []const u8, name: []const u8) !?E {
    const text = harness.flagValue(args, name) orelse return null;
    return std.meta.stringToEnum(E, text) orelse {
        std.debug.print("{s}: unknown value '{s}'\n", .{ name, text });
        return error.InvalidArgs;
    };
}
