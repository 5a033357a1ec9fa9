//! Sockets: the syscalls that never wait (socket, bind, listen, options, names, shutdown)
//! with their errno triage, and the conversions between std's addresses and the kernel's.
//! The waiting operations (accept, connect, send, receive) go through the loop; see
//! `std_io/net.zig`, and `receiveOnLoop` here, which the resolver's UDP and TCP exchanges
//! share.
//!
//! Every socket weft creates is close-on-exec (a spawned child never inherits it). Whether it
//! is non-blocking depends on who uses it besides weft:
//! - Sockets handed out for the program's use (accepted, connected once connected, bound
//!   datagram sockets, pairs) are blocking, as std.Io.Threaded's are: code that uses the
//!   descriptor itself, such as a C library given it (OpenSSL's `SSL_set_fd`), makes blocking
//!   calls and expects them to wait, not to fail with `EAGAIN`. weft's own operations on them
//!   never block an executor all the same: on epoll, receives and sends add `MSG_DONTWAIT`
//!   (`loop/nonblocking.zig`) and reads and writes `RWF_NOWAIT` (`loop/backend/epoll.zig`),
//!   and io_uring waits for a blocking socket as for any other; sendfile, which has no
//!   per-call flag, makes the socket non-blocking for its call (`sendfile.zig`).
//! - Listeners stay non-blocking: `accept4` has no per-call non-blocking flag, and a
//!   listener's readiness goes stale often (the connection taken by another worker thread or
//!   forked process sharing it), after which a blocking accept would hold the executor until
//!   the next connection. C code rarely accepts on a socket weft listens on; a program that
//!   does can clear `O_NONBLOCK` itself.
//! - A socket while it connects is non-blocking (`connect` must say `EINPROGRESS` for epoll to
//!   wait, a Unix connect to a full backlog would block, and a thread weft does not run waits
//!   in poll(2) with a deadline), and is made blocking once connected (`setNonBlocking`).
//! - weft's internal sockets (the resolver's, the interface ioctl's) stay non-blocking: no
//!   other code sees them.
const std = @import("std");
const builtin = @import("builtin");
const linux = if (builtin.os.tag == .linux) std.os.linux else struct {};
const posix = std.posix;
const net = std.Io.net;
const assert = std.debug.assert;
const os = @import("../os/linux.zig");
const io_wait = @import("../sched/io_wait.zig");
const Op = @import("../loop/Completion.zig").Op;
const Threaded = std.Io.Threaded;

pub const fd_t = os.fd_t;

/// Storage for an IPv4 or IPv6 `sockaddr` (std's own layout, so its converters apply).
pub const IpStorage = Threaded.PosixAddress;
pub const ipToPosix = Threaded.addressToPosix;
pub const ipFromPosix = Threaded.addressFromPosix;

pub const UnixStorage = extern union {
    any: posix.sockaddr,
    un: posix.sockaddr.un,
};

/// Flags of a socket weft hands out to the program blocking, as std.Io.Threaded's: accepted
/// sockets (`accept4`'s flags), bound datagram sockets and socket pairs. Code that uses the
/// descriptor itself can make blocking calls on it; weft's own operations add their per-call
/// non-blocking flags (see the file doc).
pub const flags_blocking: u32 = linux.SOCK.CLOEXEC;

/// Flags of a socket on which weft makes a call that has no per-call non-blocking flag:
/// listeners (`accept4`), sockets while they connect (`connect`; made blocking once
/// connected, by `setNonBlocking`), and weft's internal sockets, which nobody else sees.
pub const flags_nonblocking: u32 = linux.SOCK.CLOEXEC | linux.SOCK.NONBLOCK;

pub fn family(address: *const net.IpAddress) u32 {
    return switch (address.*) {
        .ip4 => linux.AF.INET,
        .ip6 => linux.AF.INET6,
    };
}

/// Fills `storage` for `address`; returns the length to pass to the kernel. The path must
/// fit (std's `UnixAddress.init` checks `max_len`); it is NUL-terminated when room remains.
pub fn unixToPosix(address: *const net.UnixAddress, storage: *UnixStorage) posix.socklen_t {
    assert(address.path.len <= storage.un.path.len);
    storage.un.family = linux.AF.UNIX;
    @memcpy(storage.un.path[0..address.path.len], address.path);
    var path_len = address.path.len;
    if (path_len < storage.un.path.len) {
        storage.un.path[path_len] = 0;
        path_len += 1;
    }
    return @intCast(@offsetOf(posix.sockaddr.un, "path") + path_len);
}

/// One `recvmsg` into `buffer` as a loop operation (`sched/io_wait.zig`): parks only the
/// calling fiber, is a cancelation point, and waits no longer than `deadline_ns`. The sender's
/// address goes to `from` when one is given (a datagram socket). Returns what the loop
/// reports: the bytes received (0 at the end of a stream), or `-errno` for the caller's triage.
pub fn receiveOnLoop(
    fd: fd_t,
    buffer: []u8,
    from: ?*IpStorage,
    deadline_ns: ?u64,
) io_wait.Error!i32 {
    assert(buffer.len > 0);
    var iovec: posix.iovec = .{ .base = buffer.ptr, .len = buffer.len };
    var msg: linux.msghdr = .{
        .name = if (from) |storage| &storage.any else null,
        .namelen = if (from != null) @sizeOf(IpStorage) else 0,
        .iov = (&iovec)[0..1],
        .iovlen = 1,
        .control = null,
        .controllen = 0,
        .flags = 0,
    };
    const op: Op = .{ .recvmsg = .{ .fd = fd, .msg = &msg, .flags = 0 } };
    const result = try io_wait.perform(op, deadline_ns);
    assert(result < 0 or @as(usize, @intCast(result)) <= buffer.len);
    return result;
}

pub const OpenError = error{
    AddressFamilyUnsupported,
    ProtocolUnsupportedBySystem,
    ProtocolUnsupportedByAddressFamily,
    SocketModeUnsupported,
    ProcessFdQuotaExceeded,
    SystemFdQuotaExceeded,
    SystemResources,
    Unexpected,
};

pub fn modeToPosix(mode: net.Socket.Mode) u32 {
    return switch (mode) {
        .stream => linux.SOCK.STREAM,
        .dgram => linux.SOCK.DGRAM,
        .seqpacket => linux.SOCK.SEQPACKET,
        .raw => linux.SOCK.RAW,
        .rdm => linux.SOCK.RDM,
    };
}

/// A new close-on-exec socket; `flags` is `flags_blocking` or `flags_nonblocking`.
pub fn open(
    domain: u32,
    mode: net.Socket.Mode,
    protocol: ?net.Protocol,
    flags: u32,
) OpenError!fd_t {
    assert(flags == flags_blocking or flags == flags_nonblocking);
    const protocol_number: u32 = if (protocol) |p| @intFromEnum(p) else 0;
    while (true) {
        const rc = linux.socket(domain, modeToPosix(mode) | flags, protocol_number);
        switch (os.errno(rc)) {
            .SUCCESS => return @intCast(rc),
            .INTR => continue,
            .AFNOSUPPORT => return error.AddressFamilyUnsupported,
            .INVAL => return error.ProtocolUnsupportedBySystem,
            .MFILE => return error.ProcessFdQuotaExceeded,
            .NFILE => return error.SystemFdQuotaExceeded,
            .NOBUFS, .NOMEM => return error.SystemResources,
            .PROTONOSUPPORT => return error.ProtocolUnsupportedByAddressFamily,
            .PROTOTYPE => return error.SocketModeUnsupported,
            .ACCES => return error.Unexpected, // creating this kind of socket is not permitted
            else => |e| return os.unexpectedErrno(e),
        }
    }
}

pub const BindError = error{
    AddressInUse,
    AddressUnavailable,
    AddressFamilyUnsupported,
    SystemResources,
    AccessDenied,
    PermissionDenied,
    SymLinkLoop,
    FileNotFound,
    NotDir,
    ReadOnlyFileSystem,
    Unexpected,
};

/// `bind`; the file-system errors only occur for Unix sockets.
pub fn bind(fd: fd_t, addr: *const posix.sockaddr, addr_len: posix.socklen_t) BindError!void {
    while (true) switch (os.errno(linux.bind(fd, addr, addr_len))) {
        .SUCCESS => return,
        .INTR => continue,
        .ADDRINUSE => return error.AddressInUse,
        .ADDRNOTAVAIL => return error.AddressUnavailable,
        .AFNOSUPPORT => return error.AddressFamilyUnsupported,
        .NOMEM, .NOBUFS => return error.SystemResources,
        .ACCES => return error.AccessDenied,
        .PERM => return error.PermissionDenied,
        .LOOP => return error.SymLinkLoop,
        .NOENT => return error.FileNotFound,
        .NOTDIR => return error.NotDir,
        .ROFS => return error.ReadOnlyFileSystem,
        // A closed descriptor, a bad address or length, a bound socket: bugs of the caller.
        .BADF, .INVAL, .NOTSOCK, .FAULT, .NAMETOOLONG => |e| return os.errnoBug(e),
        else => |e| return os.unexpectedErrno(e),
    };
}

pub fn listen(fd: fd_t, backlog: u31) error{ AddressInUse, Unexpected }!void {
    while (true) switch (os.errno(linux.listen(fd, backlog))) {
        .SUCCESS => return,
        .INTR => continue,
        .ADDRINUSE => return error.AddressInUse,
        .BADF, .NOTSOCK, .OPNOTSUPP => |e| return os.errnoBug(e), // not our listening socket
        else => |e| return os.unexpectedErrno(e),
    };
}

/// The address `fd` is bound to (the kernel's choice of port, after binding port 0).
pub fn localAddress(fd: fd_t) error{ SystemResources, Unexpected }!net.IpAddress {
    var storage: IpStorage = undefined;
    var len: posix.socklen_t = @sizeOf(IpStorage);
    while (true) switch (os.errno(linux.getsockname(fd, &storage.any, &len))) {
        .SUCCESS => return ipFromPosix(&storage),
        .INTR => continue,
        .NOBUFS => return error.SystemResources,
        .BADF, .FAULT, .INVAL, .NOTSOCK => |e| return os.errnoBug(e), // a bug of the caller
        else => |e| return os.unexpectedErrno(e),
    };
}

/// Sets an integer socket option.
pub fn setOption(fd: fd_t, level: i32, name: u32, value: u32) error{Unexpected}!void {
    const bytes = std.mem.asBytes(&value);
    while (true) {
        const rc = linux.setsockopt(fd, level, name, bytes, bytes.len);
        switch (os.errno(rc)) {
            .SUCCESS => return,
            .INTR => continue,
            // Options and sockets of weft's own.
            .BADF, .NOTSOCK, .INVAL, .FAULT, .NOPROTOOPT => |e| return os.errnoBug(e),
            else => |e| return os.unexpectedErrno(e),
        }
    }
}

pub fn shutdown(fd: fd_t, how: net.ShutdownHow) net.ShutdownError!void {
    const posix_how: i32 = switch (how) {
        .recv => linux.SHUT.RD,
        .send => linux.SHUT.WR,
        .both => linux.SHUT.RDWR,
    };
    while (true) switch (os.errno(linux.shutdown(fd, posix_how))) {
        .SUCCESS => return,
        .INTR => continue,
        .NOTCONN => return error.SocketUnconnected,
        .NOBUFS => return error.SystemResources,
        .BADF, .NOTSOCK, .INVAL => |e| return os.errnoBug(e), // a closed socket: the caller's bug
        else => |e| return os.unexpectedErrno(e),
    };
}

pub const PairError = error{
    OperationUnsupported,
    AccessDenied,
    AddressFamilyUnsupported,
    ProtocolUnsupportedBySystem,
    ProcessFdQuotaExceeded,
    SystemFdQuotaExceeded,
    SystemResources,
    ProtocolUnsupportedByAddressFamily,
    SocketModeUnsupported,
    Unexpected,
};

/// `socketpair`, both ends close-on-exec and blocking (`flags_blocking`: a pair is handed out).
/// Linux makes pairs only of Unix sockets: IPv4 and IPv6 families report
/// `OperationUnsupported` (EOPNOTSUPP), which std's error set names exactly.
pub fn pair(domain: u32, mode: net.Socket.Mode, protocol: ?net.Protocol) PairError![2]fd_t {
    const protocol_number: u32 = if (protocol) |p| @intFromEnum(p) else 0;
    var fds: [2]fd_t = undefined;
    while (true) {
        const flags = modeToPosix(mode) | flags_blocking;
        const rc = linux.socketpair(domain, flags, protocol_number, &fds);
        switch (os.errno(rc)) {
            .SUCCESS => return fds,
            .INTR => continue,
            .OPNOTSUPP => return error.OperationUnsupported,
            .ACCES => return error.AccessDenied,
            .AFNOSUPPORT => return error.AddressFamilyUnsupported,
            .INVAL => return error.ProtocolUnsupportedBySystem,
            .MFILE => return error.ProcessFdQuotaExceeded,
            .NFILE => return error.SystemFdQuotaExceeded,
            .NOBUFS, .NOMEM => return error.SystemResources,
            .PROTONOSUPPORT => return error.ProtocolUnsupportedByAddressFamily,
            .PROTOTYPE => return error.SocketModeUnsupported,
            .FAULT => |e| return os.errnoBug(e), // no pointer is passed
            else => |e| return os.unexpectedErrno(e),
        }
    }
}

/// Sets or clears `O_NONBLOCK` on `fd`'s open file description: one `ioctl(FIONBIO)`, which
/// changes that flag alone (an `F_GETFL`/`F_SETFL` pair would take two syscalls and could
/// undo another thread's change of another flag in between). Other descriptors of the same
/// file, in this process or another, see the change too.
pub fn setNonBlocking(fd: fd_t, nonblocking: bool) error{Unexpected}!void {
    var value: c_int = @intFromBool(nonblocking);
    while (true) switch (os.errno(linux.ioctl(fd, linux.T.FIONBIO, @intFromPtr(&value)))) {
        .SUCCESS => return,
        .INTR => continue,
        .BADF => |e| return os.errnoBug(e), // a closed descriptor: the caller's bug
        .FAULT => unreachable, // `value` is on our stack
        else => |e| return os.unexpectedErrno(e),
    };
}

/// Whether `fd`'s open file description has `O_NONBLOCK` (one `fcntl(F_GETFL)`).
pub fn isNonBlocking(fd: fd_t) error{Unexpected}!bool {
    while (true) {
        const rc = linux.fcntl(fd, linux.F.GETFL, 0);
        switch (os.errno(rc)) {
            .SUCCESS => {
                const flags: linux.O = @bitCast(@as(u32, @truncate(rc)));
                return flags.NONBLOCK;
            },
            .INTR => continue,
            .BADF => |e| return os.errnoBug(e), // a closed descriptor: the caller's bug
            else => |e| return os.unexpectedErrno(e),
        }
    }
}
