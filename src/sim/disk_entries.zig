//! weft.Sim's file and directory entries for `Options.files = .simulated`: each one answers
//! from the simulated disk (Disk.zig) when its handle is the disk's, or is `Dir.cwd()` (the
//! disk's root), and calls std.Io.Threaded's entry otherwise, so that stdin, stdout and
//! stderr stay real. With `.real` files every call goes to Threaded, as before.
//!
//! Every call on the disk is one disk operation: it moves virtual time by one tick, enters the
//! trace, and is where a seeded crash point (`Options.crash`) can end the run.
//!
//! Errors are the disk's (Linux's errno for the same call), each returned under its own name
//! where the entry's error set has it (`narrow`). Locks are flock(2)'s, between the handles
//! of the run: a task that waits for one parks (cancelably) until a handle's unlock or close.
//! Not modelled, with the error each returns: memory maps (`OperationUnsupported`, or
//! `AccessDenied` where the set has no such error), copying between files by the kernel
//! (`Unimplemented`: std's writers then read and write), ownership (accepted, and not
//! reported: std's `Stat` has no owner).
const std = @import("std");
const Io = std.Io;
const File = Io.File;
const Dir = Io.Dir;
const Threaded = Io.Threaded;
const State = @import("State.zig");
const Disk = @import("Disk.zig");
const sim_handles = @import("handles.zig");
const fs_dir = @import("../fs/dir.zig");

const base = Threaded.io(@constCast(&Threaded.init_single_threaded)).vtable.*;

/// The entries that answer from the disk, for vtable.zig (files.zig's own entries call
/// `readPositional`, `writePositional`, `sync` and `operate` below for the disk's handles).
pub const entries = .{
    .{ "dirCreateDir", dirCreateDir },
    .{ "dirCreateDirPath", dirCreateDirPath },
    .{ "dirCreateDirPathOpen", dirCreateDirPathOpen },
    .{ "dirOpenDir", dirOpenDir },
    .{ "dirStat", dirStat },
    .{ "dirStatFile", dirStatFile },
    .{ "dirAccess", dirAccess },
    .{ "dirCreateFile", dirCreateFile },
    .{ "dirCreateFileAtomic", dirCreateFileAtomic },
    .{ "dirOpenFile", dirOpenFile },
    .{ "dirClose", dirClose },
    .{ "dirRead", dirRead },
    .{ "dirRealPath", dirRealPath },
    .{ "dirRealPathFile", dirRealPathFile },
    .{ "dirDeleteFile", dirDeleteFile },
    .{ "dirDeleteDir", dirDeleteDir },
    .{ "dirRename", dirRename },
    .{ "dirRenamePreserve", dirRenamePreserve },
    .{ "dirSymLink", dirSymLink },
    .{ "dirReadLink", dirReadLink },
    .{ "dirSetOwner", dirSetOwner },
    .{ "dirSetFileOwner", dirSetFileOwner },
    .{ "dirSetPermissions", dirSetPermissions },
    .{ "dirSetFilePermissions", dirSetFilePermissions },
    .{ "dirSetTimestamps", dirSetTimestamps },
    .{ "dirHardLink", dirHardLink },
    .{ "fileStat", fileStat },
    .{ "fileLength", fileLength },
    .{ "fileClose", fileClose },
    .{ "fileWriteFileStreaming", fileWriteFileStreaming },
    .{ "fileWriteFilePositional", fileWriteFilePositional },
    .{ "fileSeekBy", fileSeekBy },
    .{ "fileSeekTo", fileSeekTo },
    .{ "fileIsTty", fileIsTty },
    .{ "fileEnableAnsiEscapeCodes", fileEnableAnsiEscapeCodes },
    .{ "fileSupportsAnsiEscapeCodes", fileSupportsAnsiEscapeCodes },
    .{ "fileSetLength", fileSetLength },
    .{ "fileSetOwner", fileSetOwner },
    .{ "fileSetPermissions", fileSetPermissions },
    .{ "fileSetTimestamps", fileSetTimestamps },
    .{ "fileLock", fileLock },
    .{ "fileTryLock", fileTryLock },
    .{ "fileUnlock", fileUnlock },
    .{ "fileDowngradeLock", fileDowngradeLock },
    .{ "fileRealPath", fileRealPath },
    .{ "fileHardLink", fileHardLink },
    .{ "fileMemoryMapCreate", fileMemoryMapCreate },
};

/// The Sim's disk if `handle` is one of its files or directories, or the cwd; null: a real
/// descriptor (or a Sim with real files).
pub fn diskOf(sim: *State, handle: std.posix.fd_t) ?*Disk {
    const disk = if (sim.disk) |*disk| disk else return null;
    if (sim_handles.isCwd(handle) or Disk.isSimulated(handle)) return disk;
    return null;
}

/// `diskOf` for the file and directory entries: also counts the call as a disk operation
/// (the place of a seeded crash).
fn operationOn(userdata: ?*anyopaque, handle: std.posix.fd_t, name: [:0]const u8) ?*Disk {
    const sim = State.fromUserdata(userdata);
    const disk = diskOf(sim, handle) orelse return null;
    sim.diskOperation(name);
    return disk;
}

/// The directory node behind `dir`: the root for the cwd.
fn dirNode(disk: *Disk, dir: Dir) Disk.Error!*Disk.Node {
    if (sim_handles.isCwd(dir.handle)) return disk.root;
    const node = disk.handleOf(dir.handle).node;
    if (node.kind != .directory) return error.NotDir;
    return node;
}

/// `err` under its own name in `E`, or the closest error `E` has: each entry's error set is
/// std's, and the disk's errors are Linux's for the same call.
fn narrow(comptime E: type, err: anytype) E {
    switch (err) {
        inline else => |known| {
            const name = @errorName(known);
            if (comptime has(E, name)) return @field(E, name);
            if (comptime std.mem.eql(u8, name, "OutOfMemory") and has(E, "SystemResources")) {
                return error.SystemResources;
            }
            return fallback(E);
        },
    }
}

fn has(comptime E: type, comptime name: []const u8) bool {
    @setEvalBranchQuota(100_000);
    const set = @typeInfo(E).error_set orelse return true; // anyerror
    for (set) |member| if (std.mem.eql(u8, member.name, name)) return true;
    return false;
}

/// What a call the disk does not model returns: the first of these its set has.
fn fallback(comptime E: type) E {
    inline for (.{ "OperationUnsupported", "Unimplemented", "Unexpected", "AccessDenied" }) |n| {
        if (comptime has(E, n)) return @field(E, n);
    }
    @compileError("no error to answer with in " ++ @typeName(E));
}

fn fileOf(handle: std.posix.fd_t) File {
    return .{ .handle = handle, .flags = .{ .nonblocking = false } };
}

// ---------------------------------------------------------------------------- directories

fn dirCreateDir(
    userdata: ?*anyopaque,
    dir: Dir,
    sub_path: []const u8,
    permissions: Dir.Permissions,
) Dir.CreateDirError!void {
    const disk = operationOn(userdata, dir.handle, @src().fn_name) orelse
        return base.dirCreateDir(userdata, dir, sub_path, permissions);
    const parent = dirNode(disk, dir) catch |err| return narrow(Dir.CreateDirError, err);
    disk.createDir(parent, sub_path, @intFromEnum(permissions)) catch |err|
        return narrow(Dir.CreateDirError, err);
}

fn dirCreateDirPath(
    userdata: ?*anyopaque,
    dir: Dir,
    sub_path: []const u8,
    permissions: Dir.Permissions,
) Dir.CreateDirPathError!Dir.CreatePathStatus {
    const disk = operationOn(userdata, dir.handle, @src().fn_name) orelse
        return base.dirCreateDirPath(userdata, dir, sub_path, permissions);
    const E = Dir.CreateDirPathError;
    const parent = dirNode(disk, dir) catch |err| return narrow(E, err);
    var status: Dir.CreatePathStatus = .existed;
    var it = Dir.path.componentIterator(sub_path);
    // Bounded by the path's components: each turn creates or passes one.
    while (it.next()) |component| {
        if (disk.createDir(parent, component.path, @intFromEnum(permissions))) |_| {
            status = .created;
        } else |err| switch (err) {
            error.PathAlreadyExists => {
                const resolved = disk.resolve(parent, component.path, true) catch |e|
                    return narrow(E, e);
                const node = resolved.node orelse return error.FileNotFound; // dangling link
                if (node.kind != .directory) return error.NotDir;
            },
            else => |e| return narrow(E, e),
        }
    }
    return status;
}

fn dirCreateDirPathOpen(
    userdata: ?*anyopaque,
    dir: Dir,
    sub_path: []const u8,
    permissions: Dir.Permissions,
    options: Dir.OpenOptions,
) Dir.CreateDirPathOpenError!Dir {
    const sim = State.fromUserdata(userdata);
    if (diskOf(sim, dir.handle) == null) {
        return base.dirCreateDirPathOpen(userdata, dir, sub_path, permissions, options);
    }
    _ = try dirCreateDirPath(userdata, dir, sub_path, permissions);
    return dirOpenDir(userdata, dir, sub_path, options);
}

fn dirOpenDir(
    userdata: ?*anyopaque,
    dir: Dir,
    sub_path: []const u8,
    options: Dir.OpenOptions,
) Dir.OpenError!Dir {
    const disk = operationOn(userdata, dir.handle, @src().fn_name) orelse
        return base.dirOpenDir(userdata, dir, sub_path, options);
    const parent = dirNode(disk, dir) catch |err| return narrow(Dir.OpenError, err);
    const handle = disk.open(parent, sub_path, .{
        .directory_only = true,
        .follow_symlinks = options.follow_symlinks,
    }) catch |err| return narrow(Dir.OpenError, err);
    return .{ .handle = handle };
}

fn dirStat(userdata: ?*anyopaque, dir: Dir) Dir.StatError!Dir.Stat {
    const disk = operationOn(userdata, dir.handle, @src().fn_name) orelse
        return base.dirStat(userdata, dir);
    const node = dirNode(disk, dir) catch |err| return narrow(Dir.StatError, err);
    return disk.stat(node);
}

fn dirStatFile(
    userdata: ?*anyopaque,
    dir: Dir,
    sub_path: []const u8,
    options: Dir.StatFileOptions,
) Dir.StatFileError!File.Stat {
    const disk = operationOn(userdata, dir.handle, @src().fn_name) orelse
        return base.dirStatFile(userdata, dir, sub_path, options);
    const E = Dir.StatFileError;
    const parent = dirNode(disk, dir) catch |err| return narrow(E, err);
    const resolved = disk.resolve(parent, sub_path, options.follow_symlinks) catch |err|
        return narrow(E, err);
    const node = resolved.node orelse return error.FileNotFound;
    if (resolved.trailing_slash and node.kind != .directory) return error.NotDir;
    return disk.stat(node);
}

fn dirAccess(
    userdata: ?*anyopaque,
    dir: Dir,
    sub_path: []const u8,
    options: Dir.AccessOptions,
) Dir.AccessError!void {
    const disk = operationOn(userdata, dir.handle, @src().fn_name) orelse
        return base.dirAccess(userdata, dir, sub_path, options);
    const parent = dirNode(disk, dir) catch |err| return narrow(Dir.AccessError, err);
    // std.Io.Threaded answers ENOTDIR (a file used as a directory) with FileNotFound here.
    const resolved = disk.resolve(parent, sub_path, options.follow_symlinks) catch |err|
        return if (err == error.NotDir) error.FileNotFound else narrow(Dir.AccessError, err);
    const node = resolved.node orelse return error.FileNotFound;
    if (resolved.trailing_slash and node.kind != .directory) return error.FileNotFound;
    // Root may read and write anything; it may execute what has an execute bit.
    if (options.execute and node.kind != .directory and node.mode & 0o111 == 0) {
        return error.AccessDenied;
    }
}

fn dirCreateFile(
    userdata: ?*anyopaque,
    dir: Dir,
    sub_path: []const u8,
    options: Dir.CreateFileOptions,
) File.OpenError!File {
    const disk = operationOn(userdata, dir.handle, @src().fn_name) orelse
        return base.dirCreateFile(userdata, dir, sub_path, options);
    const parent = dirNode(disk, dir) catch |err| return narrow(File.OpenError, err);
    const handle = disk.open(parent, sub_path, .{
        .read = options.read,
        .write = true,
        .create = true,
        .exclusive = options.exclusive,
        .truncate = options.truncate,
        .mode = @intFromEnum(options.permissions),
    }) catch |err| return narrow(File.OpenError, err);
    try lockOpened(userdata, disk, handle, options.lock, options.lock_nonblocking);
    return fileOf(handle);
}

/// The lock an open asked for, once the file is open (as std.Io.Threaded takes it on Linux);
/// closes the file if it cannot be had.
fn lockOpened(
    userdata: ?*anyopaque,
    disk: *Disk,
    handle: std.posix.fd_t,
    lock: File.Lock,
    nonblocking: bool,
) error{ WouldBlock, Canceled }!void {
    if (lock == .none) return;
    const sim = State.fromUserdata(userdata);
    if (nonblocking) {
        if (disk.tryLock(handle, lock)) return;
        disk.close(handle);
        return error.WouldBlock;
    }
    lockWaiting(sim, disk, handle, lock) catch |err| {
        disk.close(handle);
        return err;
    };
}

/// Takes `lock` for `handle`, parking the task (cancelably) while another handle's lock
/// conflicts: each unlock or close of a locked handle wakes the waiters to look again.
fn lockWaiting(
    sim: *State,
    disk: *Disk,
    handle: std.posix.fd_t,
    lock: File.Lock,
) Io.Cancelable!void {
    // Bounded by the other handles' unlocks: each turn waits for one.
    while (true) {
        const node = disk.handleOf(handle).node;
        const generation = node.lock_generation;
        if (disk.tryLock(handle, lock)) return;
        try sim.futexWait(&node.lock_generation, generation, true, null);
    }
}

/// Before `handle` leaves a lock (unlock, downgrade, close): wakes the tasks waiting to lock
/// its file. They run once this task parks, by when the lock is gone.
fn wakeLockWaiters(sim: *State, disk: *Disk, handle: std.posix.fd_t) void {
    const open = disk.handleOf(handle);
    if (open.lock == .none) return;
    sim.futexWake(&open.node.lock_generation, std.math.maxInt(u32));
}

fn dirOpenFile(
    userdata: ?*anyopaque,
    dir: Dir,
    sub_path: []const u8,
    options: Dir.OpenFileOptions,
) File.OpenError!File {
    const disk = operationOn(userdata, dir.handle, @src().fn_name) orelse
        return base.dirOpenFile(userdata, dir, sub_path, options);
    const parent = dirNode(disk, dir) catch |err| return narrow(File.OpenError, err);
    const handle = disk.open(parent, sub_path, .{
        .read = options.isRead() or options.path_only,
        .write = options.isWrite() and !options.path_only,
        .allow_directory = options.allow_directory or options.path_only,
        .follow_symlinks = options.follow_symlinks,
    }) catch |err| return narrow(File.OpenError, err);
    try lockOpened(userdata, disk, handle, options.lock, options.lock_nonblocking);
    return fileOf(handle);
}

/// fs/dir.zig's named fallback (a file of a random name beside the destination, renamed over
/// it by `replace`, or to it by `link` if it is free), through the Sim's `Io`: the name comes
/// from the Sim's `random`, so it replays with the seed.
fn dirCreateFileAtomic(
    userdata: ?*anyopaque,
    dir: Dir,
    dest_path: []const u8,
    options: Dir.CreateFileAtomicOptions,
) Dir.CreateFileAtomicError!File.Atomic {
    const sim = State.fromUserdata(userdata);
    if (diskOf(sim, dir.handle) == null) {
        return base.dirCreateFileAtomic(userdata, dir, dest_path, options);
    }
    return fs_dir.createFileAtomicNamed(sim.io(), dir, dest_path, options);
}

fn dirClose(userdata: ?*anyopaque, dirs: []const Dir) void {
    const sim = State.fromUserdata(userdata);
    for (dirs) |dir| {
        if (!closeOnDisk(sim, dir.handle, @src().fn_name)) base.dirClose(userdata, (&dir)[0..1]);
    }
}

/// Closes `handle` if it is the disk's (a disk operation; the tasks waiting to lock its file
/// are woken, its lock going with it); false for a real descriptor.
fn closeOnDisk(sim: *State, handle: std.posix.fd_t, name: [:0]const u8) bool {
    const disk = diskOf(sim, handle) orelse return false;
    sim.diskOperation(name);
    wakeLockWaiters(sim, disk, handle);
    disk.close(handle);
    return true;
}

/// Lists the directory's entries in the order they were made. Each call copies names into
/// the reader's buffer (valid until the next call, as Linux's); `end` counts the entries
/// listed so far.
fn dirRead(
    userdata: ?*anyopaque,
    reader: *Dir.Reader,
    buffer: []Dir.Entry,
) Dir.Reader.Error!usize {
    const disk = operationOn(userdata, reader.dir.handle, @src().fn_name) orelse
        return base.dirRead(userdata, reader, buffer);
    const node = dirNode(disk, reader.dir) catch |err| return narrow(Dir.Reader.Error, err);
    if (reader.state == .reset) {
        reader.state = .reading;
        reader.end = 0;
    }
    if (reader.state == .finished) return 0;
    var copied: usize = 0;
    var filled: usize = 0;
    const names = node.entries.keys();
    const nodes = node.entries.values();
    // Bounded by `buffer.len` and by the entries.
    while (copied < buffer.len and reader.end < names.len) {
        const name = names[reader.end];
        if (filled + name.len > reader.buffer.len) break;
        @memcpy(reader.buffer[filled..][0..name.len], name);
        buffer[copied] = .{
            .name = reader.buffer[filled..][0..name.len],
            .kind = disk.stat(nodes[reader.end]).kind,
            .inode = @intCast(nodes[reader.end].inode), // i64 on Windows, far from full
        };
        filled += name.len;
        copied += 1;
        reader.end += 1;
    }
    if (reader.end >= names.len and copied == 0) reader.state = .finished;
    return copied;
}

fn dirRealPath(userdata: ?*anyopaque, dir: Dir, out_buffer: []u8) Dir.RealPathError!usize {
    const disk = operationOn(userdata, dir.handle, @src().fn_name) orelse
        return base.dirRealPath(userdata, dir, out_buffer);
    const node = dirNode(disk, dir) catch |err| return narrow(Dir.RealPathError, err);
    return pathOf(disk, node, out_buffer);
}

fn dirRealPathFile(
    userdata: ?*anyopaque,
    dir: Dir,
    path_name: []const u8,
    out_buffer: []u8,
) Dir.RealPathFileError!usize {
    const disk = operationOn(userdata, dir.handle, @src().fn_name) orelse
        return base.dirRealPathFile(userdata, dir, path_name, out_buffer);
    const E = Dir.RealPathFileError;
    const parent = dirNode(disk, dir) catch |err| return narrow(E, err);
    const resolved = disk.resolve(parent, path_name, true) catch |err| return narrow(E, err);
    const node = resolved.node orelse return error.FileNotFound;
    if (node.kind == .directory) return pathOf(disk, node, out_buffer);
    const length = try pathOf(disk, resolved.parent, out_buffer);
    const separator: usize = @intFromBool(resolved.parent != disk.root);
    if (length + separator + resolved.name.len > out_buffer.len) return error.NameTooLong;
    if (separator == 1) out_buffer[length] = '/';
    @memcpy(out_buffer[length + separator ..][0..resolved.name.len], resolved.name);
    return length + separator + resolved.name.len;
}

const PathError = error{ NameTooLong, FileNotFound };

/// The absolute path of `node` on the disk: its first name in each directory up to the root.
fn pathOf(disk: *Disk, node: *Disk.Node, out_buffer: []u8) PathError!usize {
    var names: [Disk.path_bytes_max / 2][]const u8 = undefined;
    var count: usize = 0;
    var at = node;
    // Bounded by the tree's depth (each turn goes up one directory).
    while (at != disk.root) {
        const parent = at.parent orelse return error.FileNotFound; // removed
        const index = std.mem.indexOfScalar(*Disk.Node, parent.entries.values(), at) orelse
            return error.FileNotFound;
        if (count == names.len) return error.NameTooLong;
        names[count] = parent.entries.keys()[index];
        count += 1;
        at = parent;
    }
    if (count == 0) {
        if (out_buffer.len < 1) return error.NameTooLong;
        out_buffer[0] = '/';
        return 1;
    }
    var length: usize = 0;
    while (count > 0) {
        count -= 1;
        const name = names[count];
        if (length + 1 + name.len > out_buffer.len) return error.NameTooLong;
        out_buffer[length] = '/';
        @memcpy(out_buffer[length + 1 ..][0..name.len], name);
        length += 1 + name.len;
    }
    return length;
}

fn dirDeleteFile(userdata: ?*anyopaque, dir: Dir, sub_path: []const u8) Dir.DeleteFileError!void {
    const disk = operationOn(userdata, dir.handle, @src().fn_name) orelse
        return base.dirDeleteFile(userdata, dir, sub_path);
    const parent = dirNode(disk, dir) catch |err| return narrow(Dir.DeleteFileError, err);
    disk.deleteFile(parent, sub_path) catch |err| return narrow(Dir.DeleteFileError, err);
}

fn dirDeleteDir(userdata: ?*anyopaque, dir: Dir, sub_path: []const u8) Dir.DeleteDirError!void {
    const disk = operationOn(userdata, dir.handle, @src().fn_name) orelse
        return base.dirDeleteDir(userdata, dir, sub_path);
    const parent = dirNode(disk, dir) catch |err| return narrow(Dir.DeleteDirError, err);
    disk.deleteDir(parent, sub_path) catch |err| return narrow(Dir.DeleteDirError, err);
}

/// Both directories must be the disk's: a rename between the disk and the real file system
/// is `CrossDevice`, as between two file systems.
fn bothOnDisk(
    userdata: ?*anyopaque,
    old_dir: Dir,
    new_dir: Dir,
    name: [:0]const u8,
) error{CrossDevice}!?*Disk {
    const sim = State.fromUserdata(userdata);
    const old_disk = diskOf(sim, old_dir.handle);
    const new_disk = diskOf(sim, new_dir.handle);
    if ((old_disk == null) != (new_disk == null)) return error.CrossDevice;
    const disk = old_disk orelse return null;
    sim.diskOperation(name);
    return disk;
}

fn dirRename(
    userdata: ?*anyopaque,
    old_dir: Dir,
    old_sub_path: []const u8,
    new_dir: Dir,
    new_sub_path: []const u8,
) Dir.RenameError!void {
    const disk = try bothOnDisk(userdata, old_dir, new_dir, @src().fn_name) orelse
        return base.dirRename(userdata, old_dir, old_sub_path, new_dir, new_sub_path);
    const E = Dir.RenameError;
    const old_parent = dirNode(disk, old_dir) catch |err| return narrow(E, err);
    const new_parent = dirNode(disk, new_dir) catch |err| return narrow(E, err);
    disk.rename(old_parent, old_sub_path, new_parent, new_sub_path) catch |err|
        return narrow(E, err);
}

/// rename(2) with RENAME_NOREPLACE: fails if the new name exists.
fn dirRenamePreserve(
    userdata: ?*anyopaque,
    old_dir: Dir,
    old_sub_path: []const u8,
    new_dir: Dir,
    new_sub_path: []const u8,
) Dir.RenamePreserveError!void {
    const disk = try bothOnDisk(userdata, old_dir, new_dir, @src().fn_name) orelse
        return base.dirRenamePreserve(userdata, old_dir, old_sub_path, new_dir, new_sub_path);
    const E = Dir.RenamePreserveError;
    const old_parent = dirNode(disk, old_dir) catch |err| return narrow(E, err);
    const new_parent = dirNode(disk, new_dir) catch |err| return narrow(E, err);
    const new = disk.resolve(new_parent, new_sub_path, false) catch |err| return narrow(E, err);
    if (new.node != null) return error.PathAlreadyExists;
    disk.rename(old_parent, old_sub_path, new_parent, new_sub_path) catch |err|
        return narrow(E, err);
}

fn dirSymLink(
    userdata: ?*anyopaque,
    dir: Dir,
    target_path: []const u8,
    sym_link_path: []const u8,
    flags: Dir.SymLinkFlags,
) Dir.SymLinkError!void {
    const disk = operationOn(userdata, dir.handle, @src().fn_name) orelse
        return base.dirSymLink(userdata, dir, target_path, sym_link_path, flags);
    const parent = dirNode(disk, dir) catch |err| return narrow(Dir.SymLinkError, err);
    disk.symLink(parent, target_path, sym_link_path) catch |err|
        return narrow(Dir.SymLinkError, err);
}

fn dirReadLink(
    userdata: ?*anyopaque,
    dir: Dir,
    sub_path: []const u8,
    buffer: []u8,
) Dir.ReadLinkError!usize {
    const disk = operationOn(userdata, dir.handle, @src().fn_name) orelse
        return base.dirReadLink(userdata, dir, sub_path, buffer);
    const parent = dirNode(disk, dir) catch |err| return narrow(Dir.ReadLinkError, err);
    return disk.readLink(parent, sub_path, buffer) catch |err| switch (err) {
        error.InvalidArgument => error.NotLink,
        else => |e| narrow(Dir.ReadLinkError, e),
    };
}

fn dirSetOwner(
    userdata: ?*anyopaque,
    dir: Dir,
    uid: ?File.Uid,
    gid: ?File.Gid,
) Dir.SetOwnerError!void {
    const disk = operationOn(userdata, dir.handle, @src().fn_name) orelse
        return base.dirSetOwner(userdata, dir, uid, gid);
    _ = dirNode(disk, dir) catch |err| return narrow(Dir.SetOwnerError, err);
}

fn dirSetFileOwner(
    userdata: ?*anyopaque,
    dir: Dir,
    sub_path: []const u8,
    uid: ?File.Uid,
    gid: ?File.Gid,
    options: Dir.SetFileOwnerOptions,
) Dir.SetFileOwnerError!void {
    const disk = operationOn(userdata, dir.handle, @src().fn_name) orelse
        return base.dirSetFileOwner(userdata, dir, sub_path, uid, gid, options);
    const E = Dir.SetFileOwnerError;
    const parent = dirNode(disk, dir) catch |err| return narrow(E, err);
    const resolved = disk.resolve(parent, sub_path, options.follow_symlinks) catch |err|
        return narrow(E, err);
    if (resolved.node == null) return error.FileNotFound;
}

fn dirSetPermissions(
    userdata: ?*anyopaque,
    dir: Dir,
    permissions: Dir.Permissions,
) Dir.SetPermissionsError!void {
    const disk = operationOn(userdata, dir.handle, @src().fn_name) orelse
        return base.dirSetPermissions(userdata, dir, permissions);
    const node = dirNode(disk, dir) catch |err| return narrow(Dir.SetPermissionsError, err);
    setMode(disk, node, @intFromEnum(permissions));
}

fn setMode(disk: *Disk, node: *Disk.Node, mode: u32) void {
    node.mode = mode & 0o7777;
    node.ctime_ns = disk.now_ns;
}

fn dirSetFilePermissions(
    userdata: ?*anyopaque,
    dir: Dir,
    sub_path: []const u8,
    permissions: File.Permissions,
    options: Dir.SetFilePermissionsOptions,
) Dir.SetFilePermissionsError!void {
    const disk = operationOn(userdata, dir.handle, @src().fn_name) orelse
        return base.dirSetFilePermissions(userdata, dir, sub_path, permissions, options);
    const E = Dir.SetFilePermissionsError;
    const parent = dirNode(disk, dir) catch |err| return narrow(E, err);
    const resolved = disk.resolve(parent, sub_path, options.follow_symlinks) catch |err|
        return narrow(E, err);
    setMode(disk, resolved.node orelse return error.FileNotFound, @intFromEnum(permissions));
}

fn dirSetTimestamps(
    userdata: ?*anyopaque,
    dir: Dir,
    sub_path: []const u8,
    options: Dir.SetTimestampsOptions,
) Dir.SetTimestampsError!void {
    const disk = operationOn(userdata, dir.handle, @src().fn_name) orelse
        return base.dirSetTimestamps(userdata, dir, sub_path, options);
    const E = Dir.SetTimestampsError;
    const parent = dirNode(disk, dir) catch |err| return narrow(E, err);
    const resolved = disk.resolve(parent, sub_path, options.follow_symlinks) catch |err|
        return narrow(E, err);
    const node = resolved.node orelse return narrow(E, error.FileNotFound);
    setModified(disk, node, options.modify_timestamp);
}

fn setModified(disk: *Disk, node: *Disk.Node, timestamp: File.SetTimestamp) void {
    switch (timestamp) {
        .unchanged => {},
        .now => node.mtime_ns = disk.now_ns,
        .new => |new| node.mtime_ns = new.nanoseconds,
    }
    node.ctime_ns = disk.now_ns;
}

fn dirHardLink(
    userdata: ?*anyopaque,
    old_dir: Dir,
    old_sub_path: []const u8,
    new_dir: Dir,
    new_sub_path: []const u8,
    options: Dir.HardLinkOptions,
) Dir.HardLinkError!void {
    const disk = try bothOnDisk(userdata, old_dir, new_dir, @src().fn_name) orelse
        return base.dirHardLink(userdata, old_dir, old_sub_path, new_dir, new_sub_path, options);
    const E = Dir.HardLinkError;
    const old_parent = dirNode(disk, old_dir) catch |err| return narrow(E, err);
    const new_parent = dirNode(disk, new_dir) catch |err| return narrow(E, err);
    disk.hardLink(
        old_parent,
        old_sub_path,
        new_parent,
        new_sub_path,
        options.follow_symlinks,
    ) catch |err| return narrow(E, err);
}

// ---------------------------------------------------------------------------- files

fn fileStat(userdata: ?*anyopaque, file: File) File.StatError!File.Stat {
    const disk = operationOn(userdata, file.handle, @src().fn_name) orelse
        return base.fileStat(userdata, file);
    return disk.stat(disk.handleOf(file.handle).node);
}

fn fileLength(userdata: ?*anyopaque, file: File) File.LengthError!u64 {
    const disk = operationOn(userdata, file.handle, @src().fn_name) orelse
        return base.fileLength(userdata, file);
    return disk.stat(disk.handleOf(file.handle).node).size;
}

fn fileClose(userdata: ?*anyopaque, handles: []const File) void {
    const sim = State.fromUserdata(userdata);
    for (handles) |file| {
        if (!closeOnDisk(sim, file.handle, @src().fn_name)) {
            base.fileClose(userdata, (&file)[0..1]);
        }
    }
}

/// For files.zig's entry, after its faults: a positional read from the disk.
pub fn readPositional(
    disk: *Disk,
    file: File,
    data: []const []u8,
    offset: u64,
) File.ReadPositionalError!usize {
    return disk.read(file.handle, data, offset) catch |err|
        narrow(File.ReadPositionalError, err);
}

/// For files.zig's entry, after its faults: a positional write to the disk of `header`, the
/// buffers of `data`, and its last buffer `splat` times.
pub fn writePositional(
    disk: *Disk,
    file: File,
    header: []const u8,
    data: []const []const u8,
    splat: usize,
    offset: u64,
) File.WritePositionalError!usize {
    return writeAll(disk, file.handle, header, data, splat, offset) catch |err|
        narrow(File.WritePositionalError, err);
}

fn writeAll(
    disk: *Disk,
    handle: std.posix.fd_t,
    header: []const u8,
    data: []const []const u8,
    splat: usize,
    offset: u64,
) Disk.Error!usize {
    var written: usize = try disk.write(handle, header, offset);
    if (data.len == 0) return written;
    for (data[0 .. data.len - 1]) |buffer| {
        written += try disk.write(handle, buffer, offset + written);
    }
    const last = data[data.len - 1];
    if (last.len == 0) return written;
    // Bounded by `splat`.
    for (0..splat) |_| written += try disk.write(handle, last, offset + written);
    return written;
}

/// For files.zig's entry, after its faults.
pub fn sync(disk: *Disk, file: File) File.SyncError!void {
    disk.sync(file.handle) catch |err| return narrow(File.SyncError, err);
}

/// Streaming reads and writes of a disk file, at its handle's position; null for every other
/// operation, and for real files.
pub fn operate(sim: *State, operation: Io.Operation) ?Io.Operation.Result {
    switch (operation) {
        .file_read_streaming => |streaming| {
            const disk = diskOf(sim, streaming.file.handle) orelse return null;
            sim.diskOperation("operate(.file_read_streaming)");
            return .{ .file_read_streaming = readStreaming(disk, streaming) };
        },
        .file_write_streaming => |streaming| {
            const disk = diskOf(sim, streaming.file.handle) orelse return null;
            sim.diskOperation("operate(.file_write_streaming)");
            return .{ .file_write_streaming = writeStreaming(disk, streaming) };
        },
        else => return null,
    }
}

fn readStreaming(
    disk: *Disk,
    streaming: Io.Operation.FileReadStreaming,
) Io.Operation.FileReadStreaming.Error!usize {
    const handle = disk.handleOf(streaming.file.handle);
    const E = Io.Operation.FileReadStreaming.Error;
    const count = disk.read(streaming.file.handle, streaming.data, handle.position) catch |err|
        return narrow(E, err);
    var asked: usize = 0;
    for (streaming.data) |buffer| asked += buffer.len;
    if (count == 0 and asked > 0) return error.EndOfStream;
    handle.position += count;
    return count;
}

fn writeStreaming(
    disk: *Disk,
    streaming: Io.Operation.FileWriteStreaming,
) Io.Operation.FileWriteStreaming.Error!usize {
    const handle = disk.handleOf(streaming.file.handle);
    const E = Io.Operation.FileWriteStreaming.Error;
    const count = writeAll(
        disk,
        streaming.file.handle,
        streaming.header,
        streaming.data,
        streaming.splat,
        handle.position,
    ) catch |err| return narrow(E, err);
    handle.position = if (handle.append) handle.node.data.items.len else handle.position + count;
    return count;
}

fn fileWriteFileStreaming(
    userdata: ?*anyopaque,
    file: File,
    header: []const u8,
    reader: *File.Reader,
    limit: Io.Limit,
) File.Writer.WriteFileError!usize {
    const sim = State.fromUserdata(userdata);
    if (diskOf(sim, file.handle) == null and diskOf(sim, reader.file.handle) == null) {
        return base.fileWriteFileStreaming(userdata, file, header, reader, limit);
    }
    return error.Unimplemented; // the writer then reads and writes
}

fn fileWriteFilePositional(
    userdata: ?*anyopaque,
    file: File,
    header: []const u8,
    reader: *File.Reader,
    limit: Io.Limit,
    offset: u64,
) File.WriteFilePositionalError!usize {
    const sim = State.fromUserdata(userdata);
    if (diskOf(sim, file.handle) == null and diskOf(sim, reader.file.handle) == null) {
        return base.fileWriteFilePositional(userdata, file, header, reader, limit, offset);
    }
    return error.Unimplemented; // the writer then reads and writes
}

fn fileSeekBy(userdata: ?*anyopaque, file: File, relative_offset: i64) File.SeekError!void {
    const disk = operationOn(userdata, file.handle, @src().fn_name) orelse
        return base.fileSeekBy(userdata, file, relative_offset);
    const handle = disk.handleOf(file.handle);
    const position = @as(i128, handle.position) + relative_offset;
    if (position < 0 or position > std.math.maxInt(i64)) return error.Unexpected; // EINVAL
    handle.position = @intCast(position);
}

fn fileSeekTo(userdata: ?*anyopaque, file: File, absolute_offset: u64) File.SeekError!void {
    const disk = operationOn(userdata, file.handle, @src().fn_name) orelse
        return base.fileSeekTo(userdata, file, absolute_offset);
    if (absolute_offset > std.math.maxInt(i64)) return error.Unexpected; // EINVAL
    disk.handleOf(file.handle).position = absolute_offset;
}

fn fileIsTty(userdata: ?*anyopaque, file: File) Io.Cancelable!bool {
    const disk = operationOn(userdata, file.handle, @src().fn_name) orelse
        return base.fileIsTty(userdata, file);
    _ = disk.handleOf(file.handle);
    return false;
}

fn fileEnableAnsiEscapeCodes(
    userdata: ?*anyopaque,
    file: File,
) File.EnableAnsiEscapeCodesError!void {
    const disk = operationOn(userdata, file.handle, @src().fn_name) orelse
        return base.fileEnableAnsiEscapeCodes(userdata, file);
    _ = disk.handleOf(file.handle);
    return error.NotTerminalDevice;
}

fn fileSupportsAnsiEscapeCodes(userdata: ?*anyopaque, file: File) Io.Cancelable!bool {
    const disk = operationOn(userdata, file.handle, @src().fn_name) orelse
        return base.fileSupportsAnsiEscapeCodes(userdata, file);
    _ = disk.handleOf(file.handle);
    return false;
}

fn fileSetLength(userdata: ?*anyopaque, file: File, length: u64) File.SetLengthError!void {
    const disk = operationOn(userdata, file.handle, @src().fn_name) orelse
        return base.fileSetLength(userdata, file, length);
    disk.setLength(file.handle, length) catch |err| switch (err) {
        error.NotOpenForWriting => return error.AccessDenied,
        // Past `Faults.capacity_bytes`: std's set has no NoSpaceLeft (ftruncate makes a sparse
        // file), and the disk holds a file's bytes whole.
        error.NoSpaceLeft => return error.FileTooBig,
        else => |e| return narrow(File.SetLengthError, e),
    };
}

fn fileSetOwner(
    userdata: ?*anyopaque,
    file: File,
    uid: ?File.Uid,
    gid: ?File.Gid,
) File.SetOwnerError!void {
    const disk = operationOn(userdata, file.handle, @src().fn_name) orelse
        return base.fileSetOwner(userdata, file, uid, gid);
    _ = disk.handleOf(file.handle);
}

fn fileSetPermissions(
    userdata: ?*anyopaque,
    file: File,
    permissions: File.Permissions,
) File.SetPermissionsError!void {
    const disk = operationOn(userdata, file.handle, @src().fn_name) orelse
        return base.fileSetPermissions(userdata, file, permissions);
    setMode(disk, disk.handleOf(file.handle).node, @intFromEnum(permissions));
}

fn fileSetTimestamps(
    userdata: ?*anyopaque,
    file: File,
    options: File.SetTimestampsOptions,
) File.SetTimestampsError!void {
    const disk = operationOn(userdata, file.handle, @src().fn_name) orelse
        return base.fileSetTimestamps(userdata, file, options);
    setModified(disk, disk.handleOf(file.handle).node, options.modify_timestamp);
}

/// Cancelation point while it waits.
fn fileLock(userdata: ?*anyopaque, file: File, lock: File.Lock) File.LockError!void {
    const disk = operationOn(userdata, file.handle, @src().fn_name) orelse
        return base.fileLock(userdata, file, lock);
    const sim = State.fromUserdata(userdata);
    if (lock == .none) return fileUnlockOn(sim, disk, file);
    try lockWaiting(sim, disk, file.handle, lock);
}

fn fileTryLock(userdata: ?*anyopaque, file: File, lock: File.Lock) File.LockError!bool {
    const disk = operationOn(userdata, file.handle, @src().fn_name) orelse
        return base.fileTryLock(userdata, file, lock);
    const sim = State.fromUserdata(userdata);
    if (lock == .none) {
        fileUnlockOn(sim, disk, file);
        return true;
    }
    return disk.tryLock(file.handle, lock);
}

fn fileUnlock(userdata: ?*anyopaque, file: File) void {
    const disk = operationOn(userdata, file.handle, @src().fn_name) orelse
        return base.fileUnlock(userdata, file);
    fileUnlockOn(State.fromUserdata(userdata), disk, file);
}

fn fileUnlockOn(sim: *State, disk: *Disk, file: File) void {
    wakeLockWaiters(sim, disk, file.handle);
    const unlocked = disk.tryLock(file.handle, .none);
    std.debug.assert(unlocked); // nothing conflicts with holding no lock
}

/// An exclusive lock becomes shared, at once (flock(2) converts it without a gap here: no
/// other handle can take it exclusive in between, since this one still holds it shared).
fn fileDowngradeLock(userdata: ?*anyopaque, file: File) File.DowngradeLockError!void {
    const disk = operationOn(userdata, file.handle, @src().fn_name) orelse
        return base.fileDowngradeLock(userdata, file);
    const sim = State.fromUserdata(userdata);
    if (disk.handleOf(file.handle).lock != .exclusive) return; // nothing to downgrade
    wakeLockWaiters(sim, disk, file.handle);
    const downgraded = disk.tryLock(file.handle, .shared);
    std.debug.assert(downgraded); // it held the lock alone
}

fn fileRealPath(userdata: ?*anyopaque, file: File, out_buffer: []u8) File.RealPathError!usize {
    const disk = operationOn(userdata, file.handle, @src().fn_name) orelse
        return base.fileRealPath(userdata, file, out_buffer);
    const node = disk.handleOf(file.handle).node;
    if (node.kind == .directory) return pathOf(disk, node, out_buffer);
    // A file has no parent of its own: find a directory that names it (bounded by the
    // directories on the disk).
    for (disk.nodes.items) |directory| {
        if (directory.kind != .directory) continue;
        const index = std.mem.indexOfScalar(*Disk.Node, directory.entries.values(), node) orelse
            continue;
        const name = directory.entries.keys()[index];
        const length = try pathOf(disk, directory, out_buffer);
        const separator: usize = @intFromBool(directory != disk.root);
        if (length + separator + name.len > out_buffer.len) return error.NameTooLong;
        if (separator == 1) out_buffer[length] = '/';
        @memcpy(out_buffer[length + separator ..][0..name.len], name);
        return length + separator + name.len;
    }
    return error.FileNotFound; // unlinked
}

fn fileHardLink(
    userdata: ?*anyopaque,
    file: File,
    new_dir: Dir,
    new_sub_path: []const u8,
    options: File.HardLinkOptions,
) File.HardLinkError!void {
    const sim = State.fromUserdata(userdata);
    const file_disk = diskOf(sim, file.handle);
    const dir_disk = diskOf(sim, new_dir.handle);
    if (file_disk == null and dir_disk == null) {
        return base.fileHardLink(userdata, file, new_dir, new_sub_path, options);
    }
    const disk = file_disk orelse return error.CrossDevice;
    if (dir_disk == null) return error.CrossDevice;
    sim.diskOperation(@src().fn_name);
    const E = File.HardLinkError;
    const node = disk.handleOf(file.handle).node;
    if (node.kind == .directory) return error.PermissionDenied;
    const parent = dirNode(disk, new_dir) catch |err| return narrow(E, err);
    const new = disk.resolve(parent, new_sub_path, false) catch |err| return narrow(E, err);
    if (new.node != null) return error.PathAlreadyExists;
    disk.linkNode(new.parent, new.name, node) catch |err| return narrow(E, err);
}

fn fileMemoryMapCreate(
    userdata: ?*anyopaque,
    file: File,
    options: File.MemoryMap.CreateOptions,
) File.MemoryMap.CreateError!File.MemoryMap {
    const disk = operationOn(userdata, file.handle, @src().fn_name) orelse
        return base.fileMemoryMapCreate(userdata, file, options);
    _ = disk.handleOf(file.handle);
    return fallback(File.MemoryMap.CreateError); // not modelled
}
