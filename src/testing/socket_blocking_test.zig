//! Sockets weft hands out, seen by code that uses their descriptors itself (a C library given
//! `stream.socket.handle`, as OpenSSL's `SSL_set_fd`): blocking, as std.Io.Threaded's are,
//! but for listeners; and weft's own operations on such sockets, which must still never block
//! an executor. Runs on both backends (`WEFT_BACKEND`).
//!
//! The tests of an executor's ticks are timed: one task writes `stream_bytes` to a blocking
//! socket whose peer, a plain thread, reads them at its own slow pace (about half a second in
//! all), while another task of the same lone executor wakes every millisecond. A write that
//! blocked the executor until the peer had read would leave a gap of most of that half second
//! between two ticks; `tick_gap_ns_max` is well below it and far above what a loaded machine
//! adds to a 1 ms sleep.
const std = @import("std");
const builtin = @import("builtin");
const Io = std.Io;
const net = Io.net;
const linux = if (builtin.os.tag == .linux) std.os.linux else struct {};
const testing = std.testing;
const Runtime = @import("../Runtime.zig");
const os = @import("../os/linux.zig");
const socket = @import("../net/socket.zig");
const qemu = @import("qemu.zig");

const loopback: net.IpAddress = .{ .ip4 = .loopback(0) };
const Pair = @import("loopback.zig").Pair;

const nonBlocking = socket.isNonBlocking; // F_GETFL

test "blocking sockets: TCP accepted and connected, UDP bound are blocking; listeners are not" {
    var rt = try Runtime.init(testing.allocator, .{});
    defer rt.deinit();
    const io = rt.io();
    var pair: Pair = try .open(io);
    defer pair.close(io);
    const server = pair.server;
    const client = pair.client;
    const accepted = pair.peer;
    const bound = try loopback.bind(io, .{ .mode = .dgram });
    defer bound.close(io);
    try testing.expect(try nonBlocking(server.socket.handle));
    try testing.expect(!try nonBlocking(client.socket.handle));
    try testing.expect(!try nonBlocking(accepted.socket.handle));
    try testing.expect(!try nonBlocking(bound.handle));
}

test "blocking sockets: Unix connected and accepted are blocking; the listener is not" {
    var rt = try Runtime.init(testing.allocator, .{});
    defer rt.deinit();
    const io = rt.io();
    var path_buffer: [64]u8 = undefined;
    var suffix: [8]u8 = undefined;
    io.random(&suffix);
    const path_z = try std.fmt.bufPrint(&path_buffer, "/tmp/weft-blocking-{x}.sock\x00", .{
        suffix,
    });
    const path = path_z[0 .. path_z.len - 1];
    const address = try net.UnixAddress.init(path);
    var server = try address.listen(io, .{});
    defer server.deinit(io);
    defer _ = linux.unlink(@ptrCast(path_z.ptr));
    const client = try address.connect(io);
    defer client.close(io);
    const accepted = try server.accept(io);
    defer accepted.close(io);
    try testing.expect(try nonBlocking(server.socket.handle));
    try testing.expect(!try nonBlocking(client.socket.handle));
    try testing.expect(!try nonBlocking(accepted.socket.handle));
}

test "blocking sockets: both ends of a socket pair are blocking" {
    // std.Io's `createPair` asks for IP families, which Linux pairs not: the pair that
    // `netSocketCreatePair` would hand out is made here directly, as it makes it.
    const fds = try socket.pair(linux.AF.UNIX, .stream, null);
    defer for (fds) |fd| os.closeFd(fd);
    try testing.expect(!try nonBlocking(fds[0]));
    try testing.expect(!try nonBlocking(fds[1]));
}

/// Sets an integer or `timeval` option of `fd`.
fn setOption(fd: linux.fd_t, name: u32, value: anytype) !void {
    const bytes = std.mem.asBytes(&value);
    const rc = linux.setsockopt(fd, linux.SOL.SOCKET, name, bytes, bytes.len);
    if (linux.errno(rc) != .SUCCESS) return error.Unexpected;
}

/// What a blocking `recv` of C code on a plain thread got: the kernel's return value and
/// the bytes.
const CReceive = struct {
    fd: linux.fd_t,
    rc: usize = 0,
    buffer: [16]u8 = undefined,

    fn run(receive: *CReceive) void {
        const buffer = &receive.buffer;
        receive.rc = linux.recvfrom(receive.fd, buffer, buffer.len, 0, null, null);
    }
};

test "blocking sockets: a C-style blocking recv on a plain thread waits for the bytes" {
    var rt = try Runtime.init(testing.allocator, .{});
    defer rt.deinit();
    const io = rt.io();
    var pair: Pair = try .open(io);
    defer pair.close(io);
    const client = pair.client;
    const accepted = pair.peer;
    // Bounded: a receive that gets nothing in 10 s fails (EAGAIN) rather than hangs.
    try setOption(client.socket.handle, linux.SO.RCVTIMEO, linux.timeval{ .sec = 10, .usec = 0 });
    var receive: CReceive = .{ .fd = client.socket.handle };
    const thread = try std.Thread.spawn(.{}, CReceive.run, .{&receive});
    // The thread is in its `recv` by now, most likely; if not, it finds the bytes waiting.
    io.sleep(.fromMilliseconds(20), .awake) catch {};
    var writer = accepted.writer(io, &.{});
    const written = writer.interface.writeAll("from weft");
    thread.join();
    try written;
    try testing.expectEqual(linux.E.SUCCESS, linux.errno(receive.rc));
    try testing.expectEqualStrings("from weft", receive.buffer[0..receive.rc]);
}

/// Bytes the writer sends in the tests of an executor's ticks.
const stream_bytes = 8 << 20;
/// The peer's pace: `peer_read_bytes` at most every `peer_pause_ns`, so the writer waits about
/// half a second in all (`stream_bytes` / 16 MB/s), most of it with its buffers full.
const peer_read_bytes = 16 << 10;
const peer_pause_ns = std.time.ns_per_ms;
/// The writer's send buffer and the peer's receive buffer (the kernel doubles both), small
/// beside `stream_bytes`: a write that blocked would wait for nearly all of it to be read
/// (with the defaults, autotuned up to 4 and 6 MiB, most of it would fit). Both well above
/// loopback's 64 KiB segments: below, the sender waits for delayed acknowledgements (at
/// 16 KiB the 8 MiB took 9 s).
const send_buffer_bytes: u32 = 128 << 10;
const receive_buffer_bytes: u32 = 256 << 10;
/// The longest gap between two 1 ms ticks a test accepts.
const tick_gap_ns_max = 200 * std.time.ns_per_ms;
/// Ticks a test expects at least while the writer writes (about 500 when nothing is slow).
const ticks_min = 20;
/// How long the peer waits for bytes before it gives up and shuts the socket down, which
/// fails the writer: the test fails rather than hangs.
const peer_patience_ms = 10_000;

/// The peer: a plain thread reading with blocking `recv`, slowly, until `stream_bytes` came.
const SlowPeer = struct {
    fd: linux.fd_t,
    received_bytes: usize = 0,

    fn run(peer: *SlowPeer) void {
        var buffer: [peer_read_bytes]u8 = undefined;
        while (peer.received_bytes < stream_bytes) {
            const rc = linux.recvfrom(peer.fd, &buffer, buffer.len, 0, null, null);
            switch (linux.errno(rc)) {
                .SUCCESS => if (rc == 0) return else {
                    peer.received_bytes += rc;
                },
                .INTR => continue,
                // A non-blocking socket, or nothing within the receive timeout: wait in
                // poll(2), and give up when nothing comes.
                .AGAIN => if (!waitReadable(peer.fd)) break else continue,
                else => break,
            }
            os.sleepThread(peer_pause_ns);
        }
        _ = linux.shutdown(peer.fd, linux.SHUT.RDWR);
    }

    fn waitReadable(fd: linux.fd_t) bool {
        var fds = [_]linux.pollfd{.{ .fd = fd, .events = linux.POLL.IN, .revents = 0 }};
        const rc = linux.poll(&fds, 1, peer_patience_ms);
        return linux.errno(rc) == .SUCCESS and rc == 1;
    }
};

/// A task of the writer's executor that wakes every millisecond and keeps the longest gap.
/// Alone on the executor with the writer (`executors = 1`): read after it returned.
const Ticks = struct {
    done: std.atomic.Value(bool) = .init(false),
    count: usize = 0,
    gap_ns_max: u64 = 0,

    fn run(ticks: *Ticks, io: Io) Io.Cancelable!void {
        var last_ns = os.monotonicNs();
        while (!ticks.done.load(.acquire)) {
            try io.sleep(.fromMilliseconds(1), .awake);
            const now_ns = os.monotonicNs();
            ticks.gap_ns_max = @max(ticks.gap_ns_max, now_ns - last_ns);
            ticks.count += 1;
            last_ns = now_ns;
        }
    }
};

/// How the writer sends its bytes to the socket.
const Route = enum {
    /// `net.Stream.Writer`: weft's send operations.
    stream,
    /// `std.Io.File.Writer` over the socket's descriptor: weft's file writes (a `write`
    /// operation waiting for readiness).
    file,
    /// `netWriteFile` of a file of `stream_bytes`: sendfile(2).
    sendfile,
};

fn expectTicksWhileWriting(route: Route) !void {
    // No watchdog: a held executor is what the test looks for, not something to rescue.
    var rt = try Runtime.init(testing.allocator, .{ .executors = 1, .stall_threshold_ns = null });
    defer rt.deinit();
    const io = rt.io();
    var pair: Pair = try .open(io);
    defer pair.close(io);
    const client = pair.client;
    const accepted = pair.peer;
    try setOption(client.socket.handle, linux.SO.SNDBUF, send_buffer_bytes);
    try setOption(accepted.socket.handle, linux.SO.RCVBUF, receive_buffer_bytes);
    const patience: linux.timeval = .{ .sec = peer_patience_ms / 1000, .usec = 0 };
    try setOption(accepted.socket.handle, linux.SO.RCVTIMEO, patience);

    var peer: SlowPeer = .{ .fd = accepted.socket.handle };
    const peer_thread = try std.Thread.spawn(.{}, SlowPeer.run, .{&peer});
    var ticks: Ticks = .{};
    const written = writeWhileTicking(io, client, route, &ticks);
    // Whatever happened to the writer, the peer now sees the end of the stream and returns.
    _ = linux.shutdown(client.socket.handle, linux.SHUT.WR);
    peer_thread.join();
    const write_ns = try written;
    if (ticks.gap_ns_max > tick_gap_ns_max or ticks.count < ticks_min) {
        std.debug.print("{t}: {d} ticks in {d} ms of writing, the longest gap {d} ms\n", .{
            route,
            ticks.count,
            write_ns / std.time.ns_per_ms,
            ticks.gap_ns_max / std.time.ns_per_ms,
        });
        return error.TestExecutorHeld;
    }
    try testing.expectEqual(@as(usize, stream_bytes), peer.received_bytes);
}

/// Writes `stream_bytes` by `route` while `ticks` runs beside; returns how long it took.
fn writeWhileTicking(io: Io, client: net.Stream, route: Route, ticks: *Ticks) !u64 {
    var ticking = try io.concurrent(Ticks.run, .{ ticks, io });
    defer ticking.cancel(io) catch {};
    try io.sleep(.fromMilliseconds(10), .awake); // the ticks begin
    const start_ns = os.monotonicNs();
    const written = write(io, client, route);
    const write_ns = os.monotonicNs() - start_ns;
    ticks.done.store(true, .release);
    try ticking.await(io);
    try written;
    return write_ns;
}

fn write(io: Io, client: net.Stream, route: Route) !void {
    if (route == .sendfile) return sendFile(io, client);
    const bytes = try testing.allocator.alloc(u8, stream_bytes);
    defer testing.allocator.free(bytes);
    @memset(bytes, 'w');
    switch (route) {
        .stream => {
            var writer = client.writer(io, &.{});
            writer.interface.writeAll(bytes) catch return writer.err.?;
        },
        .file => {
            const file: Io.File = .{
                .handle = client.socket.handle,
                .flags = .{ .nonblocking = false },
            };
            var writer = file.writerStreaming(io, &.{});
            writer.interface.writeAll(bytes) catch return writer.err.?;
        },
        .sendfile => unreachable, // above
    }
}

fn sendFile(io: Io, client: net.Stream) !void {
    var path_buffer: [64]u8 = undefined;
    var suffix: [8]u8 = undefined;
    io.random(&suffix);
    const path = try std.fmt.bufPrint(&path_buffer, "/tmp/weft-blocking-{x}", .{suffix});
    const file = try Io.Dir.cwd().createFile(io, path, .{ .read = true });
    defer Io.Dir.cwd().deleteFile(io, path) catch {};
    defer file.close(io);
    try file.setLength(io, stream_bytes); // a sparse file: zeros, read from no disk
    var file_reader = file.reader(io, &.{});
    var sent_bytes: usize = 0;
    // Bounded: each call sends at least a byte, or fails, or says the file ended.
    while (sent_bytes < stream_bytes) {
        const limit: Io.Limit = .limited(stream_bytes - sent_bytes);
        const handle = client.socket.handle;
        const n = try io.vtable.netWriteFile(io.userdata, handle, "", &file_reader, limit);
        if (n == 0) return error.TestFileEnded;
        sent_bytes += n;
    }
}

test "blocking sockets: a large send to a slow peer never holds the executor" {
    try expectTicksWhileWriting(.stream);
}

test "blocking sockets: a large write through a File on the socket never holds the executor" {
    // epoll's write, the only backend there, asks `pwritev2` not to wait.
    try qemu.skipUnderQemu(.nowait, @src());
    try expectTicksWhileWriting(.file);
}

test "blocking sockets: a large sendfile to a slow peer never holds the executor" {
    try expectTicksWhileWriting(.sendfile);
}
