//! weft's `std.Io.VTable`, every entry from the files beside this one. `status` is what the
//! table in docs/STD_IO.md reports.
const std = @import("std");
const Io = std.Io;
const task = @import("task.zig");
const time = @import("time.zig");
const futex = @import("futex.zig");
const random = @import("random.zig");
const net = @import("net.zig");
const operate = @import("operate.zig");
const file = @import("file.zig");
const dir = @import("dir.zig");
const process = @import("process.zig");
const batch = @import("batch.zig");
const memory_map = @import("memory_map.zig");
const spawn = @import("spawn.zig");
const coverage = @import("coverage.zig");

/// `native`: weft runs it on its loop or as a direct non-blocking syscall (file system
/// operations go to the blocking lane where the loop cannot run them: on epoll, or on a kernel
/// whose io_uring lacks the operation). `lane`: always runs on the runtime's blocking lane.
pub const Status = enum { native, lane };

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
    .{ "futexWait", futex.futexWait },
    .{ "futexWaitUncancelable", futex.futexWaitUncancelable },
    .{ "futexWake", futex.futexWake },
    .{ "operate", operate.operate },
    .{ "batchAwaitAsync", batch.batchAwaitAsync },
    .{ "batchAwaitConcurrent", batch.batchAwaitConcurrent },
    .{ "batchCancel", batch.batchCancel },
    .{ "now", time.now },
    .{ "clockResolution", time.clockResolution },
    .{ "sleep", time.sleep },
    .{ "random", random.random },
    .{ "randomSecure", random.randomSecure },
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
    .{ "dirCreateDir", dir.dirCreateDir },
    .{ "dirCreateDirPath", dir.dirCreateDirPath },
    .{ "dirCreateDirPathOpen", dir.dirCreateDirPathOpen },
    .{ "dirOpenDir", dir.dirOpenDir },
    .{ "dirStat", dir.dirStat },
    .{ "dirStatFile", dir.dirStatFile },
    .{ "dirCreateFile", dir.dirCreateFile },
    .{ "dirCreateFileAtomic", dir.dirCreateFileAtomic },
    .{ "dirOpenFile", dir.dirOpenFile },
    .{ "dirClose", dir.dirClose },
    .{ "dirDeleteFile", dir.dirDeleteFile },
    .{ "dirDeleteDir", dir.dirDeleteDir },
    .{ "dirRename", dir.dirRename },
    .{ "dirRenamePreserve", dir.dirRenamePreserve },
    .{ "dirSymLink", dir.dirSymLink },
    .{ "dirHardLink", dir.dirHardLink },
    .{ "dirRealPath", dir.dirRealPath },
    .{ "dirRealPathFile", dir.dirRealPathFile },
    .{ "fileRealPath", file.fileRealPath },
    .{ "fileHardLink", dir.fileHardLink },
    .{ "childWait", process.childWait },
    .{ "childKill", process.childKill },
    .{ "processCurrentPath", process.processCurrentPath },
    .{ "processSpawn", spawn.processSpawn },
    .{ "processSpawnPath", spawn.processSpawnPath },
    .{ "processReplace", spawn.processReplace },
    .{ "processReplacePath", spawn.processReplacePath },
    .{ "processSetCurrentDir", process.processSetCurrentDir },
    .{ "processExecutablePath", process.processExecutablePath },
    .{ "processExecutableOpen", process.processExecutableOpen },
    .{ "progressParentFile", process.progressParentFile },
    .{ "lockStderr", process.lockStderr },
    .{ "tryLockStderr", process.tryLockStderr },
    .{ "unlockStderr", process.unlockStderr },
    .{ "fileStat", file.fileStat },
    .{ "fileLength", file.fileLength },
    .{ "fileClose", file.fileClose },
    .{ "fileWritePositional", file.fileWritePositional },
    .{ "fileReadPositional", file.fileReadPositional },
    .{ "fileWriteFileStreaming", file.fileWriteFileStreaming },
    .{ "fileWriteFilePositional", file.fileWriteFilePositional },
    .{ "fileSeekBy", file.fileSeekBy },
    .{ "fileSeekTo", file.fileSeekTo },
    .{ "fileSync", file.fileSync },
    .{ "fileIsTty", file.fileIsTty },
    .{ "fileEnableAnsiEscapeCodes", file.fileEnableAnsiEscapeCodes },
    .{ "fileSupportsAnsiEscapeCodes", file.fileSupportsAnsiEscapeCodes },
    .{ "fileSetLength", file.fileSetLength },
    .{ "fileLock", file.fileLock },
    .{ "fileTryLock", file.fileTryLock },
    .{ "fileUnlock", file.fileUnlock },
    .{ "fileDowngradeLock", file.fileDowngradeLock },
    .{ "fileMemoryMapCreate", memory_map.fileMemoryMapCreate },
    .{ "fileMemoryMapDestroy", memory_map.fileMemoryMapDestroy },
    .{ "fileMemoryMapSetLength", memory_map.fileMemoryMapSetLength },
    .{ "fileMemoryMapRead", memory_map.fileMemoryMapRead },
    .{ "fileMemoryMapWrite", memory_map.fileMemoryMapWrite },
};

/// Entries that always run on the runtime's blocking lane (no loop operation exists for them).
const lane = .{
    .{ "dirAccess", dir.dirAccess },
    .{ "processSetCurrentPath", process.processSetCurrentPath },
    .{ "dirRead", dir.dirRead },
    .{ "dirReadLink", dir.dirReadLink },
    .{ "dirSetOwner", dir.dirSetOwner },
    .{ "dirSetPermissions", dir.dirSetPermissions },
    .{ "dirSetFilePermissions", dir.dirSetFilePermissions },
    .{ "dirSetFileOwner", dir.dirSetFileOwner },
    .{ "dirSetTimestamps", dir.dirSetTimestamps },
    .{ "fileSetTimestamps", file.fileSetTimestamps },
    .{ "fileSetOwner", file.fileSetOwner },
    .{ "fileSetPermissions", file.fileSetPermissions },
};

pub fn status(comptime name: []const u8) Status {
    @setEvalBranchQuota(20_000);
    inline for (native) |pair| {
        if (comptime std.mem.eql(u8, pair[0], name)) return .native;
    }
    inline for (lane) |pair| {
        if (comptime std.mem.eql(u8, pair[0], name)) return .lane;
    }
    @compileError("no std.Io.VTable entry named " ++ name);
}

pub const vtable: Io.VTable = blk: {
    @setEvalBranchQuota(20_000);
    var result: Io.VTable = undefined;
    for (@typeInfo(Io.VTable).@"struct".fields, 0..) |field, index| {
        const function = for (native ++ lane) |pair| {
            if (std.mem.eql(u8, pair[0], field.name)) break pair[1];
        } else @compileError("weft implements no std.Io.VTable." ++ field.name);
        @field(result, field.name) = if (coverage.enabled)
            coverage.counted(index, function)
        else
            function;
    }
    break :blk result;
};
