//! Seeing inside weft: a small HTTP server with a mistake in it, and what weft shows of it.
//!
//! The server runs in a task on a 2-executor runtime, on 127.0.0.1 at a port the kernel picks.
//! `/light` answers at once (its one blocking call runs on the lane named "legacy", where
//! blocking calls belong); `/heavy` computes inline for 150 ms on purpose, which holds its
//! executor. A client task asks for /light and /heavy; then the program prints, in three parts:
//!
//! 1. on stderr, while /heavy runs: the stall detector's report through std.log, with the
//!    stack of the code that holds the executor, and its length when it ends (docs/STALLS.md);
//! 2. on stdout: `rt.metrics()`, with the stacks' committed bytes measured
//!    (`rt.stacksCommittedBytes()`), as the tables of `writeText`, then a few series of
//!    `writePrometheus` (docs/METRICS.md): the stall, and the "legacy" lane's jobs;
//! 3. on stdout: `rt.dumpTasks`, while named tasks are parked: the accept loop on a socket, a
//!    sleeper, a task waiting on a channel and one waiting for its job on "legacy"
//!    (docs/TASK_DUMP.md).
//!
//! Then it stops the server and exits 0, within a second or so.
//!
//! Usage: ./zigw build examples && zig-out/bin/example-observe
const std = @import("std");
const Io = std.Io;
const net = Io.net;
const weft = @import("weft");

pub fn main(init: std.process.Init) !void {
    // The stall detector is on by default: `Options.stall_threshold_ns`, 50 ms.
    var rt = try weft.Runtime.init(init.gpa, .{ .executors = 2 });
    defer rt.deinit();
    const io = rt.io();
    const lane = try weft.Lane.init(init.gpa, .{
        .threads = 2,
        .queue_limit = 16,
        .admission = .wait,
        .name = "legacy", // named lanes are reported in metrics and task dumps
    });
    defer lane.deinit(io);

    const address: net.IpAddress = .{ .ip4 = .loopback(0) }; // port 0: the kernel picks one
    var listener = try address.listen(io, .{ .reuse_address = true });
    defer listener.deinit(io);
    var server = try io.concurrent(acceptLoop, .{ io, &listener, lane });
    errdefer server.cancel(io) catch {};

    var stdout_buffer: [4096]u8 = undefined;
    var stdout = Io.File.stdout().writer(io, &stdout_buffer);
    const out = &stdout.interface;
    var requests = try io.concurrent(client, .{ io, listener.socket.address, out });
    try requests.await(io);

    // Parked on purpose for the dump, each named: a sleeper, a task waiting on a channel that
    // nobody sends on, a task waiting for its job on the lane (held until `released`).
    var released: Io.Event = .unset;
    var buffer: [4]u64 = undefined;
    var quiet: weft.sync.Channel(u64) = .init(&buffer);
    var parked: Io.Group = .init;
    defer {
        released.set(io); // first: canceling `lookup` waits for its job, which runs to the end
        parked.cancel(io);
    }
    try parked.concurrent(io, napper, .{io});
    try parked.concurrent(io, listen, .{ io, &quiet });
    try parked.concurrent(io, lookup, .{ io, lane, &released });
    // Time for them to park, and for the watchdog to record the stall's end: it names the
    // frames of its report first, which takes a while in a Debug build (2 s at most here).
    try io.sleep(.fromMilliseconds(20), .awake);
    var polls: u32 = 0;
    while (rt.metrics().stall_time.count == 0 and polls < 200) : (polls += 1) {
        try io.sleep(.fromMilliseconds(10), .awake);
    }

    var metrics = rt.metrics();
    // Not part of the snapshot: a walk of the stacks' page tables (docs/METRICS.md).
    metrics.stacks_committed_bytes = rt.stacksCommittedBytes();
    try out.writeAll("\n== rt.metrics(), writeText ==\n");
    try metrics.writeText(out);
    try out.writeAll("\n== writePrometheus, a few of its series ==\n");
    try writeSomeSeries(init.gpa, &metrics, out);

    // A plain thread writes the dump, as any thread may, while the main task waits parked
    // (state `futex`): the process's first dump loads the debug information to name the
    // frames, which on an executor would be a stall.
    try out.writeAll("\n== rt.dumpTasks ==\n");
    var dumped: Io.Event = .unset;
    const thread = try std.Thread.spawn(.{}, dumpFromThread, .{ rt, io, out, &dumped });
    try dumped.wait(io);
    thread.join();
    try out.flush();

    // Stops the server: canceled, the accept loop ends, and its connections' tasks with it.
    server.cancel(io) catch |err| switch (err) {
        error.Canceled => {},
        else => return err, // the accept loop had failed
    };
}

/// The server: accepts until canceled, a task per connection.
fn acceptLoop(io: Io, listener: *net.Server, lane: *weft.Lane) !void {
    weft.Runtime.setName(io, "accept loop");
    var connections: Io.Group = .init;
    defer connections.cancel(io);
    while (true) {
        const stream = try listener.accept(io);
        connections.concurrent(io, serve, .{ io, stream, lane }) catch stream.close(io);
    }
}

/// Answers the requests of one connection until the client closes it.
fn serve(io: Io, stream: net.Stream, lane: *weft.Lane) Io.Cancelable!void {
    defer stream.close(io);
    var name: [48]u8 = undefined;
    const peer = stream.socket.address;
    weft.Runtime.setName(io, std.fmt.bufPrint(&name, "conn {f}", .{peer}) catch "conn");
    var read_buffer: [4096]u8 = undefined;
    var write_buffer: [4096]u8 = undefined;
    var reader = stream.reader(io, &read_buffer);
    var writer = stream.writer(io, &write_buffer);
    var http = std.http.Server.init(&reader.interface, &writer.interface);
    while (true) {
        var request = http.receiveHead() catch break;
        const keep_alive = request.head.keep_alive; // false: the client sent `Connection: close`
        const status = try handle(io, request.head.target, lane);
        request.respond(@tagName(status), .{ .status = status }) catch break;
        if (!keep_alive) break;
    }
    if (reader.err) |err| if (err == error.Canceled) return error.Canceled;
    if (writer.err) |err| if (err == error.Canceled) return error.Canceled;
}

fn handle(io: Io, target: []const u8, lane: *weft.Lane) Io.Cancelable!std.http.Status {
    if (std.mem.eql(u8, target, "/light")) {
        // A blocking call goes to a lane: this task parks, its executor serves others.
        const value = lane.run(io, legacyLookup, .{target.len}) catch |err| switch (err) {
            error.Canceled => return error.Canceled,
            // Refused (the admission line full, or a shutdown): the job never ran.
            else => return .service_unavailable,
        };
        std.mem.doNotOptimizeAway(value);
        return .ok;
    }
    if (std.mem.eql(u8, target, "/heavy")) {
        std.mem.doNotOptimizeAway(checksumInline(io));
        return .ok;
    }
    return .not_found;
}

/// The mistake, on purpose: 150 ms of computation right on the executor. weft's tasks are
/// cooperative, so until this returns no other task of that executor runs, and its timers
/// and I/O wait too; the stall detector reports it. The fix is `rt.compute(io, f, args)`,
/// which runs `f` on the runtime's CPU lane (a `weft.CpuLane`; a CpuLane of your own, given
/// a name, shows in the metrics as "legacy" does) while this task parks: examples/cpu.zig.
fn checksumInline(io: Io) u64 {
    const start = Io.Clock.awake.now(io);
    var sum: u64 = 0;
    while (start.untilNow(io, .awake).toMilliseconds() < 150) {
        for (0..100_000) |i| sum = (sum ^ i) *% 0x100000001b3;
    }
    return sum;
}

/// Stands for a blocking call with no asynchronous form (a C library's, say): 200 us asleep.
fn legacyLookup(key: u64) u64 {
    const pause: std.os.linux.timespec = .{ .sec = 0, .nsec = 200 * std.time.ns_per_us };
    _ = std.os.linux.nanosleep(&pause, null);
    return key *% 0x9e3779b97f4a7c15;
}

/// The client: one connection per request, each answered with `Connection: close`.
fn client(io: Io, address: net.IpAddress, out: *Io.Writer) !void {
    weft.Runtime.setName(io, "client");
    for ([_][]const u8{ "/light", "/light", "/heavy", "/light" }) |path| {
        const start = Io.Clock.awake.now(io);
        var response: [256]u8 = undefined;
        const status_line = try get(io, address, path, &response);
        const took_ms = start.untilNow(io, .awake).toMilliseconds();
        try out.print("GET {s}: {s} in {d} ms\n", .{ path, status_line, took_ms });
        try out.flush(); // in order with the stall report, on stderr
    }
}

/// The status line of `GET path`, read into `response`.
fn get(io: Io, address: net.IpAddress, path: []const u8, response: []u8) ![]const u8 {
    const stream = try address.connect(io, .{ .mode = .stream });
    defer stream.close(io);
    var request_buffer: [128]u8 = undefined;
    var writer = stream.writer(io, &request_buffer);
    try writer.interface.print(
        "GET {s} HTTP/1.1\r\nHost: 127.0.0.1\r\nConnection: close\r\n\r\n",
        .{path},
    );
    try writer.interface.flush();
    var read_buffer: [256]u8 = undefined;
    var reader = stream.reader(io, &read_buffer);
    const head = response[0..try reader.interface.readSliceShort(response)];
    return head[0 .. std.mem.indexOf(u8, head, "\r\n") orelse head.len];
}

fn napper(io: Io) Io.Cancelable!void {
    weft.Runtime.setName(io, "napper");
    try io.sleep(.fromSeconds(60), .awake);
}

fn listen(io: Io, channel: *weft.sync.Channel(u64)) Io.Cancelable!void {
    weft.Runtime.setName(io, "listener");
    _ = channel.recv(io) catch |err| switch (err) {
        error.Canceled => return error.Canceled,
        error.Closed => unreachable, // main closes nothing
    };
}

fn lookup(io: Io, lane: *weft.Lane, released: *Io.Event) Io.Cancelable!void {
    weft.Runtime.setName(io, "lookup");
    lane.run(io, awaitRelease, .{ io, released }) catch |err| switch (err) {
        error.Canceled => return error.Canceled,
        // A free worker takes it at once, and the lane shuts down after main returns.
        error.QueueFull, error.Overloaded, error.DeadlineExceeded => unreachable,
        error.ShutdownInProgress => unreachable,
    };
}

/// A lane job that blocks its worker thread until main releases it.
fn awaitRelease(io: Io, released: *Io.Event) void {
    released.waitUncancelable(io);
}

/// The series of `writePrometheus` that tell this program's story; the full text has every
/// series of docs/METRICS.md, with HELP and TYPE lines.
fn writeSomeSeries(gpa: std.mem.Allocator, metrics: *const weft.Metrics, out: *Io.Writer) !void {
    var text: Io.Writer.Allocating = .init(gpa);
    defer text.deinit();
    try metrics.writePrometheus(&text.writer);
    const shown = [_][]const u8{
        "weft_stalls_total",
        "weft_stall_seconds_count",
        "weft_tasks_live ",
        "weft_stacks_committed_bytes ",
        "weft_lane_jobs_completed_total{lane=\"legacy\"}",
        "weft_lane_running_jobs{lane=\"legacy\"}",
        "weft_lane_run_seconds_count{lane=\"legacy\"}",
    };
    var lines = std.mem.splitScalar(u8, text.written(), '\n');
    while (lines.next()) |line| {
        for (shown) |prefix| {
            if (std.mem.startsWith(u8, line, prefix)) try out.print("{s}\n", .{line});
        }
    }
}

fn dumpFromThread(rt: weft.Runtime, io: Io, out: *Io.Writer, dumped: *Io.Event) void {
    rt.dumpTasks(out) catch {}; // stdout is gone: nothing to tell
    dumped.set(io);
}
