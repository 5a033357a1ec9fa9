//! File descriptors: accept under an exhausted fd limit recovers once fds are free again, a
//! burst of connections, failures and cancelations leaves no descriptor behind, and idle
//! connections cost one descriptor each on either backend (the epoll backend once registered
//! a `dup` per waiting operation), so both serve as many under one fd limit.
//!
//! The fd limit is lowered in this process and restored after (rejected: a forked child,
//! which could not run the server thread of the second test). Lowering the soft limit only
//! stops new descriptors from being made; the test fills what is left with dups of one socket.
const std = @import("std");
const builtin = @import("builtin");
const Io = std.Io;
const net = Io.net;
const linux = if (builtin.os.tag == .linux) std.os.linux else struct {};
const posix = std.posix;
const testing = std.testing;
const Runtime = @import("../Runtime.zig");
const Server = @import("../server/Server.zig");
const os = @import("../os/linux.zig");
const parked = @import("parked.zig");
const os_thread = @import("../os/thread.zig");

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
/// descriptor, the runtime's samplers hold /proc files as executors and watchdogs come and go
/// (schedstat, loadavg, pagemap), and an overflow report reads /proc/self/maps. A descriptor
/// closed since the listing was read is not one.
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

test "thread: a thread weft starts at the fd limit takes no descriptor, and knows its stack" {
    // A thread that read /proc/self/maps as it started took a descriptor behind its starter's
    // back: with one left, the starter's next open failed now and then; with none, the thread
    // had no record, and an overflow on its stack was a plain fault.
    const source = linux.open("/", .{ .DIRECTORY = true, .CLOEXEC = true }, 0);
    try testing.expectEqual(linux.E.SUCCESS, linux.errno(source));
    defer _ = linux.close(@intCast(source));
    var exhaustion: Exhaustion = undefined;
    try exhaustion.start(@intCast(source));
    defer exhaustion.end();
    const Started = struct {
        /// 1 once the thread has its record; 2 once the test is done with the thread.
        state: std.atomic.Value(u32) = .init(0),
        record: ?os_thread.Named = null,

        fn run(started: *@This()) void {
            started.record = os_thread.current();
            started.state.store(1, .release);
            os.futexWake(&started.state, 1);
            while (started.state.load(.acquire) == 1) os.futexWait(&started.state, 1, null);
        }
    };
    var started: Started = .{};
    const thread = try os_thread.spawn("test", "none", 64 * 1024, null, Started.run, .{&started});
    defer {
        started.state.store(2, .release);
        os.futexWake(&started.state, 1);
        thread.join();
    }
    while (started.state.load(.acquire) == 0) os.futexWait(&started.state, 0, null);
    const record = started.record orelse return error.TestExpectedRecord;
    try testing.expectEqualStrings("test", record.what);
    // The one descriptor freed is this thread's to take.
    exhaustion.len -= 1;
    _ = linux.close(exhaustion.fillers[exhaustion.len]);
    const opened = linux.open("/", .{ .DIRECTORY = true, .CLOEXEC = true }, 0);
    try testing.expectEqual(linux.E.SUCCESS, linux.errno(opened));
    _ = linux.close(@intCast(opened));
    // What an overflow's report reads, while the thread lives: the mapping its stack is in.
    // With descriptors to spare: qemu-user makes up /proc/self/maps with two of its own.
    exhaustion.release();
    const stack = os_thread.mappingOf(record.start_address) orelse
        return error.TestExpectedMapping;
    try testing.expect(stack[0] < record.start_address and record.start_address < stack[1]);
}

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
    // Each read finds no data and waits, with no descriptor left: the epoll backend watches
    // the socket itself and needs none (it once took a `dup`, and had to fall back when it
    // met EMFILE). A second wait, once the first is over, arms the same registration again.
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

/// Connections at most in the capacity test below (its fd limit admits about 100).
const capacity_connections_max = 512;
/// Descriptors the capacity test leaves free under its lowered limit.
const capacity_slots_spare = 200;

/// The server's side of one connection in the capacity test: waits for a byte (the idle
/// connection), sends it back, then waits for the end of the stream.
fn serveByte(io: Io, stream: net.Stream) !void {
    defer stream.close(io);
    var buffer: [1]u8 = undefined;
    var reader = stream.reader(io, &buffer);
    const byte = reader.interface.takeByte() catch |err| return reader.err orelse err;
    var writer = stream.writer(io, &.{});
    writer.interface.writeAll(&.{byte}) catch return writer.err.?;
    _ = reader.interface.takeByte() catch |err| switch (err) {
        error.EndOfStream => return,
        error.ReadFailed => return reader.err.?,
    };
    return error.TestUnexpectedResult;
}

/// Receives one byte from the blocking socket `fd` without blocking the thread: the calling
/// thread is one of the runtime's executors, whose tasks would wait while it blocked.
fn receiveByte(io: Io, fd: i32) !u8 {
    for (0..10_000) |_| {
        var byte: [1]u8 = undefined;
        const rc = linux.recvfrom(fd, &byte, 1, linux.MSG.DONTWAIT, null, null);
        switch (linux.errno(rc)) {
            .SUCCESS => return if (rc == 1) byte[0] else error.EndOfStream,
            .AGAIN, .INTR => try io.sleep(.fromMilliseconds(1), .awake),
            else => |e| {
                std.log.err("recv: {t}", .{e});
                return error.TestUnexpectedResult;
            },
        }
    }
    return error.TestTimedOut;
}

/// A blocking client socket with bounded reads, or null when the fd limit admits none.
fn clientSocket() !?i32 {
    const rc = linux.socket(linux.AF.INET, linux.SOCK.STREAM | linux.SOCK.CLOEXEC, 0);
    switch (linux.errno(rc)) {
        .SUCCESS => {},
        .MFILE => return null,
        else => |e| {
            std.log.err("socket: {t}", .{e});
            return error.TestUnexpectedResult;
        },
    }
    const fd: i32 = @intCast(rc);
    const timeout: linux.timeval = .{ .sec = 10, .usec = 0 };
    const bytes = std.mem.asBytes(&timeout);
    _ = linux.setsockopt(fd, linux.SOL.SOCKET, linux.SO.RCVTIMEO, bytes, bytes.len);
    return fd;
}

/// The connection of `client` (connected, waiting in the backlog) accepted and served by a
/// task of `io` that waits in a read; null when the fd limit admits no accepted socket.
fn acceptIdle(io: Io, server: *net.Server, client: i32) !?Idle {
    const stream = server.accept(io) catch |err| switch (err) {
        error.ProcessFdQuotaExceeded => return null,
        else => return err,
    };
    var served = try io.concurrent(serveByte, .{ io, stream });
    // Parked in its read: on epoll, registered (before issue 33, with a `dup` of its own).
    try parked.waitParked(io, &served, .cancelable);
    return .{ .client = client, .served = served };
}

const Idle = struct {
    client: i32,
    served: Io.Future(@typeInfo(@TypeOf(serveByte)).@"fn".return_type.?),
};

/// One connection opened, served and ended.
fn serveOne(io: Io, server: *net.Server, port: u16) !void {
    const client = (try clientSocket()).?;
    try rawConnect(client, port);
    var idle = (try acceptIdle(io, server, client)).?;
    try rawWrite(idle.client, "w");
    try testing.expectEqual('w', try receiveByte(io, idle.client));
    _ = linux.close(idle.client);
    try idle.served.await(io);
}

/// The descriptors free under `limit`: less every descriptor open (those of /proc files
/// included: the contention sensors keep theirs), less the listing's own.
fn slotsFree(limit: u64) !usize {
    var open_all: usize = 0;
    try forEachOpenFd(&open_all, struct {
        fn f(c: *usize, _: i32) error{Unexpected}!void {
            c.* += 1;
        }
    }.f);
    return @intCast(limit - (open_all - 1));
}

const Capacity = struct {
    /// Descriptors free under the lowered limit before the first connection.
    slots_free: usize,
    connections: usize,
    /// Descriptors the connections added, client sides included.
    fds_added: usize,
};

/// Opens idle connections (a server task reading each, the client side blocking and idle)
/// until the lowered fd limit admits no more, checks that each is served, and that one ended
/// frees the descriptors the next accept needs.
fn measureCapacity(backend: @import("../loop/Loop.zig").Choice) !Capacity {
    var rt = try Runtime.init(testing.allocator, .{
        .stall_threshold_ns = null, // a stall report opens files: see the tests above
        .backend = backend,
    });
    defer rt.deinit();
    const io = rt.io();
    var server = try loopback.listen(io, .{ .kernel_backlog = capacity_connections_max });
    defer server.deinit(io);
    const port = server.socket.address.getPort();
    // Warm up: what the runtime makes on first use (pools, handlers) is made before the count.
    try serveOne(io, &server, port);

    var saved: linux.rlimit = undefined;
    if (linux.getrlimit(.NOFILE, &saved) != 0) return os.skipTest(@src(), "no RLIMIT_NOFILE");
    const limit: u64 = @intCast(try highestOpenFd() + 1 + capacity_slots_spare);
    if (limit > saved.cur) return os.skipTest(@src(), "fd limit already tighter");
    // Kept for the count of descriptors at the limit: the listing of /proc/self/fd needs one.
    const reserve: i32 = @intCast(linux.dup(server.socket.handle));
    var reserved = true;
    defer if (reserved) {
        _ = linux.close(reserve);
    };
    const fds_before = try openFdCount();
    const slots_free = try slotsFree(limit);
    const lowered: linux.rlimit = .{ .cur = limit, .max = saved.max };
    try testing.expectEqual(@as(usize, 0), linux.setrlimit(.NOFILE, &lowered));
    defer _ = linux.setrlimit(.NOFILE, &saved);

    var idle: [capacity_connections_max]Idle = undefined;
    var count: usize = 0;
    defer for (idle[0..count]) |*connection| {
        _ = linux.close(connection.client);
        connection.served.await(io) catch {};
    };
    // A client connected whose connection no descriptor was left to accept.
    var pending: ?i32 = null;
    defer if (pending) |client| {
        _ = linux.close(client);
    };
    while (count < capacity_connections_max) : (count += 1) {
        const client = try clientSocket() orelse break;
        try rawConnect(client, port);
        idle[count] = try acceptIdle(io, &server, client) orelse {
            pending = client;
            break;
        };
    }
    const capacity: Capacity = .{
        .slots_free = slots_free,
        .connections = count,
        .fds_added = fds_added: {
            _ = linux.close(reserve);
            reserved = false;
            break :fds_added try openFdCount() + 1 - fds_before - @intFromBool(pending != null);
        },
    };
    // Each connection is served, all at once.
    for (idle[0..count]) |connection| try rawWrite(connection.client, "b");
    for (idle[0..count]) |connection| {
        try testing.expectEqual('b', try receiveByte(io, connection.client));
    }
    // One connection ends: the descriptors it frees are all the next one needs.
    count -= 1;
    _ = linux.close(idle[count].client);
    try idle[count].served.await(io);
    const client = pending orelse try clientSocket() orelse return error.TestSocketStarved;
    pending = null;
    errdefer _ = linux.close(client);
    try rawConnect(client, port);
    idle[count] = try acceptIdle(io, &server, client) orelse return error.TestAcceptStarved;
    count += 1;
    try rawWrite(client, "n");
    try testing.expectEqual('n', try receiveByte(io, client));
    return capacity;
}

test "net: epoll serves as many idle connections as io_uring under one fd limit" {
    const epoll = try measureCapacity(.epoll);
    // Two descriptors per connection, its client's and its server's, and every free slot
    // taken by one: none of weft's own (before issue 33, epoll took three: a `dup` for each
    // server read).
    try testing.expectEqual(2 * epoll.connections, epoll.fds_added);
    try testing.expect(epoll.connections >= epoll.slots_free / 2);
    const io_uring = measureCapacity(.io_uring) catch |err| switch (err) {
        error.Unsupported => return os.skipTest(@src(), "no io_uring to compare with"),
        else => return err,
    };
    try testing.expectEqual(2 * io_uring.connections, io_uring.fds_added);
    try testing.expect(io_uring.connections >= io_uring.slots_free / 2);
    // The same capacity for the same free descriptors.
    try testing.expectEqual(io_uring.slots_free, epoll.slots_free);
    try testing.expectEqual(io_uring.connections, epoll.connections);
}
