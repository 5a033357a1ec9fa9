const std = @import("std");
const weft = @import("weft");

pub fn main() !void {
    var rt = try weft.Runtime.init(std.heap.smp_allocator, .{});
    defer rt.deinit();
    const io = rt.io();

    var group: std.Io.Group = .init;
    for (0..10_000) |_| try group.concurrent(io, std.Io.sleep, .{ io, .fromSeconds(1), .awake });
    try group.await(io); // about one second
}
