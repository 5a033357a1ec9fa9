//! Network interface names and indexes (if_nametoindex / if_indextoname), by the netdevice(7)
//! ioctls SIOCGIFINDEX and SIOCGIFNAME. They answer from the kernel's table at once, so they
//! are direct syscalls, not loop operations.
//!
//! The ioctls need a socket of any family; a Unix datagram socket is used because every kernel
//! has one, even without an IP stack (rejected: reading /sys/class/net, which may be missing
//! in a container and costs a directory walk).
const std = @import("std");
const builtin = @import("builtin");
const linux = if (builtin.os.tag == .linux) std.os.linux else struct {};
const assert = std.debug.assert;
const net = std.Io.net;
const os = @import("../os/linux.zig");
const socket = @import("socket.zig");

pub const IndexError = error{
    InterfaceNotFound,
    AccessDenied,
    SystemResources,
    Unexpected,
};

/// The index of the interface called `name` (if_nametoindex).
pub fn indexOf(name: *const net.Interface.Name) IndexError!u32 {
    const fd = try controlSocket();
    defer os.closeFd(fd);
    var request: linux.ifreq = .{ .ifrn = .{ .name = @splat(0) }, .ifru = undefined };
    const text = name.toSlice();
    comptime assert(net.Interface.Name.max_len < linux.IFNAMESIZE); // room for the NUL
    @memcpy(request.ifrn.name[0..text.len], text);
    while (true) switch (os.errno(linux.ioctl(fd, linux.SIOCGIFINDEX, @intFromPtr(&request)))) {
        .SUCCESS => {
            const index: u32 = @bitCast(request.ifru.ivalue);
            assert(index != 0); // the kernel numbers interfaces from 1
            return index;
        },
        .INTR => continue,
        .NODEV => return error.InterfaceNotFound,
        .ACCES, .PERM => return error.AccessDenied,
        .NOMEM => return error.SystemResources,
        // Our own control socket and request: a bug of this file.
        .BADF, .FAULT, .INVAL, .NOTTY => |e| return os.errnoBug(e),
        else => |e| return os.unexpectedErrno(e),
    };
}

pub const NameError = error{
    InterfaceNotFound,
    SystemResources,
    Unexpected,
};

/// The name of the interface with `index` (if_indextoname).
pub fn nameOf(index: u32) NameError!net.Interface.Name {
    assert(index != 0);
    // An index the kernel's signed field cannot hold names no interface.
    const kernel_index = std.math.cast(i32, index) orelse return error.InterfaceNotFound;
    const fd = controlSocket() catch |err| switch (err) {
        error.AccessDenied => return error.Unexpected, // a Unix socket is never denied
        else => |e| return e,
    };
    defer os.closeFd(fd);
    var request: linux.ifreq = .{
        .ifrn = .{ .name = @splat(0) },
        .ifru = .{ .ivalue = kernel_index },
    };
    while (true) switch (os.errno(linux.ioctl(fd, linux.SIOCGIFNAME, @intFromPtr(&request)))) {
        .SUCCESS => {
            const text = std.mem.sliceTo(&request.ifrn.name, 0);
            assert(text.len > 0);
            // The kernel's names fit IFNAMSIZ with their NUL, as Name does.
            return net.Interface.Name.fromSlice(text) catch unreachable;
        },
        .INTR => continue,
        .NODEV => return error.InterfaceNotFound,
        .NOMEM => return error.SystemResources,
        // Our own control socket and request: a bug of this file.
        .BADF, .FAULT, .INVAL, .NOTTY => |e| return os.errnoBug(e),
        else => |e| return os.unexpectedErrno(e),
    };
}

fn controlSocket() IndexError!socket.fd_t {
    // Internal: it only carries ioctls (`socket.zig`).
    const flags = socket.flags_nonblocking;
    return socket.open(linux.AF.UNIX, .dgram, null, flags) catch |err| switch (err) {
        error.ProcessFdQuotaExceeded, error.SystemFdQuotaExceeded => error.SystemResources,
        error.SystemResources => error.SystemResources,
        error.AddressFamilyUnsupported,
        error.ProtocolUnsupportedBySystem,
        error.ProtocolUnsupportedByAddressFamily,
        error.SocketModeUnsupported,
        => error.Unexpected, // Linux always has Unix datagram sockets
        error.Unexpected => error.Unexpected,
    };
}

test "interface: lo by name and by index" {
    const lo: net.Interface.Name = try .fromSlice("lo");
    const index = try indexOf(&lo);
    const name = try nameOf(index);
    try std.testing.expectEqualStrings("lo", name.toSlice());
}

test "interface: unknown names and indexes are InterfaceNotFound" {
    const missing: net.Interface.Name = try .fromSlice("weft-nope0");
    try std.testing.expectError(error.InterfaceNotFound, indexOf(&missing));
    try std.testing.expectError(error.InterfaceNotFound, nameOf(std.math.maxInt(u32)));
    try std.testing.expectError(error.InterfaceNotFound, nameOf(std.math.maxInt(i32)));
}
