//! Compatibility: std.Io used the way real libraries use it, on weft's default options.
//! std.http.Client against std.http.Server, std.Io from plain threads the program spawned,
//! CPU-heavy tasks between socket reads and writes (the shape of TLS), a std.Io.Threaded
//! beside weft in one process, and empty buffers handed to the stream operations.
//!
//! Bounded, so that a hang fails a test instead of blocking it: every task-side body runs
//! under `boundedBy` (canceled after `deadline_s`), and every plain thread is joined only after
//! it reports done, polled for at most `deadline_s`; a thread that never reports panics the
//! test binary, since it still uses the test's stack. The limits are hang guards, far above
//! what a passing test takes, not timed assertions.
const std = @import("std");
const Io = std.Io;
const net = Io.net;
const testing = std.testing;
const Sha256 = std.crypto.hash.sha2.Sha256;
const Runtime = @import("../Runtime.zig");
const boundedBy = @import("server_test.zig").boundedBy;
const qemu = @import("qemu.zig");

/// Longest a test's task side, or any thread it spawned, may take.
const deadline_s = 20;
const thread_poll_ms = 10;

const loopback: net.IpAddress = .{ .ip4 = .loopback(0) };

fn withRuntime(comptime body: fn (io: Io) anyerror!void) !void {
    var rt = try Runtime.init(testing.allocator, .{});
    defer rt.deinit();
    const io = rt.io();
    try boundedBy(io, .fromSeconds(deadline_s), body, .{io});
}

/// Joins `thread` once it has set `done`, or panics after `deadline_s`: a hung thread still
/// uses the caller's stack, so the test can neither return nor go on.
fn joinWithin(io: Io, thread: std.Thread, done: *const std.atomic.Value(bool)) void {
    var waited_ms: u64 = 0;
    // Pairs with the release store at the end of the thread's function.
    while (!done.load(.acquire)) : (waited_ms += thread_poll_ms) {
        if (waited_ms >= deadline_s * std.time.ms_per_s) @panic("compat: a thread hung");
        io.sleep(.fromMilliseconds(thread_poll_ms), .awake) catch {};
    }
    thread.join();
}

const Accepted = std.atomic.Value(u32);
const Serve = fn (io: Io, stream: net.Stream) Io.Cancelable!void;

/// A task body that accepts connections until canceled and serves each with `serve` on a task
/// of its own, counting them in `accepted`.
fn acceptLoop(comptime serve: Serve) fn (Io, *net.Server, *Accepted) anyerror!void {
    return struct {
        fn run(io: Io, server: *net.Server, accepted: *Accepted) anyerror!void {
            var group: Io.Group = .init;
            defer group.cancel(io);
            while (true) {
                const stream = try server.accept(io);
                _ = accepted.fetchAdd(1, .monotonic);
                group.concurrent(io, serve, .{ io, stream }) catch |err| {
                    stream.close(io);
                    return err;
                };
            }
        }
    }.run;
}

/// Stops an `acceptLoop`: it ends only by cancelation, so anything else is its failure.
fn stopAcceptLoop(io: Io, acceptor: *Io.Future(anyerror!void)) !void {
    acceptor.cancel(io) catch |err| switch (err) {
        error.Canceled => return,
        else => return err,
    };
    return error.TestUnexpectedResult;
}

// --- 1. std.http.Client.fetch against std.http.Server ---------------------------------------

const big_body_bytes = 1 << 20;
const small_body = "hello from std.http.Server";
/// The 1 MiB body, filled by the test that uses it (a pattern that does not repeat every 256
/// bytes, so a misplaced chunk shows).
var big_body: [big_body_bytes]u8 = undefined;

fn bigByte(index: usize) u8 {
    return @truncate((index *% 2654435761) >> 13);
}

fn serveHttp(io: Io, stream: net.Stream) Io.Cancelable!void {
    defer stream.close(io);
    var read_buffer: [8192]u8 = undefined;
    var write_buffer: [8192]u8 = undefined;
    var reader = stream.reader(io, &read_buffer);
    var writer = stream.writer(io, &write_buffer);
    var server: std.http.Server = .init(&reader.interface, &writer.interface);
    // Errors end the connection: the client's fetch then fails, which is what the tests see.
    while (true) {
        var request = server.receiveHead() catch return;
        const body: []const u8 = if (std.mem.eql(u8, request.head.target, "/big"))
            &big_body
        else
            small_body;
        const keep_alive = request.head.keep_alive;
        request.respond(body, .{ .keep_alive = keep_alive }) catch return;
        if (!keep_alive) return;
    }
}

/// Runs `body(io, port, accepted)` against a std.http.Server loop on a task of the same
/// runtime; `accepted` counts the connections it took.
fn withHttpServer(
    comptime body: fn (io: Io, port: u16, accepted: *Accepted) anyerror!void,
) !void {
    try withRuntime(struct {
        fn run(io: Io) !void {
            var server = try loopback.listen(io, .{ .reuse_address = true });
            defer server.deinit(io);
            var accepted: Accepted = .init(0);
            var acceptor = try io.concurrent(acceptLoop(serveHttp), .{ io, &server, &accepted });
            body(io, server.socket.address.getPort(), &accepted) catch |err| {
                stopAcceptLoop(io, &acceptor) catch {};
                return err;
            };
            try stopAcceptLoop(io, &acceptor);
        }
    }.run);
}

/// Fetches `path` `count` times through one client and checks each body.
fn fetchRepeatedly(io: Io, port: u16, path: []const u8, count: u32, keep_alive: bool) !void {
    var client: std.http.Client = .{ .allocator = testing.allocator, .io = io };
    defer client.deinit();
    var url_buffer: [64]u8 = undefined;
    const url = try std.fmt.bufPrint(&url_buffer, "http://127.0.0.1:{d}{s}", .{ port, path });
    const expected: []const u8 = if (std.mem.eql(u8, path, "/big")) &big_body else small_body;
    for (0..count) |_| {
        var response: Io.Writer.Allocating = .init(testing.allocator);
        defer response.deinit();
        const result = try client.fetch(.{
            .location = .{ .url = url },
            .response_writer = &response.writer,
            .keep_alive = keep_alive,
        });
        try testing.expectEqual(std.http.Status.ok, result.status);
        try testing.expectEqualSlices(u8, expected, response.written());
    }
}

test "compat: std.http.Client.fetch reuses one kept-alive connection for several fetches" {
    try withHttpServer(struct {
        fn body(io: Io, port: u16, accepted: *Accepted) !void {
            try fetchRepeatedly(io, port, "/", 4, true);
            try testing.expectEqual(1, accepted.load(.monotonic));
        }
    }.body);
}

test "compat: std.http.Client.fetch with keep_alive = false opens a connection per fetch" {
    try withHttpServer(struct {
        fn body(io: Io, port: u16, accepted: *Accepted) !void {
            try fetchRepeatedly(io, port, "/", 3, false);
            try testing.expectEqual(3, accepted.load(.monotonic));
        }
    }.body);
}

test "compat: std.http.Client.fetch receives a 1 MiB body intact, twice on one connection" {
    for (&big_body, 0..) |*byte, index| byte.* = bigByte(index);
    try withHttpServer(struct {
        fn body(io: Io, port: u16, accepted: *Accepted) !void {
            try fetchRepeatedly(io, port, "/big", 2, true);
            try testing.expectEqual(1, accepted.load(.monotonic));
        }
    }.body);
}

// --- 2. std.Io from plain threads the program spawned ---------------------------------------

const echo_clients = 6;

/// Accepts one connection and echoes everything its peer sends until the peer half-closes.
fn echoOne(io: Io, server: *net.Server) !void {
    const stream = try server.accept(io);
    defer stream.close(io);
    var read_buffer: [64]u8 = undefined;
    var write_buffer: [64]u8 = undefined;
    var reader = stream.reader(io, &read_buffer);
    var writer = stream.writer(io, &write_buffer);
    _ = try reader.interface.streamRemaining(&writer.interface);
    try writer.interface.flush();
}

fn echoMany(io: Io, server: *net.Server, count: usize) anyerror!void {
    for (0..count) |_| try echoOne(io, server);
}

/// Connects, sends a message naming `index` (longer than every buffer on the way), half-closes
/// and expects the same bytes back, then end of stream.
fn expectEcho(io: Io, address: net.IpAddress, index: usize) anyerror!void {
    const stream = try address.connect(io, .{ .mode = .stream });
    defer stream.close(io);
    var message_buffer: [512]u8 = undefined;
    var message_writer: Io.Writer = .fixed(&message_buffer);
    for (0..20) |_| try message_writer.print("client {d} says hello; ", .{index});
    const message = message_writer.buffered();
    var write_buffer: [16]u8 = undefined;
    var writer = stream.writer(io, &write_buffer);
    try writer.interface.writeAll(message);
    try writer.interface.flush();
    try stream.shutdown(io, .send);
    var read_buffer: [16]u8 = undefined;
    var reader = stream.reader(io, &read_buffer);
    const echoed = try reader.interface.allocRemaining(testing.allocator, .unlimited);
    defer testing.allocator.free(echoed);
    try testing.expectEqualStrings(message, echoed);
}

/// A plain thread's result, and when it is ready.
const ThreadOutcome = struct {
    result: anyerror!void = error.ThreadDidNotRun,
    /// Set (release) once `result` is written; pairs with the acquire load in `joinWithin`.
    done: std.atomic.Value(bool) = .init(false),

    fn finish(outcome: *ThreadOutcome, result: anyerror!void) void {
        outcome.result = result;
        outcome.done.store(true, .release);
    }
};

fn echoManyThread(io: Io, server: *net.Server, count: usize, outcome: *ThreadOutcome) void {
    outcome.finish(echoMany(io, server, count));
}

fn expectEchoThread(io: Io, address: net.IpAddress, index: usize, outcome: *ThreadOutcome) void {
    outcome.finish(expectEcho(io, address, index));
}

test "compat: a plain thread serves with weft's io while tasks are its clients" {
    try withRuntime(struct {
        fn body(io: Io) !void {
            var server = try loopback.listen(io, .{ .reuse_address = true });
            defer server.deinit(io);
            var outcome: ThreadOutcome = .{};
            const thread = try std.Thread.spawn(.{}, echoManyThread, .{
                io, &server, echo_clients, &outcome,
            });
            var joined = false;
            defer if (!joined) joinWithin(io, thread, &outcome.done);
            var clients: [echo_clients]Io.Future(anyerror!void) = undefined;
            for (&clients, 0..) |*client, index| {
                client.* = try io.concurrent(expectEcho, .{ io, server.socket.address, index });
            }
            var first_error: anyerror!void = {};
            for (&clients) |*client| client.await(io) catch |err| {
                first_error = err;
            };
            try first_error;
            // The clients read end of stream only after the thread closed their connection.
            joinWithin(io, thread, &outcome.done);
            joined = true;
            try outcome.result;
        }
    }.body);
}

test "compat: plain threads are clients with weft's io of a server on a task" {
    try withRuntime(struct {
        fn body(io: Io) !void {
            var server = try loopback.listen(io, .{ .reuse_address = true });
            defer server.deinit(io);
            var outcomes: [echo_clients]ThreadOutcome = @splat(.{});
            var threads: [echo_clients]std.Thread = undefined;
            var spawned: usize = 0;
            defer for (threads[0..spawned], outcomes[0..spawned]) |thread, *outcome| {
                joinWithin(io, thread, &outcome.done);
            };
            for (&threads, &outcomes, 0..) |*thread, *outcome, index| {
                const address = server.socket.address;
                thread.* = try std.Thread.spawn(.{}, expectEchoThread, .{
                    io, address, index, outcome,
                });
                spawned += 1;
            }
            try echoMany(io, &server, echo_clients);
            for (threads, &outcomes) |thread, *outcome| joinWithin(io, thread, &outcome.done);
            spawned = 0;
            for (outcomes) |outcome| try outcome.result;
        }
    }.body);
}

// --- 3. A TLS-shaped workload: CPU-heavy work between socket reads and writes ---------------

const sealed_connections = 64;
const sealed_rounds = 4;
const record_bytes = 1024;
/// Hash passes over a record per seal: tens of KiB of SHA-256, a few ms in a Debug build,
/// like a TLS record's crypto with a handshake's worth of it on top.
const seal_passes_native = 48;
/// Under qemu-user the test took 20-30 s here (0.3 s natively), past its hang guard: the
/// emulated hashing is some 70 times slower. An eighth of the passes still weighs more, in
/// time, between a task's reads and writes than the native 48.
const seal_passes_emulated = 6;
/// Set by the test before its tasks start.
var seal_passes: usize = seal_passes_native;

/// The CPU work of one record: SHA-256 chained over the record `seal_passes` times.
fn seal(record: *const [record_bytes]u8) [Sha256.digest_length]u8 {
    var digest: [Sha256.digest_length]u8 = undefined;
    Sha256.hash(record, &digest, .{});
    for (1..seal_passes) |_| {
        var hasher: Sha256 = .init(.{});
        hasher.update(&digest);
        hasher.update(record);
        hasher.final(&digest);
    }
    return digest;
}

/// Exchanges the server completed, across all connections of the running test.
var sealed_exchanges: std.atomic.Value(u32) = .init(0);

/// Reads records until end of stream and answers each with its seal.
fn serveSealed(io: Io, stream: net.Stream) Io.Cancelable!void {
    defer stream.close(io);
    var read_buffer: [record_bytes]u8 = undefined;
    var write_buffer: [64]u8 = undefined;
    var reader = stream.reader(io, &read_buffer);
    var writer = stream.writer(io, &write_buffer);
    // Errors end the connection: its client then fails, which is what the test sees.
    while (true) {
        const record = reader.interface.takeArray(record_bytes) catch return;
        const digest = seal(record);
        // Counted before the answer leaves, so a client holding it knows it was counted.
        _ = sealed_exchanges.fetchAdd(1, .monotonic);
        writer.interface.writeAll(&digest) catch return;
        writer.interface.flush() catch return;
    }
}

/// Sends `sealed_rounds` records, seals each itself while the server does too, and expects
/// the server's seal to match.
fn exchangeSealed(io: Io, address: net.IpAddress, index: usize) anyerror!void {
    const stream = try address.connect(io, .{ .mode = .stream });
    defer stream.close(io);
    var read_buffer: [64]u8 = undefined;
    var write_buffer: [record_bytes]u8 = undefined;
    var reader = stream.reader(io, &read_buffer);
    var writer = stream.writer(io, &write_buffer);
    var prng: std.Random.DefaultPrng = .init(index);
    for (0..sealed_rounds) |_| {
        var record: [record_bytes]u8 = undefined;
        prng.random().bytes(&record);
        try writer.interface.writeAll(&record);
        try writer.interface.flush();
        const expected = seal(&record);
        const answer = try reader.interface.takeArray(Sha256.digest_length);
        try testing.expectEqualSlices(u8, &expected, answer);
    }
}

test "compat: 64 tasks seal records with SHA-256 between loopback reads and writes" {
    try withRuntime(struct {
        fn body(io: Io) !void {
            sealed_exchanges.store(0, .monotonic);
            seal_passes = if (qemu.underQemu()) seal_passes_emulated else seal_passes_native;
            var server = try loopback.listen(io, .{ .reuse_address = true });
            defer server.deinit(io);
            var accepted: Accepted = .init(0);
            const acceptor_args = .{ io, &server, &accepted };
            var acceptor = try io.concurrent(acceptLoop(serveSealed), acceptor_args);
            var clients: [sealed_connections]Io.Future(anyerror!void) = undefined;
            var started: usize = 0;
            var first_error: anyerror!void = {};
            for (&clients, 0..) |*client, index| {
                const address = server.socket.address;
                client.* = io.concurrent(exchangeSealed, .{ io, address, index }) catch |err| {
                    first_error = err;
                    break;
                };
                started += 1;
            }
            for (clients[0..started]) |*client| client.await(io) catch |err| {
                first_error = err;
            };
            try stopAcceptLoop(io, &acceptor);
            try first_error;
            try testing.expectEqual(sealed_connections, accepted.load(.monotonic));
            const exchanges = sealed_connections * sealed_rounds;
            try testing.expectEqual(exchanges, sealed_exchanges.load(.monotonic));
        }
    }.body);
}

// --- 4. A std.Io.Threaded beside weft in one process ----------------------------------------

const handoff_producers = 4;
const handoff_consumers = 4;
const handoff_items_per_producer = 200;
const handoff_items = handoff_producers * handoff_items_per_producer;
const handoff_capacity = 16;
const cross_clients = 3;
/// Every task on the Threaded io: the producers, its echo server and its clients.
const threaded_tasks = handoff_producers + 1 + cross_clients;

/// A queue between a library's threads (on its own std.Io.Threaded) and tasks on weft. Each
/// std.Io primitive belongs to one io, so the queue waits on none: a spin lock guards a few
/// loads and stores, and a side that finds it full or empty sleeps on its own io and retries.
const Handoff = struct {
    lock: std.atomic.Mutex = .unlocked,
    items: [handoff_capacity]u64 = undefined,
    count: usize = 0,
    consumed: std.atomic.Value(u32) = .init(0),
    sum: std.atomic.Value(u64) = .init(0),

    fn acquire(handoff: *Handoff) void {
        // Held for a few instructions and never across a suspension, so spinning is bounded.
        while (!handoff.lock.tryLock()) std.atomic.spinLoopHint();
    }

    fn push(handoff: *Handoff, item: u64) bool {
        handoff.acquire();
        defer handoff.lock.unlock();
        if (handoff.count == handoff_capacity) return false;
        handoff.items[handoff.count] = item;
        handoff.count += 1;
        return true;
    }

    fn pop(handoff: *Handoff) ?u64 {
        handoff.acquire();
        defer handoff.lock.unlock();
        if (handoff.count == 0) return null;
        handoff.count -= 1;
        return handoff.items[handoff.count];
    }
};

fn handoffItem(producer: usize, index: usize) u64 {
    return producer * 1_000_000 + index + 1;
}

/// Runs on the Threaded io: pushes its items, sleeping on that io while the queue is full and
/// now and then regardless, so both runtimes' timers run at once.
fn produce(io: Io, handoff: *Handoff, producer: usize, done: *Accepted) anyerror!void {
    defer _ = done.fetchAdd(1, .release); // pairs with the acquire load in `awaitThreaded`
    for (0..handoff_items_per_producer) |index| {
        const item = handoffItem(producer, index);
        while (!handoff.push(item)) try io.sleep(.fromMilliseconds(1), .awake);
        if (index % 16 == 0) try io.sleep(.fromMicroseconds(200), .awake);
    }
}

/// Runs on weft: pops until every item is consumed, sleeping on weft while the queue is empty.
fn consume(io: Io, handoff: *Handoff) anyerror!void {
    while (handoff.consumed.load(.monotonic) < handoff_items) {
        const item = handoff.pop() orelse {
            try io.sleep(.fromMilliseconds(1), .awake);
            continue;
        };
        _ = handoff.sum.fetchAdd(item, .monotonic);
        _ = handoff.consumed.fetchAdd(1, .monotonic);
    }
}

fn threadedEchoServer(io: Io, server: *net.Server, done: *Accepted) anyerror!void {
    defer _ = done.fetchAdd(1, .release); // pairs with the acquire load in `awaitThreaded`
    return echoMany(io, server, cross_clients);
}

fn threadedClient(io: Io, address: net.IpAddress, index: usize, done: *Accepted) anyerror!void {
    defer _ = done.fetchAdd(1, .release); // pairs with the acquire load in `awaitThreaded`
    return expectEcho(io, address, index);
}

/// Polls with weft's sleep until every Threaded task is done: awaiting one that is not would
/// block this executor's thread on a Threaded futex.
fn awaitThreaded(io: Io, done: *const Accepted) !void {
    var waited_ms: u64 = 0;
    while (done.load(.acquire) < threaded_tasks) : (waited_ms += thread_poll_ms) {
        if (waited_ms >= deadline_s * std.time.ms_per_s) return error.TestTimedOut;
        try io.sleep(.fromMilliseconds(thread_poll_ms), .awake);
    }
}

test "compat: a std.Io.Threaded in the same process hands data to weft tasks and serves them" {
    try withRuntime(struct {
        fn body(io: Io) !void {
            var threaded: Io.Threaded = .init(testing.allocator, .{});
            defer threaded.deinit();
            const threaded_io = threaded.io();
            var threaded_server = try loopback.listen(threaded_io, .{ .reuse_address = true });
            defer threaded_server.deinit(threaded_io);
            var weft_server = try loopback.listen(io, .{ .reuse_address = true });
            defer weft_server.deinit(io);
            var handoff: Handoff = .{};
            var done: Accepted = .init(0);

            var threaded_futures: [threaded_tasks]Io.Future(anyerror!void) = undefined;
            var started: usize = 0;
            defer for (threaded_futures[0..started]) |*future| {
                future.cancel(threaded_io) catch {};
            };
            for (0..handoff_producers) |producer| {
                const args = .{ threaded_io, &handoff, producer, &done };
                threaded_futures[started] = try threaded_io.concurrent(produce, args);
                started += 1;
            }
            const server_args = .{ threaded_io, &threaded_server, &done };
            threaded_futures[started] = try threaded_io.concurrent(threadedEchoServer, server_args);
            started += 1;
            for (0..cross_clients) |index| {
                const args = .{ threaded_io, weft_server.socket.address, index, &done };
                threaded_futures[started] = try threaded_io.concurrent(threadedClient, args);
                started += 1;
            }

            var weft_futures: [handoff_consumers + 1 + cross_clients]Io.Future(anyerror!void) =
                undefined;
            var weft_started: usize = 0;
            defer for (weft_futures[0..weft_started]) |*future| future.cancel(io) catch {};
            for (0..handoff_consumers) |_| {
                weft_futures[weft_started] = try io.concurrent(consume, .{ io, &handoff });
                weft_started += 1;
            }
            const echo_args = .{ io, &weft_server, cross_clients };
            weft_futures[weft_started] = try io.concurrent(echoMany, echo_args);
            weft_started += 1;
            for (0..cross_clients) |index| {
                const address = threaded_server.socket.address;
                weft_futures[weft_started] = try io.concurrent(expectEcho, .{ io, address, index });
                weft_started += 1;
            }

            var first_error: anyerror!void = {};
            for (weft_futures[0..weft_started]) |*future| future.await(io) catch |err| {
                first_error = err;
            };
            weft_started = 0;
            try first_error;
            try awaitThreaded(io, &done);
            for (threaded_futures[0..started]) |*future| future.await(threaded_io) catch |err| {
                first_error = err;
            };
            started = 0;
            try first_error;

            var sum_expected: u64 = 0;
            for (0..handoff_producers) |producer| {
                for (0..handoff_items_per_producer) |index| {
                    sum_expected += handoffItem(producer, index);
                }
            }
            try testing.expectEqual(handoff_items, handoff.consumed.load(.monotonic));
            try testing.expectEqual(sum_expected, handoff.sum.load(.monotonic));
        }
    }.body);
}

// --- 5. Empty buffers handed to the stream operations ---------------------------------------

/// What each call with empty buffers returned: compared between weft and std.Io.Threaded.
const EmptyTransfers = struct {
    net_write_nothing: usize,
    net_write_empty_splat: usize,
    net_write_splat_zero: usize,
    net_write_between_empties: usize,
    net_read_between_empties: usize,
    net_read_bytes: [3]u8,
    file_write_nothing: usize,
    file_write_between_empties: usize,
    file_write_positional_nothing: usize,
    file_read_positional_nothing: usize,
    file_read_streaming_nothing: usize,
    file_read_between_empties: usize,
    file_read_bytes: [2]u8,
    file_reader_nothing: usize,
};

/// Hands empty buffers to `netWrite`/`netRead` on a loopback connection and to the streaming
/// and positional file operations on a new file at `path`, directly and through std's
/// `Writer`/`Reader`, which must then make no call that fails.
fn emptyTransfers(io: Io, path: []const u8) !EmptyTransfers {
    var result: EmptyTransfers = undefined;
    var server = try loopback.listen(io, .{ .reuse_address = true });
    defer server.deinit(io);
    const client = try server.socket.address.connect(io, .{ .mode = .stream });
    defer client.close(io);
    const peer = try server.accept(io);
    defer peer.close(io);
    const out = client.socket.handle;
    const vtable = io.vtable;
    result.net_write_nothing = try vtable.netWrite(io.userdata, out, "", &.{""}, 1);
    result.net_write_empty_splat = try vtable.netWrite(io.userdata, out, "", &.{ "", "" }, 5);
    result.net_write_splat_zero = try vtable.netWrite(io.userdata, out, "", &.{"xy"}, 0);
    var write_buffer: [8]u8 = undefined;
    var writer = client.writer(io, &write_buffer);
    try writer.interface.writeAll("");
    try writer.interface.flush();
    const between: []const []const u8 = &.{ "", "abc", "" };
    result.net_write_between_empties = try vtable.netWrite(io.userdata, out, "", between, 1);
    var empty: [0]u8 = .{};
    var three: [3]u8 = undefined;
    var read_data = [_][]u8{ &empty, &three, &empty };
    const in = peer.socket.handle;
    result.net_read_between_empties = try vtable.netRead(io.userdata, in, &read_data);
    result.net_read_bytes = three;

    const file = try Io.Dir.createFileAbsolute(io, path, .{ .read = true });
    defer Io.Dir.deleteFileAbsolute(io, path) catch {};
    defer file.close(io);
    result.file_write_nothing = try file.writeStreaming(io, "", &.{""}, 1);
    result.file_write_between_empties = try file.writeStreaming(io, "", &.{ "", "ab", "" }, 1);
    result.file_write_positional_nothing = try file.writePositional(io, &.{""}, 0);
    result.file_read_positional_nothing = try file.readPositional(io, &.{&empty}, 0);
    result.file_read_streaming_nothing = try file.readStreaming(io, &.{ &empty, &empty });
    var two: [2]u8 = undefined;
    result.file_read_between_empties = try file.readPositional(io, &.{ &empty, &two, &empty }, 0);
    result.file_read_bytes = two;
    var file_writer = file.writer(io, &write_buffer);
    try file_writer.interface.writeAll("");
    try file_writer.interface.flush();
    var read_buffer: [8]u8 = undefined;
    var file_reader = file.reader(io, &read_buffer);
    result.file_reader_nothing = try file_reader.interface.readSliceShort(&empty);
    return result;
}

test "compat: empty buffers in stream reads and writes behave as on std.Io.Threaded" {
    try withRuntime(struct {
        fn body(io: Io) !void {
            var suffix: [8]u8 = undefined;
            io.random(&suffix);
            var path_buffer: [64]u8 = undefined;
            const path = try std.fmt.bufPrint(&path_buffer, "/tmp/weft-compat-{x}", .{suffix});
            var threaded: Io.Threaded = .init(testing.allocator, .{});
            defer threaded.deinit();
            const on_threaded = try emptyTransfers(threaded.io(), path);
            const on_weft = try emptyTransfers(io, path);
            try testing.expectEqualDeep(on_threaded, on_weft);
            try testing.expectEqual(3, on_weft.net_read_between_empties);
            try testing.expectEqualStrings("abc", &on_weft.net_read_bytes);
            try testing.expectEqualStrings("ab", &on_weft.file_read_bytes);
        }
    }.body);
}

test "compat: netRead with no room and writes with no data return at once, no assertion" {
    // std.Io.Threaded indexes past an empty list in both cases (a safety panic in Debug), so
    // there is nothing to compare with: weft does what a zero-length `recv` does and writes a
    // write's header alone.
    try withRuntime(struct {
        fn body(io: Io) !void {
            var server = try loopback.listen(io, .{ .reuse_address = true });
            defer server.deinit(io);
            const client = try server.socket.address.connect(io, .{ .mode = .stream });
            defer client.close(io);
            const peer = try server.accept(io);
            defer peer.close(io);
            var empty: [0]u8 = .{};
            var none = [_][]u8{};
            var only_empty = [_][]u8{ &empty, &empty };
            const handle = peer.socket.handle;
            try testing.expectEqual(0, try io.vtable.netRead(io.userdata, handle, &none));
            try testing.expectEqual(0, try io.vtable.netRead(io.userdata, handle, &only_empty));
            const out = client.socket.handle;
            try testing.expectEqual(0, try io.vtable.netWrite(io.userdata, out, "", &.{}, 1));
            try testing.expectEqual(2, try io.vtable.netWrite(io.userdata, out, "hi", &.{}, 1));
            var two: [2]u8 = undefined;
            var read_data = [_][]u8{&two};
            try testing.expectEqual(2, try io.vtable.netRead(io.userdata, handle, &read_data));
            try testing.expectEqualStrings("hi", &two);
        }
    }.body);
}
