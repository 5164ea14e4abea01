import AppAttest
import AppAttestCommandSupport
import ArgumentParser
import Foundation

#if AppleServerAPI
import AppleDeviceAPI
#endif

#if AppleServerAPI
private let receiptSubcommands: [any ParsableCommand.Type] = [
    ReceiptCommand.Inspect.self, ReceiptCommand.Validate.self, ReceiptCommand.Refresh.self,
]
#else
private let receiptSubcommands: [any ParsableCommand.Type] = [
    ReceiptCommand.Inspect.self, ReceiptCommand.Validate.self,
]
#endif

/// `appattest receipt inspect|validate|refresh` (`refresh` with the AppleServerAPI trait).
struct ReceiptCommand: AsyncParsableCommand {
    static let configuration = CommandConfiguration(
        commandName: "receipt",
        abstract: "Inspect, validate and refresh App Attest receipts.",
        subcommands: receiptSubcommands
    )

    struct Inspect: ParsableCommand {
        static let configuration = CommandConfiguration(
            abstract: "Print a receipt's fields (binary or Base64; an attestation object's receipt is read too).")

        @Argument(help: "A receipt or an attestation object, or - for standard input.")
        var file: String = "-"

        @Flag(help: "Print JSON instead of text.")
        var json = false

        func run() throws {
            let bytes = try readReceiptOrAttestation(file)
            let report: Report
            do {
                report = .object(
                    InspectCommand.receiptFields(try AppAttestReceipt.inspect(bytes)) + [
                        (
                            "note",
                            .text(
                                "signature checked with the embedded signer; chain not validated (use receipt validate)"
                            )
                        )
                    ])
            } catch {
                let failure = Report.object([("error", .text(error.code.description)), ("reason", .text(error.reason))])
                print(json ? failure.json() : failure.render(), terminator: json ? "\n" : "")
                throw ExitCode(1)
            }
            print(json ? report.json() : report.render(), terminator: json ? "\n" : "")
        }
    }

    struct Validate: ParsableCommand {
        static let configuration = CommandConfiguration(
            abstract: "Validate a receipt: signature, chain to Apple Root CA - G3, App ID, key, type, environment, age."
        )

        @Argument(help: "A receipt or an attestation object, or - for standard input.")
        var file: String = "-"

        @Option(name: .customLong("app-id")) var appID: String
        @Option(
            name: .customLong("public-key"),
            help: "The attested key (65-byte point); taken from the attestation when one is given.")
        var publicKey: String?
        @Option(help: "ATTEST or RECEIPT.") var type: String?
        @Option(help: "development or production.") var environment: String?
        @Option(help: "Verification time, ISO 8601 (default: now).") var at: String?
        @Flag(help: "Apply the five-minute creation rule (for a receipt just received).") var fresh = false
        @Flag(help: "Print JSON instead of text.") var json = false

        func run() throws {
            let input = try readObject(file, limit: 256 * 1024, binaryFirstBytes: [0x30] + Array(0xA0...0xBF))
            var receipt = input
            var point: [UInt8]?
            if let object = try? AttestationObject(cborEncoded: input) {
                receipt = object.receipt
                point = try? CertificateSummary(derEncoded: object.certificateChain[0]).publicKey.flatMap(hexBytes)
            }
            if let publicKey { point = try byteOption(publicKey, "--public-key") }
            guard let point else { throw ValidationError("give --public-key, or an attestation object") }
            let outcome: Report
            var valid = false
            do {
                let validator = try AppAttestReceiptValidator(
                    configuration: .init(verificationTime: try verificationTime(at)))
                let expectation = AppAttestReceiptValidator.Expectation(
                    appID: try AppID(appID), publicKey: try AttestedPublicKey(x963Representation: point),
                    type: type.map { AppAttestReceipt.ReceiptType.init(parsing: $0) },
                    environment: environment.flatMap(AppAttestEnvironment.init(rawValue:)), freshlyReceived: fresh)
                let result = try validator.validate(receipt, expecting: expectation)
                valid = true
                outcome = .object([("verdict", .text("valid"))] + InspectCommand.receiptFields(result))
            } catch let error as AppAttestError {
                outcome = .object([
                    ("verdict", .text("invalid")), ("error", .text(error.code.description)),
                    ("reason", .text(error.reason)),
                ])
            }
            print(json ? outcome.json() : outcome.render(), terminator: json ? "\n" : "")
            if !valid { throw ExitCode(1) }
        }
    }

    #if AppleServerAPI
    struct Refresh: AsyncParsableCommand {
        static let configuration = CommandConfiguration(
            abstract: "Exchange a receipt for a fresh one with Apple's data endpoint (or --base-url).")

        @Argument(help: "The stored receipt (binary or Base64), or - for standard input.")
        var file: String = "-"
        @OptionGroup var credentials: CredentialOptions
        @Option(name: .customLong("app-id")) var appID: String
        @Option(name: .customLong("public-key"), help: "The attested key (65-byte point).") var publicKey: String
        @Flag(help: "Send `Authorization: Bearer <token>` instead of the bare token.") var bearer = false
        @Option(
            name: .customLong("receipt-root"),
            help: "For tests only: a DER root to validate the new receipt with instead of Apple Root CA - G3.")
        var receiptRoot: String?
        @Flag(help: "Print JSON instead of text.") var json = false

        func run() async throws {
            let receipt = try readReceiptOrAttestation(file)
            var anchor = TrustAnchor.appleRootCAG3
            if let receiptRoot {
                anchor = .customRootForTesting(derRepresentation: Array(try readInput(receiptRoot, limit: 16 * 1024)))
            }
            let environment = AppAttestEnvironment(rawValue: credentials.environment)!
            let client = ReceiptRefreshClient(
                tokens: ProviderTokenSource(credentials: try credentials.load()), environment: environment,
                endpoint: try credentials.baseURL.map { try AppleEndpoint(baseURL: $0) },
                validator: try AppAttestReceiptValidator(configuration: .init(trustAnchor: anchor)),
                authorizationStyle: bearer ? .bearer : .bareToken)
            let report: Report
            do {
                switch try await client.refresh(
                    receipt, appID: try AppID(appID),
                    publicKey: try AttestedPublicKey(x963Representation: try byteOption(publicKey, "--public-key")))
                {
                case .refreshed(let new):
                    report = .object(
                        [
                            ("outcome", .text("refreshed")),
                            ("receipt", .text(Data(new.rawRepresentation).base64EncodedString())),
                        ]
                            + InspectCommand.receiptFields(new))
                case .notModified:
                    report = .object([("outcome", .text("notModified")), ("advice", .text("keep the current receipt"))])
                case .noData:
                    report = .object([("outcome", .text("noData")), ("advice", .text("keep the last good receipt"))])
                }
            } catch let error as AppleAPIError {
                let failure = Report.object(appleErrorFields(error))
                print(json ? failure.json() : failure.render(), terminator: json ? "\n" : "")
                throw ExitCode(1)
            }
            print(json ? report.json() : report.render(), terminator: json ? "\n" : "")
        }
    }
    #endif  // AppleServerAPI
}

#if AppleServerAPI
/// `--key`, `--key-id`, `--team-id`, `--environment`, `--base-url` for Apple's server APIs.
struct CredentialOptions: ParsableArguments {
    @Option(help: "The .p8 key file (DeviceCheck capability).") var key: String
    @Option(name: .customLong("key-id"), help: "The key's 10-character Key ID.") var keyID: String
    @Option(name: .customLong("team-id"), help: "The 10-character Team ID.") var teamID: String
    @Option(help: "development or production (no fallback from one to the other).") var environment: String =
        "production"
    @Option(name: .customLong("base-url"), help: "Another base URL (a stand-in server) instead of Apple's host.")
    var baseURL: String?

    func validate() throws {
        guard ["development", "production"].contains(environment) else {
            throw ValidationError("--environment is development or production")
        }
    }

    func load() throws -> ProviderCredentials {
        let pem = String(decoding: try readInput(key, limit: 16 * 1024), as: UTF8.self)
        return try ProviderCredentials(teamID: teamID, keyID: keyID, p8: pem)
    }
}

func appleErrorFields(_ error: AppleAPIError) -> [(String, Report)] {
    [
        ("error", .text(error.code.description)), ("fault", .text(error.fault.rawValue)),
        ("status", error.status.map { .number(Int64($0)) } ?? .null), ("host", .optional(error.host)),
        ("message", .text(error.message)),
    ]
}
#endif  // AppleServerAPI

func hexBytes(_ hex: String) -> [UInt8]? {
    let digits = Array(hex.utf8)
    guard digits.count % 2 == 0 else { return nil }
    return stride(from: 0, to: digits.count, by: 2).compactMap {
        UInt8(String(decoding: digits[$0..<$0 + 2], as: UTF8.self), radix: 16)
    }
}

/// A receipt (DER/BER) or an attestation object (CBOR) whose receipt is taken.
func readReceiptOrAttestation(_ path: String) throws -> [UInt8] {
    let bytes = try readObject(path, limit: 256 * 1024, binaryFirstBytes: [0x30] + Array(0xA0...0xBF))
    if let object = try? AttestationObject(cborEncoded: bytes) { return object.receipt }
    return bytes
}

extension AppAttestReceipt.ReceiptType {
    init(parsing text: String) {
        switch text.uppercased() {
        case "ATTEST": self = .attest
        case "RECEIPT": self = .receipt
        default: self = .other(text)
        }
    }
}
