//! errno → std.Io's file and directory error sets, for the errno values that more than one
//! file, directory or process operation maps alike. Each mapping is std.Io.Threaded's on
//! Linux, under weft's errno policy (`os/linux.zig`): an errno only a bug can cause goes to
//! `errnoBug` (a panic in Debug builds, where Threaded panics too), one a correct program may
//! meet without a name in the error set to `unexpectedErrno`.
//!
//! An operation switches first on the errno values it maps its own way, then hands the rest to
//! the narrowest helper here whose mapping it shares, so that one errno is named once per
//! meaning. The helpers nest the same way: `pathError` (what resolving any path can say) under
//! the `openat`, new-entry, rename and unlink maps, and the new-entry map (`createEntryError`)
//! under the link map. (Rejected: one table for every call, which would give calls errors
//! Threaded does not give them, or that their error sets lack.)
const std = @import("std");
const assert = std.debug.assert;
const Io = std.Io;
const Dir = Io.Dir;
const File = Io.File;
const errnoBug = os.errnoBug;
const os = @import("../os/linux.zig");

/// The errno of a failed loop operation or lane call, whose result is `-errno`.
pub fn errnoOf(result: i32) os.E {
    assert(result < 0);
    return @enumFromInt(-result);
}

/// The errors of resolving a path, which every call taking one may report.
pub const PathError = error{
    AccessDenied,
    SymLinkLoop,
    NameTooLong,
    FileNotFound,
    NotDir,
    SystemResources,
    BadPathName,
    Unexpected,
};

pub fn pathError(e: os.E) PathError {
    return switch (e) {
        .ACCES => error.AccessDenied,
        .LOOP => error.SymLinkLoop,
        .NAMETOOLONG => error.NameTooLong,
        .NOENT => error.FileNotFound,
        .NOTDIR => error.NotDir,
        .NOMEM => error.SystemResources,
        .ILSEQ => error.BadPathName, // not UTF-8 where the file system requires it
        else => os.unexpectedErrno(e),
    };
}

/// The `openat` errors of opening anything: a file, a directory, an unnamed file.
pub const OpenAnyError = PathError || error{
    ProcessFdQuotaExceeded,
    SystemFdQuotaExceeded,
    NoDevice,
    PermissionDenied,
};

pub fn openAnyError(e: os.E) OpenAnyError {
    return switch (e) {
        .INVAL => error.BadPathName,
        .MFILE => error.ProcessFdQuotaExceeded,
        .NFILE => error.SystemFdQuotaExceeded,
        .NODEV, .NXIO => error.NoDevice,
        .PERM => error.PermissionDenied,
        else => pathError(e),
    };
}

/// The `openat` errors of a file opened or created (`dir.openFile`, `dir.createFile`).
pub fn openError(e: os.E) File.OpenError {
    return switch (e) {
        .FBIG, .OVERFLOW => error.FileTooBig,
        .ISDIR => error.IsDir,
        .SRCH => error.FileNotFound, // a procfs entry whose process is gone
        .NOSPC => error.NoSpaceLeft,
        .EXIST => error.PathAlreadyExists,
        .BUSY => error.DeviceBusy,
        .OPNOTSUPP => error.FileLocksUnsupported,
        .AGAIN => error.WouldBlock,
        .TXTBSY => error.FileBusy,
        .ROFS => error.ReadOnlyFileSystem,
        .FAULT, .BADF => errnoBug(e), // a bad path pointer; a directory used after close
        else => openAnyError(e),
    };
}

/// The `statx` errors of an open descriptor (`AT_EMPTY_PATH`): only memory can run out.
pub fn statFdError(e: os.E) error{ SystemResources, Unexpected } {
    return switch (e) {
        .NOMEM => error.SystemResources,
        // An empty path on an open descriptor resolves nothing: only a descriptor used after
        // close, or weft's own buffer or flags, could fail.
        .ACCES, .BADF, .FAULT, .INVAL, .LOOP, .NAMETOOLONG, .NOENT, .NOTDIR => errnoBug(e),
        else => os.unexpectedErrno(e),
    };
}

/// The errors positional and streaming reads share.
pub fn readError(e: os.E) error{
    NotOpenForReading,
    WouldBlock,
    InputOutput,
    IsDir,
    SystemResources,
    Unexpected,
} {
    return switch (e) {
        .BADF => error.NotOpenForReading,
        .AGAIN => error.WouldBlock,
        .IO => error.InputOutput,
        .ISDIR => error.IsDir,
        .NOBUFS, .NOMEM => error.SystemResources,
        .INVAL, .FAULT => errnoBug(e), // a bad buffer
        else => os.unexpectedErrno(e),
    };
}

/// The errors positional and streaming writes share.
pub fn writeError(e: os.E) error{
    NotOpenForWriting,
    WouldBlock,
    DiskQuota,
    FileTooBig,
    InputOutput,
    NoSpaceLeft,
    PermissionDenied,
    BrokenPipe,
    DeviceBusy,
    Unexpected,
} {
    return switch (e) {
        .BADF => error.NotOpenForWriting,
        .AGAIN => error.WouldBlock,
        .DQUOT => error.DiskQuota,
        .FBIG => error.FileTooBig,
        .IO => error.InputOutput,
        .NOSPC => error.NoSpaceLeft,
        .PERM => error.PermissionDenied,
        .PIPE => error.BrokenPipe,
        .BUSY => error.DeviceBusy,
        .INVAL, .FAULT => errnoBug(e), // a bad buffer
        .DESTADDRREQ, .CONNRESET => errnoBug(e), // not a socket
        else => os.unexpectedErrno(e),
    };
}

/// The errors of fchmod, fchown and fchownat, which std.Io.Threaded maps alike, and of
/// fchmodat after the few it maps first.
pub fn ownerOrModeError(e: os.E) (File.SetOwnerError || File.SetPermissionsError) {
    return switch (e) {
        .ACCES => error.AccessDenied,
        .IO => error.InputOutput,
        .LOOP => error.SymLinkLoop,
        .NOENT, .NOTDIR => error.FileNotFound,
        .NOMEM => error.SystemResources,
        .PERM => error.PermissionDenied,
        .ROFS => error.ReadOnlyFileSystem,
        .BADF, .FAULT, .INVAL => errnoBug(e), // used after close; a bad path; bad flags
        else => os.unexpectedErrno(e),
    };
}

/// The errors of `utimensat`, with a path or without.
pub fn timestampsError(e: os.E) File.SetTimestampsError {
    return switch (e) {
        .ACCES => error.AccessDenied,
        .PERM => error.PermissionDenied,
        .ROFS => error.ReadOnlyFileSystem,
        .BADF, .FAULT, .INVAL => errnoBug(e), // used after close; a bad path; bad times or flags
        else => os.unexpectedErrno(e),
    };
}

/// The `readlinkat` errors as std.Io.Threaded maps them.
pub fn readLinkError(e: os.E) Dir.ReadLinkError {
    return switch (e) {
        .INVAL => error.NotLink,
        .IO => error.FileSystem,
        .FAULT => errnoBug(e), // a bad path or buffer
        else => pathError(e),
    };
}

/// The errors that the calls making a new name in a directory (`mkdirat`, `symlinkat`,
/// `linkat`) map alike.
pub const CreateEntryError = PathError || error{
    PermissionDenied,
    DiskQuota,
    PathAlreadyExists,
    NoSpaceLeft,
    ReadOnlyFileSystem,
};

pub fn createEntryError(e: os.E) CreateEntryError {
    return switch (e) {
        .PERM => error.PermissionDenied,
        .DQUOT => error.DiskQuota,
        .EXIST => error.PathAlreadyExists,
        .NOSPC => error.NoSpaceLeft,
        .ROFS => error.ReadOnlyFileSystem,
        .FAULT => errnoBug(e), // a bad path pointer
        else => pathError(e),
    };
}

/// The `linkat` errors of both hard-link entries.
pub fn linkError(e: os.E) File.HardLinkError {
    return switch (e) {
        .IO => error.HardwareFailure,
        .MLINK => error.LinkQuotaExceeded,
        .XDEV => error.CrossDevice,
        .INVAL => errnoBug(e), // bad flags
        else => createEntryError(e),
    };
}

/// The `unlinkat` errors that deleting a file and a directory share.
pub const UnlinkError = PathError || error{
    PermissionDenied,
    FileBusy,
    FileSystem,
    ReadOnlyFileSystem,
};

pub fn unlinkError(e: os.E) UnlinkError {
    return switch (e) {
        .PERM => error.PermissionDenied,
        .BUSY => error.FileBusy,
        .IO => error.FileSystem,
        .ROFS => error.ReadOnlyFileSystem,
        // EXIST is POSIX's other spelling of NOTEMPTY, which Linux does not use; a last
        // component `.` or bad flags; a bad path; used after close.
        .EXIST, .INVAL, .FAULT, .BADF => errnoBug(e),
        else => pathError(e),
    };
}

/// The `renameat2` errors that both renames map alike.
pub const RenameError = PathError || error{
    PermissionDenied,
    FileBusy,
    DiskQuota,
    IsDir,
    LinkQuotaExceeded,
    NoSpaceLeft,
    ReadOnlyFileSystem,
    CrossDevice,
};

pub fn renameError(e: os.E) RenameError {
    return switch (e) {
        .PERM => error.PermissionDenied,
        .BUSY => error.FileBusy,
        .DQUOT => error.DiskQuota,
        .ISDIR => error.IsDir,
        .MLINK => error.LinkQuotaExceeded,
        .NOSPC => error.NoSpaceLeft,
        .ROFS => error.ReadOnlyFileSystem,
        .XDEV => error.CrossDevice,
        .FAULT, .INVAL => errnoBug(e), // a bad path; bad flags, or a directory moved into itself
        else => pathError(e),
    };
}

test "fs errno: each map keeps its own meaning of a shared errno" {
    const expectEqual = std.testing.expectEqual;
    // The same errno, named differently where Threaded does.
    try expectEqual(error.FileNotFound, pathError(.NOENT));
    try expectEqual(error.FileNotFound, openError(.SRCH));
    try expectEqual(error.BadPathName, openAnyError(.INVAL));
    try expectEqual(error.NotLink, readLinkError(.INVAL));
    try expectEqual(error.FileSystem, unlinkError(.IO));
    try expectEqual(error.HardwareFailure, linkError(.IO));
    try expectEqual(error.PathAlreadyExists, linkError(.EXIST)); // through createEntryError
    try expectEqual(error.FileNotFound, ownerOrModeError(.NOTDIR));
    try expectEqual(error.NotDir, renameError(.NOTDIR));
    try expectEqual(error.DeviceBusy, openError(.BUSY));
    try expectEqual(error.FileBusy, unlinkError(.BUSY));
    try expectEqual(error.SystemResources, readError(.NOBUFS));
    try expectEqual(error.BrokenPipe, writeError(.PIPE));
}
