//! weft.Lane in one small program: fibers hand blocking calls to a bounded pool of threads.
//!
//! Eight fibers each hash a file's worth of bytes on the lane (standing in for a blocking
//! syscall or a C library call); the executor stays free meanwhile. The lane has 2 threads and
//! a queue of 4; extra callers wait in its FIFO admission line. The job's own error set comes
//! back through `run` unchanged, next to the lane's (`error.QueueFull`, `error.Canceled`, ...).
//!
//! Usage: ./zigw build examples && zig-out/bin/example-lane
const std = @import("std");
const Io = std.Io;
const weft = @import("weft");

fn checksum(seed: u64, len: usize) error{Empty}!u64 {
    if (len == 0) return error.Empty;
    var hash: u64 = seed;
    for (0..len) |i| hash = (hash ^ i) *% 0x100000001b3;
    return hash;
}

fn caller(io: Io, lane: *weft.Lane, seed: u64, out: *u64) Io.Cancelable!void {
    out.* = lane.run(io, checksum, .{ seed, 1 << 20 }) catch |err| switch (err) {
        error.Canceled => return error.Canceled,
        error.Empty, error.QueueFull, error.Overloaded => 0,
        error.DeadlineExceeded, error.ShutdownInProgress => 0,
    };
}

pub fn main(init: std.process.Init) !void {
    var rt = try weft.Runtime.init(init.gpa, .{});
    defer rt.deinit();
    const io = rt.io();

    const lane = try weft.Lane.init(init.gpa, .{
        .threads = 2,
        .queue_limit = 4,
        .admission = .wait,
    });
    var sums: [8]u64 = @splat(0);
    var group: Io.Group = .init;
    for (&sums, 0..) |*sum, seed| try group.concurrent(io, caller, .{ io, lane, seed, sum });
    try group.await(io);
    // The lane's counters: how often a parked worker had to be woken (a syscall and a thread
    // switch each; a worker still polling takes a new job without one), and how many callers
    // were canceled too late to withdraw their job.
    const stats = lane.stats();
    const report = lane.shutdown(io, .{ .policy = .run });
    lane.deinit(io);

    std.debug.print("checksums:", .{});
    for (sums) |sum| std.debug.print(" {x}", .{sum >> 48});
    std.debug.print("\njobs run: {d}, left: {d}\n", .{ report.jobs_run, report.jobs_left });
    std.debug.print("workers woken: {d}, canceled after acceptance: {d}\n", .{
        stats.workers_woken,
        stats.canceled_after_acceptance,
    });
}
