//! std.Io directory entries: each takes the runtime's state from `userdata` and calls the
//! operation in `fs/dir.zig`, which makes the syscalls and maps their errno (where each runs,
//! loop, lane or direct, is said there); `dirStat`, `dirSetPermissions` and `dirSetOwner` are
//! the file operations of `fs/file.zig` on the directory's descriptor.
const std = @import("std");
const Io = std.Io;
const Dir = Io.Dir;
const File = Io.File;
const os = @import("../os/linux.zig");
const file_io = @import("file.zig");
const fs_dir = @import("../fs/dir.zig");
const fs_file = @import("../fs/file.zig");

const blockingOf = file_io.blockingOf;

/// The directory's descriptor as a file, for the file operations that apply to both.
fn asFile(dir: Dir) File {
    return .{ .handle = dir.handle, .flags = .{ .nonblocking = false } };
}

pub fn dirOpenFile(
    userdata: ?*anyopaque,
    dir: Dir,
    sub_path: []const u8,
    options: Dir.OpenFileOptions,
) File.OpenError!File {
    const blocking, const io = blockingOf(userdata);
    return fs_dir.openFile(blocking, io, dir, sub_path, options);
}

pub fn dirCreateFile(
    userdata: ?*anyopaque,
    dir: Dir,
    sub_path: []const u8,
    options: Dir.CreateFileOptions,
) File.OpenError!File {
    const blocking, const io = blockingOf(userdata);
    return fs_dir.createFile(blocking, io, dir, sub_path, options);
}

pub fn dirOpenDir(
    userdata: ?*anyopaque,
    dir: Dir,
    sub_path: []const u8,
    options: Dir.OpenOptions,
) Dir.OpenError!Dir {
    const blocking, const io = blockingOf(userdata);
    return fs_dir.openDir(blocking, io, dir, sub_path, options);
}

/// Closes each directory. Never fails; not a cancelation point.
pub fn dirClose(userdata: ?*anyopaque, dirs: []const Dir) void {
    _ = userdata;
    for (dirs) |dir| os.closeFd(dir.handle);
}

pub fn dirStat(userdata: ?*anyopaque, dir: Dir) Dir.StatError!Dir.Stat {
    const blocking, const io = blockingOf(userdata);
    return fs_file.stat(blocking, io, asFile(dir));
}

pub fn dirStatFile(
    userdata: ?*anyopaque,
    dir: Dir,
    sub_path: []const u8,
    options: Dir.StatFileOptions,
) Dir.StatFileError!File.Stat {
    const blocking, const io = blockingOf(userdata);
    return fs_dir.statFile(blocking, io, dir, sub_path, options);
}

pub fn dirAccess(
    userdata: ?*anyopaque,
    dir: Dir,
    sub_path: []const u8,
    options: Dir.AccessOptions,
) Dir.AccessError!void {
    const blocking, const io = blockingOf(userdata);
    return fs_dir.access(blocking, io, dir, sub_path, options);
}

pub fn dirCreateDir(
    userdata: ?*anyopaque,
    dir: Dir,
    sub_path: []const u8,
    permissions: Dir.Permissions,
) Dir.CreateDirError!void {
    const blocking, const io = blockingOf(userdata);
    return fs_dir.createDir(blocking, io, dir, sub_path, permissions);
}

pub fn dirCreateDirPath(
    userdata: ?*anyopaque,
    dir: Dir,
    sub_path: []const u8,
    permissions: Dir.Permissions,
) Dir.CreateDirPathError!Dir.CreatePathStatus {
    const blocking, const io = blockingOf(userdata);
    return fs_dir.createDirPath(blocking, io, dir, sub_path, permissions);
}

pub fn dirCreateDirPathOpen(
    userdata: ?*anyopaque,
    dir: Dir,
    sub_path: []const u8,
    permissions: Dir.Permissions,
    options: Dir.OpenOptions,
) Dir.CreateDirPathOpenError!Dir {
    const blocking, const io = blockingOf(userdata);
    return fs_dir.createDirPathOpen(blocking, io, dir, sub_path, permissions, options);
}

pub fn dirDeleteFile(
    userdata: ?*anyopaque,
    dir: Dir,
    sub_path: []const u8,
) Dir.DeleteFileError!void {
    const blocking, const io = blockingOf(userdata);
    return fs_dir.deleteFile(blocking, io, dir, sub_path);
}

pub fn dirDeleteDir(userdata: ?*anyopaque, dir: Dir, sub_path: []const u8) Dir.DeleteDirError!void {
    const blocking, const io = blockingOf(userdata);
    return fs_dir.deleteDir(blocking, io, dir, sub_path);
}

pub fn dirRename(
    userdata: ?*anyopaque,
    old_dir: Dir,
    old_sub_path: []const u8,
    new_dir: Dir,
    new_sub_path: []const u8,
) Dir.RenameError!void {
    const blocking, const io = blockingOf(userdata);
    return fs_dir.rename(blocking, io, old_dir, old_sub_path, new_dir, new_sub_path);
}

pub fn dirRenamePreserve(
    userdata: ?*anyopaque,
    old_dir: Dir,
    old_sub_path: []const u8,
    new_dir: Dir,
    new_sub_path: []const u8,
) Dir.RenamePreserveError!void {
    const blocking, const io = blockingOf(userdata);
    return fs_dir.renamePreserve(blocking, io, old_dir, old_sub_path, new_dir, new_sub_path);
}

pub fn dirSymLink(
    userdata: ?*anyopaque,
    dir: Dir,
    target_path: []const u8,
    sym_link_path: []const u8,
    flags: Dir.SymLinkFlags,
) Dir.SymLinkError!void {
    const blocking, const io = blockingOf(userdata);
    return fs_dir.symLink(blocking, io, dir, target_path, sym_link_path, flags);
}

pub fn dirReadLink(
    userdata: ?*anyopaque,
    dir: Dir,
    sub_path: []const u8,
    buffer: []u8,
) Dir.ReadLinkError!usize {
    const blocking, const io = blockingOf(userdata);
    return fs_dir.readLink(blocking, io, dir, sub_path, buffer);
}

pub fn dirHardLink(
    userdata: ?*anyopaque,
    old_dir: Dir,
    old_sub_path: []const u8,
    new_dir: Dir,
    new_sub_path: []const u8,
    options: Dir.HardLinkOptions,
) Dir.HardLinkError!void {
    const blocking, const io = blockingOf(userdata);
    return fs_dir.hardLink(blocking, io, old_dir, old_sub_path, new_dir, new_sub_path, options);
}

pub fn fileHardLink(
    userdata: ?*anyopaque,
    file: File,
    new_dir: Dir,
    new_sub_path: []const u8,
    options: File.HardLinkOptions,
) File.HardLinkError!void {
    const blocking, const io = blockingOf(userdata);
    return fs_dir.hardLinkFile(blocking, io, file, new_dir, new_sub_path, options);
}

/// `fchmod` of the directory itself.
pub fn dirSetPermissions(
    userdata: ?*anyopaque,
    dir: Dir,
    permissions: Dir.Permissions,
) Dir.SetPermissionsError!void {
    const blocking, const io = blockingOf(userdata);
    return fs_file.setPermissions(blocking, io, asFile(dir), permissions);
}

/// `fchown` of the directory itself.
pub fn dirSetOwner(
    userdata: ?*anyopaque,
    dir: Dir,
    owner: ?File.Uid,
    group: ?File.Gid,
) Dir.SetOwnerError!void {
    const blocking, const io = blockingOf(userdata);
    return fs_file.setOwner(blocking, io, asFile(dir), owner, group);
}

pub fn dirRead(
    userdata: ?*anyopaque,
    reader: *Dir.Reader,
    entries: []Dir.Entry,
) Dir.Reader.Error!usize {
    const blocking, const io = blockingOf(userdata);
    return fs_dir.read(blocking, io, reader, entries);
}

pub fn dirRealPath(userdata: ?*anyopaque, dir: Dir, out_buffer: []u8) Dir.RealPathError!usize {
    _ = userdata;
    return fs_dir.realPath(dir, out_buffer);
}

pub fn dirRealPathFile(
    userdata: ?*anyopaque,
    dir: Dir,
    sub_path: []const u8,
    out_buffer: []u8,
) Dir.RealPathFileError!usize {
    const blocking, const io = blockingOf(userdata);
    return fs_dir.realPathFile(blocking, io, dir, sub_path, out_buffer);
}

pub fn dirSetTimestamps(
    userdata: ?*anyopaque,
    dir: Dir,
    sub_path: []const u8,
    options: Dir.SetTimestampsOptions,
) Dir.SetTimestampsError!void {
    const blocking, const io = blockingOf(userdata);
    return fs_dir.setTimestamps(blocking, io, dir, sub_path, options);
}

pub fn dirSetFileOwner(
    userdata: ?*anyopaque,
    dir: Dir,
    sub_path: []const u8,
    owner: ?File.Uid,
    group: ?File.Gid,
    options: Dir.SetFileOwnerOptions,
) Dir.SetFileOwnerError!void {
    const blocking, const io = blockingOf(userdata);
    return fs_dir.setFileOwner(blocking, io, dir, sub_path, owner, group, options);
}

pub fn dirSetFilePermissions(
    userdata: ?*anyopaque,
    dir: Dir,
    sub_path: []const u8,
    permissions: Dir.Permissions,
    options: Dir.SetFilePermissionsOptions,
) Dir.SetFilePermissionsError!void {
    const blocking, const io = blockingOf(userdata);
    return fs_dir.setFilePermissions(blocking, io, dir, sub_path, permissions, options);
}

pub fn dirCreateFileAtomic(
    userdata: ?*anyopaque,
    dir: Dir,
    dest_path: []const u8,
    options: Dir.CreateFileAtomicOptions,
) Dir.CreateFileAtomicError!File.Atomic {
    const blocking, const io = blockingOf(userdata);
    return fs_dir.createFileAtomic(blocking, io, dir, dest_path, options);
}
