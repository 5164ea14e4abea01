import AppAttestCommandSupport
import ArgumentParser

/// The developer tools: what tests, benchmarks and demos need and operators do not (`appattest` is what operators
/// ship: no test authority, simulated device or stand-in for Apple's servers is linked into it).
private var subcommands: [any ParsableCommand.Type] {
    var commands: [any ParsableCommand.Type] = [BenchCommand.self, SimulateCommand.self, VectorsCommand.self]
    #if AppleServerAPI && Hummingbird
    commands.append(StandInCommand.self)
    #endif
    #if Service
    commands.append(LoadCommand.self)
    #endif
    return commands
}

@main
struct AppAttestDevCommand: AsyncParsableCommand {
    static let configuration = CommandConfiguration(
        commandName: "appattest-dev",
        abstract:
            "Developer tools for App Attest: simulated devices, a stand-in for Apple's servers, benchmarks, loads.",
        version: appAttestVersion,
        subcommands: subcommands
    )
}
