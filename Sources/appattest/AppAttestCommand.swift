import ArgumentParser

@main
struct AppAttestCommand: AsyncParsableCommand {
    static let configuration = CommandConfiguration(
        commandName: "appattest",
        abstract: "Verify and inspect Apple App Attest attestations and assertions.",
        subcommands: [
            VectorsCommand.self, InspectCommand.self, VerifyCommand.self, BenchCommand.self, ReceiptCommand.self,
            DeviceCheckCommand.self, StandInCommand.self, ServeCommand.self, SimulateCommand.self, LoadCommand.self,
        ]
    )
}
