import AppAttestTesting
import AppAttestVectors
import ArgumentParser
import Foundation

/// `appattest vectors [run] FILE...` and `appattest vectors generate`.
struct VectorsCommand: ParsableCommand {
    static let configuration = CommandConfiguration(
        commandName: "vectors",
        abstract: "Run or generate test-vector files (TestVectors/README.md format).",
        subcommands: [RunVectors.self, GenerateVectors.self],
        defaultSubcommand: RunVectors.self
    )
}

/// `appattest vectors FILE...`: runs vector files through the library.
struct RunVectors: ParsableCommand {
    static let configuration = CommandConfiguration(
        commandName: "run",
        abstract: "Run test-vector files (TestVectors/README.md format) through the library.",
        discussion: """
            Prints one line per vector (id, expected, got), then `N passed, N failed`. Exits with status 1 when \
            any vector's outcome or reason differs from its expectation, or a file cannot be read.
            """
    )

    @Argument(help: "Vector files to run.")
    var files: [String]

    func run() throws {
        var passed = 0
        var failed = 0
        for path in files {
            let file: TestVectorFile
            do {
                file = try TestVectorFile(jsonData: try readInput(path, limit: TestVectorFile.maximumFileSize))
            } catch {
                print("FAIL \(Terminal.safe(path)): \(Terminal.safe("\(error)"))")
                failed += 1
                continue
            }
            for outcome in TestVectorRunner(file: file).run() {
                print(Terminal.safe(outcome.description))
                if outcome.passed { passed += 1 } else { failed += 1 }
            }
        }
        print("\(passed) passed, \(failed) failed")
        if failed > 0 { throw ExitCode(1) }
    }
}

/// `appattest vectors generate`: writes synthetic vectors from the simulated device and a new test authority.
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
