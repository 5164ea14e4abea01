import Foundation

#if canImport(Glibc)
import Glibc
#elseif canImport(Darwin)
import Darwin
#endif

/// Files that hold secrets (tokens, private keys, the store): created with mode 0600 from the first byte, so that
/// they are never observable with wider permissions, and read only when nobody else could have read or written
/// them.
package enum SecretFile {
    /// Why a secret file cannot be used.
    package struct Refusal: Error, CustomStringConvertible, LocalizedError {
        package var errorDescription: String? { description }
        package let description: String
    }

    /// Writes `bytes` to `path` atomically: a new file created 0600 beside it (0644 when `readableByOthers`: a test
    /// root that serve reads, never writable by others whatever the umask), then renamed over `path`.
    package static func write(_ bytes: [UInt8], to path: String, readableByOthers: Bool = false) throws(Refusal) {
        let temporary = "\(path).tmp-\(UInt64.random(in: 0...UInt64.max))"
        let mode: mode_t = readableByOthers ? 0o644 : 0o600
        let descriptor = open(temporary, O_CREAT | O_EXCL | O_WRONLY | O_NOFOLLOW | O_CLOEXEC, mode)
        guard descriptor >= 0 else { throw Refusal(description: "cannot create \(path): \(errorText())") }
        var written = 0
        while written < bytes.count {
            let result = bytes[written...].withUnsafeBytes { systemWrite(descriptor, $0.baseAddress, $0.count) }
            guard result > 0 else {
                let reason = errorText()
                close(descriptor)
                unlink(temporary)
                throw Refusal(description: "cannot write \(path): \(reason)")
            }
            written += result
        }
        guard fsync(descriptor) == 0, close(descriptor) == 0, rename(temporary, path) == 0 else {
            let reason = errorText()
            unlink(temporary)
            throw Refusal(description: "cannot write \(path): \(reason)")
        }
    }

    /// Creates an empty file 0600 at `path` unless one exists (a database about to be opened); an existing one of
    /// this user's that others could read or write is narrowed to 0600. An existing file owned by another user, or
    /// that is not a regular file, is refused: a database planted by someone else is never adopted.
    package static func createIfMissing(_ path: String) throws(Refusal) {
        let descriptor = open(path, O_CREAT | O_EXCL | O_WRONLY | O_NOFOLLOW | O_CLOEXEC, 0o600)
        if descriptor >= 0 {
            close(descriptor)
        } else if errno == EEXIST {
            var info = stat()
            guard lstat(path, &info) == 0 else { throw Refusal(description: "cannot open \(path): \(errorText())") }
            try checkOwnRegularFile(info, path)
            narrow(path)
        } else {
            throw Refusal(description: "cannot create \(path): \(errorText())")
        }
    }

    /// Narrows an existing regular file of this user's to 0600 when others could read or write it.
    package static func narrow(_ path: String) {
        var info = stat()
        guard lstat(path, &info) == 0, info.st_mode & S_IFMT == S_IFREG, info.st_uid == geteuid(),
            info.st_mode & 0o077 != 0
        else { return }
        chmod(path, 0o600)
    }

    /// The bytes of an existing secret file, or nil when there is none. The file must be a regular file (not a
    /// link), owned by this process's user, and neither readable nor writable by others.
    ///
    /// The checks are made on the opened descriptor (`fstat`), never on the path before opening it, so that a file
    /// swapped in between the check and the read cannot be read in its place.
    package static func read(_ path: String, limit: Int) throws(Refusal) -> [UInt8]? {
        try read(
            path, limit: limit, followingLinks: false, rootMayOwn: false, forbidden: 0o077,
            advice: "is readable or writable by others: chmod 600 it, or remove it")
    }

    /// The bytes of an existing private key file, or nil when there is none: a regular file (a link is followed, as
    /// the secret volumes of container platforms use them), this process's user's and neither readable nor writable
    /// by others, or root's and readable by its group at most (a platform's group for secrets, as Kubernetes'
    /// `fsGroup`).
    package static func readPrivateKey(_ path: String, limit: Int) throws(Refusal) -> [UInt8]? {
        try read(
            path, limit: limit, followingLinks: true, rootMayOwn: true, forbidden: 0o077, forbiddenForRoot: 0o027,
            advice: "is readable or writable by others: chmod 600 it (a file of root's: 640), or remove it")
    }

    /// The bytes of an existing file whose integrity matters but not its secrecy (a trust anchor), or nil when there is
    /// none: a regular file (a link is followed, as certificate directories use them), owned by this process's user or
    /// root, and writable by neither its group nor others, so that nobody else could have put a root of their own
    /// there.
    package static func readProtected(_ path: String, limit: Int) throws(Refusal) -> [UInt8]? {
        try read(
            path, limit: limit, followingLinks: true, rootMayOwn: true, forbidden: 0o022,
            advice: "is writable by others: chmod go-w it, or remove it")
    }

    /// At most `limit` bytes of a regular file whose owner and mode pass (`forbidden`: the mode bits it must not
    /// have, `forbiddenForRoot` when root owns it and this process is not root's; `advice`: what the refusal says
    /// after the path). A device or a FIFO named instead is refused, never read without end nor waited on.
    private static func read(
        _ path: String, limit: Int, followingLinks: Bool, rootMayOwn: Bool, forbidden: mode_t,
        forbiddenForRoot: mode_t? = nil, advice: String
    ) throws(Refusal) -> [UInt8]? {
        // O_NONBLOCK: a FIFO planted at the path must not block the open; O_NOFOLLOW: a symbolic link is refused.
        let descriptor = open(
            path, O_RDONLY | O_CLOEXEC | O_NONBLOCK | O_NOCTTY | (followingLinks ? 0 : O_NOFOLLOW))
        guard descriptor >= 0 else {
            if errno == ENOENT { return nil }
            if errno == ELOOP, !followingLinks {
                throw Refusal(description: "\(path) is a symbolic link: refusing to use it")
            }
            throw Refusal(description: "cannot read \(path): \(errorText())")
        }
        defer { close(descriptor) }
        var info = stat()
        guard fstat(descriptor, &info) == 0 else { throw Refusal(description: "cannot read \(path): \(errorText())") }
        guard info.st_mode & S_IFMT == S_IFREG else {
            throw Refusal(description: "\(path) is not a regular file: refusing to use it")
        }
        guard info.st_uid == geteuid() || (rootMayOwn && info.st_uid == 0) else {
            throw Refusal(description: "\(path) belongs to another user: refusing to use it")
        }
        let mask = info.st_uid == 0 && geteuid() != 0 ? forbiddenForRoot ?? forbidden : forbidden
        guard info.st_mode & mask == 0 else { throw Refusal(description: "\(path) \(advice)") }
        guard info.st_size <= limit else { throw Refusal(description: "\(path) is larger than \(limit) bytes") }
        var bytes = [UInt8](repeating: 0, count: limit + 1)
        var total = 0
        while total <= limit {
            let count = bytes[total...].withUnsafeMutableBytes { systemRead(descriptor, $0.baseAddress, $0.count) }
            if count < 0 && errno == EINTR { continue }
            guard count >= 0 else { throw Refusal(description: "cannot read \(path): \(errorText())") }
            if count == 0 { break }
            total += count
        }
        guard total <= limit else { throw Refusal(description: "\(path) is larger than \(limit) bytes") }
        return Array(bytes.prefix(total))
    }

    /// Refuses what is not a regular file owned by this process's user.
    private static func checkOwnRegularFile(_ info: stat, _ path: String) throws(Refusal) {
        guard info.st_mode & S_IFMT == S_IFREG else {
            throw Refusal(description: "\(path) is not a regular file (a symbolic link?): refusing to use it")
        }
        guard info.st_uid == geteuid() else {
            throw Refusal(description: "\(path) belongs to another user: refusing to use it")
        }
    }

    private static func errorText() -> String { String(cString: strerror(errno)) }
}

#if canImport(Glibc)
private let systemWrite = Glibc.write
private let systemRead = Glibc.read
#elseif canImport(Darwin)
private let systemWrite = Darwin.write
private let systemRead = Darwin.read
#endif
