//! files: the file benchmark. One program written against std.Io only, run on weft
//! (io_uring and epoll backends, 2 executors: one per CPU here) and on std.Io.Threaded side by
//! side, each scenario with 1, 8 and 64 concurrent tasks (`Group.concurrent`). One result line
//! per (scenario, runtime, tasks); ns_per_op is wall time of the timed region / ops:
//!
//!   scenario      one op                                               ops
//!   small         open + 4 KiB positional read + close of a 4 KiB     3 passes over 10,000 files
//!                 file (hot: one untimed pass first)
//!   random_hot    4 KiB positional read at a random 4 KiB-aligned     200,000
//!                 offset of a 256 MiB file (read once untimed first)
//!   seq_cold      1 MiB positional read of a 1 GiB file, in order     1,024 (mib_per_s too)
//!                 (tasks take the next chunk from a shared counter);
//!                 the file is evicted first
//!   random_cold   4 KiB positional read at a random offset of the     10,000 (2 % of its pages:
//!                 1 GiB file, evicted first                            few repeats)
//!   write_fsync   create + 4 KiB write + fsync + close of a new file   1,000 (in a fresh
//!                                                                      directory, removed after)
//!   walk          stat of one entry of a 100-directory x 1,000-file    100,100 (tasks take
//!                 tree while listing it (each directory opened,        whole directories)
//!                 listed, every name `statFile`d, closed)
//!
//! Evicted: `posix_fadvise(POSIX_FADV_DONTNEED)` on the whole file right before the timed
//! region; the kernel then reads every page from the disk (random 4 KiB reads that miss are
//! read alone, without readahead). A cold row on tmpfs would measure memory, so the program
//! refuses (`status=skipped reason=tmpfs`) when `--dir` is on tmpfs.
//!
//! Every read is checked: each 4 KiB block of the data files starts with its block index
//! (u64, little endian), each small file with its file index; a wrong block fails the row
//! (`status=failed error=WrongBytes`), as does a walk that counts other than 100,100 entries.
//!
//! The fixtures (1.3 GiB, 110,100 inodes) are created under `--dir` on the first run by the
//! parent (on its own std.Io.Threaded) and reused while `<dir>/ready-v1` exists; the parent
//! also walks the tree once before the rows, so the walk rows find its inodes cached.
//!
//! bench/files.sh runs this with the Tokio and Go peers (bench/peers) and fio, and prints the
//! table recorded in docs/BENCHMARKS.md.
//!
//! Usage: bench-files [--dir PATH] [--scenario NAME] [--tasks N] [--io weft|threaded|both]
//!                    [--backend io_uring|epoll]
//! (defaults: /var/tmp/weft-bench-files, every scenario, 1 8 64, both, both)
const std = @import("std");
const Io = std.Io;
const linux = std.os.linux;
const weft = @import("weft");
const harness = @import("harness");

const timeout_ns = 120 * std.time.ns_per_s;
const dir_default = "/var/tmp/weft-bench-files";
const ready_marker = "ready-v1";

const block_bytes = 4096;
const small_files = 10_000;
const small_passes = 3;
const hot_name = "hot-256m";
const hot_bytes = 256 * 1024 * 1024;
const random_hot_reads = 200_000;
const big_name = "big-1g";
const big_bytes = 1024 * 1024 * 1024;
const chunk_bytes = 1024 * 1024;
const random_cold_reads = 10_000;
const write_files = 1_000;
const walk_dirs = 100;
const walk_files_per_dir = 1_000;
const walk_entries = walk_dirs * walk_files_per_dir + walk_dirs;

const task_counts = [_]usize{ 1, 8, 64 };
const tasks_max = 64;

const Scenario = enum { small, random_hot, seq_cold, random_cold, write_fsync, walk };
const Backend = enum { io_uring, epoll };

const Result = struct {
    ns_per_op: f64,
    ops: u64,
    wall_ns: u64,
    mib_per_s: f64,
};

const RunError = error{ WrongBytes, WrongCount, ShortRead } || Io.Cancelable ||
    Io.ConcurrentError || Io.File.OpenError || Io.File.ReadPositionalError ||
    Io.File.WritePositionalError || Io.File.SyncError || Io.Dir.StatFileError ||
    Io.Dir.Reader.Error || Io.Dir.CreateDirError;

// ---------------------------------------------------------------------------------------------
// Parent: fixtures and the plan

pub fn main(init: std.process.Init) !void {
    const arena = init.arena.allocator();
    const args = try harness.argsAlloc(arena, init.minimal.args);
    if (harness.isChild(args)) return harness.childMain(weft, init, args, measure);

    var buffer: [1024]u8 = undefined;
    var stdout = std.Io.File.stdout().writerStreaming(init.io, &buffer);
    var session: harness.Session = .{
        .arena = arena,
        .environ = init.minimal.environ,
        .out = &stdout.interface,
    };
    const dir_path = harness.flagValue(args, "--dir") orelse dir_default;
    const only = try flagEnum(Scenario, args, "--scenario");
    const backend_only = try flagEnum(Backend, args, "--backend");
    const kinds = try harness.ioKinds(args, &.{ .threaded, .weft });
    const tasks_only = if (harness.flagValue(args, "--tasks") != null)
        try harness.flagInt(args, "--tasks", 1)
    else
        null;
    if (tasks_only) |t| if (t == 0 or t > tasks_max) return error.InvalidArgs;

    try Io.Dir.cwd().createDirPath(init.io, dir_path);
    const tmpfs = try onTmpfs(dir_path);
    try ensureFixtures(init.io, dir_path);
    if (only == null or only.? == .walk) try warmTree(init.io, dir_path);

    for (std.enums.values(Scenario)) |scenario| {
        if (only != null and only.? != scenario) continue;
        for (task_counts) |tasks| {
            if (tasks_only != null and tasks_only.? != tasks) continue;
            for (kinds) |kind| {
                const backends: []const Backend = switch (kind) {
                    .threaded => &.{.io_uring}, // one row: no backend
                    .weft => &.{ .io_uring, .epoll },
                };
                for (backends) |backend| {
                    if (backend_only != null and kind == .weft and backend_only.? != backend) {
                        continue;
                    }
                    const config: []const []const u8 = &.{
                        try session.word("runtime", kind),
                        if (kind == .weft) try session.word("backend", backend) else "backend=none",
                        try session.word("scenario", scenario),
                        try session.word("tasks", tasks),
                        try session.word("dir", dir_path),
                    };
                    const row = try std.fmt.allocPrint(arena, "files_{t}", .{scenario});
                    if (tmpfs and (scenario == .seq_cold or scenario == .random_cold)) {
                        try session.skip(row, config, "tmpfs");
                        continue;
                    }
                    _ = try session.report(row, config, timeout_ns);
                }
            }
        }
    }
}

fn flagEnum(comptime E: type, args: []const []const u8, name: []const u8) !?E {
    const text = harness.flagValue(args, name) orelse return null;
    return std.meta.stringToEnum(E, text) orelse {
        std.debug.print("{s}: unknown value '{s}'\n", .{ name, text });
        return error.InvalidArgs;
    };
}

/// Whether `path` is on tmpfs (`statfs`'s f_type, the first word of `struct statfs` on the
/// 64-bit targets weft runs on).
fn onTmpfs(path: []const u8) !bool {
    const tmpfs_magic = 0x01021994;
    var path_z: [std.posix.PATH_MAX:0]u8 = undefined;
    if (path.len >= path_z.len) return error.NameTooLong;
    @memcpy(path_z[0..path.len], path);
    path_z[path.len] = 0;
    var buffer: [32]u64 align(8) = undefined;
    const rc = linux.syscall2(.statfs, @intFromPtr(&path_z), @intFromPtr(&buffer));
    if (linux.errno(rc) != .SUCCESS) return error.StatfsFailed;
    return buffer[0] == tmpfs_magic;
}

fn ensureFixtures(io: Io, dir_path: []const u8) !void {
    var base = try Io.Dir.cwd().openDir(io, dir_path, .{});
    defer base.close(io);
    if (base.statFile(io, ready_marker, .{})) |_| return else |err| switch (err) {
        error.FileNotFound => {},
        else => |e| return e,
    }
    std.debug.print("files: creating fixtures in {s} (once)\n", .{dir_path});
    try writeBlocks(io, base, hot_name, hot_bytes);
    try writeBlocks(io, base, big_name, big_bytes);
    try base.createDirPath(io, "small");
    var name_buffer: [64]u8 = undefined;
    var block: [block_bytes]u8 = undefined;
    for (0..small_files) |index| {
        fillBlock(&block, index);
        const name = try std.fmt.bufPrint(&name_buffer, "small/{d}", .{index});
        const file = try base.createFile(io, name, .{});
        defer file.close(io);
        try file.writePositionalAll(io, &block, 0);
    }
    for (0..walk_dirs) |d| {
        const dir_name = try std.fmt.bufPrint(&name_buffer, "tree/{d}", .{d});
        try base.createDirPath(io, dir_name);
        var sub = try base.openDir(io, dir_name, .{});
        defer sub.close(io);
        for (0..walk_files_per_dir) |f| {
            var file_name_buffer: [16]u8 = undefined;
            const file_name = try std.fmt.bufPrint(&file_name_buffer, "{d}", .{f});
            const file = try sub.createFile(io, file_name, .{});
            file.close(io);
        }
    }
    const marker = try base.createFile(io, ready_marker, .{});
    marker.close(io);
}

/// A data file of `bytes / 4096` blocks, each starting with its index.
fn writeBlocks(io: Io, base: Io.Dir, name: []const u8, bytes: u64) !void {
    const file = try base.createFile(io, name, .{});
    defer file.close(io);
    const buffer = try std.heap.page_allocator.alloc(u8, chunk_bytes);
    defer std.heap.page_allocator.free(buffer);
    var offset: u64 = 0;
    while (offset < bytes) : (offset += chunk_bytes) {
        for (0..chunk_bytes / block_bytes) |b| {
            fillBlock(buffer[b * block_bytes ..][0..block_bytes], offset / block_bytes + b);
        }
        try file.writePositionalAll(io, buffer, offset);
    }
    try file.sync(io);
}

fn fillBlock(block: *[block_bytes]u8, index: u64) void {
    @memset(block, @truncate(index *% 131));
    std.mem.writeInt(u64, block[0..8], index, .little);
}

/// Lists and stats the whole tree once, so that every walk row finds it in the inode cache.
fn warmTree(io: Io, dir_path: []const u8) !void {
    var base = try Io.Dir.cwd().openDir(io, dir_path, .{});
    defer base.close(io);
    var context: Walk = .{ .base = base };
    for (0..walk_dirs) |_| try context.walkNext(io);
    if (context.entries.load(.monotonic) != walk_entries) return error.WrongCount;
}

// ---------------------------------------------------------------------------------------------
// Child: one row

fn measure(io: Io, config: harness.Config) !Result {
    const scenario = try config.enumValue(Scenario, "scenario");
    const tasks = try config.int(usize, "tasks");
    if (tasks == 0 or tasks > tasks_max) return error.ConfigInvalid;
    const dir_path = config.get("dir") orelse return error.ConfigMissing;
    var base = try Io.Dir.cwd().openDir(io, dir_path, .{});
    defer base.close(io);
    return switch (scenario) {
        .small => small(io, base, tasks),
        .random_hot => randomHot(io, base, tasks),
        .seq_cold => seqCold(io, base, tasks),
        .random_cold => randomCold(io, base, tasks),
        .write_fsync => writeFsync(io, base, tasks),
        .walk => walk(io, base, tasks),
    };
}

/// Runs `work(context, io, task_index)` on `tasks` concurrent tasks and returns the wall time
/// from the moment all of them are running (a start barrier: Threaded starts a thread per
/// task, which is not what a row measures) to the last one's end. The first error of any task
/// is returned.
fn runTasks(io: Io, tasks: usize, context: anytype, comptime work: anytype) RunError!u64 {
    const Context = @TypeOf(context);
    const Start = struct {
        arrived: std.atomic.Value(usize) = .init(0),
        tasks: usize,
        all_arrived: Io.Event = .unset,
        go: Io.Event = .unset,
        failure: std.atomic.Value(u16) = .init(0),

        fn run(start: *@This(), task_io: Io, c: Context, index: usize) Io.Cancelable!void {
            if (start.arrived.fetchAdd(1, .acq_rel) + 1 == start.tasks) {
                start.all_arrived.set(task_io);
            }
            try start.go.wait(task_io);
            work(c, task_io, index) catch |err| {
                if (err == error.Canceled) return error.Canceled;
                _ = start.failure.cmpxchgStrong(0, @intFromError(err), .monotonic, .monotonic);
            };
        }
    };
    var start: Start = .{ .tasks = tasks };
    var group: Io.Group = .init;
    defer group.cancel(io);
    for (0..tasks) |index| try group.concurrent(io, Start.run, .{ &start, io, context, index });
    try start.all_arrived.wait(io);
    const start_ns = harness.monotonicNs();
    start.go.set(io);
    try group.await(io);
    const wall_ns = harness.monotonicNs() - start_ns;
    const failure = start.failure.load(.monotonic);
    if (failure != 0) return @as(RunError, @errorCast(@errorFromInt(failure)));
    return wall_ns;
}

fn result(wall_ns: u64, ops: u64, bytes: u64) Result {
    const seconds = @as(f64, @floatFromInt(wall_ns)) / std.time.ns_per_s;
    return .{
        .ns_per_op = @as(f64, @floatFromInt(wall_ns)) / @as(f64, @floatFromInt(ops)),
        .ops = ops,
        .wall_ns = wall_ns,
        .mib_per_s = @as(f64, @floatFromInt(bytes)) / (1024 * 1024) / seconds,
    };
}

/// The index a block or a small file starts with; `error.WrongBytes` if it is not `expected`.
fn check(bytes: []const u8, expected: u64) RunError!void {
    if (bytes.len < 8) return error.ShortRead;
    if (std.mem.readInt(u64, bytes[0..8], .little) != expected) return error.WrongBytes;
}

const Counter = struct {
    next: std.atomic.Value(u64) = .init(0),
    total: u64,

    fn take(counter: *Counter) ?u64 {
        const index = counter.next.fetchAdd(1, .monotonic);
        return if (index < counter.total) index else null;
    }
};

// small ---------------------------------------------------------------------------------------

const Small = struct {
    dir: Io.Dir,
    counter: Counter,

    fn work(small_context: *Small, io: Io, _: usize) RunError!void {
        var name_buffer: [16]u8 = undefined;
        var block: [block_bytes]u8 = undefined;
        // Bounded by the counter's total.
        while (small_context.counter.take()) |op| {
            const index = op % small_files;
            const name = std.fmt.bufPrint(&name_buffer, "{d}", .{index}) catch unreachable;
            const file = try small_context.dir.openFile(io, name, .{});
            defer file.close(io);
            const read = try file.readPositional(io, &.{&block}, 0);
            if (read != block_bytes) return error.ShortRead;
            try check(&block, index);
        }
    }
};

fn small(io: Io, base: Io.Dir, tasks: usize) !Result {
    var dir = try base.openDir(io, "small", .{});
    defer dir.close(io);
    var warm: Small = .{ .dir = dir, .counter = .{ .total = small_files } };
    _ = try runTasks(io, tasks, &warm, Small.work);
    var context: Small = .{ .dir = dir, .counter = .{ .total = small_files * small_passes } };
    const wall_ns = try runTasks(io, tasks, &context, Small.work);
    return result(wall_ns, context.counter.total, context.counter.total * block_bytes);
}

// random reads --------------------------------------------------------------------------------

const Random = struct {
    file: Io.File,
    blocks: u64,
    reads_per_task: u64,

    fn work(random: *Random, io: Io, index: usize) RunError!void {
        var prng: std.Random.DefaultPrng = .init(0x9e3779b97f4a7c15 +% index);
        var block: [block_bytes]u8 = undefined;
        for (0..random.reads_per_task) |_| {
            const b = prng.random().uintLessThan(u64, random.blocks);
            const read = try random.file.readPositional(io, &.{&block}, b * block_bytes);
            if (read != block_bytes) return error.ShortRead;
            try check(&block, b);
        }
    }
};

fn randomHot(io: Io, base: Io.Dir, tasks: usize) !Result {
    const file = try base.openFile(io, hot_name, .{});
    defer file.close(io);
    try readWhole(io, file, hot_bytes);
    return randomReads(io, file, hot_bytes, tasks, random_hot_reads);
}

fn randomCold(io: Io, base: Io.Dir, tasks: usize) !Result {
    const file = try base.openFile(io, big_name, .{});
    defer file.close(io);
    try evict(file);
    return randomReads(io, file, big_bytes, tasks, random_cold_reads);
}

fn randomReads(io: Io, file: Io.File, bytes: u64, tasks: usize, reads: u64) !Result {
    var context: Random = .{
        .file = file,
        .blocks = bytes / block_bytes,
        .reads_per_task = reads / tasks,
    };
    const wall_ns = try runTasks(io, tasks, &context, Random.work);
    const ops = context.reads_per_task * tasks;
    return result(wall_ns, ops, ops * block_bytes);
}

/// Reads the whole file once (untimed), so that it is in the page cache.
fn readWhole(io: Io, file: Io.File, bytes: u64) !void {
    const buffer = try std.heap.page_allocator.alloc(u8, chunk_bytes);
    defer std.heap.page_allocator.free(buffer);
    var offset: u64 = 0;
    while (offset < bytes) : (offset += chunk_bytes) {
        if (try file.readPositionalAll(io, buffer, offset) != chunk_bytes) return error.ShortRead;
    }
}

/// Drops the file's pages from the page cache (they are clean: the fixtures were synced).
fn evict(file: Io.File) !void {
    const rc = linux.fadvise(file.handle, 0, 0, linux.POSIX_FADV.DONTNEED);
    if (linux.errno(rc) != .SUCCESS) return error.FadviseFailed;
}

// sequential ----------------------------------------------------------------------------------

const Sequential = struct {
    file: Io.File,
    counter: Counter,

    fn work(sequential: *Sequential, io: Io, _: usize) RunError!void {
        const buffer = std.heap.page_allocator.alloc(u8, chunk_bytes) catch
            return error.SystemResources;
        defer std.heap.page_allocator.free(buffer);
        while (sequential.counter.take()) |chunk| {
            const offset = chunk * chunk_bytes;
            const read = try sequential.file.readPositionalAll(io, buffer, offset);
            if (read != chunk_bytes) return error.ShortRead;
            try check(buffer, offset / block_bytes);
            const last = (offset + chunk_bytes) / block_bytes - 1;
            try check(buffer[chunk_bytes - block_bytes ..], last);
        }
    }
};

fn seqCold(io: Io, base: Io.Dir, tasks: usize) !Result {
    const file = try base.openFile(io, big_name, .{});
    defer file.close(io);
    try evict(file);
    var context: Sequential = .{ .file = file, .counter = .{ .total = big_bytes / chunk_bytes } };
    const wall_ns = try runTasks(io, tasks, &context, Sequential.work);
    return result(wall_ns, context.counter.total, big_bytes);
}

// write + fsync -------------------------------------------------------------------------------

const Writes = struct {
    dir: Io.Dir,
    counter: Counter,

    fn work(writes: *Writes, io: Io, _: usize) RunError!void {
        var name_buffer: [16]u8 = undefined;
        var block: [block_bytes]u8 = undefined;
        while (writes.counter.take()) |index| {
            fillBlock(&block, index);
            const name = std.fmt.bufPrint(&name_buffer, "{d}", .{index}) catch unreachable;
            const file = try writes.dir.createFile(io, name, .{});
            defer file.close(io);
            try file.writePositionalAll(io, &block, 0);
            try file.sync(io);
        }
    }
};

fn writeFsync(io: Io, base: Io.Dir, tasks: usize) !Result {
    var name_buffer: [32]u8 = undefined;
    const name = try std.fmt.bufPrint(&name_buffer, "writes-{d}", .{linux.getpid()});
    try base.createDirPath(io, name);
    defer base.deleteTree(io, name) catch {};
    var dir = try base.openDir(io, name, .{});
    defer dir.close(io);
    var context: Writes = .{ .dir = dir, .counter = .{ .total = write_files } };
    const wall_ns = try runTasks(io, tasks, &context, Writes.work);
    return result(wall_ns, write_files, write_files * block_bytes);
}

// walk ----------------------------------------------------------------------------------------

const Walk = struct {
    base: Io.Dir,
    dirs: Counter = .{ .total = walk_dirs },
    entries: std.atomic.Value(u64) = .init(0),

    fn work(context: *Walk, io: Io, _: usize) RunError!void {
        // Bounded by the directory counter.
        while (context.dirs.next.load(.monotonic) < walk_dirs) try context.walkNext(io);
    }

    /// Lists the next directory of the tree and stats it and each entry.
    fn walkNext(context: *Walk, io: Io) RunError!void {
        const d = context.dirs.take() orelse return;
        var name_buffer: [32]u8 = undefined;
        const name = std.fmt.bufPrint(&name_buffer, "tree/{d}", .{d}) catch unreachable;
        _ = try context.base.statFile(io, name, .{});
        var dir = try context.base.openDir(io, name, .{ .iterate = true });
        defer dir.close(io);
        var count: u64 = 1;
        var it = dir.iterate();
        // Bounded by the directory's entries.
        while (try it.next(io)) |entry| {
            _ = try dir.statFile(io, entry.name, .{});
            count += 1;
        }
        if (count != walk_files_per_dir + 1) return error.WrongCount;
        _ = context.entries.fetchAdd(count, .monotonic);
    }
};

fn walk(io: Io, base: Io.Dir, tasks: usize) !Result {
    var context: Walk = .{ .base = base };
    const wall_ns = try runTasks(io, tasks, &context, Walk.work);
    const entries = context.entries.load(.monotonic);
    if (entries != walk_entries) return error.WrongCount;
    return result(wall_ns, entries, 0);
}
