//! The `operate` entry: every operation runs natively. `net_receive` on the loop
//! (`net.zig`); the streaming file reads and writes on the loop, or on the blocking lane where
//! the loop cannot run them (`file.zig`); `device_io_control` on the blocking lane.
const std = @import("std");
const Io = std.Io;
const net = @import("net.zig");
const file = @import("file.zig");

pub fn operate(userdata: ?*anyopaque, operation: Io.Operation) Io.Cancelable!Io.Operation.Result {
    return switch (operation) {
        .net_receive => |o| .{ .net_receive = try net.netReceive(o) },
        .file_read_streaming => |o| .{
            .file_read_streaming = file.readStreaming(userdata, o) catch |err| switch (err) {
                error.Canceled => return error.Canceled,
                else => |e| e,
            },
        },
        .file_write_streaming => |o| .{
            .file_write_streaming = file.writeStreaming(userdata, o) catch |err| switch (err) {
                error.Canceled => return error.Canceled,
                else => |e| e,
            },
        },
        .device_io_control => |o| .{ .device_io_control = try file.deviceIoControl(userdata, o) },
    };
}
