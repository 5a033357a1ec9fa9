//! weft.Sim's `std.Io.VTable`. Tasks, futexes, clocks, sleeps and random bytes are simulated
//! (`Sim.zig`); files, directories, stderr and the process's own paths are std.Io.Threaded's
//! entries, called synchronously (the `Io`'s userdata is the Sim's `Threaded`); the network,
//! `netLookup` and child processes are not simulated yet and return an error from their sets
//! (`unsimulated`), listed in docs/SIM.md.
const std = @import("std");
const Io = std.Io;
const net = Io.net;
const Alignment = std.mem.Alignment;
const Threaded = Io.Threaded;
const State = @import("State.zig");

const base = Threaded.io(@constCast(&Threaded.init_single_threaded)).vtable.*;

pub const table: Io.VTable = table: {
    var entries = base;
    for (simulated) |entry| @field(entries, entry[0]) = entry[1];
    for (unsimulated) |entry| @field(entries, entry[0]) = entry[1];
    break :table entries;
};

/// Entries the Sim implements.
const simulated = .{
    .{ "crashHandler", crashHandler },
    .{ "async", async },
    .{ "concurrent", concurrent },
    .{ "await", await },
    .{ "cancel", cancel },
    .{ "groupAsync", groupAsync },
    .{ "groupConcurrent", groupConcurrent },
    .{ "groupAwait", groupAwait },
    .{ "groupCancel", groupCancel },
    .{ "recancel", recancel },
    .{ "swapCancelProtection", swapCancelProtection },
    .{ "checkCancel", checkCancel },
    .{ "futexWait", futexWait },
    .{ "futexWaitUncancelable", futexWaitUncancelable },
    .{ "futexWake", futexWake },
    .{ "now", now },
    .{ "clockResolution", clockResolution },
    .{ "sleep", sleep },
    .{ "random", random },
    .{ "randomSecure", randomSecure },
};

/// Entries that fail until the Sim models them: a real socket or child process would make a
/// run depend on the world outside the seed.
pub const unsimulated = .{
    .{ "netListenIp", netListenIp },
    .{ "netAccept", netAccept },
    .{ "netBindIp", netBindIp },
    .{ "netConnectIp", netConnectIp },
    .{ "netListenUnix", netListenUnix },
    .{ "netConnectUnix", netConnectUnix },
    .{ "netSocketCreatePair", netSocketCreatePair },
    .{ "netSend", netSend },
    .{ "netRead", netRead },
    .{ "netWrite", netWrite },
    .{ "netWriteFile", netWriteFile },
    .{ "netClose", netClose },
    .{ "netShutdown", netShutdown },
    .{ "netInterfaceNameResolve", netInterfaceNameResolve },
    .{ "netInterfaceName", netInterfaceName },
    .{ "netLookup", netLookup },
    .{ "processSpawn", processSpawn },
    .{ "processSpawnPath", processSpawnPath },
    .{ "processReplace", processReplace },
    .{ "processReplacePath", processReplacePath },
};

// ---------------------------------------------------------------------------------------------
// Tasks.

fn crashHandler(userdata: ?*anyopaque) void {
    // The panic printer may call the Io from anywhere: no rule check, nothing may cancel.
    const threaded: *Threaded = @ptrCast(@alignCast(userdata.?));
    const sim: *State = @fieldParentPtr("threaded", threaded);
    if (sim.current) |task| task.protection = .blocked;
}

fn async(
    userdata: ?*anyopaque,
    result: []u8,
    result_alignment: Alignment,
    context: []const u8,
    context_alignment: Alignment,
    start: *const fn (context: *const anyopaque, result: *anyopaque) void,
) ?*Io.AnyFuture {
    const sim = State.fromUserdata(userdata);
    const task = sim.createTask(
        .future,
        context,
        context_alignment,
        result.len,
        result_alignment,
        .{ .future = start },
    ) catch {
        // No unit of concurrency to give: run it now, which the contract allows.
        start(context.ptr, result.ptr);
        return null;
    };
    return @ptrCast(task);
}

fn concurrent(
    userdata: ?*anyopaque,
    result_len: usize,
    result_alignment: Alignment,
    context: []const u8,
    context_alignment: Alignment,
    start: *const fn (context: *const anyopaque, result: *anyopaque) void,
) Io.ConcurrentError!*Io.AnyFuture {
    const sim = State.fromUserdata(userdata);
    const task = sim.createTask(
        .future,
        context,
        context_alignment,
        result_len,
        result_alignment,
        .{ .future = start },
    ) catch return error.ConcurrencyUnavailable;
    return @ptrCast(task);
}

fn await(userdata: ?*anyopaque, any_future: *Io.AnyFuture, result: []u8, _: Alignment) void {
    finishAwait(State.fromUserdata(userdata), @ptrCast(@alignCast(any_future)), result, false);
}

fn cancel(userdata: ?*anyopaque, any_future: *Io.AnyFuture, result: []u8, _: Alignment) void {
    finishAwait(State.fromUserdata(userdata), @ptrCast(@alignCast(any_future)), result, true);
}

fn finishAwait(sim: *State, child: *State.Task, result: []u8, cancel_first: bool) void {
    if (cancel_first) sim.requestCancel(child);
    sim.awaitTask(child);
    @memcpy(result, child.result);
    sim.destroyTask(child);
}

fn groupAsync(
    userdata: ?*anyopaque,
    group: *Io.Group,
    context: []const u8,
    context_alignment: Alignment,
    start: *const fn (context: *const anyopaque) void,
) void {
    const sim = State.fromUserdata(userdata);
    spawnMember(sim, group, context, context_alignment, start) catch start(context.ptr);
}

fn groupConcurrent(
    userdata: ?*anyopaque,
    group: *Io.Group,
    context: []const u8,
    context_alignment: Alignment,
    start: *const fn (context: *const anyopaque) void,
) Io.ConcurrentError!void {
    const sim = State.fromUserdata(userdata);
    spawnMember(sim, group, context, context_alignment, start) catch
        return error.ConcurrencyUnavailable;
}

fn spawnMember(
    sim: *State,
    group: *Io.Group,
    context: []const u8,
    context_alignment: Alignment,
    start: *const fn (context: *const anyopaque) void,
) error{OutOfMemory}!void {
    const group_start: State.Task.Start = .{ .group = start };
    const task =
        try sim.createTask(.group_member, context, context_alignment, 0, .@"1", group_start);
    sim.addGroupMember(group, task) catch |err| {
        sim.forgetUnstarted(task);
        return err;
    };
}

fn groupAwait(userdata: ?*anyopaque, group: *Io.Group, token: *anyopaque) Io.Cancelable!void {
    _ = token;
    return State.fromUserdata(userdata).awaitGroup(group, false);
}

fn groupCancel(userdata: ?*anyopaque, group: *Io.Group, token: *anyopaque) void {
    _ = token;
    State.fromUserdata(userdata).awaitGroup(group, true) catch unreachable; // waits uncancelably
}

fn recancel(userdata: ?*anyopaque) void {
    const task = State.fromUserdata(userdata).currentTask();
    std.debug.assert(task.cancel == .acknowledged); // recancel only after error.Canceled
    task.cancel = .requested;
}

fn swapCancelProtection(userdata: ?*anyopaque, new: Io.CancelProtection) Io.CancelProtection {
    const task = State.fromUserdata(userdata).currentTask();
    const old = task.protection;
    task.protection = new;
    return old;
}

fn checkCancel(userdata: ?*anyopaque) Io.Cancelable!void {
    const sim = State.fromUserdata(userdata);
    try sim.checkCancel();
    sim.maybePreempt();
}

// ---------------------------------------------------------------------------------------------
// Futexes, time and random bytes.

fn futexWait(
    userdata: ?*anyopaque,
    ptr: *const u32,
    expected: u32,
    timeout: Io.Timeout,
) Io.Cancelable!void {
    const sim = State.fromUserdata(userdata);
    return sim.futexWait(ptr, expected, true, sim.deadlineOf(timeout));
}

fn futexWaitUncancelable(userdata: ?*anyopaque, ptr: *const u32, expected: u32) void {
    State.fromUserdata(userdata).futexWait(ptr, expected, false, null) catch unreachable;
}

fn futexWake(userdata: ?*anyopaque, ptr: *const u32, max_waiters: u32) void {
    State.fromUserdata(userdata).futexWake(ptr, max_waiters);
}

fn now(userdata: ?*anyopaque, clock: Io.Clock) Io.Timestamp {
    return .{ .nanoseconds = State.fromUserdata(userdata).readClock(clock) };
}

fn clockResolution(userdata: ?*anyopaque, clock: Io.Clock) Io.Clock.ResolutionError!Io.Duration {
    _ = clock;
    const sim = State.fromUserdata(userdata);
    return .fromNanoseconds(sim.options.tick_ns);
}

/// Cancelation point; `.none` and past deadlines return at once.
fn sleep(userdata: ?*anyopaque, timeout: Io.Timeout) Io.Cancelable!void {
    const sim = State.fromUserdata(userdata);
    try sim.checkCancel();
    const deadline = sim.deadlineOf(timeout) orelse return;
    switch (sim.park(.sleep, true, deadline)) {
        .timeout => {},
        .canceled => return sim.checkCancel(),
        .woken => unreachable, // nothing wakes a sleeper but its timer or a cancel
    }
}

fn random(userdata: ?*anyopaque, buffer: []u8) void {
    State.fromUserdata(userdata).fillRandom(buffer);
}

/// From the seed, like `random`: reproducible, and therefore not secure.
fn randomSecure(userdata: ?*anyopaque, buffer: []u8) Io.RandomSecureError!void {
    State.fromUserdata(userdata).fillRandom(buffer);
}

// ---------------------------------------------------------------------------------------------
// Not simulated yet: each fails as the system would with no network or no process support.

fn netListenIp(
    userdata: ?*anyopaque,
    address: *const net.IpAddress,
    options: net.IpAddress.ListenOptions,
) net.IpAddress.ListenError!net.Socket {
    _ = .{ State.fromUserdata(userdata), address, options };
    return error.NetworkDown;
}

fn netAccept(
    userdata: ?*anyopaque,
    server: net.Socket.Handle,
    options: net.Server.AcceptOptions,
) net.Server.AcceptError!net.Socket {
    _ = .{ State.fromUserdata(userdata), server, options };
    return error.NetworkDown;
}

fn netBindIp(
    userdata: ?*anyopaque,
    address: *const net.IpAddress,
    options: net.IpAddress.BindOptions,
) net.IpAddress.BindError!net.Socket {
    _ = .{ State.fromUserdata(userdata), address, options };
    return error.NetworkDown;
}

fn netConnectIp(
    userdata: ?*anyopaque,
    address: *const net.IpAddress,
    options: net.IpAddress.ConnectOptions,
) net.IpAddress.ConnectError!net.Socket {
    _ = .{ State.fromUserdata(userdata), address, options };
    return error.NetworkDown;
}

fn netListenUnix(
    userdata: ?*anyopaque,
    address: *const net.UnixAddress,
    options: net.UnixAddress.ListenOptions,
) net.UnixAddress.ListenError!net.Socket.Handle {
    _ = .{ State.fromUserdata(userdata), address, options };
    return error.NetworkDown;
}

fn netConnectUnix(
    userdata: ?*anyopaque,
    address: *const net.UnixAddress,
) net.UnixAddress.ConnectError!net.Socket.Handle {
    _ = .{ State.fromUserdata(userdata), address };
    return error.NetworkDown;
}

fn netSocketCreatePair(
    userdata: ?*anyopaque,
    options: net.Socket.CreatePairOptions,
) net.Socket.CreatePairError![2]net.Socket {
    _ = .{ State.fromUserdata(userdata), options };
    return error.OperationUnsupported;
}

fn netSend(
    userdata: ?*anyopaque,
    handle: net.Socket.Handle,
    messages: []net.OutgoingMessage,
    flags: net.SendFlags,
) struct { ?net.Socket.SendError, usize } {
    _ = .{ State.fromUserdata(userdata), handle, messages, flags };
    return .{ error.NetworkDown, 0 };
}

fn netRead(
    userdata: ?*anyopaque,
    handle: net.Socket.Handle,
    data: [][]u8,
) net.Stream.Reader.Error!usize {
    _ = .{ State.fromUserdata(userdata), handle, data };
    return error.NetworkDown;
}

fn netWrite(
    userdata: ?*anyopaque,
    handle: net.Socket.Handle,
    header: []const u8,
    data: []const []const u8,
    splat: usize,
) net.Stream.Writer.Error!usize {
    _ = .{ State.fromUserdata(userdata), handle, header, data, splat };
    return error.NetworkDown;
}

fn netWriteFile(
    userdata: ?*anyopaque,
    handle: net.Socket.Handle,
    header: []const u8,
    reader: *Io.File.Reader,
    limit: Io.Limit,
) net.Stream.Writer.WriteFileError!usize {
    _ = .{ State.fromUserdata(userdata), handle, header, reader, limit };
    return error.NetworkDown;
}

/// No socket can exist, so nothing to close.
fn netClose(userdata: ?*anyopaque, handles: []const net.Socket.Handle) void {
    _ = .{ State.fromUserdata(userdata), handles };
}

fn netShutdown(
    userdata: ?*anyopaque,
    handle: net.Socket.Handle,
    how: net.ShutdownHow,
) net.ShutdownError!void {
    _ = .{ State.fromUserdata(userdata), handle, how };
    return error.NetworkDown;
}

fn netInterfaceNameResolve(
    userdata: ?*anyopaque,
    name: *const net.Interface.Name,
) net.Interface.Name.ResolveError!net.Interface {
    _ = .{ State.fromUserdata(userdata), name };
    return error.InterfaceNotFound;
}

fn netInterfaceName(
    userdata: ?*anyopaque,
    interface: net.Interface,
) net.Interface.NameError!net.Interface.Name {
    _ = .{ State.fromUserdata(userdata), interface };
    return error.InterfaceNotFound;
}

fn netLookup(
    userdata: ?*anyopaque,
    host_name: net.HostName,
    results: *Io.Queue(net.HostName.LookupResult),
    options: net.HostName.LookupOptions,
) net.HostName.LookupError!void {
    _ = .{ State.fromUserdata(userdata), host_name, results, options };
    return error.UnknownHostName;
}

fn processSpawn(
    userdata: ?*anyopaque,
    options: std.process.SpawnOptions,
) std.process.SpawnError!std.process.Child {
    _ = .{ State.fromUserdata(userdata), options };
    return error.OperationUnsupported;
}

fn processSpawnPath(
    userdata: ?*anyopaque,
    dir: Io.Dir,
    options: std.process.SpawnOptions,
) std.process.SpawnError!std.process.Child {
    _ = .{ State.fromUserdata(userdata), dir, options };
    return error.OperationUnsupported;
}

fn processReplace(
    userdata: ?*anyopaque,
    options: std.process.ReplaceOptions,
) std.process.ReplaceError {
    _ = .{ State.fromUserdata(userdata), options };
    return error.OperationUnsupported;
}

fn processReplacePath(
    userdata: ?*anyopaque,
    dir: Io.Dir,
    options: std.process.ReplaceOptions,
) std.process.ReplaceError {
    _ = .{ State.fromUserdata(userdata), dir, options };
    return error.OperationUnsupported;
}
