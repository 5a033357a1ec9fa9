//! Names of code addresses, `function (file:line:column)`, from the process's own debug
//! information: for weft's reports (stall reports, task dumps, weft.Sim's failures).
//!
//! Looked up through a `std.debug.SelfInfo` of weft's own, not std.debug's global one. The
//! first lookup in a module loads its debug information (libc's separate debug file took
//! about 1.5 s in a Debug build), and a SelfInfo holds its lock meanwhile; on std's instance
//! every other thread's stack trace waits for it: a stalled task's next allocation through
//! `std.testing.allocator` (which records a trace) waited 1.2-2.4 s for the watchdog's report
//! of it (pg.zig's suite on weft). The cost: what both load is loaded twice.
const std = @import("std");
const builtin = @import("builtin");
const Io = std.Io;
const Mutex = @import("Mutex.zig");

const SelfInfo = std.debug.SelfInfo;

/// Writes `addresses` (return addresses, innermost first) a line each: `    0x... in name`,
/// the address being the call's (the instruction before the return address).
pub fn writeReturnAddresses(w: *Io.Writer, addresses: []const usize) Io.Writer.Error!void {
    var text_buffer: [symbol_text_bytes_max]u8 = undefined;
    for (addresses) |address| {
        const call = address -| 1;
        const text = symbol_cache.name(call, &text_buffer);
        try w.print("    0x{x} in {s}\n", .{ call, if (text.len == 0) "???" else text });
    }
}

const symbol_cache_len = 256;
/// The longest name written for an address (`function (file:line:column)`, cut there).
pub const symbol_text_bytes_max = 256;

/// Names looked up once per process, direct-mapped by address (a collision looks the name up
/// again). Under `lock`, which also serialises the lookups themselves (`self_info` is one per
/// process).
const SymbolCache = struct {
    lock: Mutex = .{},
    addresses: [symbol_cache_len]usize = @splat(0),
    lens: [symbol_cache_len]u16 = @splat(0),
    texts: [symbol_cache_len][symbol_text_bytes_max]u8 = undefined,
    /// The memory of one lookup's names and file paths: no allocation per lookup.
    scratch: [16 * 1024]u8 = undefined,
    /// weft's own view of the process's debug information (see this file's comment).
    self_info: SelfInfo = if (SelfInfo == void) {} else .init,

    /// `function (file:line:column)` for `address`, in `buffer`; empty when unknown.
    fn name(cache: *SymbolCache, address: usize, buffer: *[symbol_text_bytes_max]u8) []const u8 {
        if (!std.options.allow_stack_tracing or SelfInfo == void) return "";
        const index = (address *% 0x9E3779B97F4A7C15) >> (64 - @ctz(@as(u64, symbol_cache_len)));
        cache.lock.lock();
        defer cache.lock.unlock();
        if (cache.addresses[index] != address) {
            cache.lens[index] = @intCast(cache.lookUp(address, &cache.texts[index]).len);
            cache.addresses[index] = address;
        }
        const len = cache.lens[index];
        @memcpy(buffer[0..len], cache.texts[index][0..len]);
        return buffer[0..len];
    }

    /// Under `lock`.
    fn lookUp(cache: *SymbolCache, address: usize, out: *[symbol_text_bytes_max]u8) []const u8 {
        const debug_info = &cache.self_info;
        var fixed: std.heap.FixedBufferAllocator = .init(&cache.scratch);
        const gpa = fixed.allocator();
        var found: std.ArrayList(std.debug.Symbol) = .empty;
        const io = std.Options.debug_io;
        debug_info.getSymbols(io, gpa, gpa, address, false, &found) catch return "";
        if (found.items.len == 0) return "";
        const symbol = found.items[0];
        var writer: Io.Writer = .fixed(out);
        writer.writeAll(symbol.name orelse "???") catch return writer.buffered();
        if (symbol.source_location) |location| {
            const file = location.file_name;
            writer.print(" ({s}:{d}:{d})", .{ file, location.line, location.column }) catch {};
        }
        return writer.buffered();
    }
};

var symbol_cache: SymbolCache = .{};

/// For tests: holds the lock every lookup takes, as the first load of a module's debug
/// information holds it for seconds; lookups wait until `releaseForTesting`.
pub fn holdForTesting() void {
    comptime std.debug.assert(builtin.is_test);
    symbol_cache.lock.lock();
}

pub fn releaseForTesting() void {
    comptime std.debug.assert(builtin.is_test);
    symbol_cache.lock.unlock();
}
