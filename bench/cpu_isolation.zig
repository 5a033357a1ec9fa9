//! cpu_isolation: the SwiftNIO report's scenario (6 ms of work became 500 ms inside a server
//! handler). An HTTP/1.1 server written against `std.Io` serves `/heavy` (SHA-256 over a
//! buffer, calibrated once to ~6 ms) and `/light` (a few bytes), under a bounded load: 2 clients
//! send `/heavy` with 10 ms between requests and 4 clients send `/light` with 1 ms between
//! (keep-alive, one connection each, plain threads on their own `std.Io.Threaded`).
//!
//!   runtime=weft heavy=inline       /heavy hashes on the executor, inside the handler
//!   runtime=weft heavy=lane         /heavy hashes on the CPU lane (`weft.CpuLane`, what
//!                                   `rt.compute` runs on), the handler's fiber parks
//!   runtime=threaded heavy=inline   the same program on std.Io.Threaded (a thread per
//!                                   connection, the hash inline on it)
//!
//! Each line reports (a) `/heavy` latency at the client against the same hash run directly
//! (`direct_us`: the median of 20 runs in the same process before the load;
//! `heavy_vs_direct_pct` = heavy p50 / direct) and (b) `/light` p50/p99/max while heavy
//! requests run. The first 300 ms are warm-up and not counted. Every request is checked
//! (status, body length); a failed one fails the line.
//!
//! Usage: bench-cpu_isolation [--seconds N] [--nice N] [--only inline|lane|threaded]
//!        [--heavy-ms N] [--heavy-clients 1|2] [--stall-ms N]
//! (defaults: 3 s, the CPU lane's own nice, every variant, /heavy calibrated to 6 ms, 2 heavy
//! clients, weft's default stall threshold; `--stall-ms 0` turns the stall detector off, and with it the
//! watchdog's help for a held executor's timers and I/O). bench/cpu_isolation.sh runs it.
const std = @import("std");
const Io = std.Io;
const net = Io.net;
const weft = @import("weft");
const harness = @import("harness");
const Sha256 = std.crypto.hash.sha2.Sha256;

const heavy_target_ms_default = 6;
const heavy_buffer_bytes = 256 * 1024;
const heavy_clients_default = 2;
const heavy_clients_max = 2;
const heavy_think_ns = 10 * std.time.ns_per_ms;
const light_clients = 4;
const light_think_ns = 1 * std.time.ns_per_ms;
const clients_max = heavy_clients_max + light_clients;
const warmup_ns = 300 * std.time.ns_per_ms;
const direct_runs = 20;
/// Samples one client keeps: more than a light client can send in 60 s at 1 ms apart.
const samples_max = 64 * 1024;
const seconds_max = 60;

const Heavy = enum { inline_, lane };

const Result = struct {
    direct_us: u64,
    heavy_p50_us: u64,
    heavy_p99_us: u64,
    heavy_vs_direct_pct: u64,
    light_p50_us: u64,
    light_p99_us: u64,
    light_max_us: u64,
    heavy_requests: u64,
    light_requests: u64,
};

/// The computation behind `/heavy`: `rounds` SHA-256 passes over `data`, chained.
const Work = struct {
    data: []const u8,
    rounds: u32,

    fn run(work: *const Work) [Sha256.digest_length]u8 {
        var digest: [Sha256.digest_length]u8 = @splat(0);
        for (0..work.rounds) |_| {
            var hasher: Sha256 = .init(.{});
            hasher.update(&digest);
            hasher.update(work.data);
            hasher.final(&digest);
        }
        return digest;
    }

    /// Picks `rounds` so that one run takes about `target_ns` on this machine. Each step
    /// keeps the fastest of a few runs: other processes only ever make a run slower.
    fn calibrate(work: *Work, target_ns: u64) void {
        work.rounds = 1;
        var elapsed_ns: u64 = 0;
        while (elapsed_ns < target_ns / 4) {
            work.rounds *= 2;
            elapsed_ns = std.math.maxInt(u64);
            for (0..5) |_| {
                const start_ns = harness.monotonicNs();
                std.mem.doNotOptimizeAway(work.run());
                elapsed_ns = @min(elapsed_ns, harness.monotonicNs() - start_ns);
            }
        }
        const scaled = @as(u64, work.rounds) * target_ns / @max(elapsed_ns, 1);
        work.rounds = @intCast(@max(1, scaled));
    }

    /// The median time of a run, on this thread with nothing else running.
    fn directNs(work: *const Work) u64 {
        var times: [direct_runs]u64 = undefined;
        for (&times) |*time| {
            const start_ns = harness.monotonicNs();
            std.mem.doNotOptimizeAway(work.run());
            time.* = harness.monotonicNs() - start_ns;
        }
        std.mem.sort(u64, &times, {}, std.sort.asc(u64));
        return times[direct_runs / 2];
    }
};

const ServerContext = struct {
    io: Io,
    work: *const Work,
    heavy: Heavy,
    cpu: *weft.CpuLane,
    clients: usize,
};

const ServeError = error{ Unavailable, AcceptFailed } || Io.Cancelable;

/// Accepts one connection per client and serves each until its client closes it.
fn serveAll(context: *const ServerContext, server: *net.Server) ServeError!void {
    const io = context.io;
    var group: Io.Group = .init;
    defer group.cancel(io);
    for (0..context.clients) |_| {
        const stream = server.accept(io) catch |err| switch (err) {
            error.Canceled => return error.Canceled,
            else => return error.AcceptFailed,
        };
        group.concurrent(io, serveConnection, .{ context, stream }) catch {
            stream.close(io);
            return error.Unavailable;
        };
    }
    try group.await(io);
}

fn serveConnection(context: *const ServerContext, stream: net.Stream) Io.Cancelable!void {
    const io = context.io;
    defer stream.close(io);
    var read_buffer: [4096]u8 = undefined;
    var write_buffer: [4096]u8 = undefined;
    var reader = stream.reader(io, &read_buffer);
    var writer = stream.writer(io, &write_buffer);
    var http = std.http.Server.init(&reader.interface, &writer.interface);
    while (true) {
        var request = http.receiveHead() catch break;
        respond(context, &request) catch break;
    }
    if (reader.err) |err| if (err == error.Canceled) return error.Canceled;
    if (writer.err) |err| if (err == error.Canceled) return error.Canceled;
}

fn respond(context: *const ServerContext, request: *std.http.Server.Request) !void {
    if (!std.mem.eql(u8, request.head.target, "/heavy")) return request.respond("ok\n", .{});
    const digest = switch (context.heavy) {
        .inline_ => context.work.run(),
        .lane => context.cpu.run(context.io, Work.run, .{context.work}) catch
            return request.respond("", .{ .status = .service_unavailable }),
    };
    const hex = std.fmt.bytesToHex(digest, .lower);
    return request.respond(&hex, .{});
}

const Client = struct {
    address: net.IpAddress,
    io: Io,
    path: []const u8,
    think_ns: u64,
    body_len: usize,
    count_from_ns: u64,
    stop_ns: u64,
    latencies_us: []u32,
    len: usize = 0,
    failed: bool = false,

    fn main(client: *Client) void {
        client.loop() catch {
            client.failed = true;
        };
    }

    fn loop(client: *Client) !void {
        const io = client.io;
        const stream = try client.address.connect(io, .{ .mode = .stream });
        defer stream.close(io);
        var read_buffer: [4096]u8 = undefined;
        var write_buffer: [256]u8 = undefined;
        var reader = stream.reader(io, &read_buffer);
        var writer = stream.writer(io, &write_buffer);
        while (true) {
            const start_ns = harness.monotonicNs();
            if (start_ns >= client.stop_ns) return;
            try writer.interface.print("GET {s} HTTP/1.1\r\nhost: bench\r\n\r\n", .{client.path});
            try writer.interface.flush();
            try readResponse(&reader.interface, client.body_len);
            const end_ns = harness.monotonicNs();
            if (start_ns >= client.count_from_ns and client.len < client.latencies_us.len) {
                client.latencies_us[client.len] = @intCast((end_ns - start_ns) / 1000);
                client.len += 1;
            }
            try io.sleep(.fromNanoseconds(client.think_ns), .awake);
        }
    }
};

/// Reads one response head and body; fails unless it is 200 with `body_len` bytes.
fn readResponse(reader: *Io.Reader, body_len: usize) !void {
    const status = try reader.takeDelimiterInclusive('\n');
    if (!std.mem.startsWith(u8, status, "HTTP/1.1 200")) return error.BadStatus;
    var content_length: ?usize = null;
    while (true) {
        const line = try reader.takeDelimiterInclusive('\n');
        if (std.mem.eql(u8, line, "\r\n")) break;
        const prefix = "content-length: ";
        if (std.ascii.startsWithIgnoreCase(line, prefix)) {
            const value = std.mem.trim(u8, line[prefix.len..], " \r\n");
            content_length = try std.fmt.parseInt(usize, value, 10);
        }
    }
    if (content_length != body_len) return error.BadBody;
    try reader.discardAll(body_len);
}

fn percentileUs(samples: []u32, permille: u64) u64 {
    if (samples.len == 0) return 0;
    std.mem.sort(u32, samples, {}, std.sort.asc(u32));
    const index = @min(samples.len - 1, samples.len * permille / 1000);
    return samples[index];
}

/// The buffer `/heavy` hashes (the same bytes in every process).
fn heavyData(gpa: std.mem.Allocator) ![]u8 {
    const data = try gpa.alloc(u8, heavy_buffer_bytes);
    for (data, 0..) |*byte, i| byte.* = @truncate(i *% 131);
    return data;
}

fn measure(io: Io, config: harness.Config) !Result {
    const gpa = std.heap.smp_allocator;
    const data = try heavyData(gpa);
    defer gpa.free(data);
    const work: Work = .{ .data = data, .rounds = try config.int(u32, "rounds") };
    const direct_ns = work.directNs();

    var cpu: weft.CpuLane = try .init(gpa, .{});
    if (config.get("nice")) |_| cpu.options.nice = try config.int(u8, "nice");
    defer cpu.deinit(io);
    const context: ServerContext = .{
        .io = io,
        .work = &work,
        .heavy = if (std.mem.eql(u8, config.get("heavy") orelse "", "lane")) .lane else .inline_,
        .cpu = &cpu,
        .clients = light_clients + try config.int(usize, "heavy_clients"),
    };
    if (context.clients <= light_clients or context.clients > clients_max) {
        return error.ConfigInvalid;
    }
    const seconds = try config.int(u64, "seconds");
    if (seconds == 0 or seconds > seconds_max) return error.ConfigInvalid;

    const listen_address: net.IpAddress = .{ .ip4 = .loopback(0) };
    var server = try listen_address.listen(io, .{ .reuse_address = true });
    defer server.deinit(io);
    var serving = try io.concurrent(serveAll, .{ &context, &server });

    var client_io: Io.Threaded = .init(gpa, .{});
    defer client_io.deinit();
    const samples = try gpa.alloc(u32, clients_max * samples_max);
    defer gpa.free(samples);
    const start_ns = harness.monotonicNs();
    var states_buffer: [clients_max]Client = undefined;
    var threads_buffer: [clients_max]std.Thread = undefined;
    const states = states_buffer[0..context.clients];
    const threads = threads_buffer[0..context.clients];
    const heavy_clients = context.clients - light_clients;
    for (states, threads, 0..) |*client, *thread, index| {
        const heavy = index < heavy_clients;
        client.* = .{
            .address = server.socket.address,
            .io = client_io.io(),
            .path = if (heavy) "/heavy" else "/light",
            .think_ns = if (heavy) heavy_think_ns else light_think_ns,
            .body_len = if (heavy) Sha256.digest_length * 2 else 3,
            .count_from_ns = start_ns + warmup_ns,
            .stop_ns = start_ns + warmup_ns + seconds * std.time.ns_per_s,
            .latencies_us = samples[index * samples_max ..][0..samples_max],
        };
        thread.* = try std.Thread.spawn(.{}, Client.main, .{client});
    }
    // Awaited through the Io, so that on weft the executor keeps serving meanwhile; it returns
    // once every client closed its connection.
    try serving.await(io);
    for (threads) |thread| thread.join();
    return summarize(states, heavy_clients, direct_ns);
}

fn summarize(states: []Client, heavy_clients: usize, direct_ns: u64) !Result {
    var heavy_all: std.ArrayList(u32) = .empty;
    defer heavy_all.deinit(std.heap.smp_allocator);
    var light_all: std.ArrayList(u32) = .empty;
    defer light_all.deinit(std.heap.smp_allocator);
    for (states, 0..) |*client, index| {
        if (client.failed) return error.RequestFailed;
        const list = if (index < heavy_clients) &heavy_all else &light_all;
        try list.appendSlice(std.heap.smp_allocator, client.latencies_us[0..client.len]);
    }
    const direct_us = direct_ns / 1000;
    const heavy_p50_us = percentileUs(heavy_all.items, 500);
    return .{
        .direct_us = direct_us,
        .heavy_p50_us = heavy_p50_us,
        .heavy_p99_us = percentileUs(heavy_all.items, 990),
        .heavy_vs_direct_pct = heavy_p50_us * 100 / @max(direct_us, 1),
        .light_p50_us = percentileUs(light_all.items, 500),
        .light_p99_us = percentileUs(light_all.items, 990),
        .light_max_us = percentileUs(light_all.items, 1000),
        .heavy_requests = heavy_all.items.len,
        .light_requests = light_all.items.len,
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
    const seconds = try harness.flagInt(args, "--seconds", 3);
    const nice = harness.flagValue(args, "--nice");
    const heavy_ms = try harness.flagInt(args, "--heavy-ms", heavy_target_ms_default);
    if (heavy_ms == 0 or heavy_ms > 1000) {
        std.debug.print("--heavy-ms must be 1 to 1000, not {d}\n", .{heavy_ms});
        return error.InvalidArgs;
    }
    const stall_ms = harness.flagValue(args, "--stall-ms");
    const heavy_clients = try harness.flagInt(args, "--heavy-clients", heavy_clients_default);
    if (heavy_clients == 0 or heavy_clients > heavy_clients_max) {
        std.debug.print("--heavy-clients must be 1 to {d}\n", .{heavy_clients_max});
        return error.InvalidArgs;
    }
    // Calibrated once, here, so that every variant does the same work.
    const data = try heavyData(arena);
    var work: Work = .{ .data = data, .rounds = 1 };
    work.calibrate(heavy_ms * std.time.ns_per_ms);
    const timeout_ns = (seconds + 30) * std.time.ns_per_s;
    const variants = [_][2][]const u8{
        .{ "runtime=weft", "heavy=inline" },
        .{ "runtime=weft", "heavy=lane" },
        .{ "runtime=threaded", "heavy=inline" },
    };
    const only = harness.flagValue(args, "--only");
    for (variants, [_][]const u8{ "inline", "lane", "threaded" }) |variant, name| {
        if (only) |wanted| if (!std.mem.eql(u8, wanted, name)) continue;
        var words: std.ArrayList([]const u8) = .empty;
        try words.appendSlice(arena, &variant);
        try words.append(arena, try session.word("seconds", seconds));
        try words.append(arena, try session.word("rounds", work.rounds));
        try words.append(arena, try session.word("heavy_clients", heavy_clients));
        if (nice) |value| if (std.mem.eql(u8, variant[1], "heavy=lane")) {
            try words.append(arena, try session.word("nice", value));
        };
        if (stall_ms) |value| if (std.mem.eql(u8, variant[0], "runtime=weft")) {
            try words.append(arena, try session.word("stall_ms", value));
        };
        _ = try session.report("cpu_isolation", words.items, timeout_ns);
    }
}
