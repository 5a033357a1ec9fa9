//! File descriptors: accept under an exhausted fd limit recovers once fds are free again, and a
//! burst of connections, failures and cancelations leaves no descriptor behind (the epoll
//! backend registers a `dup` per operation, so a leak would show there first).
//!
//! The fd limit is lowered in this process and restored after (rejected: a forked child,
//! which could not run the server thread of the second test). Lowering the soft limit only
//! stops new descriptors from being made; the test fills what is left with dups of one socket.
const std = @import("std");
const Io = std.Io;
const net = Io.net;
const linux = std.os.linux;
const posix = std.posix;
const testing = std.testing;
const Runtime = @import("../Runtime.zig");
const Server = @import("../server/Server.zig");
const os = @import("../os/linux.zig");
const parked = @import("parked.zig");

const loopback: net.IpAddress = .{ .ip4 = .loopback(0) };

/// Calls `onEntry(context, fd)` for each open descriptor, from /proc/self/fd (the listing's
/// own descriptor included); stops at its first error.
pub fn forEachOpenFd(
    context: anytype,
    comptime onEntry: fn (@TypeOf(context), i32) error{Unexpected}!void,
) !void {
    const rc = linux.open("/proc/self/fd", .{ .DIRECTORY = true, .CLOEXEC = true }, 0);
    if (linux.errno(rc) != .SUCCESS) return os.skipTest(@src(), "no /proc/self/fd");
    const dir: i32 = @intCast(rc);
    defer _ = linux.close(dir);
    var buffer: [4096]u8 align(8) = undefined;
    while (true) {
        const n = linux.getdents64(dir, &buffer, buffer.len);
        if (linux.errno(n) != .SUCCESS) return error.Unexpected;
        if (n == 0) return;
        var offset: usize = 0;
        while (offset < n) {
            const entry: *align(1) const linux.dirent64 = @ptrCast(&buffer[offset]);
            const name = std.mem.sliceTo(@as([*:0]const u8, @ptrCast(&entry.name)), 0);
            if (std.fmt.parseInt(i32, name, 10)) |fd| try onEntry(context, fd) else |_| {}
            offset += entry.reclen;
        }
    }
}

/// Open descriptors of this process, but those of /proc files (see `isProcfs`).
pub fn openFdCount() !usize {
    var count: usize = 0;
    try forEachOpenFd(&count, struct {
        fn f(c: *usize, fd: i32) error{Unexpected}!void {
            if (!isProcfs(fd)) c.* += 1;
        }
    }.f);
    return count;
}

/// Whether `fd` is open on a /proc file. Leak counts leave these out: besides the listing's own
/// descriptor, every thread weft starts (a lane worker, at any time) reads /proc/self/maps
/// briefly to find its stack (os/thread.zig), so such a descriptor may come and go between
/// two counts. A descriptor closed since the listing was read is not one.
pub fn isProcfs(fd: i32) bool {
    var path_buffer: [32]u8 = undefined;
    const path = std.fmt.bufPrintZ(&path_buffer, "/proc/self/fd/{d}", .{fd}) catch unreachable;
    var target: [16]u8 = undefined;
    const rc = linux.readlink(path, &target, target.len);
    if (linux.errno(rc) != .SUCCESS) return false;
    return std.mem.startsWith(u8, target[0..rc], "/proc/");
}

fn highestOpenFd() !i32 {
    var highest: i32 = 0;
    try forEachOpenFd(&highest, struct {
        fn f(h: *i32, fd: i32) error{Unexpected}!void {
            h.* = @max(h.*, fd);
        }
    }.f);
    return highest;
}

/// The process's fd table made full: the soft RLIMIT_NOFILE lowered to just above the highest
/// open descriptor, and every free slot below it taken by a dup of `source`.
pub const Exhaustion = struct {
    saved: linux.rlimit,
    fillers: [fillers_max]i32 = undefined,
    len: usize = 0,

    /// Slots to fill at most (holes in the table, plus the spare ones above the highest).
    const fillers_max = 4096;
    const spare = 8;

    pub fn start(exhaustion: *Exhaustion, source: i32) !void {
        exhaustion.* = .{ .saved = undefined };
        if (linux.getrlimit(.NOFILE, &exhaustion.saved) != 0) {
            return os.skipTest(@src(), "no RLIMIT_NOFILE");
        }
        const limit: u64 = @intCast(try highestOpenFd() + 1 + spare);
        if (limit > exhaustion.saved.cur) return os.skipTest(@src(), "fd limit already tighter");
        const lowered: linux.rlimit = .{ .cur = limit, .max = exhaustion.saved.max };
        try testing.expectEqual(@as(usize, 0), linux.setrlimit(.NOFILE, &lowered));
        errdefer exhaustion.end();
        while (true) {
            const rc = linux.dup(source);
            switch (linux.errno(rc)) {
                .SUCCESS => {
                    if (exhaustion.len == fillers_max) return error.TestTooManyFds;
                    exhaustion.fillers[exhaustion.len] = @intCast(rc);
                    exhaustion.len += 1;
                },
                .MFILE => return,
                else => |e| {
                    std.log.err("dup: {t}", .{e});
                    return error.Unexpected;
                },
            }
        }
    }

    /// Frees the descriptors; the lowered limit stays (there is room below it again).
    pub fn release(exhaustion: *Exhaustion) void {
        for (exhaustion.fillers[0..exhaustion.len]) |fd| _ = linux.close(fd);
        exhaustion.len = 0;
    }

    pub fn end(exhaustion: *Exhaustion) void {
        exhaustion.release();
        _ = linux.setrlimit(.NOFILE, &exhaustion.saved);
    }
};

/// A plain blocking TCP socket, made while descriptors are plentiful; its connect needs none.
fn rawSocket() !i32 {
    const rc = linux.socket(linux.AF.INET, linux.SOCK.STREAM | linux.SOCK.CLOEXEC, 0);
    try testing.expectEqual(linux.E.SUCCESS, linux.errno(rc));
    const fd: i32 = @intCast(rc);
    // Bounded reads: a server that never answers fails the test instead of hanging it.
    const timeout: linux.timeval = .{ .sec = 10, .usec = 0 };
    const bytes = std.mem.asBytes(&timeout);
    _ = linux.setsockopt(fd, linux.SOL.SOCKET, linux.SO.RCVTIMEO, bytes, bytes.len);
    return fd;
}

fn rawConnect(fd: i32, port: u16) !void {
    var addr: linux.sockaddr.in = .{
        .port = std.mem.nativeToBig(u16, port),
        .addr = std.mem.nativeToBig(u32, 0x7f00_0001),
    };
    // The runtimes' threads may signal this one: an interrupted connect goes on in the
    // kernel, and a repeat says whether it finished (bounded: loopback connects at once).
    for (0..1000) |_| {
        switch (linux.errno(linux.connect(fd, @ptrCast(&addr), @sizeOf(linux.sockaddr.in)))) {
            .SUCCESS, .ISCONN => return,
            .INTR, .ALREADY, .INPROGRESS => {
                const pause: linux.timespec = .{ .sec = 0, .nsec = std.time.ns_per_ms };
                _ = linux.nanosleep(&pause, null);
            },
            else => |e| {
                std.log.err("connect: {t}", .{e});
                return error.TestUnexpectedResult;
            },
        }
    }
    return error.TestConnectDidNotFinish;
}

/// `write` of all of `bytes`, again after a signal.
fn rawWrite(fd: i32, bytes: []const u8) !void {
    var sent: usize = 0;
    while (sent < bytes.len) {
        const rc = linux.write(fd, bytes[sent..].ptr, bytes.len - sent);
        switch (linux.errno(rc)) {
            .SUCCESS => sent += rc,
            .INTR => {},
            else => |e| {
                std.log.err("write: {t}", .{e});
                return error.TestUnexpectedResult;
            },
        }
    }
}

/// `read` into `buffer` until end of stream or full, again after a signal. The socket's
/// receive timeout bounds each wait (EAGAIN then fails the test).
fn rawReadAll(fd: i32, buffer: []u8) ![]u8 {
    var len: usize = 0;
    while (len < buffer.len) {
        const rc = linux.read(fd, buffer[len..].ptr, buffer.len - len);
        switch (linux.errno(rc)) {
            .SUCCESS => {
                if (rc == 0) break;
                len += rc;
            },
            .INTR => {},
            else => |e| {
                std.log.err("read: {t}", .{e});
                return error.TestUnexpectedResult;
            },
        }
    }
    return buffer[0..len];
}

test "net: accept under an exhausted fd limit fails with a named error, then recovers" {
    // No stall detector: a stall report reads the debug information, opening a file, and one
    // made while the table fills would free a slot as it ends.
    var rt = try Runtime.init(testing.allocator, .{ .stall_threshold_ns = null });
    defer rt.deinit();
    const io = rt.io();
    var server = try loopback.listen(io, .{});
    defer server.deinit(io);
    const client = try rawSocket();
    defer _ = linux.close(client);

    var exhaustion: Exhaustion = undefined;
    try exhaustion.start(server.socket.handle);
    defer exhaustion.end();
    try rawConnect(client, server.socket.address.getPort()); // queued in the kernel
    // No descriptor for the connection: it stays queued, accept says why.
    try testing.expectError(error.ProcessFdQuotaExceeded, server.accept(io));
    try testing.expectError(error.ProcessFdQuotaExceeded, server.accept(io));
    exhaustion.release();
    const stream = try server.accept(io);
    defer stream.close(io);
    try rawWrite(client, "abc");
    try testing.expectEqualStrings("abc", &(try readThree(io, stream)));
}

/// Reads three bytes from `connection`, waiting for them.
fn readThree(io: Io, connection: net.Stream) ![3]u8 {
    var buffer: [3]u8 = undefined;
    var reader = connection.reader(io, &buffer);
    return (try reader.interface.takeArray(3)).*;
}

test "net: a connection's reads wait at an exhausted fd limit, on either backend" {
    // No stall detector: see the test above.
    var rt = try Runtime.init(testing.allocator, .{ .stall_threshold_ns = null });
    defer rt.deinit();
    const io = rt.io();
    var server = try loopback.listen(io, .{});
    defer server.deinit(io);
    const client = try rawSocket();
    defer _ = linux.close(client);
    try rawConnect(client, server.socket.address.getPort());
    const stream = try server.accept(io);
    defer stream.close(io);

    var exhaustion: Exhaustion = undefined;
    try exhaustion.start(server.socket.handle);
    defer exhaustion.end();
    // Each read finds no data and waits: the epoll backend watches a dup of the socket, and
    // with no descriptor left it must watch the socket itself instead of failing (EMFILE). A
    // second wait, once the first is over, watches it again.
    for ([_]*const [3]u8{ "abc", "def" }) |bytes| {
        var read = try io.concurrent(readThree, .{ io, stream });
        defer _ = read.cancel(io) catch {};
        try parked.waitParked(io, &read, .cancelable);
        try rawWrite(client, bytes);
        try testing.expectEqualStrings(bytes, &(try read.await(io)));
    }
}

test "Server: accept backs off under an exhausted fd limit and serves once fds are free" {
    const hello = Server.http.Fixed("Hello World");
    var server = try Server.init(testing.allocator, .{
        .address = .{ .ip4 = .loopback(0) },
        .shape = .single,
    });
    var thread_result: Server.RunError!Server.Report = error.WorkerStartFailed;
    const thread = try std.Thread.spawn(.{}, struct {
        fn run(s: *Server, result: *Server.RunError!Server.Report) void {
            result.* = s.run(Server.http.handler(&hello.http_handler));
        }
    }.run, .{ &server, &thread_result });
    var joined = false;
    defer if (!joined) {
        server.stop();
        thread.join();
        server.deinit();
    };

    // A first request proves the server thread is up (its runtime made its descriptors).
    try testing.expect(try getHello(try rawSocket(), server.port(), null));

    const client = try rawSocket();
    var exhaustion: Exhaustion = undefined;
    try exhaustion.start(client);
    defer exhaustion.end();
    try testing.expect(try getHello(client, server.port(), &exhaustion));
    server.stop();
    thread.join();
    joined = true;
    defer server.deinit();
    const report = try thread_result;
    try testing.expectEqual(@as(u64, 2), report.workers.accepted);
}

/// Sends one request on `client` (closed after), and says whether "Hello World" came back.
/// With `exhaustion`, the fd table is full while the request waits to be accepted, and
/// freed after a window in which the server meets EMFILE and backs off (not asserted:
/// scheduling decides whether it tried in time; what is asserted is that it serves).
fn getHello(client: i32, port: u16, exhaustion: ?*Exhaustion) !bool {
    defer _ = linux.close(client);
    try rawConnect(client, port);
    const request = "GET / HTTP/1.1\r\nHost: t\r\nConnection: close\r\n\r\n";
    try rawWrite(client, request);
    if (exhaustion) |e| {
        const window: linux.timespec = .{ .sec = 0, .nsec = 50 * std.time.ns_per_ms };
        _ = linux.nanosleep(&window, null);
        e.release();
    }
    var buffer: [256]u8 = undefined;
    const response = try rawReadAll(client, &buffer);
    return std.mem.startsWith(u8, response, "HTTP/1.1 200") and
        std.mem.endsWith(u8, response, "Hello World");
}

fn echoOnce(io: Io, server: *net.Server) !void {
    const stream = try server.accept(io);
    defer stream.close(io);
    var read_buffer: [64]u8 = undefined;
    var write_buffer: [64]u8 = undefined;
    var reader = stream.reader(io, &read_buffer);
    var writer = stream.writer(io, &write_buffer);
    _ = try reader.interface.streamRemaining(&writer.interface);
    try writer.interface.flush();
}

fn connectEcho(io: Io, address: net.IpAddress) !void {
    const stream = try address.connect(io, .{ .mode = .stream });
    defer stream.close(io);
    var writer = stream.writer(io, &.{});
    try writer.interface.writeAll("ping");
    try stream.shutdown(io, .send);
    var buffer: [8]u8 = undefined;
    var reader = stream.reader(io, &buffer);
    try testing.expectEqualStrings("ping", try reader.interface.take(4));
}

fn acceptBlocked(io: Io, server: *net.Server) !void {
    const stream = try server.accept(io);
    stream.close(io);
}

fn readBlocked(io: Io, stream: net.Stream) !void {
    var buffer: [1]u8 = undefined;
    var reader = stream.reader(io, &buffer);
    _ = reader.interface.takeByte() catch |err| switch (err) {
        error.ReadFailed => return reader.err.?,
        error.EndOfStream => return error.EndOfStream,
    };
}

fn receiveBlocked(io: Io, s: net.Socket) !void {
    var buffer: [8]u8 = undefined;
    _ = try s.receive(io, &buffer);
}

/// Connections that succeed, fail and are canceled, on one runtime.
fn burst(io: Io) !void {
    var server = try loopback.listen(io, .{ .kernel_backlog = 64 });
    defer server.deinit(io);
    const address = server.socket.address;
    for (0..4) |_| { // rounds of 8 echo connections served concurrently
        var echoes: [8]@TypeOf(try io.concurrent(echoOnce, .{ io, &server })) = undefined;
        for (&echoes) |*echo| echo.* = try io.concurrent(echoOnce, .{ io, &server });
        for (0..8) |_| try connectEcho(io, address);
        for (&echoes) |*echo| try echo.await(io);
    }
    // Refused connects.
    var closed = try loopback.listen(io, .{});
    const closed_address = closed.socket.address;
    closed.deinit(io);
    for (0..8) |_| {
        const refused = closed_address.connect(io, .{ .mode = .stream });
        try testing.expectError(error.ConnectionRefused, refused);
    }
    // Canceled accepts, reads and receives.
    for (0..4) |_| {
        const client = try address.connect(io, .{ .mode = .stream });
        defer client.close(io);
        const peer = try server.accept(io); // kept open: the client's read must wait
        defer peer.close(io);
        var blocked_accept = try io.concurrent(acceptBlocked, .{ io, &server });
        var blocked_read = try io.concurrent(readBlocked, .{ io, client });
        const udp = try loopback.bind(io, .{ .mode = .dgram });
        defer udp.close(io);
        var blocked_receive = try io.concurrent(receiveBlocked, .{ io, udp });
        try parked.waitParked(io, &blocked_accept, .cancelable);
        try parked.waitParked(io, &blocked_read, .cancelable);
        try parked.waitParked(io, &blocked_receive, .cancelable);
        try testing.expectError(error.Canceled, blocked_accept.cancel(io));
        try testing.expectError(error.Canceled, blocked_read.cancel(io));
        try testing.expectError(error.Canceled, blocked_receive.cancel(io));
    }
}

test "net: a burst of connections, refusals and cancelations leaks no descriptor" {
    // No stall detector: a stall report's first read of the debug information opens files
    // that std keeps, which the count would take for a leak.
    var rt = try Runtime.init(testing.allocator, .{ .stall_threshold_ns = null });
    defer rt.deinit();
    const io = rt.io();
    try burst(io); // warm up: worker threads and pools that live as long as the runtime
    const before = try openFdCount();
    try burst(io);
    try burst(io);
    try testing.expectEqual(before, try openFdCount());
}
