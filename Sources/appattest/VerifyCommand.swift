@_spi(FixedVerificationTime) import AppAttest
import AppAttestCommandSupport
import ArgumentParser
import Foundation

/// `appattest verify attestation|assertion`: a verdict for one object.
struct VerifyCommand: ParsableCommand {
    static let configuration = CommandConfiguration(
        commandName: "verify",
        abstract: "Verify one attestation object or assertion and print the verdict.",
        discussion: """
            Byte-valued options take standard or URL-safe Base64, `hex:<hex>`, or `utf8:<text>`. Exit status 0 \
            means valid, 1 invalid (the error code is printed), 64 a usage error.
            """,
        subcommands: [Attestation.self, Assertion.self]
    )

    struct Common: ParsableArguments {
        @Argument(help: "The object (binary CBOR or Base64), or - for standard input.")
        var file: String = "-"

        @Option(name: .customLong("app-id"), help: "The App ID, TEAMID.bundle.id.")
        var appID: String

        @Flag(help: "Print JSON instead of text.")
        var json = false
    }

    struct Attestation: ParsableCommand {
        static let configuration = CommandConfiguration(abstract: "Verify an attestation object.")

        @OptionGroup var common: Common

        @Option(help: "The environment the key must come from: development or production.")
        var environment: String = "production"

        @Option(name: .customLong("key-id"), help: "The keyId the app sent (Base64, 32 bytes).")
        var keyID: String

        @Option(parsing: .unconditional, help: "The challenge the server issued; the library hashes it.")
        var challenge: String?

        @Option(
            name: .customLong("client-data-hash"),
            help: "The exact clientDataHash given to attestKey, instead of --challenge.")
        var clientDataHash: String?

        @Option(help: "Verification time, ISO 8601 (default: now).")
        var at: String?

        @Option(help: "Clock skew leeway in seconds (0 to 604800, a week).")
        var leeway: Double = 0

        func validate() throws {
            guard (challenge == nil) != (clientDataHash == nil) else {
                throw ValidationError("give exactly one of --challenge and --client-data-hash")
            }
            guard AppAttestEnvironment(rawValue: environment) != nil else {
                throw ValidationError("--environment is development or production")
            }
            guard (0...AppAttestVerifier.maximumClockSkewLeeway).contains(leeway) else {
                throw ValidationError("--leeway is from 0 to 604800 seconds (a week)")
            }
        }

        func run() throws {
            let object = try readObject(common.file)
            let outcome: Report
            var valid = false
            do {
                let verifier = try AppAttestVerifier(
                    configuration: .init(
                        appID: try AppID(common.appID), environment: AppAttestEnvironment(rawValue: environment)!,
                        verificationTime: try verificationTime(at), clockSkewLeeway: leeway))
                let keyID = try KeyID(base64Encoded: keyID)
                let result: VerifiedAttestation
                if let challenge {
                    result = try verifier.verifyAttestation(
                        object, keyID: keyID, challenge: try byteOption(challenge, "--challenge"))
                } else {
                    result = try verifier.verifyAttestation(
                        object, keyID: keyID, clientDataHash: try byteOption(clientDataHash!, "--client-data-hash"))
                }
                valid = true
                outcome = .object([
                    ("verdict", .text("valid")),
                    ("keyId", .text(result.key.keyID.base64EncodedString)),
                    ("appId", .text(result.key.appID.rawValue)),
                    ("environment", .text(result.key.environment.rawValue)),
                    ("publicKey", .text(Data(result.key.publicKey.x963Representation).base64EncodedString())),
                    ("counter", .number(Int64(result.key.counter))),
                    ("osVersion", .optional(result.osVersion)),
                    ("receiptSize", .number(Int64(result.receipt.count))),
                    ("extensions", result.extensions.map { .cbor(.map($0.entries)) } ?? .null),
                ])
            } catch let error as AppAttestError {
                outcome = invalid(error)
            }
            print(common.json ? outcome.json() : outcome.render(), terminator: common.json ? "\n" : "")
            if !valid { throw ExitCode(1) }
        }
    }

    struct Assertion: ParsableCommand {
        static let configuration = CommandConfiguration(abstract: "Verify an assertion with a stored public key.")

        @OptionGroup var common: Common

        @Option(name: .customLong("public-key"), help: "The attested key: 65-byte uncompressed point.")
        var publicKey: String

        @Option(name: .customLong("client-data"), help: "The client data the app hashed.")
        var clientData: String?

        @Option(name: .customLong("client-data-hash"), help: "SHA-256 of the client data, instead of --client-data.")
        var clientDataHash: String?

        @Option(name: .customLong("previous-counter"), help: "The stored counter.")
        var previousCounter: UInt32 = 0

        @Option(name: .customLong("key-id"), help: "Optional: the keyId, checked against the public key.")
        var keyID: String?

        func validate() throws {
            guard (clientData == nil) != (clientDataHash == nil) else {
                throw ValidationError("give exactly one of --client-data and --client-data-hash")
            }
        }

        func run() throws {
            let object = try readObject(common.file)
            let outcome: Report
            var valid = false
            do {
                let appID = try AppID(common.appID)
                let verifier = try AppAttestVerifier(
                    configuration: .init(apps: [appID: Set(AppAttestEnvironment.allCases)]))
                let key = try AttestedPublicKey(x963Representation: try byteOption(publicKey, "--public-key"))
                if let keyID, try KeyID(base64Encoded: keyID) != key.keyID {
                    throw AppAttestError(.keyIdMismatch, "--key-id is not SHA-256 of --public-key")
                }
                let result: VerifiedAssertion
                if let clientData {
                    result = try verifier.verifyAssertion(
                        object, clientData: try byteOption(clientData, "--client-data"),
                        key: AttestedKey(
                            publicKey: key, appID: appID, environment: .production, counter: previousCounter))
                } else {
                    result = try verifier.verifyAssertion(
                        object, clientDataHash: try byteOption(clientDataHash!, "--client-data-hash"),
                        key: AttestedKey(
                            publicKey: key, appID: appID, environment: .production, counter: previousCounter))
                }
                valid = true
                outcome = .object([
                    ("verdict", .text("valid")),
                    ("keyId", .text(result.key.keyID.base64EncodedString)),
                    ("counter", .number(Int64(result.counter))),
                    ("extensions", result.extensions.map { .cbor(.map($0.entries)) } ?? .null),
                ])
            } catch let error as AppAttestError {
                outcome = invalid(error)
            }
            print(common.json ? outcome.json() : outcome.render(), terminator: common.json ? "\n" : "")
            if !valid { throw ExitCode(1) }
        }
    }
}

private func invalid(_ error: AppAttestError) -> Report {
    .object([("verdict", .text("invalid")), ("error", .text(error.code.description)), ("reason", .text(error.reason))])
}

/// Parses `utf8:<text>`, `hex:<hex>` or Base64 (standard or URL-safe).
func byteOption(_ value: String, _ name: String) throws -> [UInt8] {
    if value.hasPrefix("utf8:") { return Array(value.dropFirst(5).utf8) }
    if value.hasPrefix("hex:") {
        let hex = Array(value.dropFirst(4).utf8)
        guard hex.count % 2 == 0 else { throw ValidationError("\(name): odd number of hex digits") }
        var bytes: [UInt8] = []
        for index in stride(from: 0, to: hex.count, by: 2) {
            guard let byte = UInt8(String(decoding: hex[index..<index + 2], as: UTF8.self), radix: 16) else {
                throw ValidationError("\(name): not hex")
            }
            bytes.append(byte)
        }
        return bytes
    }
    guard let bytes = decodeBase64(value) else { throw ValidationError("\(name): not Base64, hex: or utf8:") }
    return bytes
}

/// `.now`, or the instant an ISO 8601 option names.
func verificationTime(_ text: String?) throws -> AppAttestVerifier.VerificationTime {
    guard let text else { return .now }
    let formatter = ISO8601DateFormatter()
    if let date = formatter.date(from: text) { return .fixed(date) }
    formatter.formatOptions = [.withInternetDateTime, .withFractionalSeconds]
    if let date = formatter.date(from: text) { return .fixed(date) }
    throw ValidationError("--at is not an ISO 8601 instant")
}
