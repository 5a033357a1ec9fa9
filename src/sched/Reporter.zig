//! Where the watchdog's reports go: a thread of their own that names a stalled stack's frames
//! and logs the report, so that the watchdog never waits for either.
//!
//! The first frame named loads the process's debug information (seconds in a Debug build, with
//! libc's separate debug file: os/symbols.zig), and a log line waits for stderr, for as long as
//! whoever reads it lets it (a full pipe: forever). A watchdog that did both itself made no look
//! meanwhile: no timer of a held executor fired, no I/O of one was delivered, no work was
//! handed over, no other stall was found, at the very moment a stall made them matter. Now the
//! watchdog queues what it found (the words, the return addresses; a schedule trace line
//! whole) and goes back to looking.
//!
//! Reports are logged in the order they were queued: a stall's end after its start. The
//! thread starts with the first report (a thread start takes no descriptor: os/thread.zig);
//! where it cannot start, the watchdog writes its reports itself, as before. A queue the
//! thread has not caught up with drops the newest report and says how many it dropped in the
//! next one it logs: the watchdog never waits for room.
const Reporter = @This();

const std = @import("std");
const builtin = @import("builtin");
const assert = std.debug.assert;
const config = @import("../config.zig");
const os = @import("../os/linux.zig");
const os_thread = @import("../os/thread.zig");
const symbols = @import("../os/symbols.zig");
const Mutex = @import("../os/Mutex.zig");

const log = std.log.scoped(.weft);

/// Reports queued at most: a stall and its end per executor for a few looks.
pub const queue_len = 16;
/// The words of one report, before its frames; a schedule trace line whole.
pub const text_bytes_max = 4096;
/// Frames of one report at most.
pub const frames_max = 32;
/// Room for one report as logged, frames named.
pub const report_bytes_max = 16 * 1024;
/// A named frame's line at most: `    0x` and 16 digits, ` in `, the name and a newline.
const frame_line_bytes_max = 4 + 2 + 16 + 4 + symbols.symbol_text_bytes_max + 1;

comptime {
    assert(config.task_name_bytes_max + 512 <= text_bytes_max); // a stall's words, its name
    assert(text_bytes_max + frames_max * frame_line_bytes_max <= report_bytes_max);
}

/// One report: its words, then the frames named a line each, then "(more frames)" if the walk
/// stopped short of the outermost one. Or a line of the schedule trace (`kind = .trace`).
pub const Entry = struct {
    kind: Kind = .report,
    text: [text_bytes_max]u8 = undefined,
    text_len: u16 = 0,
    /// Return addresses, innermost first.
    addresses: [frames_max]usize = undefined,
    addresses_len: u8 = 0,
    more_frames: bool = false,

    /// The words, written with `writer`; cut at `text_bytes_max`.
    pub fn writer(entry: *Entry) std.Io.Writer {
        return .fixed(&entry.text);
    }

    /// Keeps what `text_writer` (from `writer`) wrote.
    pub fn setText(entry: *Entry, text_writer: *const std.Io.Writer) void {
        entry.text_len = @intCast(text_writer.end);
    }

    pub const Kind = enum {
        /// Logged (`std.log`, scope `.weft`, level warn), frames named, kept for the tests.
        report,
        /// Written to stderr as it is, a line of its own, neither logged nor kept.
        trace,
    };

    pub fn setFrames(entry: *Entry, addresses: []const usize, more_frames: bool) void {
        const len = @min(addresses.len, frames_max);
        @memcpy(entry.addresses[0..len], addresses[0..len]);
        entry.addresses_len = @intCast(len);
        entry.more_frames = more_frames or len < addresses.len;
    }
};

/// Guards the queue and `stopping` (never held while a report is written).
lock: Mutex = .{},
queue: [queue_len]Entry = undefined,
/// The oldest queued report's index in `queue`, and how many are queued.
head: u32 = 0,
len: u32 = 0,
/// Reports dropped since the last one logged: the queue was full.
dropped: u32 = 0,
stopping: bool = false,
/// Futex word: changed by every `push` and by `stop`; the thread waits on it when idle.
signal: std.atomic.Value(u32) = .init(0),
/// The pusher's alone (`push` and `stop` run on the watchdog's thread, then its stopper's).
thread: ?std.Thread = null,
/// Set once the thread failed to start: reports are written by their pusher from then on.
start_failed: bool = false,
/// Test builds keep the first reports for the tests (`keptReport`).
kept_lock: Mutex = .{},
kept: if (builtin.is_test) [kept_max]Kept else void = undefined,
/// Reports logged so far.
logged: u32 = 0,

/// Reports kept for the tests (`keptReport`).
pub const kept_max = 4;

const Kept = struct { bytes: [report_bytes_max]u8, len: usize };

/// Queues `entry` to be logged, in the order pushed; never waits for the thread. One pusher
/// at a time (the watchdog's thread).
pub fn push(reporter: *Reporter, entry: *const Entry) void {
    if (reporter.thread == null and !reporter.start_failed) reporter.startThread();
    if (reporter.start_failed) return reporter.write(entry, 0);
    reporter.lock.lock();
    defer reporter.lock.unlock();
    assert(!reporter.stopping);
    if (reporter.len == queue_len) {
        reporter.dropped += 1;
        return;
    }
    reporter.queue[(reporter.head + reporter.len) % queue_len] = entry.*;
    reporter.len += 1;
    _ = reporter.signal.fetchAdd(1, .release);
    os.futexWake(&reporter.signal, 1);
}

fn startThread(reporter: *Reporter) void {
    assert(reporter.thread == null);
    reporter.thread = os_thread.spawn(
        "watchdog reporter",
        "config.watchdog_thread_stack_size_bytes (a bug, please report it)",
        config.watchdog_thread_stack_size_bytes,
        null,
        run,
        .{reporter},
    ) catch {
        // Logged with the sizes by `spawn`; the reports still come, from their pusher.
        reporter.start_failed = true;
        return;
    };
}

/// Logs every report still queued, then stops the thread. Reports pushed after this are
/// refused (an assertion): the watchdog has stopped.
pub fn stop(reporter: *Reporter) void {
    const thread = reporter.thread orelse return;
    {
        reporter.lock.lock();
        defer reporter.lock.unlock();
        reporter.stopping = true;
    }
    _ = reporter.signal.fetchAdd(1, .release);
    os.futexWake(&reporter.signal, 1);
    thread.join();
    reporter.thread = null;
    assert(reporter.len == 0);
}

fn run(reporter: *Reporter) void {
    // On this thread's stack: a report is written outside the lock.
    var entry: Entry = undefined;
    while (true) {
        const signal = reporter.signal.load(.acquire);
        const dropped: u32, const taken: bool = taken: {
            reporter.lock.lock();
            defer reporter.lock.unlock();
            if (reporter.len == 0) {
                if (reporter.stopping) return;
                break :taken .{ 0, false };
            }
            entry = reporter.queue[reporter.head];
            reporter.head = (reporter.head + 1) % queue_len;
            reporter.len -= 1;
            const dropped = reporter.dropped;
            reporter.dropped = 0;
            break :taken .{ dropped, true };
        };
        if (taken) {
            reporter.write(&entry, dropped);
        } else {
            // A push or a stop since the load above changed the word: no wait then.
            os.futexWait(&reporter.signal, signal, null);
        }
    }
}

/// Names the frames and logs the report; on the reporter's thread (or the pusher's, where it
/// has none). `dropped`: reports dropped just before this one.
fn write(reporter: *Reporter, entry: *const Entry, dropped: u32) void {
    if (entry.kind == .trace) return writeTrace(entry.text[0..entry.text_len], dropped);
    var buffer: [report_bytes_max]u8 = undefined;
    var writer: std.Io.Writer = .fixed(&buffer);
    // A report too long for the buffer is cut.
    writer.writeAll(entry.text[0..entry.text_len]) catch {};
    symbols.writeReturnAddresses(&writer, entry.addresses[0..entry.addresses_len]) catch {};
    if (entry.more_frames) writer.writeAll("    (more frames)\n") catch {};
    if (dropped > 0) {
        writer.print("({d} report{s} before this one dropped: the reporter was behind)", .{
            dropped, if (dropped == 1) "" else "s",
        }) catch {};
    }
    const report = std.mem.trimEnd(u8, writer.buffered(), "\n");
    log.warn("{s}", .{report});
    reporter.keep(report);
}

fn writeTrace(line: []const u8, dropped: u32) void {
    const stderr = std.debug.lockStderr(&.{});
    defer std.debug.unlockStderr();
    const out = &stderr.file_writer.interface;
    if (dropped > 0) {
        out.print("weft: {d} report{s} or trace line{s} dropped: the reporter was behind\n", .{
            dropped, if (dropped == 1) "" else "s", if (dropped == 1) "" else "s",
        }) catch {};
    }
    out.writeAll(line) catch {};
}

fn keep(reporter: *Reporter, report: []const u8) void {
    reporter.kept_lock.lock();
    defer reporter.kept_lock.unlock();
    if (builtin.is_test and reporter.logged < kept_max) {
        const kept = &reporter.kept[reporter.logged];
        @memcpy(kept.bytes[0..report.len], report);
        kept.len = report.len;
    }
    reporter.logged += 1;
}

/// For tests: how many reports were logged so far, and a copy of report `index` (from 0,
/// below `kept_max`) into `buffer` if there was one.
pub fn keptReport(
    reporter: *Reporter,
    index: u32,
    buffer: *[report_bytes_max]u8,
) struct { []u8, u32 } {
    comptime assert(builtin.is_test);
    assert(index < kept_max);
    reporter.kept_lock.lock();
    defer reporter.kept_lock.unlock();
    if (index >= reporter.logged) return .{ buffer[0..0], reporter.logged };
    const kept = &reporter.kept[index];
    @memcpy(buffer[0..kept.len], kept.bytes[0..kept.len]);
    return .{ buffer[0..kept.len], reporter.logged };
}

test "Reporter: reports are logged in the order pushed, by a thread of their own" {
    const testing = std.testing;
    const reporter = try testing.allocator.create(Reporter);
    defer testing.allocator.destroy(reporter);
    reporter.* = .{};
    // The lookups wait, as a first load of the debug information makes them: pushes don't.
    symbols.holdForTesting();
    var held = true;
    defer if (held) symbols.releaseForTesting();
    var entry: Entry = .{};
    for (0..queue_len + 3) |index| {
        var text_writer = entry.writer();
        try text_writer.print("report {d}\n", .{index});
        entry.setText(&text_writer);
        entry.setFrames(&.{@returnAddress()}, false);
        reporter.push(&entry);
    }
    // Nothing was logged while the lookups waited: the thread took the first report (or
    // none yet), the queue took `queue_len`, and it was full for the rest.
    var buffer: [report_bytes_max]u8 = undefined;
    try testing.expectEqual(@as(u32, 0), reporter.keptReport(0, &buffer)[1]);
    symbols.releaseForTesting();
    held = false;
    reporter.stop();
    const logged = reporter.keptReport(0, &buffer)[1];
    try testing.expect(logged == queue_len or logged == queue_len + 1);
    // The first report logged after the drops says how many there were.
    const dropped = logged == queue_len;
    const noted = reporter.keptReport(if (dropped) 0 else 1, &buffer)[0];
    const note = if (dropped) "(3 reports before" else "(2 reports before";
    try testing.expect(std.mem.indexOf(u8, noted, note) != null);
    for (0..kept_max) |index| {
        const text = reporter.keptReport(@intCast(index), &buffer)[0];
        var expected_buffer: [32]u8 = undefined;
        const expected = try std.fmt.bufPrint(&expected_buffer, "report {d}\n", .{index});
        try testing.expect(std.mem.startsWith(u8, text, expected));
    }
}
