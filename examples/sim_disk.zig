//! weft.Sim's simulated disk finding two storage bugs by crashing at 10,000 points.
//!
//! 1. A key-value store saves all its keys by writing a temporary file, syncing it and
//!    renaming it over the old one, then tells the client the write is done. Without a sync
//!    of the directory after the rename, a crash can undo the rename (or, for the first save,
//!    lose the file's name): the acknowledged keys are gone after recovery.
//! 2. An append-only log writes records (length, checksum, payload) and syncs after each. A
//!    crash tears the last unsynced record at a sector boundary (`tear_writes`); a recovery
//!    that trusts the length and skips the checksum returns a record it never finished
//!    writing.
//!
//! Each case runs `weft.Sim.checkCrashes`: per seed, the write phase crashes before a disk
//! operation drawn from the seed, and the recovery then checks what survived. With the bugs,
//! each prints the first failing seed with what the disk held (`WEFT_SEED=n` replays it);
//! with `--fixed`, every crash point recovers.
//!
//!   example-sim_disk              the two buggy programs: each names a failing seed
//!   example-sim_disk --fixed      with the directory sync and the checksum: all recover
//!   example-sim_disk --seeds 500  fewer (or more) crash points per case
const std = @import("std");
const Io = std.Io;
const Dir = Io.Dir;
const File = Io.File;
const weft = @import("weft");

// ---------------------------------------------------------------------------- the store

/// The keys the writer sets, one save each.
const keys = [_][]const u8{ "alpha", "bravo", "charlie", "delta", "echo" };

const Store = struct {
    /// The context both phases share: whether saves sync the directory, and how many keys
    /// the client was told are saved.
    sync_directory: bool,
    acknowledged: usize = 0,

    /// Writes every key set so far (`key=index`, one per line) to `store.tmp`, syncs it and
    /// renames it over `store`; with `sync_directory`, syncs the directory after.
    fn save(io: Io, count: usize, sync_directory: bool) !void {
        const dir: Dir = .cwd();
        {
            const file = try dir.createFile(io, "store.tmp", .{});
            defer file.close(io);
            var buffer: [256]u8 = undefined;
            var writer = file.writerStreaming(io, &buffer);
            for (keys[0..count], 0..) |key, index| {
                try writer.interface.print("{s}={d}\n", .{ key, index });
            }
            try writer.interface.flush();
            try file.sync(io);
        }
        try dir.rename("store.tmp", dir, "store", io);
        if (sync_directory) try syncDirectory(io, dir);
    }

    fn write(io: Io, store: *Store) !void {
        for (1..keys.len + 1) |count| {
            try save(io, count, store.sync_directory);
            store.acknowledged = count; // the client is told
        }
    }

    /// Loads the store after the crash: every acknowledged key must be there, with its value.
    fn recover(io: Io, store: *Store) !void {
        var buffer: [512]u8 = undefined;
        const bytes = Dir.cwd().readFile(io, "store", &buffer) catch |err| switch (err) {
            error.FileNotFound => {
                if (store.acknowledged == 0) return;
                return error.AcknowledgedKeysLost;
            },
            else => |e| return e,
        };
        var found: usize = 0;
        var lines = std.mem.tokenizeScalar(u8, bytes, '\n');
        while (lines.next()) |line| {
            const equals = std.mem.indexOfScalar(u8, line, '=') orelse return error.Corrupt;
            const index = std.fmt.parseInt(usize, line[equals + 1 ..], 10) catch
                return error.Corrupt;
            if (index >= keys.len or !std.mem.eql(u8, keys[index], line[0..equals])) {
                return error.Corrupt;
            }
            found = @max(found, index + 1);
        }
        if (found < store.acknowledged) return error.AcknowledgedKeysLost;
    }
};

fn syncDirectory(io: Io, dir: Dir) !void {
    const opened = try dir.openDir(io, ".", .{});
    defer opened.close(io);
    const file: File = .{ .handle = opened.handle, .flags = .{ .nonblocking = false } };
    try file.sync(io);
}

// ---------------------------------------------------------------------------- the log

const records = 6;
/// A record's payload: long enough to span sectors, so that a crash can tear it.
const payload_bytes = 700;
const header_bytes = 8;

fn payloadOf(index: usize, buffer: *[payload_bytes]u8) []const u8 {
    for (buffer, 0..) |*byte, at| byte.* = @intCast('a' + (index * 7 + at) % 26);
    return buffer;
}

const Log = struct {
    /// Whether the recovery checks each record's checksum.
    check_checksum: bool,
    acknowledged: usize = 0,

    /// Appends each record (length, CRC-32 of the payload, payload), syncing after each.
    fn write(io: Io, log: *Log) !void {
        const file = try Dir.cwd().createFile(io, "log", .{ .exclusive = true });
        defer file.close(io);
        try syncDirectory(io, .cwd()); // the log's name is durable before any record
        var offset: u64 = 0;
        for (0..records) |index| {
            var payload_buffer: [payload_bytes]u8 = undefined;
            const payload = payloadOf(index, &payload_buffer);
            var header: [header_bytes]u8 = undefined;
            std.mem.writeInt(u32, header[0..4], payload_bytes, .little);
            std.mem.writeInt(u32, header[4..8], std.hash.Crc32.hash(payload), .little);
            try file.writePositionalAll(io, &header, offset);
            try file.writePositionalAll(io, payload, offset + header_bytes);
            try file.sync(io);
            offset += header_bytes + payload_bytes;
            log.acknowledged = index + 1;
        }
    }

    /// Reads records until the end or the first that does not check out; every record
    /// returned must be one the writer wrote whole, and every acknowledged one must be there.
    fn recover(io: Io, log: *Log) !void {
        const file = Dir.cwd().openFile(io, "log", .{}) catch |err| switch (err) {
            error.FileNotFound => {
                if (log.acknowledged == 0) return;
                return error.AcknowledgedRecordsLost;
            },
            else => |e| return e,
        };
        defer file.close(io);
        var offset: u64 = 0;
        var index: usize = 0;
        // Bounded by the file's length: each turn moves past one record.
        while (true) : (index += 1) {
            var header: [header_bytes]u8 = undefined;
            if (try file.readPositionalAll(io, &header, offset) < header_bytes) break;
            const length = std.mem.readInt(u32, header[0..4], .little);
            if (length != payload_bytes) break; // a torn or absent header: the log ends
            var payload: [payload_bytes]u8 = undefined;
            if (try file.readPositionalAll(io, &payload, offset + header_bytes) < length) break;
            const checksum = std.mem.readInt(u32, header[4..8], .little);
            if (log.check_checksum and std.hash.Crc32.hash(&payload) != checksum) break;
            // The record is returned to the program: it must be the one written.
            var expected_buffer: [payload_bytes]u8 = undefined;
            const expected = payloadOf(index, &expected_buffer);
            if (index >= records or !std.mem.eql(u8, expected, &payload)) {
                return error.ReturnedUnfinishedRecord;
            }
            offset += header_bytes + payload_bytes;
        }
        if (index < log.acknowledged) return error.AcknowledgedRecordsLost;
    }
};

// ---------------------------------------------------------------------------- main

fn usage() error{InvalidArguments} {
    std.debug.print("usage: example-sim_disk [--fixed] [--seeds N]\n", .{});
    return error.InvalidArguments;
}

pub fn main(init: std.process.Init) !void {
    const args = try init.minimal.args.toSlice(init.arena.allocator());
    var seeds: u64 = 10_000;
    var fixed = false;
    var index: usize = 1;
    while (index < args.len) : (index += 1) {
        const arg = args[index];
        if (std.mem.eql(u8, arg, "--fixed")) {
            fixed = true;
        } else if (std.mem.eql(u8, arg, "--seeds") and index + 1 < args.len) {
            index += 1;
            seeds = std.fmt.parseInt(u64, args[index], 10) catch return usage();
            if (seeds == 0) return usage();
        } else return usage();
    }
    var buffer: [8192]u8 = undefined;
    var stdout = File.stdout().writerStreaming(init.io, &buffer);
    const out = &stdout.interface;
    const gpa = init.gpa;

    const start = Io.Clock.awake.now(init.io);
    try out.print("key-value store, {s}:\n", .{
        if (fixed) "syncing the directory after the rename" else "no directory sync",
    });
    const store = try weft.Sim.checkCrashes(gpa, .{
        .seeds = seeds,
        .operations_max = 60,
        .report = out,
    }, Store{ .sync_directory = fixed }, Store.write, Store.recover);
    try summarize(out, store);

    try out.print("append-only log, {s}:\n", .{
        if (fixed) "checking each record's checksum" else "trusting the length",
    });
    const log = try weft.Sim.checkCrashes(gpa, .{
        .seeds = seeds,
        .operations_max = 40,
        .sim = .{ .seed = 0, .tear_writes = true },
        .report = out,
    }, Log{ .check_checksum = fixed }, Log.write, Log.recover);
    try summarize(out, log);
    const elapsed = start.durationTo(Io.Clock.awake.now(init.io));
    try out.print("{d} crash points in {d} ms\n", .{
        store.seeds_run + log.seeds_run,
        elapsed.toMilliseconds(),
    });
    try out.flush();
}

fn summarize(out: *Io.Writer, checked: weft.Sim.Checked) !void {
    switch (checked.outcome) {
        .passed => try out.print("all {d} crash points recovered\n", .{checked.seeds_run}),
        .failed => try out.print("seed {d} fails with {t} after {d} crash points " ++
            "(report above)\n", .{ checked.seed, checked.err.?, checked.seeds_run }),
        .diverged => try out.print("seed {d} diverged: something outside the seed " ++
            "steered the run\n", .{checked.seed}),
    }
}
