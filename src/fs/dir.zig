//! Directory operations: opening and creating files and directories, stat by path, access,
//! deleting, renaming, symbolic and hard links, reading a directory, paths, permissions, owner
//! and timestamps by path, and files that appear only when finished (`createFileAtomic`).
//! std.Io's directory entries (`std_io/dir.zig`) are these, behind the VTable's signatures;
//! the syscalls and their errno triage live here, below the VTable, as the socket calls live
//! in `net/`, so that std_io/ only adapts.
//!
//! Opening a cached path happens on the calling executor with `openat2(RESOLVE_CACHED)`
//! (`nowait.zig`: a directory or regular file after a type and mount check), and stat of a
//! cached path on a mount that answers from memory is that open as `O_PATH`, a `statx` and a
//! `close`. Opening otherwise, creating, stat, deleting, renaming and linking are loop
//! operations (io_uring's openat, statx, unlinkat, renameat, mkdirat, symlinkat, linkat), or
//! calls on the blocking lane where the loop cannot run them (`BlockingLane.zig`); reading a
//! directory (`getdents64`), reading a link and `faccessat` have no asynchronous form and
//! always run on the lane. Every operation with `Canceled` in its error set is a cancelation
//! point.
//!
//! Errors are mapped from errno exactly as std.Io.Threaded maps them on Linux, under weft's
//! errno policy (`os/linux.zig`): an errno only a bug can cause goes to `errnoBug` (a panic in
//! Debug builds, where Threaded panics too), one a correct program may meet without a name in
//! the error set to `unexpectedErrno`. The maps several operations share are in `errno.zig`.
//! Paths are copied into a NUL-terminated buffer on the caller's stack, which outlives the
//! operation (the loop and the lane borrow it).
const std = @import("std");
const builtin = @import("builtin");
const Io = std.Io;
const Dir = Io.Dir;
const File = Io.File;
const linux = if (builtin.os.tag == .linux) std.os.linux else struct {};
const posix = std.posix;
const assert = std.debug.assert;
const Threaded = Io.Threaded;
const errnoBug = os.errnoBug;
const pathToPosix = Threaded.pathToPosix;
const os = @import("../os/linux.zig");
const Op = @import("../loop/Completion.zig").Op;
const Executor = @import("../sched/Executor.zig");
const BlockingLane = @import("BlockingLane.zig");
const fs_file = @import("file.zig");
const fs_errno = @import("errno.zig");
const nowait = @import("nowait.zig");

const errnoOf = fs_errno.errnoOf;
const openError = fs_errno.openError;
const unlinkError = fs_errno.unlinkError;
const renameError = fs_errno.renameError;
const linkError = fs_errno.linkError;
const createEntryError = fs_errno.createEntryError;

const PathBuffer = [posix.PATH_MAX]u8;

/// `openat`: at once where the path is cached and the open cannot wait (`nowait.zig`),
/// else on the loop or the blocking lane. Returns the descriptor or `-errno`. Cancelation
/// point.
fn open(blocking: *BlockingLane, io: Io, op_open: Op.Openat) Io.Cancelable!i32 {
    if (Executor.currentTask()) |task| {
        try task.checkCancel();
        if (nowait.open(op_open.fd, op_open.path, op_open.flags)) |result| {
            _ = Executor.cooperate(task);
            return result;
        }
    }
    return blocking.perform(io, .{ .openat = op_open });
}

/// `openat` for a file, then the checks and the lock std asks for.
fn openFileAndLock(
    blocking: *BlockingLane,
    io: Io,
    dir: Dir,
    sub_path: []const u8,
    flags: linux.O,
    mode: linux.mode_t,
    lock: File.Lock,
    lock_nonblocking: bool,
    allow_directory: bool,
) File.OpenError!File {
    var path_buffer: PathBuffer = undefined;
    const path = try pathToPosix(sub_path, &path_buffer);
    const op_open: Op.Openat = .{ .fd = dir.handle, .path = path, .flags = flags, .mode = mode };
    const result = try open(blocking, io, op_open);
    if (result < 0) return openError(errnoOf(result));
    const file: File = .{ .handle = result, .flags = .{ .nonblocking = false } };
    errdefer os.closeFd(file.handle);
    if (!allow_directory) {
        const is_dir = if (fs_file.stat(blocking, io, file)) |stat|
            stat.kind == .directory
        else |err| switch (err) {
            error.Streaming => false, // whether it is a directory cannot be known
            else => |e| return e,
        };
        if (is_dir) return error.IsDir;
    }
    if (lock != .none) {
        if (lock_nonblocking) {
            if (!try fs_file.tryLock(file, lock)) return error.WouldBlock;
        } else {
            try fs_file.lock(io, file, lock);
        }
    }
    return file;
}

pub fn openFile(
    blocking: *BlockingLane,
    io: Io,
    dir: Dir,
    sub_path: []const u8,
    options: Dir.OpenFileOptions,
) File.OpenError!File {
    var flags: linux.O = .{
        .ACCMODE = switch (options.mode) {
            .read_only => .RDONLY,
            .write_only => .WRONLY,
            .read_write => .RDWR,
        },
        .NOFOLLOW = !options.follow_symlinks,
        .CLOEXEC = true,
        .NOCTTY = !options.allow_ctty,
        .PATH = options.path_only,
    };
    if (@hasField(linux.O, "LARGEFILE")) flags.LARGEFILE = true;
    const lock, const nonblocking = .{ options.lock, options.lock_nonblocking };
    return openFileAndLock(
        blocking,
        io,
        dir,
        sub_path,
        flags,
        0,
        lock,
        nonblocking,
        options.allow_directory,
    );
}

pub fn createFile(
    blocking: *BlockingLane,
    io: Io,
    dir: Dir,
    sub_path: []const u8,
    options: Dir.CreateFileOptions,
) File.OpenError!File {
    var flags: linux.O = .{
        .ACCMODE = if (options.read) .RDWR else .WRONLY,
        .CREAT = true,
        .TRUNC = options.truncate,
        .EXCL = options.exclusive,
        .CLOEXEC = true,
    };
    if (@hasField(linux.O, "LARGEFILE")) flags.LARGEFILE = true;
    const mode = options.permissions.toMode();
    const lock, const nonblocking = .{ options.lock, options.lock_nonblocking };
    return openFileAndLock(blocking, io, dir, sub_path, flags, mode, lock, nonblocking, true);
}

pub fn openDir(
    blocking: *BlockingLane,
    io: Io,
    dir: Dir,
    sub_path: []const u8,
    options: Dir.OpenOptions,
) Dir.OpenError!Dir {
    var path_buffer: PathBuffer = undefined;
    const path = try pathToPosix(sub_path, &path_buffer);
    const flags: linux.O = .{
        .ACCMODE = .RDONLY,
        .NOFOLLOW = !options.follow_symlinks,
        .DIRECTORY = true,
        .CLOEXEC = true,
        // A directory only used as a base for paths needs no read access.
        .PATH = !options.iterate,
    };
    const op_open: Op.Openat = .{ .fd = dir.handle, .path = path.ptr, .flags = flags, .mode = 0 };
    const result = try open(blocking, io, op_open);
    if (result >= 0) return .{ .handle = result };
    return switch (errnoOf(result)) {
        // A bad path pointer; a directory used after close; BUSY only with O_EXCL, not passed.
        .FAULT, .BADF, .BUSY => |e| errnoBug(e),
        else => |e| fs_errno.openAnyError(e),
    };
}

pub fn statFile(
    blocking: *BlockingLane,
    io: Io,
    dir: Dir,
    sub_path: []const u8,
    options: Dir.StatFileOptions,
) Dir.StatFileError!File.Stat {
    var path_buffer: PathBuffer = undefined;
    const path = try pathToPosix(sub_path, &path_buffer);
    const no_follow: u32 = if (options.follow_symlinks) 0 else linux.AT.SYMLINK_NOFOLLOW;
    const mask = Threaded.linux_statx_request;
    var statx = std.mem.zeroes(linux.Statx);
    const fast: ?i32 = if (Executor.currentTask()) |task| fast: {
        try task.checkCancel();
        const result = nowait.statPath(dir.handle, path, options.follow_symlinks, mask, &statx);
        if (result != null) _ = Executor.cooperate(task);
        break :fast result;
    } else null;
    const result = if (fast) |result| result else try blocking.perform(io, .{ .statx = .{
        .fd = dir.handle,
        .path = path.ptr,
        .flags = linux.AT.NO_AUTOMOUNT | no_follow,
        .mask = mask,
        .buffer = &statx,
    } });
    if (result >= 0) return Threaded.statFromLinux(&statx);
    return switch (errnoOf(result)) {
        .ACCES => error.AccessDenied,
        .LOOP => error.SymLinkLoop,
        .NOENT => error.FileNotFound,
        .NOTDIR => error.NotDir,
        .NOMEM => error.SystemResources,
        // pathToPosix checks the path's length, not each name's: a name over 255 bytes is
        // the caller's input, not weft's bug.
        .NAMETOOLONG => error.NameTooLong,
        .BADF, .FAULT, .INVAL => |e| errnoBug(e),
        else => |e| os.unexpectedErrno(e),
    };
}

/// `faccessat` (`faccessat2` when symlinks are not followed) on the blocking lane.
pub fn access(
    blocking: *BlockingLane,
    io: Io,
    dir: Dir,
    sub_path: []const u8,
    options: Dir.AccessOptions,
) Dir.AccessError!void {
    var path_buffer: PathBuffer = undefined;
    const path = try pathToPosix(sub_path, &path_buffer);
    const flags: u32 = if (options.follow_symlinks) 0 else linux.AT.SYMLINK_NOFOLLOW;
    const mode: u32 = @as(u32, if (options.read) linux.R_OK else 0) |
        @as(u32, if (options.write) linux.W_OK else 0) |
        @as(u32, if (options.execute) linux.X_OK else 0);
    const args = .{ dir.handle, path.ptr, mode, flags };
    const result = try blocking.syscall(io, linux.faccessat, args);
    if (result >= 0) return;
    return switch (errnoOf(result)) {
        .ACCES => error.AccessDenied,
        .PERM => error.PermissionDenied,
        .ROFS => error.ReadOnlyFileSystem,
        .LOOP => error.SymLinkLoop,
        .TXTBSY => error.FileBusy,
        .NOTDIR, .NOENT => error.FileNotFound,
        .NAMETOOLONG => error.NameTooLong,
        .IO => error.InputOutput,
        .NOMEM => error.SystemResources,
        .ILSEQ => error.BadPathName,
        .INVAL, .FAULT => |e| errnoBug(e), // bad mode or flags; a bad path pointer
        else => |e| os.unexpectedErrno(e),
    };
}

pub fn createDir(
    blocking: *BlockingLane,
    io: Io,
    dir: Dir,
    sub_path: []const u8,
    permissions: Dir.Permissions,
) Dir.CreateDirError!void {
    var path_buffer: PathBuffer = undefined;
    const path = try pathToPosix(sub_path, &path_buffer);
    const mode = permissions.toMode();
    const op_mkdir: Op.Mkdirat = .{ .fd = dir.handle, .path = path.ptr, .mode = mode };
    const result = try blocking.perform(io, .{ .mkdirat = op_mkdir });
    if (result >= 0) return;
    return switch (errnoOf(result)) {
        .MLINK => error.LinkQuotaExceeded,
        .NOTCONN => error.FileNotFound,
        .BADF => |e| errnoBug(e), // a directory used after close
        else => |e| createEntryError(e),
    };
}

/// Creates every missing directory of `sub_path`: walks back from the last component to the
/// first that exists, then forward creating each. An existing component that is not a
/// directory is `error.NotDir` (a dangling symlink would otherwise loop).
pub fn createDirPath(
    blocking: *BlockingLane,
    io: Io,
    dir: Dir,
    sub_path: []const u8,
    permissions: Dir.Permissions,
) Dir.CreateDirPathError!Dir.CreatePathStatus {
    var components = Dir.path.componentIterator(sub_path);
    var status: Dir.CreatePathStatus = .existed;
    var component = components.last() orelse return error.BadPathName;
    // Bounded by the components of `sub_path`: each round moves one back or one forward, and
    // never back past one it created.
    while (true) {
        if (createDir(blocking, io, dir, component.path, permissions)) |_| {
            status = .created;
        } else |err| switch (err) {
            error.PathAlreadyExists => {
                const kind = try pathKind(blocking, io, dir, component.path);
                if (kind != .directory) return error.NotDir;
            },
            error.FileNotFound => |e| {
                component = components.previous() orelse return e;
                continue;
            },
            else => |e| return e,
        }
        component = components.next() orelse return status;
    }
}

/// The kind of `sub_path` itself (a symlink is not followed).
fn pathKind(
    blocking: *BlockingLane,
    io: Io,
    dir: Dir,
    sub_path: []const u8,
) Dir.CreateDirPathError!File.Kind {
    var path_buffer: PathBuffer = undefined;
    const path = try pathToPosix(sub_path, &path_buffer);
    var statx = std.mem.zeroes(linux.Statx);
    const result = try blocking.perform(io, .{ .statx = .{
        .fd = dir.handle,
        .path = path.ptr,
        .flags = linux.AT.NO_AUTOMOUNT | linux.AT.SYMLINK_NOFOLLOW,
        .mask = .{ .TYPE = true },
        .buffer = &statx,
    } });
    if (result >= 0) {
        if (!statx.mask.TYPE) return error.Unexpected;
        return Threaded.statxKind(statx.mode);
    }
    return switch (errnoOf(result)) {
        .NOMEM => error.SystemResources,
        else => |e| os.unexpectedErrno(e),
    };
}

pub fn createDirPathOpen(
    blocking: *BlockingLane,
    io: Io,
    dir: Dir,
    sub_path: []const u8,
    permissions: Dir.Permissions,
    options: Dir.OpenOptions,
) Dir.CreateDirPathOpenError!Dir {
    return openDir(blocking, io, dir, sub_path, options) catch |err| switch (err) {
        error.FileNotFound => {
            _ = try createDirPath(blocking, io, dir, sub_path, permissions);
            return openDir(blocking, io, dir, sub_path, options);
        },
        else => |e| return e,
    };
}

pub fn deleteFile(
    blocking: *BlockingLane,
    io: Io,
    dir: Dir,
    sub_path: []const u8,
) Dir.DeleteFileError!void {
    const result = try unlink(blocking, io, dir, sub_path, 0);
    if (result >= 0) return;
    return switch (errnoOf(result)) {
        .ISDIR => error.IsDir,
        .NOTEMPTY => |e| errnoBug(e), // only with AT_REMOVEDIR, not passed here
        else => |e| unlinkError(e),
    };
}

pub fn deleteDir(
    blocking: *BlockingLane,
    io: Io,
    dir: Dir,
    sub_path: []const u8,
) Dir.DeleteDirError!void {
    const result = try unlink(blocking, io, dir, sub_path, linux.AT.REMOVEDIR);
    if (result >= 0) return;
    return switch (errnoOf(result)) {
        .NOTEMPTY => error.DirNotEmpty,
        .ISDIR => |e| errnoBug(e), // only without AT_REMOVEDIR
        else => |e| unlinkError(e),
    };
}

fn unlink(
    blocking: *BlockingLane,
    io: Io,
    dir: Dir,
    sub_path: []const u8,
    flags: u32,
) (Dir.PathNameError || Io.Cancelable)!i32 {
    var path_buffer: PathBuffer = undefined;
    const path = try pathToPosix(sub_path, &path_buffer);
    const op_unlink: Op = .{ .unlinkat = .{ .fd = dir.handle, .path = path.ptr, .flags = flags } };
    return blocking.perform(io, op_unlink);
}

pub fn rename(
    blocking: *BlockingLane,
    io: Io,
    old_dir: Dir,
    old_sub_path: []const u8,
    new_dir: Dir,
    new_sub_path: []const u8,
) Dir.RenameError!void {
    const result = try renameAt(blocking, io, old_dir, old_sub_path, new_dir, new_sub_path, 0);
    if (result >= 0) return;
    return switch (errnoOf(result)) {
        .EXIST, .NOTEMPTY => error.DirNotEmpty,
        .IO => error.HardwareFailure,
        else => |e| renameError(e),
    };
}

/// Renames without replacing: `error.PathAlreadyExists` if the new path exists (renameat2
/// `RENAME_NOREPLACE`).
pub fn renamePreserve(
    blocking: *BlockingLane,
    io: Io,
    old_dir: Dir,
    old_sub_path: []const u8,
    new_dir: Dir,
    new_sub_path: []const u8,
) Dir.RenamePreserveError!void {
    const no_replace: u32 = @bitCast(linux.RENAME{ .NOREPLACE = true });
    const result = try renameAt(
        blocking,
        io,
        old_dir,
        old_sub_path,
        new_dir,
        new_sub_path,
        no_replace,
    );
    if (result >= 0) return;
    return switch (errnoOf(result)) {
        .EXIST => error.PathAlreadyExists,
        .NOTEMPTY => error.DirNotEmpty,
        else => |e| renameError(e),
    };
}

fn renameAt(
    blocking: *BlockingLane,
    io: Io,
    old_dir: Dir,
    old_sub_path: []const u8,
    new_dir: Dir,
    new_sub_path: []const u8,
    flags: u32,
) (Dir.PathNameError || Io.Cancelable)!i32 {
    var old_buffer: PathBuffer = undefined;
    var new_buffer: PathBuffer = undefined;
    const old_path = try pathToPosix(old_sub_path, &old_buffer);
    const new_path = try pathToPosix(new_sub_path, &new_buffer);
    return blocking.perform(io, .{ .renameat = .{
        .fd = old_dir.handle,
        .path = old_path.ptr,
        .new_fd = new_dir.handle,
        .new_path = new_path.ptr,
        .flags = flags,
    } });
}

pub fn symLink(
    blocking: *BlockingLane,
    io: Io,
    dir: Dir,
    target_path: []const u8,
    sym_link_path: []const u8,
    flags: Dir.SymLinkFlags,
) Dir.SymLinkError!void {
    _ = flags; // only Windows tells directory links apart
    var target_buffer: PathBuffer = undefined;
    var link_buffer: PathBuffer = undefined;
    const target = try pathToPosix(target_path, &target_buffer);
    const link = try pathToPosix(sym_link_path, &link_buffer);
    const op_symlink: Op.Symlinkat = .{ .fd = dir.handle, .path = link.ptr, .target = target.ptr };
    const result = try blocking.perform(io, .{ .symlinkat = op_symlink });
    if (result >= 0) return;
    return switch (errnoOf(result)) {
        .IO => error.FileSystem,
        .INVAL => |e| errnoBug(e), // bad arguments
        else => |e| createEntryError(e),
    };
}

/// `readlinkat` on the blocking lane; returns the length of the target written to `buffer`.
pub fn readLink(
    blocking: *BlockingLane,
    io: Io,
    dir: Dir,
    sub_path: []const u8,
    buffer: []u8,
) Dir.ReadLinkError!usize {
    var path_buffer: PathBuffer = undefined;
    const path = try pathToPosix(sub_path, &path_buffer);
    const args = .{ dir.handle, path.ptr, buffer.ptr, buffer.len };
    const result = try blocking.syscall(io, linux.readlinkat, args);
    if (result >= 0) return @intCast(result);
    return fs_errno.readLinkError(errnoOf(result));
}

pub fn hardLink(
    blocking: *BlockingLane,
    io: Io,
    old_dir: Dir,
    old_sub_path: []const u8,
    new_dir: Dir,
    new_sub_path: []const u8,
    options: Dir.HardLinkOptions,
) Dir.HardLinkError!void {
    var old_buffer: PathBuffer = undefined;
    var new_buffer: PathBuffer = undefined;
    const old_path = try pathToPosix(old_sub_path, &old_buffer);
    const new_path = try pathToPosix(new_sub_path, &new_buffer);
    const result = try blocking.perform(io, .{ .linkat = .{
        .fd = old_dir.handle,
        .path = old_path.ptr,
        .new_fd = new_dir.handle,
        .new_path = new_path.ptr,
        .flags = if (options.follow_symlinks) linux.AT.SYMLINK_FOLLOW else 0,
    } });
    if (result >= 0) return;
    return linkError(errnoOf(result));
}

/// A hard link to an open file (`linkat` with `AT_EMPTY_PATH`). Without `follow_symlinks`,
/// a kernel that refuses empty paths to unprivileged callers is asked through the file's
/// `/proc/self/fd` entry instead, as std.Io.Threaded does.
pub fn hardLinkFile(
    blocking: *BlockingLane,
    io: Io,
    file: File,
    new_dir: Dir,
    new_sub_path: []const u8,
    options: File.HardLinkOptions,
) File.HardLinkError!void {
    var new_buffer: PathBuffer = undefined;
    const new_path = try pathToPosix(new_sub_path, &new_buffer);
    const follow: u32 = if (options.follow_symlinks) linux.AT.SYMLINK_FOLLOW else 0;
    const result = try blocking.perform(io, .{ .linkat = .{
        .fd = file.handle,
        .path = "",
        .new_fd = new_dir.handle,
        .new_path = new_path.ptr,
        .flags = follow | linux.AT.EMPTY_PATH,
    } });
    if (result >= 0) return;
    const e = errnoOf(result);
    if (e != .NOENT or options.follow_symlinks) return linkError(e);
    var proc_buffer: ["/proc/self/fd/-2147483648\x00".len]u8 = undefined;
    const proc_path = std.fmt.bufPrintZ(&proc_buffer, "/proc/self/fd/{d}", .{file.handle}) catch
        unreachable; // sized for any descriptor
    const retried = try blocking.perform(io, .{ .linkat = .{
        .fd = linux.AT.FDCWD,
        .path = proc_path.ptr,
        .new_fd = new_dir.handle,
        .new_path = new_path.ptr,
        .flags = linux.AT.SYMLINK_FOLLOW,
    } });
    if (retried >= 0) return;
    return linkError(errnoOf(retried));
}

/// Fills `entries` from the reader's buffer, refilling it with `getdents64` on the blocking
/// lane when it is used up (and only then, since the names point into it). Returns the number
/// of entries, 0 when the directory is exhausted. `.` and `..` are left out.
pub fn read(
    blocking: *BlockingLane,
    io: Io,
    reader: *Dir.Reader,
    entries: []Dir.Entry,
) Dir.Reader.Error!usize {
    var count: usize = 0;
    // Bounded by `entries.len` and one refill: names must stay valid, so the buffer is
    // refilled only before the first entry of this call.
    while (count < entries.len) {
        if (reader.index == reader.end) {
            if (count > 0) break;
            if (!try refill(blocking, io, reader)) return 0;
        }
        const record: *align(1) linux.dirent64 = @ptrCast(&reader.buffer[reader.index]);
        assert(record.reclen > 0 and reader.index + record.reclen <= reader.end);
        reader.index += record.reclen;
        const name_start: [*]u8 = &record.name;
        const name_room = name_start[0 .. record.reclen - @offsetOf(linux.dirent64, "name")];
        const name = name_start[0..std.mem.findScalar(u8, name_room, 0).? :0];
        if (std.mem.eql(u8, name, ".") or std.mem.eql(u8, name, "..")) continue;
        entries[count] = .{ .name = name, .kind = direntKind(record.type), .inode = record.ino };
        count += 1;
    }
    return count;
}

/// Reads the next batch of records into the reader's buffer; false at the end.
fn refill(blocking: *BlockingLane, io: Io, reader: *Dir.Reader) Dir.Reader.Error!bool {
    if (reader.state == .finished) return false;
    if (reader.state == .reset) {
        const file: File = .{ .handle = reader.dir.handle, .flags = .{ .nonblocking = false } };
        fs_file.seekTo(file, 0) catch |err| switch (err) {
            error.Unseekable => return error.Unexpected,
            else => |e| return e,
        };
        reader.state = .reading;
    }
    const args = .{ reader.dir.handle, reader.buffer.ptr, reader.buffer.len };
    const result = try blocking.syscall(io, linux.getdents64, args);
    if (result > 0) {
        reader.index = 0;
        reader.end = @intCast(result);
        return true;
    }
    if (result == 0) {
        reader.state = .finished;
        return false;
    }
    return switch (errnoOf(result)) {
        // The directory was deleted while being read: its listing ends, as on other systems.
        .NOENT => {
            reader.state = .finished;
            return false;
        },
        .INVAL => |e| os.unexpectedErrno(e), // a buffer too small, or /proc/<pid>/net
        .ACCES => error.AccessDenied,
        .BADF, .FAULT, .NOTDIR => |e| errnoBug(e), // not opened with `.iterate = true`
        else => |e| os.unexpectedErrno(e),
    };
}

fn direntKind(dirent_type: u8) File.Kind {
    return switch (dirent_type) {
        linux.DT.BLK => .block_device,
        linux.DT.CHR => .character_device,
        linux.DT.DIR => .directory,
        linux.DT.FIFO => .named_pipe,
        linux.DT.LNK => .sym_link,
        linux.DT.REG => .file,
        linux.DT.SOCK => .unix_domain_socket,
        else => .unknown,
    };
}

/// The path of the directory, as `file.realPath` finds it. Cancelation point.
pub fn realPath(dir: Dir, out_buffer: []u8) Dir.RealPathError!usize {
    try fs_file.checkCancel();
    return fs_file.realPathOfFd(dir.handle, out_buffer);
}

/// Opens `sub_path` as a path-only descriptor (never blocks on a FIFO or device), then reads
/// its path as `file.realPath` does.
pub fn realPathFile(
    blocking: *BlockingLane,
    io: Io,
    dir: Dir,
    sub_path: []const u8,
    out_buffer: []u8,
) Dir.RealPathFileError!usize {
    var path_buffer: PathBuffer = undefined;
    const path = try pathToPosix(sub_path, &path_buffer);
    const flags: linux.O = .{ .NONBLOCK = true, .CLOEXEC = true, .PATH = true };
    const result = try blocking.perform(io, .{ .openat = .{
        .fd = dir.handle,
        .path = path.ptr,
        .flags = flags,
        .mode = 0,
    } });
    if (result < 0) return switch (openError(errnoOf(result))) {
        // Errors a path-only open cannot produce (no lock, no creation, no write).
        error.FileLocksUnsupported, error.WouldBlock, error.FileBusy => error.Unexpected,
        error.ReadOnlyFileSystem, error.PathAlreadyExists => error.Unexpected,
        error.AntivirusInterference, error.PipeBusy, error.NetworkNotFound => error.Unexpected,
        else => |e| e,
    };
    defer os.closeFd(result);
    return fs_file.realPathOfFd(result, out_buffer);
}

/// `utimensat` on the blocking lane.
pub fn setTimestamps(
    blocking: *BlockingLane,
    io: Io,
    dir: Dir,
    sub_path: []const u8,
    options: Dir.SetTimestampsOptions,
) Dir.SetTimestampsError!void {
    var path_buffer: PathBuffer = undefined;
    const path = try pathToPosix(sub_path, &path_buffer);
    var times = fs_file.timestamps(options.access_timestamp, options.modify_timestamp);
    const flags: u32 = if (options.follow_symlinks) 0 else linux.AT.SYMLINK_NOFOLLOW;
    const args = .{ dir.handle, path.ptr, times.pointer(), flags };
    const result = try blocking.syscall(io, linux.utimensat, args);
    if (result >= 0) return;
    return fs_errno.timestampsError(errnoOf(result));
}

/// `fchownat` on the blocking lane; a null owner or group is left as it is. (std.Io.Threaded
/// does not implement this entry yet: its errors are mapped as for `fchown`.)
pub fn setFileOwner(
    blocking: *BlockingLane,
    io: Io,
    dir: Dir,
    sub_path: []const u8,
    owner: ?File.Uid,
    group: ?File.Gid,
    options: Dir.SetFileOwnerOptions,
) Dir.SetFileOwnerError!void {
    var path_buffer: PathBuffer = undefined;
    const path = try pathToPosix(sub_path, &path_buffer);
    const uid = owner orelse ~@as(linux.uid_t, 0);
    const gid = group orelse ~@as(linux.gid_t, 0);
    const flags: u32 = if (options.follow_symlinks) 0 else linux.AT.SYMLINK_NOFOLLOW;
    const args = .{ dir.handle, path.ptr, uid, gid, flags };
    const result = try blocking.syscall(io, linux.fchownat, args);
    if (result >= 0) return;
    return fs_errno.ownerOrModeError(errnoOf(result));
}

/// `fchmodat`, or `fchmodat2` (Linux 6.6+) when symlinks are not followed, on the blocking
/// lane. On an older kernel, not following symlinks is `error.OperationUnsupported`.
pub fn setFilePermissions(
    blocking: *BlockingLane,
    io: Io,
    dir: Dir,
    sub_path: []const u8,
    permissions: Dir.Permissions,
    options: Dir.SetFilePermissionsOptions,
) Dir.SetFilePermissionsError!void {
    var path_buffer: PathBuffer = undefined;
    const path = try pathToPosix(sub_path, &path_buffer);
    const mode = permissions.toMode();
    const no_follow = linux.AT.SYMLINK_NOFOLLOW;
    const result = if (options.follow_symlinks)
        try blocking.syscall(io, linux.fchmodat, .{ dir.handle, path.ptr, mode })
    else
        try blocking.syscall(io, linux.fchmodat2, .{ dir.handle, path.ptr, mode, no_follow });
    if (result >= 0) return;
    return switch (errnoOf(result)) {
        .MFILE => error.ProcessFdQuotaExceeded,
        .NAMETOOLONG => error.NameTooLong,
        .NFILE => error.SystemFdQuotaExceeded,
        .OPNOTSUPP, .NOSYS => error.OperationUnsupported,
        else => |e| fs_errno.ownerOrModeError(e),
    };
}

/// A file that appears at `dest_path` only when finished (`File.Atomic`), as std.Io.Threaded
/// makes it: for `link`, an unnamed `O_TMPFILE` file in the destination's directory (a loop
/// `openat`); for `replace`, or where the file system has no `O_TMPFILE`, a file with a random
/// hexadecimal name beside the destination, created exclusively (retried on a clash).
pub fn createFileAtomic(
    blocking: *BlockingLane,
    io: Io,
    dir: Dir,
    dest_path: []const u8,
    options: Dir.CreateFileAtomicOptions,
) Dir.CreateFileAtomicError!File.Atomic {
    const dest_dirname = Dir.path.dirname(dest_path);
    if (!options.replace) {
        if (dest_dirname) |dirname| {
            // Also turns a missing or non-directory parent into a clear error before the
            // ambiguous ENOENT/EISDIR of O_TMPFILE below.
            if (options.make_path) dir.createDirPath(io, dirname) catch |err| switch (err) {
                error.IsDir,
                error.Streaming,
                error.DiskQuota,
                error.PathAlreadyExists,
                error.LinkQuotaExceeded,
                error.PipeBusy,
                error.FileTooBig,
                error.DeviceBusy,
                error.FileLocksUnsupported,
                error.FileBusy,
                => return error.Unexpected, // none of these can come from making directories
                else => |e| return e,
            };
        }
        const permissions = options.permissions;
        const parent_path = dest_dirname orelse ".";
        if (try openUnnamed(blocking, io, dir, parent_path, permissions)) |file| return .{
            .file = file,
            .file_basename_hex = 0,
            .dest_sub_path = dest_path,
            .file_open = true,
            .file_exists = false,
            .close_dir_on_deinit = false,
            .dir = dir,
        };
    }
    return createFileAtomicNamed(io, dir, dest_path, options);
}

/// `createFileAtomic` without `O_TMPFILE`: a file of a random name beside `dest_path`, made
/// through `io` alone (so weft.Sim's simulated disk makes its atomic files with it too).
pub fn createFileAtomicNamed(
    io: Io,
    dir: Dir,
    dest_path: []const u8,
    options: Dir.CreateFileAtomicOptions,
) Dir.CreateFileAtomicError!File.Atomic {
    const dirname = Dir.path.dirname(dest_path) orelse
        return createNamedTemporary(io, dest_path, options.permissions, dir, false);
    const parent = if (options.make_path)
        dir.createDirPathOpen(io, dirname, .{}) catch |err| switch (err) {
            error.IsDir,
            error.Streaming,
            error.DiskQuota,
            error.PathAlreadyExists,
            error.LinkQuotaExceeded,
            error.PipeBusy,
            error.FileTooBig,
            error.FileLocksUnsupported,
            error.DeviceBusy,
            => return error.Unexpected, // none of these can come from making directories
            else => |e| return e,
        }
    else
        try dir.openDir(io, dirname, .{});
    errdefer parent.close(io);
    const basename = Dir.path.basename(dest_path);
    return createNamedTemporary(io, basename, options.permissions, parent, true);
}

/// `openat(O_TMPFILE)` in `sub_path`; null when the file system may not support it (the errno
/// values that say so are ambiguous, as Threaded notes, so those fall back too).
fn openUnnamed(
    blocking: *BlockingLane,
    io: Io,
    dir: Dir,
    sub_path: []const u8,
    permissions: File.Permissions,
) Dir.CreateFileAtomicError!?File {
    var path_buffer: PathBuffer = undefined;
    const path = try pathToPosix(sub_path, &path_buffer);
    const flags: linux.O = .{
        .ACCMODE = .RDWR,
        .TMPFILE = true,
        .DIRECTORY = true,
        .CLOEXEC = true,
    };
    const mode = permissions.toMode();
    const op_open: Op.Openat = .{
        .fd = dir.handle,
        .path = path.ptr,
        .flags = flags,
        .mode = mode,
    };
    const result = try blocking.perform(io, .{ .openat = op_open });
    if (result >= 0) return .{ .handle = result, .flags = .{ .nonblocking = false } };
    return switch (errnoOf(result)) {
        .ISDIR, .NOENT, .OPNOTSUPP => null,
        .NOSPC => error.NoSpaceLeft,
        .AGAIN => error.WouldBlock,
        else => |e| fs_errno.openAnyError(e),
    };
}

/// Creates a file named by 64 random bits (hexadecimal) in `dir`, exclusively.
fn createNamedTemporary(
    io: Io,
    dest_basename: []const u8,
    permissions: File.Permissions,
    dir: Dir,
    close_dir_on_deinit: bool,
) Dir.CreateFileAtomicError!File.Atomic {
    // Bounded in practice: a clash of 64 random bits with an existing name is a fluke, and
    // each attempt draws new ones.
    while (true) {
        var random_integer: u64 = undefined;
        io.random(std.mem.asBytes(&random_integer));
        const tmp_sub_path = std.fmt.hex(random_integer);
        const options: Dir.CreateFileOptions = .{ .permissions = permissions, .exclusive = true };
        const file = dir.createFile(io, &tmp_sub_path, options) catch |err| switch (err) {
            error.PathAlreadyExists, error.DeviceBusy, error.FileBusy => continue,
            error.IsDir => return error.Unexpected, // no path components
            error.FileTooBig => return error.Unexpected, // creating, not opening
            error.FileLocksUnsupported => return error.Unexpected, // no lock asked for
            error.PipeBusy => return error.Unexpected, // not opening a pipe
            else => |e| return e,
        };
        return .{
            .file = file,
            .file_basename_hex = random_integer,
            .dest_sub_path = dest_basename,
            .file_open = true,
            .file_exists = true,
            .close_dir_on_deinit = close_dir_on_deinit,
            .dir = dir,
        };
    }
}
