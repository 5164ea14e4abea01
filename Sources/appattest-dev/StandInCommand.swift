#if AppleServerAPI && Hummingbird
import AppAttestCommandSupport
import AppAttestTesting
import AppAttestStore
import AppleDeviceAPITesting
import ArgumentParser
import Crypto
import Foundation

/// `appattest-dev stand-in`: runs the local stand-in for Apple's DeviceCheck and receipt servers, for trying the
/// `devicecheck` and `receipt refresh` commands (and your own code) without Apple's hosts.
struct StandInCommand: AsyncParsableCommand {
    static let configuration = CommandConfiguration(
        commandName: "stand-in",
        abstract: "Serve a local stand-in for Apple's DeviceCheck and receipt endpoints on 127.0.0.1.",
        discussion: """
            Writes a fresh provider key (.p8) for the given Key ID and Team ID, prints the base URL, and serves until \
            interrupted. Refreshed receipts are signed by a test receipt authority, so validate them with its root \
            (written next to the key as receipt-root.der).
            """
    )

    @Option(name: .customLong("key-out"), help: "Where to write the provider key.") var keyOut: String = "stand-in.p8"
    @Option(name: .customLong("key-id")) var keyID: String = "STANDIN001"
    @Option(name: .customLong("team-id")) var teamID: String = "TEAM123456"
    @Option(help: "Stop after this many seconds (0: run until interrupted).") var seconds: Int = 0

    func run() async throws {
        let key = P256.Signing.PrivateKey()
        try SecretFile.write(Array(key.pemRepresentation.utf8), to: keyOut)
        let receipts = try TestReceiptAuthority()
        let rootPath = URL(fileURLWithPath: keyOut).deletingLastPathComponent().appendingPathComponent(
            "receipt-root.der")
        // Public, but read as a testing root only when nobody else may write it: 0644 whatever the umask.
        try SecretFile.write(receipts.rootCertificate, to: rootPath.path, readableByOthers: true)
        let server = AppleServerStandIn(
            keys: [.init(teamID: teamID, keyID: keyID, publicKey: key.publicKey)], receiptAuthority: receipts)
        let url = try await server.start()
        // Unbuffered, so that a script reading the output sees the URL at once.
        FileHandle.standardOutput.write(
            Data("stand-in listening on \(url) (key \(keyOut), Key ID \(keyID), Team ID \(teamID))\n".utf8))
        if seconds > 0 {
            try await Task.sleep(nanoseconds: UInt64(seconds) * 1_000_000_000)
        } else {
            while !Task.isCancelled { try await Task.sleep(nanoseconds: 3_600_000_000_000) }
        }
        await server.stop()
    }
}
#endif  // AppleServerAPI && Hummingbird
