//! The process's named lanes: every `Lane`, `Lane.Sharded` and `CpuLane` given
//! `Options.name`, in a fixed table that `weft.Metrics` reads without allocating. A lane lists
//! itself in `init` and leaves in `deinit`; a snapshot copies each listed lane's figures under
//! the table's lock, so no lane can leave (and be freed) while it is read. Nothing here is on
//! a job's path: only `init`, `deinit`, a `CpuLane`'s start and snapshots take the lock.
//!
//! The table is the process's, not a runtime's: a lane is made with an allocator, any
//! runtime's tasks (or plain threads) may call it, and it may outlive a runtime, so every
//! runtime's snapshot lists every named lane. Each runtime's own lanes, "blocking" and "cpu",
//! are read from the runtime itself and never listed; their names are reserved, so that no
//! series appears twice. (Rejected: a list of lanes handed to each runtime. A lane made before
//! the runtime, or shared by two, would have to be handed to each; the table needs nothing.)
//!
//! Thread-safety: every function, from any thread.
const std = @import("std");
const assert = std.debug.assert;
const config = @import("../config.zig");
const Lock = @import("../os/Mutex.zig");
const Lane = @import("Lane.zig");
const Sharded = @import("Sharded.zig");

/// The names of each runtime's own lanes: its blocking lane (fs/BlockingLane.zig) and the CPU
/// lane of `Runtime.compute`. Reserved: no listed lane may take them.
pub const blocking_name = "blocking";
pub const cpu_name = "cpu";
pub const reserved = [_][]const u8{ blocking_name, cpu_name };

/// A lane's name, kept in the lane: at most `config.lane_name_bytes_max` bytes, printable.
pub const Name = struct {
    bytes: [config.lane_name_bytes_max]u8 = undefined,
    len: u8 = 0,

    /// `text`, cut to `config.lane_name_bytes_max` bytes at a character boundary, with control
    /// characters (and, in text that is not UTF-8, every byte past ASCII) replaced by `_`: a
    /// name ends up in a table row and a Prometheus label, where neither belongs.
    pub fn init(text: []const u8) Name {
        const utf8 = std.unicode.utf8ValidateSlice(text);
        var end = @min(text.len, config.lane_name_bytes_max);
        // A character cut in two would be invalid UTF-8: drop its first bytes too.
        if (utf8) while (end > 0 and end < text.len and text[end] & 0xc0 == 0x80) {
            end -= 1;
        };
        var name: Name = .{ .len = @intCast(end) };
        for (name.bytes[0..end], text[0..end]) |*out, byte| {
            const control = byte < 0x20 or byte == 0x7f;
            out.* = if (control or (!utf8 and byte >= 0x80)) '_' else byte;
        }
        assert(name.len <= config.lane_name_bytes_max);
        assert(std.unicode.utf8ValidateSlice(name.slice()));
        return name;
    }

    pub fn slice(name: *const Name) []const u8 {
        return name.bytes[0..name.len];
    }
};

/// A listed lane.
pub const Entry = union(enum) {
    lane: *Lane,
    sharded: *Sharded,

    fn name(entry: Entry) *const Name {
        return switch (entry) {
            .lane => |lane| &lane.name,
            .sharded => |sharded| &sharded.name,
        };
    }

    fn figures(entry: Entry) Lane.Figures {
        return switch (entry) {
            .lane => |lane| lane.figures(),
            .sharded => |sharded| sharded.figures(),
        };
    }
};

/// One listed lane as a snapshot holds it: a copy of its name and figures.
pub const Listed = struct {
    name: Name,
    figures: Lane.Figures,
};

pub const ClaimError = error{
    /// Another live lane has the name, or it is one of `reserved`.
    NameInUse,
    /// `config.lanes_named_max` names are taken already.
    NamesExhausted,
};

/// A place in the table: `claimed` while its lane is being made (the name is taken, nothing
/// is read), `unstarted` for a lane that starts on first use and has not yet (a `CpuLane`:
/// reported with zero figures, as the runtime's own lanes are until their first use),
/// `listed` once the lane can be read.
const Slot = union(enum) {
    free,
    claimed: Name,
    unstarted: Name,
    listed: Entry,

    fn taken(slot: *const Slot) ?*const Name {
        return switch (slot.*) {
            .free => null,
            .claimed, .unstarted => |*name| name,
            .listed => |entry| entry.name(),
        };
    }
};

var lock: Lock = .{};
var slots: [config.lanes_named_max]Slot = @splat(.free);

/// Takes `name` for a lane about to be made, before anything is started, so that a name in
/// use fails `init` with nothing to undo. Returns the place to `publish` the lane in (or to
/// `release`).
pub fn claim(name: *const Name) ClaimError!u32 {
    const text = name.slice();
    assert(text.len > 0);
    for (reserved) |reserved_name| {
        if (std.mem.eql(u8, reserved_name, text)) return error.NameInUse;
    }
    lock.lock();
    defer lock.unlock();
    var free: ?u32 = null;
    for (&slots, 0..) |*slot, index| {
        const taken = slot.taken() orelse {
            if (free == null) free = @intCast(index);
            continue;
        };
        if (std.mem.eql(u8, taken.slice(), text)) return error.NameInUse;
    }
    const index = free orelse return error.NamesExhausted;
    slots[index] = .{ .claimed = name.* };
    return index;
}

/// Lists the name claimed at `index` with zero figures, for a lane that starts on first use
/// (`CpuLane`); `publish` lists the lane once it started.
pub fn listUnstarted(index: u32) void {
    lock.lock();
    defer lock.unlock();
    const name = switch (slots[index]) {
        .claimed => |name| name,
        .free, .unstarted, .listed => unreachable, // claimed, and listed once
    };
    slots[index] = .{ .unstarted = name };
}

/// Lists the lane made under the name claimed at `index` (or listed unstarted there):
/// snapshots read it from now on.
pub fn publish(index: u32, entry: Entry) void {
    lock.lock();
    defer lock.unlock();
    const name = switch (slots[index]) {
        .claimed, .unstarted => |name| name,
        .free, .listed => unreachable, // claimed, and published once
    };
    assert(std.mem.eql(u8, name.slice(), entry.name().slice()));
    slots[index] = .{ .listed = entry };
}

/// Frees the place at `index` (claimed, unstarted or listed); once this returns no snapshot
/// reads it.
pub fn release(index: u32) void {
    lock.lock();
    defer lock.unlock();
    assert(slots[index] != .free);
    slots[index] = .free;
}

/// Copies the name and figures of each listed lane into `out`, in the table's order; returns
/// how many. Takes each lane's lock in turn, under the table's.
pub fn collect(out: []Listed) usize {
    assert(out.len >= config.lanes_named_max);
    lock.lock();
    defer lock.unlock();
    var count: usize = 0;
    for (slots) |slot| {
        out[count] = switch (slot) {
            .listed => |entry| .{ .name = entry.name().*, .figures = entry.figures() },
            .unstarted => |name| .{ .name = name, .figures = .{} },
            .free, .claimed => continue,
        };
        count += 1;
    }
    assert(count <= config.lanes_named_max);
    return count;
}

test "named: a name is cut at a character boundary and control characters replaced" {
    try std.testing.expectEqualStrings("db", Name.init("db").slice());
    try std.testing.expectEqualStrings("a_b", Name.init("a\nb").slice());
    try std.testing.expectEqualStrings("x_y", Name.init("x\xffy").slice()); // not UTF-8
    const long = "0123456789" ** 4;
    const kept = long[0..config.lane_name_bytes_max];
    try std.testing.expectEqualStrings(kept, Name.init(long).slice());
    // 31 ASCII bytes, then a two-byte character that would straddle the cut: left out whole.
    const straddling = "a" ** (config.lane_name_bytes_max - 1) ++ "é";
    const cut = Name.init(straddling);
    try std.testing.expectEqual(@as(u8, config.lane_name_bytes_max - 1), cut.len);
    try std.testing.expectEqualStrings("é", Name.init("é").slice());
}
