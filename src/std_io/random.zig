//! std.Io randomness entries: a per-thread CSPRNG (`random`) and the kernel's (`randomSecure`).
const std = @import("std");
const Io = std.Io;
const os = @import("../os/linux.zig");
const Executor = @import("../sched/Executor.zig");

const Csprng = std.Random.DefaultCsprng;
threadlocal var csprng: ?Csprng = null;

/// A per-thread CSPRNG seeded from the kernel (time and address as a last resort).
pub fn random(userdata: ?*anyopaque, buffer: []u8) void {
    if (csprng == null) {
        @branchHint(.unlikely);
        var seed: [Csprng.secret_seed_length]u8 = undefined;
        os.getRandom(&seed) catch {
            @memset(&seed, 0);
            std.mem.writeInt(u64, seed[0..8], os.monotonicNs(), .native);
            std.mem.writeInt(usize, seed[8..][0..@sizeOf(usize)], @intFromPtr(userdata), .native);
        };
        csprng = .init(seed);
    }
    csprng.?.fill(buffer);
}

pub fn randomSecure(userdata: ?*anyopaque, buffer: []u8) Io.RandomSecureError!void {
    _ = userdata;
    if (Executor.currentTask()) |task| try task.checkCancel();
    os.getRandom(buffer) catch return error.EntropyUnavailable;
}
