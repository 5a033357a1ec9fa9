//! A loop operation (`Completion.Op`) run as the plain, blocking syscall it stands for.
//!
//! Two users: the blocking lane, which runs file system operations the loop cannot run
//! asynchronously (any of them on the epoll backend, those the kernel's io_uring lacks), and
//! threads weft does not run, which have no loop and simply block, as on std.Io.Threaded.
//!
//! Returns what the loop would report: the syscall's non-negative result, or `-errno`.
//! `EINTR` is retried (the caller's cancelation was checked before the call, and a thread
//! that is not a fiber cannot be canceled).
const std = @import("std");
const builtin = @import("builtin");
const linux = if (builtin.os.tag == .linux) std.os.linux else struct {};
const assert = std.debug.assert;
const os = @import("../os/linux.zig");
const Completion = @import("../loop/Completion.zig");

/// Runs `op` to completion on the calling thread. Socket operations are not accepted: they
/// have their own non-blocking path (`loop/nonblocking.zig`).
pub fn run(op: Completion.Op) i32 {
    // Bounded by the signals that interrupt the call: each EINTR is one delivered signal.
    while (true) {
        const rc = call(op);
        switch (os.errno(rc)) {
            .SUCCESS => {
                // Results are descriptors, byte counts of at most 0x7ffff000 (Linux caps a
                // single read or write there), or 0.
                assert(rc <= std.math.maxInt(i32));
                return @intCast(rc);
            },
            .INTR => continue,
            else => |e| return -@as(i32, @intFromEnum(e)),
        }
    }
}

/// Calls `function(args...)`, a raw syscall wrapper of `std.os.linux` returning `usize`, until
/// it is not interrupted; returns its result, or `-errno`, as `run` does.
pub fn retry(comptime function: anytype, args: std.meta.ArgsTuple(@TypeOf(function))) i32 {
    while (true) {
        const rc: usize = @call(.auto, function, args);
        switch (os.errno(rc)) {
            .SUCCESS => {
                assert(rc <= std.math.maxInt(i32)); // counts of a buffer, or 0
                return @intCast(rc);
            },
            .INTR => continue,
            else => |e| return -@as(i32, @intFromEnum(e)),
        }
    }
}

fn call(op: Completion.Op) usize {
    return switch (op) {
        .read => |o| if (o.offset) |offset|
            linux.preadv(o.fd, o.iovecs.ptr, o.iovecs.len, @bitCast(offset))
        else
            linux.readv(o.fd, o.iovecs.ptr, o.iovecs.len),
        .write => |o| if (o.offset) |offset|
            linux.pwritev(o.fd, o.iovecs.ptr, o.iovecs.len, @bitCast(offset))
        else
            linux.writev(o.fd, o.iovecs.ptr, o.iovecs.len),
        .poll => |o| poll: {
            var fds = [_]linux.pollfd{.{ .fd = o.fd, .events = @intCast(o.events), .revents = 0 }};
            const rc = linux.poll(&fds, 1, -1);
            if (os.errno(rc) != .SUCCESS) break :poll rc;
            break :poll @as(u16, @bitCast(fds[0].revents));
        },
        // See the function's doc.
        .accept, .connect, .recvmsg, .sendmsg, .recv, .send => unreachable,
        .openat => |o| linux.openat(o.fd, o.path, o.flags, o.mode),
        .statx => |o| linux.statx(o.fd, o.path, o.flags, o.mask, o.buffer),
        .fsync => |o| if (o.datasync) linux.fdatasync(o.fd) else linux.fsync(o.fd),
        .ftruncate => |o| linux.ftruncate(o.fd, @bitCast(o.length)),
        .unlinkat => |o| linux.unlinkat(o.fd, o.path, o.flags),
        .renameat => |o| linux.renameat2(o.fd, o.path, o.new_fd, o.new_path, @bitCast(o.flags)),
        .mkdirat => |o| linux.mkdirat(o.fd, o.path, o.mode),
        .symlinkat => |o| linux.symlinkat(o.target, o.fd, o.path),
        .linkat => |o| linux.linkat(o.fd, o.path, o.new_fd, o.new_path, @bitCast(o.flags)),
        .waitid => |o| linux.waitid(.PID, o.pid, o.info, o.options, null),
    };
}

test "syscall: file operations as blocking syscalls" {
    const testing = std.testing;
    var path_buffer: [64]u8 = undefined;
    const path = try std.fmt.bufPrintZ(&path_buffer, "/tmp/weft-syscall-{d}", .{os.currentTid()});
    const flags: linux.O = .{ .ACCMODE = .RDWR, .CREAT = true, .TRUNC = true, .CLOEXEC = true };
    const cwd = linux.AT.FDCWD;
    const fd = run(.{ .openat = .{ .fd = cwd, .path = path, .flags = flags, .mode = 0o600 } });
    try testing.expect(fd >= 0);
    defer os.closeFd(fd);
    defer _ = run(.{ .unlinkat = .{ .fd = cwd, .path = path, .flags = 0 } });
    const out = [_]std.posix.iovec_const{.{ .base = "hello", .len = 5 }};
    const written = run(.{ .write = .{ .fd = fd, .iovecs = &out, .offset = 0 } });
    try testing.expectEqual(@as(i32, 5), written);
    try testing.expectEqual(@as(i32, 0), run(.{ .ftruncate = .{ .fd = fd, .length = 3 } }));
    var statx: linux.Statx = undefined;
    const stat_op: Completion.Op = .{ .statx = .{
        .fd = fd,
        .path = "",
        .flags = linux.AT.EMPTY_PATH,
        .mask = .{ .SIZE = true },
        .buffer = &statx,
    } };
    try testing.expectEqual(@as(i32, 0), run(stat_op));
    try testing.expectEqual(@as(u64, 3), statx.size);
    const missing = run(.{ .unlinkat = .{ .fd = cwd, .path = "/nonexistent/x", .flags = 0 } });
    try testing.expectEqual(-@as(i32, @intFromEnum(linux.E.NOENT)), missing);
}
