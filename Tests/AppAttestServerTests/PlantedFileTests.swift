#if Service
import AppAttestServer
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
