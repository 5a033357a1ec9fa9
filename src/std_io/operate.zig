//! The `operate` entry: `net_receive` runs natively on the loop (`net.zig`); the file
//! streaming and device-control operations still run std.Io.Threaded's code on a worker thread
//! (`delegated.zig`) until files move onto the loop.
//!
//! `net_receive` cannot be delegated: weft's sockets are non-blocking, and Threaded's blocking
//! receive would see EAGAIN where it expects to wait.
const std = @import("std");
const Io = std.Io;
const net = @import("net.zig");
const delegated = @import("delegated.zig");

const delegated_operate = delegated.entry("operate");

pub fn operate(userdata: ?*anyopaque, operation: Io.Operation) Io.Cancelable!Io.Operation.Result {
    return switch (operation) {
        .net_receive => |o| .{ .net_receive = try net.netReceive(o) },
        .file_read_streaming, .file_write_streaming, .device_io_control => {
            return delegated_operate(userdata, operation);
        },
    };
}
