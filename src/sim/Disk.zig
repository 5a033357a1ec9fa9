//! weft.Sim's simulated disk: a file system in memory behind the file and directory entries of
//! a Sim made with `Options.files = .simulated` (disk_entries.zig calls it), and the
//! durability model a crash applies.
//!
//! ## Durability
//!
//! Every node keeps two states: what the program sees (volatile) and what survives a crash
//! (durable). Writes, truncations, creations, renames, links and unlinks change the volatile
//! state only. `sync` of a file copies its bytes (so its length too) to the durable state;
//! `sync` of a directory copies its entries, so that a name created, renamed, linked or
//! removed in it survives. `crash` replaces every volatile state by the durable one and drops
//! the nodes no durable entry reaches from the root. This is the strictest POSIX reading: a
//! new file's name is lost unless its directory was synced after it was made, a rename is
//! undone unless the directories were synced, and a file renamed over an old one holds, after
//! a crash, whatever bytes were synced into it, none if it was never synced. Real file systems
//! keep more (ext4's `data=ordered` flushes a file's data before a rename over another file
//! commits); a program that passes here passes there.
//!
//! ## What is modelled
//!
//! Directories, regular files, symbolic links and hard links; sizes and sparse files (a write
//! past the end fills the gap with zeros); positional and streaming reads and writes; lengths;
//! renames over an existing name; unlinking an open file (its handle keeps working, its bytes
//! go once the last handle closes); permissions as stat reports them (the process's umask,
//! 0o022, applied at creation). The program runs as root: permissions are recorded, not
//! enforced. Errors are Linux's for the same call (`Error`).
//!
//! Handles are numbers from `handle_base` up, far above any descriptor the process has, so
//! that the Sim's entries tell a simulated file from stdin, stdout or stderr, which stay real.
//! A handle used after it was closed, or after a crash, is the program's bug: it panics with
//! the rule (Linux would answer EBADF, which std.Io.Threaded treats as unreachable too).
const Disk = @This();

const std = @import("std");
const assert = std.debug.assert;
const Allocator = std.mem.Allocator;
const Io = std.Io;
const sim_handles = @import("handles.zig");
/// std's handle type (`std.posix.fd_t`), which the disk's numbers are: `Handle` is what one
/// names.
const OsHandle = sim_handles.Handle;

gpa: Allocator,
root: *Node,
/// Every node, the root first: crashes walk them.
nodes: std.ArrayList(*Node) = .empty,
/// Open handles by number (`handle_base + index`); null where closed.
handles: std.ArrayList(?Handle) = .empty,
/// Closed slots of `handles`, reused last freed first.
handles_free: std.ArrayList(u32) = .empty,
inode_next: u64 = root_inode + 1,
/// Virtual time (ns since the epoch) for the timestamps of the next operation: set by the Sim.
now_ns: i64 = 0,
/// Crashes so far.
crashes: u32 = 0,
faults: Faults = .{},
/// The faults' dice: a stream of the Sim's seed.
fault_prng: std.Random.DefaultPrng = .init(0),
/// Bytes the files hold now (what the program sees), against `Faults.capacity_bytes`.
bytes_used: u64 = 0,

/// The first handle number: far above the process's own descriptors.
pub const handle_base: u32 = 0x4000_0000;
/// Handles open at once, at most.
pub const handles_max = 1 << 20;
/// Linux's limits: one name, a whole path, symbolic links followed in one resolution.
pub const name_bytes_max = 255;
pub const path_bytes_max = 4095;
pub const symlinks_followed_max = 40;
/// Applied to the permissions of every node created, as the process's umask.
pub const umask: u32 = 0o022;
pub const block_size_bytes = 4096;
/// What a torn write tears at: the unit a disk writes whole.
pub const sector_bytes = 512;
const root_inode = 1;

/// Every error the disk's operations return, each where Linux returns its errno.
pub const Error = error{
    /// ENOENT: a component of the path, or the file, does not exist; or the path is empty.
    FileNotFound,
    /// ENOTDIR: a component used as a directory is not one.
    NotDir,
    /// EISDIR: a directory where a file is needed (writing, unlinking, renaming a file over it).
    IsDir,
    /// EEXIST: the name exists (exclusive create, mkdir, symlink, link).
    PathAlreadyExists,
    /// ENOTEMPTY: removing, or renaming over, a directory that has entries.
    DirNotEmpty,
    /// ENAMETOOLONG: a name over 255 bytes, or a path over 4095.
    NameTooLong,
    /// A path with a NUL byte (std refuses it before any call).
    BadPathName,
    /// ELOOP: more than 40 symbolic links in one resolution, or a symbolic link at the end
    /// of a path that must not follow one.
    SymLinkLoop,
    /// EINVAL: renaming a directory into itself; `readLink` of what is not a link.
    InvalidArgument,
    /// EBUSY: removing or renaming the root, or `.`.
    FileBusy,
    /// EPERM: a hard link to a directory.
    PermissionDenied,
    /// EBADF on a handle opened without read access.
    NotOpenForReading,
    /// EBADF on a handle opened without write access.
    NotOpenForWriting,
    /// EFBIG: a length or offset past what a file can hold.
    FileTooBig,
    /// EMFILE: `handles_max` handles are open.
    ProcessFdQuotaExceeded,
    /// ENOSPC: past `Faults.capacity_bytes`.
    NoSpaceLeft,
    OutOfMemory,
};

/// Faults beyond errors (errors themselves are `Sim.FileFaults`, decided before the disk is
/// called): what a disk does wrong without saying so.
pub const Faults = struct {
    /// Each sector a file's sync makes durable has one bit flipped with this chance; the sync
    /// succeeds and the program reads its own bytes until a crash, after which it reads the
    /// flipped ones: found only by a checksum.
    corrupt_sector_percent: u7 = 0,
    /// A write is lost with this chance: it reports every byte written and changes nothing
    /// (a write the disk misdirected).
    lost_write_percent: u7 = 0,
    /// The bytes the files may hold in all; a write or `setLength` past it fails with
    /// `NoSpaceLeft`. Null: as much as memory allows.
    capacity_bytes: ?u64 = null,

    pub fn valid(faults: Faults) bool {
        return faults.corrupt_sector_percent <= 100 and faults.lost_write_percent <= 100;
    }
};

pub const Kind = enum { file, directory, sym_link };

/// Names in a directory, in the order they were made (listing order is deterministic).
const Entries = std.StringArrayHashMapUnmanaged(*Node);

pub const Node = struct {
    inode: u64,
    kind: Kind,
    /// Permission bits (the umask applied).
    mode: u32,
    /// What the program sees: a file's bytes or a link's target; a directory's entries.
    data: std.ArrayList(u8) = .empty,
    entries: Entries = .empty,
    /// A directory's parent (`..`); the root is its own.
    parent: ?*Node = null,
    /// Entries that name this node (a directory: the one in its parent).
    links: u32 = 0,
    /// Handles open on it.
    opens: u32 = 0,
    /// What survives a crash: the data, and the entries, as of the last sync.
    durable_data: std.ArrayList(u8) = .empty,
    durable_entries: Entries = .empty,
    /// Durable entries (of any directory) that name this node.
    durable_links: u32 = 0,
    mtime_ns: i96 = 0,
    ctime_ns: i96 = 0,
    /// Where it sits in `Disk.nodes`.
    index: usize = 0,
    /// flock(2)-style locks: handles holding it shared, and whether one holds it exclusive.
    locks_shared: u32 = 0,
    locked_exclusive: bool = false,
    /// Changes at every unlock: a futex word for the tasks waiting to lock (disk_entries.zig).
    lock_generation: u32 = 0,
};

/// An open file or directory.
pub const Handle = struct {
    node: *Node,
    read: bool,
    write: bool,
    append: bool,
    /// The streaming position.
    position: u64 = 0,
    /// The lock this handle holds on its node (flock(2): one per open file description).
    lock: Io.File.Lock = .none,
};

pub fn init(gpa: Allocator) error{OutOfMemory}!Disk {
    var disk: Disk = .{ .gpa = gpa, .root = undefined };
    const root = try gpa.create(Node);
    errdefer gpa.destroy(root);
    root.* = .{ .inode = root_inode, .kind = .directory, .mode = 0o755, .links = 1 };
    root.parent = root;
    root.durable_links = 1; // the file system itself names it
    try disk.nodes.append(gpa, root);
    disk.root = root;
    return disk;
}

pub fn deinit(disk: *Disk) void {
    for (disk.nodes.items) |node| disk.freeNode(node);
    disk.nodes.deinit(disk.gpa);
    disk.handles.deinit(disk.gpa);
    disk.handles_free.deinit(disk.gpa);
    disk.* = undefined;
}

/// Whether `handle` is one of this disk's numbers (open or not): the Sim's entries send the
/// others to the real file system.
pub fn isSimulated(handle: OsHandle) bool {
    const value = sim_handles.number(handle) orelse return false;
    return value >= handle_base;
}

// ------------------------------------------------------------------------------ path lookup

/// Where a path leads: the directory holding its last name, that name, and the node it names
/// if any. A path that ends at a directory itself (`.`, `/`, `a/..`) has `name` "." and
/// `node` that directory.
pub const Resolved = struct {
    parent: *Node,
    name: []const u8,
    node: ?*Node,
    /// The path ended with `/`: it must name a directory.
    trailing_slash: bool,
};

/// Resolves `path` from `start` (the root if absolute), following symbolic links on the way,
/// and at the end too if `follow_last`.
pub fn resolve(disk: *Disk, start: *Node, path: []const u8, follow_last: bool) Error!Resolved {
    var budget: u32 = symlinks_followed_max;
    return disk.resolveBudget(start, path, if (follow_last) .follow else .slash_follows, &budget);
}

/// What happens to a symbolic link at the end of a path.
const Final = enum {
    follow,
    /// Not followed, unless the path ends with a slash (POSIX: it then names a directory).
    slash_follows,
    /// Never followed: mkdir(2) and rmdir(2) on Linux take the link itself.
    never,
};

fn resolveBudget(
    disk: *Disk,
    start: *Node,
    path: []const u8,
    final: Final,
    budget: *u32,
) Error!Resolved {
    assert(start.kind == .directory);
    if (path.len == 0) return error.FileNotFound;
    if (path.len > path_bytes_max) return error.NameTooLong;
    if (std.mem.indexOfScalar(u8, path, 0) != null) return error.BadPathName;
    var directory = if (path[0] == '/') disk.root else start;
    var rest = path;
    // Bounded by the path's length: each turn consumes one component.
    while (true) {
        rest = std.mem.trimStart(u8, rest, "/");
        const end = std.mem.indexOfScalar(u8, rest, '/') orelse rest.len;
        const name = rest[0..end];
        rest = rest[end..];
        const last = std.mem.trimStart(u8, rest, "/").len == 0;
        if (name.len > name_bytes_max) return error.NameTooLong;
        if (name.len == 0 or std.mem.eql(u8, name, ".") or std.mem.eql(u8, name, "..")) {
            if (std.mem.eql(u8, name, "..")) directory = directory.parent.?;
            if (last) return .{
                .parent = directory,
                .name = ".",
                .node = directory,
                .trailing_slash = rest.len > 0,
            };
            continue;
        }
        var node = directory.entries.get(name);
        const follow = !last or switch (final) {
            .follow => true,
            .slash_follows => rest.len > 0,
            .never => false,
        };
        if (node) |found| if (found.kind == .sym_link and follow) {
            if (budget.* == 0) return error.SymLinkLoop;
            budget.* -= 1;
            const target = try disk.resolveBudget(directory, found.data.items, .follow, budget);
            node = target.node orelse if (last) null else return error.FileNotFound;
            if (last and node == null) { // a dangling link: create its target
                var dangling = target;
                dangling.trailing_slash = target.trailing_slash or rest.len > 0;
                return dangling;
            }
        };
        if (last) return .{
            .parent = directory,
            .name = name,
            .node = node,
            .trailing_slash = rest.len > 0,
        };
        const next = node orelse return error.FileNotFound;
        if (next.kind != .directory) return error.NotDir;
        directory = next;
    }
}

// ------------------------------------------------------------------------------ nodes

fn createNode(disk: *Disk, kind: Kind, mode: u32) Error!*Node {
    try disk.nodes.ensureUnusedCapacity(disk.gpa, 1);
    const node = try disk.gpa.create(Node);
    node.* = .{
        .inode = disk.inode_next,
        .kind = kind,
        .mode = mode & ~umask & 0o7777,
        .mtime_ns = disk.now_ns,
        .ctime_ns = disk.now_ns,
        .index = disk.nodes.items.len,
    };
    disk.inode_next += 1;
    disk.nodes.appendAssumeCapacity(node);
    return node;
}

fn freeNode(disk: *Disk, node: *Node) void {
    if (node.kind == .file) disk.bytes_used -= node.data.items.len;
    for (node.entries.keys()) |name| disk.gpa.free(name);
    node.entries.deinit(disk.gpa);
    for (node.durable_entries.keys()) |name| disk.gpa.free(name);
    node.durable_entries.deinit(disk.gpa);
    node.data.deinit(disk.gpa);
    node.durable_data.deinit(disk.gpa);
    disk.gpa.destroy(node);
}

/// Frees `node` once nothing names it, volatile or durable, and no handle has it open.
fn release(disk: *Disk, node: *Node) void {
    if (node == disk.root) return;
    if (node.links > 0 or node.opens > 0 or node.durable_links > 0) return;
    assert(node.entries.count() == 0); // removed, so empty (rmdir checks)
    assert(disk.nodes.items[node.index] == node);
    _ = disk.nodes.swapRemove(node.index);
    if (node.index < disk.nodes.items.len) disk.nodes.items[node.index].index = node.index;
    // Its durable entries named their nodes: those names go with it.
    for (node.durable_entries.values()) |child| {
        assert(child.durable_links > 0);
        child.durable_links -= 1;
    }
    const children = node.durable_entries.values();
    const owned = disk.gpa.dupe(*Node, children) catch null;
    defer if (owned) |list| disk.gpa.free(list);
    disk.freeNode(node);
    // A child left unnamed by this is freed in turn (bounded by the tree's size).
    if (owned) |list| for (list) |child| disk.release(child);
}

/// Adds `name → node` to `directory`'s entries (a new hard link when `node` is named
/// already: `linkNode` checks none of the rules `hardLink` does).
pub fn linkNode(disk: *Disk, directory: *Node, name: []const u8, node: *Node) Error!void {
    return disk.link(directory, name, node);
}

fn link(disk: *Disk, directory: *Node, name: []const u8, node: *Node) Error!void {
    assert(directory.kind == .directory);
    assert(!directory.entries.contains(name));
    const owned = try disk.gpa.dupe(u8, name);
    errdefer disk.gpa.free(owned);
    try directory.entries.put(disk.gpa, owned, node);
    node.links += 1;
    if (node.kind == .directory) node.parent = directory;
    directory.mtime_ns = disk.now_ns;
}

/// Removes `name` from `directory`'s entries; the node is freed if nothing else holds it.
fn unlink(disk: *Disk, directory: *Node, name: []const u8) void {
    const removed = directory.entries.fetchOrderedRemove(name).?;
    disk.gpa.free(removed.key);
    const node = removed.value;
    assert(node.links > 0);
    node.links -= 1;
    node.ctime_ns = disk.now_ns;
    directory.mtime_ns = disk.now_ns;
    disk.release(node);
}

fn isAncestor(ancestor: *const Node, node: *const Node) bool {
    var at = node;
    // Bounded by the tree's depth: parents lead to the root, which is its own parent.
    while (true) {
        if (at == ancestor) return true;
        const parent = at.parent.?;
        if (parent == at) return false;
        at = parent;
    }
}

// ------------------------------------------------------------------------------ operations

pub const OpenOptions = struct {
    read: bool = true,
    write: bool = false,
    append: bool = false,
    /// Create the file if the name is free (with `mode`); fail if it exists when `exclusive`.
    create: bool = false,
    exclusive: bool = false,
    truncate: bool = false,
    /// A directory may be opened (read-only); else `error.IsDir`.
    allow_directory: bool = true,
    /// Only a directory may be opened; else `error.NotDir`.
    directory_only: bool = false,
    follow_symlinks: bool = true,
    mode: u32 = 0o666,
};

/// Opens (or creates) `path` from `directory`: a handle number.
pub fn open(disk: *Disk, directory: *Node, path: []const u8, options: OpenOptions) Error!OsHandle {
    assert(options.read or options.write);
    const follow = options.follow_symlinks and !(options.create and options.exclusive);
    const resolved = try disk.resolve(directory, path, follow);
    // O_CREAT with a trailing slash: Linux refuses before it looks at what the name holds.
    if (options.create and resolved.trailing_slash) return error.IsDir;
    const node = resolved.node orelse blk: {
        if (!options.create) return error.FileNotFound;
        if (resolved.trailing_slash) return error.IsDir;
        try disk.reserveHandle();
        const created = try disk.createNode(.file, options.mode);
        errdefer disk.release(created);
        try disk.link(resolved.parent, resolved.name, created);
        break :blk created;
    };
    if (resolved.node != null) {
        if (options.create and options.exclusive) return error.PathAlreadyExists;
        if (resolved.trailing_slash and node.kind != .directory) return error.NotDir;
        switch (node.kind) {
            .directory => {
                if (options.write) return error.IsDir;
                if (!options.allow_directory) return error.IsDir;
            },
            .sym_link => return error.SymLinkLoop, // O_NOFOLLOW on a link
            .file => if (options.directory_only) return error.NotDir,
        }
        if (options.truncate and options.write and node.kind == .file) {
            disk.resizeData(node, 0) catch unreachable; // shrinking allocates nothing
            node.mtime_ns = disk.now_ns;
        }
    }
    return disk.openHandle(.{
        .node = node,
        .read = options.read,
        .write = options.write,
        .append = options.append,
    });
}

/// Makes sure one more handle can be opened (before creating what it would open).
fn reserveHandle(disk: *Disk) Error!void {
    if (disk.handles_free.items.len > 0) return;
    if (disk.handles.items.len >= handles_max) return error.ProcessFdQuotaExceeded;
    try disk.handles.ensureUnusedCapacity(disk.gpa, 1);
    // Room to free every slot, so that `close` never allocates.
    try disk.handles_free.ensureTotalCapacity(disk.gpa, disk.handles.items.len + 1);
}

fn openHandle(disk: *Disk, handle: Handle) Error!OsHandle {
    try disk.reserveHandle();
    const index: u32 = disk.handles_free.pop() orelse blk: {
        disk.handles.appendAssumeCapacity(null);
        break :blk @intCast(disk.handles.items.len - 1);
    };
    assert(disk.handles.items[index] == null);
    disk.handles.items[index] = handle;
    handle.node.opens += 1;
    return sim_handles.fromNumber(handle_base + index);
}

/// The open handle `number`; panics if it is not open (closed, or from before a crash).
pub fn handleOf(disk: *Disk, number: OsHandle) *Handle {
    if (!isSimulated(number)) {
        std.debug.panic("weft.Sim: handle {any} is not a file of the simulated disk (the " ++
            "cwd, Dir.cwd(), cannot be closed or used as a file)", .{number});
    }
    const index: usize = sim_handles.number(number).? - handle_base;
    if (index < disk.handles.items.len) {
        if (disk.handles.items[index]) |*handle| return handle;
    }
    std.debug.panic("weft.Sim: file handle {any} is not open on the simulated disk (closed, " ++
        "or opened before a crash: a crash closes every handle)", .{number});
}

/// Takes (or converts to) `lock` for the handle `number` if no other handle's lock conflicts,
/// as flock(2) with LOCK_NB: a shared lock conflicts with another handle's exclusive one, an
/// exclusive lock with any other handle's lock. `.none` unlocks. Returns whether it holds it.
pub fn tryLock(disk: *Disk, number: OsHandle, lock: Io.File.Lock) bool {
    const handle = disk.handleOf(number);
    const node = handle.node;
    const others_shared = node.locks_shared - @intFromBool(handle.lock == .shared);
    const others_exclusive = node.locked_exclusive and handle.lock != .exclusive;
    const free = switch (lock) {
        .none => true,
        .shared => !others_exclusive,
        .exclusive => !others_exclusive and others_shared == 0,
    };
    if (!free) return false;
    disk.setLock(handle, lock);
    return true;
}

/// Moves `handle`'s lock to `lock`, keeping its node's counts; an unlock (or a downgrade)
/// changes `lock_generation`, for waiters to look again.
fn setLock(disk: *Disk, handle: *Handle, lock: Io.File.Lock) void {
    _ = disk;
    const node = handle.node;
    const released = handle.lock == .exclusive or (handle.lock == .shared and lock == .none);
    switch (handle.lock) {
        .none => {},
        .shared => node.locks_shared -= 1,
        .exclusive => node.locked_exclusive = false,
    }
    switch (lock) {
        .none => {},
        .shared => node.locks_shared += 1,
        .exclusive => {
            assert(!node.locked_exclusive);
            assert(node.locks_shared == 0);
            node.locked_exclusive = true;
        },
    }
    handle.lock = lock;
    if (released) node.lock_generation +%= 1;
}

/// Handles open now.
pub fn handlesOpen(disk: *const Disk) usize {
    return disk.handles.items.len - disk.handles_free.items.len;
}

pub fn close(disk: *Disk, number: OsHandle) void {
    const handle = disk.handleOf(number);
    const node = handle.node;
    disk.setLock(handle, .none); // flock(2): the lock goes with the last close
    const index: u32 = sim_handles.number(number).? - handle_base;
    disk.handles.items[index] = null;
    disk.handles_free.appendAssumeCapacity(index); // reserved as the slot was made
    assert(node.opens > 0);
    node.opens -= 1;
    disk.release(node);
}

pub fn createDir(disk: *Disk, directory: *Node, path: []const u8, mode: u32) Error!void {
    var budget: u32 = symlinks_followed_max;
    const resolved = try disk.resolveBudget(directory, path, .never, &budget);
    if (resolved.node != null) return error.PathAlreadyExists;
    const node = try disk.createNode(.directory, mode);
    errdefer disk.release(node);
    try disk.link(resolved.parent, resolved.name, node);
}

pub fn deleteFile(disk: *Disk, directory: *Node, path: []const u8) Error!void {
    var budget: u32 = symlinks_followed_max;
    const resolved = try disk.resolveBudget(directory, path, .never, &budget);
    const node = resolved.node orelse return error.FileNotFound;
    if (node.kind == .directory) return error.IsDir;
    if (resolved.trailing_slash) return error.NotDir;
    disk.unlink(resolved.parent, resolved.name);
}

pub fn deleteDir(disk: *Disk, directory: *Node, path: []const u8) Error!void {
    var budget: u32 = symlinks_followed_max;
    const resolved = try disk.resolveBudget(directory, path, .never, &budget);
    const node = resolved.node orelse return error.FileNotFound;
    if (node.kind != .directory) return error.NotDir;
    if (std.mem.eql(u8, resolved.name, ".")) {
        return if (node == disk.root) error.FileBusy else error.InvalidArgument;
    }
    if (node.entries.count() > 0) return error.DirNotEmpty;
    disk.unlink(resolved.parent, resolved.name);
}

/// Renames `old_path` to `new_path`, replacing what `new_path` named (rename(2)).
pub fn rename(
    disk: *Disk,
    old_directory: *Node,
    old_path: []const u8,
    new_directory: *Node,
    new_path: []const u8,
) Error!void {
    const old = try disk.resolve(old_directory, old_path, false);
    const node = old.node orelse return error.FileNotFound;
    const new = try disk.resolve(new_directory, new_path, false);
    if (std.mem.eql(u8, old.name, ".") or std.mem.eql(u8, new.name, ".")) return error.FileBusy;
    if (node.kind != .directory and (old.trailing_slash or new.trailing_slash)) {
        return error.NotDir;
    }
    if (new.node) |existing| {
        if (existing == node) return; // the same file: nothing to do
        switch (node.kind) {
            .directory => {
                if (existing.kind != .directory) return error.NotDir;
                if (existing.entries.count() > 0) return error.DirNotEmpty;
            },
            .file, .sym_link => if (existing.kind == .directory) return error.IsDir,
        }
    }
    if (node.kind == .directory and isAncestor(node, new.parent)) return error.InvalidArgument;
    // Room for the new name first, so that a failure changes nothing.
    const owned = try disk.gpa.dupe(u8, new.name);
    errdefer disk.gpa.free(owned);
    try new.parent.entries.ensureUnusedCapacity(disk.gpa, 1);
    // The old name goes before the replaced one: unlinking may free nodes, not `node`.
    node.links += 1; // held across the move
    disk.unlink(old.parent, old.name);
    if (new.node != null) disk.unlink(new.parent, new.name);
    new.parent.entries.putAssumeCapacityNoClobber(owned, node);
    if (node.kind == .directory) node.parent = new.parent;
    node.ctime_ns = disk.now_ns;
    new.parent.mtime_ns = disk.now_ns;
}

pub fn symLink(disk: *Disk, directory: *Node, target: []const u8, path: []const u8) Error!void {
    if (target.len == 0) return error.FileNotFound;
    if (target.len > path_bytes_max) return error.NameTooLong;
    const resolved = try disk.resolve(directory, path, false);
    if (resolved.node != null) return error.PathAlreadyExists;
    const node = try disk.createNode(.sym_link, 0o777);
    errdefer disk.release(node);
    node.mode = 0o777; // a link's permissions are always all, whatever the umask
    try node.data.appendSlice(disk.gpa, target);
    try disk.link(resolved.parent, resolved.name, node);
}

/// The target of the symbolic link `path`, into `buffer` (cut to its length, as readlink(2)).
pub fn readLink(disk: *Disk, directory: *Node, path: []const u8, buffer: []u8) Error!usize {
    const resolved = try disk.resolve(directory, path, false);
    const node = resolved.node orelse return error.FileNotFound;
    if (resolved.trailing_slash and node.kind == .file) return error.NotDir;
    if (node.kind != .sym_link) return error.InvalidArgument;
    const length = @min(buffer.len, node.data.items.len);
    @memcpy(buffer[0..length], node.data.items[0..length]);
    return length;
}

/// A second name, `new_path`, for the file `old_path` names (link(2)).
pub fn hardLink(
    disk: *Disk,
    old_directory: *Node,
    old_path: []const u8,
    new_directory: *Node,
    new_path: []const u8,
    follow_symlinks: bool,
) Error!void {
    const old = try disk.resolve(old_directory, old_path, follow_symlinks);
    const node = old.node orelse return error.FileNotFound;
    if (node.kind == .directory) return error.PermissionDenied;
    const new = try disk.resolve(new_directory, new_path, false);
    if (new.node != null) return error.PathAlreadyExists;
    try disk.link(new.parent, new.name, node);
    node.ctime_ns = disk.now_ns;
}

// ------------------------------------------------------------------------------ file data

/// Reads at `offset` into `buffers` in turn; fewer bytes than asked only at the end of the
/// file (0 there).
pub fn read(disk: *Disk, number: OsHandle, buffers: []const []u8, offset: u64) Error!usize {
    const handle = disk.handleOf(number);
    if (!handle.read) return error.NotOpenForReading;
    const node = handle.node;
    if (node.kind == .directory) return error.IsDir;
    var at = offset;
    var total: usize = 0;
    for (buffers) |buffer| {
        if (at >= node.data.items.len) break;
        const start: usize = @intCast(at);
        const length = @min(buffer.len, node.data.items.len - start);
        @memcpy(buffer[0..length], node.data.items[start..][0..length]);
        total += length;
        at += length;
    }
    return total;
}

/// Writes `bytes` at `offset` (at the end for a handle opened to append), filling a gap past
/// the end with zeros.
pub fn write(disk: *Disk, number: OsHandle, bytes: []const u8, offset: u64) Error!usize {
    const handle = disk.handleOf(number);
    if (!handle.write) return error.NotOpenForWriting;
    const node = handle.node;
    assert(node.kind == .file); // directories open read-only
    const data = &node.data;
    const start: u64 = if (handle.append) data.items.len else offset;
    const end = std.math.add(u64, start, bytes.len) catch return error.FileTooBig;
    if (end > std.math.maxInt(i64)) return error.FileTooBig;
    const end_bytes = std.math.cast(usize, end) orelse return error.FileTooBig;
    if (disk.fault(disk.faults.lost_write_percent)) return bytes.len; // misdirected
    if (end_bytes > data.items.len) try disk.resizeData(node, end_bytes);
    @memcpy(data.items[@intCast(start)..end_bytes], bytes);
    node.mtime_ns = disk.now_ns;
    return bytes.len;
}

/// Sets the length of `node`'s bytes, zeros past the old end, within `Faults.capacity_bytes`.
fn resizeData(disk: *Disk, node: *Node, length: usize) Error!void {
    assert(node.kind == .file);
    const old_len = node.data.items.len;
    if (length > old_len) {
        const used = disk.bytes_used + (length - old_len);
        if (disk.faults.capacity_bytes) |capacity| if (used > capacity) return error.NoSpaceLeft;
    }
    try node.data.resize(disk.gpa, length);
    if (length > old_len) @memset(node.data.items[old_len..], 0);
    disk.bytes_used = disk.bytes_used + length - old_len;
}

/// Whether a fault of `percent` chance happens now.
fn fault(disk: *Disk, percent: u7) bool {
    if (percent == 0) return false;
    return disk.fault_prng.random().uintLessThan(u8, 100) < percent;
}

pub fn setLength(disk: *Disk, number: OsHandle, length: u64) Error!void {
    const handle = disk.handleOf(number);
    if (!handle.write) return error.NotOpenForWriting;
    const node = handle.node;
    if (length > std.math.maxInt(i64)) return error.FileTooBig;
    const length_bytes = std.math.cast(usize, length) orelse return error.FileTooBig;
    try disk.resizeData(node, length_bytes);
    node.mtime_ns = disk.now_ns;
}

/// Makes the node behind `number` durable: a file's bytes, or a directory's entries; a file's
/// durable sectors then take `disk_faults`' flips.
pub fn sync(disk: *Disk, number: OsHandle) Error!void {
    const node = disk.handleOf(number).node;
    try disk.makeDurable(node);
    if (node.kind == .file) disk.corruptSectors(node.durable_data.items);
}

/// A file's (or link's) bytes, or a directory's entries, as they are now become what a crash
/// keeps of `node`.
fn makeDurable(disk: *Disk, node: *Node) Error!void {
    switch (node.kind) {
        .file, .sym_link => {
            node.durable_data.clearRetainingCapacity();
            try node.durable_data.appendSlice(disk.gpa, node.data.items);
        },
        .directory => try disk.syncEntries(node),
    }
}

/// `Faults.corrupt_sector_percent`: flips one bit in some sectors of bytes made durable.
fn corruptSectors(disk: *Disk, bytes: []u8) void {
    if (disk.faults.corrupt_sector_percent == 0) return;
    var start: usize = 0;
    // Bounded by the bytes' length.
    while (start < bytes.len) : (start += sector_bytes) {
        if (!disk.fault(disk.faults.corrupt_sector_percent)) continue;
        const sector = bytes[start..@min(bytes.len, start + sector_bytes)];
        const random = disk.fault_prng.random();
        const at = random.uintLessThan(usize, sector.len);
        sector[at] ^= @as(u8, 1) << random.int(u3);
    }
}

fn syncEntries(disk: *Disk, directory: *Node) Error!void {
    var fresh: Entries = .empty;
    errdefer {
        for (fresh.keys()) |name| disk.gpa.free(name);
        fresh.deinit(disk.gpa);
    }
    try fresh.ensureTotalCapacity(disk.gpa, directory.entries.count());
    for (directory.entries.keys(), directory.entries.values()) |name, node| {
        const owned = try disk.gpa.dupe(u8, name);
        fresh.putAssumeCapacityNoClobber(owned, node);
    }
    // No failure past this point.
    for (fresh.values()) |node| node.durable_links += 1;
    var old = directory.durable_entries;
    directory.durable_entries = fresh;
    for (old.keys(), old.values()) |name, node| {
        disk.gpa.free(name);
        assert(node.durable_links > 0);
        node.durable_links -= 1;
    }
    const dropped = old.values();
    for (dropped) |node| disk.release(node);
    old.deinit(disk.gpa);
}

pub fn stat(disk: *Disk, node: *const Node) Io.File.Stat {
    _ = disk;
    return .{
        .inode = @intCast(node.inode), // i64 on Windows, far from full
        // Saturated to the OS's type (16 bits on macOS), as a file system there would cap it.
        .nlink = std.math.lossyCast(@FieldType(Io.File.Stat, "nlink"), switch (node.kind) {
            // A directory: its name, its `.`, and each subdirectory's `..`.
            .directory => blk: {
                var count: u32 = 2;
                for (node.entries.values()) |child| count += @intFromBool(child.kind == .directory);
                break :blk count;
            },
            .file, .sym_link => node.links,
        }),
        .size = switch (node.kind) {
            .directory => block_size_bytes,
            .file, .sym_link => node.data.items.len,
        },
        .permissions = @enumFromInt(node.mode),
        .kind = switch (node.kind) {
            .file => .file,
            .directory => .directory,
            .sym_link => .sym_link,
        },
        .atime = null,
        .mtime = .{ .nanoseconds = node.mtime_ns },
        .ctime = .{ .nanoseconds = node.ctime_ns },
        .block_size = block_size_bytes,
    };
}

/// Lists what would survive a crash now: each durable name from the root, with its kind and
/// durable size, one per line, depth first in the order the names were made.
pub fn writeDurable(disk: *const Disk, writer: *Io.Writer) Io.Writer.Error!void {
    var path: [path_bytes_max + 1]u8 = undefined;
    path[0] = '/';
    try writer.writeAll("/ directory\n");
    try writeDurableUnder(disk.root, &path, 1, writer, 0);
}

fn writeDurableUnder(
    directory: *const Node,
    path: *[path_bytes_max + 1]u8,
    path_len: usize,
    writer: *Io.Writer,
    depth: u32,
) Io.Writer.Error!void {
    // A directory renamed with only its new parent synced is durably named twice: bound the
    // walk by depth so that such a cycle cannot loop.
    if (depth > path_bytes_max / 2) return;
    for (directory.durable_entries.keys(), directory.durable_entries.values()) |name, node| {
        if (path_len + name.len + 1 > path.len) continue;
        @memcpy(path[path_len..][0..name.len], name);
        const length = path_len + name.len;
        switch (node.kind) {
            .directory => {
                try writer.print("{s} directory\n", .{path[0..length]});
                path[length] = '/';
                try writeDurableUnder(node, path, length + 1, writer, depth + 1);
            },
            .file => try writer.print("{s} file, {d} bytes\n", .{
                path[0..length],
                node.durable_data.items.len,
            }),
            .sym_link => try writer.print("{s} -> {s}\n", .{
                path[0..length],
                node.durable_data.items,
            }),
        }
    }
}

// ------------------------------------------------------------------------------ fixtures

pub const CopyInError = Error || Io.Dir.OpenError || Io.Dir.Iterator.Error ||
    Io.Dir.ReadFileAllocError || Io.Dir.ReadLinkError;

/// Copies the real directory tree `source` into the disk, under `destination` (a directory of
/// the disk, made if missing), and makes everything on the disk durable: a run's fixture, as
/// if written and synced long before. `io` reads the real files: a real file system's `Io`
/// (std.testing.io, a `weft.Runtime`'s), not the Sim's. Not during a run.
pub fn copyIn(disk: *Disk, io: Io, source: Io.Dir, destination: []const u8) CopyInError!void {
    var at = disk.root;
    var components = std.mem.tokenizeScalar(u8, destination, '/');
    // Bounded by the path's components.
    while (components.next()) |name| {
        const resolved = try disk.resolve(at, name, true);
        if (resolved.node) |node| {
            if (node.kind != .directory) return error.NotDir;
            at = node;
        } else {
            at = try disk.makeDirectory(at, name, 0o755);
        }
    }
    try disk.copyTree(io, source, at, 0);
    try disk.syncAll();
}

fn makeDirectory(disk: *Disk, parent: *Node, name: []const u8, mode: u32) Error!*Node {
    const node = try disk.createNode(.directory, mode);
    errdefer disk.release(node);
    try disk.link(parent, name, node);
    return node;
}

fn copyTree(
    disk: *Disk,
    io: Io,
    source: Io.Dir,
    into: *Node,
    depth: u32,
) CopyInError!void {
    if (depth > path_bytes_max / 2) return error.NameTooLong; // deeper than a path can name
    var iterator = source.iterate();
    while (try iterator.next(io)) |entry| {
        if (entry.name.len > name_bytes_max) return error.NameTooLong;
        if (into.entries.contains(entry.name)) return error.PathAlreadyExists;
        switch (entry.kind) {
            .directory => {
                const child = try disk.makeDirectory(into, entry.name, 0o755);
                var opened = try source.openDir(io, entry.name, .{ .iterate = true });
                defer opened.close(io);
                try disk.copyTree(io, opened, child, depth + 1);
            },
            .sym_link => {
                var target: [path_bytes_max]u8 = undefined;
                const length = try source.readLink(io, entry.name, &target);
                try disk.symLink(into, target[0..length], entry.name);
            },
            else => {
                const bytes = try source.readFileAlloc(io, entry.name, disk.gpa, .unlimited);
                defer disk.gpa.free(bytes);
                const node = try disk.createNode(.file, 0o644);
                errdefer disk.release(node);
                try disk.resizeData(node, bytes.len);
                @memcpy(node.data.items, bytes);
                try disk.link(into, entry.name, node);
            },
        }
    }
}

/// Makes every file's bytes and every directory's entries durable, as after a sync of each
/// (without the flips of `disk_faults`: what a program starts with is what was put there).
pub fn syncAll(disk: *Disk) Error!void {
    for (disk.nodes.items) |node| try disk.makeDurable(node);
}

// ------------------------------------------------------------------------------ crash

/// The bytes of `node` written since its last sync survive in part, as a disk that lost power
/// in the middle of writing them leaves them: the length is the old one or the new one, and
/// each sector (`sector_bytes`) that changed holds its old or its new bytes; in half of the
/// crashes the new bytes reach a prefix of the sectors and the rest keep the old (a write cut
/// off part way), in the other half any sectors, in any order. Bytes past an old end that no
/// new sector covers read as zeros. The result becomes the durable state.
fn tearFile(disk: *Disk, node: *Node, random: std.Random) error{OutOfMemory}!void {
    const old = node.durable_data.items;
    const new = node.data.items;
    if (std.mem.eql(u8, old, new)) return;
    const length = if (random.boolean()) old.len else new.len;
    var torn: std.ArrayList(u8) = try .initCapacity(disk.gpa, length);
    torn.appendNTimesAssumeCapacity(0, length);
    const sectors = std.math.divCeil(usize, @max(old.len, new.len), sector_bytes) catch
        unreachable; // the divisor is not zero
    const prefix = random.boolean();
    const cut = random.uintAtMost(usize, sectors);
    for (0..sectors) |sector| {
        const start = sector * sector_bytes;
        if (start >= length) break;
        const end = @min(start + sector_bytes, length);
        const take_new = if (prefix) sector < cut else random.boolean();
        const source = if (take_new) new else old;
        if (start < source.len) {
            const copied = @min(end, source.len);
            @memcpy(torn.items[start..copied], source[start..copied]);
        }
    }
    node.durable_data.deinit(disk.gpa);
    node.durable_data = torn;
}

/// A crash: every handle closes, every node goes back to its durable state, and the nodes no
/// durable entry reaches from the root are dropped. With `tear`, what files were written since
/// their last sync survives in part (`tearFile`). Returns how many nodes were dropped. Out of
/// memory, the disk is left part way and may only be freed (`deinit`).
pub fn crash(disk: *Disk, tear: ?std.Random) error{OutOfMemory}!u32 {
    disk.crashes += 1;
    for (disk.handles.items) |*slot| slot.* = null;
    disk.handles.clearRetainingCapacity();
    disk.handles_free.clearRetainingCapacity();
    if (tear) |random| for (disk.nodes.items) |node| {
        if (node.kind == .file) try disk.tearFile(node, random);
    };
    for (disk.nodes.items) |node| {
        node.opens = 0;
        node.links = 0;
        node.locks_shared = 0;
        node.locked_exclusive = false;
        node.parent = null;
        node.data.clearRetainingCapacity();
        try node.data.appendSlice(disk.gpa, node.durable_data.items);
        for (node.entries.keys()) |name| disk.gpa.free(name);
        node.entries.clearRetainingCapacity();
    }
    disk.bytes_used = 0;
    for (disk.nodes.items) |node| {
        if (node.kind == .file) disk.bytes_used += node.data.items.len;
    }
    // Walk the durable tree from the root: what it reaches survives, with its durable
    // entries as its entries. Bounded by the number of nodes (each directory is entered once:
    // a directory has one durable parent entry at a time, as rename and sync keep it).
    disk.root.parent = disk.root;
    disk.root.links = 1;
    var reached: u32 = 1;
    var stack: std.ArrayList(*Node) = .empty;
    defer stack.deinit(disk.gpa);
    try stack.append(disk.gpa, disk.root);
    while (stack.pop()) |directory| {
        try directory.entries.ensureTotalCapacity(disk.gpa, directory.durable_entries.count());
        for (directory.durable_entries.keys(), directory.durable_entries.values()) |name, node| {
            if (node.kind == .directory and node.links > 0) {
                // A directory renamed with only one of its two parents synced is named twice
                // in the durable state; a file system keeps one name (rename is atomic): the
                // first reached.
                continue;
            }
            const owned = try disk.gpa.dupe(u8, name);
            directory.entries.putAssumeCapacityNoClobber(owned, node);
            node.links += 1;
            if (node.links > 1) continue; // a second hard link to a file seen already
            reached += 1;
            if (node.kind == .directory) {
                node.parent = directory;
                try stack.append(disk.gpa, node);
            }
        }
    }
    // Drop the rest. Bounded: each turn removes a node.
    var dropped: u32 = 0;
    var index: usize = 0;
    while (index < disk.nodes.items.len) {
        const node = disk.nodes.items[index];
        if (node.links > 0) {
            index += 1;
            continue;
        }
        _ = disk.nodes.swapRemove(index);
        if (index < disk.nodes.items.len) disk.nodes.items[index].index = index;
        // Nodes it durably named lose that name; a surviving one is named from elsewhere.
        for (node.durable_entries.values()) |child| child.durable_links -= 1;
        disk.freeNode(node);
        dropped += 1;
    }
    assert(reached == disk.nodes.items.len);
    return dropped;
}

// ------------------------------------------------------------------------------ tests

const testing = std.testing;

fn expectBytes(disk: *Disk, path: []const u8, expected: []const u8) !void {
    const number = try disk.open(disk.root, path, .{});
    defer disk.close(number);
    var buffer: [256]u8 = undefined;
    const length = try disk.read(number, &.{&buffer}, 0);
    try testing.expectEqualStrings(expected, buffer[0..length]);
}

fn writeFile(disk: *Disk, path: []const u8, bytes: []const u8, synced: bool) !void {
    const number = try disk.open(disk.root, path, .{
        .read = false,
        .write = true,
        .create = true,
        .truncate = true,
    });
    defer disk.close(number);
    _ = try disk.write(number, bytes, 0);
    if (synced) try disk.sync(number);
}

fn syncDir(disk: *Disk, path: []const u8) !void {
    const number = try disk.open(disk.root, path, .{ .directory_only = true });
    defer disk.close(number);
    try disk.sync(number);
}

test "Disk: a synced file in a synced directory survives; an unsynced one is gone" {
    var disk: Disk = try .init(testing.allocator);
    defer disk.deinit();
    try writeFile(&disk, "kept", "durable", true);
    try syncDir(&disk, "/");
    try writeFile(&disk, "lost", "volatile", true); // its name was never made durable
    try disk.createDir(disk.root, "d", 0o777);
    try testing.expectEqual(@as(u32, 2), try disk.crash(null));
    try expectBytes(&disk, "kept", "durable");
    try testing.expectError(error.FileNotFound, disk.open(disk.root, "lost", .{}));
    try testing.expectError(error.FileNotFound, disk.open(disk.root, "d", .{}));
    try testing.expectEqual(@as(usize, 2), disk.nodes.items.len);
}

test "Disk: unsynced bytes go back to the last sync; a rename without a directory sync is undone" {
    var disk: Disk = try .init(testing.allocator);
    defer disk.deinit();
    try writeFile(&disk, "store", "old", true);
    try syncDir(&disk, "/");
    // The save of a careful program, missing the directory's sync.
    try writeFile(&disk, "store.tmp", "new", true);
    try disk.rename(disk.root, "store.tmp", disk.root, "store");
    try expectBytes(&disk, "store", "new");
    _ = try disk.crash(null);
    try expectBytes(&disk, "store", "old");
    try testing.expectError(error.FileNotFound, disk.open(disk.root, "store.tmp", .{}));
    // With the directory's sync, the new file is what survives.
    try writeFile(&disk, "store.tmp", "new", true);
    try disk.rename(disk.root, "store.tmp", disk.root, "store");
    try syncDir(&disk, "/");
    _ = try disk.crash(null);
    try expectBytes(&disk, "store", "new");
    // A write after the last sync is lost, and the length with it.
    const number = try disk.open(disk.root, "store", .{ .write = true });
    _ = try disk.write(number, "longer", 0);
    disk.close(number);
    _ = try disk.crash(null);
    try expectBytes(&disk, "store", "new");
}

test "Disk: Linux's errors for the path and the kind" {
    var disk: Disk = try .init(testing.allocator);
    defer disk.deinit();
    const root = disk.root;
    try writeFile(&disk, "file", "x", false);
    try disk.createDir(root, "dir", 0o777);
    try writeFile(&disk, "dir/inner", "y", false);
    try testing.expectError(error.FileNotFound, disk.open(root, "", .{}));
    try testing.expectError(error.FileNotFound, disk.open(root, "missing", .{}));
    try testing.expectError(error.NotDir, disk.open(root, "file/x", .{}));
    try testing.expectError(error.NotDir, disk.open(root, "file/", .{}));
    try testing.expectError(error.IsDir, disk.open(root, "dir", .{ .write = true }));
    try testing.expectError(error.PathAlreadyExists, disk.open(root, "file", .{
        .write = true,
        .create = true,
        .exclusive = true,
    }));
    try testing.expectError(error.PathAlreadyExists, disk.createDir(root, "dir", 0o777));
    try testing.expectError(error.IsDir, disk.deleteFile(root, "dir"));
    try testing.expectError(error.NotDir, disk.deleteDir(root, "file"));
    try testing.expectError(error.DirNotEmpty, disk.deleteDir(root, "dir"));
    try testing.expectError(error.IsDir, disk.rename(root, "file", root, "dir"));
    try testing.expectError(error.NotDir, disk.rename(root, "dir", root, "file"));
    try testing.expectError(error.InvalidArgument, disk.rename(root, "dir", root, "dir/sub"));
    try testing.expectError(error.NameTooLong, disk.open(root, "n" ** 256, .{}));
    try testing.expectError(error.BadPathName, disk.open(root, "a\x00b", .{}));
    try disk.symLink(root, "loop", "loop");
    try testing.expectError(error.SymLinkLoop, disk.open(root, "loop", .{}));
    try testing.expectError(error.PermissionDenied, disk.hardLink(root, "dir", root, "d2", true));
    try testing.expectError(error.InvalidArgument, disk.readLink(root, "file", &.{}));
    // `..` and symbolic links on the way.
    try disk.symLink(root, "dir", "alias");
    try expectBytes(&disk, "alias/../dir/./inner", "y");
    try expectBytes(&disk, "/alias/inner", "y");
}

test "Disk: an unlinked open file keeps working until closed; sparse writes read zeros" {
    var disk: Disk = try .init(testing.allocator);
    defer disk.deinit();
    const number = try disk.open(disk.root, "f", .{ .write = true, .create = true });
    try disk.deleteFile(disk.root, "f");
    _ = try disk.write(number, "end", 5);
    var buffer: [8]u8 = undefined;
    try testing.expectEqual(@as(usize, 8), try disk.read(number, &.{&buffer}, 0));
    try testing.expectEqualSlices(u8, "\x00\x00\x00\x00\x00end", &buffer);
    try testing.expectEqual(@as(usize, 2), disk.nodes.items.len);
    disk.close(number);
    try testing.expectEqual(@as(usize, 1), disk.nodes.items.len); // freed with its last handle
    try testing.expectError(error.NotOpenForWriting, blk: {
        try writeFile(&disk, "g", "", false);
        const read_only = try disk.open(disk.root, "g", .{});
        defer disk.close(read_only);
        break :blk disk.write(read_only, "x", 0);
    });
}

test "Disk: hard links survive through either durable name; a crash closes every handle" {
    var disk: Disk = try .init(testing.allocator);
    defer disk.deinit();
    try writeFile(&disk, "a", "shared", true);
    try disk.hardLink(disk.root, "a", disk.root, "b", true);
    try syncDir(&disk, "/");
    try disk.deleteFile(disk.root, "a");
    try syncDir(&disk, "/");
    _ = try disk.open(disk.root, "b", .{}); // left open: the crash closes it
    _ = try disk.crash(null);
    try expectBytes(&disk, "b", "shared");
    try testing.expectEqual(@as(usize, 0), disk.handlesOpen());
    const stat_b = disk.stat((try disk.resolve(disk.root, "b", true)).node.?);
    try testing.expectEqual(@as(u64, 1), stat_b.nlink);
    try testing.expectEqual(@as(u32, 0o644), @intFromEnum(stat_b.permissions));
}

test "Disk: a torn crash keeps each changed sector old or new, and nothing else" {
    var disk: Disk = try .init(testing.allocator);
    defer disk.deinit();
    const old = "o" ** (3 * sector_bytes);
    const new = "n" ** (4 * sector_bytes + 10);
    try writeFile(&disk, "f", old, true);
    try syncDir(&disk, "/");
    var prng: std.Random.DefaultPrng = .init(11);
    var lengths_seen: [2]bool = @splat(false);
    var mixed_seen = false;
    for (0..64) |_| {
        const number = try disk.open(disk.root, "f", .{ .write = true });
        _ = try disk.write(number, new, 0);
        disk.close(number);
        _ = try disk.crash(prng.random());
        const node = (try disk.resolve(disk.root, "f", true)).node.?;
        const bytes = node.data.items;
        try testing.expect(bytes.len == old.len or bytes.len == new.len);
        lengths_seen[@intFromBool(bytes.len == new.len)] = true;
        var olds: usize = 0;
        var news: usize = 0;
        var sector: usize = 0;
        while (sector * sector_bytes < bytes.len) : (sector += 1) {
            const end = @min(bytes.len, (sector + 1) * sector_bytes);
            const piece = bytes[sector * sector_bytes .. end];
            const first = piece[0];
            for (piece) |byte| try testing.expectEqual(first, byte); // a sector is whole
            try testing.expect(first == 'o' or first == 'n' or first == 0);
            if (first == 'o') olds += 1;
            if (first == 'n') news += 1;
        }
        if (olds > 0 and news > 0) mixed_seen = true;
        // Put the old bytes back for the next round.
        const reset = try disk.open(disk.root, "f", .{ .write = true, .truncate = true });
        _ = try disk.write(reset, old, 0);
        try disk.sync(reset);
        disk.close(reset);
    }
    try testing.expect(lengths_seen[0] and lengths_seen[1]);
    try testing.expect(mixed_seen);
}

test "Disk: locks as flock: shared ones together, an exclusive one alone, released on close" {
    var disk: Disk = try .init(testing.allocator);
    defer disk.deinit();
    try writeFile(&disk, "f", "", false);
    const a = try disk.open(disk.root, "f", .{});
    const b = try disk.open(disk.root, "f", .{});
    try testing.expect(disk.tryLock(a, .shared));
    try testing.expect(disk.tryLock(b, .shared));
    try testing.expect(!disk.tryLock(b, .exclusive)); // a holds it shared
    try testing.expect(disk.tryLock(a, .none));
    try testing.expect(disk.tryLock(b, .exclusive)); // converts its own shared lock
    try testing.expect(!disk.tryLock(a, .shared));
    const generation = disk.handleOf(b).node.lock_generation;
    try testing.expect(disk.tryLock(b, .shared)); // a downgrade lets shared lockers in
    try testing.expect(disk.handleOf(b).node.lock_generation != generation);
    try testing.expect(disk.tryLock(a, .shared));
    disk.close(b);
    try testing.expect(disk.tryLock(a, .none));
    try testing.expect(disk.tryLock(a, .exclusive)); // b's lock went with its close
    disk.close(a);
    const node = (try disk.resolve(disk.root, "f", true)).node.?;
    try testing.expectEqual(@as(u32, 0), node.locks_shared);
    try testing.expect(!node.locked_exclusive);
}
