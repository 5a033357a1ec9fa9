//! Memory maps of files (`File.MemoryMap`), with std.Io.Threaded's semantics on Linux: the
//! `mmap`, `mremap` and `munmap` calls and their errno triage, and the fallback for a file
//! that cannot be mapped. std.Io's memory map entries (`std_io/memory_map.zig`) are these,
//! behind the VTable's signatures, so that std_io/ only adapts.
//!
//! `create` maps the file `MAP_SHARED_VALIDATE`: the memory *is* the page cache, so `read` and
//! `write` have nothing to synchronise and return at once (as on Threaded: no `msync`; a write
//! through the mapping is visible to every reader of the file immediately, and reaches the disk
//! when the kernel writes the page back, or at `File.sync`). Where the file cannot be mapped
//! (`ENODEV`: a pipe, many procfs files; or any other refusal but `EACCES`, `EOVERFLOW` and
//! cancelation), the map falls back to page-aligned memory from the runtime's allocator that
//! `read` and `write` copy with positional reads and writes, on the loop.
//!
//! Where each call runs: `mmap` with `populate` reads the whole range in and so runs on the
//! blocking lane; without it, `mmap`, `mremap` and `munmap` only edit the address space and are
//! direct syscalls. Every operation that can fail is a cancelation point before it starts.
//!
//! Inherited from Threaded, on purpose: a range past the end of the file is mapped as asked,
//! and touching a page wholly beyond the end raises SIGBUS (size the file first); a length of 0
//! or an offset that is not page-aligned is a caller's bug (`EINVAL`, a panic in Debug).
const std = @import("std");
const builtin = @import("builtin");
const Io = std.Io;
const File = Io.File;
const MemoryMap = File.MemoryMap;
const linux = if (builtin.os.tag == .linux) std.os.linux else struct {};
const posix = std.posix;
const assert = std.debug.assert;
const Threaded = Io.Threaded;
const errnoBug = os.errnoBug;
const os = @import("../os/linux.zig");
const BlockingLane = @import("BlockingLane.zig");
const fs_file = @import("file.zig");

const log = std.log.scoped(.weft);
const page_align = std.heap.page_size_min;
const Memory = []align(page_align) u8;

/// std.Io.Threaded's `CreateFileMapError`: what `mmap` may report before the fallback decides.
const MapError = error{
    SectionOversize,
    AccessDenied,
    PermissionDenied,
    FileBusy,
    LockedMemoryLimitExceeded,
    OperationUnsupported,
    ProcessFdQuotaExceeded,
    SystemFdQuotaExceeded,
    OutOfMemory,
    MappingAlreadyExists,
    Unseekable,
    LockViolation,
} || Io.Cancelable || Io.UnexpectedError;

fn pageAlignment() std.mem.Alignment {
    return .fromByteUnits(std.heap.pageSize());
}

/// Maps the file, or where it cannot be mapped, fills memory from `gpa` with its contents.
pub fn create(
    blocking: *BlockingLane,
    io: Io,
    gpa: std.mem.Allocator,
    file: File,
    options: MemoryMap.CreateOptions,
) MemoryMap.CreateError!MemoryMap {
    if (mapFile(blocking, io, file, options)) |memory| {
        return .{ .file = file, .offset = options.offset, .memory = memory, .section = {} };
    } else |err| switch (err) {
        error.Unseekable, error.Canceled, error.AccessDenied => |e| return e,
        error.OperationUnsupported => {},
        else => if (@import("builtin").mode == .Debug)
            log.warn("memory mapping failed with {t}, falling back to file operations", .{err}),
    }
    const pointer = gpa.rawAlloc(options.len, pageAlignment(), @returnAddress()) orelse
        return error.OutOfMemory;
    const memory: Memory = @alignCast(pointer[0..options.len]);
    errdefer gpa.rawFree(memory, pageAlignment(), @returnAddress());
    if (!options.undefined_contents) {
        try readInto(blocking, io, file, memory, options.offset);
    }
    return .{ .file = file, .offset = options.offset, .memory = memory, .section = null };
}

/// `mmap` of the file: on the blocking lane when `populate` reads it all in, else direct.
fn mapFile(
    blocking: *BlockingLane,
    io: Io,
    file: File,
    options: MemoryMap.CreateOptions,
) MapError!Memory {
    const offset = std.math.cast(i64, options.offset) orelse return error.Unseekable;
    const prot: linux.PROT = .{
        .READ = options.protection.read,
        .WRITE = options.protection.write,
        .EXEC = options.protection.execute,
    };
    const flags: linux.MAP = .{ .TYPE = .SHARED_VALIDATE, .POPULATE = options.populate };
    const args = .{ file.handle, options.len, prot, flags, offset };
    if (!options.populate) {
        try fs_file.checkCancel();
        return mmap(args[0], args[1], args[2], args[3], args[4]);
    }
    return blocking.call(io, mmap, args);
}

fn mmap(fd: i32, len: usize, prot: linux.PROT, flags: linux.MAP, offset: i64) MapError!Memory {
    while (true) {
        const rc = linux.mmap(null, len, prot, flags, fd, offset);
        switch (os.errno(rc)) {
            .SUCCESS => return @as([*]align(page_align) u8, @ptrFromInt(rc))[0..len],
            .INTR => continue,
            .ACCES => return error.AccessDenied,
            .AGAIN => return error.LockedMemoryLimitExceeded,
            .EXIST => return error.MappingAlreadyExists,
            .MFILE => return error.ProcessFdQuotaExceeded,
            .NFILE => return error.SystemFdQuotaExceeded,
            .NODEV => return error.OperationUnsupported,
            .NOMEM => return error.OutOfMemory,
            .PERM => return error.PermissionDenied,
            .TXTBSY => return error.FileBusy,
            .OVERFLOW => return error.Unseekable,
            // A race with close; bad arguments; bad flags for MAP_SHARED_VALIDATE.
            .BADF, .INVAL, .OPNOTSUPP => |e| return errnoBug(e),
            else => |e| return os.unexpectedErrno(e),
        }
    }
}

/// Unmaps (or frees the fallback's memory). Never fails: a failed `munmap` is logged in Debug
/// builds, as std.Io.Threaded logs it (not `errnoBug`'s panic, which Threaded does not make).
pub fn destroy(gpa: std.mem.Allocator, mm: *MemoryMap) void {
    const memory = mm.memory;
    if (mm.section) |_| {
        if (memory.len == 0) return;
        switch (os.errno(linux.munmap(memory.ptr, memory.len))) {
            .SUCCESS => {},
            else => |e| os.unexpectedErrno(e) catch {},
        }
    } else {
        gpa.rawFree(memory, pageAlignment(), @returnAddress());
    }
    mm.* = undefined;
}

/// `mremap` (may move the mapping); the fallback reallocates. Does not touch the file.
pub fn setLength(
    gpa: std.mem.Allocator,
    mm: *MemoryMap,
    new_len: usize,
) MemoryMap.SetLengthError!void {
    const old_memory = mm.memory;
    const alignment = pageAlignment();
    if (mm.section) |_| {
        if (alignment.forward(new_len) == alignment.forward(old_memory.len)) {
            mm.memory.len = new_len;
            return;
        }
        try fs_file.checkCancel();
        const flags: linux.MREMAP = .{ .MAYMOVE = true };
        while (true) {
            const rc = linux.mremap(old_memory.ptr, old_memory.len, new_len, flags, null);
            switch (os.errno(rc)) {
                .SUCCESS => {
                    mm.memory = @as([*]align(page_align) u8, @ptrFromInt(rc))[0..new_len];
                    return;
                },
                .INTR => continue,
                .AGAIN => return error.LockedMemoryLimitExceeded,
                .NOMEM => return error.OutOfMemory,
                .INVAL, .FAULT => |e| return errnoBug(e), // a range or flags of weft's own
                else => |e| return os.unexpectedErrno(e),
            }
        }
    }
    if (gpa.rawRemap(old_memory, alignment, new_len, @returnAddress())) |pointer| {
        mm.memory = @alignCast(pointer[0..new_len]);
        return;
    }
    const pointer = gpa.rawAlloc(new_len, alignment, @returnAddress()) orelse
        return error.OutOfMemory;
    const new_memory: Memory = @alignCast(pointer[0..new_len]);
    const kept = @min(new_len, old_memory.len);
    @memcpy(new_memory[0..kept], old_memory[0..kept]);
    gpa.rawFree(old_memory, alignment, @returnAddress());
    mm.memory = new_memory;
}

/// A mapping is the file: nothing to do. The fallback reads the file into its memory.
pub fn read(blocking: *BlockingLane, io: Io, mm: *MemoryMap) File.ReadPositionalError!void {
    if (mm.section) |_| return;
    return readInto(blocking, io, mm.file, mm.memory, mm.offset);
}

/// A mapping is the file: nothing to do. The fallback writes its memory to the file.
pub fn write(blocking: *BlockingLane, io: Io, mm: *MemoryMap) File.WritePositionalError!void {
    if (mm.section) |_| return;
    var written: usize = 0;
    // Bounded: each round writes at least one byte (a positional write of a non-empty buffer
    // never returns 0 for a regular file) or fails.
    while (written < mm.memory.len) {
        const rest = mm.memory[written..];
        const offset = mm.offset + written;
        const iovecs = [1]posix.iovec_const{.{ .base = rest.ptr, .len = rest.len }};
        const n = try fs_file.writePositional(blocking, io, mm.file, &iovecs, offset);
        if (n == 0) return error.Unexpected;
        written += n;
    }
}

/// Fills `memory` from the file at `offset`; zeroes past the end of the file.
fn readInto(
    blocking: *BlockingLane,
    io: Io,
    file: File,
    memory: []u8,
    offset: u64,
) File.ReadPositionalError!void {
    var filled: usize = 0;
    while (filled < memory.len) {
        const rest = memory[filled..];
        const iovecs = [1]posix.iovec{.{ .base = rest.ptr, .len = rest.len }};
        const n = try fs_file.readPositional(blocking, io, file, &iovecs, offset + filled);
        if (n == 0) {
            @memset(rest, 0);
            return;
        }
        filled += n;
    }
    assert(filled == memory.len);
}
