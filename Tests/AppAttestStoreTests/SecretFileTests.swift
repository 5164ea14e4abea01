#if SQLite
import AppAttest
import AppAttestSQLite
import AppAttestStore
import Foundation
import Testing

#if canImport(Glibc)
import Glibc
#endif

@Suite("Files with secrets")
struct SecretFileTests {
    func permissions(_ path: String) -> mode_t {
        var info = stat()
        guard stat(path, &info) == 0 else { return 0o7777 }
        return info.st_mode & 0o777
    }

    @Test("the SQLite database and its WAL and shared-memory files are 0600")
    func sqlitePermissions() async throws {
        let path = NSTemporaryDirectory() + "appattest-secret-\(UUID().uuidString).sqlite"
        let store = try SQLiteAppAttestStore(path: path)
        try await store.insertChallenge(
            ChallengeRecord(
                challenge: Array(0..<32), purpose: "attestation", keyID: nil, userID: nil,
                expiresAt: Date().addingTimeInterval(60)))
        for file in [path, path + "-wal", path + "-shm"] {
            #expect(FileManager.default.fileExists(atPath: file), "\(file)")
            #expect(permissions(file) == 0o600, "\(file) is \(String(permissions(file), radix: 8))")
        }
    }

    @Test("a database left 0644 by an earlier version is narrowed to 0600 when opened")
    func existingDatabaseNarrowed() async throws {
        let path = NSTemporaryDirectory() + "appattest-secret-\(UUID().uuidString).sqlite"
        #expect(FileManager.default.createFile(atPath: path, contents: nil, attributes: [.posixPermissions: 0o644]))
        _ = try SQLiteAppAttestStore(path: path)
        #expect(permissions(path) == 0o600)
    }

    @Test("a secret written atomically is 0600; one readable by others is refused")
    func writeAndRead() throws {
        let path = NSTemporaryDirectory() + "appattest-secret-\(UUID().uuidString)"
        try SecretFile.write(Array("secret".utf8), to: path)
        #expect(permissions(path) == 0o600)
        #expect(try SecretFile.read(path, limit: 64) == Array("secret".utf8))
        chmod(path, 0o640)
        #expect(throws: SecretFile.Refusal.self) { try SecretFile.read(path, limit: 64) }
        #expect(try SecretFile.read(path + "-missing", limit: 64) == nil)
    }
}
#endif  // SQLite
