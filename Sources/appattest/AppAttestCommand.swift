import ArgumentParser

/// The package's version, printed by `appattest --version` (CHANGELOG.md lists what each version brought).
let appAttestVersion = "0.1.0"

/// The subcommands this build has: `vectors`, `inspect`, `verify`, `bench`, `receipt` and `simulate` need no trait;
/// the others come with the traits of their dependencies.
private var subcommands: [any ParsableCommand.Type] {
    var commands: [any ParsableCommand.Type] = [
        VectorsCommand.self, InspectCommand.self, VerifyCommand.self, BenchCommand.self, ReceiptCommand.self,
        SimulateCommand.self,
    ]
    #if AppleServerAPI
    commands.append(DeviceCheckCommand.self)
    #endif
    #if AppleServerAPI && Hummingbird
    commands.append(StandInCommand.self)
    #endif
    #if Service
    commands += [ServeCommand.self, LoadCommand.self]
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
