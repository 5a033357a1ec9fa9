//! std.Io files and directories on weft, written against std.Io only. Runs on both backends
//! (`WEFT_BACKEND`): io_uring runs the file system operations on the loop, epoll on the
//! blocking lane. Errors are compared with std.Io.Threaded's for the same call.
const std = @import("std");
const builtin = @import("builtin");
const Io = std.Io;
const File = Io.File;
const Dir = Io.Dir;
const linux = if (builtin.os.tag == .linux) std.os.linux else struct {};
const testing = std.testing;
const Runtime = @import("../Runtime.zig");
const parked = @import("parked.zig");
const os = @import("../os/linux.zig");
const qemu = @import("qemu.zig");
const weft_config = @import("../config.zig");

fn withRuntime(comptime body: fn (io: Io) anyerror!void) !void {
    var rt = try Runtime.init(testing.allocator, .{});
    defer rt.deinit();
    try body(rt.io());
}

/// A fresh directory under /tmp, deleted with everything in it by `deinit`.
pub const TmpDir = struct {
    parent: Dir,
    dir: Dir,
    name_buffer: [40]u8,
    name_len: usize,

    pub fn init(io: Io) !TmpDir {
        var suffix: [8]u8 = undefined;
        io.random(&suffix);
        var tmp: TmpDir = .{
            .parent = undefined,
            .dir = undefined,
            .name_buffer = undefined,
            .name_len = 0,
        };
        const name = try std.fmt.bufPrint(&tmp.name_buffer, "weft-fs-{x}", .{suffix});
        tmp.name_len = name.len;
        tmp.parent = try Dir.cwd().openDir(io, "/tmp", .{});
        errdefer tmp.parent.close(io);
        try tmp.parent.createDir(io, name, .default_dir);
        tmp.dir = try tmp.parent.openDir(io, name, .{ .iterate = true });
        return tmp;
    }

    pub fn deinit(tmp: *TmpDir, io: Io) void {
        tmp.dir.close(io);
        tmp.parent.deleteTree(io, tmp.name_buffer[0..tmp.name_len]) catch {};
        tmp.parent.close(io);
    }
};

/// A pipe as two std.Io files: [0] reads, [1] writes.
pub fn pipe() ![2]File {
    var fds: [2]i32 = undefined;
    try testing.expectEqual(@as(usize, 0), linux.pipe2(&fds, .{ .CLOEXEC = true }));
    return .{
        .{ .handle = fds[0], .flags = .{ .nonblocking = false } },
        .{ .handle = fds[1], .flags = .{ .nonblocking = false } },
    };
}

/// The permission bits of an open file.
fn modeOf(io: Io, file: File) !u32 {
    return (try file.stat(io)).permissions.toMode() & 0o777;
}

test "fs: a name over 255 bytes is NameTooLong from every path call, never a panic" {
    try withRuntime(struct {
        fn body(io: Io) !void {
            var tmp: TmpDir = try .init(io);
            defer tmp.deinit(io);
            const dir = tmp.dir;
            const long = "n" ** 256;
            const nested = "x/" ++ long;
            try testing.expectError(error.NameTooLong, dir.statFile(io, long, .{}));
            try testing.expectError(error.NameTooLong, dir.statFile(io, long, .{
                .follow_symlinks = false,
            }));
            try testing.expectError(error.NameTooLong, dir.openFile(io, long, .{}));
            try testing.expectError(error.NameTooLong, dir.createFile(io, long, .{}));
            try testing.expectError(error.NameTooLong, dir.openDir(io, long, .{}));
            try testing.expectError(error.NameTooLong, dir.createDir(io, long, .default_dir));
            try testing.expectError(error.NameTooLong, dir.deleteFile(io, long));
            try testing.expectError(error.NameTooLong, dir.deleteDir(io, long));
            try testing.expectError(error.NameTooLong, dir.access(io, long, .{}));
            var buffer: [16]u8 = undefined;
            try testing.expectError(error.NameTooLong, dir.readLink(io, long, &buffer));
            try testing.expectError(error.NameTooLong, dir.symLink(io, "target", long, .{}));
            try dir.writeFile(io, .{ .sub_path = "short", .data = "" });
            try testing.expectError(error.NameTooLong, dir.rename("short", dir, long, io));
            try dir.createDir(io, "x", .default_dir); // else the lookup of x fails first
            try testing.expectError(error.NameTooLong, dir.statFile(io, nested, .{}));
        }
    }.body);
}

test "fs: positional write and read, stat, length, setLength, sync" {
    try withRuntime(struct {
        fn body(io: Io) !void {
            var tmp: TmpDir = try .init(io);
            defer tmp.deinit(io);
            const file = try tmp.dir.createFile(io, "data", .{ .read = true });
            defer file.close(io);
            try file.writePositionalAll(io, "hello, world", 0);
            try file.writePositionalAll(io, "W", 7);
            var buffer: [32]u8 = undefined;
            const n = try file.readPositionalAll(io, &buffer, 0);
            try testing.expectEqualStrings("hello, World", buffer[0..n]);
            // Past the end: 0, not an error.
            try testing.expectEqual(@as(usize, 0), try file.readPositional(io, &.{&buffer}, 100));
            const stat = try file.stat(io);
            try testing.expectEqual(@as(u64, 12), stat.size);
            try testing.expectEqual(File.Kind.file, stat.kind);
            try file.setLength(io, 5);
            try testing.expectEqual(@as(u64, 5), try file.length(io));
            try file.sync(io);
            try testing.expectError(error.FileTooBig, file.setLength(io, std.math.maxInt(u64)));
        }
    }.body);
}

test "fs: streaming writer and reader, seek" {
    try withRuntime(struct {
        fn body(io: Io) !void {
            var tmp: TmpDir = try .init(io);
            defer tmp.deinit(io);
            const file = try tmp.dir.createFile(io, "stream", .{ .read = true });
            defer file.close(io);
            var write_buffer: [8]u8 = undefined;
            var writer = file.writerStreaming(io, &write_buffer);
            // Larger than the buffer, with a splat: several drains.
            try writer.interface.writeAll("line one\nline two\n");
            try writer.interface.splatByteAll('=', 100);
            try writer.interface.flush();
            try io.vtable.fileSeekTo(io.userdata, file, 5);
            var read_buffer: [16]u8 = undefined;
            var reader = file.readerStreaming(io, &read_buffer);
            const rest = try reader.interface.allocRemaining(testing.allocator, .unlimited);
            defer testing.allocator.free(rest);
            try testing.expectEqual(@as(usize, 13 + 100), rest.len);
            try testing.expect(std.mem.startsWith(u8, rest, "one\nline two\n===="));
            try io.vtable.fileSeekTo(io.userdata, file, 0);
            try io.vtable.fileSeekBy(io.userdata, file, 9);
            var small: [4]u8 = undefined;
            try testing.expectEqual(@as(usize, 4), try file.readStreaming(io, &.{&small}));
            try testing.expectEqualStrings("line", &small);
        }
    }.body);
}

test "fs: a pipe read blocked in the kernel is canceled" {
    try withRuntime(struct {
        fn readOne(io: Io, file: File) !usize {
            var buffer: [8]u8 = undefined;
            return file.readStreaming(io, &.{&buffer});
        }
        fn body(io: Io) !void {
            const ends = try pipe();
            defer File.closeMany(io, &ends);
            var blocked = try io.concurrent(readOne, .{ io, ends[0] });
            try parked.waitParked(io, &blocked, .cancelable);
            try testing.expectError(error.Canceled, blocked.cancel(io));
            // The pipe still works: nothing was consumed by the canceled read.
            try ends[1].writeStreamingAll(io, "after");
            var buffer: [8]u8 = undefined;
            const n = try ends[0].readStreaming(io, &.{&buffer});
            try testing.expectEqualStrings("after", buffer[0..n]);
        }
    }.body);
}

test "fs: flock — tryLock, a waiting lock, cancel of a waiting lock, downgrade" {
    try withRuntime(struct {
        fn lockExclusive(io: Io, file: File) !void {
            try file.lock(io, .exclusive);
        }
        fn body(io: Io) !void {
            var tmp: TmpDir = try .init(io);
            defer tmp.deinit(io);
            const first = try tmp.dir.createFile(io, "lock", .{});
            defer first.close(io);
            // A second open file description: flock locks conflict between the two.
            const second = try tmp.dir.openFile(io, "lock", .{});
            defer second.close(io);
            try first.lock(io, .exclusive);
            try testing.expect(!try second.tryLock(io, .shared));
            var waiting = try io.concurrent(lockExclusive, .{ io, second });
            // Parked in the pause between two attempts: a waiting lock, not one not yet tried.
            try parked.waitParked(io, &waiting, .cancelable);
            try testing.expectError(error.Canceled, waiting.cancel(io));
            waiting = try io.concurrent(lockExclusive, .{ io, second });
            first.unlock(io);
            try waiting.await(io);
            try testing.expect(!try first.tryLock(io, .shared));
            try second.downgradeLock(io);
            try testing.expect(try first.tryLock(io, .shared));
            first.unlock(io);
            second.unlock(io);
        }
    }.body);
}

test "fs: setPermissions and setOwner" {
    try withRuntime(struct {
        fn body(io: Io) !void {
            var tmp: TmpDir = try .init(io);
            defer tmp.deinit(io);
            const file = try tmp.dir.createFile(io, "mode", .{});
            defer file.close(io);
            try file.setPermissions(io, .fromMode(0o640));
            try testing.expectEqual(@as(u32, 0o640), try modeOf(io, file));
            // Leaving both unchanged is allowed for anyone.
            try file.setOwner(io, null, null);
            try testing.expect(!try file.isTty(io));
        }
    }.body);
}

test "fs: a directory's owner changes for root and is refused to others; a file is no tty" {
    try withRuntime(struct {
        fn body(io: Io) !void {
            var tmp: TmpDir = try .init(io);
            defer tmp.deinit(io);
            try tmp.dir.createDir(io, "owned", .default_dir);
            var dir = try tmp.dir.openDir(io, "owned", .{ .iterate = true });
            defer dir.close(io);
            try dir.setOwner(io, null, null); // leaving both unchanged is allowed for anyone
            const nobody = 65534;
            if (linux.getuid() == 0) {
                try dir.setOwner(io, nobody, nobody);
                try testing.expectEqual([2]u32{ nobody, nobody }, try ownerOf(dir.handle));
                try dir.setOwner(io, 0, null);
                try testing.expectEqual([2]u32{ 0, nobody }, try ownerOf(dir.handle));
            } else {
                try testing.expectError(error.PermissionDenied, dir.setOwner(io, nobody, null));
            }
            const file = try tmp.dir.createFile(io, "plain", .{});
            defer file.close(io);
            try testing.expect(!try file.supportsAnsiEscapeCodes(io));
            try testing.expectError(error.NotTerminalDevice, file.enableAnsiEscapeCodes(io));
        }

        fn ownerOf(fd: linux.fd_t) ![2]u32 {
            var stat: linux.Statx = undefined;
            const mask: linux.STATX = .{ .UID = true, .GID = true };
            const rc = linux.statx(fd, "", linux.AT.EMPTY_PATH, mask, &stat);
            if (linux.errno(rc) != .SUCCESS) return error.Unexpected;
            return .{ stat.uid, stat.gid };
        }
    }.body);
}

/// Runs `call` on std.Io.Threaded and on weft and expects the same outcome.
fn expectSameAsThreaded(comptime call: fn (io: Io, dir: Dir) anyerror!void) !void {
    const both = try runOnBoth(void, call);
    if (both.reference) |_| {
        try both.outcome;
    } else |expected| {
        try testing.expectError(expected, both.outcome);
    }
}

/// What `call` gave on std.Io.Threaded and on weft, each in a fresh directory, and the fast
/// and slow attempts weft's made.
fn Outcomes(comptime T: type) type {
    return struct { reference: anyerror!T, outcome: anyerror!T, counts: NowaitCounts };
}

fn runOnBoth(comptime T: type, comptime call: fn (io: Io, dir: Dir) anyerror!T) !Outcomes(T) {
    var threaded: Io.Threaded = .init(testing.allocator, .{});
    defer threaded.deinit();
    const reference: anyerror!T = reference: {
        const t_io = threaded.io();
        var tmp: TmpDir = try .init(t_io);
        defer tmp.deinit(t_io);
        break :reference call(t_io, tmp.dir);
    };
    var rt = try Runtime.init(testing.allocator, .{});
    defer rt.deinit();
    const io = rt.io();
    var tmp: TmpDir = try .init(io);
    defer tmp.deinit(io);
    const before = NowaitCounts.start();
    const outcome = call(io, tmp.dir);
    return .{ .reference = reference, .outcome = outcome, .counts = before.since() };
}

test "fs: errors are std.Io.Threaded's" {
    try expectSameAsThreaded(struct {
        fn call(io: Io, dir: Dir) !void {
            const file = try dir.createFile(io, "w", .{});
            defer file.close(io);
            var buffer: [4]u8 = undefined;
            _ = try file.readPositional(io, &.{&buffer}, 0);
        }
    }.call);
    try expectSameAsThreaded(struct {
        fn call(io: Io, dir: Dir) !void {
            (try dir.createFile(io, "r", .{})).close(io);
            const file = try dir.openFile(io, "r", .{});
            defer file.close(io);
            try file.writePositionalAll(io, "x", 0);
        }
    }.call);
    try expectSameAsThreaded(struct {
        fn call(io: Io, dir: Dir) !void {
            _ = dir;
            const ends = try pipe();
            defer File.closeMany(io, &ends);
            try ends[1].writePositionalAll(io, "x", 0);
        }
    }.call);
    try expectSameAsThreaded(struct {
        fn call(io: Io, dir: Dir) !void {
            _ = dir;
            const ends = try pipe();
            defer File.closeMany(io, &ends);
            try io.vtable.fileSeekTo(io.userdata, ends[0], 1);
        }
    }.call);
    try expectSameAsThreaded(struct {
        fn call(io: Io, dir: Dir) !void {
            _ = dir;
            const null_file = try Dir.cwd().openFile(io, "/dev/null", .{ .mode = .read_write });
            defer null_file.close(io);
            try null_file.setLength(io, 1);
        }
    }.call);
    try expectSameAsThreaded(struct {
        fn call(io: Io, dir: Dir) !void {
            _ = dir;
            const ends = try pipe();
            ends[0].close(io);
            defer ends[1].close(io);
            try ends[1].writeStreamingAll(io, "x");
        }
    }.call);
}

test "fs: directories — create, iterate, stat, rename, delete" {
    try withRuntime(struct {
        fn body(io: Io) !void {
            var tmp: TmpDir = try .init(io);
            defer tmp.deinit(io);
            try tmp.dir.createDirPath(io, "a/b/c");
            const status = try tmp.dir.createDirPathStatus(io, "a/b", .default_dir);
            try testing.expectEqual(Dir.CreatePathStatus.existed, status);
            const iterable: Dir.OpenOptions = .{ .iterate = true };
            var sub = try tmp.dir.createDirPathOpen(io, "a/b/d", .{ .open_options = iterable });
            defer sub.close(io);
            try sub.writeFile(io, .{ .sub_path = "f1", .data = "one" });
            try sub.writeFile(io, .{ .sub_path = "f2", .data = "two" });
            try sub.createDir(io, "inner", .default_dir);
            // Iteration sees every entry once, with its kind, and not . or ..
            var seen: [3]bool = @splat(false);
            var it = sub.iterate();
            while (try it.next(io)) |entry| {
                const names = [_][]const u8{ "f1", "f2", "inner" };
                const kinds = [_]File.Kind{ .file, .file, .directory };
                for (names, kinds, 0..) |name, kind, i| {
                    if (!std.mem.eql(u8, name, entry.name)) continue;
                    try testing.expect(!seen[i]);
                    try testing.expectEqual(kind, entry.kind);
                    seen[i] = true;
                }
            }
            try testing.expect(seen[0] and seen[1] and seen[2]);
            const stat = try sub.statFile(io, "f1", .{});
            try testing.expectEqual(@as(u64, 3), stat.size);
            try testing.expectEqual(File.Kind.directory, (try sub.stat(io)).kind);
            try sub.rename("f1", sub, "g1", io);
            try testing.expectError(error.FileNotFound, sub.statFile(io, "f1", .{}));
            const preserved = sub.renamePreserve("g1", sub, "f2", io);
            try testing.expectError(error.PathAlreadyExists, preserved);
            try sub.access(io, "g1", .{ .read = true });
            try testing.expectError(error.FileNotFound, sub.access(io, "f1", .{}));
            try sub.deleteFile(io, "g1");
            try testing.expectError(error.IsDir, sub.deleteFile(io, "inner"));
            try sub.deleteDir(io, "inner");
            var buffer: [8]u8 = undefined;
            try testing.expectEqualStrings("two", try sub.readFile(io, "f2", &buffer));
            const no_dir: Dir.OpenFileOptions = .{ .allow_directory = false };
            try testing.expectError(error.IsDir, tmp.dir.openFile(io, "a", no_dir));
        }
    }.body);
}

test "fs: symlinks and hard links" {
    try withRuntime(struct {
        fn body(io: Io) !void {
            var tmp: TmpDir = try .init(io);
            defer tmp.deinit(io);
            try tmp.dir.writeFile(io, .{ .sub_path = "target", .data = "data" });
            try tmp.dir.symLink(io, "target", "link", .{});
            var buffer: [64]u8 = undefined;
            const n = try tmp.dir.readLink(io, "link", &buffer);
            try testing.expectEqualStrings("target", buffer[0..n]);
            try testing.expectError(error.NotLink, tmp.dir.readLink(io, "target", &buffer));
            const link_stat = try tmp.dir.statFile(io, "link", .{ .follow_symlinks = false });
            try testing.expectEqual(File.Kind.sym_link, link_stat.kind);
            try testing.expectEqual(File.Kind.file, (try tmp.dir.statFile(io, "link", .{})).kind);
            try tmp.dir.hardLink("target", tmp.dir, "hard", io, .{});
            try testing.expectEqualStrings("data", try tmp.dir.readFile(io, "hard", &buffer));
            try testing.expectError(error.PathAlreadyExists, tmp.dir.symLink(io, "x", "hard", .{}));
            try tmp.dir.setPermissions(io, .fromMode(0o750));
            const dir_mode = (try tmp.dir.stat(io)).permissions.toMode() & 0o777;
            try testing.expectEqual(@as(u32, 0o750), dir_mode);
        }
    }.body);
}

test "fs: directory errors are std.Io.Threaded's" {
    try expectSameAsThreaded(struct {
        fn call(io: Io, dir: Dir) !void {
            _ = try dir.openFile(io, "missing", .{});
        }
    }.call);
    try expectSameAsThreaded(struct {
        fn call(io: Io, dir: Dir) !void {
            (try dir.createFile(io, "x", .{})).close(io);
            _ = try dir.createFile(io, "x", .{ .exclusive = true });
        }
    }.call);
    try expectSameAsThreaded(struct {
        fn call(io: Io, dir: Dir) !void {
            (try dir.createFile(io, "x", .{})).close(io);
            _ = try dir.openDir(io, "x", .{});
        }
    }.call);
    try expectSameAsThreaded(struct {
        fn call(io: Io, dir: Dir) !void {
            try dir.createDir(io, "d", .default_dir);
            (try dir.createFile(io, "d/x", .{})).close(io);
            try dir.deleteDir(io, "d");
        }
    }.call);
    try expectSameAsThreaded(struct {
        fn call(io: Io, dir: Dir) !void {
            try dir.createDir(io, "d", .default_dir);
            try dir.createDir(io, "e", .default_dir);
            (try dir.createFile(io, "e/x", .{})).close(io);
            try dir.rename("d", dir, "e", io);
        }
    }.call);
    try expectSameAsThreaded(struct {
        fn call(io: Io, dir: Dir) !void {
            (try dir.createFile(io, "x", .{})).close(io);
            try dir.createDirPath(io, "x/y");
        }
    }.call);
    try expectSameAsThreaded(struct {
        fn call(io: Io, dir: Dir) !void {
            _ = try dir.statFile(io, "missing/x", .{});
        }
    }.call);
    try expectSameAsThreaded(struct {
        fn call(io: Io, dir: Dir) !void {
            try dir.deleteFile(io, "missing");
        }
    }.call);
    try expectSameAsThreaded(struct {
        fn call(io: Io, dir: Dir) !void {
            _ = try dir.openFile(io, "bad\x00name", .{});
        }
    }.call);
}

test "fs: Batch — awaitAsync, awaitConcurrent with a timeout, cancel" {
    try withRuntime(struct {
        fn body(io: Io) !void {
            const first = try pipe();
            defer File.closeMany(io, &first);
            const second = try pipe();
            defer File.closeMany(io, &second);
            var buffers: [2][8]u8 = undefined;
            var storage: [2]Io.Operation.Storage = undefined;
            var batch: Io.Batch = .init(&storage);
            defer batch.cancel(io);
            const data_a = [_][]u8{&buffers[0]};
            const data_b = [_][]u8{&buffers[1]};
            const a = batch.add(.{ .file_read_streaming = .{ .file = first[0], .data = &data_a } });
            const read_b: Io.Operation.FileReadStreaming = .{ .file = second[0], .data = &data_b };
            const b = batch.add(.{ .file_read_streaming = read_b });
            // Nothing to read: the wait times out and both stay submitted.
            try testing.expectError(error.Timeout, batch.awaitConcurrent(io, .{ .duration = .{
                .raw = .fromMilliseconds(2),
                .clock = .awake,
            } }));
            try testing.expectEqual(@as(?Io.Batch.Completion, null), batch.next());
            try second[1].writeStreamingAll(io, "two");
            try batch.awaitConcurrent(io, .none);
            const done = batch.next().?;
            try testing.expectEqual(b, done.index);
            try testing.expectEqual(@as(usize, 3), try done.result.file_read_streaming);
            try testing.expectEqual(@as(?Io.Batch.Completion, null), batch.next());
            try first[1].writeStreamingAll(io, "one!");
            try batch.awaitAsync(io);
            const other = batch.next().?;
            try testing.expectEqual(a, other.index);
            const other_len = try other.result.file_read_streaming;
            try testing.expectEqualStrings("one!", buffers[0][0..other_len]);
            // Re-armed and then canceled before anything arrives.
            batch.addAt(a, .{ .file_read_streaming = .{ .file = first[0], .data = &data_a } });
        }
    }.body);
}

test "fs: Batch — a blocked awaitConcurrent is canceled" {
    try withRuntime(struct {
        fn waitBatch(io: Io, file: File) !void {
            var buffer: [8]u8 = undefined;
            var storage: [1]Io.Operation.Storage = undefined;
            var batch: Io.Batch = .init(&storage);
            defer batch.cancel(io);
            const data = [_][]u8{&buffer};
            _ = batch.add(.{ .file_read_streaming = .{ .file = file, .data = &data } });
            try batch.awaitConcurrent(io, .none);
        }
        fn body(io: Io) !void {
            const ends = try pipe();
            defer File.closeMany(io, &ends);
            var waiting = try io.concurrent(waitBatch, .{ io, ends[0] });
            try parked.waitParked(io, &waiting, .cancelable);
            try testing.expectError(error.Canceled, waiting.cancel(io));
        }
    }.body);
}

test "fs: realPath, timestamps, permissions and owner by path, hard link of an open file" {
    try withRuntime(struct {
        fn body(io: Io) !void {
            var tmp: TmpDir = try .init(io);
            defer tmp.deinit(io);
            var dir_path_buffer: [256]u8 = undefined;
            const dir_path = dir_path_buffer[0..try tmp.dir.realPath(io, &dir_path_buffer)];
            try testing.expect(std.mem.startsWith(u8, dir_path, "/tmp/weft-fs-"));
            const file = try tmp.dir.createFile(io, "f", .{});
            defer file.close(io);
            var file_path_buffer: [256]u8 = undefined;
            const file_path = file_path_buffer[0..try file.realPath(io, &file_path_buffer)];
            try testing.expect(std.mem.endsWith(u8, file_path, "/f"));
            var by_name_buffer: [256]u8 = undefined;
            const by_name = by_name_buffer[0..try tmp.dir.realPathFile(io, "f", &by_name_buffer)];
            try testing.expectEqualStrings(file_path, by_name);
            const missing_path = tmp.dir.realPathFile(io, "missing", &by_name_buffer);
            try testing.expectError(error.FileNotFound, missing_path);

            const when: Io.Timestamp = .{ .nanoseconds = 1_000_000_000 * std.time.ns_per_s };
            try file.setTimestamps(io, .{ .modify_timestamp = .{ .new = when } });
            try testing.expectEqual(when.nanoseconds, (try file.stat(io)).mtime.nanoseconds);
            const later: Io.Timestamp = .{ .nanoseconds = when.nanoseconds + std.time.ns_per_s };
            try tmp.dir.setTimestamps(io, "f", .{ .modify_timestamp = .{ .new = later } });
            try testing.expectEqual(later.nanoseconds, (try file.stat(io)).mtime.nanoseconds);

            try tmp.dir.setFilePermissions(io, "f", .fromMode(0o604), .{});
            try testing.expectEqual(@as(u32, 0o604), try modeOf(io, file));
            // std 0.16's `Dir.setFileOwner` does not compile (its error set lacks the path
            // errors of the entry it calls): call the entry itself.
            const set_owner = io.vtable.dirSetFileOwner;
            try set_owner(io.userdata, tmp.dir, "f", null, null, .{});
            const missing = set_owner(io.userdata, tmp.dir, "missing", null, null, .{});
            try testing.expectError(error.FileNotFound, missing);

            try file.hardLink(io, tmp.dir, "g", .{});
            const linked = try tmp.dir.statFile(io, "g", .{});
            try testing.expectEqual((try file.stat(io)).inode, linked.inode);
        }
    }.body);
}

test "fs: copying a file through a Writer (sendFile falls back to reads and writes)" {
    try withRuntime(struct {
        fn body(io: Io) !void {
            var tmp: TmpDir = try .init(io);
            defer tmp.deinit(io);
            const content = "0123456789" ** 1000;
            try tmp.dir.writeFile(io, .{ .sub_path = "source", .data = content });
            try tmp.dir.copyFile("source", tmp.dir, "copy", io, .{});
            var buffer: [content.len + 1]u8 = undefined;
            try testing.expectEqualStrings(content, try tmp.dir.readFile(io, "copy", &buffer));
            // Streaming mode.
            const source = try tmp.dir.openFile(io, "source", .{});
            defer source.close(io);
            var read_buffer: [64]u8 = undefined;
            var reader = source.reader(io, &read_buffer);
            const copy = try tmp.dir.createFile(io, "copy2", .{});
            defer copy.close(io);
            var write_buffer: [64]u8 = undefined;
            var writer = copy.writerStreaming(io, &write_buffer);
            const sent = try writer.interface.sendFileAll(&reader, .unlimited);
            try testing.expectEqual(@as(usize, content.len), sent);
            try writer.interface.flush();
            try testing.expectEqual(@as(u64, content.len), try copy.length(io));
        }
    }.body);
}

test "fs: memory map — read, write through the map, setLength, destroy" {
    try qemu.skipUnderQemu(.map_shared_validate, @src());
    try withRuntime(struct {
        fn body(io: Io) !void {
            var tmp: TmpDir = try .init(io);
            defer tmp.deinit(io);
            const file = try tmp.dir.createFile(io, "mapped", .{ .read = true });
            defer file.close(io);
            const page = std.heap.pageSize();
            const content = try testing.allocator.alloc(u8, 2 * page);
            defer testing.allocator.free(content);
            for (content, 0..) |*byte, i| byte.* = @truncate(i *% 7);
            try file.writePositionalAll(io, content, 0);
            var map: File.MemoryMap = try .create(io, file, .{ .len = 2 * page });
            defer map.destroy(io);
            try testing.expect(map.section != null); // a real mapping, not the fallback
            try testing.expectEqualSlices(u8, content, map.memory);
            @memcpy(map.memory[page - 2 ..][0..4], "WEFT");
            try map.write(io);
            var buffer: [4]u8 = undefined;
            _ = try file.readPositionalAll(io, &buffer, page - 2);
            try testing.expectEqualStrings("WEFT", &buffer);
            // The file changes under the map: read makes it visible (here it already is).
            try file.writePositionalAll(io, "zz", 0);
            try map.read(io);
            try testing.expectEqualStrings("zz", map.memory[0..2]);
            // Within the same pages: only the length changes; beyond: remapped.
            try map.setLength(io, page + 1);
            try testing.expectEqual(@as(usize, page + 1), map.memory.len);
            try map.setLength(io, page);
            try testing.expectEqualStrings("WE", map.memory[page - 2 ..]);
        }
    }.body);
}

test "fs: memory map — a file the kernel cannot map falls back to reads and writes" {
    try qemu.skipUnderQemu(.map_shared_validate, @src());
    try withRuntime(struct {
        fn body(io: Io) !void {
            // procfs files have no mmap (ENODEV): the map is memory filled by positional reads.
            const file = try Dir.cwd().openFile(io, "/proc/self/cmdline", .{});
            defer file.close(io);
            var expected: [64]u8 = undefined;
            const n = try file.readPositionalAll(io, &expected, 0);
            var map: File.MemoryMap = try .create(io, file, .{
                .len = 64,
                .protection = .{ .read = true },
            });
            defer map.destroy(io);
            try testing.expectEqual(@as(?File.MemoryMap.Section, null), map.section);
            try testing.expectEqualSlices(u8, expected[0..n], map.memory[0..n]);
            for (map.memory[n..]) |byte| try testing.expectEqual(@as(u8, 0), byte);
            try map.setLength(io, 10_000);
            try testing.expectEqualSlices(u8, expected[0..n], map.memory[0..n]);
            try map.read(io);
        }
    }.body);
}

test "fs: memory map errors are std.Io.Threaded's" {
    try qemu.skipUnderQemu(.map_shared_validate, @src());
    try expectSameAsThreaded(struct {
        fn call(io: Io, dir: Dir) !void {
            try dir.writeFile(io, .{ .sub_path = "r", .data = "read only" });
            const file = try dir.openFile(io, "r", .{});
            defer file.close(io);
            var map: File.MemoryMap = try .create(io, file, .{ .len = 9 });
            map.destroy(io);
        }
    }.call);
    try expectSameAsThreaded(struct {
        fn call(io: Io, dir: Dir) !void {
            _ = dir;
            const ends = try pipe();
            defer File.closeMany(io, &ends);
            var map: File.MemoryMap = try .create(io, ends[0], .{ .len = 9 });
            map.destroy(io);
        }
    }.call);
    try expectSameAsThreaded(struct {
        fn call(io: Io, dir: Dir) !void {
            try dir.writeFile(io, .{ .sub_path = "w", .data = "12345" });
            const file = try dir.openFile(io, "w", .{ .mode = .read_write });
            defer file.close(io);
            const options: File.MemoryMap.CreateOptions = .{ .len = 5, .populate = false };
            var map: File.MemoryMap = try .create(io, file, options);
            defer map.destroy(io);
            map.memory[0] = 'X';
            try map.write(io);
            var buffer: [5]u8 = undefined;
            _ = try file.readPositionalAll(io, &buffer, 0);
            if (!std.mem.eql(u8, &buffer, "X2345")) return error.TestUnexpectedResult;
        }
    }.call);
}

/// The names in `dir`, sorted, joined by spaces, into `buffer`.
fn listNames(io: Io, dir: Dir, buffer: []u8) ![]const u8 {
    var names: [8][]const u8 = undefined;
    var name_storage: [8][64]u8 = undefined;
    var count: usize = 0;
    var it = dir.iterate();
    while (try it.next(io)) |entry| : (count += 1) {
        @memcpy(name_storage[count][0..entry.name.len], entry.name);
        names[count] = name_storage[count][0..entry.name.len];
    }
    std.mem.sort([]const u8, names[0..count], {}, struct {
        fn less(_: void, a: []const u8, b: []const u8) bool {
            return std.mem.lessThan(u8, a, b);
        }
    }.less);
    var writer: Io.Writer = .fixed(buffer);
    for (names[0..count], 0..) |name, i| {
        if (i != 0) try writer.writeByte(' ');
        try writer.writeAll(name);
    }
    return writer.buffered();
}

test "fs: createFileAtomic — link an unnamed file, replace through a named one, discard" {
    try withRuntime(struct {
        fn body(io: Io) !void {
            var tmp: TmpDir = try .init(io);
            defer tmp.deinit(io);
            var linked = try tmp.dir.createFileAtomic(io, "new/a", .{ .make_path = true });
            defer linked.deinit(io);
            try linked.file.writeStreamingAll(io, "first");
            try linked.link(io);
            var buffer: [16]u8 = undefined;
            try testing.expectEqualStrings("first", try tmp.dir.readFile(io, "new/a", &buffer));
            var clash = try tmp.dir.createFileAtomic(io, "new/a", .{});
            defer clash.deinit(io);
            try testing.expectError(error.PathAlreadyExists, clash.link(io));

            var replacing = try tmp.dir.createFileAtomic(io, "new/a", .{ .replace = true });
            defer replacing.deinit(io);
            try testing.expect(replacing.file_exists); // a named temporary beside the target
            try replacing.file.writeStreamingAll(io, "second");
            try replacing.replace(io);
            try testing.expectEqualStrings("second", try tmp.dir.readFile(io, "new/a", &buffer));

            var discarded = try tmp.dir.createFileAtomic(io, "b", .{ .replace = true });
            try discarded.file.writeStreamingAll(io, "never seen");
            discarded.deinit(io);
            var names_buffer: [64]u8 = undefined;
            try testing.expectEqualStrings("new", try listNames(io, tmp.dir, &names_buffer));
            var sub = try tmp.dir.openDir(io, "new", .{ .iterate = true });
            defer sub.close(io);
            try testing.expectEqualStrings("a", try listNames(io, sub, &names_buffer));
        }
    }.body);
}

test "fs: createFileAtomic errors are std.Io.Threaded's" {
    try expectSameAsThreaded(struct {
        fn call(io: Io, dir: Dir) !void {
            var file = try dir.createFileAtomic(io, "missing/a", .{});
            file.deinit(io);
        }
    }.call);
    try expectSameAsThreaded(struct {
        fn call(io: Io, dir: Dir) !void {
            var file = try dir.createFileAtomic(io, "missing/a", .{ .replace = true });
            file.deinit(io);
        }
    }.call);
    try expectSameAsThreaded(struct {
        fn call(io: Io, dir: Dir) !void {
            try dir.writeFile(io, .{ .sub_path = "f", .data = "" });
            var file = try dir.createFileAtomic(io, "f/a", .{ .make_path = true });
            file.deinit(io);
        }
    }.call);
}

// The synchronous fast path (fs/nowait.zig) -----------------------------------------------------

const nowait = @import("../fs/nowait.zig");
const mounts = @import("../fs/mounts.zig");

const nowait_block_bytes = 4096;

/// Counts of fast and slow attempts since `start`.
const NowaitCounts = struct {
    fast: u64,
    slow: u64,

    fn start() NowaitCounts {
        return .{
            .fast = nowait.fast_for_testing.load(.monotonic),
            .slow = nowait.slow_for_testing.load(.monotonic),
        };
    }

    fn since(before: NowaitCounts) NowaitCounts {
        const now = start();
        return .{ .fast = now.fast - before.fast, .slow = now.slow - before.slow };
    }
};

/// A file of `blocks` 4 KiB blocks, each starting with its index (u64, little endian), synced
/// so that its pages are clean and `evict` can drop them. Skips the test where /tmp is tmpfs:
/// its pages cannot be evicted, and it refuses RWF_NOWAIT besides.
fn blockFile(io: Io, tmp: *TmpDir, name: []const u8, blocks: usize) !File {
    if (try tmpIsTmpfs()) return os.skipTest(@src(), "/tmp is tmpfs: no page cache to evict");
    const file = try tmp.dir.createFile(io, name, .{ .read = true });
    errdefer file.close(io);
    var block: [nowait_block_bytes]u8 = undefined;
    for (0..blocks) |index| {
        @memset(&block, @truncate(index));
        std.mem.writeInt(u64, block[0..8], index, .little);
        try file.writePositionalAll(io, &block, index * nowait_block_bytes);
    }
    try file.sync(io);
    return file;
}

fn tmpIsTmpfs() !bool {
    var buffer: [32]u64 = undefined; // struct statfs; f_type is its first word on 64-bit
    const rc = linux.syscall2(.statfs, @intFromPtr("/tmp"), @intFromPtr(&buffer));
    try testing.expectEqual(linux.E.SUCCESS, linux.errno(rc));
    return buffer[0] == 0x01021994;
}

/// Drops the file's (clean) pages from the page cache.
fn evict(file: File) !void {
    const rc = linux.fadvise(file.handle, 0, 0, linux.POSIX_FADV.DONTNEED);
    try testing.expectEqual(linux.E.SUCCESS, linux.errno(rc));
}

/// Checks that `bytes` holds blocks `first`, `first + 1`, ... as `blockFile` wrote them.
fn expectBlocks(bytes: []const u8, first: usize) !void {
    try testing.expect(bytes.len % nowait_block_bytes == 0);
    for (0..bytes.len / nowait_block_bytes) |i| {
        const block = bytes[i * nowait_block_bytes ..][0..nowait_block_bytes];
        try testing.expectEqual(@as(u64, first + i), std.mem.readInt(u64, block[0..8], .little));
        try testing.expectEqual(@as(u8, @truncate(first + i)), block[nowait_block_bytes - 1]);
    }
}

test "fs: a cached read is answered at once, an evicted one takes the async path, same bytes" {
    try qemu.skipUnderQemu(.nowait, @src());
    try withRuntime(struct {
        fn body(io: Io) !void {
            var tmp: TmpDir = try .init(io);
            defer tmp.deinit(io);
            const file = try blockFile(io, &tmp, "blocks", 64);
            defer file.close(io);
            var buffer: [4 * nowait_block_bytes]u8 = undefined;
            // Which path a read takes is the page cache's state, which the kernel may change
            // under a loaded machine (an eviction that leaves a page, a page reclaimed at
            // once): each step is tried until it took the path it means, a few times at most.
            try expectPath(io, file, &buffer, 0, .fast, false);
            const offset = 40 * nowait_block_bytes;
            try expectPath(io, file, &buffer, offset, .slow, true);
            // Now cached again: fast.
            try expectPath(io, file, &buffer, offset, .fast, false);
        }
    }.body);
}

/// Reads `buffer.len` bytes of `file` at `offset` (after evicting the file when `evict_first`)
/// until the read took `path`, 20 tries at most; every read must return the right blocks.
fn expectPath(
    io: Io,
    file: File,
    buffer: []u8,
    offset: u64,
    path: enum { fast, slow },
    evict_first: bool,
) !void {
    const wanted: NowaitCounts = switch (path) {
        .fast => .{ .fast = 1, .slow = 0 },
        .slow => .{ .fast = 0, .slow = 1 },
    };
    var last: NowaitCounts = undefined;
    for (0..20) |_| {
        if (evict_first) try evict(file);
        const before = NowaitCounts.start();
        try testing.expectEqual(buffer.len, try file.readPositional(io, &.{buffer}, offset));
        last = before.since();
        try expectBlocks(buffer, @intCast(offset / nowait_block_bytes));
        if (std.meta.eql(last, wanted)) return;
        try io.sleep(.fromMilliseconds(5), .awake);
    }
    std.debug.print("read at {d}: paths taken {any}, not {t}, in 20 tries\n", .{
        offset, last, path,
    });
    return error.TestUnexpectedPath;
}

test "fs: short reads at end of file, cached and evicted; errors keep their names" {
    try withRuntime(struct {
        fn body(io: Io) !void {
            var tmp: TmpDir = try .init(io);
            defer tmp.deinit(io);
            const file = try blockFile(io, &tmp, "blocks", 2);
            defer file.close(io);
            try file.writePositionalAll(io, "tail", 2 * nowait_block_bytes); // 8196 bytes
            try file.sync(io);
            var buffer: [3 * nowait_block_bytes]u8 = undefined;
            for ([_]bool{ false, true }) |evicted| {
                if (evicted) try evict(file);
                const n = try file.readPositional(io, &.{&buffer}, nowait_block_bytes);
                // Evicted, the read may end early at a page the kernel had not read yet; the
                // bytes it returns are right either way, and it never returns 0 before the end.
                try testing.expect(n > 0 and n <= nowait_block_bytes + 4);
                if (n == nowait_block_bytes + 4) {
                    try testing.expectEqualStrings("tail", buffer[nowait_block_bytes..][0..4]);
                }
                try expectBlocks(buffer[0..nowait_block_bytes], 1);
                const end = 2 * nowait_block_bytes;
                const tail = try file.readPositional(io, &.{&buffer}, end);
                try testing.expectEqual(@as(usize, 4), tail);
                try testing.expectEqualStrings("tail", buffer[0..4]);
                const past = [_]u64{ end + 4, end + 5, 1 << 40 };
                for (past) |offset| {
                    const past_n = try file.readPositional(io, &.{&buffer}, offset);
                    try testing.expectEqual(@as(usize, 0), past_n);
                }
            }
            // A pipe answers ESPIPE on the fast path: Unseekable, as before.
            const ends = try pipe();
            defer File.closeMany(io, &ends);
            const pipe_read = ends[0].readPositional(io, &.{&buffer}, 0);
            try testing.expectError(error.Unseekable, pipe_read);
            // A write-only file: NotOpenForReading, from the fast path's EBADF.
            const write_only = try tmp.dir.openFile(io, "blocks", .{ .mode = .write_only });
            defer write_only.close(io);
            const refused = write_only.readPositional(io, &.{&buffer}, 0);
            try testing.expectError(error.NotOpenForReading, refused);
        }
    }.body);
}

test "fs: a refused RWF_NOWAIT falls back to the async path; ENOSYS is remembered" {
    try qemu.skipUnderQemu(.nowait, @src());
    try withRuntime(struct {
        fn body(io: Io) !void {
            var tmp: TmpDir = try .init(io);
            defer tmp.deinit(io);
            const file = try blockFile(io, &tmp, "blocks", 8);
            defer file.close(io);
            defer nowait.resetForTesting();
            var buffer: [nowait_block_bytes]u8 = undefined;

            // A file system that refuses the flag: every call falls back, none is remembered.
            nowait.refusal_for_testing.store(@intFromEnum(linux.E.OPNOTSUPP), .monotonic);
            const refused = NowaitCounts.start();
            for (0..3) |i| {
                const n = try file.readPositional(io, &.{&buffer}, i * buffer.len);
                try testing.expectEqual(buffer.len, n);
                try expectBlocks(&buffer, i);
            }
            try testing.expectEqual(NowaitCounts{ .fast = 0, .slow = 3 }, refused.since());
            nowait.refusal_for_testing.store(0, .monotonic);
            const accepted = NowaitCounts.start();
            _ = try file.readPositional(io, &.{&buffer}, 0);
            try testing.expectEqual(NowaitCounts{ .fast = 1, .slow = 0 }, accepted.since());

            // A kernel without preadv2: after one ENOSYS, no more attempts.
            nowait.refusal_for_testing.store(@intFromEnum(linux.E.NOSYS), .monotonic);
            _ = try file.readPositional(io, &.{&buffer}, 0);
            nowait.refusal_for_testing.store(0, .monotonic);
            const latched = NowaitCounts.start();
            const n = try file.readPositional(io, &.{&buffer}, 5 * buffer.len);
            try testing.expectEqual(buffer.len, n);
            try expectBlocks(&buffer, 5);
            try testing.expectEqual(NowaitCounts{ .fast = 0, .slow = 1 }, latched.since());
        }
    }.body);
}

test "fs: a read that took the async path is canceled" {
    try withRuntime(struct {
        fn readAll(io: Io, file: File, buffer: []u8) File.ReadPositionalError!usize {
            return file.readPositional(io, &.{buffer}, 0);
        }
        fn body(io: Io) !void {
            var tmp: TmpDir = try .init(io);
            defer tmp.deinit(io);
            const blocks = 4096; // 16 MiB: a few milliseconds from the disk
            const file = try blockFile(io, &tmp, "blocks", blocks);
            defer file.close(io);
            const buffer = try testing.allocator.alloc(u8, blocks * nowait_block_bytes);
            defer testing.allocator.free(buffer);
            try evict(file);
            const before = NowaitCounts.start();
            var reading = try io.concurrent(readAll, .{ io, file, buffer });
            // io_uring: parked on the ring, cancelable; epoll: on the blocking lane, cancelable
            // until a worker takes the call. Or done already, under load: the cancel below
            // then returns what was read.
            _ = try parked.waitParkedOrFinished(io, &reading, .either);
            try testing.expectEqual(NowaitCounts{ .fast = 0, .slow = 1 }, before.since());
            if (reading.cancel(io)) |n| {
                // The kernel finished (part of) the read before the cancel took effect: the
                // bytes it reports are right.
                try testing.expect(n > 0 and n <= buffer.len);
                try expectBlocks(buffer[0 .. n - n % nowait_block_bytes], 0);
            } else |err| try testing.expectEqual(error.Canceled, err);
            // The file still reads.
            const first = buffer[0..nowait_block_bytes];
            try testing.expectEqual(first.len, try file.readPositional(io, &.{first}, 0));
            try expectBlocks(first, 0);
        }
    }.body);
}

test "fs: cached opens are made at once; refused or uncached ones take the async path" {
    try qemu.skipUnderQemu(.nowait, @src());
    try withRuntime(struct {
        fn body(io: Io) !void {
            var tmp: TmpDir = try .init(io);
            defer tmp.deinit(io);
            defer nowait.resetForTesting();
            try tmp.dir.createDirPath(io, "sub");
            const created = try tmp.dir.createFile(io, "sub/file", .{});
            try created.writePositionalAll(io, "contents", 0);
            created.close(io);

            const cached = NowaitCounts.start();
            var sub = try tmp.dir.openDir(io, "sub", .{ .iterate = true });
            defer sub.close(io);
            try expectContents(io, sub, "file");
            // The directory, the file and the read of it.
            const expected: NowaitCounts = .{ .fast = 3, .slow = 0 };
            try testing.expectEqual(expected, cached.since());
            // A cached miss (the negative entry the first lookup left) is the kernel's
            // answer, at once.
            try testing.expectError(error.FileNotFound, sub.statFile(io, "none", .{}));
            const missing = NowaitCounts.start();
            try testing.expectError(error.FileNotFound, sub.openFile(io, "none", .{}));
            try testing.expectError(error.FileNotFound, sub.openDir(io, "none", .{}));
            const expected_missing: NowaitCounts = .{ .fast = 2, .slow = 0 };
            try testing.expectEqual(expected_missing, missing.since());
            // Not cached (simulated, the read too): the slow path opens the same file.
            nowait.refusal_for_testing.store(@intFromEnum(linux.E.AGAIN), .monotonic);
            const uncached = NowaitCounts.start();
            try expectContents(io, sub, "file");
            var again = try tmp.dir.openDir(io, "sub", .{});
            again.close(io);
            try testing.expectEqual(NowaitCounts{ .fast = 0, .slow = 3 }, uncached.since());
            // A kernel without RESOLVE_CACHED (EINVAL, confirmed by the probe) or without
            // openat2 (ENOSYS): remembered, every later open takes the slow path. (ENOSYS
            // latches reads too: the simulated kernel has no preadv2 either.)
            for ([_]linux.E{ .INVAL, .NOSYS }) |refusal| {
                nowait.resetForTesting();
                nowait.refusal_for_testing.store(@intFromEnum(refusal), .monotonic);
                var refused = try tmp.dir.openDir(io, "sub", .{});
                refused.close(io);
                try expectContents(io, sub, "file");
                nowait.refusal_for_testing.store(0, .monotonic);
                const latched = NowaitCounts.start();
                var dir = try tmp.dir.openDir(io, "sub", .{});
                dir.close(io);
                try expectContents(io, sub, "file");
                const reads_fast: u64 = @intFromBool(refusal == .INVAL);
                const expected_latched: NowaitCounts = .{
                    .fast = reads_fast,
                    .slow = 3 - reads_fast,
                };
                try testing.expectEqual(expected_latched, latched.since());
            }
        }
        fn expectContents(io: Io, dir: Dir, name: []const u8) !void {
            const file = try dir.openFile(io, name, .{});
            defer file.close(io);
            var buffer: [16]u8 = undefined;
            const n = try file.readPositional(io, &.{&buffer}, 0);
            try testing.expectEqualStrings("contents", buffer[0..n]);
        }
    }.body);
}

test "fs: a cached stat is answered at once, by path and by descriptor, as the slow path" {
    try qemu.skipUnderQemu(.nowait, @src());
    try withRuntime(struct {
        fn body(io: Io) !void {
            var tmp: TmpDir = try .init(io);
            defer tmp.deinit(io);
            defer nowait.resetForTesting();
            const file = try tmp.dir.createFile(io, "file", .{ .read = true });
            defer file.close(io);
            try file.writePositionalAll(io, "contents", 0);
            try tmp.dir.symLink(io, "file", "link", .{});
            // Following a link updates its access time when it is not later than its change
            // time (relatime), and such a walk is not made from the cache alone: a link made
            // in this clock tick would take the slow path on every follow. Its access time is
            // set an hour ahead (its change time becomes now).
            const now_s = @divTrunc(Io.Clock.real.now(io).nanoseconds, std.time.ns_per_s);
            const times = [2]linux.timespec{
                .{ .sec = @intCast(now_s + 3600), .nsec = 0 },
                .{ .sec = @intCast(now_s), .nsec = 0 },
            };
            const no_follow = linux.AT.SYMLINK_NOFOLLOW;
            const utimens = linux.utimensat(tmp.dir.handle, "link", &times, no_follow);
            try testing.expectEqual(linux.E.SUCCESS, linux.errno(utimens));

            // The answers of the slow path (every probe refused as not cached), then the same
            // calls answered at once.
            nowait.refusal_for_testing.store(@intFromEnum(linux.E.AGAIN), .monotonic);
            const slow_counts = NowaitCounts.start();
            const slow = try Stats.of(io, tmp.dir, file);
            try testing.expectEqual(NowaitCounts{ .fast = 0, .slow = 4 }, slow_counts.since());
            nowait.refusal_for_testing.store(0, .monotonic);
            const fast_counts = NowaitCounts.start();
            const fast = try Stats.of(io, tmp.dir, file);
            try testing.expectEqual(NowaitCounts{ .fast = 4, .slow = 0 }, fast_counts.since());
            try slow.expectSame(fast);
            try testing.expectEqual(File.Kind.sym_link, fast.link.kind);
            try testing.expectEqual(File.Kind.file, fast.followed.kind);
            try testing.expectEqual(@as(u64, 8), fast.path.size);
            // A missing path: the first lookup leaves a negative entry in the cache, and the
            // next is answered from it at once. The errors are the slow path's either way.
            try testing.expectError(error.FileNotFound, tmp.dir.statFile(io, "none", .{}));
            const missing_counts = NowaitCounts.start();
            try testing.expectError(error.FileNotFound, tmp.dir.statFile(io, "none", .{}));
            try testing.expectEqual(NowaitCounts{ .fast = 1, .slow = 0 }, missing_counts.since());
            try testing.expectError(error.NotDir, tmp.dir.statFile(io, "file/x", .{}));

            // A mount whose file system may ask a server (NFS, FUSE): the probe's answer is
            // not kept, the slow path asks. One that ignores DONT_SYNC (9p): no probe at all.
            for ([_]mounts.Kind{ .other, .waits_always }) |kind| {
                mounts.kind_for_testing.store(@intFromEnum(kind) + 1, .monotonic);
                const remote_counts = NowaitCounts.start();
                const remote = try Stats.of(io, tmp.dir, file);
                const expected_remote: NowaitCounts = .{ .fast = 0, .slow = 4 };
                try testing.expectEqual(expected_remote, remote_counts.since());
                try slow.expectSame(remote);
                mounts.kind_for_testing.store(0, .monotonic);
            }

            // A kernel without statx's mount id (ENOSYS here): remembered.
            nowait.refusal_for_testing.store(@intFromEnum(linux.E.NOSYS), .monotonic);
            _ = try file.stat(io);
            nowait.refusal_for_testing.store(0, .monotonic);
            const latched = NowaitCounts.start();
            try slow.expectSame(try Stats.of(io, tmp.dir, file));
            try testing.expectEqual(NowaitCounts{ .fast = 0, .slow = 4 }, latched.since());
        }

        const Stats = struct {
            path: File.Stat,
            followed: File.Stat,
            link: File.Stat,
            descriptor: File.Stat,

            fn of(io: Io, dir: Dir, file: File) !Stats {
                return .{
                    .path = try dir.statFile(io, "file", .{}),
                    .followed = try dir.statFile(io, "link", .{}),
                    .link = try dir.statFile(io, "link", .{ .follow_symlinks = false }),
                    .descriptor = try file.stat(io),
                };
            }

            fn expectSame(expected: Stats, actual: Stats) !void {
                inline for (.{ "path", "followed", "link", "descriptor" }) |name| {
                    const want = @field(expected, name);
                    const got = @field(actual, name);
                    try testing.expectEqual(want.inode, got.inode);
                    try testing.expectEqual(want.kind, got.kind);
                    try testing.expectEqual(want.size, got.size);
                    try testing.expectEqual(want.permissions, got.permissions);
                    try testing.expectEqual(want.mtime, got.mtime);
                    try testing.expectEqual(want.nlink, got.nlink);
                }
            }
        };
    }.body);
}

test "fs: a loop of calls answered from the cache lets the other tasks of its executor run" {
    try qemu.skipUnderQemu(.nowait, @src());
    // One executor: the other task can only run when the looping one yields.
    var rt = try Runtime.init(testing.allocator, .{ .executors = 1 });
    defer rt.deinit();
    const io = rt.io();
    var tmp: TmpDir = try .init(io);
    defer tmp.deinit(io);
    const file = try tmp.dir.createFile(io, "file", .{});
    file.close(io);
    _ = try tmp.dir.statFile(io, "file", .{}); // cached from now on
    var ran: std.atomic.Value(bool) = .init(false);
    // It starts at once (one executor runs a new task first) and yields: from then on it is
    // ready, behind this task.
    var other = try io.concurrent(struct {
        fn run(inner: Io, flag: *std.atomic.Value(bool)) Io.Cancelable!void {
            try Runtime.yield(inner);
            flag.store(true, .monotonic);
        }
    }.run, .{ io, &ran });
    defer other.await(io) catch {};
    try testing.expect(!ran.load(.monotonic));
    var calls: usize = 0;
    while (!ran.load(.monotonic)) : (calls += 1) {
        // Without a yield every so often, this loop would hold the executor for good.
        if (calls > 10 * weft_config.calls_per_yield) return error.NeverYielded;
        _ = try tmp.dir.statFile(io, "file", .{});
    }
    try testing.expect(calls <= weft_config.calls_per_yield);
}

test "fs: an I/O completion is not held back by a task looping over cached calls" {
    try qemu.skipUnderQemu(.nowait, @src());
    // One executor: the reader's completion is reaped only when the looping task yields and
    // the executor polls its loop.
    var rt = try Runtime.init(testing.allocator, .{ .executors = 1 });
    defer rt.deinit();
    const io = rt.io();
    var tmp: TmpDir = try .init(io);
    defer tmp.deinit(io);
    try tmp.dir.writeFile(io, .{ .sub_path = "file", .data = "contents" });
    _ = try tmp.dir.statFile(io, "file", .{}); // cached from now on
    const ends = try pipe();
    defer for (ends) |end| end.close(io);
    var woke: std.atomic.Value(bool) = .init(false);
    // It starts at once (one executor runs a new task first) and parks in its read.
    var reader = try io.concurrent(struct {
        fn run(inner: Io, end: File, flag: *std.atomic.Value(bool)) !void {
            var buffer: [1]u8 = undefined;
            _ = try end.readStreaming(inner, &.{&buffer});
            flag.store(true, .monotonic);
        }
    }.run, .{ io, ends[0], &woke });
    defer _ = reader.cancel(io) catch {};
    try testing.expectEqual(@as(usize, 1), linux.write(ends[1].handle, "x", 1));
    var calls: usize = 0;
    while (!woke.load(.monotonic)) : (calls += 1) {
        if (calls > 100 * weft_config.calls_per_yield) return error.CompletionHeldBack;
        _ = try tmp.dir.statFile(io, "file", .{});
    }
    // The first yield polls: before, a yield counted as one dispatch of the
    // `dispatches_per_poll` between two polls, some 4,000 calls.
    try testing.expect(calls <= 2 * weft_config.calls_per_yield);
}

test "fs: opening a FIFO waits for its peer without holding the executor" {
    try withRuntime(struct {
        fn openEnd(io: Io, dir: Dir, mode: File.OpenMode) !File {
            return dir.openFile(io, "fifo", .{ .mode = mode });
        }
        fn body(io: Io) !void {
            var tmp: TmpDir = try .init(io);
            defer tmp.deinit(io);
            const rc = linux.mknodat(tmp.dir.handle, "fifo", linux.S.IFIFO | 0o600, 0);
            try testing.expectEqual(linux.E.SUCCESS, linux.errno(rc));
            // Each end's open waits for the other; on one executor, an open that held its
            // thread would keep the other end from ever running. Either end may come first
            // (io_uring's inline open, were it used, would open a lone reader at once and
            // fail a lone writer with ENXIO).
            for ([_]File.OpenMode{ .read_only, .write_only }) |first| {
                const second: File.OpenMode = if (first == .read_only) .write_only else .read_only;
                var waiting = try io.concurrent(openEnd, .{ io, tmp.dir, first });
                try parked.waitParked(io, &waiting, .either);
                const second_end = try openEnd(io, tmp.dir, second);
                defer second_end.close(io);
                const first_end = try waiting.await(io);
                defer first_end.close(io);
                const reader, const writer = if (first == .read_only)
                    .{ first_end, second_end }
                else
                    .{ second_end, first_end };
                try writer.writeStreamingAll(io, "through");
                var buffer: [16]u8 = undefined;
                const n = try reader.readStreaming(io, &.{&buffer});
                try testing.expectEqualStrings("through", buffer[0..n]);
            }
        }
    }.body);
}

const fd_test = @import("fd_test.zig");
const Metrics = @import("../Metrics.zig");

test "fs: with one descriptor left a file opens, as on Threaded; with none, stat still works" {
    var threaded: Io.Threaded = .init(testing.allocator, .{});
    defer threaded.deinit();
    // No spare executor: the watchdog starts one (its loop's descriptors) whenever an executor
    // looks held, which a slow machine may show at any point of the count below.
    var rt = try Runtime.init(testing.allocator, .{ .spare_executor = false });
    defer rt.deinit();
    const io = rt.io();
    var tmp: TmpDir = try .init(io);
    defer tmp.deinit(io);
    try tmp.dir.writeFile(io, .{ .sub_path = "file", .data = "contents" });
    // Cached, and every thread either runtime starts for these calls started.
    for ([_]Io{ threaded.io(), io }) |each| {
        _ = try tmp.dir.statFile(each, "file", .{});
        (try tmp.dir.openFile(each, "file", .{})).close(each);
    }
    var exhaustion: fd_test.Exhaustion = undefined;
    try exhaustion.start(tmp.dir.handle);
    defer exhaustion.end();
    // No descriptor left: a stat needs none, an open fails alike.
    for ([_]Io{ threaded.io(), io }) |each| {
        try testing.expectEqual(File.Kind.file, (try tmp.dir.statFile(each, "file", .{})).kind);
        const refused = tmp.dir.openFile(each, "file", .{});
        try testing.expectError(error.ProcessFdQuotaExceeded, refused);
    }
    // One left: the open takes it (the fast path's type probe must not hold a second one),
    // and a read works on it. Then once more on the slow paths (every fast call refused, as
    // under qemu), where the epoll backend once took a `dup` of the file to ask epoll about
    // it, and the read failed with EMFILE.
    exhaustion.len -= 1;
    _ = linux.close(exhaustion.fillers[exhaustion.len]);
    defer nowait.resetForTesting();
    for ([_]bool{ false, true }) |slow| {
        if (slow) nowait.refusal_for_testing.store(@intFromEnum(linux.E.AGAIN), .monotonic);
        for ([_]Io{ threaded.io(), io }) |each| {
            const file = try tmp.dir.openFile(each, "file", .{ .mode = .read_write });
            defer file.close(each);
            var buffer: [16]u8 = undefined;
            const n = try file.readPositional(each, &.{&buffer}, 0);
            try testing.expectEqualStrings("contents", buffer[0..n]);
            try testing.expectEqual(@as(usize, 3), try file.writePositional(each, &.{"con"}, 0));
        }
    }
}

/// What a call saw, in a form both runtimes can be compared on (no inode or time: each
/// runtime's call runs in a directory of its own).
const Seen = struct {
    kind: File.Kind = .unknown,
    size: u64 = 0,
    nlink: u64 = 0,
    bytes: [16]u8 = @splat(0),
    len: usize = 0,

    fn ofStat(stat: File.Stat) Seen {
        return .{ .kind = stat.kind, .size = stat.size, .nlink = stat.nlink };
    }

    /// The stat of `file` and up to 16 bytes read from its start.
    fn ofFile(io: Io, file: File) !Seen {
        var seen: Seen = .ofStat(try file.stat(io));
        seen.len = try file.readPositional(io, &.{&seen.bytes}, 0);
        return seen;
    }
};

/// Runs `call` on std.Io.Threaded and on weft (on a task, where the fast paths run) and
/// expects the same result or the same error. Returns the fast and slow attempts of weft's.
fn expectSeenAsThreaded(comptime call: fn (io: Io, dir: Dir) anyerror!Seen) !NowaitCounts {
    const both = try runOnBoth(Seen, call);
    if (both.reference) |expected| {
        try testing.expectEqualDeep(expected, try both.outcome);
    } else |expected| {
        // A check inside `call` failed on Threaded: the call is wrong, not weft.
        if (std.mem.startsWith(u8, @errorName(expected), "Test")) return expected;
        try testing.expectError(expected, both.outcome);
    }
    return both.counts;
}

fn openSeen(io: Io, dir: Dir, path: []const u8, options: Dir.OpenFileOptions) !Seen {
    const file = try dir.openFile(io, path, options);
    defer file.close(io);
    return .ofFile(io, file);
}

fn statSeen(io: Io, dir: Dir, path: []const u8, follow: bool) !Seen {
    return .ofStat(try dir.statFile(io, path, .{ .follow_symlinks = follow }));
}

test "fs: /proc, /sys and /dev files stat, open and read as on Threaded" {
    const Calls = struct {
        fn procStatus(io: Io, _: Dir) !Seen {
            _ = try statSeen(io, .cwd(), "/proc/self/status", true);
            const seen = try openSeen(io, .cwd(), "/proc/self/status", .{});
            try testing.expectEqualStrings("Name:", seen.bytes[0..5]);
            return seen;
        }
        fn procStatusStat(io: Io, _: Dir) !Seen {
            return statSeen(io, .cwd(), "/proc/self/status", true);
        }
        fn procSelfLink(io: Io, _: Dir) !Seen {
            return statSeen(io, .cwd(), "/proc/self", false);
        }
        fn procMissingPid(io: Io, _: Dir) !Seen {
            return openSeen(io, .cwd(), "/proc/999999999/status", .{});
        }
        fn sysFile(io: Io, _: Dir) !Seen {
            _ = try statSeen(io, .cwd(), "/sys/kernel/mm", true);
            return openSeen(io, .cwd(), "/sys/devices/system/cpu/online", .{});
        }
        fn sysWriteOnly(io: Io, _: Dir) !Seen {
            // Write-only (0200): sysfs refuses an open for reading even to root.
            return openSeen(io, .cwd(), "/sys/bus/pci/rescan", .{});
        }
        fn devNull(io: Io, _: Dir) !Seen {
            _ = try statSeen(io, .cwd(), "/dev/null", true);
            return openSeen(io, .cwd(), "/dev/null", .{ .mode = .read_write });
        }
        fn devZero(io: Io, _: Dir) !Seen {
            var seen = try openSeen(io, .cwd(), "/dev/zero", .{});
            if (seen.len != seen.bytes.len) return error.TestShortZero;
            seen.bytes[0] +%= 1; // a sign that the bytes were zeroes
            return seen;
        }
        fn devTty(io: Io, _: Dir) !Seen {
            // No controlling terminal under the test runner: ENXIO; else the terminal.
            return openSeen(io, .cwd(), "/dev/tty", .{ .mode = .read_write });
        }
        fn devDirectory(io: Io, _: Dir) !Seen {
            return openSeen(io, .cwd(), "/dev", .{ .allow_directory = false });
        }
    };
    _ = try expectSeenAsThreaded(Calls.procStatus);
    const proc_counts = try expectSeenAsThreaded(Calls.procStatusStat);
    // proc is a local mount: its stat is answered at once (qemu-user has no openat2).
    if (!qemu.underQemu()) try testing.expect(proc_counts.fast >= 1);
    _ = try expectSeenAsThreaded(Calls.procSelfLink);
    _ = try expectSeenAsThreaded(Calls.procMissingPid);
    _ = try expectSeenAsThreaded(Calls.sysFile);
    _ = try expectSeenAsThreaded(Calls.sysWriteOnly);
    _ = try expectSeenAsThreaded(Calls.devNull);
    _ = try expectSeenAsThreaded(Calls.devZero);
    _ = try expectSeenAsThreaded(Calls.devTty);
    _ = try expectSeenAsThreaded(Calls.devDirectory);
}

test "fs: /proc/self/fd links to a pipe, a deleted file and a socket open as on Threaded" {
    const Calls = struct {
        fn fdPath(buffer: []u8, fd: i32) []const u8 {
            return std.fmt.bufPrint(buffer, "/proc/self/fd/{d}", .{fd}) catch unreachable;
        }
        fn pipeLink(io: Io, _: Dir) !Seen {
            const ends = try pipe();
            defer File.closeMany(io, &ends);
            try ends[1].writeStreamingAll(io, "piped");
            var buffer: [32]u8 = undefined;
            const path = fdPath(&buffer, ends[0].handle);
            const seen = try statSeen(io, .cwd(), path, true);
            try testing.expectEqual(File.Kind.named_pipe, seen.kind);
            const reopened = try Dir.cwd().openFile(io, path, .{});
            defer reopened.close(io);
            var read_seen: Seen = .ofStat(try reopened.stat(io));
            read_seen.len = try reopened.readStreaming(io, &.{&read_seen.bytes});
            // A positional read of a pipe: Unseekable, from the fast path's ESPIPE.
            const positional = reopened.readPositional(io, &.{&read_seen.bytes}, 0);
            try testing.expectError(error.Unseekable, positional);
            return read_seen;
        }
        fn deletedFile(io: Io, dir: Dir) !Seen {
            const file = try dir.createFile(io, "gone", .{ .read = true });
            defer file.close(io);
            try file.writePositionalAll(io, "deleted", 0);
            _ = try dir.statFile(io, "gone", .{});
            try dir.deleteFile(io, "gone");
            try testing.expectError(error.FileNotFound, dir.statFile(io, "gone", .{}));
            try testing.expectError(error.FileNotFound, dir.openFile(io, "gone", .{}));
            var buffer: [32]u8 = undefined;
            const path = fdPath(&buffer, file.handle);
            const by_link = try openSeen(io, .cwd(), path, .{});
            const by_fd = try Seen.ofFile(io, file);
            try testing.expectEqualDeep(by_fd, by_link);
            try testing.expectEqual(@as(u64, 0), by_fd.nlink);
            return by_link;
        }
        fn socketLink(io: Io, _: Dir) !Seen {
            const rc = linux.socket(linux.AF.UNIX, linux.SOCK.STREAM | linux.SOCK.CLOEXEC, 0);
            try testing.expectEqual(linux.E.SUCCESS, linux.errno(rc));
            const fd: i32 = @intCast(rc);
            defer _ = linux.close(fd);
            var buffer: [32]u8 = undefined;
            const path = fdPath(&buffer, fd);
            const seen = try statSeen(io, .cwd(), path, true);
            try testing.expectEqual(File.Kind.unix_domain_socket, seen.kind);
            return openSeen(io, .cwd(), path, .{});
        }
    };
    _ = try expectSeenAsThreaded(Calls.pipeLink);
    _ = try expectSeenAsThreaded(Calls.deletedFile);
    _ = try expectSeenAsThreaded(Calls.socketLink);
}

test "fs: a pty, a unix socket path and a FIFO opened read-write open as on Threaded" {
    const Calls = struct {
        fn pty(io: Io, _: Dir) !Seen {
            const flags: linux.O = .{ .ACCMODE = .RDWR, .NOCTTY = true, .CLOEXEC = true };
            const rc = linux.open("/dev/ptmx", flags, 0);
            if (linux.errno(rc) != .SUCCESS) return error.NoPtmx;
            const master: i32 = @intCast(rc);
            defer _ = linux.close(master);
            var unlock: i32 = 0;
            const request = linux.T.IOCSPTLCK;
            if (linux.ioctl(master, request, @intFromPtr(&unlock)) != 0) return error.NoUnlock;
            var index: u32 = 0;
            if (linux.ioctl(master, linux.T.IOCGPTN, @intFromPtr(&index)) != 0) {
                return error.NoIndex;
            }
            var buffer: [32]u8 = undefined;
            const path = try std.fmt.bufPrint(&buffer, "/dev/pts/{d}", .{index});
            const stat_seen = try statSeen(io, .cwd(), path, true);
            try testing.expectEqual(File.Kind.character_device, stat_seen.kind);
            const terminal = try Dir.cwd().openFile(io, path, .{ .mode = .read_write });
            defer terminal.close(io);
            try testing.expect(try terminal.isTty(io));
            var seen: Seen = .ofStat(try terminal.stat(io));
            seen.size = 0;
            const positional = terminal.readPositional(io, &.{&seen.bytes}, 0);
            try testing.expectError(error.Unseekable, positional);
            const master_file: File = .{ .handle = master, .flags = .{ .nonblocking = false } };
            const master_read = master_file.readPositional(io, &.{&buffer}, 0);
            try testing.expectError(error.Unseekable, master_read);
            return seen;
        }
        fn socketPath(io: Io, dir: Dir) !Seen {
            const rc = linux.socket(linux.AF.UNIX, linux.SOCK.STREAM | linux.SOCK.CLOEXEC, 0);
            try testing.expectEqual(linux.E.SUCCESS, linux.errno(rc));
            const fd: i32 = @intCast(rc);
            defer _ = linux.close(fd);
            var address: linux.sockaddr.un = .{ .path = @splat(0) };
            _ = try std.fmt.bufPrint(&address.path, "/proc/self/fd/{d}/sock", .{dir.handle});
            const size = @sizeOf(linux.sockaddr.un);
            const bound = linux.bind(fd, @ptrCast(&address), size);
            try testing.expectEqual(linux.E.SUCCESS, linux.errno(bound));
            const seen = try statSeen(io, dir, "sock", true);
            try testing.expectEqual(File.Kind.unix_domain_socket, seen.kind);
            const path_only = try dir.openFile(io, "sock", .{ .path_only = true });
            path_only.close(io);
            return openSeen(io, dir, "sock", .{});
        }
        fn fifoReadWrite(io: Io, dir: Dir) !Seen {
            const rc = linux.mknodat(dir.handle, "fifo", linux.S.IFIFO | 0o600, 0);
            try testing.expectEqual(linux.E.SUCCESS, linux.errno(rc));
            _ = try dir.statFile(io, "fifo", .{});
            // O_RDWR on a FIFO opens at once on Linux, with no peer.
            const file = try dir.openFile(io, "fifo", .{
                .mode = .read_write,
                .allow_directory = false,
            });
            defer file.close(io);
            try file.writeStreamingAll(io, "loop");
            var seen: Seen = .ofStat(try file.stat(io));
            seen.len = try file.readStreaming(io, &.{&seen.bytes});
            return seen;
        }
    };
    _ = try expectSeenAsThreaded(Calls.pty);
    _ = try expectSeenAsThreaded(Calls.socketPath);
    _ = try expectSeenAsThreaded(Calls.fifoReadWrite);
}

test "fs: symlink loops, dangling links, files as directories and long names as on Threaded" {
    const Calls = struct {
        fn loop(io: Io, dir: Dir) !Seen {
            try dir.symLink(io, "b", "a", .{});
            try dir.symLink(io, "a", "b", .{});
            const link = try statSeen(io, dir, "a", false);
            try testing.expectEqual(File.Kind.sym_link, link.kind);
            try testing.expectError(error.SymLinkLoop, dir.statFile(io, "a", .{}));
            try testing.expectError(error.SymLinkLoop, dir.statFile(io, "a/x", .{}));
            const no_follow: Dir.OpenFileOptions = .{ .follow_symlinks = false };
            try testing.expectError(error.SymLinkLoop, dir.openFile(io, "a", no_follow));
            try testing.expectError(error.SymLinkLoop, dir.openDir(io, "a", .{}));
            _ = try openSeen(io, dir, "a", .{});
            return link;
        }
        fn loopNoFollow(io: Io, dir: Dir) !Seen {
            try dir.symLink(io, "self", "self", .{});
            return openSeen(io, dir, "self", .{ .follow_symlinks = false });
        }
        fn loopPathOnly(io: Io, dir: Dir) !Seen {
            try dir.symLink(io, "self", "self", .{});
            const file = try dir.openFile(io, "self", .{
                .follow_symlinks = false,
                .path_only = true,
            });
            defer file.close(io);
            return .ofStat(try file.stat(io));
        }
        fn dangling(io: Io, dir: Dir) !Seen {
            try dir.symLink(io, "missing", "link", .{});
            const link = try statSeen(io, dir, "link", false);
            try testing.expectEqual(File.Kind.sym_link, link.kind);
            try testing.expectError(error.FileNotFound, dir.statFile(io, "link", .{}));
            try testing.expectError(error.FileNotFound, dir.openDir(io, "link", .{}));
            const no_follow: Dir.OpenFileOptions = .{ .follow_symlinks = false };
            try testing.expectError(error.SymLinkLoop, dir.openFile(io, "link", no_follow));
            return openSeen(io, dir, "link", .{});
        }
        fn fileAsDirectory(io: Io, dir: Dir) !Seen {
            try dir.writeFile(io, .{ .sub_path = "file", .data = "x" });
            try testing.expectError(error.NotDir, dir.statFile(io, "file/x", .{}));
            try testing.expectError(error.NotDir, dir.statFile(io, "file/", .{}));
            try testing.expectError(error.NotDir, dir.statFile(io, "file/.", .{}));
            try testing.expectError(error.NotDir, dir.openDir(io, "file", .{}));
            try testing.expectError(error.NotDir, dir.openDir(io, "file", .{ .iterate = true }));
            return openSeen(io, dir, "file/", .{});
        }
        fn fileComponent(io: Io, dir: Dir) !Seen {
            try dir.writeFile(io, .{ .sub_path = "file", .data = "x" });
            return openSeen(io, dir, "file/x", .{});
        }
        fn linkToFileWithSlash(io: Io, dir: Dir) !Seen {
            try dir.writeFile(io, .{ .sub_path = "file", .data = "x" });
            try dir.symLink(io, "file", "link", .{});
            return openSeen(io, dir, "link/", .{});
        }
        fn longName(io: Io, dir: Dir) !Seen {
            const name: [300]u8 = @splat('n');
            return openSeen(io, dir, &name, .{});
        }
        fn longNameInPath(io: Io, dir: Dir) !Seen {
            var name: [260]u8 = @splat('n');
            @memcpy(name[0..2], "d/");
            try dir.createDir(io, "d", .default_dir);
            return openSeen(io, dir, &name, .{});
        }
        fn escapes(io: Io, dir: Dir) !Seen {
            // `..` past the directory and past the root: no confinement.
            const up = "../../../../../../../../../../proc/self/status";
            const seen = try statSeen(io, dir, up, true);
            try testing.expectEqual(File.Kind.file, seen.kind);
            return openSeen(io, dir, up, .{});
        }
        fn directoryAsFile(io: Io, dir: Dir) !Seen {
            try dir.createDir(io, "d", .default_dir);
            const no_dir: Dir.OpenFileOptions = .{ .allow_directory = false };
            try testing.expectError(error.IsDir, dir.openFile(io, "d", no_dir));
            const write: Dir.OpenFileOptions = .{ .mode = .write_only, .allow_directory = true };
            try testing.expectError(error.IsDir, dir.openFile(io, "d", write));
            const file = try dir.openFile(io, "d", .{ .allow_directory = true });
            defer file.close(io);
            var buffer: [4]u8 = undefined;
            try testing.expectError(error.IsDir, file.readPositional(io, &.{&buffer}, 0));
            return .ofStat(try file.stat(io));
        }
    };
    _ = try expectSeenAsThreaded(Calls.loop);
    _ = try expectSeenAsThreaded(Calls.loopNoFollow);
    _ = try expectSeenAsThreaded(Calls.loopPathOnly);
    _ = try expectSeenAsThreaded(Calls.dangling);
    _ = try expectSeenAsThreaded(Calls.fileAsDirectory);
    _ = try expectSeenAsThreaded(Calls.fileComponent);
    _ = try expectSeenAsThreaded(Calls.linkToFileWithSlash);
    _ = try expectSeenAsThreaded(Calls.longName);
    _ = try expectSeenAsThreaded(Calls.longNameInPath);
    _ = try expectSeenAsThreaded(Calls.escapes);
    _ = try expectSeenAsThreaded(Calls.directoryAsFile);
}

test "fs: on a mount that may ask a server, files are opened off the executor" {
    try qemu.skipUnderQemu(.nowait, @src());
    try withRuntime(struct {
        fn body(io: Io) !void {
            var tmp: TmpDir = try .init(io);
            defer tmp.deinit(io);
            defer nowait.resetForTesting();
            try tmp.dir.writeFile(io, .{ .sub_path = "file", .data = "contents" });
            try tmp.dir.createDir(io, "sub", .default_dir);
            _ = try tmp.dir.statFile(io, "file", .{});
            _ = try tmp.dir.statFile(io, "sub", .{});
            // A FUSE file's `open` sends FUSE_OPEN to its daemon and waits for the answer;
            // an NFSv4 file's sends OPEN to the server: RESOLVE_CACHED finds the name in the
            // dentry cache all the same, so only the mount's kind can keep such an open off
            // the executor. Same for a directory opened for reading (FUSE_OPENDIR).
            mounts.kind_for_testing.store(@intFromEnum(mounts.Kind.other) + 1, .monotonic);
            const remote = NowaitCounts.start();
            const file = try tmp.dir.openFile(io, "file", .{ .allow_directory = true });
            defer file.close(io);
            var sub = try tmp.dir.openDir(io, "sub", .{ .iterate = true });
            sub.close(io);
            try testing.expectEqual(NowaitCounts{ .fast = 0, .slow = 2 }, remote.since());
            var buffer: [16]u8 = undefined;
            const n = try file.readPositional(io, &.{&buffer}, 0);
            try testing.expectEqualStrings("contents", buffer[0..n]);
            // A path-only open runs no file system `open`: still at once.
            const path_only = NowaitCounts.start();
            var base = try tmp.dir.openDir(io, "sub", .{});
            base.close(io);
            try testing.expectEqual(NowaitCounts{ .fast = 1, .slow = 0 }, path_only.since());
            // A local mount: at once.
            mounts.kind_for_testing.store(@intFromEnum(mounts.Kind.local) + 1, .monotonic);
            const local = NowaitCounts.start();
            const again = try tmp.dir.openFile(io, "file", .{ .allow_directory = true });
            again.close(io);
            sub = try tmp.dir.openDir(io, "sub", .{ .iterate = true });
            sub.close(io);
            try testing.expectEqual(NowaitCounts{ .fast = 2, .slow = 0 }, local.since());
            // What the probe finds is what the open would: not a directory, a missing path.
            const not_dir = tmp.dir.openDir(io, "file", .{ .iterate = true });
            try testing.expectError(error.NotDir, not_dir);
            const missing = tmp.dir.openDir(io, "none", .{ .iterate = true });
            try testing.expectError(error.FileNotFound, missing);
        }
    }.body);
}

test "fs: rename and replace of cached names, stat of the open file, as on Threaded" {
    const Calls = struct {
        fn renamed(io: Io, dir: Dir) !Seen {
            try dir.writeFile(io, .{ .sub_path = "a", .data = "first" });
            try dir.writeFile(io, .{ .sub_path = "c", .data = "other file" });
            const file = try dir.openFile(io, "a", .{});
            defer file.close(io);
            _ = try dir.statFile(io, "a", .{});
            _ = try dir.statFile(io, "c", .{});
            try dir.rename("a", dir, "b", io);
            try testing.expectError(error.FileNotFound, dir.statFile(io, "a", .{}));
            try testing.expectError(error.FileNotFound, dir.openFile(io, "a", .{}));
            const b = try dir.statFile(io, "b", .{});
            try testing.expectEqual((try file.stat(io)).inode, b.inode);
            try dir.rename("b", dir, "c", io);
            const c = try dir.statFile(io, "c", .{});
            try testing.expectEqual(b.inode, c.inode);
            try testing.expectEqual(@as(u64, 5), c.size);
            return openSeen(io, dir, "c", .{});
        }
    };
    _ = try expectSeenAsThreaded(Calls.renamed);
}

test "fs: files on tmpfs (/dev/shm) and ext4 (/var/tmp) stat, open and read as on Threaded" {
    const Calls = struct {
        fn under(io: Io, parent_path: []const u8) !Seen {
            var parent = Dir.cwd().openDir(io, parent_path, .{}) catch |err| switch (err) {
                error.FileNotFound => return error.NoParent,
                else => |e| return e,
            };
            defer parent.close(io);
            var suffix: [8]u8 = undefined;
            io.random(&suffix);
            var name_buffer: [32]u8 = undefined;
            const name = try std.fmt.bufPrint(&name_buffer, "weft-hostile-{x}", .{suffix});
            try parent.writeFile(io, .{ .sub_path = name, .data = "on this mount" });
            defer parent.deleteFile(io, name) catch {};
            const by_path = try statSeen(io, parent, name, true);
            const seen = try openSeen(io, parent, name, .{});
            try testing.expectEqual(by_path.size, seen.size);
            return seen;
        }
        fn shm(io: Io, _: Dir) !Seen {
            return under(io, "/dev/shm");
        }
        fn varTmp(io: Io, _: Dir) !Seen {
            return under(io, "/var/tmp");
        }
    };
    const shm_counts = try expectSeenAsThreaded(Calls.shm);
    const var_counts = try expectSeenAsThreaded(Calls.varTmp);
    if (!qemu.underQemu()) {
        // Both are local mounts: the stat by path, the open and the stat of the open file at
        // least are answered at once.
        try testing.expect(shm_counts.fast >= 3);
        try testing.expect(var_counts.fast >= 3);
    }
}

test "fs: a task looping over cached calls is canceled, its executor shared" {
    try qemu.skipUnderQemu(.nowait, @src());
    var rt = try Runtime.init(testing.allocator, .{ .executors = 1 });
    defer rt.deinit();
    const io = rt.io();
    var tmp: TmpDir = try .init(io);
    defer tmp.deinit(io);
    try tmp.dir.writeFile(io, .{ .sub_path = "file", .data = "contents" });
    const file = try tmp.dir.openFile(io, "file", .{});
    defer file.close(io);
    _ = try tmp.dir.statFile(io, "file", .{});
    var rounds: std.atomic.Value(u64) = .init(0);
    var looping = try io.concurrent(struct {
        fn run(inner: Io, dir: Dir, open_file: File, count: *std.atomic.Value(u64)) !void {
            var buffer: [8]u8 = undefined;
            // Ends only by cancelation: every call below is answered from the cache.
            while (true) {
                _ = try dir.statFile(inner, "file", .{});
                _ = try open_file.stat(inner);
                _ = try open_file.readPositional(inner, &.{&buffer}, 0);
                try testing.expectError(error.FileNotFound, dir.statFile(inner, "none", .{}));
                _ = count.fetchAdd(1, .monotonic);
            }
        }
    }.run, .{ io, tmp.dir, file, &rounds });
    // This task only runs again if the loop yields.
    try io.sleep(.fromMilliseconds(20), .awake);
    const before = NowaitCounts.start();
    try io.sleep(.fromMilliseconds(5), .awake);
    try testing.expect(before.since().fast > 0);
    try testing.expect(rounds.load(.monotonic) > 0);
    try testing.expectError(error.Canceled, looping.cancel(io));
}

test "fs: a loop of cached calls is not reported as a stall" {
    try qemu.skipUnderQemu(.nowait, @src());
    if (!Metrics.enabled) return os.skipTest(@src(), "-Dmetrics=false: no stall detector");
    // 25 ms: a run of cached calls yields every 64 calls, some 200 us apart; the margin is
    // for a loaded machine, where a 5 ms threshold saw a 7 ms "stall" of a statx that the
    // thread's run delay did not explain (a CI run of four test processes on two CPUs).
    var rt = try Runtime.init(testing.allocator, .{
        .executors = 1,
        .stall_threshold_ns = 25 * std.time.ns_per_ms,
    });
    defer rt.deinit();
    const io = rt.io();
    var tmp: TmpDir = try .init(io);
    defer tmp.deinit(io);
    try tmp.dir.writeFile(io, .{ .sub_path = "file", .data = "contents" });
    const file = try tmp.dir.openFile(io, "file", .{});
    defer file.close(io);
    _ = try tmp.dir.statFile(io, "file", .{});
    const before = NowaitCounts.start();
    const start_ns = os.monotonicNs();
    var buffer: [8]u8 = undefined;
    // 500 ms of calls that never wait, 20 times the threshold.
    while (os.monotonicNs() - start_ns < 500 * std.time.ns_per_ms) {
        _ = try tmp.dir.statFile(io, "file", .{});
        _ = try file.stat(io);
        _ = try file.readPositional(io, &.{&buffer}, 0);
    }
    try testing.expect(before.since().fast > 1000);
    try testing.expectEqual(@as(u64, 0), rt.metrics().stalls);
}

test "fs: many tasks stat and open names being created and deleted: no crash, no wrong kind" {
    try withRuntime(struct {
        const names = 4;
        const rounds = 200;

        fn mutate(io: Io, dir: Dir, done: *std.atomic.Value(bool)) !void {
            defer done.store(true, .release);
            var buffer: [16]u8 = undefined;
            for (0..rounds) |round| {
                const i = round % names;
                const file = try std.fmt.bufPrint(&buffer, "file-{d}", .{i});
                try dir.writeFile(io, .{ .sub_path = file, .data = "12345" });
                var link_buffer: [16]u8 = undefined;
                const link = try std.fmt.bufPrint(&link_buffer, "link-{d}", .{i});
                try dir.symLink(io, file, link, .{});
                var dir_buffer: [16]u8 = undefined;
                const sub = try std.fmt.bufPrint(&dir_buffer, "dir-{d}", .{i});
                try dir.createDir(io, sub, .default_dir);
                try dir.writeFile(io, .{ .sub_path = "flip", .data = "12345" });
                try dir.deleteFile(io, "flip");
                try dir.createDir(io, "flip", .default_dir);
                try dir.deleteDir(io, "flip");
                try dir.deleteFile(io, link);
                try dir.deleteDir(io, sub);
                try dir.deleteFile(io, file);
            }
        }

        fn observe(io: Io, dir: Dir, done: *std.atomic.Value(bool)) anyerror!void {
            var buffer: [16]u8 = undefined;
            var round: usize = 0;
            while (!done.load(.acquire)) : (round += 1) {
                const i = round % names;
                const file = try std.fmt.bufPrint(&buffer, "file-{d}", .{i});
                try expectKind(dir.statFile(io, file, .{}), .file);
                var link_buffer: [16]u8 = undefined;
                const link = try std.fmt.bufPrint(&link_buffer, "link-{d}", .{i});
                try expectKind(dir.statFile(io, link, .{ .follow_symlinks = false }), .sym_link);
                try expectKind(dir.statFile(io, link, .{}), .file);
                var dir_buffer: [16]u8 = undefined;
                const sub = try std.fmt.bufPrint(&dir_buffer, "dir-{d}", .{i});
                try expectKind(dir.statFile(io, sub, .{}), .directory);
                try expectContents(io, dir, file);
                try expectContents(io, dir, link);
                const no_dir: Dir.OpenFileOptions = .{ .allow_directory = false };
                if (dir.openFile(io, "flip", no_dir)) |opened| {
                    defer opened.close(io);
                    try testing.expectEqual(File.Kind.file, (try opened.stat(io)).kind);
                } else |err| switch (err) {
                    error.FileNotFound, error.IsDir => {},
                    else => |e| return e,
                }
                if (dir.openDir(io, "flip", .{ .iterate = true })) |opened| {
                    defer opened.close(io);
                    try testing.expectEqual(File.Kind.directory, (try opened.stat(io)).kind);
                } else |err| switch (err) {
                    error.FileNotFound, error.NotDir => {},
                    else => |e| return e,
                }
            }
        }

        fn expectKind(stat: Dir.StatFileError!File.Stat, kind: File.Kind) !void {
            if (stat) |s| {
                try testing.expectEqual(kind, s.kind);
            } else |err| switch (err) {
                error.FileNotFound => {},
                else => |e| return e,
            }
        }

        /// Each file is made anew and written in one write: empty, or all of it.
        fn expectContents(io: Io, dir: Dir, name: []const u8) !void {
            const file = dir.openFile(io, name, .{ .allow_directory = false }) catch |err| {
                return switch (err) {
                    error.FileNotFound => {},
                    else => |e| e,
                };
            };
            defer file.close(io);
            var buffer: [8]u8 = undefined;
            const n = try file.readPositional(io, &.{&buffer}, 0);
            if (n != 0) try testing.expectEqualStrings("12345", buffer[0..n]);
        }

        fn body(io: Io) !void {
            var tmp: TmpDir = try .init(io);
            defer tmp.deinit(io);
            var done: std.atomic.Value(bool) = .init(false);
            var observers: [6]Io.Future(anyerror!void) = undefined;
            var started: usize = 0;
            defer for (observers[0..started]) |*observer| {
                observer.cancel(io) catch {};
            };
            for (&observers) |*observer| {
                observer.* = try io.concurrent(observe, .{ io, tmp.dir, &done });
                started += 1;
            }
            var mutator = try io.concurrent(mutate, .{ io, tmp.dir, &done });
            try mutator.await(io);
            for (observers[0..started]) |*observer| try observer.await(io);
            started = 0;
        }
    }.body);
}

/// The kernel's own answer for the working directory: `getcwd(2)`.
fn kernelCwd(buffer: []u8) ![]const u8 {
    const rc = linux.getcwd(buffer.ptr, buffer.len);
    if (linux.errno(rc) != .SUCCESS) return error.NoCwd;
    return std.mem.sliceTo(buffer, 0);
}

test "fs: realPath of Dir.cwd(), of \".\" and of a path relative to it are the kernel's" {
    try withRuntime(struct {
        fn body(io: Io) !void {
            var kernel_buffer: [4096]u8 = undefined;
            const kernel = try kernelCwd(&kernel_buffer);
            var buffer: [4096]u8 = undefined;
            try testing.expectEqualStrings(kernel, buffer[0..try Dir.cwd().realPath(io, &buffer)]);
            const dot = try Dir.cwd().realPathFile(io, ".", &buffer);
            try testing.expectEqualStrings(kernel, buffer[0..dot]);
            // A relative path: the parent of the working directory, as the kernel names it.
            const parent = std.fs.path.dirname(kernel) orelse kernel;
            const dot_dot = try Dir.cwd().realPathFile(io, "..", &buffer);
            try testing.expectEqualStrings(parent, buffer[0..dot_dot]);
            // A buffer too small for the path is an error, not a cut path.
            var small: [1]u8 = undefined;
            try testing.expectError(error.NameTooLong, Dir.cwd().realPath(io, &small));
        }
    }.body);
}
