#if AppleServerAPI
import AppAttestCommandSupport
import AppAttest
import AppleDeviceAPI
import ArgumentParser
import Foundation

/// `appattest devicecheck query|update|validate`.
struct DeviceCheckCommand: AsyncParsableCommand {
    static let configuration = CommandConfiguration(
        commandName: "devicecheck",
        abstract: "Apple's DeviceCheck two bits: query, update, validate a device token.",
        subcommands: [Query.self, Update.self, Validate.self]
    )

    struct Query: AsyncParsableCommand {
        static let configuration = CommandConfiguration(abstract: "Read a device's two bits.")
        @OptionGroup var credentials: CredentialOptions
        @Option(name: .customLong("device-token"), help: "The Base64 token from DCDevice.generateToken.")
        var deviceToken: String
        @Flag(help: "Print JSON instead of text.") var json = false

        func run() async throws {
            try await runDeviceCheck(credentials, json: json) { client in
                switch try await client.queryTwoBits(deviceToken: deviceToken) {
                case .notSet: return [("state", .text("notSet"))]
                case .set(let bit0, let bit1, let month):
                    return [
                        ("state", .text("set")), ("bit0", .bool(bit0)), ("bit1", .bool(bit1)),
                        ("lastUpdate", .optional(month?.description)),
                    ]
                }
            }
        }
    }

    struct Update: AsyncParsableCommand {
        static let configuration = CommandConfiguration(abstract: "Set a device's two bits (both are sent).")
        @OptionGroup var credentials: CredentialOptions
        @Option(name: .customLong("device-token")) var deviceToken: String
        @Option var bit0: Bool
        @Option var bit1: Bool
        @Flag(help: "Print JSON instead of text.") var json = false

        func run() async throws {
            try await runDeviceCheck(credentials, json: json) { client in
                try await client.updateTwoBits(deviceToken: deviceToken, bit0: bit0, bit1: bit1)
                return [("updated", .bool(true))]
            }
        }
    }

    struct Validate: AsyncParsableCommand {
        static let configuration = CommandConfiguration(abstract: "Check that a device token is valid.")
        @OptionGroup var credentials: CredentialOptions
        @Option(name: .customLong("device-token")) var deviceToken: String
        @Flag(help: "Print JSON instead of text.") var json = false

        func run() async throws {
            try await runDeviceCheck(credentials, json: json) { client in
                try await client.validateDeviceToken(deviceToken)
                return [("valid", .bool(true))]
            }
        }
    }
}

private func runDeviceCheck(
    _ options: CredentialOptions, json: Bool, _ body: (DeviceCheckClient) async throws -> [(String, Report)]
) async throws {
    let client = DeviceCheckClient(
        tokens: ProviderTokenSource(credentials: try options.load()),
        environment: AppAttestEnvironment(rawValue: options.environment)!,
        endpoint: try options.baseURL.map { try AppleEndpoint(baseURL: $0) })
    let report: Report
    var failed = false
    do {
        report = .object(try await body(client))
    } catch let error as AppleAPIError {
        report = .object(appleErrorFields(error))
        failed = true
    }
    print(json ? report.json() : report.render(), terminator: json ? "\n" : "")
    if failed { throw ExitCode(1) }
}
#endif  // AppleServerAPI
