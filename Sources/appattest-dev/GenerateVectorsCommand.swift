import AppAttestCommandSupport
import AppAttestTesting
import AppAttestVectors
import ArgumentParser
import Foundation

/// `appattest-dev vectors generate`.
struct VectorsCommand: ParsableCommand {
    static let configuration = CommandConfiguration(
        commandName: "vectors",
        abstract: "Generate synthetic test-vector files (TestVectors/README.md format).",
        subcommands: [GenerateVectors.self]
    )
}

/// `appattest-dev vectors generate`: writes synthetic vectors from the simulated device and a new test authority.
struct GenerateVectors: ParsableCommand {
    static let configuration = CommandConfiguration(
        commandName: "generate",
        abstract: "Write synthetic vectors (every reason, attestations and assertions) from simulated devices."
    )

    @Option(name: .shortAndLong, help: "Where to write the file.")
    var output: String = "TestVectors/synthetic.json"

    func run() throws {
        let data = try SyntheticVectors.generate()
        // Check the file before writing it: every generated vector must have its stated outcome.
        let outcomes = TestVectorRunner(file: try TestVectorFile(jsonData: data)).run()
        let failures = outcomes.filter { !$0.passed }
        guard failures.isEmpty else {
            for failure in failures { print(Terminal.safe("\(failure)")) }
            throw ExitCode(1)
        }
        try data.write(to: URL(fileURLWithPath: output), options: .atomic)
        print("wrote \(outcomes.count) vectors to \(output)")
    }
}
