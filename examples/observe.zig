//! Seeing inside weft: a runtime's metrics, as a table and in the Prometheus format.
//!
//! A thousand tasks sleep, exchange values over a channel and compute a little, and a hundred
//! make a blocking call on a lane named "legacy" (named lanes are reported, with histograms
//! of their jobs' queue wait and run time); then the program prints `rt.metrics()` as the
//! tables `writeText` makes and the first lines of `writePrometheus`. docs/METRICS.md defines
//! every figure.
//!
//! Usage: ./zigw build examples && zig-out/bin/example-observe
const std = @import("std");
const Io = std.Io;
const weft = @import("weft");

fn worker(io: Io, channel: *weft.sync.Channel(u64), id: u64) Io.Cancelable!void {
    try io.sleep(.fromMilliseconds(@intCast(id % 20)), .awake);
    channel.send(io, id * id) catch |err| switch (err) {
        error.Canceled => return error.Canceled,
        error.Closed => unreachable, // main closes nothing
    };
}

/// Stands for a blocking call with no asynchronous form (a C library's, say): 200 us asleep.
fn legacyLookup(key: u64) u64 {
    const pause: std.os.linux.timespec = .{ .sec = 0, .nsec = 200 * std.time.ns_per_us };
    _ = std.os.linux.nanosleep(&pause, null);
    return key *% 0x9e3779b97f4a7c15;
}

fn lookup(io: Io, lane: *weft.Lane, key: u64) Io.Cancelable!void {
    const value = lane.run(io, legacyLookup, .{key}) catch |err| switch (err) {
        error.Canceled => return error.Canceled,
        // Admission `.wait` with room for every caller, and no shutdown while they run.
        error.QueueFull, error.Overloaded, error.DeadlineExceeded => unreachable,
        error.ShutdownInProgress => unreachable,
    };
    std.mem.doNotOptimizeAway(value);
}

pub fn main(init: std.process.Init) !void {
    var rt = try weft.Runtime.init(init.gpa, .{ .executors = 2 });
    defer rt.deinit();
    const io = rt.io();
    const lane = try weft.Lane.init(init.gpa, .{
        .threads = 2,
        .queue_limit = 16,
        .admission = .wait,
        .name = "legacy",
    });
    defer lane.deinit(io);

    var buffer: [16]u64 = undefined;
    var channel: weft.sync.Channel(u64) = .init(&buffer);
    var group: Io.Group = .init;
    for (0..1000) |id| try group.concurrent(io, worker, .{ io, &channel, id });
    var sum: u64 = 0;
    for (0..1000) |_| sum +%= try channel.recv(io);
    try group.await(io);
    for (0..100) |key| try group.concurrent(io, lookup, .{ io, lane, key });
    try group.await(io);

    var stdout_buffer: [8192]u8 = undefined;
    var stdout = Io.File.stdout().writer(io, &stdout_buffer);
    const out = &stdout.interface;
    try out.print("sum of squares: {d}\n\n", .{sum});
    const metrics = rt.metrics();
    try metrics.writeText(out);
    try out.writeAll("\nPrometheus, the first series:\n");
    var prometheus_buffer: [2048]u8 = undefined;
    var prometheus: Io.Writer = .fixed(&prometheus_buffer);
    // The fixed buffer holds the first series only: the rest is cut, on purpose.
    metrics.writePrometheus(&prometheus) catch {};
    const text = prometheus.buffered();
    if (std.mem.lastIndexOfScalar(u8, text, '\n')) |end| try out.writeAll(text[0 .. end + 1]);
    try out.writeAll("...\n");
    try out.flush();
}
