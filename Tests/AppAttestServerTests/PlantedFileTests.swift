#if Service
import AppAttestServer
import Crypto
import Foundation
import Testing

#if canImport(Glibc)
import Glibc
#endif

/// Files serve finds rather than creates (its configuration, an existing database) are used only when nobody else
/// could have planted or changed them.
@Suite("appattest serve: planted configuration and database files")
struct PlantedFileTests {
    typealias F = Fixture

    static let configuration = Data(
        #"{"apps":[{"appId":"SERVE12345.com.example.app","environments":["production"]}],"port":8099}"#.utf8)

    @Test("a configuration file that others can write or read, or a symbolic link, is refused; a 0600 one is read")
    func configurationFile() throws {
        let directory = try F.directory()
        let path = "\(directory)/appattest.json"
        #expect(FileManager.default.createFile(atPath: path, contents: Self.configuration))
        for mode: mode_t in [0o666, 0o644, 0o620, 0o604] {
            chmod(path, mode)
            #expect(throws: ServerConfigurationError.self, "mode \(String(mode, radix: 8))") {
                _ = try ServerConfiguration.load(file: path)
            }
        }
        chmod(path, 0o600)
        #expect(try ServerConfiguration.load(file: path).port == 8099)
        // A link to that same, acceptable file.
        let link = "\(directory)/linked.json"
        symlink(path, link)
        #expect(throws: ServerConfigurationError.self) { _ = try ServerConfiguration.load(file: link) }
        #expect(throws: ServerConfigurationError.self) { _ = try ServerConfiguration.load(file: "\(directory)/none") }
    }

    @Test(
        "a trust anchor others can write, a device or a FIFO in its place, is refused; the Apple key as the configuration"
    )
    func namedFiles() async throws {
        let directory = try F.directory()
        var configuration = try F.configuration(directory: directory)
        let root = try #require(configuration.testingRootCertificate)
        chmod(root, 0o644)
        #expect(try configuration.verifierConfiguration() != nil)
        for mode: mode_t in [0o666, 0o646, 0o664] {
            chmod(root, mode)
            #expect(throws: ServerConfigurationError.self, "mode \(String(mode, radix: 8))") {
                _ = try configuration.verifierConfiguration()
            }
        }
        // Neither read without end (/dev/zero) nor waited on (a FIFO with no writer).
        let fifo = "\(directory)/root.fifo"
        #expect(mkfifo(fifo, 0o600) == 0)
        for path in ["/dev/zero", fifo] {
            configuration.testingRootCertificate = path
            #expect(throws: ServerConfigurationError.self, "\(path)") { _ = try configuration.verifierConfiguration() }
        }
        configuration.testingRootCertificate = root
        chmod(root, 0o644)
        // The team's key that signs Apple's requests: this user's, readable and writable by nobody else (a file of
        // root's, for a process that is not, may be readable by its group); a link to it (a container platform's
        // secret volume) is followed.
        let key = "\(directory)/key.p8"
        try P256.Signing.PrivateKey().pemRepresentation.write(toFile: key, atomically: true, encoding: .utf8)
        configuration.apple = .init(teamId: "SERVE12345", keyId: "KEY1234567", privateKeyFile: key)
        for mode: mode_t in [0o644, 0o604, 0o660, 0o640] {
            chmod(key, mode)
            await #expect(throws: ServerConfigurationError.self, "mode \(String(mode, radix: 8))") {
                let server = try await AppAttestServer.open(configuration: configuration)
                await server.close()
            }
        }
        let link = "\(directory)/linked.p8"
        symlink(key, link)
        for (mode, path) in [(mode_t(0o600), key), (0o400, key), (0o600, link)] {
            chmod(key, mode)
            configuration.apple?.privateKeyFile = path
            let server = try await AppAttestServer.open(configuration: configuration)
            await server.close()
        }
    }

    @Test(
        "a configuration file or a SQLite database owned by another user is refused",
        .enabled(if: geteuid() == 0, "only root can give a file away"))
    func ownedByAnotherUser() async throws {
        let directory = try F.directory()
        let path = "\(directory)/appattest.json"
        #expect(
            FileManager.default.createFile(
                atPath: path, contents: Self.configuration, attributes: [.posixPermissions: 0o600]))
        chown(path, 65534, 65534)
        #expect(throws: ServerConfigurationError.self) { _ = try ServerConfiguration.load(file: path) }

        var configuration = try F.configuration(directory: directory)
        let database = "\(directory)/planted.sqlite"
        #expect(
            FileManager.default.createFile(atPath: database, contents: nil, attributes: [.posixPermissions: 0o600]))
        chown(database, 65534, 65534)
        configuration.database = "sqlite:\(database)"
        await #expect(throws: (any Error).self) {
            let server = try await AppAttestServer.open(configuration: configuration)
            await server.close()
        }
    }
}
#endif  // Service
