import ArgumentParser

@main
struct AppAttestCommand: ParsableCommand {
    static let configuration = CommandConfiguration(
        commandName: "appattest",
        abstract: "Verify and inspect Apple App Attest attestations and assertions.",
        subcommands: [VectorsCommand.self, InspectCommand.self, VerifyCommand.self, BenchCommand.self]
    )
}
