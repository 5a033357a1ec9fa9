//! spawn: 1,000,000 no-op tasks spawned into one `Io.Group` with `Group.async`, then
//! `Group.await`. Reports `ns_per_spawn` = total wall / tasks, where the wall time covers
//! spawning, running and awaiting every task: the same definition as the zio, Tokio and Go
//! spawn-1M figures weft measures against (spawn 1M, then join).
//!
//! The "no-op" increments one counter, so that the program can check that every task ran
//! exactly once; uncontended on one executor, that costs a few ns per task.
//!
//! weft runs with 1 and with 2 executors (a column each beside the peers), each once on each
//! stack mode: `Group.async` may keep all 1M tasks pending until the await, and 1M guarded
//! stacks would exceed vm.max_map_count, so the guarded line also shows how weft copes (runs
//! tasks inline, refuses, or fails with a clear error). Each measurement runs in a child
//! process (per-measurement peak RSS, crash isolation).
//!
//! Usage: bench-spawn [--io threaded|weft|both] [--tasks N] (default weft, 1,000,000 tasks).
//! On std.Io.Threaded, `async` runs a task inline whenever its `async_limit` (CPU count - 1)
//! threads are busy, so most tasks run on the spawning thread.
const std = @import("std");
const Io = std.Io;
const weft = @import("weft");
const harness = @import("harness");

const bench_name = "spawn";
const tasks_default = 1_000_000;
const timeout_ns = 15 * std.time.ns_per_s;

const Result = struct {
    wall_ns: u64,
    ns_per_spawn: f64,
};

fn noop(ran: *std.atomic.Value(u64)) void {
    // Monotonic: the count is only read after `Group.await`, which orders it.
    _ = ran.fetchAdd(1, .monotonic);
}

/// Spawns `tasks` no-op tasks into one group and awaits them all.
fn run(io: Io, tasks: u64) (Io.Cancelable || error{LostTasks})!Result {
    var ran: std.atomic.Value(u64) = .init(0);
    var group: Io.Group = .init;
    defer group.cancel(io); // error path only: after a successful await the group is empty

    const start_ns = harness.monotonicNs();
    for (0..tasks) |_| group.async(io, noop, .{&ran});
    try group.await(io);
    const wall_ns = harness.monotonicNs() - start_ns;

    if (ran.load(.monotonic) != tasks) return error.LostTasks;
    return .{
        .wall_ns = wall_ns,
        .ns_per_spawn = @as(f64, @floatFromInt(wall_ns)) / @as(f64, @floatFromInt(tasks)),
    };
}

fn measure(io: Io, config: harness.Config) !Result {
    return run(io, try config.int(u64, "tasks"));
}

pub fn main(init: std.process.Init) !void {
    return harness.main(weft, init, measure, plan);
}

fn plan(session: *harness.Session, args: []const []const u8) !void {
    const tasks = try session.word("tasks", try harness.flagInt(args, "--tasks", tasks_default));
    for (try harness.ioKinds(args, &.{.weft})) |kind| {
        if (kind == .threaded) {
            try session.reportEach(bench_name, &.{.threaded}, &.{1}, &.{tasks}, timeout_ns);
            continue;
        }
        // Stack words go after `executors=`, so each mode is its own call.
        for ([_][]const u8{ "stack=dense", "stack=guarded" }) |stack| {
            const words = [_][]const u8{ stack, tasks };
            try session.reportEach(bench_name, &.{.weft}, &.{ 1, 2 }, &words, timeout_ns);
        }
    }
}
