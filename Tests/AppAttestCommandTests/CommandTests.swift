import AppAttestCommandSupport
import AppAttestTesting
import Foundation
import Testing

#if canImport(Glibc)
import Glibc
#endif

/// The `appattest` and `appattest-dev` commands run as a user runs them, on hostile files.
@Suite("appattest and appattest-dev: hostile files and secrets")
struct CommandTests {
    /// An executable of this package, built beside the test bundle.
    static func executable(_ name: String) -> URL {
        let beside = Bundle.main.bundleURL.deletingLastPathComponent().appendingPathComponent(name)
        if FileManager.default.isExecutableFile(atPath: beside.path) { return beside }
        return URL(fileURLWithPath: FileManager.default.currentDirectoryPath).appendingPathComponent(
            ".build/debug/\(name)")
    }

    /// The developer tools' subcommands: they are `appattest-dev`'s, and not in the `appattest` operators ship.
    static let developerTools: Set<String> = ["simulate", "stand-in", "bench", "load"]

    /// Runs `appattest`, or `appattest-dev` for a developer tool; returns its standard output and error as bytes, and
    /// its exit status. With `umask`, the command runs under that file-creation mask (through `/bin/sh`).
    func run(_ arguments: [String], umask: String? = nil) async throws -> (output: [UInt8], status: Int32) {
        let process = Process()
        let executable = Self.executable(
            Self.developerTools.contains(arguments.first ?? "") ? "appattest-dev" : "appattest")
        if let umask {
            process.executableURL = URL(fileURLWithPath: "/bin/sh")
            process.arguments = ["-c", "umask \(umask) && exec \"$0\" \"$@\"", executable.path] + arguments
        } else {
            process.executableURL = executable
            process.arguments = arguments
        }
        let pipe = Pipe()
        process.standardOutput = pipe
        process.standardError = pipe
        try process.run()
        // Read and waited for off Swift's cooperative pool, whose threads (one per core) every other suite needs.
        let data = await ProcessWait.output(of: process, from: pipe)
        return (Array(data), process.terminationStatus)
    }

    static func directory() throws -> String {
        let path = NSTemporaryDirectory() + "appattest-command-\(UUID().uuidString)"
        try FileManager.default.createDirectory(atPath: path, withIntermediateDirectories: true)
        return path
    }

    @Test("--json escapes what a terminal would act on: C0, DEL, C1 (8-bit CSI) and bidi overrides")
    func jsonEscapes() throws {
        let hostile = "a\u{1B}[2J\u{7F}\u{9B}31m\u{202E}b\u{2066}é"
        let json = Report.object([("k", .text(hostile))]).json()
        #expect(json == #"{"k":"a\u001b[2J\u007f\u009b31m\u202eb\u2066é"}"#)
        // Still JSON, and the same text once decoded.
        let decoded = try JSONSerialization.jsonObject(with: Data(json.utf8)) as? [String: String]
        #expect(decoded == ["k": hostile])
    }

    @Test("vectors: escape sequences and forged lines in a hostile file are printed escaped, never raw")
    func vectorsEscapes() async throws {
        let path = try Self.directory() + "/hostile.json"
        let hostileID = "x\u{1B}[2J\u{1B}[H\r\n74 passed, 0 failed\u{202E}"
        let file: [String: Any] = [
            "format": "app-attest-test-vectors", "version": 1,
            "vectors": [
                [
                    "id": hostileID, "kind": "assertion", "appId": "ABCDE12345.com.example.app",
                    "expect": "valid", "assertion": "AA==", "clientData": "AA==", "publicKey": "AA==",
                    "previousCounter": 0,
                ]
            ],
        ]
        try JSONSerialization.data(withJSONObject: file).write(to: URL(fileURLWithPath: path))
        let (output, _) = try await run(["vectors", path])
        #expect(!output.contains(0x1B), "an ESC byte reached the terminal")
        #expect(!output.contains(0x0D), "a carriage return reached the terminal")
        let lines = String(decoding: output, as: UTF8.self).split(separator: "\n")
        #expect(lines.filter { $0 == "74 passed, 0 failed" }.isEmpty, "a forged summary line")
        #expect(!String(decoding: output, as: UTF8.self).contains("\u{202E}"))
    }

    @Test("messages about a huge argument or a huge string in a file are bounded")
    func boundedErrors() async throws {
        // 100,000 characters: near the largest single argument Linux passes to a process.
        let (output, status) = try await run(["inspect", String(repeating: "A", count: 100_000)])
        #expect(status != 0)
        #expect(output.count < 4096, "\(output.count) bytes of error output")

        let path = try Self.directory() + "/huge.json"
        let file: [String: Any] = [
            "format": "app-attest-test-vectors", "version": 1,
            "vectors": [
                [
                    "id": String(repeating: "B", count: 500_000), "kind": "assertion",
                    "appId": "ABCDE12345.com.example.app", "expect": "valid", "assertion": "AA==",
                    "clientData": "AA==", "publicKey": "AA==", "previousCounter": 0,
                ]
            ],
        ]
        try JSONSerialization.data(withJSONObject: file).write(to: URL(fileURLWithPath: path))
        let (vectorOutput, _) = try await run(["vectors", path])
        #expect(vectorOutput.count < 8192, "\(vectorOutput.count) bytes of output")
    }

    func permissions(_ path: String) -> mode_t {
        var info = stat()
        guard lstat(path, &info) == 0 else { return 0o7777 }
        return info.st_mode & 0o777
    }

    @Test("simulate writes its keys 0600 and its root 0644 whatever the umask; a challenge may begin with '-'")
    func simulateSecrets() async throws {
        let directory = try Self.directory()
        // Under a umask of 000 the root was written 0666, which serve refuses as a testing root.
        let (output, status) = try await run(["simulate", "authority", "--out", directory], umask: "000")
        #expect(status == 0, "\(String(decoding: output, as: UTF8.self))")
        #expect(permissions(directory + "/authority.json") == 0o600)
        #expect(permissions(directory + "/root.pem") == 0o644)
        let (attestOutput, attestStatus) = try await run([
            "simulate", "attest", "--dir", directory, "--app-id", "ABCDE12345.com.example.app", "--challenge",
            "-AAAAAAAAAAAAAAAAAAAAA",  // a Base64URL challenge may begin with '-': still the option's value
        ])
        #expect(attestStatus == 0, "\(String(decoding: attestOutput, as: UTF8.self))")
        #expect(permissions(directory + "/device.json") == 0o600)
    }

    @Test("stand-in writes its provider key 0600 and its receipt root 0644 whatever the umask")
    func standInKey() async throws {
        let directory = try Self.directory()
        let key = directory + "/stand-in.p8"
        let (output, status) = try await run(["stand-in", "--key-out", key, "--seconds", "1"], umask: "000")
        #expect(status == 0, "\(String(decoding: output, as: UTF8.self))")
        #expect(permissions(key) == 0o600)
        #expect(permissions(directory + "/receipt-root.der") == 0o644)
    }

    @Test("verify --leeway 1e19 is refused with a message, not a crash")
    func hugeLeeway() async throws {
        let (output, status) = try await run([
            "verify", "attestation", "/dev/null", "--app-id", "ABCDE12345.com.example.app", "--key-id",
            "YmbJO4x5nEHUvncp9zdWuVZjNBEMgJn3cdSToAXQe3M=", "--challenge", "utf8:x", "--leeway", "1e19",
        ])
        #expect(status == 1 || status == 64, "exit \(status): \(String(decoding: output, as: UTF8.self))")
        #expect(String(decoding: output, as: UTF8.self).contains("leeway"))
    }
}
