//! std.Io file entries, and the file operations of `operate`: each takes the runtime's state
//! from `userdata` and std's buffer lists apart (`iovecs.zig`), and calls the operation in
//! `fs/file.zig`, which makes the syscalls and maps their errno (where each runs, loop, lane
//! or direct, is said there). What is left here is std's own protocol: a write of a file's
//! bytes (`fileWriteFileStreaming`) and the ANSI escape entries.
const std = @import("std");
const Io = std.Io;
const File = Io.File;
const os = @import("../os/linux.zig");
const io_wait = @import("../sched/io_wait.zig");
const State = @import("State.zig");
const BlockingLane = @import("../fs/BlockingLane.zig");
const fs_file = @import("../fs/file.zig");
const iovecs_mod = @import("iovecs.zig");
const Iovecs = iovecs_mod.Iovecs;
const ReadIovecs = iovecs_mod.ReadIovecs;

pub fn stateOf(userdata: ?*anyopaque) *State {
    return @ptrCast(@alignCast(userdata.?));
}

/// The runtime's blocking lane and its Io.
pub fn blockingOf(userdata: ?*anyopaque) struct { *BlockingLane, Io } {
    const state = stateOf(userdata);
    return .{ &state.blocking, state.io() };
}

pub fn fileStat(userdata: ?*anyopaque, file: File) File.StatError!File.Stat {
    const blocking, const io = blockingOf(userdata);
    return fs_file.stat(blocking, io, file);
}

pub fn fileLength(userdata: ?*anyopaque, file: File) File.LengthError!u64 {
    const blocking, const io = blockingOf(userdata);
    return fs_file.length(blocking, io, file);
}

/// Closes each file. Never fails and is not a cancelation point (close is not retried on
/// EINTR on Linux: the descriptor is released either way).
pub fn fileClose(userdata: ?*anyopaque, files: []const File) void {
    _ = userdata;
    for (files) |file| {
        io_wait.closing(file.handle);
        os.closeFd(file.handle);
    }
}

/// Reads at `offset` into the first non-empty buffers of `data`; 0 at end of file.
/// Cancelation point (unless every buffer is empty: then nothing is read and 0 returned).
pub fn fileReadPositional(
    userdata: ?*anyopaque,
    file: File,
    data: []const []u8,
    offset: u64,
) File.ReadPositionalError!usize {
    const iovecs: ReadIovecs = .init(data);
    if (iovecs.count == 0) return 0;
    const blocking, const io = blockingOf(userdata);
    return fs_file.readPositional(blocking, io, file, iovecs.slice(), offset);
}

/// Writes `header`, `data` and the splat (std's `Writer.drain` layout) at `offset`, as far as
/// `iovecs_max` iovecs reach. Returns the bytes written.
pub fn fileWritePositional(
    userdata: ?*anyopaque,
    file: File,
    header: []const u8,
    data: []const []const u8,
    splat: usize,
    offset: u64,
) File.WritePositionalError!usize {
    var splat_buffer: [iovecs_mod.splat_buffer_bytes]u8 = undefined;
    const iovecs: Iovecs = .drain(header, data, splat, &splat_buffer);
    if (iovecs.count == 0) return 0;
    const blocking, const io = blockingOf(userdata);
    return fs_file.writePositional(blocking, io, file, iovecs.slice(), offset);
}

/// The `file_read_streaming` operation: reads at the file position; `error.EndOfStream` at
/// its end. Cancelation point (a read blocked on a pipe is canceled in the kernel).
pub fn readStreaming(
    userdata: ?*anyopaque,
    o: Io.Operation.FileReadStreaming,
) (Io.Cancelable || Io.Operation.FileReadStreaming.Error)!usize {
    const iovecs: ReadIovecs = .init(o.data);
    if (iovecs.count == 0) return 0;
    const blocking, const io = blockingOf(userdata);
    return fs_file.readStreaming(blocking, io, o.file, iovecs.slice());
}

/// The `file_write_streaming` operation: writes at the file position. Cancelation point.
pub fn writeStreaming(
    userdata: ?*anyopaque,
    o: Io.Operation.FileWriteStreaming,
) (Io.Cancelable || Io.Operation.FileWriteStreaming.Error)!usize {
    var splat_buffer: [iovecs_mod.splat_buffer_bytes]u8 = undefined;
    const iovecs: Iovecs = .drain(o.header, o.data, o.splat, &splat_buffer);
    if (iovecs.count == 0) return 0;
    const blocking, const io = blockingOf(userdata);
    return fs_file.writeStreaming(blocking, io, o.file, iovecs.slice());
}

/// Writes what `file_reader` holds buffered (after `header`) at the file position; reports
/// `error.EndOfStream` when the reader is at its known end, and otherwise
/// `error.Unimplemented`, upon which std's writers copy the file by reading and writing,
/// which here are loop operations. (Not yet done: a zero-copy `splice`/`copy_file_range`
/// path, which std.Io.Threaded takes on a worker thread.)
pub fn fileWriteFileStreaming(
    userdata: ?*anyopaque,
    file: File,
    header: []const u8,
    file_reader: *File.Reader,
    limit: Io.Limit,
) File.Writer.WriteFileError!usize {
    const buffered = try bufferedToWrite(header, file_reader, limit);
    const write: Io.Operation.FileWriteStreaming = .{
        .file = file,
        .header = header,
        .data = &.{buffered},
    };
    const n = try writeStreaming(userdata, write);
    file_reader.interface.toss(n -| header.len);
    return n;
}

/// `fileWriteFileStreaming` at `offset`.
pub fn fileWriteFilePositional(
    userdata: ?*anyopaque,
    file: File,
    header: []const u8,
    file_reader: *File.Reader,
    limit: Io.Limit,
    offset: u64,
) File.WriteFilePositionalError!usize {
    const buffered = try bufferedToWrite(header, file_reader, limit);
    const n = try fileWritePositional(userdata, file, header, &.{buffered}, 1, offset);
    file_reader.interface.toss(n -| header.len);
    return n;
}

/// The reader's buffered bytes a file-to-file write sends now, or why it sends none.
fn bufferedToWrite(
    header: []const u8,
    file_reader: *File.Reader,
    limit: Io.Limit,
) error{ EndOfStream, Unimplemented }![]const u8 {
    const buffered = file_reader.interface.buffered();
    if (header.len != 0 or buffered.len != 0) return limit.slice(buffered);
    if (file_reader.size) |size| if (size == file_reader.pos) return error.EndOfStream;
    return error.Unimplemented;
}

/// The `device_io_control` operation: `ioctl` on the blocking lane. Returns the result or
/// `-errno`.
pub fn deviceIoControl(
    userdata: ?*anyopaque,
    o: Io.Operation.DeviceIoControl,
) Io.Cancelable!Io.Operation.DeviceIoControl.Result {
    const blocking, const io = blockingOf(userdata);
    return fs_file.deviceIoControl(blocking, io, o);
}

pub fn fileSeekBy(userdata: ?*anyopaque, file: File, offset: i64) File.SeekError!void {
    _ = userdata;
    return fs_file.seekBy(file, offset);
}

pub fn fileSeekTo(userdata: ?*anyopaque, file: File, offset: u64) File.SeekError!void {
    _ = userdata;
    return fs_file.seekTo(file, offset);
}

pub fn fileSync(userdata: ?*anyopaque, file: File) File.SyncError!void {
    const blocking, const io = blockingOf(userdata);
    return fs_file.sync(blocking, io, file);
}

pub fn fileSetLength(userdata: ?*anyopaque, file: File, length: u64) File.SetLengthError!void {
    const blocking, const io = blockingOf(userdata);
    return fs_file.setLength(blocking, io, file, length);
}

pub fn fileSetPermissions(
    userdata: ?*anyopaque,
    file: File,
    permissions: File.Permissions,
) File.SetPermissionsError!void {
    const blocking, const io = blockingOf(userdata);
    return fs_file.setPermissions(blocking, io, file, permissions);
}

pub fn fileSetOwner(
    userdata: ?*anyopaque,
    file: File,
    owner: ?File.Uid,
    group: ?File.Gid,
) File.SetOwnerError!void {
    const blocking, const io = blockingOf(userdata);
    return fs_file.setOwner(blocking, io, file, owner, group);
}

pub fn fileIsTty(userdata: ?*anyopaque, file: File) Io.Cancelable!bool {
    _ = userdata;
    return fs_file.isTty(file);
}

/// On Linux a terminal understands ANSI escape codes: the same as `fileIsTty`.
pub fn fileSupportsAnsiEscapeCodes(userdata: ?*anyopaque, file: File) Io.Cancelable!bool {
    return fileIsTty(userdata, file);
}

/// Nothing to switch on Linux: succeeds for a terminal, `error.NotTerminalDevice` otherwise.
pub fn fileEnableAnsiEscapeCodes(
    userdata: ?*anyopaque,
    file: File,
) File.EnableAnsiEscapeCodesError!void {
    if (!try fileIsTty(userdata, file)) return error.NotTerminalDevice;
}

pub fn fileLock(userdata: ?*anyopaque, file: File, lock: File.Lock) File.LockError!void {
    return fs_file.lock(stateOf(userdata).io(), file, lock);
}

pub fn fileTryLock(userdata: ?*anyopaque, file: File, lock: File.Lock) File.LockError!bool {
    _ = userdata;
    return fs_file.tryLock(file, lock);
}

pub fn fileUnlock(userdata: ?*anyopaque, file: File) void {
    _ = userdata;
    fs_file.unlock(file);
}

pub fn fileDowngradeLock(userdata: ?*anyopaque, file: File) File.DowngradeLockError!void {
    _ = userdata;
    return fs_file.downgradeLock(file);
}

pub fn fileRealPath(userdata: ?*anyopaque, file: File, out_buffer: []u8) File.RealPathError!usize {
    _ = userdata;
    return fs_file.realPath(file, out_buffer);
}

pub fn fileSetTimestamps(
    userdata: ?*anyopaque,
    file: File,
    options: File.SetTimestampsOptions,
) File.SetTimestampsError!void {
    const blocking, const io = blockingOf(userdata);
    return fs_file.setTimestamps(blocking, io, file, options);
}
