import AppAttestCommandSupport
import ArgumentParser

/// What operators ship: `vectors`, `inspect`, `verify` and `receipt` need no trait; `devicecheck` and `serve` come with
/// the traits of their dependencies. The developer tools (simulated devices, the stand-in for Apple's servers,
/// benchmarks and loads) are `appattest-dev`, so that no test double is linked into this binary.
private var subcommands: [any ParsableCommand.Type] {
    var commands: [any ParsableCommand.Type] = [
        VectorsCommand.self, InspectCommand.self, VerifyCommand.self, ReceiptCommand.self,
    ]
    #if AppleServerAPI
    commands.append(DeviceCheckCommand.self)
    #endif
    #if Service
    commands.append(ServeCommand.self)
    #endif
    return commands
}

@main
struct AppAttestCommand: AsyncParsableCommand {
    static let configuration = CommandConfiguration(
        commandName: "appattest",
        abstract: "Verify and inspect Apple App Attest attestations and assertions.",
        version: appAttestVersion,
        subcommands: subcommands
    )
}
