import AppAttest
import AppAttestCommandSupport
import AppAttestStore
import AppAttestTesting
import AppAttestWire
import ArgumentParser
import Crypto
import Foundation

/// `appattest-dev simulate`: a simulated App Attest device from the command line, for trying `appattest serve` (or your
/// own server) with curl and without an iPhone. Its certificates come from a TEST authority: a server accepts them
/// only when told to trust that authority's root (`APPATTEST_TESTING_ROOT`), never with Apple's root.
struct SimulateCommand: AsyncParsableCommand {
    static let configuration = CommandConfiguration(
        commandName: "simulate",
        abstract: "A simulated device from the command line (test authority, attestations, assertions).",
        subcommands: [Authority.self, Attest.self, Assert.self]
    )

    struct AuthorityFile: Codable {
        var rootKey: String
        var intermediateKey: String
    }

    struct DeviceFile: Codable {
        var appId: String
        var privateKey: String
        var counter: UInt32
    }

    static func authority(_ directory: String) throws -> TestCertificateAuthority {
        let data = try readInput("\(directory)/authority.json", limit: 64 * 1024)
        let file = try JSONDecoder().decode(AuthorityFile.self, from: data)
        guard let root = Data(base64Encoded: file.rootKey), let intermediate = Data(base64Encoded: file.intermediateKey)
        else { throw InputError(description: "authority.json is damaged") }
        return try TestCertificateAuthority(
            rootKey: P384.Signing.PrivateKey(rawRepresentation: root),
            intermediateKey: P384.Signing.PrivateKey(rawRepresentation: intermediate), name: "Simulated")
    }

    static func json(_ object: [String: String]) throws -> String {
        String(decoding: try JSONSerialization.data(withJSONObject: object, options: [.sortedKeys]), as: UTF8.self)
    }

    /// `appattest-dev simulate authority --out DIR`.
    struct Authority: AsyncParsableCommand {
        static let configuration = CommandConfiguration(
            abstract: "Create a test certificate authority: DIR/authority.json (its keys) and DIR/root.pem.")

        @Option var out: String

        func run() async throws {
            try FileManager.default.createDirectory(atPath: out, withIntermediateDirectories: true)
            let file = AuthorityFile(
                rootKey: P384.Signing.PrivateKey().rawRepresentation.base64EncodedString(),
                intermediateKey: P384.Signing.PrivateKey().rawRepresentation.base64EncodedString())
            // Private keys: 0600 from the first byte.
            try SecretFile.write(Array(try JSONEncoder().encode(file)), to: "\(out)/authority.json")
            let authority = try SimulateCommand.authority(out)
            let pem = Data(authority.rootCertificate).base64EncodedString(options: [.lineLength64Characters])
            // Public, but read by serve only when nobody else may write it: 0644 whatever the umask.
            try SecretFile.write(
                Array("-----BEGIN CERTIFICATE-----\n\(pem)\n-----END CERTIFICATE-----\n".utf8), to: "\(out)/root.pem",
                readableByOthers: true)
            FileHandle.standardError.write(
                Data("wrote \(out)/authority.json and \(out)/root.pem (a TEST root: trust it only in tests)\n".utf8))
        }
    }

    /// `appattest-dev simulate attest`: a new device key attested for a challenge; prints the JSON of
    /// `POST /v1/attestations` and keeps the key in DIR/device.json.
    struct Attest: AsyncParsableCommand {
        static let configuration = CommandConfiguration(
            abstract: "Attest a new device key for a challenge; print the body of POST /v1/attestations.")

        @Option var dir: String
        @Option(name: .customLong("app-id")) var appID: String
        @Option(
            parsing: .unconditional, help: "The challenge, Base64URL, as the server issued it (it may begin with '-').")
        var challenge: String
        @Option(help: "production or development.") var environment: String = "production"

        func run() async throws {
            guard let bytes = RequestBindingLayout.decodeBase64URL(challenge) else {
                throw ValidationError("the challenge is not Base64URL")
            }
            guard let environment = AppAttestEnvironment(rawValue: environment) else {
                throw ValidationError("the environment is production or development")
            }
            let device = try SimulatedDevice(
                authority: try SimulateCommand.authority(dir), appID: try AppID(appID), environment: environment)
            let object = try device.attest(challenge: bytes)
            let state = DeviceFile(
                appId: appID, privateKey: device.privateKey.rawRepresentation.base64EncodedString(), counter: 0)
            try SecretFile.write(Array(try JSONEncoder().encode(state)), to: "\(dir)/device.json")
            print(
                try SimulateCommand.json([
                    "keyId": device.keyID.base64EncodedString,
                    "attestationObject": Data(object).base64EncodedString(), "challenge": challenge,
                ]))
        }
    }

    /// `appattest-dev simulate assert`: the next assertion of the device in DIR/device.json; prints the JSON of
    /// `POST /v1/assertions/verify`.
    struct Assert: AsyncParsableCommand {
        static let configuration = CommandConfiguration(
            abstract: "Sign the next assertion; print the body of POST /v1/assertions/verify.")

        @Option var dir: String
        @Option(name: .customLong("client-data"), help: "The client data, as UTF-8 text.") var clientData: String
        @Option(
            parsing: .unconditional,
            help:
                "A challenge (Base64URL) issued for this assertion; it is put first in the client data (challenge ‖ payload), where the service reads it."
        )
        var challenge: String?

        func run() async throws {
            let state = try JSONDecoder().decode(
                DeviceFile.self, from: try readInput("\(dir)/device.json", limit: 64 * 1024))
            guard let key = Data(base64Encoded: state.privateKey) else {
                throw InputError(description: "device.json is damaged")
            }
            let device = try SimulatedDevice(
                authority: try SimulateCommand.authority(dir), appID: try AppID(state.appId),
                privateKey: try P256.Signing.PrivateKey(rawRepresentation: key), counter: state.counter)
            var data = Array(clientData.utf8)
            var body: [String: String] = ["keyId": device.keyID.base64EncodedString]
            if let challenge {
                guard let bytes = RequestBindingLayout.decodeBase64URL(challenge) else {
                    throw ValidationError("the challenge is not Base64URL")
                }
                // The opaque layout the service checks: the challenge's bytes first, then the payload.
                data = bytes + data
                body["challenge"] = challenge
            }
            body["assertion"] = Data(try device.assert(clientData: data)).base64EncodedString()
            body["clientData"] = Data(data).base64EncodedString()
            var next = state
            next.counter = device.counter
            try SecretFile.write(Array(try JSONEncoder().encode(next)), to: "\(dir)/device.json")
            print(try SimulateCommand.json(body))
        }
    }
}
