//! spawn_tree: a binary tree of tasks, the shape of the peers' `spawn_tree` (bench/peers): every
//! task above the last of `depth` levels spawns two children with `io.async` and awaits both;
//! 2^depth - 1 tasks (1,048,575 for the default depth 20), the root included, which is itself a
//! spawned task awaited by the main task. Each task returns the size of its subtree and the root's
//! must equal 2^depth - 1 (`error=LostTasks` otherwise). Reports `ns_per_task` = wall / tasks.
//!
//! Unlike `spawn`, where one task spawns a million, here every task spawns and awaits: the
//! fan-out spreads over the executors by stealing, and each await blocks a parent until its
//! children are done.
//!
//! weft runs with 1 and with 2 executors. Each measurement runs in a child process.
//!
//! Usage: bench-spawn_tree [--io threaded|weft|both] [--depth D] (default weft, depth 20; at
//! most 30).
const std = @import("std");
const Io = std.Io;
const weft = @import("weft");
const harness = @import("harness");

const bench_name = "spawn_tree";
const depth_default = 20;
/// 2^30 tasks would take minutes; the peers clamp to the same bound.
const depth_max = 30;
const timeout_ns = 30 * std.time.ns_per_s;

const Result = struct {
    tasks: u64,
    wall_ns: u64,
    ns_per_task: f64,
};

/// One task of the tree: above the last level it spawns two children and awaits both.
/// Returns the number of tasks in its subtree, itself included.
fn node(io: Io, level: u64, depth: u64) u64 {
    if (level + 1 >= depth) return 1;
    var left = io.async(node, .{ io, level + 1, depth });
    var right = io.async(node, .{ io, level + 1, depth });
    return 1 + left.await(io) + right.await(io);
}

fn run(io: Io, depth: u64) error{ LostTasks, ConfigInvalid }!Result {
    if (depth == 0 or depth > depth_max) return error.ConfigInvalid;
    const expected = (@as(u64, 1) << @intCast(depth)) - 1;

    const start_ns = harness.monotonicNs();
    var root = io.async(node, .{ io, 0, depth });
    const counted = root.await(io);
    const wall_ns = harness.monotonicNs() - start_ns;

    if (counted != expected) return error.LostTasks;
    return .{
        .tasks = counted,
        .wall_ns = wall_ns,
        .ns_per_task = @as(f64, @floatFromInt(wall_ns)) / @as(f64, @floatFromInt(expected)),
    };
}

fn measure(io: Io, config: harness.Config) !Result {
    return run(io, try config.int(u64, "depth"));
}

pub fn main(init: std.process.Init) !void {
    return harness.main(weft, init, measure, plan);
}

fn plan(session: *harness.Session, args: []const []const u8) !void {
    const depth = try harness.flagInt(args, "--depth", depth_default);
    const words = [_][]const u8{try session.word("depth", depth)};
    const kinds = try harness.ioKinds(args, &.{.weft});
    try session.reportEach(bench_name, kinds, &.{ 1, 2 }, &words, timeout_ns);
}
