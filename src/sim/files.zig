//! weft.Sim's file faults: std.Io.Threaded's file entries with errors and short transfers
//! drawn from the seed, so that a program's handling of a failing disk is tested like its
//! handling of a failing network, and a failure replays with its seed.
//!
//! Files are the real file system (see Sim.zig), and a fault is decided before the real call
//! is made: an injected error makes no call at all, an injected short read or write makes the
//! call with a shorter buffer, so the file holds exactly what the program was told it holds.
//! Each fault applies to every file operation of its kind; the dice come from a stream of
//! their own, so turning faults on does not change the schedule's choices.
const std = @import("std");
const Io = std.Io;
const File = Io.File;
const Threaded = Io.Threaded;
const State = @import("State.zig");
const disk_entries = @import("disk_entries.zig");

pub const Options = struct {
    /// Reads and writes fail with `error.InputOutput` (EIO).
    io_error_percent: u7 = 0,
    /// Writes fail with `error.NoSpaceLeft` (ENOSPC).
    no_space_percent: u7 = 0,
    /// Reads and positional writes move fewer bytes than asked (at least one).
    short_percent: u7 = 0,
    /// `sync` fails with `error.InputOutput`.
    sync_error_percent: u7 = 0,
};

const base = Threaded.io(@constCast(&Threaded.init_single_threaded)).vtable.*;

/// The entries that inject faults, for vtable.zig.
pub const entries = .{
    .{ "fileReadPositional", fileReadPositional },
    .{ "fileWritePositional", fileWritePositional },
    .{ "fileSync", fileSync },
};

fn fileReadPositional(
    userdata: ?*anyopaque,
    file: File,
    data: []const []u8,
    offset: u64,
) File.ReadPositionalError!usize {
    const sim = State.fromUserdata(userdata);
    const disk = disk_entries.diskOf(sim, file.handle);
    if (disk != null) sim.diskOperation(@src().fn_name);
    if (sim.fileFault(.io_error)) return error.InputOutput;
    var one: [1][]u8 = undefined;
    const chosen: []const []u8 = if (shortened(sim, data)) |first| blk: {
        one[0] = first;
        break :blk &one;
    } else data;
    if (disk) |d| return disk_entries.readPositional(d, file, chosen, offset);
    return base.fileReadPositional(userdata, file, chosen, offset);
}

fn fileWritePositional(
    userdata: ?*anyopaque,
    file: File,
    header: []const u8,
    data: []const []const u8,
    splat: usize,
    offset: u64,
) File.WritePositionalError!usize {
    const sim = State.fromUserdata(userdata);
    const disk = disk_entries.diskOf(sim, file.handle);
    if (disk != null) sim.diskOperation(@src().fn_name);
    if (sim.fileFault(.io_error)) return error.InputOutput;
    if (sim.fileFault(.no_space)) return error.NoSpaceLeft;
    if (header.len > 1 and sim.fileFault(.short)) {
        const length = 1 + sim.faultRandom().uintLessThan(usize, header.len - 1);
        const cut = header[0..length];
        if (disk) |d| return disk_entries.writePositional(d, file, cut, &.{""}, 0, offset);
        return base.fileWritePositional(userdata, file, header[0..length], &.{""}, 0, offset);
    }
    if (disk) |d| return disk_entries.writePositional(d, file, header, data, splat, offset);
    return base.fileWritePositional(userdata, file, header, data, splat, offset);
}

fn fileSync(userdata: ?*anyopaque, file: File) File.SyncError!void {
    const sim = State.fromUserdata(userdata);
    const disk = disk_entries.diskOf(sim, file.handle);
    if (disk != null) sim.diskOperation(@src().fn_name);
    if (sim.fileFault(.sync_error)) return error.InputOutput;
    if (disk) |d| {
        try disk_entries.sync(d, file);
        // ext4's fsync commits the journal: everything pending goes with it.
        if (sim.options.durability == .ext4_ordered) sim.commitJournal();
        return;
    }
    return base.fileSync(userdata, file);
}

/// The streaming operations (`operate`): reads fail or come back short, writes fail.
pub fn faultStreaming(sim: *State, operation: Io.Operation) ?Io.Operation.Result {
    switch (operation) {
        .file_read_streaming => {
            if (sim.fileFault(.io_error)) return .{ .file_read_streaming = error.InputOutput };
            return null;
        },
        .file_write_streaming => {
            if (sim.fileFault(.io_error)) return .{ .file_write_streaming = error.InputOutput };
            if (sim.fileFault(.no_space)) return .{ .file_write_streaming = error.NoSpaceLeft };
            return null;
        },
        else => return null,
    }
}

/// The first buffer of `data`, cut to a random shorter length, when a short read is drawn.
pub fn shortened(sim: *State, data: []const []u8) ?[]u8 {
    if (data.len == 0 or data[0].len < 2) return null;
    if (!sim.fileFault(.short)) return null;
    return data[0][0 .. 1 + sim.faultRandom().uintLessThan(usize, data[0].len - 1)];
}
