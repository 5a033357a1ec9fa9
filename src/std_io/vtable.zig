//! weft's `std.Io.VTable`: native entries from the files beside this one, every other entry
//! delegated (see delegated.zig). `status` is what the README's table reports.
const std = @import("std");
const Io = std.Io;
const task = @import("task.zig");
const time = @import("time.zig");
const net = @import("net.zig");
const operate = @import("operate.zig");
const delegated = @import("delegated.zig");

pub const Status = enum { native, delegated };

/// Entries implemented by weft itself.
const native = .{
    .{ "crashHandler", task.crashHandler },
    .{ "async", task.async },
    .{ "concurrent", task.concurrent },
    .{ "await", task.await },
    .{ "cancel", task.cancel },
    .{ "groupAsync", task.groupAsync },
    .{ "groupConcurrent", task.groupConcurrent },
    .{ "groupAwait", task.groupAwait },
    .{ "groupCancel", task.groupCancel },
    .{ "recancel", task.recancel },
    .{ "swapCancelProtection", task.swapCancelProtection },
    .{ "checkCancel", task.checkCancel },
    .{ "futexWait", time.futexWait },
    .{ "futexWaitUncancelable", time.futexWaitUncancelable },
    .{ "futexWake", time.futexWake },
    .{ "operate", operate.operate },
    .{ "now", time.now },
    .{ "clockResolution", time.clockResolution },
    .{ "sleep", time.sleep },
    .{ "random", time.random },
    .{ "randomSecure", time.randomSecure },
    .{ "netListenIp", net.netListenIp },
    .{ "netAccept", net.netAccept },
    .{ "netBindIp", net.netBindIp },
    .{ "netConnectIp", net.netConnectIp },
    .{ "netListenUnix", net.netListenUnix },
    .{ "netConnectUnix", net.netConnectUnix },
    .{ "netSocketCreatePair", net.netSocketCreatePair },
    .{ "netSend", net.netSend },
    .{ "netRead", net.netRead },
    .{ "netWrite", net.netWrite },
    .{ "netWriteFile", net.netWriteFile },
    .{ "netClose", net.netClose },
    .{ "netShutdown", net.netShutdown },
    .{ "netInterfaceNameResolve", net.netInterfaceNameResolve },
    .{ "netInterfaceName", net.netInterfaceName },
    .{ "netLookup", net.netLookup },
};

pub fn status(comptime name: []const u8) Status {
    @setEvalBranchQuota(20_000);
    inline for (native) |pair| {
        if (comptime std.mem.eql(u8, pair[0], name)) return .native;
    }
    return .delegated;
}

pub const vtable: Io.VTable = blk: {
    @setEvalBranchQuota(20_000);
    var result: Io.VTable = undefined;
    for (@typeInfo(Io.VTable).@"struct".fields) |field| {
        @field(result, field.name) = for (native) |pair| {
            if (std.mem.eql(u8, pair[0], field.name)) break pair[1];
        } else delegated.entry(field.name);
    }
    break :blk result;
};
