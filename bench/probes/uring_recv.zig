//! Design probe for weft's HTTP server (not part of weft): how much of an HTTP hello server's
//! CPU per request the kernel would save if weft received with a multishot `recv` into a
//! provided buffer ring instead of one `recv` per request, which on loopback arms an internal
//! poll almost every time (the request is not there yet when the recv is submitted: `perf stat`
//! counts 1.0 `io_uring_poll_arm` per request for weft-serve).
//!
//! A bare io_uring responder with no runtime: one thread, one ring (`SINGLE_ISSUER |
//! DEFER_TASKRUN`, as weft's), a multishot accept, and per connection a loop of "receive a
//! request, send the fixed hello response". The receive is one of:
//!   single     one `recv` per request into the connection's own buffer (what weft does)
//!   pollfirst  the same with `IORING_RECVSEND_POLL_FIRST` (skips the attempt that finds no data)
//!   multishot  one multishot `recv` per connection, buffers from a provided ring
//! It assumes one request per receive (wrk's keep-alive load: one request in flight per
//! connection) and answers every receive with one response.
//!
//! Run (ReleaseFast; bench/probes/uring_recv.sh runs the modes in turns under wrk):
//!   ./zigw run -OReleaseFast bench/probes/uring_recv.zig -- single|pollfirst|multishot PORT
const std = @import("std");
const linux = std.os.linux;
const IoUring = linux.IoUring;

const response = "HTTP/1.1 200 OK\r\nContent-Length: 11\r\nContent-Type: text/plain\r\n\r\nHello World";

const Mode = enum { single, pollfirst, multishot };

const connections_max = 1024;
const buffer_bytes = 4096;
const ring_buffers = 1024;
const spin_ns = 20 * std.time.ns_per_us;

const Op = enum(u8) { accept, recv, send };

fn userData(op: Op, slot: u32) u64 {
    return (@as(u64, slot) << 8) | @intFromEnum(op);
}

const Connection = struct {
    fd: linux.fd_t = -1,
    /// Armed multishot receive (multishot mode only).
    armed: bool = false,
    buffer: [buffer_bytes]u8 = undefined,
};

pub fn main(init: std.process.Init) !void {
    const gpa = init.gpa;
    var args = try init.minimal.args.iterateAllocator(gpa);
    defer args.deinit();
    _ = args.next();
    const mode_text = args.next() orelse return usage();
    const port_text = args.next() orelse return usage();
    const mode = std.meta.stringToEnum(Mode, mode_text) orelse return usage();
    const port = std.fmt.parseInt(u16, port_text, 10) catch return usage();

    const listener = try listen(port);
    var ring = try IoUring.init(256, linux.IORING_SETUP_SINGLE_ISSUER | linux.IORING_SETUP_DEFER_TASKRUN);
    defer ring.deinit();
    var group: ?IoUring.BufferGroup = if (mode == .multishot)
        try IoUring.BufferGroup.init(&ring, gpa, 1, buffer_bytes, ring_buffers)
    else
        null;
    defer if (group) |*g| g.deinit(gpa);

    const connections = try gpa.alloc(Connection, connections_max);
    defer gpa.free(connections);
    for (connections) |*connection| connection.* = .{};

    _ = try ring.accept_multishot(userData(.accept, 0), listener, null, null, linux.SOCK.CLOEXEC);
    var cqes: [256]linux.io_uring_cqe = undefined;
    while (true) {
        // As weft's lone executor does (`Executor.searchAlone`): poll for up to 20 µs before
        // sleeping in the kernel, so that a completion arriving meanwhile costs its sender no
        // wake-up of this thread (which otherwise makes the client, not the server, the
        // bottleneck: the probe then measures wake-ups, not receives).
        _ = try ring.submit();
        var spun_ns = monotonicNs();
        while (ring.cq_ready() == 0) {
            _ = try ring.enter(0, 0, linux.IORING_ENTER_GETEVENTS);
            if (ring.cq_ready() > 0) break;
            const now_ns = monotonicNs();
            if (now_ns - spun_ns > spin_ns) {
                _ = try ring.enter(0, 1, linux.IORING_ENTER_GETEVENTS);
                spun_ns = monotonicNs();
            }
        }
        const count = try ring.copy_cqes(&cqes, 0);
        for (cqes[0..count]) |cqe| {
            const op: Op = @enumFromInt(@as(u8, @truncate(cqe.user_data)));
            const slot: u32 = @intCast(cqe.user_data >> 8);
            switch (op) {
                .accept => {
                    if (cqe.res < 0) return error.AcceptFailed;
                    if (cqe.flags & linux.IORING_CQE_F_MORE == 0) {
                        _ = try ring.accept_multishot(userData(.accept, 0), listener, null, null, linux.SOCK.CLOEXEC);
                    }
                    const fd: linux.fd_t = cqe.res;
                    const free = for (connections, 0..) |*c, i| {
                        if (c.fd == -1) break i;
                    } else {
                        _ = linux.close(fd);
                        continue;
                    };
                    connections[free] = .{ .fd = fd };
                    try receive(&ring, mode, if (group) |*g| g else null, &connections[free], @intCast(free));
                },
                .recv => {
                    const connection = &connections[slot];
                    if (mode == .multishot and cqe.flags & linux.IORING_CQE_F_MORE == 0) connection.armed = false;
                    if (cqe.res <= 0) {
                        if (cqe.res == -@as(i32, @intFromEnum(linux.E.NOBUFS))) return error.OutOfBuffers;
                        if (connection.fd != -1) _ = linux.close(connection.fd);
                        connection.fd = -1;
                        continue;
                    }
                    if (group) |*g| try g.put(cqe);
                    _ = try ring.send(userData(.send, slot), connection.fd, response, 0);
                },
                .send => {
                    const connection = &connections[slot];
                    if (connection.fd == -1) continue;
                    if (cqe.res < 0) {
                        _ = linux.close(connection.fd);
                        connection.fd = -1;
                        continue;
                    }
                    if (mode != .multishot or !connection.armed) {
                        try receive(&ring, mode, if (group) |*g| g else null, connection, slot);
                    }
                },
            }
        }
    }
}

fn receive(ring: *IoUring, mode: Mode, group: ?*IoUring.BufferGroup, connection: *Connection, slot: u32) !void {
    switch (mode) {
        .single, .pollfirst => {
            const sqe = try ring.recv(userData(.recv, slot), connection.fd, .{ .buffer = &connection.buffer }, 0);
            if (mode == .pollfirst) sqe.ioprio |= linux.IORING_RECVSEND_POLL_FIRST;
        },
        .multishot => {
            _ = try group.?.recv_multishot(userData(.recv, slot), connection.fd, 0);
            connection.armed = true;
        },
    }
}

fn listen(port: u16) !linux.fd_t {
    const rc = linux.socket(linux.AF.INET, linux.SOCK.STREAM | linux.SOCK.CLOEXEC, 0);
    if (linux.errno(rc) != .SUCCESS) return error.SocketFailed;
    const fd: linux.fd_t = @intCast(rc);
    const one: c_int = 1;
    _ = linux.setsockopt(fd, linux.SOL.SOCKET, linux.SO.REUSEADDR, std.mem.asBytes(&one), @sizeOf(c_int));
    var address: linux.sockaddr.in = .{
        .port = std.mem.nativeToBig(u16, port),
        .addr = std.mem.nativeToBig(u32, 0x7f000001),
    };
    if (linux.errno(linux.bind(fd, @ptrCast(&address), @sizeOf(linux.sockaddr.in))) != .SUCCESS) return error.BindFailed;
    if (linux.errno(linux.listen(fd, 1024)) != .SUCCESS) return error.ListenFailed;
    return fd;
}

fn monotonicNs() u64 {
    var now: linux.timespec = undefined;
    _ = linux.clock_gettime(.MONOTONIC, &now);
    return @as(u64, @intCast(now.sec)) * std.time.ns_per_s + @as(u64, @intCast(now.nsec));
}

fn usage() error{InvalidArguments} {
    std.debug.print("usage: uring_recv single|pollfirst|multishot PORT\n", .{});
    return error.InvalidArguments;
}
