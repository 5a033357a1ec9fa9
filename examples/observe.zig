//! Seeing inside weft: a runtime's metrics, as a table and in the Prometheus format, and a
//! dump of its tasks.
//!
//! A thousand tasks sleep, exchange values over a channel and compute a little, and a hundred
//! make a blocking call on a lane named "legacy" (named lanes are reported, with histograms
//! of their jobs' queue wait and run time); then the program prints `rt.metrics()` as the
//! tables `writeText` makes and the first lines of `writePrometheus`. docs/METRICS.md defines
//! every figure. Last, two named tasks park (one sleeps, one waits on a channel) and the
//! program prints `rt.dumpTasks`: each task's state, what it waits for and its stack trace
//! (docs/TASK_DUMP.md).
//!
//! Usage: ./zigw build examples && zig-out/bin/example-observe
const std = @import("std");
const Io = std.Io;
const weft = @import("weft");

fn worker(io: Io, channel: *weft.sync.Channel(u64), id: u64) Io.Cancelable!void {
    var name: [24]u8 = undefined;
    weft.Runtime.setName(io, std.fmt.bufPrint(&name, "worker {d}", .{id}) catch "worker");
    try io.sleep(.fromMilliseconds(@intCast(id % 20)), .awake);
    channel.send(io, id * id) catch |err| switch (err) {
        error.Canceled => return error.Canceled,
        error.Closed => unreachable, // main closes nothing
    };
}

fn napper(io: Io) Io.Cancelable!void {
    weft.Runtime.setName(io, "napper");
    try io.sleep(.fromSeconds(60), .awake);
}

fn listener(io: Io, channel: *weft.sync.Channel(u64)) Io.Cancelable!void {
    weft.Runtime.setName(io, "listener");
    _ = channel.recv(io) catch |err| switch (err) {
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

    // Two tasks parked on purpose, then the dump: `napper` sleeps, `listener` waits for a value
    // that never comes. A plain thread writes it, as any thread may; the main task waits for it
    // parked (state `futex`), so its executor goes on serving: the process's first dump loads
    // the debug information to name the frames, which on an executor would be a stall.
    var quiet: weft.sync.Channel(u64) = .init(&buffer);
    var parked: Io.Group = .init;
    defer parked.cancel(io);
    try parked.concurrent(io, napper, .{io});
    try parked.concurrent(io, listener, .{ io, &quiet });
    try io.sleep(.fromMilliseconds(20), .awake); // time for them to park
    try out.writeAll("\nTask dump:\n");
    var dumped: Io.Event = .unset;
    const thread = try std.Thread.spawn(.{}, dumpFromThread, .{ rt, io, out, &dumped });
    try dumped.wait(io);
    thread.join();
    try out.flush();
}

fn dumpFromThread(rt: weft.Runtime, io: Io, out: *Io.Writer, dumped: *Io.Event) void {
    rt.dumpTasks(out) catch {}; // stdout is gone: nothing to tell
    dumped.set(io);
}
